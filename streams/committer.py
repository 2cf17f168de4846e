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

Dead letters are thus written (in the state record) before the state is acknowledged and
published after it, with the decisions: a fenced former owner's never go out. A commit that
fails halfway (the broker is gone) is taken up again by the next :meth:`Committer.commit`,
with the same records, before anything new is cut: a cut's changes exist nowhere else, and
its outputs must go out before a later commit hides them. A crash instead loses the
unfinished commit's memory: recovery reads the state log back and publishes the last
commit's outbox and dead letters again (:meth:`Committer.republish`), so a crash redoes at
most one commit's outputs, identical, and applies no input twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

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
    """What the committer needs of a producer (``AIOKafkaProducer`` is one): ``send``
    enqueues a record and returns, once enqueued, the awaitable of its acknowledgement, so
    that a commit enqueues all its records before waiting for any ack (one request)."""

    async def send(
        self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None
    ) -> Awaitable[Ack]: ...


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
        self.unfinished: list[PendingCommit] = []  # a commit that failed halfway
        self.stopped = False

    def stop_writes(self) -> None:
        """Write nothing more, not even the commit not finished: the broker lost the state,
        and whatever this worker wrote would land in a broker that no longer holds what it
        builds on, and confuse the worker started there next."""
        self.stopped = True
        self.unfinished = []

    def drop(self, numbers: set[int]) -> None:
        """Forget the unfinished commits of partitions ``numbers`` (their state is read back
        from the log; call with :attr:`lock` held, or where no commit runs)."""
        self.unfinished = [c for c in self.unfinished if c.task.number not in numbers]

    async def commit(self, cut: Callable[[], list[PendingCommit]]) -> list[PendingCommit]:
        """Take up the unfinished commit, else commit what ``cut()`` returns; the commits
        written and published (each task told so). Exceptions of the producer other than
        ``refused`` ones leave the commit unfinished, for the next call."""
        async with self.lock:
            if self.stopped:
                return []
            if not self.unfinished:
                self.unfinished = cut()
            commits = self.unfinished
            if not commits:
                return []
            unwritten = [c for c in commits if not c.written]
            for commit, offsets in zip(unwritten, await self._send_state(unwritten),
                                       strict=True):
                commit.written = commit.task.log.acked(offsets) or await (
                    self._write_past_stale(commit, offsets)
                )
                if not commit.written:
                    self.fenced(commit.task)
            written = [c for c in commits if c.written]
            await self._publish(self._outputs(
                (c.task.number, c.decisions, c.dead_letters) for c in written
            ))
            self.unfinished = []
            for commit in written:
                commit.task.committed(commit)
            self.offsets.commit({c.task.number: c.marks for c in written})
            return written

    async def close_outboxes(self, tasks: Iterable[PartitionTask]) -> None:
        """Before partitions leave cleanly: after a last commit that published outputs,
        write one more, empty, so that the next owner does not publish them again (it does
        when a worker died, not knowing whether they went out)."""
        async with self.lock:
            if self.unfinished or self.stopped:
                return  # (the last commit did not complete: its outputs must go again)
            commits = [c for task in tasks if (c := task.empty_commit()) is not None]
            for commit, offsets in zip(commits, await self._send_state(commits), strict=True):
                if commit.task.log.acked(offsets):
                    commit.task.committed(commit)

    async def republish(self, number: int, last: Commit) -> None:
        """Publish again partition ``number``'s last commit's outputs, read back from its
        state log (a recovery: they may not have gone out before a crash)."""
        await self._publish(self._outputs([(number, last.outbox, last.dead_letters)]))

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
        self, commits: Iterable[tuple[int, list[str], list[str]]]
    ) -> Iterable[tuple[str, int, bytes]]:
        """The records (topic, partition, value) that publish (partition, decisions, dead
        letters)."""
        for number, decisions, dead_letters in commits:
            for value in decisions:
                yield self.topics.decisions, number, value.encode()
            for value in dead_letters:
                yield self.topics.deadletter, number, value.encode()

    async def _send_state(self, commits: list[PendingCommit]) -> list[list[int]]:
        acks = [
            [
                await self.producer.send(self.state_topic, value, key,
                                         partition=commit.task.number)
                for key, value in commit.state
            ]
            for commit in commits
        ]
        return [[(await ack).offset for ack in batch] for batch in acks]

    async def _publish(self, records: Iterable[tuple[str, int, bytes]]) -> None:
        """Produce ``records`` and wait for every ack; one the broker can never take is
        replaced by a dead letter saying so."""
        sent = []
        for topic, partition, value in records:
            try:
                ack = await self.producer.send(topic, value, partition=partition)
            except Exception as exc:
                if not self.refused(exc):
                    raise
                ack = await self._unpublishable(topic, partition, value, exc)
            sent.append((topic, partition, value, ack))
        for topic, partition, value, ack in sent:
            try:
                await ack
            except Exception as exc:
                if not self.refused(exc):
                    raise
                await (await self._unpublishable(topic, partition, value, exc))

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
        (landed,) = await self._send_state([commit])
        if not writer.acked(landed):
            return False
        log.info("partition %d: %d record(s) of a former owner came before this commit; "
                 "written again after them", commit.task.number, len(between))
        return True
