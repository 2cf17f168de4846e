"""Writing one partition's state log: commits (changes as whole values or patches, with a
snapshot slice when one is being written), claims, and fencing (see "Ownership" in
streams/statelog.py)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from banditflow.processors.store import Changes, KeyKind, PartitionStore
from banditflow.streams.patch import PatchBase, PatchBases, diff, frozen
from banditflow.streams.statelog import Commit, Header, StateLogError, StateLogLost, encode
from banditflow.streams.statelog_reader import LogReader
from banditflow.streams.statelog_snapshot import Snapshots

# Keys written as patches: learner entries, rewritten by every commit that touches their
# learner (decisions and holds are written once or twice each, whole).
PATCHED = (KeyKind.LEARNER,)
# The text size of the learners a partition's writer wrote last, whose values it keeps to write
# their next states as patches (see PatchBases): the learners written commit after commit fit.
PATCH_BASE_BYTES = 2 << 20


class PartitionLog:
    """The writing side of one partition's state log: commits, snapshots, claims, fencing."""

    def __init__(self, partition: int, reader: LogReader) -> None:
        self.partition = partition
        counter = (reader.epoch >> 32) + 1 if reader.epoch >= 0 else 0
        # Unique per owner: two workers claiming at once never share an epoch.
        self.epoch = (counter << 32) | random.getrandbits(32)
        self.seq = 0
        self.next_offset = reader.end_offset  # where our next record must land
        self.last_landed: int | None = None  # where our last landed commit or claim starts
        self.snapshots = Snapshots(reader)
        # The value this writer last wrote of the PATCHED keys it wrote last (what their
        # next patch is against); a key it has not written yet, or no longer keeps, is written
        # whole.
        # Set as records are built: records not acknowledged where expected are sent again
        # as they are (the worker's unfinished commit), or the partition and this writer are
        # dropped and read back; so what a writer built last is what a reader reads.
        self._written = PatchBases(PATCH_BASE_BYTES)
        # (records, bytes, the snapshot slice's share of them, the snapshot they complete)
        self._inflight: tuple[int, int, float, dict[str, float] | None] | None = None
        self._built: tuple[Commit, dict[str, float] | None, float] | None = None  # (rewrite)

    def claim(self, marks: dict[str, int], clock: dict[str, float]) -> list[tuple[bytes, bytes]]:
        """The first record of a new owner: fences every older epoch."""
        return self._records(Commit(self.epoch, self.seq, marks, clock, claim=True), None)

    def commit(
        self,
        store: PartitionStore,
        changes: Changes,
        marks: dict[str, int],
        clock: dict[str, float],
        outbox: list[str],
        dead_letters: Sequence[str] = (),
        republish_previous: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        """The records of the next commit (changes, plus a snapshot slice when one is due).
        ``republish_previous``: the outputs of the commit written before may not be out (a
        recovery from this one publishes them again, so a snapshot this commit starts is
        read from that commit on: the reader must see its outbox)."""
        read_from = self.next_offset
        if republish_previous and self.last_landed is not None:
            read_from = self.last_landed
        sliced = self.snapshots.next_slice(
            read_from, store, len(changes.puts) + len(changes.deletes)
        )
        whole = set(sliced)  # a snapshot's keys are written whole
        puts: list[tuple[str, bytes]] = []
        patches: list[str] = []
        for key, value in changes.puts:
            text, patched = self._text(key, value, key in whole)
            puts.append((key, text))
            if patched:
                patches.append(key)
        for key in changes.deletes:
            self._written.pop(key)
        written = {key for key, _ in changes.puts} | set(changes.deletes)
        for key in sliced:
            if key not in written:
                value = store.value(key)
                if value is not None:
                    puts.append((key, self._text(key, value, True)[0]))
        completed = self.snapshots.sliced()
        commit = Commit(
            self.epoch, self.seq, marks, clock, puts, changes.deletes, outbox,
            patches=patches, snapshot=completed, dead_letters=list(dead_letters),
            republish_previous=republish_previous,
        )
        return self._records(commit, completed, _slice_share(commit, whole))

    def _text(self, key: str, value: Any, whole: bool) -> tuple[bytes, bool]:
        """What to write for ``key``: its JSON text, or a patch against the value this
        writer last wrote for it (a ``PATCHED`` key, not ``whole``, when the patch is the
        smaller); and whether it is a patch."""
        if KeyKind.of(key) not in PATCHED:
            return (value if isinstance(value, bytes) else orjson.dumps(value)), False
        last = self._written.get(key)
        patch: bytes | None = None
        if last is not None and not whole:
            current = _base(value)
            patch = orjson.dumps(diff(last.value, current))
            grown = last.grown + len(patch)
            # A patch under half the text's size goes without the text being made (for an
            # SPS learner's few thousand scores, a third of a commit's time), as long as the
            # patches since it was made cannot have doubled it; else the text is made anew.
            if 2 * len(patch) < last.size and grown <= last.size:
                self._written.put(key, PatchBase(current, last.size, grown))
                return patch, True
        text = value if isinstance(value, bytes) else orjson.dumps(value)
        if len(text) > self._written.max_bytes:
            self._written.pop(key)  # (not kept: no copy to make)
        else:
            kept = current if patch is not None else _base(value)
            self._written.put(key, PatchBase(kept, len(text)))
        if patch is not None and len(patch) < len(text):
            return patch, True
        return text, False

    def _records(
        self, commit: Commit, completed: dict[str, float] | None, slice_share: float = 0.0
    ) -> list[tuple[bytes, bytes]]:
        records = encode(commit, self.snapshots.start, self.next_offset)
        size = sum(len(value) for _, value in records)
        self._inflight = (len(records), size, slice_share, completed)
        self._built = (commit, completed, slice_share)
        return records

    def stale_only(self, keys: Iterable[bytes]) -> bool:
        """Whether the records with ``keys`` (those that landed among or before the last
        built records, where this owner expected its own) are all of older epochs: a
        former owner's late writes, which every reader passes over after this owner's
        claim, so they change nothing this owner builds on."""
        try:
            return all(Header.decode(key).epoch < self.epoch for key in keys)
        except (StateLogError, ValueError, KeyError, TypeError):  # (not a header at all)
            return False

    def rewrite(self, offset: int) -> list[tuple[bytes, bytes]]:
        """The last built commit again, expected at ``offset`` (the log's end after records
        of older epochs took its place, see ``stale_only``): its first landing, elsewhere
        than its records say, is passed over by every reader."""
        assert self._built is not None and offset >= self.next_offset
        self.next_offset = offset
        return self._records(*self._built)

    def wants_commit(self, keys: int) -> bool:
        """Whether to commit even with nothing new: a snapshot is being written or is due
        by age (an idle partition too: retention must never remove its only snapshot)."""
        return self.snapshots.wants_commit(keys)

    def acked(self, offsets: list[int]) -> bool:
        """Record where the last built records landed. False when they did not land where
        this owner's records must (someone else wrote to the partition): stop using it.
        Raises ``StateLogLost`` when they landed before (the log lost records)."""
        assert self._inflight is not None, "acked() without records in flight"
        count, size, slice_share, completed = self._inflight
        self._inflight = None
        if offsets and offsets[0] < self.next_offset:
            # Offsets only grow, whoever writes: a record before the log's known end means
            # the records up to it are gone.
            raise StateLogLost(
                f"state log partition {self.partition}: a record written for offset "
                f"{self.next_offset} landed at {offsets[0]}, so the records this worker had "
                "written are gone (the broker was emptied or replaced, or the topic recreated)",
                self.partition,
            )
        if offsets != list(range(self.next_offset, self.next_offset + count)):
            return False
        self._built = None  # (landed: nothing to write again; it may hold every learner)
        self.last_landed = self.next_offset
        self.next_offset += count
        self.seq += 1
        self.snapshots.landed(size, slice_share, completed)
        return True


def _slice_share(commit: Commit, sliced: set[str]) -> float:
    """About the share of ``commit``'s bytes that the keys in ``sliced`` (a snapshot slice)
    and their values take: by their text against the commit's keys, values and outputs (the
    rest of the header, small beside them, left out)."""
    if not sliced:
        return 0.0
    slice_bytes = carried = 0
    for key, text in commit.puts:
        size = len(key) + len(text)
        carried += size
        if key in sliced:
            slice_bytes += size
    carried += sum(map(len, commit.outbox)) + sum(map(len, commit.dead_letters))
    return slice_bytes / carried if carried else 0.0


def _base(value: Any) -> Any:
    """What a writer keeps of a value (JSON, or its text) to patch against: a copy that later
    changes of the live state cannot reach."""
    return frozen(orjson.loads(value) if isinstance(value, bytes) else value)
