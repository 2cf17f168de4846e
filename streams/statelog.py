"""The worker's state log: each partition's state changes, written once per commit; this
module is its format (the codec: :class:`Commit`, record keys, ``encode``/``decode``).

The state log's other parts: streams/statelog_reader.py folds records back into state,
streams/statelog_snapshot.py decides when to snapshot, streams/statelog_writer.py writes a
partition's commits and claims and fences, streams/statelog_kafka.py reads the log from the
broker.

Topic ``<app_id>.state`` has one partition per input partition. A **commit** of partition p
is one record (a few when large, see ``PART_BYTES``) holding, zstd-compressed JSON:

- ``puts`` / ``deletes``: the latest value of every key the partition changed since the last
  commit (learner entries ``l/<id>``, decisions ``d/<id>/<event>``, holds ``h/<id>/<event>``);
  a learner entry (``PATCHED`` in streams/statelog_writer.py) is written as a patch against
  its last written value (streams/patch.py, listed in ``patches``), so that what a commit
  writes is what changed, however often commits come, not the learner's whole state each
  time;
- ``marks``: the next offset of each input stream after the events the commit covers, and
  ``clock``: how far each stream had advanced in event time;
- ``outbox``: the decisions the commit's events produced, exactly as published, and
  ``dead_letters``: the dead letters they produced.

State and input offsets are in one record, so a crash loses a whole commit or nothing: a
restarted worker resumes each input stream at the marks of the last commit, and no event is
applied twice or lost, without Kafka transactions. Decisions and dead letters are published
only once their commit is acknowledged (so a fenced zombie's never are); those of the last
commit are published again on recovery, as they may not have gone out (one is then seen
twice, identical), and those of the commit before it when the last says
``republish_previous`` (it was written while they were in flight: a pipelined commit, see
streams/committer.py).

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
the partition until it has read the log again (``PartitionLog.acked`` in
streams/statelog_writer.py) — unless what came before its records is only records of older
epochs (a fenced zombie's, which no reader takes): then it writes the same commit again after
them (``PartitionLog.stale_only``, ``rewrite``).

**Tansu.** ListOffsets on the embedded broker answers the last *batch*'s base offset + 1 rather
than the last record's offset + 1 (tests/integration/test_state_layer.py names this). The
reader never needs that number to be exact: any record of the last batch names a complete
snapshot, and reading ends at the Fetch high watermark, which is right.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import zstandard

from banditflow.learners.base import JSON

FORMAT_VERSION = 3  # 3: patches
READABLE_VERSIONS = (2, 3)
# zstd at level 1: on commits of this log, a fifth smaller than zlib at level 1, three times
# faster to write and twice as fast to read back.
_COMPRESSOR = zstandard.ZstdCompressor(level=1)
_DECOMPRESSOR = zstandard.ZstdDecompressor()
# Compressed bytes per record: well below the usual 1 MB limits of brokers and producers.
PART_BYTES = 512 * 1024


class Fold(Protocol):
    """Where :func:`decode` may put a commit's values directly (a recovery's reader)."""

    def put(self, key: str, value: bytes, patch: bool) -> None: ...

    def delete(self, key: str) -> None: ...


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
    # Set on the commit that completes a snapshot: where it starts, how large it was (its
    # slices' bytes, and the log's from its start: both before this commit) and when (wall
    # clock).
    snapshot: dict[str, float] | None = None
    dead_letters: list[str] = field(default_factory=list)
    # The outputs of the commit before this one may not be out (they were in flight when
    # this one was cut): a recovery from this commit publishes them again too.
    republish_previous: bool = False

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
            "republish_previous": self.republish_previous,
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


def decode(payload: bytes, into: Fold | None = None) -> Commit:
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
        header.get("republish_previous", False),  # (absent before commits were pipelined)
    )
