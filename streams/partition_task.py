"""One owned partition as a task: apply its records, cut a commit (Kafka Streams' StreamTask).

A :class:`PartitionTask` holds the partition's processor and in-memory store, its state log
writer, its stream clocks and its input marks (the next offset per stream). It applies the
records the worker hands it (:meth:`PartitionTask.handle`) and, when the committer asks,
cuts what they changed and produced into a :class:`PendingCommit`: the state log records
(state, marks, clocks, and the decisions and dead letters as the commit's outbox), then the
outputs to publish once those are acknowledged. It does no I/O and imports no Kafka client:
the committer (streams/committer.py) writes and publishes, the worker feeds it records.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from banditflow.processors import Emitted, PartitionStore, Processor, Source, StreamTimes
from banditflow.processors.records import dead_letter
from banditflow.processors.store import Changes
from banditflow.schemas import DeadLetter
from banditflow.streams.logfilters import Throttle
from banditflow.streams.metrics import PrometheusSink
from banditflow.streams.settings import WorkerSettings
from banditflow.streams.statelog_reader import LogReader
from banditflow.streams.statelog_writer import PartitionLog
from banditflow.streams.topics import partition_for

log = logging.getLogger("banditflow.worker")

# Internal errors are dead-lettered one by one (with the exception); the log gets a sample.
INTERNAL_ERRORS = Throttle(every_s=10.0)


class InputRecord(Protocol):
    """What a task reads of an input record (aiokafka's ConsumerRecord has these)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int | None: ...  # milliseconds
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


@dataclass
class PendingCommit:
    """What one task hands to a commit: its state log records, then its outputs."""

    task: PartitionTask
    state: list[tuple[bytes, bytes]]
    decisions: list[str]
    context_ts: list[float]
    decided_at: list[float]
    dead_letters: list[str]  # as in the state log record
    dead_reasons: list[str]
    marks: dict[str, int]
    learners: list[str]  # whose entries the commit writes (their gauges changed)
    written: bool = False  # the state log acknowledged ``state`` where this owner expected
    acks: list[Awaitable[Any]] | None = None  # of the records in flight (the committer's)
    # Wall clock: the cut began, ended (the state made), the state was acknowledged, the
    # outputs were acknowledged.
    cut_at: float = 0.0
    cut_done_at: float = 0.0
    landed_at: float = 0.0
    published_at: float = 0.0


class PartitionTask:
    """One owned partition: its processor and store, state log writer, clocks and marks."""

    def __init__(
        self, number: int, reader: LogReader, settings: WorkerSettings, sink: PrometheusSink,
        wall_clock: Callable[[], float],
    ) -> None:
        self.number = number
        self.settings = settings
        self.sink = sink
        last = reader.last
        clock = dict(last.clock) if last else {}
        store = PartitionStore.load(
            reader.values.items(), settings.retention_s, max(clock.values(), default=0.0)
        )
        self.processor = Processor(
            store,
            partition=number,
            limits=settings.limits,
            sink=sink,
            expected_partition=lambda key: partition_for(key, settings.partitions),
            wall_clock=wall_clock,
            live_ope=settings.live_ope,
        )
        self.log = PartitionLog(number, reader)
        self.marks: dict[str, int] = dict(last.marks) if last else {}
        self.clock: dict[str, float] = clock
        self.now = max(self.clock.values(), default=0.0)
        self.committed_marks = dict(self.marks)
        self.decisions: list[str] = []
        self.context_ts: list[float] = []  # of the fresh decisions (for the latency)
        self.decided_at: list[float] = []  # of the same (the fetch that brought the context)
        self.dead_letters: list[DeadLetter] = []
        self.active = False
        # The last commit in the log carries decisions or dead letters: a new owner would
        # publish them again, unless an empty commit follows (Committer.close_outboxes).
        self.outbox_open = False
        # A written commit's outputs are not acknowledged yet: the next commit's record says
        # so, and a recovery from it publishes them again (a pipelined commit, see
        # streams/committer.py).
        self.outputs_in_flight = False
        handlers = self.processor
        self.handlers = {
            "learners": lambda key, raw, src: handlers.on_config(key, raw, src, self.now),
            "contexts": lambda key, raw, src: handlers.on_context(raw, src, self.now),
            "feedback": lambda key, raw, src: handlers.on_feedback(raw, src, self.now),
            "truth": lambda key, raw, src: handlers.on_truth(raw, src, self.now),
        }

    @property
    def has_output(self) -> bool:
        """Whether applied records produced a decision or a dead letter not yet committed."""
        return bool(self.decisions or self.dead_letters)

    def handle(self, stream: str, record: InputRecord, wall: float) -> None:
        """Apply one record of ``stream`` (a bug in a handler dead-letters the record)."""
        offset = record.offset
        if offset < self.marks.get(stream, 0):
            return  # applied by an earlier commit (a fetch that raced a seek)
        stamp = record.timestamp / 1000.0 if record.timestamp and record.timestamp > 0 else wall
        stamp = min(stamp, wall + self.settings.max_future_s)
        if stamp > self.clock.get(stream, 0.0):
            self.clock[stream] = stamp
            if stamp > self.now:
                self.now = stamp
        source = Source(record.topic, record.partition, offset, stamp)
        key = None if record.key is None else record.key.decode("utf-8", "replace")
        try:
            emitted = self.handlers[stream](key, record.value, source)
        except Exception as exc:  # a bug must not stop the worker: dead-letter and go on
            if INTERNAL_ERRORS.allow(wall):
                log.exception(
                    "internal error on %s[%s]@%s%s", record.topic, record.partition, offset,
                    INTERNAL_ERRORS.suppressed_note(),
                )
            emitted = Emitted(dead_letters=[dead_letter(
                "internal_error", f"{type(exc).__name__}: {exc}", record.value, source, wall,
            )])
        self.marks[stream] = offset + 1
        self.take(emitted)

    def take(self, emitted: Emitted) -> None:
        """Keep what an event produced for the next commit."""
        for decision in emitted.decisions:
            self.decisions.append(decision.to_json().decode())
            if not decision.redelivered and decision.context_ts is not None:
                self.context_ts.append(decision.context_ts)
                self.decided_at.append(decision.decided_at)
        self.dead_letters.extend(emitted.dead_letters)

    def times(self, caught_up_at: dict[str, float | None]) -> StreamTimes:
        """Each stream's time: its latest record, or, once nothing is unread, the wall time
        at which the fetch that said so was asked (``idle_lag_s`` earlier: records a producer
        stamped may still be on their way). Not the wall clock now: the broker's high
        watermark may be seconds old (a fetch the broker holds for half its wait or more, a stalled
        event loop, a paused process), and records that came since must not be overtaken by
        a timeout (streams/stream_time.py)."""

        def time_of(stream: str) -> float:
            seen = self.clock.get(stream, 0.0)
            heard = caught_up_at[stream]
            return seen if heard is None else max(seen, heard - self.settings.idle_lag_s)

        return StreamTimes(time_of("learners"), time_of("contexts"), time_of("feedback"))

    def cut(self, caught_up_at: dict[str, float | None]) -> PendingCommit | None:
        """Run the timers up to the streams' times, then take everything applied since the
        last cut into a commit (None when there is nothing to write)."""
        processor = self.processor
        self.take(processor.on_tick(self.times(caught_up_at)))
        changes = processor.store.changes()
        if (
            not changes
            and not self.has_output
            and self.marks == self.committed_marks
            and not self.log.wants_commit(processor.store.key_count())
        ):
            return None
        learners = changes.learners_learned()
        decisions, self.decisions = self.decisions, []
        context_ts, self.context_ts = self.context_ts, []
        decided_at, self.decided_at = self.decided_at, []
        dead, self.dead_letters = self.dead_letters, []
        marks = dict(self.marks)
        dead_json = [d.model_dump_json() for d in dead]
        state = self.log.commit(
            processor.store, changes, marks, dict(self.clock), decisions, dead_json,
            republish_previous=self.outputs_in_flight,
        )
        return PendingCommit(self, state, decisions, context_ts, decided_at, dead_json,
                             [d.reason for d in dead], marks, learners)

    def empty_commit(self) -> PendingCommit | None:
        """A commit of nothing, after one whose outbox went out, so that the next owner does
        not publish that outbox again; None when not needed or when records were applied
        since the last commit (an empty commit would omit them)."""
        if not (self.active and self.outbox_open and self.marks == self.committed_marks):
            return None
        records = self.log.commit(
            self.processor.store, Changes(), dict(self.marks), dict(self.clock), []
        )
        return PendingCommit(self, records, decisions=[], context_ts=[], decided_at=[],
                             dead_letters=[], dead_reasons=[], marks=dict(self.marks),
                             learners=[])

    def export_gauges(self, learner_id: str) -> None:
        """Export ``learner_id``'s series (its gauges and live OPE estimates)."""
        entry = self.processor.store.learners.get(learner_id)
        gauges = self.processor.gauges(learner_id)
        if entry is not None and gauges is not None:
            config = entry.config
            self.sink.learner_state(learner_id, config.family, config.algorithm, gauges)
            # (none: every candidate removed, and their series with them)
            estimates = self.processor.ope_estimates(learner_id)
            self.sink.ope_estimates(learner_id, estimates or [])

    def unexport(self) -> None:
        """Drop the series of this partition and its learners: whoever recovers the partition
        exports them (a worker that lost it must not serve their last values on)."""
        self.sink.forget(*self.processor.store.learners)
        self.sink.forget_partition(self.number)

    def written(self, commit: PendingCommit) -> None:
        """``commit`` is in the state log; its outputs go out now."""
        self.outputs_in_flight = bool(commit.decisions or commit.dead_letters)

    def committed(self, commit: PendingCommit) -> None:
        """``commit`` is in the state log and its outputs are published."""
        self.committed_marks = commit.marks
        self.outbox_open = bool(commit.decisions or commit.dead_letters)
        self.outputs_in_flight = False
