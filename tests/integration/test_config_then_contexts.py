"""A learner's config and the contexts sent after it, fetched together, are applied in the
order they were sent (streams/record_order.py): every context is decided by the version of
the learner in force when it was sent. Applied topic by topic, a reconfiguration's first
contexts were decided by the old version (a flaky CI run of test_replay_report showed 20)."""

from __future__ import annotations

import time

import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.streams.topics import Topics, ensure_topics

pytestmark = pytest.mark.integration


def test_contexts_fetched_with_a_reconfiguration_meet_the_version_they_were_sent_to(
    broker, start_worker, read_topic
) -> None:
    prefix, lid, per_version = run_prefix("recordorder"), "reordered", 10
    topics = Topics(prefix)
    ensure_topics(broker.connection, topics, 1, prefix)
    producer = KafkaProducer(**broker.connection.kafka_python_kwargs(), acks="all")
    stamp = int(time.time() * 1000)

    def send(topic: str, value: bytes) -> None:
        nonlocal stamp
        stamp += 1
        producer.send(topic, key=lid.encode(), value=value, timestamp_ms=stamp).get(timeout=10)

    # Written before any worker runs, so that the worker's first fetch brings them all.
    for version, algorithm in enumerate(("epsilon_greedy", "squarecb_g"), start=1):
        send(topics.learners, (f'{{"learner_id":"{lid}","family":"graph_cb","algorithm":'
                               f'"{algorithm}","params":{{"actions":3,"feature_dim":2,'
                               f'"graph_kind":"bandit"}}}}').encode())
        for i in range(per_version):
            send(topics.contexts, (f'{{"learner_id":"{lid}","event_id":"v{version}-{i}",'
                                   f'"features":[0.5,{i / 10}]}}').encode())
    producer.close()

    start_worker(prefix, partitions=1)
    decisions = read_topic(topics.decisions).wait_for(lambda seen: len(seen) >= 2 * per_version)
    assert {d["event_id"]: d["learner_version"] for d in decisions} == {
        f"v{version}-{i}": version for version in (1, 2) for i in range(per_version)}
    assert read_topic(topics.deadletter).poll() == []
