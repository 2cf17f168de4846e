"""Reading the state log back: :class:`LogReader` folds a partition's records, in offset
order, into its state as of the last complete commit (format: streams/statelog.py)."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from banditflow.streams.patch import apply
from banditflow.streams.statelog import Commit, Header, StateLogError, decode


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
        self.previous: Commit | None = None  # the complete commit read before it
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
        self.previous, self.last = self.last, commit
        self.commits += 1
        return commit


def snapshot_named_last(records: Iterable[tuple[int, bytes]]) -> tuple[bool, int | None]:
    """The snapshot that the last of ``records`` (offset, key) which landed where its writer
    expected names: (False, None) if none did, else (True, its start or None for none)."""
    found, pointer = False, None
    for offset, key in records:
        header = Header.decode(key)
        if header.offset == offset:
            found, pointer = True, header.snapshot_at
    return found, pointer
