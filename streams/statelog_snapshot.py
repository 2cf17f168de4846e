"""The state log's snapshot policy: when a fuzzy snapshot starts, and which keys each commit
writes whole for it (see "Bounded recovery" in streams/statelog.py).

A snapshot starts once a recovery would read, past the last snapshot's span, a log much
larger than the state (and more than a minimum in all), or once the last one is old; it is
then written in slices, one per commit, of the keys that existed when it began.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from banditflow.processors.store import KeyListing, PartitionStore
from banditflow.streams.statelog_reader import LogReader

# A snapshot starts when the log written since the last one completed is this many times the
# state (what a recovery reads beyond that snapshot's span, against the state's size now:
# snapshots then add at most a 1 / SNAPSHOT_RATIO of the log) ...
SNAPSHOT_RATIO = 2.0
# ... but not before a recovery would read this many bytes (a snapshot per commit would be
# wasteful),
SNAPSHOT_MIN_BYTES = 1 << 20
# and at least this often, so that a broker's retention (7 days on the topic banditflow
# creates) never removes the snapshot a recovery needs.
SNAPSHOT_MAX_AGE_S = 3600.0
# Keys of a snapshot written per commit (a slice): at least SNAPSHOT_SLICE_KEYS, so that no
# small commit stalls the worker (in a worker at 500 decisions/s, a commit with a slice of
# 2,000 settled decisions took 10 to 15 ms to cut, one with 500 took 2 to 5 ms, 2026-11-28;
# the snapshot row of tests/benchmarks/bench_task_cpu.py measures the longest cut), and
# SLICE_KEYS_PER_CHANGE per key the commit changes, so that the other changes in the log a
# snapshot spans, which a recovery reads with it, stay about half the snapshot however large
# commits are (a backlog's commits change thousands of keys each).
SNAPSHOT_SLICE_KEYS = 500
SLICE_KEYS_PER_CHANGE = 2


@dataclass
class SnapshotInProgress:
    """A snapshot being written: the keys that existed when it began, how far it got, where
    the slice being written ends, and the bytes its slices took in the commits that landed."""

    start_offset: int
    start_log_bytes: int
    keys: KeyListing
    index: int = 0
    slice_end: int = 0
    bytes: float = 0.0


class Snapshots:
    """One partition's snapshots: the latest complete one (where it starts, its size, when it
    was taken), the log's bytes since, and the one being written.

    A snapshot's size is the bytes its own slices took, not the log between its first and
    last slice: that also holds the changes of the commits that carried the slices, which
    made the state look several times its size and put the next snapshot off (after the first
    snapshot of 1,000 learners created in a burst, one partition's recovery read 12 MB of log
    where the others read 1.2 to 2.5).
    """

    def __init__(self, reader: LogReader) -> None:
        last = reader.snapshot
        self.start = None if last is None else last["start"]
        self.size_bytes = 0.0 if last is None else last["bytes"]
        self.key_count = len(reader.values)  # (about: what the last snapshot held)
        # Bytes of the log since the snapshot's start (all of it without one): what a
        # recovery reads; of them, the snapshot's span, from its start to its completion. (A
        # snapshot written before its span was recorded: its bytes were its span.)
        self.log_bytes = reader.bytes_read
        self.start_log_bytes = 0
        self.span_bytes = 0 if last is None else last.get("span", last["bytes"])
        # When the latest snapshot was taken (wall clock, kept in the log: restarts must not
        # put it off); without one, the first commit takes one.
        self.taken_at = last.get("at", 0.0) if last is not None else float("-inf")
        self.writing: SnapshotInProgress | None = None

    def due(self, keys: int) -> bool:
        """Whether a recovery now would read much more than the state: the snapshot's span,
        then a log much larger than the state (about the snapshot's bytes scaled by how the
        number of keys changed since: it grows with the log, or shrinks when decisions
        expire)."""
        read = self.log_bytes - self.start_log_bytes
        # (A snapshot of no keys, a new partition's first, says nothing about bytes per key:
        # scaling by it kept a growing log from ever being snapshotted again.)
        state = self.size_bytes * keys / self.key_count if self.key_count else 0.0
        # (The span is added to what the state allows, not weighed against the state: a
        # span of mostly other changes would start the next snapshot at once. And
        # SNAPSHOT_MIN_BYTES bounds what a recovery reads, span included, when the state is
        # small.)
        if read > max(SNAPSHOT_MIN_BYTES, self.span_bytes + SNAPSHOT_RATIO * state):
            return True
        return time.time() - self.taken_at >= SNAPSHOT_MAX_AGE_S

    def wants_commit(self, keys: int) -> bool:
        """Whether to commit even with nothing new: a snapshot is being written or is due
        by age (an idle partition too: retention must never remove its only snapshot)."""
        return self.writing is not None or self.due(keys)

    def next_slice(self, offset: int, store: PartitionStore, changed: int) -> list[str]:
        """The keys the next commit (its first record expected at ``offset``, ``changed``
        keys changed) writes whole for a snapshot: the next slice of the one being written,
        which starts with this commit when one is due; none when no snapshot is being
        written."""
        writing = self.writing
        if writing is None and self.due(store.key_count()):
            writing = self.writing = SnapshotInProgress(offset, self.log_bytes,
                                                        store.key_listing())
        if writing is None:
            return []
        size = max(SNAPSHOT_SLICE_KEYS, SLICE_KEYS_PER_CHANGE * changed)
        writing.slice_end = min(len(writing.keys), writing.index + size)
        return store.listed_keys(writing.keys, writing.index, writing.slice_end)

    def sliced(self) -> dict[str, float] | None:
        """A commit carries the slice ``next_slice`` gave; when it completes the snapshot
        being written, what the commit records of it (where it starts; its bytes, and the
        log's from its start, before this commit; when), else None."""
        writing = self.writing
        if writing is None:
            return None
        writing.index = writing.slice_end
        if writing.index < len(writing.keys):
            return None
        return {
            "start": writing.start_offset,
            "bytes": writing.bytes,
            "span": self.log_bytes - writing.start_log_bytes,
            "at": time.time(),
        }

    def landed(
        self, size: int, slice_share: float, completed: dict[str, float] | None
    ) -> None:
        """A commit of ``size`` bytes landed, ``slice_share`` of them the snapshot slice it
        carried; ``completed``: the snapshot it completed."""
        self.log_bytes += size
        writing = self.writing
        if writing is None:
            return
        writing.bytes += slice_share * size
        if completed is not None:
            self.start = int(completed["start"])
            self.size_bytes = writing.bytes
            self.key_count = len(writing.keys)
            self.start_log_bytes = writing.start_log_bytes
            self.span_bytes = self.log_bytes - writing.start_log_bytes
            self.taken_at = completed["at"]
            self.writing = None
