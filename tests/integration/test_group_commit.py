"""Group commit: a decision is committed and published at once, not at the commit interval;
and a backlog's first decisions are not held back behind a long poll."""

from __future__ import annotations

import asyncio
import json
import time

from conftest import run_prefix, send_json
from kafka import KafkaProducer

from banditflow.streams.scrape import value
from banditflow.streams.statelog_kafka import read_commits
from banditflow.streams.topics import partition_for, state_topic

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


def test_a_backlogs_first_commit_does_not_wait_for_a_full_poll(
    broker, start_worker, producer: KafkaProducer, wait_until
) -> None:
    """A worker started on a backlog commits its first decisions after some polls of
    POLL_RECORDS (streams/worker.py), not after a poll of --max-batch records: a poll is
    handled without a turn of the event loop, and the commit loop needs a few turns to cut
    the commit its interval calls for."""
    prefix, lid, backlog, partitions = run_prefix("backlog"), "bl", 6000, 2
    worker = start_worker(prefix, partitions=partitions)
    send_json(producer, worker.topics.learners, lid, {
        "learner_id": lid, "family": "conformal", "algorithm": "sps",
        "params": {"alpha": 0.9, "horizon": 100_000},
    })
    wait_until(lambda: value(worker.metrics(), "banditflow_records_total",
                             topic=worker.topics.learners, outcome="created") == 1)
    worker.stop()
    for i in range(backlog):  # all there before the worker starts again: a backlog
        producer.send(worker.topics.contexts, key=lid.encode(), value=json.dumps({
            "learner_id": lid, "event_id": f"e{i}", "labels": ["a", "b"],
            "scores": [0.9, 0.1],
        }).encode())
    producer.flush()
    # --max-batch 4000, not the default 2,000: a commit is wanted anyway once --max-batch
    # events wait, and the interval's cut (30 ms) came as late as 2,100 decisions in (5 of 12
    # runs at 1,900-2,100, 2026-11-29, with either producer), so at 2,000 the check below
    # told the interval's cut from --max-batch's only by timing.
    worker = start_worker(prefix, partitions=partitions, extra_args=["--max-batch", "4000"])
    wait_until(lambda: value(worker.metrics(), "banditflow_learner_decisions",
                             learner_id=lid) == backlog, 120)
    commits = asyncio.run(read_commits(broker.connection, state_topic(prefix)))
    sizes = [len(commit.outbox) for _, commit in commits[partition_for(lid, partitions)]
             if commit.outbox]
    assert sum(sizes) == backlog
    # With polls of --max-batch the first commit held a whole poll or more (4,000 decisions
    # or the whole backlog). With polls of 100 the interval (30 ms) cuts it some polls in:
    # 500 to 2,100 decisions in 12 runs here (the commit loop needs several turns to wake,
    # each a poll).
    assert sizes[0] < 4000, sizes[:10]
