"""States the learners wrote before they declared their params and state records still load.

``data/learner_states_v1.json`` holds, for every algorithm (and the variants whose state has
other fields: SPS exact and bounded, SquareCB.G with and without warm starts, a logistic UCB,
the cascade LP policy), a state written by that code after 100 rounds, the decisions it made
next and its state after them (``data/make_learner_states_v1.py`` says how it was made). The
learner restored from it must write the very same JSON and make the very same decisions.
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
    assert as_json(outputs) == as_json(case["outputs"])
    assert as_json(learner.to_state()) == as_json(case["state_after"])


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
