"""The declared params and state records (learners/declared.py): what a config may hold and
the clear error when it may not; a state's JSON and its way back, older states included."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.declared import Array, Params, State, dump, load, param


@dataclass(frozen=True, kw_only=True)
class Example(Params):
    size: int = param(ge=1, cap=100)
    rate: float = param(0.5, gt=0, le=1, what="step size")
    mode: str = param("fast", choices=("fast", "exact", "lazy"))
    flag: bool = False
    lenient: bool = param(True, convert=bool)
    weights: list[float] | None = None


@pytest.mark.parametrize(("given", "message"), [
    ({}, "parameter 'size' is required"),
    ({"size": 0}, "parameter 'size' must be >= 1, got 0"),
    ({"size": 101}, "parameter 'size' must be at most 100, got 101"),
    ({"size": 1, "rate": 0.0}, "parameter 'rate' (step size) must be in (0, 1], got 0.0"),
    ({"size": 1, "rate": float("nan")}, "parameter 'rate' must be finite"),
    ({"size": 1, "mode": "slow"}, "parameter 'mode' must be 'fast', 'exact' or 'lazy', got 'slow'"),
    ({"size": 1, "flag": "yes"}, "parameter 'flag' must be true or false, got 'yes'"),
    ({"size": 1, "sizes": 2}, "unknown parameter(s) 'sizes'; known: flag, lenient, mode,"),
])
def test_a_bad_parameter_is_named_with_its_rule(given: dict[str, Any], message: str) -> None:
    with pytest.raises(LearnerError) as raised:
        Example.read(given)
    assert str(raised.value).startswith(message)


def test_defaults_null_and_conversion() -> None:
    read = Example.read({"size": "7", "rate": None, "lenient": 0, "weights": [1, 2]})
    assert read == Example(size=7, rate=0.5, mode="fast", flag=False, lenient=False,
                           weights=[1, 2])
    assert Example.names() == {"size", "rate", "mode", "flag", "lenient", "weights"}
    assert Example.read_one({"rate": 0.25}, "rate") == 0.25


class Counter:
    """A component: restored in place by its load_state."""

    def __init__(self) -> None:
        self.count = 0

    def to_state(self) -> dict[str, int]:
        return {"count": self.count}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.count = int(state["count"])


@dataclass(kw_only=True)
class ExampleState(State):
    n: int
    tau: float | None
    recent: deque[float]
    counts: Annotated[np.ndarray, Array(written_as=int)]
    open: dict[str, tuple[int, list[int]]]
    counter: Counter
    added_later: int = 3


class Owner:
    def __init__(self) -> None:
        self.n, self.tau, self.recent = 2, None, deque([0.5, 0.25])
        self.counts = np.array([1.0, 4.0])
        self.open = {"7": (1, [0, 2])}
        self.counter = Counter()
        self.counter.count = 5
        self.added_later = 9


def test_a_state_round_trips_with_arrays_components_and_earlier_fields() -> None:
    owner = Owner()
    state = dump(owner, ExampleState)
    assert state == {"n": 2, "tau": None, "recent": [0.5, 0.25], "counts": [1, 4],
                     "open": {"7": [1, [0, 2]]}, "counter": {"count": 5}, "added_later": 9}
    restored = Owner()
    counter = restored.counter
    older = {k: v for k, v in state.items() if k != "added_later"}
    load(restored, ExampleState, {**older, "n": 3, "counter": {"count": 8}})
    assert restored.n == 3 and restored.recent == deque([0.5, 0.25])
    assert restored.counts.dtype == float and restored.counts.tolist() == [1.0, 4.0]
    assert restored.open == {"7": (1, [0, 2])} and restored.added_later == 3
    assert restored.counter is counter and counter.count == 8


def test_a_state_that_does_not_fit_changes_nothing() -> None:
    owner = Owner()
    state = dump(owner, ExampleState)
    with pytest.raises(LearnerError, match="state 'counts' has 3 values, expected 2"):
        load(owner, ExampleState, {**state, "n": 5, "counts": [1, 2, 3]})
    with pytest.raises(LearnerError, match="no 'n'"):
        load(owner, ExampleState, {k: v for k, v in state.items() if k != "n"})
    assert owner.n == 2
