"""The banditflow worker: lifecycle wiring of the units that own partitions, apply their
events in micro-batches and commit.

One asyncio process, on aiokafka; the worker creates the clients, starts and stops them, and
runs three loops:

- **consume**: a consumer in the group ``app_id`` with range assignment, so partition p of
  every input topic (learners, contexts, feedback, truth) goes to the same worker; each
  poll's records (at most ``POLL_RECORDS``, so that the other loops get their turns) are
  handed to their partition's :class:`PartitionTask`
  (streams/partition_task.py: the processor and its in-memory store, the state log writer,
  the stream clocks and the input marks), merged by timestamp (streams/record_order.py),
  those past an offset the broker has not stored yet held back (streams/offset_gaps.py);
- **commit** (a group commit): as soon as applied events produced a decision or a dead
  letter and no commit is in flight (else every ``commit_interval_s``, or once
  ``max_batch_events`` wait), each task cuts its commit and the :class:`Committer`
  (streams/committer.py) writes it: the state log record (changes, input marks, outbox and
  dead letters), then, once the broker has acknowledged it, the decisions and dead letters
  (a fenced former owner's never go out), then the group offsets. Commits are pipelined:
  the next commit's state record goes out with the decisions of the one before, in the
  same request. In a backlog, events keep flowing in while a commit is in flight and go
  into the next one, so commits grow with the load; a commit never waits for the input to
  run out. Caught up, nothing is fetched until the commit of what was fetched is out
  (``HOLD_INPUT_S``: on the embedded broker a fetch delays the commit's writes), unless
  more than a few contexts would come meanwhile (``InputHold``);
- **broker watch**: /ready says when the broker is silent, and a topic lost or recreated
  means the broker lost the state.

Partitions are taken over and let go by :class:`Ownership` (streams/recovery.py: recovery
from the state log, claims that fence former owners, the state-loss policy), on the calls
of the group (streams/group.py, with the broker workarounds); ``/metrics``, ``/ready`` and
``/healthz`` are served on a thread (streams/web.py).

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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError

from banditflow import __version__
from banditflow.learners.base import LearnerError
from banditflow.learners.registry import algorithms, families
from banditflow.streams.committer import Committer
from banditflow.streams.connection import diagnose
from banditflow.streams.fetch_wait import (
    PACED_STREAMS,
    FetchPacing,
    FetchWait,
    InputHold,
    adapt_fetch_wait,
)
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
from banditflow.streams.offset_gaps import SETTLE_S, HeldBack, OffsetGaps
from banditflow.streams.partition_task import PartitionTask, PendingCommit
from banditflow.streams.producer import PipelinedProducer
from banditflow.streams.record_order import by_partition, in_record_time_order
from banditflow.streams.recovery import Ownership
from banditflow.streams.settings import WorkerSettings
from banditflow.streams.statelog import StateLogError, StateLogLost
from banditflow.streams.stream_time import FetchAnswers
from banditflow.streams.topics import TopicError, Topics, ensure_topics, state_topic
from banditflow.streams.web import serve_http

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


# /ready fails once nothing was heard from the broker for this long; when the worker is idle,
# it asks for the broker's metadata every BROKER_PROBE_S.
BROKER_SILENCE_S = 5.0
BROKER_PROBE_S = 1.0

# How often the worker checks that its topics still exist as created.
TOPIC_CHECK_S = 5.0

COMMIT_FAILURES = Throttle(every_s=10.0)

# A partition with more records than this unread is in a backlog: its commits are cut by the
# interval and --max-batch, not by each output (see _consume). Fewer are what arrived while
# the last fetch was answered: at 500 contexts/s, a quarter of the fetches that brought a
# decision left some (mostly one or two), and making those wait for the interval put a
# decision's p95 inside the worker at 17 ms instead of 7 (measured, issue 26).
BACKLOG_RECORDS = 256

# The most records a poll hands over (and no more than --max-batch). A poll's records are
# handled without a turn of the event loop, and everything else waits for that turn: the
# commit loop's interval, a commit's next step once the broker acknowledged its state (its
# decisions go out), the next fetch, each taking a turn or more. With polls of --max-batch
# (2,000 records, about 0.15 s of work here), a backlog's first commit was cut 0.22 s after
# its first records were fetched, once 2,443 were handled (timestamps added for one run, not
# kept). 100 records are about 7 ms of work. Side by side on fresh brokers (the state-layer
# (b) and (c) runs, 2026-11-28, by one-off scripts; `make bench` regenerates the first
# decision and the throughput of (b)), the first decision under a 10^4 backlog came after
# 0.166 s instead of 0.233 (one learner) and 0.249 instead of 0.572 (1,000 learners), 7
# pairs, and 0.178 against 0.287 and 0.274 against 0.607 in 5 more; the throughput fell 12.5
# % and 7 %, and 13 % and 18 %: the commit loop now gets its turns at the interval, so a
# backlog is committed in more, smaller commits. At 500 contexts/s a poll brings a few
# records: no change there.
POLL_RECORDS = 100

# Unless a partition is in a backlog, or more than a few contexts would come meanwhile
# (streams/fetch_wait.py, InputHold), the worker fetches the partitions it fetched again only
# once the commit of what they brought has its outputs acknowledged, or after HOLD_INPUT_S.
# Otherwise its next fetch goes out with the commit's state: the embedded broker (Tansu 0.6.0,
# memory storage) lists every batch of a partition when a fetch finds records, under a read
# lock of the one map that holds every topic, and a produce takes that lock to write
# (object_store's InMemory, read in Tansu's source), so the commit's writes waited for the
# listing: 3-7 ms once a partition holds 5,000-10,000 one-record batches. At 500 contexts/s
# (bench_latency.py's measurement, 3 one-off pairs of 20-s rounds, 2026-11-29) the worker's
# own p50/p95/p99 went from 4.3/10.5/14.5 to 1.8/4.1/6.5 ms (its state write's p99 from 8.8
# to 2.4, its outputs' from 8.8 to 2.4), the application's p50/p99 from 18.2/40.9 to
# 14.9/38.3 (a fetch sent later finds more of what came meanwhile), and its CPU per decision
# from 0.46 to 0.50 ms (each poll is committed on its own: none comes in while a commit is
# out); at 2,000/s 8.2/18.3/26.6 to 4.3/8.7/19.2, the application's p99 61.1 and 63.1. A
# pause that ends during a hold (feedback's pacing) ends at once: resumed only once the hold
# ended, feedback came in the contexts' next poll, ahead of them, and the worker's p99 was 5.9
# against 5.4 ms (3 more pairs). On Apache Kafka what arrives during a commit waits for its
# end, as the next commit would have anyway. A backlog is read at full speed
# (BACKLOG_RECORDS). At most 0.1 s: a commit takes a few milliseconds, and one that takes
# longer (a broker in trouble, a commit that failed and waits to be taken up again) must not
# stop the input.
HOLD_INPUT_S = 0.1


class Worker:
    """A banditflow worker process (see the module docstring)."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.topics = Topics(settings.prefix)
        self.streams = self.topics.kinds()
        self.state_topic = state_topic(settings.app_id)
        self.sink = PrometheusSink(max_learners=settings.max_exported_learners)
        self.wall = time.time()
        self.broker_heard = time.monotonic()  # the last answer from the broker
        self.broker_error = ""  # why the last probe of a silent broker failed (for /ready)
        self.stopping = asyncio.Event()
        self._commit_wanted = asyncio.Event()
        self._committed = asyncio.Event()  # set at each cut (a full backlog, a hold wait for it)
        self._announced = False  # the ready line was logged (rebalances are logged after it)
        self._owned_before: frozenset[int] = frozenset()  # for the rebalance line
        self._waiting_events = 0
        self._published = asyncio.Event()  # set when outputs were acknowledged (for a hold)
        self.fetch_wait = FetchWait(settings.fetch_wait_ms)
        self.fetch_pacing = FetchPacing(settings.feedback_fetch_interval_s)
        self.input_hold = InputHold()
        self.paced_streams = [(t, s) for t, s in self.streams.items() if s in PACED_STREAMS]
        self._paused_until: dict[TopicPartition, float] = {}  # (the event loop's time)
        # The partitions pacing alone paused: when (wall time), and the task and ownership
        # generation to resume them for.
        self._paced: dict[TopicPartition, tuple[float, PartitionTask, int]] = {}
        self.consumer: AIOKafkaConsumer
        self.producer: PipelinedProducer
        self.reader: AIOKafkaConsumer
        self.fence_reader: AIOKafkaConsumer
        self.leader_escape: StaleLeaderEscape
        self.fetch_answers: FetchAnswers
        self.offset_gaps: OffsetGaps
        self.committer: Committer
        self.ownership: Ownership

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
        self.producer = PipelinedProducer(
            AIOKafkaClient(**s.kafka.aiokafka_kwargs(), client_id=f"{s.app_id}-worker"),
            # A decision may be as large as the largest input (--max-event-bytes) and more.
            max_request_size=max(1 << 20, s.limits.max_event_bytes + (64 << 10)),
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
            max_poll_records=min(POLL_RECORDS, s.max_batch_events),
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
        # (before the HTTP server: /ready reads the ownership)
        self.committer = Committer(
            self.producer,
            lambda exc: isinstance(exc, KafkaError) and not exc.retriable,
            self.topics,
            self.state_topic,
            GroupOffsets(self.consumer, {stream: topic for topic, stream in self.streams.items()}),
            lambda number, offsets: self.ownership.state_keys(number, offsets),
            lambda task: self.ownership.fenced(task),
        )
        self.ownership = Ownership(
            s, self.committer, self.consumer, self.reader, self.fence_reader, self.streams,
            self.state_topic, self.sink, self.wall_now, self.commit, self._announce_ready,
            self.stopping,
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
        self.fetch_answers = answers = FetchAnswers(
            on_answer=lambda tp: self.sink.fetched(self.streams[tp.topic]),
            on_empty=self._resume_paced,
        ).install(self.consumer)
        self.offset_gaps = OffsetGaps(
            lambda tp, now: answers.settled_highwater(tp, now, SETTLE_S),
            lambda outcome: self.sink.offset_gaps.labels(outcome).inc(),
        )
        self.leader_escape = StaleLeaderEscape(
            self.consumer._coordinator,
            lambda: group_members(s.kafka, s.app_id, self.client_id),
            stale_after_s=2 * s.session_timeout_s,
        ).install()
        self.consumer.subscribe(
            self.topics.inputs(),
            listener=RebalanceListener(self.ownership.on_revoked, self._on_assigned),
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
            self.ownership.stop_recovering()
            with contextlib.suppress(KafkaError, OSError, StateLogError):
                await self.commit()
                await self.committer.close_outboxes(self.ownership.tasks.values())
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
                self.ownership.state_lost(lost)
                return
            log.warning("%s; creating the missing topics (--on-state-loss=fresh)", lost)
            try:
                await asyncio.to_thread(
                    ensure_topics, self.settings.kafka, self.topics, expected,
                    self.settings.app_id,
                )
            except (TopicError, KafkaError, OSError) as exc:
                self.ownership.state_lost(
                    StateLogLost(f"{lost}; and it cannot start fresh: {exc}", -1), fatal=True
                )
            return

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
            fetched = await consumer.getmany(timeout_ms=100)
            if not fetched:
                self.input_hold.polled(0, time.monotonic())
                self._adapt_fetch_wait(records=0)
                self._pace_inputs()
                continue
            self.broker_heard = time.monotonic()
            self.wall = wall = time.time()
            handled = contexts = 0
            for number, batches in by_partition(fetched, self.streams).items():
                task = self.ownership.tasks.get(number)
                if task is None or not task.active:
                    continue
                batches = self._admit(task, batches)
                for stream, record in in_record_time_order(batches):
                    task.handle(stream, record, wall)
                handled += sum(len(records) for _, records in batches)
                contexts += sum(len(records) for stream, records in batches
                                if stream == "contexts")
                # Group commit: unless the partition is in a backlog, what produced an output
                # is committed at once (or as soon as the commit in flight is acknowledged,
                # with whatever came meanwhile). While more than BACKLOG_RECORDS wait unread,
                # the interval and max_batch_events cut the commits instead: a commit costs
                # CPU in proportion to the state of the learners it writes (a copy of each, and
                # its patch), so back-to-back commits in a backlog would spend on
                # state writes the CPU the backlog needs, while its decisions wait behind the
                # backlog anyway. Events that produced nothing wait for the interval.
                if task.has_output and self._unread(task) <= BACKLOG_RECORDS:
                    self._commit_wanted.set()
            polled_at = time.monotonic()
            self.input_hold.polled(contexts, polled_at)
            self._waiting_events += handled
            if self._waiting_events >= self.settings.max_batch_events:
                self._commit_wanted.set()
            self._adapt_fetch_wait(records=handled)
            self._pace_inputs()
            if (
                self._commit_wanted.is_set()
                and self.input_hold.wanted(polled_at)
                and not any(self._unread(task) > BACKLOG_RECORDS
                            for task in self.ownership.tasks.values() if task.active)
            ):
                await self._hold_input()
            # getmany returns records it holds without yielding to the event loop: in a
            # backlog this loop would otherwise handle poll after poll before the commit loop
            # or the fetcher got a turn (see POLL_RECORDS). With polls of --max-batch, under a
            # backlog of 10^4 contexts the first decision came after 0.269 s without this and
            # 0.236 s with it (medians of 8 pairs; the slowest 0.42 against 0.32 s), at the
            # same throughput (2026-11-28).
            await asyncio.sleep(0)
        stop.cancel()

    def _admit(self, task: PartitionTask, batches: list[tuple[str, Sequence[Any]]]
               ) -> list[tuple[str, Sequence[Any]]]:
        """Of each stream's records, those before an offset the broker has not shown yet
        (streams/offset_gaps.py); the partition is fetched again from there."""
        admitted: list[tuple[str, Sequence[Any]]] = []
        for stream, records in batches:
            tp = TopicPartition(records[0].topic, task.number)
            asked_at = self.fetch_answers.asked_at(tp) or self.wall
            kept, held = self.offset_gaps.admit(tp, task.marks.get(stream), records, asked_at)
            if held is not None:
                self._fetch_again(tp, held, task)
            admitted.append((stream, kept))
        return admitted

    def _fetch_again(self, tp: TopicPartition, held: HeldBack, task: PartitionTask) -> None:
        """Fetch ``tp`` again from ``held.offset``: at once, or after ``held.wait_s``."""
        self.consumer.seek(tp, held.offset)
        if held.wait_s > 0:
            self._pause_input(tp, task, held.wait_s)

    async def _hold_input(self) -> None:
        """Fetch none of the partitions fetched now until the commit of what was applied so
        far has its outputs acknowledged, HOLD_INPUT_S at most (see there)."""
        consumer, generation = self.consumer, self.ownership.generation
        self._committed.clear()  # (set by the next cut, which takes what was applied)
        held = consumer.assignment() - consumer.paused()
        consumer.pause(*held)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HOLD_INPUT_S
        started = time.monotonic()  # (loop.time() may count whole milliseconds: uvloop)
        try:
            while not (self._committed.is_set() and self.committer.settled):
                if (left := deadline - loop.time()) <= 0:
                    break
                self._published.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._published.wait(), timeout=left)
        finally:
            # (A new assignment starts unpaused; the recoveries pause what they take over.)
            if self.ownership.generation == generation:
                consumer.resume(*(held & consumer.assignment()))
            ended = time.monotonic()
            self.input_hold.held(ended - started, ended)

    def _pace_inputs(self) -> None:
        """Pause the caught-up partitions of the streams no decision waits for (FetchPacing)."""
        now, answers, pacing = time.time(), self.fetch_answers, self.fetch_pacing
        if pacing.interval_s <= 0:
            return  # (off: nothing to look at after each poll)
        for task in self.ownership.tasks.values():
            if not task.active:
                continue
            for topic, stream in self.paced_streams:
                tp = TopicPartition(topic, task.number)
                if tp in self._paused_until:
                    continue
                position = task.marks.get(stream, 0)
                pause = pacing.pause_for(tp, now, answers.asked_at(tp),
                                         answers.unread(tp, position), position)
                if pause is not None:
                    self._pause_input(tp, task, pause, paced=True)

    def _resume_paced(self, asked_at: float) -> None:
        """A fetch asked at ``asked_at`` (wall time) brought no record: no context waits for
        the fetches a paced partition would slow down, so the partitions pacing paused before
        then are fetched again at once. Without this, feedback that came in a burst after a
        quiet spell waited out the pause: paced at 200 ms, the state-layer benchmark (its
        feedback all sent after its decisions) did 20,510 events/s against 24,986 unpaced
        (medians of 4 one-off pairs), and with this 24,634 against 24,436 (10 pairs,
        higher in 5; 2026-11-29)."""
        for tp, (since, task, generation) in list(self._paced.items()):
            if since <= asked_at:
                self._resume_input(tp, task, generation)

    def _pause_input(self, tp: TopicPartition, task: PartitionTask, seconds: float,
                     paced: bool = False) -> None:
        """Fetch nothing of ``tp`` for ``seconds`` (or as long as it is paused already, if
        longer), then resume it, unless the partition changed hands by then. ``paced``: a
        pause of FetchPacing's, which :meth:`_resume_paced` may end early (an offset gap's
        wait is never cut short)."""
        if not paced:
            self._paced.pop(tp, None)
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if self._paused_until.get(tp, 0.0) >= until:
            return
        self._paused_until[tp] = until
        self.consumer.pause(tp)
        generation = self.ownership.generation
        if paced:
            self._paced[tp] = (time.time(), task, generation)
        loop.call_later(seconds, self._resume_input, tp, task, generation, until)

    def _resume_input(self, tp: TopicPartition, task: PartitionTask, generation: int,
                      until: float | None = None) -> None:
        """Fetch ``tp`` again (``until``: the pause that ends now, if it is still the latest),
        unless the partition changed hands since it was paused."""
        if until is not None and self._paused_until.get(tp) != until:
            return  # (paused since for longer, or resumed already)
        del self._paused_until[tp]
        self._paced.pop(tp, None)
        if self.ownership.generation == generation and (
            self.ownership.tasks.get(task.number) is task and task.active
        ):
            self.consumer.resume(tp)
            self.fetch_pacing.resumed(tp, time.time())

    def _adapt_fetch_wait(self, records: int) -> None:
        """After a poll and the records it brought: the fetch wait for what is unread now in
        the partitions fetched. Not in a paused one: it is read once resumed, and the answer
        of a fetch in flight as it was paused can show records it then drops; counted, they
        raised the wait while the contexts flowed (to 40 ms, in 1 of 3 rounds at 500/s, with
        feedback paced)."""
        answers = self.fetch_answers
        behind = any(
            answers.caught_up_at(tp, task.marks.get(stream, 0)) is None
            for task in self.ownership.tasks.values() if task.active
            for topic, stream in self.streams.items()
            if (tp := TopicPartition(topic, task.number)) not in self._paused_until
        )
        adapt_fetch_wait(self.consumer, self.fetch_wait, records, behind, reader="worker")

    # ------------------------------------------------------------------ commits
    async def _commit_loop(self) -> None:
        """Commit until the worker stops: at once when applied events produced a decision or
        a dead letter (a group commit: one commit in flight at a time, and what arrives
        while it is in flight goes into the next), when ``max_batch_events`` wait, and
        otherwise every interval (state, marks and timers of quiet partitions). Commits
        are pipelined (streams/committer.py): a commit's state goes out with the outputs of
        the one before; with no commit wanted, the outputs in flight are awaited alone. A
        commit in flight always completes (see commit())."""
        interval = self.settings.commit_interval_s
        while not self.stopping.is_set():
            started = time.monotonic()
            self._commit_wanted.clear()  # (what is applied from now on wants the next one)
            if not await self._without_failure(self._write):
                continue
            if not self._commit_wanted.is_set() and self.committer.in_flight:
                wanted = asyncio.ensure_future(self._commit_wanted.wait())
                acknowledged = asyncio.ensure_future(self.committer.outputs_acknowledged())
                await asyncio.wait({wanted, acknowledged}, return_when=asyncio.FIRST_COMPLETED)
                wanted.cancel()
                if not self._commit_wanted.is_set() and not await self._without_failure(
                    self._settle
                ):
                    continue
            left = interval - (time.monotonic() - started)
            if left > 0 and not self._commit_wanted.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._commit_wanted.wait(), timeout=left)

    async def _without_failure(self, step: Callable[[], Awaitable[None]]) -> bool:
        """Run a commit step; False when it failed (handled here: a lost state log stops or
        restarts partitions, a broker error waits and retries, a bug reads every partition
        back)."""
        try:
            await step()
            return True
        except StateLogLost as lost:
            self.ownership.state_lost(lost)
        except (KafkaError, OSError) as exc:
            if COMMIT_FAILURES.allow(time.monotonic()):
                log.warning("commit failed, retrying: %s%s", exc,
                            COMMIT_FAILURES.suppressed_note())
            await asyncio.sleep(min(1.0, 10 * self.settings.commit_interval_s))
        except Exception:  # a bug: the memory may now differ from the log; re-read it
            log.exception("commit failed: reading every partition back from the state log")
            async with self.committer.lock:
                owned = set(self.ownership.tasks)
                self.ownership.forget(owned)
            self.ownership.take_over(owned)
            await asyncio.sleep(1.0)
        return False

    def _unread(self, task: PartitionTask) -> int:
        """How many records of ``task``'s partition the broker last reported unread."""
        answers = self.fetch_answers
        return sum(
            answers.unread(TopicPartition(topic, task.number), task.marks.get(stream, 0))
            for topic, stream in self.streams.items()
        )

    def _caught_up(self, task: PartitionTask) -> dict[str, float | None]:
        """Per stream of ``task``: None while records wait unread, else the wall time at
        which the fetch was asked whose high watermark it has read to (streams/stream_time.py:
        not when the answer was processed, which a pause of this process can delay)."""
        answers = self.fetch_answers
        return {
            stream: answers.caught_up_at(
                TopicPartition(topic, task.number), task.marks.get(stream, 0)
            )
            for topic, stream in self.streams.items()
        }

    def _cut_all(self) -> list[PendingCommit]:
        """Every active partition's commit (those with something to write)."""
        self.wall = time.time()
        commits = [
            commit
            for task in list(self.ownership.tasks.values())
            if task.active and (commit := self._cut(task)) is not None
        ]
        done = time.time()
        for commit in commits:
            commit.cut_at, commit.cut_done_at = self.wall, done
        self._waiting_events = 0
        self._committed.set()
        return commits

    def _cut(self, task: PartitionTask) -> PendingCommit | None:
        commit = task.cut(self._caught_up(task))
        self.sink.state_keys.labels(str(task.number)).set(task.processor.store.key_count())
        for learner_id in commit.learners if commit is not None else ():
            task.export_gauges(learner_id)
        return commit

    async def commit(self) -> None:
        """Make everything applied so far durable, then publish what it produced (the
        committer's order: state, outputs, offsets), and wait until it is out; a commit that
        failed halfway is taken up again first (streams/committer.py)."""
        await self._write()
        await self._settle()

    async def _write(self) -> None:
        """Write what was applied since the last commit, while the outputs in flight go
        out; its own outputs are sent, not awaited (a pipelined commit)."""
        self._observe(await self.committer.commit(self._cut_all))

    async def _settle(self) -> None:
        """Wait for the outputs in flight."""
        self._observe(await self.committer.settle())

    def _observe(self, published: list[PendingCommit]) -> None:
        """Count the commits whose outputs are now out, and their latencies."""
        if not published:
            return
        self._published.set()
        self.broker_heard = time.monotonic()
        for commit in published:
            at, cut_at = commit.published_at, commit.cut_at
            self.sink.published([max(0.0, at - ts) for ts in commit.context_ts],
                                [max(0.0, at - fetched) for fetched in commit.decided_at],
                                [max(0.0, cut_at - fetched) for fetched in commit.decided_at])
            for reason in commit.dead_reasons:  # (counted once out, not when produced)
                self.sink.dead_lettered(reason)
            self.sink.commits.labels(str(commit.task.number)).inc()
            self.sink.state_log_bytes.inc(sum(len(v) for _, v in commit.state))
        # (commits published together were cut together, and their outputs acknowledged
        # together; each task's state landed on its own)
        first, landed_at = published[0], max(c.landed_at for c in published)
        self.sink.committed((max(0.0, first.cut_done_at - first.cut_at),
                             max(0.0, landed_at - first.cut_done_at),
                             max(0.0, first.published_at - landed_at)))
        self.sink.flush()

    def wall_now(self) -> float:
        """The wall clock as of the current batch (one lookup per batch, not per event)."""
        return self.wall

    async def _on_assigned(self, numbers: set[int]) -> None:
        if self._announced:
            before = self._owned_before
            lifecycle.info("rebalance: partitions %s (took %s, gave up %s)", sorted(numbers),
                           sorted(numbers - before), sorted(before - numbers))
        self._owned_before = frozenset(numbers)
        await self.ownership.on_assigned(numbers)

    def _announce_ready(self) -> None:
        """Every owned partition serves: say so, once (rebalances are logged after it)."""
        if self._announced:
            return
        self._announced = True
        s = self.settings
        lifecycle.info(
            "banditflow %s worker ready: bootstrap %s, group %s, topics %s.*, partitions %s, "
            "metrics %s://%s:%d/metrics, event loop %s", __version__, s.kafka.describe(),
            s.app_id, s.prefix, sorted(self.ownership.owned),
            "https" if s.web_config and s.web_config.cert_file else "http", s.web_host,
            s.web_port, type(asyncio.get_running_loop()).__module__.split(".")[0])

    @property
    def exit_status(self) -> int:
        """0, or EXIT_STATE_LOST when the broker lost the state (see --on-state-loss)."""
        return self.ownership.exit_status

    def ready(self) -> tuple[bool, str]:
        """Whether this worker owns partitions, has recovered all of them and hears from the
        broker (read from the HTTP thread: only immutable snapshots and floats, replaced on
        the loop thread)."""
        owned, active = self.ownership.owned, self.ownership.active
        silent = time.monotonic() - self.broker_heard
        if silent > BROKER_SILENCE_S:
            cause = f": {self.broker_error}" if self.broker_error else ""
            return False, f"no answer from the broker for {silent:.0f}s{cause}"
        if not owned:
            return False, "joining the consumer group"
        if owned - active:
            error = self.ownership.recovery_error
            error = f" ({error})" if error else ""
            return False, f"recovering partitions {sorted(owned - active)}{error}"
        return True, f"ready: partitions {sorted(owned)}"


def event_loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the event loop ``name`` (``WorkerSettings.event_loop``); None for
    asyncio's, also when uvloop is asked for and not installed (it is a dependency except on
    Windows). At 500 contexts/s with feedback on the embedded broker uvloop took the
    worker's CPU per decision from 0.662 to 0.624 ms (medians of 3 paired runs, lower in
    each, and in a fourth pair 0.636 -> 0.607), the latencies unchanged within their noise
    (2026-11-28; ``tests/benchmarks/bench_latency.py -- --event-loop asyncio`` runs the
    other)."""
    if name != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_worker(settings: WorkerSettings) -> int:
    """Run a worker until SIGTERM/SIGINT; its exit status (EXIT_STATE_LOST or 0)."""
    worker = Worker(settings)
    with asyncio.Runner(loop_factory=event_loop_factory(settings.event_loop)) as runner:
        runner.run(worker.run())
    return worker.exit_status

