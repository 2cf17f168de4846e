"""States the learners wrote before they declared their params and state records still load.

``data/learner_states_v1.json`` holds, for every algorithm (and the variants whose state has
other fields: SPS exact and bounded, SquareCB.G with and without warm starts, a logistic UCB,
the cascade LP policy), a state written by that code after 100 rounds, the decisions it made
next and its state after them (``data/make_learner_states_v1.py`` says how it was made). The
learner restored from it must write the very same JSON and make the same decisions: the same
actions, arms and sets, their floats equal but for the last bits of rounding (graph_cb's
compiled kernels sum in another order than numpy did).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from banditflow.learners.registry import learner_class
from banditflow.processors.redo import LazyGenerator

CASES: list[dict[str, Any]] = orjson.loads(
    (Path(__file__).parent / "data" / "learner_states_v1.json").read_bytes())
SEED = 7  # make_learner_states_v1.SEED


def as_json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


def assert_same_but_rounding(new: Any, old: Any, where: str = "output") -> None:
    """``new`` equals ``old`` as JSON, floats within 1e-12 (relative) of each other."""
    if isinstance(old, float) and isinstance(new, float):
        assert new == pytest.approx(old, rel=1e-12, abs=1e-15), where
    elif isinstance(old, dict) and isinstance(new, dict):
        assert new.keys() == old.keys(), where
        for key in old:
            assert_same_but_rounding(new[key], old[key], f"{where}.{key}")
    elif isinstance(old, list) and isinstance(new, list):
        assert len(new) == len(old), where
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            assert_same_but_rounding(a, b, f"{where}[{i}]")
    else:
        assert new == old and type(new) is type(old), where


@pytest.mark.parametrize("case", CASES, ids=lambda case: "-".join(
    [case["algorithm"], *sorted(set(case["params"]) & {"max_values", "warm_start", "link",
                                                        "case", "update"})]))
def test_an_earlier_state_loads_writes_the_same_and_decides_the_same(case: dict[str, Any]
                                                                     ) -> None:
    cls = learner_class(case["family"], case["algorithm"])
    learner = cls.from_state(case["params"], case["state"])
    assert as_json(learner.to_state()) == as_json(case["state"])
    outputs = [learner.decide(context, LazyGenerator(SEED, f"next{i}")).output
               for i, context in enumerate(case["contexts"])]
    assert_same_but_rounding(orjson.loads(as_json(outputs)), case["outputs"])
    assert_same_but_rounding(orjson.loads(as_json(learner.to_state())), case["state_after"],
                             "state")


def case_of(algorithm: str, **params: Any) -> dict[str, Any]:
    return next(case for case in CASES if case["algorithm"] == algorithm
                and all(case["params"].get(k) == v for k, v in params.items()))


def test_states_from_before_a_field_existed_load_with_its_earlier_value() -> None:
    bounded = case_of("sps", max_values=64)["state"]
    older = {k: v for k, v in bounded.items() if k not in ("dropped", "drop_floor", "weights")}
    sps = learner_class("conformal", "sps").from_state(case_of("sps", max_values=64)["params"],
                                                       older)
    assert sps.dropped == 0 and sps.drop_floor is None
    assert sps.weights == [1] * len(bounded["above"])  # each kept value counted once

    warm = case_of("squarecb_g")
    cold_start = {k: v for k, v in warm["state"].items() if k != "warm_start"}
    learner = learner_class("graph_cb", "squarecb_g").from_state(warm["params"], cold_start)
    assert learner.warm_start is not None and learner.warm_start.p is None
    assert "warm_start" in learner.to_state()
