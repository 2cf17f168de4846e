"""The in-memory state of one partition, its deadline index and its change capture.

A :class:`PartitionStore` holds the partition's learner entries, decision records and holds.
The processor changes them in place and marks what it changed; :meth:`PartitionStore.changes`
hands the latest value of every changed key to the state log once per commit (Kafka
Streams' record cache), so a learner touched by a thousand events is written once, and a
decision opened and settled between two commits is written once, settled.

Deadlines are indexed in one heap per kind, judged against the stream clock that kind
waits on (see :class:`banditflow.processors.processor.StreamTimes`): a tick costs what expires plus
O(log n) per expiry, not a scan of what is pending. Heap entries are not removed when a
record changes; a popped entry counts only if the record still has that deadline.

**Keys.** The store owns its key scheme; nobody else parses a key string. A decision or a
hold is stored under its :data:`EventKey` (:func:`event_key`, :func:`event_ids`); the state
log's keys are :class:`StateKey` values, encoded as a kind's prefix and the learner id (and
event id): ``c/<learner>``, ``l/<learner>``, ``d/<learner>/<event>``, ``s/<learner>/<event>``,
``h/<learner>/<event>`` (a learner id has no ``/``: schemas.events.LearnerId).

>>> store = PartitionStore(retention_s=60.0)
>>> key = event_key("shop", "e1")
>>> store.put_decision(key, DecisionRecord(1, 0.0, None, 30.0, {}, {}))
>>> [key for key, _ in store.due_decisions(29.0)], store.open_decisions
([], 1)
>>> [key for key, _ in store.due_decisions(30.0)]
['shop/e1']
>>> [key for key, value in store.changes().puts]
['d/shop/e1']
>>> store.settle(key, store.decisions[key], Settled.FEEDBACK, now=31.0)
>>> changes = store.changes()
>>> [key for key, _ in changes.puts], changes.deletes
(['s/shop/e1'], ['d/shop/e1'])
>>> StateKey.parse("s/shop/e1")
StateKey(kind=<KeyKind.SETTLED: 's/'>, learner_id='shop', event_id='e1')
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NewType

import orjson

from banditflow.learners.base import JSON
from banditflow.processors.records import DecisionRecord, Hold, HoldKind, LearnerEntry, Settled

EventKey = NewType("EventKey", str)
"""The store's key of a decision or a hold: ``<learner_id>/<event_id>``."""


def event_key(learner_id: str, event_id: str) -> EventKey:
    return EventKey(f"{learner_id}/{event_id}")


def event_ids(key: EventKey) -> tuple[str, str]:
    """The learner id and event id of ``key``."""
    learner_id, event_id = key.split("/", 1)
    return learner_id, event_id


def learner_of(key: EventKey) -> str:
    return key.split("/", 1)[0]


class KeyKind(StrEnum):
    """What a state-log key holds, and its prefix there: a learner's config and its learning
    part (apart, so that the config is not rewritten with every update), open decisions,
    settled decisions (apart, so that a recovery keeps those as text without parsing them),
    and holds."""

    CONFIG = "c/"
    LEARNER = "l/"
    OPEN = "d/"
    SETTLED = "s/"
    HOLD = "h/"

    @classmethod
    def of(cls, key: str) -> KeyKind:
        """The kind of the state-log key ``key`` (cheaper than a whole :meth:`StateKey.parse`);
        ValueError for a key this store never writes."""
        kind = _KINDS.get(key[:2])
        if kind is None:
            raise ValueError(f"unknown state key {key!r}")
        return kind


_KINDS = {kind.value: kind for kind in KeyKind}  # (KeyKind(x) is several times slower)
# (a lookup of an enum member costs as much as the rest of a key's value(): looked up once)
_CONFIG, _OPEN, _SETTLED = KeyKind.CONFIG, KeyKind.OPEN, KeyKind.SETTLED
_PER_LEARNER = (_CONFIG, KeyKind.LEARNER)
_DECISION = (_OPEN, _SETTLED)


@dataclass(frozen=True, slots=True)
class StateKey:
    """A state-log key read back: its kind, the learner it belongs to and, for a decision or
    a hold, the event (only the store writes keys)."""

    kind: KeyKind
    learner_id: str
    event_id: str | None = None

    @classmethod
    def parse(cls, key: str) -> StateKey:
        """The key the state log holds as ``key``; ValueError for one this store never
        writes."""
        kind = KeyKind.of(key)
        if kind in _PER_LEARNER:
            return cls(kind, key[2:])
        learner_id, _, event_id = key[2:].partition("/")
        return cls(kind, learner_id, event_id)


@dataclass
class Changes:
    """The latest value of every key changed since the last call (``None``: deleted)."""

    puts: list[tuple[str, JSON | bytes]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.puts or self.deletes)

    def learners_learned(self) -> list[str]:
        """The learners whose learning part (state, statistics) changed."""
        return [StateKey.parse(key).learner_id for key, _ in self.puts
                if KeyKind.of(key) is KeyKind.LEARNER]


@dataclass(frozen=True, slots=True)
class KeyListing:
    """The state-log keys of a partition at one moment, for a snapshot that writes them in
    slices: the learners' and holds' keys, then the decisions by their :data:`EventKey` alone,
    whose key (open or settled) is looked up as each slice is taken
    (:meth:`PartitionStore.listed_keys`). Copying the decisions' EventKeys is one loop in C;
    a Python step per decision to prefix it stalled the commit that began the snapshot (3.6
    ms at 8,000 keys, and a settled decision is kept ``retention_s``: 1.2 million at 2,000
    decisions/s)."""

    keys: list[str]
    decisions: list[str]

    def __len__(self) -> int:
        return len(self.keys) + len(self.decisions)


class PartitionStore:
    """Learner entries, decision records and holds of one partition."""

    def __init__(self, *, retention_s: float = 600.0, track_changes: bool = True) -> None:
        """``retention_s``: how long (stream time) a settled decision is kept, to re-emit the
        decision of a context sent again and to recognise duplicate feedback."""
        self.retention_s = retention_s
        self.learners: dict[str, LearnerEntry] = {}
        # Settled decisions read back from the state log stay JSON text until something asks
        # for them (decision()): most are only ever purged.
        self.decisions: dict[str, DecisionRecord | bytes] = {}
        self.holds: dict[str, Hold] = {}
        self.open_decisions = 0
        self.track_changes = track_changes
        self._changed: dict[str, None] = {}  # ordered sets: state-log keys ...
        self._changed_decisions: dict[str, None] = {}  # ... and decision keys
        self._open_logged: set[str] = set()  # decisions whose open version is in the log
        self._feedback_deadlines: list[tuple[float, str]] = []
        # (when, key): a settled decision's end of retention (the only entry its key gets
        # until it is purged, or its learner dropped)
        self._purge_times: list[tuple[float, str]] = []
        self._hold_deadlines: dict[HoldKind, list[tuple[float, str]]] = {
            kind: [] for kind in HoldKind
        }
        # learner id -> its contexts waiting for updates: a heap of (after, offset, key), so
        # that those waiting for the same count leave in the order they came; entries of
        # holds gone stay until popped or compacted (_waiting counts the holds still there)
        self._awaiting_updates: dict[str, list[tuple[int, int, str]]] = {}
        self._waiting: dict[str, int] = {}

    def _mark(self, key: str) -> None:
        if self.track_changes:
            self._changed[key] = None

    def _mark_decision(self, key: EventKey) -> None:
        if self.track_changes:
            self._changed_decisions[key] = None

    # ------------------------------------------------------------------ learners
    def put_learner(self, learner_id: str, entry: LearnerEntry) -> None:
        self.learners[learner_id] = entry
        self._mark(KeyKind.CONFIG + learner_id)
        self._mark(KeyKind.LEARNER + learner_id)

    def touch_learner(self, learner_id: str) -> None:
        self._mark(KeyKind.LEARNER + learner_id)

    def touch_config(self, learner_id: str) -> None:
        self._mark(KeyKind.CONFIG + learner_id)

    def drop_learner(self, learner_id: str) -> None:
        """Delete a learner with its decisions and holds (a config tombstone)."""
        if self.learners.pop(learner_id, None) is None:
            return
        self._mark(KeyKind.CONFIG + learner_id)
        self._mark(KeyKind.LEARNER + learner_id)
        prefix = learner_id + "/"
        for key in [k for k in self.decisions if k.startswith(prefix)]:
            self.drop_decision(key)
        for key in [k for k in self.holds if k.startswith(prefix)]:
            self.drop_hold(key)
        # (its decisions' purges go too: a settled decision is kept as text, which says
        # nothing of when it was settled, so a stale purge could take a decision of the same
        # id that a learner of the same id makes later)
        self._purge_times = [entry for entry in self._purge_times
                             if not entry[1].startswith(prefix)]
        heapq.heapify(self._purge_times)
        self._awaiting_updates.pop(learner_id, None)
        self._waiting.pop(learner_id, None)

    # ------------------------------------------------------------------ decisions
    def decision(self, key: EventKey) -> DecisionRecord | None:
        record = self.decisions.get(key)
        if isinstance(record, bytes):
            record = self.decisions[key] = DecisionRecord.from_json(orjson.loads(record))
        return record

    def put_decision(self, key: EventKey, record: DecisionRecord) -> None:
        """A new decision record (open), indexed by its feedback deadline."""
        self.decisions[key] = record
        self.open_decisions += 1
        heapq.heappush(self._feedback_deadlines, (record.deadline, key))
        self._mark_decision(key)

    def touch_decision(self, key: EventKey) -> None:
        self._mark_decision(key)

    def settle(self, key: EventKey, record: DecisionRecord, by: Settled, now: float) -> None:
        """Close ``record``: drop what learning and live OPE needed, keep it the store's
        retention for dedupe."""
        if record.open:
            self.open_decisions -= 1
        record.settled_by = by
        record.settled_at = now
        record.pending = None
        record.ope = None
        heapq.heappush(self._purge_times, (now + self.retention_s, key))
        self._mark_decision(key)

    def drop_decision(self, key: EventKey) -> None:
        record = self.decisions.pop(key, None)
        if record is not None:
            if isinstance(record, DecisionRecord) and record.open:
                self.open_decisions -= 1
            self._mark_decision(key)

    # ------------------------------------------------------------------ holds
    def put_hold(self, key: EventKey, hold: Hold) -> None:
        self._count_waiting(key, self.holds.get(key), -1)
        self.holds[key] = hold
        heapq.heappush(self._hold_deadlines[hold.kind], (hold.deadline, key))
        self._index_awaiting(key, hold)
        self._mark(KeyKind.HOLD + key)

    def _count_waiting(self, key: EventKey, hold: Hold | None, change: int) -> None:
        if hold is not None and hold.kind is HoldKind.AWAITING_UPDATES:
            learner_id = learner_of(key)
            self._waiting[learner_id] = self._waiting.get(learner_id, 0) + change

    def _index_awaiting(self, key: EventKey, hold: Hold) -> None:
        if hold.kind is not HoldKind.AWAITING_UPDATES or hold.after is None:
            return
        assert hold.context is not None
        self._count_waiting(key, hold, +1)
        learner_id = learner_of(key)
        heap = self._awaiting_updates.setdefault(learner_id, [])
        heapq.heappush(heap, (hold.after, hold.context.source.offset or 0, key))
        if len(heap) > 2 * self._waiting[learner_id] + 16:  # mostly holds decided at their
            heap[:] = [entry for entry in heap if self._awaits(*entry)]  # deadline: compact
            heapq.heapify(heap)

    def _awaits(self, after: int, _offset: int, key: EventKey) -> bool:
        hold = self.holds.get(key)
        return hold is not None and hold.kind is HoldKind.AWAITING_UPDATES and hold.after == after

    def next_awaiting(self, learner_id: str, updates: int) -> str | None:
        """The key of the first context of ``learner_id`` waiting for at most ``updates``
        updates (its hold stays until the caller drops it), None if there is none."""
        heap = self._awaiting_updates.get(learner_id)
        while heap and heap[0][0] <= updates:
            entry = heapq.heappop(heap)
            if self._awaits(*entry):
                return entry[2]
        if heap is not None and not heap:
            del self._awaiting_updates[learner_id]
        return None

    def held(self, learner_id: str, kind: HoldKind) -> list[str]:
        """The keys of ``learner_id``'s holds of ``kind`` (a scan: for config changes)."""
        prefix = f"{learner_id}/"
        return [key for key, hold in self.holds.items()
                if key.startswith(prefix) and hold.kind is kind]

    def awaits_updates(self, learner_id: str) -> bool:
        """Whether contexts of ``learner_id`` may be waiting for updates (O(1))."""
        return learner_id in self._awaiting_updates

    def touch_hold(self, key: EventKey) -> None:
        self._mark(KeyKind.HOLD + key)

    def drop_hold(self, key: EventKey) -> Hold | None:
        hold = self.holds.pop(key, None)
        if hold is not None:
            self._count_waiting(key, hold, -1)
            self._mark(KeyKind.HOLD + key)
        return hold

    # ------------------------------------------------------------------ deadlines
    def due_decisions(self, time: float) -> Iterator[tuple[str, DecisionRecord]]:
        """Open decisions whose feedback deadline is at or before ``time`` (stream time)."""
        heap = self._feedback_deadlines
        while heap and heap[0][0] <= time:
            deadline, key = heapq.heappop(heap)
            record = self.decisions.get(key)
            if isinstance(record, DecisionRecord) and record.open and record.deadline == deadline:
                yield key, record

    def due_holds(self, kind: HoldKind, time: float) -> Iterator[tuple[str, Hold]]:
        heap = self._hold_deadlines[kind]
        seen: set[str] = set()  # a hold put back with the same deadline has two entries
        while heap and heap[0][0] <= time:
            deadline, key = heapq.heappop(heap)
            hold = self.holds.get(key)
            valid = hold is not None and hold.kind is kind and hold.deadline == deadline
            if valid and key not in seen:
                seen.add(key)
                yield key, hold  # type: ignore[misc]

    def due_purges(self, time: float) -> Iterator[str]:
        """Settled decisions whose retention ended at or before ``time``."""
        heap = self._purge_times
        while heap and heap[0][0] <= time:
            _, key = heapq.heappop(heap)
            if key in self.decisions:
                yield key

    # ------------------------------------------------------------------ state log
    def changes(self) -> Changes:
        """The latest value of each key changed since the last call, then forget them."""
        changes = Changes()
        for key in self._changed:
            value = self.value(key)
            if value is None:
                changes.deletes.append(key)
            else:
                changes.puts.append((key, value))
        logged, decisions = self._open_logged, self.decisions
        for key in self._changed_decisions:
            record = decisions.get(key)
            if isinstance(record, DecisionRecord) and record.open:
                changes.puts.append((KeyKind.OPEN + key, record.to_json()))
                logged.add(key)
                continue
            if key in logged:  # its open version goes
                logged.discard(key)
                changes.deletes.append(KeyKind.OPEN + key)
            if isinstance(record, DecisionRecord):
                # Kept as the text written, as a recovery keeps it: a settled decision is
                # only read again for a duplicate or for truth (decision() parses it then),
                # and a snapshot copies text where it made each one's anew (5 us a key).
                # (A copy: orjson's own bytes keep its 4 KB buffer, 13x a decision's text.)
                text = decisions[key] = memoryview(orjson.dumps(record.to_json())).tobytes()
                changes.puts.append((KeyKind.SETTLED + key, text))
            elif record is None:
                changes.deletes.append(KeyKind.SETTLED + key)
        self._changed.clear()
        self._changed_decisions.clear()
        return changes

    def key_count(self) -> int:
        """How many state-log keys this partition has (``len(log_keys())``, in O(1))."""
        return 2 * len(self.learners) + len(self.decisions) + len(self.holds)

    def key_listing(self) -> KeyListing:
        """Every state-log key of this partition now, listed for a snapshot."""
        learners = self.learners
        return KeyListing(
            [*map(KeyKind.CONFIG.__add__, learners), *map(KeyKind.LEARNER.__add__, learners),
             *map(KeyKind.HOLD.__add__, self.holds)],
            list(self.decisions),
        )

    def listed_keys(self, listing: KeyListing, start: int, stop: int) -> list[str]:
        """The state-log keys of ``listing``'s entries ``start`` to ``stop`` as they are now:
        a decision under its open or settled key, none for one gone since."""
        keys = listing.keys[start:stop]
        named = len(listing.keys)
        decisions = self.decisions
        for name in listing.decisions[max(0, start - named) : max(0, stop - named)]:
            record = decisions.get(name)
            if record is not None:
                is_open = isinstance(record, DecisionRecord) and record.open
                keys.append((_OPEN if is_open else _SETTLED) + name)
        return keys

    def log_keys(self) -> list[str]:
        """Every state-log key of this partition."""
        listing = self.key_listing()
        return self.listed_keys(listing, 0, len(listing))

    def value(self, key: str) -> JSON | bytes | None:
        """The value of a state-log key (JSON, or JSON text), ``None`` when it does not
        exist."""
        kind, name = key[:2], key[2:]
        if kind in _DECISION:  # (most keys, first)
            record = self.decisions.get(name)
            if isinstance(record, bytes):
                return record if kind == _SETTLED else None
            if record is None or record.open != (kind == _OPEN):
                return None
            return record.to_json()
        if kind in _PER_LEARNER:
            entry = self.learners.get(name)
            if entry is None:
                return None
            return entry.config_json() if kind == _CONFIG else entry.to_json()
        hold = self.holds.get(name)
        return None if hold is None else hold.to_json()

    @classmethod
    def load(
        cls,
        values: Iterable[tuple[str, bytes]],
        retention_s: float,
        now: float = 0.0,
        *,
        track_changes: bool = True,
    ) -> PartitionStore:
        """A store holding ``values`` (JSON text, from the state log), with its deadline
        index rebuilt. Settled decisions stay text (not even parsed): each is purged
        ``retention_s`` after ``now`` (stream time), at the latest a retention late."""
        store = cls(retention_s=retention_s, track_changes=track_changes)
        configs: dict[str, JSON] = {}
        learning: dict[str, JSON] = {}
        purge_at = now + retention_s
        for key, raw in values:
            kind, name = key[:2], key[2:]
            if kind == KeyKind.SETTLED:
                store.decisions[name] = raw
                store._purge_times.append((purge_at, name))
            elif kind == KeyKind.OPEN:
                record = DecisionRecord.from_json(orjson.loads(raw))
                store.decisions[name] = record
                store.open_decisions += 1
                store._open_logged.add(name)
                store._feedback_deadlines.append((record.deadline, name))
            elif kind == KeyKind.CONFIG:
                configs[name] = orjson.loads(raw)
            elif kind == KeyKind.LEARNER:
                learning[name] = orjson.loads(raw)
            elif kind == KeyKind.HOLD:
                hold = Hold.from_json(orjson.loads(raw))
                store.holds[name] = hold
                store._hold_deadlines[hold.kind].append((hold.deadline, name))
                store._index_awaiting(name, hold)
            else:
                StateKey.parse(key)  # raises: not a key of this store
        for name, config in configs.items():
            store.learners[name] = LearnerEntry.from_json(config, learning[name])
        for heap in (
            store._feedback_deadlines, store._purge_times, *store._hold_deadlines.values()
        ):
            heapq.heapify(heap)
        return store
