"""``banditflow replay``: produce an archive's inputs into the topics of a prefix.

The learners, contexts, feedback and truth records of an archive (:mod:`schemas.archive`;
decisions are the workers' output, not replayed) go to ``<prefix>.<topic>`` with their keys
and values, in the archive's order (which keeps each partition's order), so a learner's
records land on the same partition of topics with the same partition count. ``speed`` 0
produces as fast as the broker takes them; ``speed`` s > 0 keeps the recorded pace, s times
faster, by the records' Kafka timestamps. The records get the time they are produced as
their timestamps: the worker judges feedback deadlines on stream time, so a fast replay
compresses the delays between a decision and its feedback, and a decision that timed out
live may now get its feedback in time.

Replaying a file twice changes nothing the second time as long as the workers still hold
the decisions (``--retention``): a context seen before re-emits its decision, feedback seen
before is ignored, and a config equal to the current one only updates its timeouts.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaProducer

from offline.archive import read_archive

REPLAYED_TOPICS = ("learners", "contexts", "feedback", "truth")


@dataclass(frozen=True)
class ReplaySettings:
    bootstrap: str
    prefix: str
    path: Path
    speed: float = 0.0
    start: float | None = None
    end: float | None = None
    learner_id: str | None = None


@dataclass
class ReplaySummary:
    produced: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def render(self) -> str:
        total = sum(self.produced.values())
        topics = ", ".join(f"{self.produced[t]:,} {t}" for t in REPLAYED_TOPICS
                           if self.produced[t])
        return f"replayed {total:,} records ({topics}) in {self.seconds:.1f} s"


def _timestamp(record: Mapping[str, Any]) -> float | None:
    if record.get("timestamp") is not None:
        return float(record["timestamp"])
    value = record.get("value")
    ts = value.get("ts") if isinstance(value, Mapping) else None
    return float(ts) if isinstance(ts, int | float) else None


def _learner(record: Mapping[str, Any]) -> str | None:
    value = record.get("value")
    if isinstance(value, Mapping) and value.get("learner_id") is not None:
        return str(value["learner_id"])
    return record.get("key")


def selected(records: list[dict[str, Any]], settings: ReplaySettings) -> list[dict[str, Any]]:
    """The records a replay produces: replayed topics, the learner, the time window."""
    chosen = []
    for record in records:
        if record["topic"] not in REPLAYED_TOPICS:
            continue
        if settings.learner_id is not None and _learner(record) != settings.learner_id:
            continue
        ts = _timestamp(record)
        if ts is not None and ((settings.start is not None and ts < settings.start)
                               or (settings.end is not None and ts > settings.end)):
            continue
        chosen.append(record)
    return chosen


def _value_bytes(record: Mapping[str, Any]) -> bytes | None:
    if record.get("value") is not None:
        return orjson.dumps(record["value"])
    if record.get("raw") is not None:
        return str(record["raw"]).encode()
    return None  # a tombstone


def run_replay(settings: ReplaySettings,
               progress: Callable[[int, int], None] | None = None) -> ReplaySummary:
    """Produce the selected records of the archive (see the module docstring)."""
    records = selected(read_archive(settings.path)[1], settings)
    summary = ReplaySummary()
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", linger_ms=5)
    started = time.monotonic()
    first: float | None = None
    try:
        for done, record in enumerate(records, start=1):
            ts = _timestamp(record)
            if settings.speed > 0 and ts is not None:
                first = ts if first is None else first
                wait = (ts - first) / settings.speed - (time.monotonic() - started)
                if wait > 0:
                    producer.flush()
                    time.sleep(wait)
            key = record.get("key")
            producer.send(f"{settings.prefix}.{record['topic']}",
                          key=key.encode() if key is not None else None,
                          value=_value_bytes(record))
            summary.produced[record["topic"]] += 1
            if progress is not None and (done % 500 == 0 or done == len(records)):
                progress(done, len(records))
        producer.flush()
    finally:
        producer.close()
    summary.seconds = time.monotonic() - started
    return summary
