"""``banditflow replay``: produce an archive's inputs into the topics of a prefix.

The learners, contexts, feedback and truth records of an archive (:mod:`banditflow.schemas.archive`;
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
``faithful``, the replay keeps each learner's live order (:mod:`banditflow.offline.faithful`): it
sends
a learner's contexts and feedback in that order, contexts with ``after_updates``, each
feedback once the replay's workers have published (on ``<prefix>.decisions``) the decisions
made before it live; truth and contexts sent again follow their decision. At the end every
replayed decision is compared with the live one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from banditflow.offline.archive import (
    ArchiveError,
    read_archive,
    record_learner,
    select_version,
)
from banditflow.offline.faithful import FaithfulError, FaithfulPlan, Key, Step, faithful_plan
from banditflow.streams.connection import KafkaConnection

REPLAYED_TOPICS = ("learners", "contexts", "feedback", "truth")


@dataclass(frozen=True)
class ReplaySettings:
    kafka: KafkaConnection
    prefix: str
    path: Path
    speed: float = 0.0
    start: float | None = None
    end: float | None = None
    learner_id: str | None = None
    faithful: bool = False
    # faithful: give up when no decision came for this long
    decision_wait_s: float = 60.0
    # with learner_id: its version to replay (None: the latest)
    learner_version: int | None = None
    # count the dead letters of replayed records until none and no decision came for this long
    dead_letter_wait_s: float = 3.0

    def __post_init__(self) -> None:
        if self.faithful and (self.start, self.end, self.speed) != (None, None, 0.0):
            raise FaithfulError("--faithful replays whole learners as fast as their order "
                                "allows: it takes no --start, --end or --speed")
        if self.learner_version is not None and self.learner_id is None:
            raise ArchiveError("--learner-version selects a version of the --learner-id learner")


@dataclass
class FaithfulCheck:
    """How the decisions of a faithful replay compare with the live ones."""

    decisions: int = 0
    reproduced: int = 0
    missing: list[Key] = field(default_factory=list)
    differ: list[tuple[Key, Any, Any]] = field(default_factory=list)  # (key, live, replay)
    unsent: int = 0  # steps not sent: the decisions they came after never came
    skipped: int = 0  # feedback dead-lettered live (or of no decision): not replayed

    @property
    def ok(self) -> bool:
        return self.decisions > 0 and self.reproduced == self.decisions and not self.unsent

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
            text += (f"; {self.unsent:,} records not sent (the decisions they came after live "
                     "never came)")
        if self.skipped:
            text += f"; {self.skipped:,} feedback records dead-lettered live not replayed"
        return text


@dataclass
class ReplaySummary:
    produced: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    faithful: FaithfulCheck | None = None
    selection: str | None = None  # which learner version, what was left out
    # (replayed topic, reason) -> dead letters of replayed records; None: not watched
    dead_letters: Counter[tuple[str, str]] | None = None
    dead_letter_wait_s: float = 0.0

    def render(self) -> str:
        total = sum(self.produced.values())
        topics = ", ".join(f"{self.produced[t]:,} {t}" for t in REPLAYED_TOPICS
                           if self.produced[t])
        lines = [] if self.selection is None else [self.selection]
        lines.append(f"replayed {total:,} records ({topics}) in {self.seconds:.1f} s")
        if self.dead_letters is not None:
            lines.append(self.render_dead_letters())
        if self.faithful is not None:
            lines.append(self.faithful.render())
        return "\n".join(lines)

    def render_dead_letters(self) -> str:
        watched = (f"(watched until {self.dead_letter_wait_s:g} s passed without a decision or "
                   "dead letter of them)")
        if not self.dead_letters:
            return f"the workers dead-lettered none of the replayed records {watched}"
        counts = ", ".join(f"{n:,} {topic} {reason}" for (topic, reason), n
                           in sorted(self.dead_letters.items(), key=lambda item: -item[1]))
        return (f"the workers dead-lettered {sum(self.dead_letters.values()):,} of the replayed "
                f"records: {counts} {watched}")


def _timestamp(record: Mapping[str, Any]) -> float | None:
    if record.get("timestamp") is not None:
        return float(record["timestamp"])
    value = record.get("value")
    ts = value.get("ts") if isinstance(value, Mapping) else None
    return float(ts) if isinstance(ts, int | float) else None


def selected(records: list[dict[str, Any]], settings: ReplaySettings) -> list[dict[str, Any]]:
    """The records a replay produces: replayed topics, the learner, the time window."""
    chosen = []
    for record in records:
        if record["topic"] not in REPLAYED_TOPICS:
            continue
        if settings.learner_id is not None and record_learner(record) != settings.learner_id:
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


class Replayer:
    """Produces records into the topics of a prefix and counts them."""

    def __init__(self, settings: ReplaySettings) -> None:
        self.prefix = settings.prefix
        self.producer = KafkaProducer(**settings.kafka.kafka_python_kwargs(), acks="all",
                                      linger_ms=5)
        self.produced: Counter[str] = Counter()
        self.sent: list[Any] = []  # the send futures: where each record landed
        self.events: set[tuple[str, str]] = set()  # (learner id, event id) of the contexts

    def send(self, record: Mapping[str, Any], value: bytes | None = None) -> None:
        key = record.get("key")
        self.sent.append(self.producer.send(
            f"{self.prefix}.{record['topic']}", key=key.encode() if key is not None else None,
            value=value if value is not None else _value_bytes(record)))
        self.produced[record["topic"]] += 1
        event = record.get("value")
        if record["topic"] == "contexts" and isinstance(event, Mapping):
            self.events.add((str(event.get("learner_id")), str(event.get("event_id"))))

    def landed(self) -> set[tuple[str, int, int]]:
        """(topic, partition, offset) of every record sent (after a flush)."""
        return {(m.topic, m.partition, m.offset) for m in (f.get() for f in self.sent)}

    def close(self) -> None:
        self.producer.close()


def run_replay(settings: ReplaySettings,
               progress: Callable[[int, int], None] | None = None) -> ReplaySummary:
    """Produce the selected records of the archive (see the module docstring)."""
    header, records = read_archive(settings.path)
    selection = None
    if settings.learner_id is not None:
        chosen = select_version(records, settings.learner_id, settings.learner_version)
        records, selection = chosen.records, chosen.note()
    if settings.faithful:
        plan = faithful_plan(records, header.version)
        if settings.learner_id is not None and settings.learner_id not in plan.steps:
            raise FaithfulError(f"no decision of learner {settings.learner_id!r} in the archive")
    started = time.monotonic()
    summary = ReplaySummary(selection=selection)
    replayer = Replayer(settings)
    watch = DeadLetterWatch(settings) if settings.dead_letter_wait_s > 0 else None
    try:
        if settings.faithful:
            summary.faithful = _replay_faithfully(settings, plan, records, replayer, progress)
        else:
            _replay(settings, selected(records, settings), replayer, progress)
        replayer.producer.flush()
        summary.seconds = time.monotonic() - started
        if watch is not None:
            summary.dead_letters = watch.count(replayer.landed(), replayer.events)
            summary.dead_letter_wait_s = settings.dead_letter_wait_s
    finally:
        replayer.close()
        if watch is not None:
            watch.close()
    summary.produced = replayer.produced
    return summary


class DeadLetterWatch:
    """What the workers make of a replay: from the moment it starts, the dead letters of
    the records it produced (matched by their source topic, partition and offset), per
    replayed topic and reason. ``count`` reads until ``dead_letter_wait_s`` passed without a
    dead letter of a replayed record or a decision of a replayed context."""

    def __init__(self, settings: ReplaySettings) -> None:
        self.prefix, self.wait_s = settings.prefix, settings.dead_letter_wait_s
        self.consumer = KafkaConsumer(**settings.kafka.kafka_python_kwargs(), group_id=None,
                                      enable_auto_commit=False, fetch_max_wait_ms=100)
        self.topics = {f"{self.prefix}.deadletter", f"{self.prefix}.decisions"}
        assigned = [TopicPartition(topic, p) for topic in sorted(self.topics)
                    for p in sorted(self.consumer.partitions_for_topic(topic) or ())]
        self.consumer.assign(assigned)
        self.consumer.seek_to_end(*assigned)
        for partition in assigned:  # fixes the start now, before the replay produces
            self.consumer.position(partition)

    def count(self, landed: set[tuple[str, int, int]],
              events: set[tuple[str, str]]) -> Counter[tuple[str, str]]:
        found: Counter[tuple[str, str]] = Counter()
        last = time.monotonic()
        while time.monotonic() - last < self.wait_s:
            for batch in self.consumer.poll(timeout_ms=200).values():
                for record in batch:
                    try:
                        value = orjson.loads(record.value)
                    except (orjson.JSONDecodeError, TypeError):
                        continue
                    if not isinstance(value, dict):
                        continue
                    if record.topic.endswith(".decisions"):
                        if (str(value.get("learner_id")), str(value.get("event_id"))) in events:
                            last = time.monotonic()
                        continue
                    source = (value.get("source_topic"), value.get("partition"),
                              value.get("offset"))
                    if source in landed:
                        topic = str(source[0]).removeprefix(f"{self.prefix}.")
                        found[(topic, str(value.get("reason")))] += 1
                        last = time.monotonic()
        return found

    def close(self) -> None:
        self.consumer.close()


def _replay(settings: ReplaySettings, records: list[dict[str, Any]], replayer: Replayer,
            progress: Callable[[int, int], None] | None) -> None:
    started = time.monotonic()
    first: float | None = None
    for done, record in enumerate(records, start=1):
        ts = _timestamp(record)
        if settings.speed > 0 and ts is not None:
            first = ts if first is None else first
            wait = (ts - first) / settings.speed - (time.monotonic() - started)
            if wait > 0:
                replayer.producer.flush()
                time.sleep(wait)
        replayer.send(record)
        if progress is not None and (done % 500 == 0 or done == len(records)):
            progress(done, len(records))


class ReplayedDecisions:
    """The decisions the replay's workers publish on ``<prefix>.decisions`` from now on
    (read without a consumer group), and how many of each learner's live decisions, in
    their order, are out."""

    def __init__(self, settings: ReplaySettings, plan: FaithfulPlan) -> None:
        self.plan = plan
        self.seen: dict[Key, Any] = {}
        self.out: dict[str, int] = dict.fromkeys(plan.decisions, 0)
        self.consumer = KafkaConsumer(**settings.kafka.kafka_python_kwargs(), group_id=None,
                                      enable_auto_commit=False, fetch_max_wait_ms=50)
        try:
            topic = f"{settings.prefix}.decisions"
            partitions = self.consumer.partitions_for_topic(topic)
            if not partitions:
                raise FaithfulError(f"no topic {topic!r}: start the workers of prefix "
                                    f"{settings.prefix!r} first")
            assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
            self.consumer.assign(assigned)
            # From now on: decisions already there (another replay's) count for nothing.
            self.consumer.seek_to_end(*assigned)
            for partition in assigned:
                self.consumer.position(partition)
        except BaseException:
            self.consumer.close()
            raise

    def poll(self, timeout_ms: int) -> list[Key]:
        """Read what was published; the events whose decision came out for the first time."""
        news = []
        for records in self.consumer.poll(timeout_ms=timeout_ms).values():
            for record in records:
                try:
                    value = orjson.loads(record.value)
                    key = (str(value["learner_id"]), str(value["event_id"]))
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue
                if key not in self.seen:
                    self.seen[key] = value.get("output")
                    news.append(key)
        for lid, order in self.plan.decisions.items():
            done = self.out[lid]
            while done < len(order) and (lid, order[done]) in self.seen:
                done += 1
            self.out[lid] = done
        return news

    def check(self, learners: list[str]) -> FaithfulCheck:
        check = FaithfulCheck(skipped=self.plan.skipped)
        for lid in learners:
            for eid in self.plan.decisions[lid]:
                key, live = (lid, eid), self.plan.live[(lid, eid)]
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


def _replay_faithfully(settings: ReplaySettings, plan: FaithfulPlan,
                       records: list[dict[str, Any]], replayer: Replayer,
                       progress: Callable[[int, int], None] | None) -> FaithfulCheck:
    """Send each learner's steps in their live order (see the module docstring), then
    compare the replay's decisions with the live ones."""
    learners = sorted(plan.steps) if settings.learner_id is None else [settings.learner_id]
    decisions = ReplayedDecisions(settings, plan)
    try:
        for index in plan.unplanned:  # configs first (in order), and what no order binds
            if settings.learner_id in (None, record_learner(records[index])):
                replayer.send(records[index])
        cursor = dict.fromkeys(learners, 0)
        total = sum(len(plan.steps[lid]) for lid in learners)

        def send(lid: str, step: Step) -> None:
            record = records[step.index]
            if record["topic"] == "contexts":
                event = record["value"]
                replayer.send(record, orjson.dumps({**event, "after_updates": step.after}))
            else:
                replayer.send(record)

        last_news = time.monotonic()
        while time.monotonic() - last_news < settings.decision_wait_s:
            moved = False
            for lid in learners:
                steps, at = plan.steps[lid], cursor[lid]
                while at < len(steps) and (records[steps[at].index]["topic"] == "contexts"
                                           or steps[at].after <= decisions.out[lid]):
                    send(lid, steps[at])
                    at += 1
                moved |= at > cursor[lid]
                cursor[lid] = at
            replayer.producer.flush()
            if progress is not None:
                progress(sum(cursor.values()), total)
            done = all(cursor[lid] == len(plan.steps[lid]) for lid in learners)
            if done and all(decisions.out[lid] == len(plan.decisions[lid]) for lid in learners):
                break
            news = decisions.poll(200)
            for key in news:  # truth, and contexts sent again, follow their decision
                for index in plan.followers.get(key, ()):
                    replayer.send(records[index])
            if news or moved:
                last_news = time.monotonic()
        check = decisions.check(learners)
        check.unsent = sum(len(plan.steps[lid]) - cursor[lid] for lid in learners)
        return check
    finally:
        decisions.close()
