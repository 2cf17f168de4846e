"""The worker's state log: each partition's state changes, written once per commit.

Topic ``<app_id>.state`` has one partition per input partition. A **commit** of partition p
is one record (a few when large, see ``PART_BYTES``) holding, zstd-compressed JSON:

- ``puts`` / ``deletes``: the latest value of every key the partition changed since the last
  commit (learner entries ``l/<id>``, decisions ``d/<id>/<event>``, holds ``h/<id>/<event>``);
  a learner entry (``PATCHED``) is written as a patch against its last written value
  (streams/patch.py, listed in ``patches``), so that what a commit writes is what changed,
  however often commits come, not the learner's whole state each time;
- ``marks``: the next offset of each input stream after the events the commit covers, and
  ``clock``: how far each stream had advanced in event time;
- ``outbox``: the decisions the commit's events produced, exactly as published, and
  ``dead_letters``: the dead letters they produced.

State and input offsets are in one record, so a crash loses a whole commit or nothing: a
restarted worker resumes each input stream at the marks of the last commit, and no event is
applied twice or lost, without Kafka transactions. Decisions and dead letters are published
only once their commit is acknowledged (so a fenced zombie's never are); those of the last
commit are published again on recovery, as they may not have gone out (one is then seen
twice, identical).

**Bounded recovery.** The broker may never compact (the embedded one does not), so the log is
read from a snapshot, not from its beginning. A snapshot is *fuzzy*: once the bytes written
since the last one outgrow it, commits also carry slices of every key that existed when the
snapshot began, until all are written. Every value in the log is a whole value or a patch of
the value its writer last wrote for that key, and a snapshot slice writes its keys whole
(and a writer writes a key whole before it patches it): so replaying the log in order from
the snapshot's first record rebuilds the state, whatever the commits in between changed (a
reader folds a key's patches onto its last whole value; a patch read before any whole value
of its key is one the snapshot's whole value follows, and is passed over). Each record's key
names the latest complete snapshot, so a recovery reads the last record, seeks to that
snapshot and reads to the end: O(state + what changed since), not O(history).

**Ownership.** A worker that takes over a partition writes a *claim* with a new epoch; records of
older epochs that come after it in the log (a zombie's late commit) are ignored by every reader.
A writer knows where its records must land (it is the only writer while it owns the partition);
a record acknowledged at another offset means someone else wrote, and the writer stops using
the partition until it has read the log again (``PartitionLog.acked``) — unless what came
before its records is only records of older epochs (a fenced zombie's, which no reader takes):
then it writes the same commit again after them (``PartitionLog.stale_only``, ``rewrite``).

**Tansu.** ListOffsets on the embedded broker answers the last *batch*'s base offset + 1 rather
than the last record's offset + 1 (tests/integration/test_state_layer.py names this). The
reader never needs that number to be exact: any record of the last batch names a complete
snapshot, and reading ends at the Fetch high watermark, which is right.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import zstandard

from banditflow.learners.base import JSON
from banditflow.processors.store import LEARNER, Changes, PartitionStore
from banditflow.streams.patch import apply, diff

log = logging.getLogger("banditflow.statelog")

FORMAT_VERSION = 3  # 3: patches
READABLE_VERSIONS = (2, 3)
# Keys written as patches: learner entries, rewritten by every commit that touches their
# learner (decisions and holds are written once or twice each, whole).
PATCHED = (LEARNER,)
# zstd at level 1: on commits of this log, a fifth smaller than zlib at level 1, three times
# faster to write and twice as fast to read back.
_COMPRESSOR = zstandard.ZstdCompressor(level=1)
_DECOMPRESSOR = zstandard.ZstdDecompressor()
# Compressed bytes per record: well below the usual 1 MB limits of brokers and producers.
PART_BYTES = 512 * 1024
# A snapshot starts when a recovery would read this many times the state (the last
# snapshot and the log since, against the state's size now) ...
SNAPSHOT_RATIO = 2.0
# ... but not before it would read this many bytes (a snapshot per commit would be wasteful),
SNAPSHOT_MIN_BYTES = 1 << 20
# and at least this often, so that a broker's retention (7 days on the topic banditflow
# creates) never removes the snapshot a recovery needs.
SNAPSHOT_MAX_AGE_S = 3600.0
# Keys of a snapshot written per commit (a slice), so that no commit stalls the worker.
SNAPSHOT_SLICE_KEYS = 2000


@dataclass
class Commit:
    """One commit of a partition's state, as written to and read from the state log.

    ``puts`` hold each value as JSON text: a reader keeps them as text and a recovery
    parses only the last value of each key, however often the log rewrote it.
    """

    epoch: int
    seq: int
    marks: dict[str, int]
    clock: dict[str, float]
    puts: list[tuple[str, bytes]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    outbox: list[str] = field(default_factory=list)
    claim: bool = False
    patches: list[str] = field(default_factory=list)  # keys of puts that are patches
    # Set on the commit that completes a snapshot: where it starts, how large it was and
    # when (wall clock).
    snapshot: dict[str, float] | None = None
    dead_letters: list[str] = field(default_factory=list)

    def header(self) -> JSON:
        return {
            "epoch": self.epoch,
            "seq": self.seq,
            "marks": self.marks,
            "clock": self.clock,
            "keys": [key for key, _ in self.puts],
            "lengths": [len(value) for _, value in self.puts],
            "deletes": self.deletes,
            "outbox": self.outbox,
            "dead_letters": self.dead_letters,
            "claim": self.claim,
            "snapshot": self.snapshot,
            "patches": self.patches,
        }

    def values(self) -> dict[str, Any]:
        """The puts, parsed (for audits and tests; those named in ``patches`` are patches)."""
        return {key: orjson.loads(value) for key, value in self.puts}


@dataclass(frozen=True)
class Header:
    """The record key: which commit a record belongs to, where its writer expected it to
    land, and the latest complete snapshot."""

    epoch: int
    seq: int
    part: int
    parts: int
    snapshot_at: int | None
    offset: int  # where the writer expected this record; elsewhere, nobody trusts it

    def encode(self) -> bytes:
        return orjson.dumps(
            {"v": FORMAT_VERSION, "e": self.epoch, "s": self.seq, "p": self.part,
             "n": self.parts, "snap": self.snapshot_at, "o": self.offset}
        )

    @classmethod
    def decode(cls, key: bytes) -> Header:
        raw = orjson.loads(key)
        if raw.get("v") not in READABLE_VERSIONS:
            raise StateLogError(f"state log record of format {raw.get('v')!r}, expected one "
                                f"of {READABLE_VERSIONS}: written by another banditflow "
                                "version?")
        return cls(raw["e"], raw["s"], raw["p"], raw["n"], raw["snap"], raw["o"])


class StateLogError(RuntimeError):
    """A state log that cannot be read back (the message says why and what to do)."""


class StateLogLost(StateLogError):
    """Records of a partition's state log are gone: the broker was emptied or replaced (a
    memory-storage broker restarted), the topic deleted and recreated, or retention removed a
    snapshot. ``end_offset`` is where the log ends now (a fresh start writes from there)."""

    def __init__(self, message: str, partition: int, end_offset: int | None = None) -> None:
        super().__init__(message)
        self.partition = partition
        self.end_offset = end_offset


def encode(commit: Commit, snapshot_at: int | None, offset: int) -> list[tuple[bytes, bytes]]:
    """The records (key, value) of one commit, in order. A commit is the JSON header (one
    line: orjson writes no newline), then the values' JSON text back to back.

    Each record names the latest snapshot complete without this commit (``snapshot_at``),
    except the last one: whoever reads it has the whole commit, so when the commit completes
    a snapshot, that is the one it names (an idle partition's tail then names it too). The
    records are expected at ``offset``, ``offset + 1``, ...
    """
    payload = _COMPRESSOR.compress(
        b"".join([orjson.dumps(commit.header()), b"\n", *(value for _, value in commit.puts)])
    )
    chunks = [payload[i : i + PART_BYTES] for i in range(0, len(payload), PART_BYTES)]
    last = len(chunks) - 1
    completes = commit.snapshot["start"] if commit.snapshot is not None else snapshot_at
    return [
        (
            Header(
                commit.epoch, commit.seq, i, len(chunks),
                completes if i == last else snapshot_at, offset + i,
            ).encode(),
            chunk,
        )
        for i, chunk in enumerate(chunks)
    ]


def decode(payload: bytes, into: LogReader | None = None) -> Commit:
    """The commit in ``payload``. With ``into``, its puts and deletes go straight into that
    reader's values instead of the returned commit (a recovery: nothing built per put but
    the value's bytes)."""
    raw = _DECOMPRESSOR.decompress(payload)
    end = raw.index(b"\n")
    header = orjson.loads(raw[:end])
    keys, lengths, position = header["keys"], header["lengths"], end + 1
    patches = header.get("patches", [])  # (format 2 has none)
    puts: list[tuple[str, bytes]] = []
    if into is None:
        for key, length in zip(keys, lengths, strict=True):
            puts.append((key, raw[position : position + length]))
            position += length
    else:
        patched = set(patches)
        for key, length in zip(keys, lengths, strict=True):
            following = position + length
            into.put(key, raw[position:following], key in patched)
            position = following
        for key in header["deletes"]:
            into.delete(key)
    return Commit(
        header["epoch"], header["seq"], header["marks"], header["clock"], puts,
        header["deletes"], header["outbox"], header["claim"], patches, header["snapshot"],
        header.get("dead_letters", []),  # (absent in logs written before they were kept)
    )


class LogReader:
    """Rebuilds a partition's state by reading its state log in offset order (``feed``)."""

    def __init__(self, keep_puts: bool = False) -> None:
        """``keep_puts``: return each commit with its puts, whole (audits: patches folded
        as they are read); a recovery needs only the latest value of each key."""
        self.keep_puts = keep_puts
        self._whole: dict[str, bytes] = {}  # each key's last whole value (JSON text)
        self._patches: dict[str, list[bytes]] = {}  # and the patches read since, in order
        # Keys whose patches came before any whole value (a log read from a snapshot: the
        # snapshot writes them whole further on; left over at the end, the log is damaged).
        self._unfounded: set[str] = set()
        self.epoch = -1
        self.last: Commit | None = None  # the last complete commit
        self.snapshot: dict[str, float] | None = None  # the last complete snapshot read
        self.end_offset = 0  # the offset after the last record read
        self.bytes_read = 0
        self.commits = 0
        self._parts: list[bytes] = []
        self._header: Header | None = None

    @property
    def values(self) -> dict[str, bytes]:
        """Every key's value as of the last commit read (JSON text, parsed by
        PartitionStore.load): patches are folded onto their whole value here, once, not as
        they are read."""
        if self._unfounded:
            raise StateLogError(
                f"the state log holds patches of {sorted(self._unfounded)[:5]} but no whole "
                "value for them since the snapshot it was read from: it is damaged"
            )
        for key in list(self._patches):
            self._fold(key)
        return self._whole

    def _fold(self, key: str) -> bytes:
        """``key``'s value with its patches applied (they are then dropped)."""
        patches = self._patches.pop(key, [])
        if not patches:
            return self._whole[key]
        try:
            value = orjson.loads(self._whole[key])
            for patch in patches:
                value = apply(value, orjson.loads(patch))
        except ValueError as exc:  # (orjson's decode error is one too)
            raise StateLogError(f"the state log's patches of {key!r} do not fit its "
                                f"value: {exc}") from None
        text = self._whole[key] = orjson.dumps(value)
        return text

    def put(self, key: str, value: bytes, patch: bool) -> None:
        """A key's value (JSON text), or with ``patch`` a patch of its value."""
        if not patch:
            self._whole[key] = value
            self._patches.pop(key, None)
            self._unfounded.discard(key)
        elif key in self._whole:
            self._patches.setdefault(key, []).append(value)
        else:
            self._unfounded.add(key)

    def delete(self, key: str) -> None:
        self._whole.pop(key, None)
        self._patches.pop(key, None)
        self._unfounded.discard(key)

    def feed(self, offset: int, key: bytes, value: bytes) -> Commit | None:
        """Read one record; returns the commit it completes, if any."""
        self.end_offset = offset + 1
        self.bytes_read += len(value)
        header = Header.decode(key)
        if header.offset != offset or header.epoch < self.epoch:
            # Not where its writer expected it (that writer had lost the partition: its
            # commit failed), or a former owner's write after a newer owner's claim.
            self._parts, self._header = [], None
            return None
        current = self._header
        if header.part == 0:
            self._parts, self._header = [value], header
        elif (
            current is not None
            and (header.epoch, header.seq) == (current.epoch, current.seq)
            and header.part == len(self._parts)
        ):
            self._parts.append(value)
        else:  # the rest of a commit whose first part is not here (an interrupted write)
            self._parts, self._header = [], None
            return None
        if len(self._parts) < header.parts:
            return None
        payload = value if len(self._parts) == 1 else b"".join(self._parts)
        self._parts, self._header = [], None
        if self.keep_puts:  # (an audit: each patch is folded as read, the puts made whole)
            commit = decode(payload)
            patched, puts = set(commit.patches), []
            for put_key, put_value in commit.puts:
                patch = put_key in patched
                self.put(put_key, put_value, patch)
                if patch and put_key in self._whole:
                    put_value = self._fold(put_key)
                    patched.discard(put_key)
                puts.append((put_key, put_value))
            commit.puts, commit.patches = puts, [key for key in commit.patches if key in patched]
            for deleted in commit.deletes:
                self.delete(deleted)
        else:
            commit = decode(payload, into=self)
        self.epoch = max(self.epoch, commit.epoch)
        if commit.snapshot is not None:
            self.snapshot = commit.snapshot
        self.last = commit
        self.commits += 1
        return commit


@dataclass
class _Dump:
    """A snapshot being written: the keys that existed when it began, and how far it got."""

    start_offset: int
    start_bytes: int
    keys: list[str]
    index: int = 0


class PartitionLog:
    """The writing side of one partition's state log: commits, snapshots, claims, fencing."""

    def __init__(self, partition: int, reader: LogReader) -> None:
        self.partition = partition
        counter = (reader.epoch >> 32) + 1 if reader.epoch >= 0 else 0
        # Unique per owner: two workers claiming at once never share an epoch.
        self.epoch = (counter << 32) | random.getrandbits(32)
        self.seq = 0
        self.next_offset = reader.end_offset  # where our next record must land
        self.snapshot_at = None if reader.snapshot is None else reader.snapshot["start"]
        self.snapshot_bytes = 0 if reader.snapshot is None else reader.snapshot["bytes"]
        self.snapshot_keys = len(reader.values)  # (about: what the last snapshot held)
        # Bytes of the log since the snapshot (all of it without one): what a recovery reads.
        self.log_bytes = reader.bytes_read
        self.snapshot_start_bytes = 0
        # When the latest snapshot was taken (wall clock, kept in the log: restarts must not
        # put it off); without one, the first commit takes one.
        self.snapshot_taken = (
            reader.snapshot.get("at", 0.0) if reader.snapshot is not None else float("-inf")
        )
        self._dump: _Dump | None = None
        # The text this writer last wrote of each PATCHED key (what its next patch is
        # against); a key it has not written yet is written whole first.
        # Set as records are built: records not acknowledged where expected are sent again
        # as they are (the worker's unfinished commit), or the partition and this writer are
        # dropped and read back; so what a writer built last is what a reader reads.
        self._written: dict[str, bytes] = {}
        self._inflight: tuple[int, int, dict[str, float] | None] | None = None
        self._built: tuple[Commit, dict[str, float] | None] | None = None  # (for rewrite)

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
    ) -> list[tuple[bytes, bytes]]:
        """The records of the next commit (changes, plus a snapshot slice when one is due)."""
        dump = self._dump
        if dump is None and self._snapshot_due(store.key_count()):
            dump = self._dump = _Dump(self.next_offset, self.log_bytes, store.log_keys())
        end = 0 if dump is None else min(len(dump.keys), dump.index + SNAPSHOT_SLICE_KEYS)
        sliced = [] if dump is None else dump.keys[dump.index : end]
        whole = set(sliced)  # a snapshot's keys are written whole
        puts: list[tuple[str, bytes]] = []
        patches: list[str] = []
        for key, value in changes.puts:
            text, patched = self._text(key, value, key in whole)
            puts.append((key, text))
            if patched:
                patches.append(key)
        for key in changes.deletes:
            self._written.pop(key, None)
        completed = None
        if dump is not None:
            written = {key for key, _ in changes.puts} | set(changes.deletes)
            for key in sliced:
                if key not in written:
                    value = store.value(key)
                    if value is not None:
                        puts.append((key, self._text(key, value, True)[0]))
            dump.index = end
            if end == len(dump.keys):
                completed = {
                    "start": dump.start_offset,
                    "bytes": self.log_bytes - dump.start_bytes,
                    "at": time.time(),
                }
        commit = Commit(
            self.epoch, self.seq, marks, clock, puts, changes.deletes, outbox,
            patches=patches, snapshot=completed, dead_letters=list(dead_letters),
        )
        return self._records(commit, completed)

    def _text(self, key: str, value: Any, whole: bool) -> tuple[bytes, bool]:
        """What to write for ``key``: its JSON text, or a patch against the value this
        writer last wrote for it (a ``PATCHED`` key, not ``whole``, when the patch is the
        smaller); and whether it is a patch."""
        text = value if isinstance(value, bytes) else orjson.dumps(value)
        if not key.startswith(PATCHED):
            return text, False
        last = self._written.get(key)
        # (its text: a copy that later changes of the live state cannot reach, and a
        # fraction of the memory of the parsed value; parsed again for the next patch)
        self._written[key] = text
        if last is None or whole:
            return text, False
        current = orjson.loads(text) if isinstance(value, bytes) else value
        patch = orjson.dumps(diff(orjson.loads(last), current))
        return (patch, True) if len(patch) < len(text) else (text, False)

    def _records(
        self, commit: Commit, completed: dict[str, int] | None
    ) -> list[tuple[bytes, bytes]]:
        records = encode(commit, self.snapshot_at, self.next_offset)
        size = sum(len(value) for _, value in records)
        self._inflight = (len(records), size, completed)
        self._built = (commit, completed)
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

    def _snapshot_due(self, keys: int) -> bool:
        """Whether a recovery now would read much more than the state: it reads the last
        snapshot and everything since; the state is about the snapshot's bytes scaled by
        how the number of keys changed since (it grows with the log, or shrinks when
        decisions expire)."""
        since = self.log_bytes - self.snapshot_start_bytes
        # (A snapshot of no keys, a new partition's first, says nothing about bytes per key:
        # scaling by it kept a growing log from ever being snapshotted again.)
        state = self.snapshot_bytes * keys / self.snapshot_keys if self.snapshot_keys else 0.0
        # (``since`` counts from the snapshot's first byte, so it holds the snapshot already:
        # adding snapshot_bytes again made every commit after a snapshot start the next one.)
        if since > max(SNAPSHOT_MIN_BYTES, SNAPSHOT_RATIO * state):
            return True
        return time.time() - self.snapshot_taken >= SNAPSHOT_MAX_AGE_S

    def wants_commit(self, keys: int) -> bool:
        """Whether to commit even with nothing new: a snapshot is being written or is due
        by age (an idle partition too: retention must never remove its only snapshot)."""
        return self._dump is not None or self._snapshot_due(keys)

    def acked(self, offsets: list[int]) -> bool:
        """Record where the last built records landed. False when they did not land where
        this owner's records must (someone else wrote to the partition): stop using it.
        Raises ``StateLogLost`` when they landed before (the log lost records)."""
        assert self._inflight is not None, "acked() without records in flight"
        count, size, completed = self._inflight
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
        self.next_offset += count
        self.seq += 1
        self.log_bytes += size
        if completed is not None and self._dump is not None:
            self.snapshot_at = completed["start"]
            self.snapshot_bytes = completed["bytes"] + size
            self.snapshot_keys = len(self._dump.keys)
            self.snapshot_start_bytes = self._dump.start_bytes
            self.snapshot_taken = completed["at"]
            self._dump = None
        return True


def snapshot_named_last(records: Iterable[tuple[int, bytes]]) -> tuple[bool, int | None]:
    """The snapshot that the last of ``records`` (offset, key) which landed where its writer
    expected names: (False, None) if none did, else (True, its start or None for none)."""
    found, pointer = False, None
    for offset, key in records:
        header = Header.decode(key)
        if header.offset == offset:
            found, pointer = True, header.snapshot_at
    return found, pointer
