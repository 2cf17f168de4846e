"""Patches of JSON values (streams/patch.py): exact for any pair of values, small for the
edits learner states make (sorted inserts, removals from the front, appends)."""

from __future__ import annotations

import bisect
import collections

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from banditflow.streams.patch import PatchBase, PatchBases, Scalars, apply, diff, frozen

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([0.5, 1.0, 2.0, -1.5]),
    st.sampled_from(["a", "b", ""]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=8), st.dictionaries(st.sampled_from("abcde"), inner, max_size=5)
    ),
    max_leaves=30,
)


def typed(value: object) -> object:
    """``value`` with every scalar paired with its type: equality that tells 1, 1.0 and
    True apart, as JSON does."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    return (type(value).__name__, value)


@settings(max_examples=500, deadline=None)
@given(json_values, json_values)
def test_applying_the_patch_gives_the_new_value_exactly(old: object, new: object) -> None:
    patch = orjson.loads(orjson.dumps(diff(old, new)))  # as the state log stores it
    assert typed(apply(old, patch)) == typed(new)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=12), st.lists(st.integers(0, 6), max_size=12))
def test_lists_of_repeated_elements_patch_exactly(old: list[int], new: list[int]) -> None:
    assert apply(old, diff(old, new)) == new


def test_a_value_of_another_type_is_not_taken_for_an_equal_one() -> None:
    old = {"n": 1, "flags": [1, 0, 1], "x": 2.0, "rows": [[1, 2], [3]]}
    new = {"n": True, "flags": [1.0, 0, True], "x": 2, "rows": [[1.0, 2], [3]]}
    assert typed(apply(old, diff(old, new))) == typed(new)
    assert typed(apply([[0], 1], diff([[0], 1], [[0.0], 1]))) == typed([[0.0], 1])


def test_a_learner_like_sorted_list_patches_in_proportion_to_what_changed() -> None:
    """An SPS learner's scores above its threshold: a sorted list of some thousand values
    gaining a few by sorted insert and losing some from the front."""
    rng = np.random.default_rng(3)
    old = sorted(rng.normal(size=1000).round(6).tolist())
    new = old[40:]
    for value in rng.normal(size=5).round(6).tolist():
        bisect.insort(new, value)
    state_old = {"n": 4000, "above": old, "tau": old[0]}
    state_new = {"n": 4005, "above": new, "tau": new[0]}
    patch = orjson.dumps(diff(state_old, state_new))
    assert apply(state_old, orjson.loads(patch)) == state_new
    assert len(patch) < 250 and 30 * len(patch) < len(orjson.dumps(state_new))


def test_a_patch_that_does_not_fit_the_value_is_refused() -> None:
    for old, patch in (([1, 2], ["l", [0, 5]]), ({"a": 1}, ["l", [0, 1]]), (3, ["d", {}, []])):
        try:
            apply(old, patch)
        except ValueError:
            continue
        raise AssertionError(f"{patch} applied to {old}")


@settings(max_examples=500, deadline=None)
@given(json_values, json_values)
def test_a_patch_between_frozen_values_gives_the_new_value_exactly(
    old: object, new: object
) -> None:
    """What the state log's writer does: its base and the new value are ``frozen`` (lists
    of scalars know their elements' type), the reader holds the value as it was written."""
    patch = orjson.loads(orjson.dumps(diff(frozen(old), frozen(new))))
    assert typed(apply(old, patch)) == typed(new)


def test_frozen_values_know_their_element_types_and_are_copies() -> None:
    live = {"above": [0.5, 1.5], "ids": [1, 2.0], "rows": [[1, 2], (3, 4)], "n": 3,
            "counts": [collections.Counter(a=1)], "named": [collections.OrderedDict(b=[2])]}
    base = frozen(live)
    assert base == {"above": [0.5, 1.5], "ids": [1, 2.0], "rows": [[1, 2], [3, 4]], "n": 3,
                    "counts": [{"a": 1}], "named": [{"b": [2]}]}
    assert isinstance(base["above"], Scalars) and base["above"].kind is float
    assert isinstance(base["ids"], Scalars) and base["ids"].kind is None  # of two types
    assert not isinstance(base["rows"], Scalars) and base["rows"][1].kind is int
    live["above"].append(2.5)
    live["rows"][0][0] = 9
    live["counts"][0]["a"] = 2  # (a dict of a subclass is no scalar: copied too)
    live["named"][0]["b"].append(3)
    assert base["above"] == [0.5, 1.5] and base["rows"][0] == [1, 2]
    assert base["counts"] == [{"a": 1}] and base["named"] == [{"b": [2]}]
    # equal and of one type: the same without comparing texts; of another type: not
    assert diff(base, frozen({**base, "n": 4})) == ["d", {"n": ["=", 4]}, []]
    assert diff(base, frozen({**base, "above": [0.5, 1.5], "ids": [1, 2]}))[1] == {
        "ids": ["l", [0, 1, [2]]]
    }


def test_patch_bases_keep_the_values_written_last_within_the_budget() -> None:
    bases = PatchBases(max_bytes=10)
    for key in "abcd":
        bases.put(key, PatchBase([key], 3))
    assert [bases.get(key) for key in "abcd"] == [None, *(PatchBase([k], 3) for k in "bcd")]
    bases.put("b", PatchBase(["y"], 3, grown=40))  # written again: now the newest
    bases.put("e", PatchBase(["z"], 2))
    assert [key for key in "abcde" if bases.get(key)] == ["b", "d", "e"]  # c was oldest
    assert bases.bytes == 8  # (their texts' sizes: what a patch may have added is not kept)
    bases.put("f", PatchBase(["f"], 11))  # larger than the budget: not kept, and keeps nothing
    assert bases.get("f") is None and bases.bytes == 8
    bases.pop("d")
    bases.pop("missing")
    assert bases.bytes == 5 and len(bases) == 2
