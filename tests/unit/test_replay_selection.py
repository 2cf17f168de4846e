"""What ``banditflow replay`` produces from an archive: the input topics only (decisions are
the workers' output), in archive order, filtered by learner and by time window."""

from __future__ import annotations

from pathlib import Path

from banditflow.streams.connection import KafkaConnection
from banditflow.streams.replay import ReplaySettings, selected


def record(topic: str, learner: str, ts: float | None, value: bool = True) -> dict:
    return {"topic": topic, "partition": 0, "offset": 0, "timestamp": ts, "key": learner,
            "value": {"learner_id": learner, "event_id": "e"} if value else None}


RECORDS = [
    record("learners", "a", 1.0), record("contexts", "a", 2.0), record("decisions", "a", 2.5),
    record("contexts", "b", 3.0), record("feedback", "a", 4.0), record("truth", "a", 5.0),
    record("learners", "b", 6.0, value=False),  # a tombstone: its learner is its key
]


def settings(**changes: object) -> ReplaySettings:
    return ReplaySettings(KafkaConnection("127.0.0.1:9092"), "p", Path("x"), **changes)


def test_inputs_in_archive_order() -> None:
    chosen = selected(RECORDS, settings())
    assert [(r["topic"], r["key"]) for r in chosen] == [
        ("learners", "a"), ("contexts", "a"), ("contexts", "b"), ("feedback", "a"),
        ("truth", "a"), ("learners", "b")]


def test_learner_and_window() -> None:
    assert [r["topic"] for r in selected(RECORDS, settings(learner_id="b"))] == [
        "contexts", "learners"]
    window = selected(RECORDS, settings(start=2.0, end=4.0))
    assert [r["timestamp"] for r in window] == [2.0, 3.0, 4.0]
