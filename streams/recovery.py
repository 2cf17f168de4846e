"""Taking partitions over and letting them go: recovery from the state log, fencing, and
what the worker does when the broker lost the state.

:func:`restore` is the broker-free core (unit-tested on a simulated log,
tests/unit/test_committer.py): the last commit's outputs are published again, and the
previous commit's when the last says they were in flight as it was written (a crash may have
kept them from going out: a crash redoes at most two commits' outputs, identical), then the
new owner's claim is written, a new epoch that every reader prefers to the records of older
ones (a former owner's late writes).

:class:`Ownership` holds the partitions a worker owns and serves: on assignment it pauses
their inputs and recovers them in the background (from memory when nothing happened to them
since, a claim shows it; else from the state log, from its latest snapshot), then resumes
the inputs at the recovered marks; on revocation, a final commit; when a commit finds that
another owner wrote (:meth:`Ownership.fenced`), the partition is read back; when the broker
lost the state log (:meth:`Ownership.state_lost`), the worker stops with
:data:`EXIT_STATE_LOST` or, with ``--on-state-loss=fresh``, starts the partition empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from banditflow.streams.committer import Committer
from banditflow.streams.logfilters import Throttle
from banditflow.streams.metrics import PrometheusSink
from banditflow.streams.partition_task import PartitionTask
from banditflow.streams.settings import WorkerSettings
from banditflow.streams.statelog import StateLogError, StateLogLost
from banditflow.streams.statelog_kafka import read_partitions
from banditflow.streams.statelog_reader import LogReader

log = logging.getLogger("banditflow.worker")

# The worker's exit status when the broker lost its state (see --on-state-loss); a
# supervisor restarting it blindly would only meet the same loss again.
EXIT_STATE_LOST = 3

RECOVERY_FAILURES = Throttle(every_s=10.0)


async def restore(
    reader: LogReader, task: PartitionTask, committer: Committer, current: Callable[[], bool]
) -> bool:
    """Make ``task``, built from ``reader``, its partition's owner: publish the last commit's
    outputs again unless it was a claim (which has none), and the commit's before it when
    the last says so (a pipelined commit), then claim. Whether the claim landed where
    expected while ``current()`` still held (the assignment unchanged)."""
    last = reader.last
    if not current():
        return False
    if last is not None and not last.claim:
        again = [last]
        if last.republish_previous:
            if reader.previous is None:  # (a writer starts snapshots early to prevent this)
                raise StateLogError(
                    f"state log partition {task.number}: its last commit says the outputs "
                    "of the one before it may not be out, but the log read has no commit "
                    "before it: it is damaged"
                )
            again.insert(0, reader.previous)
        await committer.republish(task.number, again)
    return current() and await committer.claim(task)


class Ownership:
    """The partitions this worker owns (assigned by the group) and serves (recovered).

    ``owned`` and ``active`` are frozensets, replaced whole on the event loop: /ready reads
    them from the HTTP thread. ``recovered`` is called after each recovery that leaves every
    owned partition serving; ``commit`` makes everything applied durable (a revocation's last
    commit).
    """

    def __init__(
        self,
        settings: WorkerSettings,
        committer: Committer,
        consumer: AIOKafkaConsumer,
        reader: AIOKafkaConsumer,
        fence_reader: AIOKafkaConsumer,
        input_topics: dict[str, str],
        state_topic: str,
        sink: PrometheusSink,
        wall_clock: Callable[[], float],
        commit: Callable[[], Awaitable[None]],
        recovered: Callable[[], None],
        stopping: asyncio.Event,
    ) -> None:
        self.settings = settings
        self.committer = committer
        self.consumer = consumer
        self.reader = reader  # recoveries read the state log on it
        self.fence_reader = fence_reader  # commits read a former owner's few records on it
        self.streams = input_topics  # topic -> stream
        self.state_topic = state_topic
        self.sink = sink
        self.wall_clock = wall_clock
        self.commit = commit
        self.recovered = recovered
        self.stopping = stopping
        self.tasks: dict[int, PartitionTask] = {}
        self.owned: frozenset[int] = frozenset()
        self.active: frozenset[int] = frozenset()
        self.generation = 0
        self.recovery_error = ""  # why the last recovery attempt failed (for /ready)
        self.exit_status = 0
        self._recovering: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ the group's calls
    async def on_revoked(self, revoked: set[int]) -> None:
        self.generation += 1
        try:
            await self.commit()
            await self.committer.close_outboxes(self.tasks.values())
        except StateLogLost as lost:
            self.state_lost(lost)
            async with self.committer.lock:
                self.forget(set(self.tasks))
        except Exception as exc:  # what is not in the log must not be kept: read it again
            log.warning("commit before a rebalance failed (%s): the partitions will be read "
                        "back from the state log", exc)
            async with self.committer.lock:
                self.forget(set(self.tasks))
        for number in revoked:
            task = self.tasks.get(number)
            if task is not None:
                task.active = False
        self.owned = self.active = frozenset()

    async def on_assigned(self, numbers: set[int]) -> None:
        self.generation += 1
        self.owned = frozenset(numbers)
        for number in list(self.tasks):
            if number not in numbers:
                self.tasks.pop(number).unexport()
        if numbers:
            self.take_over(numbers)

    def stop_recovering(self) -> None:
        """Cancel a recovery under way (the worker stops)."""
        if self._recovering is not None:
            self._recovering.cancel()

    # ------------------------------------------------------------------ fencing
    def fenced(self, task: PartitionTask) -> None:
        """Another worker wrote to ``task``'s state log (a commit's records did not land where
        expected): drop it and read the partition back. (Called within a commit.)"""
        log.warning(
            "partition %d: another worker wrote to its state log; reading it again", task.number
        )
        self.forget({task.number})
        self.take_over({task.number})

    async def state_keys(self, number: int, offsets: list[int]) -> list[bytes] | None:
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

    def forget(self, numbers: set[int]) -> None:
        """Drop the in-memory state of ``numbers`` and any commit of theirs not finished:
        the state log is the truth, and they are read back from it when taken over. (Call
        with the commit lock held, or from a callback where no commit runs.)"""
        for number in numbers:
            task = self.tasks.pop(number, None)
            if task is not None:
                task.active = False
                task.unexport()
        self.active = self.active - numbers
        self.committer.drop(numbers)

    def state_lost(self, lost: StateLogLost, fatal: bool = False) -> None:
        """The broker no longer holds (part of) the state log: stop with EXIT_STATE_LOST, or
        with --on-state-loss=fresh start the partition over with empty state."""
        if self.settings.on_state_loss == "fresh" and not fatal:
            log.warning(
                "%s. Partition %d starts afresh (--on-state-loss=fresh): its learners, "
                "decisions and holds are gone; send the learners' configs again",
                lost, lost.partition,
            )
            self.forget({lost.partition})
            self.take_over({lost.partition})
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

    # ------------------------------------------------------------------ recovery
    def _input_tps(self, number: int) -> list[TopicPartition]:
        return [TopicPartition(topic, number) for topic in self.streams]

    def take_over(self, numbers: set[int]) -> None:
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
            task = self.tasks.get(number)
            kept = (
                task is not None
                and task.marks == task.committed_marks
                and not any(commit.task is task for commit in self.committer.unfinished)
            )
            if kept and await self._claim(task, generation):  # type: ignore[arg-type]
                todo.discard(number)
            else:
                async with self.committer.lock:
                    self.forget({number})
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
                    self.state_lost(lost)
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
        if self.owned and self.owned == self.active:
            self.recovered()

    async def _recover_one(
        self, number: int, reader: LogReader, generation: int, started: float
    ) -> bool:
        # Parsing the state is CPU work: on a thread, so that heartbeats go on.
        task = await asyncio.to_thread(
            PartitionTask, number, reader, self.settings, self.sink, self.wall_clock
        )
        if not await restore(reader, task, self.committer,
                             lambda: self._current(generation, number)):
            return False
        if not await self._activate(task, generation):
            return False
        self.sink.recovery_seconds.labels(str(number)).set(time.monotonic() - started)
        self.sink.recovery_bytes.labels(str(number)).set(reader.bytes_read)
        log.info(
            "partition %d recovered in %.2fs: %d commits, %d keys, %d bytes read",
            number, time.monotonic() - started, reader.commits, len(reader.values),
            reader.bytes_read,
        )
        return True

    async def _claim(self, task: PartitionTask, generation: int) -> bool:
        """Write ``task``'s claim and activate it, if the assignment has not changed and the
        claim lands where ``task``'s log expects it (nobody else wrote since)."""
        if not self._current(generation, task.number):
            return False
        try:
            claimed = await self.committer.claim(task)
        except (KafkaError, OSError) as exc:
            log.warning("partition %d: claim failed: %s", task.number, exc)
            return False
        return claimed and await self._activate(task, generation)

    async def _activate(self, task: PartitionTask, generation: int) -> bool:
        consumer = self.consumer
        tps = self._input_tps(task.number)
        unread = [tp for tp in tps if self.streams[tp.topic] not in task.marks]
        # Asked on the state reader's connection: on the consumer's own, the request would
        # queue behind its fetch long-poll.
        beginnings = await self.reader.beginning_offsets(unread) if unread else {}
        if not self._current(generation, task.number):
            return False  # reassigned meanwhile: whoever owns it now claims it again
        for tp in tps:
            offset = task.marks.get(self.streams[tp.topic])
            consumer.seek(tp, beginnings[tp] if offset is None else offset)
        self.tasks[task.number] = task
        task.active = True
        self.active = self.active | {task.number}
        consumer.resume(*tps)
        # Its learners' series, from the state it recovered (not only once each learns again).
        for learner_id in task.processor.store.learners:
            task.export_gauges(learner_id)
        return True
