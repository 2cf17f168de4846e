"""Group commit: a decision is committed and published at once, not at the commit interval."""

from __future__ import annotations

import time

from conftest import run_prefix, send_json
from kafka import KafkaProducer

INTERVAL_S = 30.0  # far longer than any wait below: only a commit started at once fits


def test_decisions_are_committed_at_once_not_at_the_interval(
    start_worker, producer: KafkaProducer, read_topic
) -> None:
    worker = start_worker(run_prefix("gcommit"), partitions=1,
                          extra_args=["--commit-interval-ms", str(INTERVAL_S * 1000)])
    topics, lid = worker.topics, "g"
    send_json(producer, topics.learners, lid, {
        "learner_id": lid, "family": "conformal", "algorithm": "sps",
        "params": {"alpha": 0.9, "horizon": 1000},
    })
    producer.flush()
    decisions = read_topic(topics.decisions)
    started = time.monotonic()
    for i in range(3):  # one after the other: each committed before the next is sent
        send_json(producer, topics.contexts, lid, {
            "learner_id": lid, "event_id": f"e{i}", "labels": ["a", "b"], "scores": [0.9, 0.1],
        })
        producer.flush()
        decisions.wait_for(lambda records, n=i + 1: len(records) >= n, 20)
    assert time.monotonic() - started < INTERVAL_S / 2
    assert [d["event_id"] for d in decisions.poll()] == ["e0", "e1", "e2"]
