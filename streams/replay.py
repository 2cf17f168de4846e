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

Without ``faithful``, a worker interleaves the replayed contexts and feedback as it reads
them, which may differ from the live run: a learner may decide a context before or after a
feedback it saw the other way round live, and decide differently from then on. With
``faithful``, the replay keeps the live order (:mod:`offline.faithful`): contexts carry
``after_updates``, each feedback waits for the replay's decisions that preceded it live
(read from ``<prefix>.decisions``), and at the end every replayed decision is compared with
the live one.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from offline.archive import read_archive
from offline.faithful import FaithfulError, FaithfulPlan, Key, faithful_plan

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
    faithful: bool = False
    # faithful: how long to wait for the replay's next decision before giving up on it
    decision_wait_s: float = 60.0

    def __post_init__(self) -> None:
        if self.faithful and self.start is not None:
            raise FaithfulError("--faithful replays a learner from its start: it takes no "
                                "--start")


@dataclass
class FaithfulCheck:
    """How the decisions of a faithful replay compare with the live ones."""

    decisions: int = 0
    reproduced: int = 0
    missing: list[Key] = field(default_factory=list)
    differ: list[tuple[Key, Any, Any]] = field(default_factory=list)  # (key, live, replay)
    unsent: int = 0  # feedback records whose preceding decisions never came

    @property
    def ok(self) -> bool:
        return self.reproduced == self.decisions

    def render(self) -> str:
        text = f"faithful: {self.reproduced:,} of {self.decisions:,} decisions reproduced"
        if self.differ:
            (lid, eid), live, replayed = self.differ[0]
            text += (f"; {len(self.differ):,} differ (the first: {lid}/{eid}, live "
                     f"{orjson.dumps(live).decode()}, replayed {orjson.dumps(replayed).decode()})")
        if self.missing:
            lid, eid = self.missing[0]
            text += f"; {len(self.missing):,} not decided in the replay (the first: {lid}/{eid})"
        if self.unsent:
            text += (f"; {self.unsent:,} feedback records not sent (the decisions they came "
                     "after live never came)")
        return text


@dataclass
class ReplaySummary:
    produced: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    faithful: FaithfulCheck | None = None

    def render(self) -> str:
        total = sum(self.produced.values())
        topics = ", ".join(f"{self.produced[t]:,} {t}" for t in REPLAYED_TOPICS
                           if self.produced[t])
        text = f"replayed {total:,} records ({topics}) in {self.seconds:.1f} s"
        return text if self.faithful is None else f"{text}\n{self.faithful.render()}"


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
    """The records a replay produces (replayed topics, the learner, the time window), and
    for a faithful one the live decisions and dead letters among them."""
    topics = (*REPLAYED_TOPICS, "decisions", "deadletter") if settings.faithful \
        else REPLAYED_TOPICS
    chosen = []
    for record in records:
        if record["topic"] not in topics:
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


class ReplayedDecisions:
    """The decisions the replay's workers publish (``<prefix>.decisions``, read from its
    start without a consumer group), and how far each learner's live order has come."""

    def __init__(self, settings: ReplaySettings, plan: FaithfulPlan) -> None:
        self.plan = plan
        self.seen: dict[Key, Any] = {}
        self.decided: dict[str, int] = dict.fromkeys(plan.order, 0)  # first decisions out
        self.consumer = KafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=None,
                                      enable_auto_commit=False)
        topic = f"{settings.prefix}.decisions"
        partitions = self.consumer.partitions_for_topic(topic)
        if not partitions:
            raise FaithfulError(f"no topic {topic!r}: start the workers of prefix "
                                f"{settings.prefix!r} first")
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        self.consumer.assign(assigned)
        self.consumer.seek_to_beginning(*assigned)

    def poll(self, timeout_ms: int) -> bool:
        """Read what was published; whether anything came."""
        batches = self.consumer.poll(timeout_ms=timeout_ms)
        for records in batches.values():
            for record in records:
                try:
                    value = orjson.loads(record.value)
                    key = (str(value["learner_id"]), str(value["event_id"]))
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue
                self.seen.setdefault(key, value.get("output"))  # (a re-emission: the same)
        for lid, order in self.plan.order.items():
            done = self.decided[lid]
            while done < len(order) and (lid, order[done]) in self.seen:
                done += 1
            self.decided[lid] = done
        return bool(batches)

    def check(self, produced: set[Key]) -> FaithfulCheck:
        check = FaithfulCheck()
        for key, live in self.plan.live.items():
            if key not in produced:
                continue
            check.decisions += 1
            if key not in self.seen:
                check.missing.append(key)
            elif self.seen[key] != live:
                check.differ.append((key, live, self.seen[key]))
            else:
                check.reproduced += 1
        return check

    def close(self) -> None:
        self.consumer.close()


def run_replay(settings: ReplaySettings,
               progress: Callable[[int, int], None] | None = None) -> ReplaySummary:
    """Produce the selected records of the archive (see the module docstring)."""
    records = selected(read_archive(settings.path)[1], settings)
    plan = faithful_plan(records) if settings.faithful else None
    summary = ReplaySummary()
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", linger_ms=5)
    replayed = ReplayedDecisions(settings, plan) if plan is not None else None
    waiting: deque[tuple[int, str, int]] = deque()  # gated feedback: (index, learner, gate)
    produced: set[Key] = set()
    started = time.monotonic()
    first: float | None = None

    def send(record: Mapping[str, Any]) -> None:
        key = record.get("key")
        value = _value_bytes(record)
        if plan is not None and record["topic"] == "contexts" and value is not None:
            event = record["value"]
            event_key = (str(event.get("learner_id")), str(event.get("event_id")))
            if event_key in plan.after_updates:
                value = orjson.dumps({**event, "after_updates": plan.after_updates[event_key]})
                produced.add(event_key)
        producer.send(f"{settings.prefix}.{record['topic']}",
                      key=key.encode() if key is not None else None, value=value)
        summary.produced[record["topic"]] += 1

    def release() -> None:
        """Send the gated feedback whose preceding decisions are out (in order)."""
        assert replayed is not None
        while waiting and replayed.decided[waiting[0][1]] >= waiting[0][2]:
            send(records[waiting.popleft()[0]])

    try:
        for done, record in enumerate(records, start=1):
            ts = _timestamp(record)
            if settings.speed > 0 and ts is not None:
                first = ts if first is None else first
                wait = (ts - first) / settings.speed - (time.monotonic() - started)
                if wait > 0:
                    producer.flush()
                    time.sleep(wait)
            if record["topic"] not in REPLAYED_TOPICS:
                continue  # (live decisions and dead letters: what a faithful replay reads)
            gate = plan.feedback_gates.get(done - 1) if plan is not None else None
            if gate is not None or (waiting and record["topic"] == "feedback"):
                # (one queue keeps the feedback in its order; a learner's gates only grow)
                lid, least = gate if gate is not None else (waiting[-1][1], waiting[-1][2])
                waiting.append((done - 1, lid, least))
                if replayed is not None and done % 200 == 0:
                    replayed.poll(0)
                    release()
            else:
                send(record)
            if progress is not None and (done % 500 == 0 or done == len(records)):
                progress(done, len(records))
        producer.flush()
        if replayed is not None:
            summary.faithful = _finish(settings, replayed, release, waiting, producer, produced)
    finally:
        producer.close()
        if replayed is not None:
            replayed.close()
    summary.seconds = time.monotonic() - started
    return summary


def _finish(settings: ReplaySettings, replayed: ReplayedDecisions, release: Callable[[], None],
            waiting: deque[tuple[int, str, int]], producer: KafkaProducer,
            produced: set[Key]) -> FaithfulCheck:
    """Send the gated feedback as the replay's decisions come, then compare them."""
    last_news = time.monotonic()
    while time.monotonic() - last_news < settings.decision_wait_s:
        if replayed.poll(200):
            last_news = time.monotonic()
        before = len(waiting)
        release()
        producer.flush()
        if len(waiting) < before:
            last_news = time.monotonic()
        if not waiting and all(key in replayed.seen for key in produced):
            break
    check = replayed.check(produced)
    check.unsent = len(waiting)
    return check
