"""Learner gauges follow their partition: when a second worker joins and takes half of the
partitions, the first stops exporting the learners it no longer owns, and the second exports
them at once from the state it recovered (before any of them learns again)."""

from __future__ import annotations

import ast
import json

import pytest
from conftest import Worker, run_prefix
from kafka import KafkaProducer

from banditflow.streams.scrape import samples, value
from banditflow.streams.topics import partition_for

pytestmark = pytest.mark.integration

PREFIX = run_prefix("handover")
PARTITIONS = 4
LEARNERS = [f"ho-{i}" for i in range(8)]


def owned(worker: Worker) -> set[int]:
    """The partitions in the worker's /ready text ("ready: partitions [0, 1]")."""
    text = worker.ready() or ""
    return set(ast.literal_eval(text.split("partitions", 1)[1].strip())) if "ready" in text \
        else set()


def decisions(worker: Worker, learner_id: str) -> float | None:
    return value(worker.metrics(), "banditflow_learner_decisions", learner_id=learner_id)


def test_gauges_move_with_their_partitions(
    broker, start_worker, producer: KafkaProducer, wait_until
) -> None:
    first = start_worker(PREFIX, partitions=PARTITIONS)
    topics = first.topics
    for lid in LEARNERS:
        producer.send(topics.learners, key=lid.encode(), value=json.dumps(
            {"learner_id": lid, "family": "conformal", "algorithm": "sps",
             "params": {"alpha": 0.8, "horizon": 1000}}).encode())
        producer.send(topics.contexts, key=lid.encode(), value=json.dumps(
            {"learner_id": lid, "event_id": "e0", "labels": ["a", "b"],
             "scores": [0.7, 0.3]}).encode())
    producer.flush()
    wait_until(lambda: all(decisions(first, lid) == 1 for lid in LEARNERS))
    spread = {partition_for(lid, PARTITIONS) for lid in LEARNERS}
    assert len(spread) > 1  # (the learners live on several partitions)

    second = start_worker(PREFIX, partitions=PARTITIONS)
    wait_until(lambda: len(owned(first)) == len(owned(second)) == PARTITIONS // 2,
               timeout_s=30)
    mine = owned(first)

    def exported_where_owned() -> bool:
        for lid in LEARNERS:
            at_first, at_second = decisions(first, lid), decisions(second, lid)
            expected = (1, None) if partition_for(lid, PARTITIONS) in mine else (None, 1)
            if (at_first, at_second) != expected:
                return False
        return True

    wait_until(exported_where_owned, timeout_s=30)

    def partitions_exported(worker: Worker) -> set[int]:
        """The partitions of the worker's per-partition state series (issue 28: the former
        owner kept exporting a moved partition's pending decisions)."""
        return {int(dict(labels)["partition"])
                for (name, labels), _ in samples(worker.metrics()).items()
                if name in ("banditflow_pending_decisions", "banditflow_state_keys")}

    assert partitions_exported(first) <= mine
    assert partitions_exported(second) <= set(range(PARTITIONS)) - mine
