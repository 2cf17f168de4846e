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
  Appends, removals and sorted inserts (SPS's scores) come out a few ops long.

``diff`` is exact whatever it is given (``apply(old, diff(old, new)) == new`` as JSON: 1, 1.0
and True are told apart; of list elements, 0.0 and -0.0 are not); how small the patch is
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

from typing import Any

import orjson

Patch = list[Any]


def diff(old: Any, new: Any) -> Patch:
    """A patch turning ``old`` into ``new`` (both JSON values)."""
    if isinstance(old, dict) and isinstance(new, dict):
        changed = {
            key: ["=", value] if key not in old else diff(old[key], value)
            for key, value in new.items()
            if key not in old or not _same(old[key], value)
        }
        return ["d", changed, [key for key in old if key not in new]]
    if isinstance(old, list) and isinstance(new, list):
        ops = _list_ops(old, new)
        if ops is not None:
            return ["l", ops]
    return ["=", new]


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
    1 == 1.0 == True inside lists and objects too)."""
    if type(a) is not type(b) or a != b:
        return False
    return not isinstance(a, list | dict) or orjson.dumps(a) == orjson.dumps(b)


def _list_ops(old: list[Any], new: list[Any]) -> list[Any] | None:
    """The ops building ``new`` from runs of ``old`` and new elements, in one pass: where the
    two agree, the longest run that agrees is copied (found by galloping over slice
    comparisons, so a run costs a few comparisons in C, not a step per element); where they
    do not, an element of ``old`` that ``new`` lacks is dropped, and otherwise the element
    of ``new`` is new. None when the elements are not all hashable scalars (nested lists
    and objects: the list is then written whole)."""
    try:
        in_old, in_new = set(old), set(new)
    except TypeError:  # (an unhashable element)
        return None
    ops: list[Any] = []
    literal: list[Any] = []
    i = j = 0
    while j < len(new):
        run = _run(old, i, new, j)
        if run:
            if literal:
                ops.append(literal)
                literal = []
            ops += [i, i + run]
            i += run
            j += run
        elif i < len(old) and old[i] not in in_new and new[j] in in_old:
            i += 1  # dropped
        else:
            literal.append(new[j])
            j += 1
    if literal:
        ops.append(literal)
    return ops


def _run(old: list[Any], i: int, new: list[Any], j: int) -> int:
    """The length of the longest run ``old[i:i+n]`` equal to ``new[j:j+n]`` as JSON."""
    limit = min(len(old) - i, len(new) - j)
    good, step = 0, 1
    while good < limit and _same_run(old, i, new, j, good, min(limit, good + step)):
        good = min(limit, good + step)
        step *= 2
    if good == limit:
        return good
    bad = min(limit, good + step)
    while bad - good > 1:  # a run of ``good`` agrees, one of ``bad`` does not
        middle = (good + bad) // 2
        if _same_run(old, i, new, j, good, middle):
            good = middle
        else:
            bad = middle
    return good


def _same_run(old: list[Any], i: int, new: list[Any], j: int, start: int, stop: int) -> bool:
    """Whether ``old[i+start:i+stop]`` and ``new[j+start:j+stop]`` are equal as JSON (the
    elements are scalars here: equal values of the same types)."""
    a, b = old[i + start : i + stop], new[j + start : j + stop]
    return a == b and list(map(type, a)) == list(map(type, b))
