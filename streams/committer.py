"""The commit protocol (Kafka Streams' ``StreamTask.commit``), behind a small producer
interface: no Kafka client is imported here.

A commit of the tasks' :class:`~banditflow.streams.partition_task.PendingCommit` s goes, in
this order:

1. **state**: each partition's state log record, which carries with the state changes and
   the input marks the commit's outbox (its decisions) and its dead letters: the one atomic
   record a crash loses whole or not at all. Where a record lands shows whether another
   owner wrote meanwhile (fencing): a fenced partition's outputs never go out;
2. **outputs**: the decisions and dead letters of the partitions whose records landed where
   expected, each acknowledged (a record the broker can never take is replaced by an
   ``unpublishable`` dead letter: retrying it would stop every later commit);
3. **offsets**: the group is told how far each partition got (lag monitoring only).

**Pipelined.** A commit's outputs are sent as soon as its state is acknowledged, and the
next commit's state goes out with them, or beside them if they already left:
:meth:`Committer.commit` sends the outputs of the commit written before (when a send
failed), then the state of the next one, and only then waits, for both. So back-to-back
commits cost one broker round trip each, not two, and a decision does not wait behind the
outputs in flight (the worker's producer, streams/producer.py, sends the records of one turn
of the event loop as one request, without waiting for the requests in flight). A partition's
records are never in two requests at once: a commit's outputs go out once the outputs before
them are acknowledged, and its state once the state before it is. The state record of a
commit cut while the outputs of the task's previous one are not acknowledged says so
(``republish_previous``): a recovery publishes the outputs of both again.

Dead letters are thus written (in the state record) before the state is acknowledged and
published after it, with the decisions: a fenced former owner's never go out. A commit that
fails halfway (the broker is gone) is taken up again by the next :meth:`Committer.commit`,
with the same records, before anything new is cut: a cut's changes exist nowhere else, and
its outputs must go out before a later commit hides them. A crash instead loses the
unfinished commits' memory: recovery reads the state log back and publishes the last
commit's outbox and dead letters again, and those of the one before it when the last says
so (:meth:`Committer.republish`), so a crash redoes at most two commits' outputs, identical,
and applies no input twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Iterable
from typing import Any, Protocol

from banditflow.processors import Source
from banditflow.processors.records import dead_letter
from banditflow.streams.partition_task import PartitionTask, PendingCommit
from banditflow.streams.statelog import Commit
from banditflow.streams.topics import Topics

log = logging.getLogger("banditflow.worker")

# A commit that landed after more records of a former owner than this is not written again
# after them (see Committer._write_past_stale): the partition is read back instead.
MAX_STALE_RECORDS = 64
# The beginning of a record the broker refused, kept in its ``unpublishable`` dead letter.
REFUSED_BYTES_KEPT = 1024


class Ack(Protocol):
    """The broker's acknowledgement of one record (aiokafka's RecordMetadata is one)."""

    @property
    def offset(self) -> int: ...


class Producer(Protocol):
    """What the committer needs of a producer (streams/producer.py's, or aiokafka's):
    ``send`` enqueues a record and returns, once enqueued, the awaitable of its
    acknowledgement, so that a commit enqueues all its records before waiting for any ack
    (one request)."""

    async def send(
        self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None
    ) -> Awaitable[Ack]: ...


class _Sent:
    """A sent output's acknowledgement, with what was sent: a record the broker refuses is
    replaced by a dead letter that keeps its beginning."""

    def __init__(self, topic: str, value: bytes, ack: Awaitable[Ack]) -> None:
        self.topic, self.value, self.ack = topic, value, ack

    def __await__(self) -> Generator[Any, None, Ack]:
        return self.ack.__await__()


class GroupProgress(Protocol):
    """Where the group is told how far each partition got (streams/group.py's
    GroupOffsets)."""

    def commit(self, marks: dict[int, dict[str, int]]) -> None: ...


# The keys of the state log records of a partition at some offsets (None: not readable now).
StateKeys = Callable[[int, list[int]], Awaitable[list[bytes] | None]]


class Committer:
    """Writes the tasks' commits: state, then outputs, then offsets (see the module doc).

    ``refused(exc)`` says whether a send's exception means the broker can never take that
    record (too large); any other exception ends the commit, to be taken up again.
    ``fenced(task)`` is called when another owner wrote to the task's partition: the caller
    drops the task (with :meth:`drop`) and reads the partition back.
    """

    def __init__(
        self,
        producer: Producer,
        refused: Callable[[Exception], bool],
        topics: Topics,
        state_topic: str,
        offsets: GroupProgress,
        state_keys: StateKeys,
        fenced: Callable[[PartitionTask], None],
    ) -> None:
        self.producer = producer
        self.refused = refused
        self.topics = topics
        self.state_topic = state_topic
        self.offsets = offsets
        self.state_keys = state_keys
        self.fenced = fenced
        # One commit at a time; held too by whoever drops tasks (their commits with them).
        self.lock = asyncio.Lock()
        self.unfinished: list[PendingCommit] = []  # cut, state not acknowledged
        self.publishing: list[PendingCommit] = []  # written, outputs not acknowledged
        self.stopped = False

    @property
    def in_flight(self) -> bool:
        """Whether outputs of written commits are not acknowledged yet (see :meth:`settle`)."""
        return bool(self.publishing)

    @property
    def settled(self) -> bool:
        """Whether every commit cut has its outputs acknowledged."""
        return not self.unfinished and not self.publishing

    def stop_writes(self) -> None:
        """Write nothing more, not even the commit not finished: the broker lost the state,
        and whatever this worker wrote would land in a broker that no longer holds what it
        builds on, and confuse the worker started there next."""
        self.stopped = True
        self.unfinished = []
        self.publishing = []

    def drop(self, numbers: set[int]) -> None:
        """Forget the unfinished commits of partitions ``numbers`` (their state is read back
        from the log, and a recovery publishes their last outputs again; call with
        :attr:`lock` held, or where no commit runs)."""
        self.unfinished = [c for c in self.unfinished if c.task.number not in numbers]
        self.publishing = [c for c in self.publishing if c.task.number not in numbers]

    async def commit(self, cut: Callable[[], list[PendingCommit]]) -> list[PendingCommit]:
        """Take up the unfinished commit, else write what ``cut()`` returns, while the
        outputs of the commit written before go out; the commits whose outputs are now
        acknowledged (each task told so). This commit's outputs are sent, not awaited: the
        next call, or :meth:`settle`, waits for them. Exceptions of the producer other than
        ``refused`` ones leave the commits unfinished, for the next call."""
        async with self.lock:
            if self.stopped:
                return []
            if not self.unfinished:
                self.unfinished = cut()
            unwritten = [c for c in self.unfinished if not c.written]
            state_acks = [await self._send_state(commit) for commit in unwritten]
            if all(c.acks is not None for c in self.publishing):
                published = await self._await_outputs()
                await self._land(unwritten, state_acks)
            else:
                # After a failure: where the state lands first. Its record may have landed
                # the first time, so this one lands elsewhere, the task is fenced and a
                # recovery publishes the outputs in flight again: they must not also be
                # sent again here (a third time).
                await self._land(unwritten, state_acks)
                for commit in self.publishing:
                    if commit.acks is None:
                        commit.acks = await self._send_outputs(commit)
                published = await self._await_outputs()
            written = [c for c in self.unfinished if c.written]
            self.unfinished, self.publishing = [], written
            for commit in written:
                commit.task.written(commit)
                commit.acks = await self._send_outputs(commit)
            return published

    async def _land(self, commits: list[PendingCommit], acks: list[list[Awaitable[Ack]]]) -> None:
        """Wait for the state records of ``commits``; those that landed where their task
        expected are written, the others' tasks fenced."""
        for commit, sent in zip(commits, acks, strict=True):
            offsets = [(await ack).offset for ack in sent]
            commit.written = commit.task.log.acked(offsets) or await (
                self._write_past_stale(commit, offsets)
            )
            commit.landed_at = time.time()
            if not commit.written:
                self.fenced(commit.task)

    async def outputs_acknowledged(self) -> None:
        """Return once the outputs in flight are acknowledged or failed, leaving them to
        :meth:`commit` or :meth:`settle` (the acknowledgements are asyncio futures, as
        aiokafka's are: waiting for them here consumes nothing)."""
        futures = [
            asyncio.ensure_future(ack.ack if isinstance(ack, _Sent) else ack)
            for commit in self.publishing for ack in commit.acks or ()
        ]
        if futures:
            await asyncio.wait(futures)

    async def settle(self) -> list[PendingCommit]:
        """Wait for the outputs in flight; the commits whose outputs are now acknowledged.
        After a failure, nothing: the next :meth:`commit` takes the commits up."""
        async with self.lock:
            if self.stopped or self.unfinished or any(c.acks is None for c in self.publishing):
                return []
            return await self._await_outputs()

    async def close_outboxes(self, tasks: Iterable[PartitionTask]) -> None:
        """Before partitions leave cleanly: once the last commit's outputs are out, write
        one more, empty, so that the next owner does not publish them again (it does when a
        worker died, not knowing whether they went out)."""
        await self.settle()
        async with self.lock:
            if self.unfinished or self.publishing or self.stopped:
                return  # (the last commit did not complete: its outputs must go again)
            commits = [c for task in tasks if (c := task.empty_commit()) is not None]
            for commit in commits:
                commit.acks = await self._send_state(commit)
            for commit in commits:
                assert commit.acks is not None
                if commit.task.log.acked([(await ack).offset for ack in commit.acks]):
                    commit.task.committed(commit)

    async def republish(self, number: int, outputs: list[Commit]) -> None:
        """Publish again partition ``number``'s last commits' outputs, read back from its
        state log (a recovery: they may not have gone out before a crash)."""
        sent = [
            await self._send(topic, number, value)
            for commit in outputs
            for topic, value in self._outputs(commit.outbox, commit.dead_letters)
        ]
        await self._acknowledged(sent, number)

    async def claim(self, task: PartitionTask) -> bool:
        """Write ``task``'s claim (a new epoch, fencing former owners); whether it landed
        where ``task``'s log expected it (nobody else wrote since)."""
        if self.stopped:
            return False  # (it would be ignored anyway, landing where it did not expect)
        records = task.log.claim(dict(task.marks), dict(task.clock))
        acks = [
            await self.producer.send(self.state_topic, value, key, partition=task.number)
            for key, value in records
        ]
        return task.log.acked([(await ack).offset for ack in acks])

    def _outputs(
        self, decisions: list[str], dead_letters: list[str]
    ) -> Iterable[tuple[str, bytes]]:
        """The records (topic, value) that publish ``decisions`` and ``dead_letters``."""
        for value in decisions:
            yield self.topics.decisions, value.encode()
        for value in dead_letters:
            yield self.topics.deadletter, value.encode()

    async def _send_state(self, commit: PendingCommit) -> list[Awaitable[Ack]]:
        return [
            await self.producer.send(self.state_topic, value, key, partition=commit.task.number)
            for key, value in commit.state
        ]

    async def _send_outputs(self, commit: PendingCommit) -> list[Awaitable[Ack]]:
        """Send ``commit``'s outputs; their acknowledgements, to await."""
        return [
            await self._send(topic, commit.task.number, value)
            for topic, value in self._outputs(commit.decisions, commit.dead_letters)
        ]

    async def _await_outputs(self) -> list[PendingCommit]:
        """Wait for the acknowledgements of :attr:`publishing`, then tell the tasks and the
        group; the commits so published. On a failure, the commits stay, to be sent again."""
        published = self.publishing
        for commit in published:
            assert commit.acks is not None
            try:
                await self._acknowledged(commit.acks, commit.task.number)
            except BaseException:
                for unsent in published:
                    unsent.acks = None
                raise
        self.publishing = []
        published_at = time.time()
        for commit in published:
            commit.published_at = published_at
            commit.task.committed(commit)
        if published:
            self.offsets.commit({c.task.number: c.marks for c in published})
        return published

    async def _send(self, topic: str, partition: int, value: bytes) -> Awaitable[Ack]:
        """Send one output record; one the broker can never take is replaced by a dead
        letter saying so."""
        try:
            return _Sent(topic, value, await self.producer.send(topic, value,
                                                                partition=partition))
        except Exception as exc:
            if not self.refused(exc):
                raise
            return await self._unpublishable(topic, partition, value, exc)

    async def _acknowledged(self, acks: list[Awaitable[Ack]], partition: int) -> None:
        """Await ``acks``; a record the broker refused is replaced by a dead letter saying so."""
        for ack in acks:
            try:
                await ack
            except Exception as exc:
                if not self.refused(exc) or not isinstance(ack, _Sent):
                    raise
                await (await self._unpublishable(ack.topic, partition, ack.value, exc))

    async def _unpublishable(
        self, topic: str, partition: int, value: bytes, exc: Exception
    ) -> Awaitable[Ack]:
        log.error("the broker refused a %d-byte record for %s[%d]: %s", len(value), topic,
                  partition, exc)
        stub = dead_letter(
            "unpublishable", f"the broker refused this {len(value)}-byte record for {topic}: "
            f"{exc}", value, Source(topic, partition), time.time(), raw_kept=REFUSED_BYTES_KEPT,
        )
        return await self.producer.send(
            self.topics.deadletter, stub.model_dump_json().encode(), partition=partition
        )

    async def _write_past_stale(self, commit: PendingCommit, offsets: list[int]) -> bool:
        """When ``commit``'s records landed after records of older epochs only (a former
        owner, paused, resumed and not yet told it lost the partition, wrote a commit that
        every reader passes over), write the commit again after them: a read of those few
        records and one write, not a recovery of the partition. False when anything else
        came between (the partition is read again)."""
        writer = commit.task.log
        ours = set(offsets)
        end = max(offsets, default=-1) + 1
        between = [offset for offset in range(writer.next_offset, end) if offset not in ours]
        if not between or len(between) > MAX_STALE_RECORDS:
            return False
        keys = await self.state_keys(commit.task.number, between)
        if keys is None or not writer.stale_only(keys):
            return False
        commit.state = writer.rewrite(end)
        landed = [(await ack).offset for ack in await self._send_state(commit)]
        if not writer.acked(landed):
            return False
        log.info("partition %d: %d record(s) of a former owner came before this commit; "
                 "written again after them", commit.task.number, len(between))
        return True
