"""NeuralLinear (deferral): state round-trip, determinism, budget safety, learning, no torch."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from banditflow.learners.base import LearnerError  # noqa: E402
from banditflow.learners.deferral import ALGORITHMS  # noqa: E402
from banditflow.learners.deferral.neural_linear import NeuralLinear  # noqa: E402
from banditflow.learners.deferral.opt import fractional_knapsack_opt  # noqa: E402
from banditflow.learners.deferral.scenarios import play, synthetic  # noqa: E402
from banditflow.learners.deferral.ucb import UCB  # noqa: E402
from banditflow.learners.registry import make_learner  # noqa: E402

SCENARIO = synthetic("uniform", horizon=400, seed=3)
PARAMS = {"dim": 20, "budget": 64.0, "horizon": 400, "window": 120, "retrain_every": 10,
          "train_steps": 5, "batch_size": 100}


def step(learner: NeuralLinear, t: int, held: list) -> dict:
    """Decide on round ``t`` of SCENARIO; send the model part now and the human part of a
    deferral one round later (kept in ``held``), so reservations are open across rounds."""
    decided = learner.decide({"features": SCENARIO.features[t].tolist()},
                             np.random.default_rng([7, t]))
    for pending, feedback in held:
        learner.learn(pending, feedback)
    held.clear()
    learner.learn(decided.pending,
                  {"part": "model", "model_reward": float(SCENARIO.model_reward[t])})
    if decided.output["defer"]:
        held.append((decided.pending, {"part": "human",
                                       "human_reward": float(SCENARIO.human_reward[t]),
                                       "human_cost": float(SCENARIO.human_cost[t])}))
    return decided.output


def test_registered_and_built_on_ucb() -> None:
    learner = make_learner("deferral", "neural_linear", PARAMS)
    assert ALGORITHMS["neural_linear"] is NeuralLinear and isinstance(learner, UCB)
    assert learner.algorithm == "neural_linear" and learner.family == "deferral"
    with pytest.raises(LearnerError, match="identity"):
        make_learner("deferral", "neural_linear", {**PARAMS, "link": "logistic"})
    with pytest.raises(LearnerError, match="window"):
        make_learner("deferral", "neural_linear", {**PARAMS, "window": 0})


def test_state_round_trip_reproduces_decisions() -> None:
    original = make_learner("deferral", "neural_linear", PARAMS)
    held: list = []
    t = 0
    while t < 150 or not held:  # checkpoint with a reservation open
        step(original, t, held)
        t += 1
    assert original.retrains > 0 and original.reserved > 0
    state = json.loads(json.dumps(original.to_state()))
    restored = NeuralLinear.from_state(PARAMS, state)
    assert restored.to_state() == original.to_state()
    held_copy = [(dict(p), dict(f)) for p, f in held]
    expected = [step(original, s, held) for s in range(t, t + 110)]
    again = [step(restored, s, held_copy) for s in range(t, t + 110)]
    assert again == expected
    assert restored.to_state() == original.to_state()


def test_deterministic_given_seed() -> None:
    first, second = (make_learner("deferral", "neural_linear", PARAMS) for _ in range(2))
    held_a: list = []
    held_b: list = []
    outputs_a = [step(first, t, held_a) for t in range(120)]
    outputs_b = [step(second, t, held_b) for t in range(120)]
    assert outputs_a == outputs_b and first.to_state() == second.to_state()
    other = make_learner("deferral", "neural_linear", {**PARAMS, "seed": 1})
    fresh = make_learner("deferral", "neural_linear", PARAMS)
    assert other.to_state()["networks"] != fresh.to_state()["networks"]


def test_state_bounded_by_window() -> None:
    learner = make_learner("deferral", "neural_linear", {**PARAMS, "budget": 200.0})
    held: list = []
    for t in range(300):
        step(learner, t, held)
    state = learner.to_state()
    assert len(state["history"]["model"]) == PARAMS["window"]
    assert 0 < len(state["history"]["human"]) <= PARAMS["window"]
    numbers = sum(len(row) for rows in state["history"].values() for row in rows)
    numbers += sum(np.size(layer) for net in state["networks"].values() for layer in net)
    d, h, window = 20, 50, PARAMS["window"]
    assert numbers <= 2 * window * (d + 2) + 3 * (h * (d + 2) + 1)


@pytest.mark.parametrize("loss", [0.0, 0.5, 1.0])
def test_never_exceeds_budget_with_lost_feedback(loss: float) -> None:
    """Periods of 50 rounds, B = 4: with human parts lost (timeouts charge c_max) or delayed,
    the settled spend plus open reservations of a period never exceeds B."""
    params = {**PARAMS, "budget": 4.0, "horizon": 50, "warmup": 30}
    learner = make_learner("deferral", "neural_linear", params)
    rng = np.random.default_rng(11)
    late: list = []
    for t in range(400):
        decided = learner.decide({"features": SCENARIO.features[t].tolist()},
                                 np.random.default_rng([1, t]))
        learner.learn(decided.pending,
                      {"part": "model", "model_reward": float(SCENARIO.model_reward[t])})
        if decided.output["defer"]:
            late.append(decided.pending)
        if late and rng.random() < 0.3:  # the oldest deferral's human part, or its timeout
            pending = late.pop(0)
            if rng.random() < loss:
                learner.expire(pending)
            else:
                learner.learn(pending, {"part": "human", "human_reward": 1.0,
                                        "human_cost": float(SCENARIO.human_cost[t])})
        assert learner.spent + learner.reserved <= params["budget"] + 1e-9
    assert learner.retrains > 0


def test_reaches_a_clear_fraction_of_opt() -> None:
    scenario = synthetic("uniform", horizon=1000, seed=1)
    opt = fractional_knapsack_opt(scenario.model_mean, scenario.human_mean,
                                  scenario.cost_mean, scenario.budget).value
    common = {"dim": 20, "budget": scenario.budget, "horizon": 1000}
    learner = make_learner("deferral", "neural_linear", common)
    result = play(learner, scenario, seed=0)
    baseline = play(make_learner("deferral", "model_only", common), scenario, seed=0)
    assert result.spent <= scenario.budget
    assert learner.retrains > 50
    share, model_only = result.expected_reward / opt, baseline.expected_reward / opt
    assert share > 0.75 and share > model_only + 0.05, (share, model_only)


def test_clear_error_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(LearnerError, match=r"install banditflow\[neural\]"):
        make_learner("deferral", "neural_linear", PARAMS)
    make_learner("deferral", "ucb", {"dim": 20, "budget": 64.0, "horizon": 400})
