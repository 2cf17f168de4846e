"""The banditflow worker: owns partitions, applies their events in micro-batches, commits.

One asyncio process, on aiokafka:

- a consumer in the group ``app_id`` with range assignment, so partition p of every input
  topic (learners, contexts, feedback, truth) goes to the same worker;
- per owned partition a :class:`PartitionTask` (streams/partition_task.py): the processor
  and its in-memory store, the state log writer, the stream clocks and the input marks (the
  next offset per stream);
- a commit loop (a group commit; streams/committer.py writes it): as soon as applied events
  produced a decision or a dead letter and no commit is in flight (else every
  ``commit_interval_s``, or once ``max_batch_events`` wait) it runs the timers, writes each
  partition's changes and input marks to the state log as one record, and once the broker
  has acknowledged it, publishes the decisions and dead letters (a fenced former owner's
  never go out). Events keep flowing in while a commit is in flight and go into the next
  one, so commits grow with the load; a commit never waits for the input to run out;
- on assignment, a partition is read back from its state log (from its latest snapshot),
  the last commit's decisions and dead letters are published again, a claim fences former
  owners, and the inputs resume at the recovered marks; on revocation, a final commit;
- an HTTP server on a thread: ``/metrics`` (Prometheus), ``/ready``, ``/healthz``
  (streams/web.py); the group's workarounds are in streams/group.py.

Why not Faust's tables: they rewrite state on every event, recover by reading the whole
changelog (the embedded broker never compacts), and keep offsets apart from state, so a
crash can apply feedback twice; see streams/statelog.py for what replaces them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import threading
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from banditflow import __version__
from banditflow.learners.base import LearnerError
from banditflow.learners.registry import algorithms, families
from banditflow.streams.committer import Committer
from banditflow.streams.connection import diagnose
from banditflow.streams.fetch_wait import FetchWait, set_fetch_wait
from banditflow.streams.group import (
    HEARTBEAT_MS,
    GroupOffsets,
    RebalanceListener,
    StaleLeaderEscape,
    evict_predecessors,
    group_members,
)
from banditflow.streams.logfilters import Throttle
from banditflow.streams.metrics import PrometheusSink
from banditflow.streams.partition_task import PartitionTask, PendingCommit
from banditflow.streams.record_order import in_record_time_order
from banditflow.streams.recovery import restore
from banditflow.streams.settings import WorkerSettings
from banditflow.streams.statelog import LogReader, StateLogError, StateLogLost
from banditflow.streams.statelog_kafka import read_partitions
from banditflow.streams.stream_time import FetchAnswers
from banditflow.streams.topics import TopicError, Topics, ensure_topics, state_topic
from banditflow.streams.web import serve_http

# The order in which one partition's streams break timestamp ties: a config before the
# contexts sent with it, a context before its feedback.
STREAM_RANK = {"learners": 0, "contexts": 1, "feedback": 2, "truth": 3}

log = logging.getLogger("banditflow.worker")
# The lines an operator waits for: ready (once) and each rebalance. `banditflow worker` shows
# them at its default --loglevel (warning), which keeps the rest of the worker quiet.
lifecycle = logging.getLogger("banditflow.worker.lifecycle")

def preload_families() -> None:
    """Import every learner family (on a thread, at start): the first config of a family
    would otherwise stall the event loop for the import (numba loads graph_cb's kernels),
    long enough to miss a heartbeat."""
    for family in families():
        with contextlib.suppress(LearnerError):
            algorithms(family)
    # The modules imported by now are some 160,000 objects that live as long as the process;
    # every full collection scanned them all, stopping the event loop for 30-350 ms (measured
    # at 500 contexts/s on 2 cores). Frozen, the collector never looks at them again.
    gc.freeze()


# it asks for the broker's metadata every BROKER_PROBE_S.
BROKER_SILENCE_S = 5.0
BROKER_PROBE_S = 1.0

# The worker's exit status when the broker lost its state (see --on-state-loss); a
# supervisor restarting it blindly would only meet the same loss again.
EXIT_STATE_LOST = 3
# How often the worker checks that its topics still exist as created.
TOPIC_CHECK_S = 5.0


COMMIT_FAILURES = Throttle(every_s=10.0)
RECOVERY_FAILURES = Throttle(every_s=10.0)


class Worker:
    """A banditflow worker process (see the module docstring)."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.topics = Topics(settings.prefix)
        self.streams = self.topics.kinds()
        self.state_topic = state_topic(settings.app_id)
        self.sink = PrometheusSink(max_learners=settings.max_exported_learners)
        self.partitions: dict[int, PartitionTask] = {}
        # Partitions assigned to / serving in this worker (frozensets, for the HTTP thread).
        self.owned: frozenset[int] = frozenset()
        self.active: frozenset[int] = frozenset()
        self.wall = time.time()
        self.broker_heard = time.monotonic()  # the last answer from the broker
        self.broker_error = ""  # why the last probe of a silent broker failed (for /ready)
        self.generation = 0
        self.stopping = asyncio.Event()
        self._commit_wanted = asyncio.Event()
        self._committed = asyncio.Event()
        self._recovering: asyncio.Task[None] | None = None
        self.recovery_error = ""  # why the last recovery attempt failed (for /ready)
        self._announced = False  # the ready line was logged (rebalances are logged after it)
        self._owned_before: frozenset[int] = frozenset()  # for the rebalance line
        self.exit_status = 0
        self._waiting_events = 0
        self.fetch_wait = FetchWait(settings.fetch_wait_ms)
        self.consumer: AIOKafkaConsumer
        self.producer: AIOKafkaProducer
        self.reader: AIOKafkaConsumer
        self.fence_reader: AIOKafkaConsumer
        self.leader_escape: StaleLeaderEscape
        self.fetch_answers: FetchAnswers
        self.committer: Committer

    # ------------------------------------------------------------------ lifecycle
    @property
    def client_id(self) -> str:
        s = self.settings
        return f"{s.app_id}-{s.instance_id or f'{socket.gethostname()}-{s.web_port}'}"

    async def run(self) -> None:
        s = self.settings
        # First: a SIGTERM while the clients start must stop the worker cleanly too.
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        session_ms = int(s.session_timeout_s * 1000)
        self.producer = AIOKafkaProducer(
            **s.kafka.aiokafka_kwargs(),
            acks="all",
            # No linger: a commit enqueues all its records without yielding to the event
            # loop, so they leave in one request anyway; a linger only delayed each of the
            # commit's two round trips (state, then decisions): 21.7 -> 16.8 ms per commit.
            linger_ms=0,
            max_batch_size=1 << 20,
            # A decision may be as large as the largest input (--max-event-bytes) and more.
            max_request_size=max(1 << 20, s.limits.max_event_bytes + (64 << 10)),
            client_id=f"{s.app_id}-worker",
        )
        self.consumer = AIOKafkaConsumer(
            **s.kafka.aiokafka_kwargs(),
            group_id=s.app_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(100, min(HEARTBEAT_MS, session_ms // 4)),
            rebalance_timeout_ms=session_ms,
            partition_assignment_strategy=(RangePartitionAssignor,),
            max_poll_records=s.max_batch_events,
            fetch_max_wait_ms=s.fetch_wait_ms,
            client_id=self.client_id,
        )
        self.reader = AIOKafkaConsumer(
            **s.kafka.aiokafka_kwargs(),
            enable_auto_commit=False,
            auto_offset_reset="none",
            client_id=f"{s.app_id}-state-reader",
        )
        # Reads the few records a former owner wrote where a commit expected to land (in
        # a commit: the recoveries, meanwhile, use ``reader``).
        self.fence_reader = AIOKafkaConsumer(
            **s.kafka.aiokafka_kwargs(),
            enable_auto_commit=False,
            auto_offset_reset="none",
            fetch_max_wait_ms=20,
            client_id=f"{s.app_id}-fence-reader",
        )
        server = serve_http(s.web_host, s.web_port, s.web_config,
                            lambda: self.sink.exposition(flush=False), self.ready)
        # While the group forms (a second or more, mostly waiting), not while serving.
        threading.Thread(target=preload_families, name="preload", daemon=True).start()
        await self.producer.start()
        await self.reader.start()
        await self.fence_reader.start()
        await evict_predecessors(s.kafka, s.app_id, self.client_id)
        await self.consumer.start()
        self.fetch_answers = FetchAnswers().install(self.consumer)
        self.committer = Committer(
            self.producer,
            lambda exc: isinstance(exc, KafkaError) and not exc.retriable,
            self.topics,
            self.state_topic,
            GroupOffsets(self.consumer, {stream: topic for topic, stream in self.streams.items()}),
            self._state_keys,
            self._fenced,
        )
        self.leader_escape = StaleLeaderEscape(
            self.consumer._coordinator,
            lambda: group_members(s.kafka, s.app_id, self.client_id),
            stale_after_s=2 * s.session_timeout_s,
        ).install()
        self.consumer.subscribe(
            self.topics.inputs(), listener=RebalanceListener(self.on_revoked, self.on_assigned)
        )
        committer = asyncio.create_task(self._commit_loop())
        watcher = asyncio.create_task(self._watch_broker())
        try:
            await self._consume()
        finally:
            self.stopping.set()
            watcher.cancel()
            self._commit_wanted.set()
            await committer  # a commit in flight completes: never cut one in half
            if self._recovering is not None:
                self._recovering.cancel()
            with contextlib.suppress(KafkaError, OSError, StateLogError):
                await self.commit()
                await self.committer.close_outboxes(self.partitions.values())
            await self.consumer.stop()  # leaves the group: the partitions move at once
            await self.reader.stop()
            await self.fence_reader.stop()
            await self.producer.stop()
            server.shutdown()

    async def _watch_broker(self) -> None:
        """Ask the broker for its metadata when nothing else was heard from it for a while,
        so that /ready tells when the broker is gone (commits and fetches also count), and
        every TOPIC_CHECK_S whether the worker's topics are still there as created."""
        checked = time.monotonic()
        while not self.stopping.is_set():
            await asyncio.sleep(BROKER_PROBE_S)
            check = time.monotonic() - checked >= TOPIC_CHECK_S
            if time.monotonic() - self.broker_heard < BROKER_PROBE_S and not check:
                continue
            try:
                cluster = await asyncio.wait_for(self.producer.client.fetch_all_metadata(), 2.0)
            except (KafkaError, OSError, TimeoutError) as exc:
                # What /ready says: the cause the transport shows (nobody listening, a
                # certificate refused), else what the client said.
                found = await asyncio.to_thread(diagnose, self.settings.kafka, 2.0)
                self.broker_error = found.text if found else f"{type(exc).__name__}: {exc}"
                continue
            self.broker_heard = checked = time.monotonic()
            if check:
                await self._check_topics(cluster)

    async def _check_topics(self, cluster: Any) -> None:
        """A topic gone, or back with another partition count, means the broker lost what
        the worker wrote (an emptied broker auto-creates topics as clients ask for them)."""
        expected = self.settings.partitions
        for topic in [self.state_topic, *self.topics.inputs()]:
            count = len(cluster.partitions_for_topic(topic) or ())
            if count == expected:
                continue
            found = f"has {count} partitions, not {expected}" if count else "is gone"
            lost = StateLogLost(
                f"topic {topic!r} {found}: the broker was emptied or replaced, or the topic "
                "deleted", -1,
            )
            if self.settings.on_state_loss != "fresh":
                self._state_lost(lost)
                return
            log.warning("%s; creating the missing topics (--on-state-loss=fresh)", lost)
            try:
                await asyncio.to_thread(
                    ensure_topics, self.settings.kafka, self.topics, expected,
                    self.settings.app_id,
                )
            except (TopicError, KafkaError, OSError) as exc:
                self._state_lost(StateLogLost(f"{lost}; and it cannot start fresh: {exc}", -1),
                                 fatal=True)
            return

    def _state_lost(self, lost: StateLogLost, fatal: bool = False) -> None:
        """The broker no longer holds (part of) the state log: stop with EXIT_STATE_LOST, or
        with --on-state-loss=fresh start the partition over with empty state."""
        if self.settings.on_state_loss == "fresh" and not fatal:
            log.warning(
                "%s. Partition %d starts afresh (--on-state-loss=fresh): its learners, "
                "decisions and holds are gone; send the learners' configs again",
                lost, lost.partition,
            )
            self._forget({lost.partition})
            self._take_over({lost.partition})
            return
        if self.exit_status != EXIT_STATE_LOST:
            log.critical(
                "%s. The state this worker kept there is gone; it stops with exit status %d "
                "(it would meet the same loss on every restart). Restore the broker's data, or "
                "run the worker with --on-state-loss=fresh to start the lost partitions over "
                "with empty state.", lost, EXIT_STATE_LOST,
            )
        self.exit_status = EXIT_STATE_LOST
        self.committer.stop_writes()
        self.stopping.set()

    async def _consume(self) -> None:
        consumer = self.consumer
        stop = asyncio.ensure_future(self.stopping.wait())
        limit = 2 * self.settings.max_batch_events
        while not self.stopping.is_set():
            if self._waiting_events >= limit:  # the committer is behind: let it catch up
                self._commit_wanted.set()
                self._committed.clear()
                await asyncio.wait({stop, asyncio.ensure_future(self._committed.wait())},
                                   return_when=asyncio.FIRST_COMPLETED)
                continue
            fetched = await consumer.getmany(
                timeout_ms=100, max_records=self.settings.max_batch_events
            )
            self._adapt_fetch_wait(bool(fetched))
            if not fetched:
                continue
            self.broker_heard = time.monotonic()
            self.wall = wall = time.time()
            for number, batches in self._by_partition(fetched).items():
                part = self.partitions.get(number)
                if part is None or not part.active:
                    continue
                for stream, record in in_record_time_order(batches):
                    part.handle(stream, record, wall)
                    self._waiting_events += 1
                # Group commit: what produced an output is committed at once (or as soon as
                # the commit in flight is acknowledged, with whatever came meanwhile);
                # events that produced nothing wait for the interval.
                if part.has_output:
                    self._commit_wanted.set()
            if self._waiting_events >= self.settings.max_batch_events:
                self._commit_wanted.set()
        stop.cancel()

    def _by_partition(
        self, fetched: dict[TopicPartition, list[ConsumerRecord]]
    ) -> dict[int, list[tuple[str, list[ConsumerRecord]]]]:
        """A fetch's batches per partition number, each as (stream, records), the streams in
        the order that breaks timestamp ties (streams/record_order.py)."""
        grouped: dict[int, list[tuple[str, list[ConsumerRecord]]]] = {}
        for tp, records in sorted(fetched.items(),
                                  key=lambda item: STREAM_RANK[self.streams[item[0].topic]]):
            grouped.setdefault(tp.partition, []).append((self.streams[tp.topic], records))
        return grouped

    def _adapt_fetch_wait(self, records: bool) -> None:
        behind = not records and any(
            None in self._caught_up(part).values()
            for part in self.partitions.values() if part.active
        )
        wait_ms = self.fetch_wait.fetched(time.monotonic(), records, behind)
        if wait_ms is not None:
            set_fetch_wait(self.consumer, wait_ms)
            log.warning("fetch wait now %d ms (%s)", wait_ms,
                        "records wait unread" if behind else "records flow again")

    # ------------------------------------------------------------------ commits
    async def _commit_loop(self) -> None:
        """Commit until the worker stops: at once when applied events produced a decision or
        a dead letter (a group commit: one commit in flight at a time, and what arrives
        while it is in flight goes into the next), when ``max_batch_events`` wait, and
        otherwise every interval (state, marks and timers of quiet partitions). A commit in
        flight always completes (see commit())."""
        interval = self.settings.commit_interval_s
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                await self.commit()
            except StateLogLost as lost:
                self._state_lost(lost)
                continue
            except (KafkaError, OSError) as exc:
                if COMMIT_FAILURES.allow(time.monotonic()):
                    log.warning("commit failed, retrying: %s%s", exc,
                                COMMIT_FAILURES.suppressed_note())
                await asyncio.sleep(min(1.0, 10 * interval))
                continue
            except Exception:  # a bug: the memory may now differ from the log; re-read it
                log.exception("commit failed: reading every partition back from the state log")
                async with self.committer.lock:
                    owned = set(self.partitions)
                    self._forget(owned)
                self._take_over(owned)
                await asyncio.sleep(1.0)
                continue
            left = interval - (time.monotonic() - started)
            if left > 0 and not self._commit_wanted.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._commit_wanted.wait(), timeout=left)
            self._commit_wanted.clear()

    def _caught_up(self, part: PartitionTask) -> dict[str, float | None]:
        """Per stream of ``part``: None while records wait unread, else the wall time at
        which the fetch was asked whose high watermark it has read to (streams/stream_time.py:
        not when the answer was processed, which a pause of this process can delay)."""
        answers = self.fetch_answers
        return {
            stream: answers.caught_up_at(
                TopicPartition(topic, part.number), part.marks.get(stream, 0)
            )
            for topic, stream in self.streams.items()
        }

    def _cut_all(self) -> list[PendingCommit]:
        """Every active partition's commit (those with something to write)."""
        self.wall = time.time()
        commits = [
            commit
            for task in list(self.partitions.values())
            if task.active and (commit := self._cut(task)) is not None
        ]
        self._waiting_events = 0
        self._committed.set()
        return commits

    def _cut(self, task: PartitionTask) -> PendingCommit | None:
        commit = task.cut(self._caught_up(task))
        self.sink.state_keys.labels(str(task.number)).set(task.processor.store.key_count())
        for learner_id in commit.learners if commit is not None else ():
            self._export_gauges(task, learner_id)
        return commit

    def _unexport(self, part: PartitionTask) -> None:
        """Drop the series of ``part`` and its learners: whoever recovers the partition
        exports them (a worker that lost it must not serve their last values on)."""
        self.sink.forget(*part.processor.store.learners)
        self.sink.forget_partition(part.number)

    def _export_gauges(self, part: PartitionTask, learner_id: str) -> None:
        entry = part.processor.store.learners.get(learner_id)
        gauges = part.processor.gauges(learner_id)
        if entry is not None and gauges is not None:
            config = entry.config
            self.sink.learner_state(learner_id, config.family, config.algorithm, gauges)
            # (none: every candidate removed, and their series with them)
            estimates = part.processor.ope_estimates(learner_id)
            self.sink.ope_estimates(learner_id, estimates or [])

    async def commit(self) -> None:
        """Make everything applied so far durable, then publish what it produced (the
        committer's order: state, outputs, offsets); a commit that failed halfway is taken
        up again first (streams/committer.py)."""
        started = time.monotonic()
        written = await self.committer.commit(self._cut_all)
        if not written:
            return
        self.broker_heard = time.monotonic()
        published = time.time()
        for commit in written:
            self.sink.published([max(0.0, published - ts) for ts in commit.context_ts],
                                [max(0.0, published - at) for at in commit.decided_at])
            for reason in commit.dead_reasons:  # (counted once out, not when produced)
                self.sink.dead_lettered(reason)
            self.sink.commits.labels(str(commit.task.number)).inc()
            self.sink.state_log_bytes.inc(sum(len(v) for _, v in commit.state))
        self.sink.commit_seconds.observe(time.monotonic() - started)
        self.sink.flush()

    async def _state_keys(self, number: int, offsets: list[int]) -> list[bytes] | None:
        """The keys of the state log records of partition ``number`` at ``offsets`` (None
        if they cannot all be read within a few seconds)."""
        tp = TopicPartition(self.state_topic, number)
        reader, wanted, keys = self.fence_reader, set(offsets), []
        reader.assign([tp])
        reader.seek(tp, min(offsets))
        deadline = time.monotonic() + 5.0
        try:
            while wanted and time.monotonic() < deadline:
                for record in (await reader.getmany(tp, timeout_ms=200)).get(tp, []):
                    if record.offset in wanted:
                        wanted.discard(record.offset)
                        keys.append(record.key)
        except KafkaError:
            return None
        finally:
            reader.unsubscribe()
        return None if wanted else keys

    def _fenced(self, part: PartitionTask) -> None:
        log.warning(
            "partition %d: another worker wrote to its state log; reading it again", part.number
        )
        self._forget({part.number})
        self._take_over({part.number})

    def _forget(self, numbers: set[int]) -> None:
        """Drop the in-memory state of ``numbers`` and any commit of theirs not finished:
        the state log is the truth, and they are read back from it when taken over. (Call
        with the commit lock held, or from a callback where no commit runs.)"""
        for number in numbers:
            part = self.partitions.pop(number, None)
            if part is not None:
                part.active = False
                self._unexport(part)
        self.active = self.active - numbers
        self.committer.drop(numbers)

    # ------------------------------------------------------------------ ownership
    def _input_tps(self, number: int) -> list[TopicPartition]:
        return [TopicPartition(topic, number) for topic in self.topics.inputs()]

    def _take_over(self, numbers: set[int]) -> None:
        """Pause the inputs of ``numbers`` (those still assigned), then recover and resume
        them in the background (a rebalance callback must return quickly: heartbeats wait)."""
        numbers = numbers & self.owned
        if not numbers:
            return
        self.consumer.pause(*(tp for n in numbers for tp in self._input_tps(n)))
        previous = self._recovering
        self._recovering = asyncio.create_task(self._recover(numbers, self.generation, previous))

    def _current(self, generation: int, number: int) -> bool:
        """Whether a recovery started in ``generation`` may still act on ``number``."""
        return generation == self.generation and number in self.owned

    async def _recover(
        self, numbers: set[int], generation: int, previous: asyncio.Task[None] | None
    ) -> None:
        """Take ``numbers`` over: from memory when nothing happened to them since (a claim
        shows it), else from the state log; any failure is logged and retried."""
        if previous is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await previous
        todo = set(numbers)
        for number in sorted(todo):
            part = self.partitions.get(number)
            kept = (
                part is not None
                and part.marks == part.committed_marks
                and not any(commit.task is part for commit in self.committer.unfinished)
            )
            if kept and await self._claim(part, generation):  # type: ignore[arg-type]
                todo.discard(number)
            else:
                async with self.committer.lock:
                    self._forget({number})
        failures = 0
        while todo and generation == self.generation and not self.stopping.is_set():
            started = time.monotonic()
            try:
                readers = await read_partitions(
                    self.reader, self.state_topic, sorted(todo),
                    fresh_if_lost=self.settings.on_state_loss == "fresh",
                )
                for number, reader in readers.items():
                    if self._current(generation, number) and await self._recover_one(
                        number, reader, generation, started
                    ):
                        todo.discard(number)
                todo &= self.owned
                failures = 0
            except StateLogLost as lost:
                if self.settings.on_state_loss != "fresh":
                    self._state_lost(lost)
                    return
                log.warning("%s: reading partition %d again, to start it afresh",
                            lost, lost.partition)
            except Exception as exc:  # a broker hiccup, a damaged log: say so, retry
                failures += 1
                self.recovery_error = f"{type(exc).__name__}: {exc}"
                if RECOVERY_FAILURES.allow(time.monotonic()):
                    log.error("recovering partitions %s failed, retrying: %s%s", sorted(todo),
                              self.recovery_error, RECOVERY_FAILURES.suppressed_note(),
                              exc_info=not isinstance(exc, KafkaError | StateLogError))
                await asyncio.sleep(min(5.0, 0.25 * 2**failures))
        self.recovery_error = ""
        if not self._announced and self.owned and self.owned == self.active:
            self._announced = True
            settings = self.settings
            lifecycle.info(
                "banditflow %s worker ready: bootstrap %s, group %s, topics %s.*, partitions %s, "
                "metrics %s://%s:%d/metrics", __version__, settings.kafka.describe(),
                settings.app_id, settings.prefix, sorted(self.owned),
                "https" if settings.web_config and settings.web_config.cert_file else "http",
                settings.web_host, settings.web_port)

    async def _recover_one(
        self, number: int, reader: LogReader, generation: int, started: float
    ) -> bool:
        # Parsing the state is CPU work: on a thread, so that heartbeats go on.
        part = await asyncio.to_thread(
            PartitionTask, number, reader, self.settings, self.sink, self.wall_now
        )
        if not await restore(reader, part, self.committer,
                             lambda: self._current(generation, number)):
            return False
        if not await self._activate(part, generation):
            return False
        self.sink.recovery_seconds.labels(str(number)).set(time.monotonic() - started)
        self.sink.recovery_bytes.labels(str(number)).set(reader.bytes_read)
        log.info(
            "partition %d recovered in %.2fs: %d commits, %d keys, %d bytes read",
            number, time.monotonic() - started, reader.commits, len(reader.values),
            reader.bytes_read,
        )
        return True

    async def _claim(self, part: PartitionTask, generation: int) -> bool:
        """Write ``part``'s claim and activate it, if the assignment has not changed and the
        claim lands where ``part``'s log expects it (nobody else wrote since)."""
        if not self._current(generation, part.number):
            return False
        try:
            claimed = await self.committer.claim(part)
        except (KafkaError, OSError) as exc:
            log.warning("partition %d: claim failed: %s", part.number, exc)
            return False
        return claimed and await self._activate(part, generation)

    async def _activate(self, part: PartitionTask, generation: int) -> bool:
        consumer = self.consumer
        tps = self._input_tps(part.number)
        unread = [tp for tp in tps if self.streams[tp.topic] not in part.marks]
        # Asked on the state reader's connection: on the consumer's own, the request would
        # queue behind its fetch long-poll.
        beginnings = await self.reader.beginning_offsets(unread) if unread else {}
        if not self._current(generation, part.number):
            return False  # reassigned meanwhile: whoever owns it now claims it again
        for tp in tps:
            offset = part.marks.get(self.streams[tp.topic])
            consumer.seek(tp, beginnings[tp] if offset is None else offset)
        self.partitions[part.number] = part
        part.active = True
        self.active = self.active | {part.number}
        consumer.resume(*tps)
        # Its learners' series, from the state it recovered (not only once each learns again).
        for learner_id in part.processor.store.learners:
            self._export_gauges(part, learner_id)
        return True

    def wall_now(self) -> float:
        """The wall clock as of the current batch (one lookup per batch, not per event)."""
        return self.wall

    async def on_revoked(self, revoked: set[int]) -> None:
        self.generation += 1
        try:
            await self.commit()
            await self.committer.close_outboxes(self.partitions.values())
        except StateLogLost as lost:
            self._state_lost(lost)
            async with self.committer.lock:
                self._forget(set(self.partitions))
        except Exception as exc:  # what is not in the log must not be kept: read it again
            log.warning("commit before a rebalance failed (%s): the partitions will be read "
                        "back from the state log", exc)
            async with self.committer.lock:
                self._forget(set(self.partitions))
        for number in revoked:
            part = self.partitions.get(number)
            if part is not None:
                part.active = False
        self.owned = self.active = frozenset()

    async def on_assigned(self, numbers: set[int]) -> None:
        self.generation += 1
        if self._announced:
            before = self._owned_before
            lifecycle.info("rebalance: partitions %s (took %s, gave up %s)", sorted(numbers),
                           sorted(numbers - before), sorted(before - numbers))
        self._owned_before = frozenset(numbers)
        self.owned = frozenset(numbers)
        for number in list(self.partitions):
            if number not in numbers:
                self._unexport(self.partitions.pop(number))
        if numbers:
            self._take_over(numbers)

    def ready(self) -> tuple[bool, str]:
        """Whether this worker owns partitions, has recovered all of them and hears from the
        broker (read from the HTTP thread: only immutable snapshots and floats, replaced on
        the loop thread)."""
        owned, active = self.owned, self.active
        silent = time.monotonic() - self.broker_heard
        if silent > BROKER_SILENCE_S:
            cause = f": {self.broker_error}" if self.broker_error else ""
            return False, f"no answer from the broker for {silent:.0f}s{cause}"
        if not owned:
            return False, "joining the consumer group"
        if owned - active:
            error = f" ({self.recovery_error})" if self.recovery_error else ""
            return False, f"recovering partitions {sorted(owned - active)}{error}"
        return True, f"ready: partitions {sorted(owned)}"

def run_worker(settings: WorkerSettings) -> int:
    """Run a worker until SIGTERM/SIGINT; its exit status (EXIT_STATE_LOST or 0)."""
    worker = Worker(settings)
    asyncio.run(worker.run())
    return worker.exit_status

