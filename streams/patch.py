"""What changed in a JSON value: a patch that turns the last written value into the new one.

The state log writes a learner's state whenever a commit touches the learner. Whole, that is
the learner's whole state per commit, and more commits (a group commit per decision) would
mean more bytes: an SPS learner with an exact horizon keeps up to (1 - alpha) T scores and
changes a few per commit. A patch holds only what changed, for any learner, with no help
from it (learners stay pure: ``to_state`` is all the state log asks of them):

- ``["=", value]``: the value, whole;
- ``["d", {key: patch}, [removed keys]]``: a JSON object, key by key (a new key's patch is
  ``["=", value]``; keys left out are unchanged);
- ``["l", ops]``: a list, from the old one's elements: ``ops`` is a flat list in which two
  integers ``start, stop`` copy ``old[start:stop]`` and a list is new elements, in order.
  Appends, removals and sorted inserts (SPS's scores) come out a few ops long. (A list
  holding lists or objects is written whole, ``["=", value]``.)

``diff`` is exact whatever it is given (``apply(old, diff(old, new)) == new`` as JSON: 1, 1.0
and True are told apart; 0.0 and -0.0 are not); how small the patch is
depends on how the value changed. The values are JSON as ``orjson`` reads it back: dicts
with string keys, lists, strings, numbers, booleans and None.

>>> old = {"n": 3, "above": [0.1, 0.4, 0.7], "tau": None}
>>> new = {"n": 5, "above": [0.4, 0.5, 0.7, 0.9], "tau": 0.2}
>>> patch = diff(old, new)
>>> patch
['d', {'n': ['=', 5], 'above': ['l', [1, 2, [0.5], 2, 3, [0.9]]], 'tau': ['=', 0.2]}, []]
>>> apply(old, patch) == new
True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import orjson

Patch = list[Any]


def diff(old: Any, new: Any) -> Patch:
    """A patch turning ``old`` into ``new`` (both JSON values, or values from ``frozen``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        changed = {
            key: ["=", value] if key not in old else diff(old[key], value)
            for key, value in new.items()
            if key not in old or not _same(old[key], value)
        }
        return ["d", changed, [key for key in old if key not in new]]
    if isinstance(old, list) and isinstance(new, list):
        old_scalars, old_kind = _elements(old)
        new_scalars, new_kind = _elements(new)
        if old_scalars and new_scalars:  # (a list of lists, a matrix: written whole)
            return ["l", _list_ops(old, new, old_kind is None or old_kind is not new_kind)]
    return ["=", new]


class Scalars(list[Any]):
    """A list of scalars (no list or object in it) that knows its elements' type: ``kind``,
    or None when they are of several types. A patch base holds its lists as these, so that
    the elements' types are looked at once, when the value is written, and not again at the
    next patch against it (for an SPS learner's few thousand scores that look is most of a
    patch's time)."""

    __slots__ = ("kind",)

    def __init__(self, values: Iterable[Any], kind: type | None) -> None:
        super().__init__(values)
        self.kind = kind


def frozen(value: Any) -> Any:
    """A copy of ``value`` (a JSON value) that later changes of ``value`` cannot reach, as a
    patch base: each list of scalars a :class:`Scalars`, tuples lists (as JSON reads them
    back)."""
    if isinstance(value, dict):
        return {key: frozen(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        scalars, kind = _elements(value)
        return Scalars(value, kind) if scalars else [frozen(item) for item in value]
    return value


# Immutable, and compared as JSON compares them when their types are the same. (Anything else,
# a subclass of these included, is not a scalar: a frozen value copies it, or it is written
# whole.)
_SCALARS = frozenset((str, int, float, bool, type(None)))


def _elements(values: list[Any] | tuple[Any, ...]) -> tuple[bool, type | None]:
    """Whether ``values`` are all scalars, and their type if they share one (else None)."""
    if isinstance(values, Scalars):
        return True, values.kind
    types = list(map(type, values))
    if types and types.count(types[0]) == len(types):  # (one type: one pass, in C)
        return types[0] in _SCALARS, types[0]
    return _SCALARS.issuperset(types), None


def apply(old: Any, patch: Patch) -> Any:
    """``old`` with ``patch`` applied (``old`` is not changed). Raises ``ValueError`` for a
    patch that does not fit ``old``."""
    kind = patch[0]
    if kind == "=":
        return patch[1]
    if kind == "d" and isinstance(old, dict):
        value = {key: item for key, item in old.items() if key not in patch[2]}
        for key, change in patch[1].items():
            value[key] = apply(old.get(key), change)
        return value
    if kind == "l" and isinstance(old, list):
        result: list[Any] = []
        ops, i = patch[1], 0
        while i < len(ops):
            op = ops[i]
            if isinstance(op, list):
                result.extend(op)
                i += 1
            else:
                start, stop = op, ops[i + 1]
                if not 0 <= start <= stop <= len(old):
                    raise ValueError(f"a list patch copies [{start}:{stop}] of {len(old)}")
                result.extend(old[start:stop])
                i += 2
        return result
    raise ValueError(f"a patch of kind {kind!r} does not fit a {type(old).__name__}")


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: of the same type, and a container with the same text (Python has
    1 == 1.0 == True inside lists and objects too). Two :class:`Scalars` of one type that
    are equal are the same (their texts differ at most in the sign of a zero)."""
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, dict):  # (the same keys: a == b)
        return all(_same(item, b[key]) for key, item in a.items())
    if isinstance(a, Scalars) and a.kind is not None and a.kind is b.kind:
        return True
    return not isinstance(a, list) or orjson.dumps(a) == orjson.dumps(b)


# Where two lists differ, how far a list patch looks for where they agree again: in windows
# of these sizes, the nearest first. (C scans by list.index, some nanoseconds an element;
# the first old score of an SPS learner trimmed at the front is nowhere in the new list, and
# in one window of 4,096 that miss cost most of the patch: 5,000 scores trimmed by 2, 69 us
# a patch, 27 us by windows, one-off timeit runs, 2026-11-30.) Edits further apart than the
# last window come out as new elements, and the list may then be written whole (its patch no
# smaller).
RESYNC_WINDOWS = (16, 256, 4096)


def _list_ops(old: list[Any], new: list[Any], typed: bool) -> list[Any]:
    """The ops building ``new`` from runs of ``old`` and new elements, in one pass: where the
    two agree, the longest run that agrees is copied (found by galloping over slice
    comparisons, so a run costs a few comparisons in C, not a step per element); where they
    do not, the nearer of the next ``old[i]`` in ``new`` (what comes before it is new) and
    the next ``new[j]`` in ``old`` (what comes before it was dropped) resumes the copying,
    else ``new[j]`` replaces ``old[i]``. Only runs found equal are copied, so the ops are
    exact (no hashing: floats hash into few buckets). The elements are scalars; ``typed``:
    of more than one type (else == decides, and no run's types are compared)."""
    ops: list[Any] = []
    literal: list[Any] = []
    i = j = 0
    # The last run's length, where the next run's end is looked for first: edits spread
    # over a list (sorted inserts) leave runs of about the same length.
    hint = 1
    agreeing = True  # False where a run just ended: old[i] and new[j] differ
    while j < len(new):
        if agreeing:
            run = _run(old, i, new, j, typed, hint)
            if run:
                if literal:
                    ops.append(literal)
                    literal = []
                ops += [i, i + run]
                i += run
                j += run
                hint = run
                agreeing = False
                continue
        agreeing = True
        if i >= len(old):
            literal += new[j:]
            break
        i, j = _resync(old, i, new, j, literal)
    if literal:
        ops.append(literal)
    return ops


def _resync(old: list[Any], i: int, new: list[Any], j: int, literal: list[Any]
            ) -> tuple[int, int]:
    """Where copying may resume after ``old[i]`` and ``new[j]`` differ: the nearer of the
    next ``old[i]`` in ``new`` (what comes before it goes to ``literal``) and the next
    ``new[j]`` in ``old`` (what comes before it was dropped), looked for window by window;
    else one past both (``new[j]`` to ``literal``)."""
    searched = 0
    for window in RESYNC_WINDOWS:
        inserted = _find(new, old[i], j + 1 + searched, j + 1 + window)
        reach = window if inserted is None else inserted - j - 1
        dropped = _find(old, new[j], i + 1 + searched, i + 1 + reach)
        if dropped is not None:
            return dropped, j
        if inserted is not None:
            literal += new[j:inserted]
            return i, inserted
        searched = window
    literal.append(new[j])
    return i + 1, j + 1


def _find(values: list[Any], value: Any, start: int, stop: int) -> int | None:
    """The first index of ``value`` in ``values[start:stop]`` (by ==), None if none."""
    if start >= stop:
        return None
    try:
        return values.index(value, start, stop)
    except ValueError:
        return None


def _run(old: list[Any], i: int, new: list[Any], j: int, typed: bool, hint: int = 1) -> int:
    """The length of the longest run ``old[i:i+n]`` equal to ``new[j:j+n]`` as JSON: equal
    by ==, found by galloping (from ``hint`` elements, when the run is that long), then
    (``typed``: the lists mix types) cut at the first element whose type differs (1, 1.0
    and True are ==)."""
    limit = min(len(old) - i, len(new) - j)
    if not limit or old[i : i + 1] != new[j : j + 1]:
        return 0
    good, bad = 1, 0
    probe = min(limit, hint)
    if probe > good:
        if old[i + good : i + probe] == new[j + good : j + probe]:
            good = probe
        else:
            bad = probe
    step = 1
    while not bad and good < limit:
        top = min(limit, good + step)
        if old[i + good : i + top] != new[j + good : j + top]:
            bad = top
        else:
            good = top
            step *= 2
    while bad - good > 1:  # a run of ``good`` agrees, one of ``bad`` does not
        middle = (good + bad) // 2
        if old[i + good : i + middle] == new[j + good : j + middle]:
            good = middle
        else:
            bad = middle
    if not typed:
        return good
    types_old = list(map(type, old[i : i + good]))
    types_new = list(map(type, new[j : j + good]))
    if types_old != types_new:
        good = next(k for k, (a, b) in enumerate(zip(types_old, types_new, strict=True))
                    if a is not b)
    return good


class PatchBase(NamedTuple):
    """What a writer keeps of a key it wrote: the value (from :func:`frozen`), the size of its
    text when last made, and the bytes of the patches written since (what the text may have
    grown by: a patch holds every element it adds)."""

    value: Any
    size: int
    grown: int = 0


class PatchBases:
    """The :class:`PatchBase` of each patched key a writer wrote, for the next patch against
    it, kept for the keys written most recently up to ``max_bytes`` of their texts' sizes in
    all. A key no longer kept is written whole next time: keeping every learner's last value
    would cost as much memory again as the learners (4 kB of text per SPS learner after one
    decision), while the keys a patch saves most on are those written commit after commit,
    which stay. (A value takes about twice its text's size in memory; it is kept parsed
    because reading the text back at every patch cost more than the patch.)"""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._bases: dict[str, PatchBase] = {}  # oldest first (dicts keep their order)

    def __len__(self) -> int:
        return len(self._bases)

    def get(self, key: str) -> PatchBase | None:
        return self._bases.get(key)

    def put(self, key: str, base: PatchBase) -> None:
        self.pop(key)
        if base.size > self.max_bytes:
            return
        self._bases[key] = base
        self.bytes += base.size
        while self.bytes > self.max_bytes:
            self.pop(next(iter(self._bases)))

    def pop(self, key: str) -> None:
        base = self._bases.pop(key, None)
        if base is not None:
            self.bytes -= base.size
