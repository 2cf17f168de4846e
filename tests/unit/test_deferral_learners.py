"""The deferral family's contract: registry, validation, baselines, outputs and state."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.deferral import ALGORITHMS
from banditflow.learners.registry import make_learner

COMMON = {"dim": 2, "budget": 3.0, "horizon": 20}
EXTRA: dict[str, dict[str, Any]] = {"best_reject": {"threshold": 0.5, "model_theta": [1.0, 0.0]}}


def build(algorithm: str, **params: Any) -> Any:
    return make_learner("deferral", algorithm, {**COMMON, **EXTRA.get(algorithm, {}), **params})


def test_registry_lists_the_algorithms() -> None:
    assert set(ALGORITHMS) == {"ucb", "neural_linear", "model_only", "arbitrary_human",
                               "best_reject"}
    for name, cls in ALGORITHMS.items():
        assert cls.family == "deferral" and cls.algorithm == name


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"dim": 0}, "'dim'"),
        ({"budget": -1.0}, "'budget'"),
        ({"horizon": 2}, "'horizon'"),
        ({"feedback": "partial"}, "'feedback'"),
        ({"c_max": 5.0}, "'c_max'"),
        ({"link": "probit"}, "'link'"),
        ({"cost_link": "probit"}, "'cost_link'"),
        ({"ridge": 0.0}, "'ridge'"),
        ({"delta": 1.0}, "'delta'"),
        ({"warmup": -1}, "'warmup'"),
        ({"reset_dual": "yes"}, "'reset_dual'"),
        ({"lambda": 1.0}, "unknown parameter"),
    ],
)
def test_bad_parameters(params: dict[str, Any], message: str) -> None:
    with pytest.raises(LearnerError, match=message):
        build("ucb", **params)


def test_baseline_parameters() -> None:
    with pytest.raises(LearnerError, match="'threshold' is required"):
        make_learner("deferral", "best_reject", COMMON)
    with pytest.raises(LearnerError, match="'model_theta'"):
        build("best_reject", model_theta=[1.0])
    with pytest.raises(LearnerError, match="'defer_probability'"):
        build("arbitrary_human", defer_probability=0.0)
    with pytest.raises(LearnerError, match="unknown parameter"):
        build("model_only", beta=1.0)


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({}, "'features'"),
        ({"features": [0.5]}, "length dim=2"),
        ({"features": [0.9, 0.9]}, "norm <= 1"),
        ({"features": [float("nan"), 0.0]}, "finite"),
        ({"features": ["a", 0.0]}, "numbers"),
    ],
)
def test_bad_contexts_leave_the_state_alone(context: dict[str, Any], message: str) -> None:
    learner = build("ucb")
    state = learner.to_state()
    with pytest.raises(LearnerError, match=message):
        learner.decide(context, np.random.default_rng(0))
    assert learner.to_state() == state


def test_bad_feedback_leaves_the_state_alone() -> None:
    learner = build("arbitrary_human", feedback="bandit")
    decided = learner.decide({"features": [0.6, 0.0]}, np.random.default_rng(0))
    state = learner.to_state()
    for feedback, message in [
        ({"part": "model", "model_reward": 1.0}, "not expected"),
        ({"part": "judge"}, "not expected"),
        ({"part": "human", "human_reward": 1.5, "human_cost": 0.1}, r"\[0, 1"),
        ({"part": "human", "human_reward": 1.0, "human_cost": 1.5}, "human_cost"),
        ({"part": "human", "human_reward": True, "human_cost": 0.5}, "finite number"),
        ({"part": "human", "human_reward": 1.0}, "human_cost"),
    ]:
        with pytest.raises(LearnerError, match=message):
            learner.learn(decided.pending, feedback)
        assert learner.to_state() == state


def test_model_only_never_defers() -> None:
    learner = build("model_only")
    rng = np.random.default_rng(0)
    for _ in range(50):
        decided = learner.decide({"features": [0.0, 1.0]}, rng)
        assert decided.output == {"defer": False, "reserved": 0.0}
        result = learner.learn(decided.pending, {"part": "model", "model_reward": 0.25})
        assert result.done and result.metrics == {"reward": 0.25, "cost": 0.0, "deferred": 0.0}
    assert learner.summary()["deferral_rate"] == 0.0 and learner.spent == 0.0


def test_arbitrary_human_spreads_deferrals_with_a_probability() -> None:
    learner = build("arbitrary_human", budget=100.0, horizon=1000, defer_probability=0.1)
    rng = np.random.default_rng(0)
    for _ in range(1000):
        decided = learner.decide({"features": [0.0, 1.0]}, rng)
        if decided.output["defer"]:
            learner.learn(decided.pending,
                          {"part": "human", "human_reward": 1.0, "human_cost": 0.5})
        learner.learn(decided.pending, {"part": "model", "model_reward": 0.0})
    assert 0.07 < learner.summary()["deferral_rate"] < 0.13


def test_best_reject_uses_theta_or_the_context_estimate() -> None:
    with_theta = build("best_reject")
    rng = np.random.default_rng(0)
    assert with_theta.decide({"features": [0.3, 0.0]}, rng).output["defer"]
    assert not with_theta.decide({"features": [0.7, 0.0]}, rng).output["defer"]
    from_context = make_learner("deferral", "best_reject", {**COMMON, "threshold": 0.5})
    decided = from_context.decide({"features": [0.7, 0.0], "model_reward_estimate": 0.1}, rng)
    assert decided.output["defer"] and decided.output["model_reward_estimate"] == 0.1
    for _ in range(COMMON["horizon"] - 1):
        from_context.decide({"features": [0.7, 0.0], "model_reward_estimate": 0.9}, rng)
    state = from_context.to_state()  # the next decision would start a new period
    with pytest.raises(LearnerError, match="model_reward_estimate"):
        from_context.decide({"features": [0.7, 0.0], "model_reward_estimate": "high"}, rng)
    assert from_context.to_state() == state


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_outputs_pending_state_and_summary_are_json(algorithm: str) -> None:
    learner = build(algorithm, feedback="full")
    rng = np.random.default_rng(0)
    pendings = []
    for t in range(30):
        decided = learner.decide({"features": [0.6, 0.0], "model_reward_estimate": 0.2}, rng)
        json.dumps(decided.output)
        json.dumps(decided.pending)
        if t % 3:
            pendings.append(decided.pending)  # left in flight: reservations in the state
        else:
            learner.learn(decided.pending, {"part": "model", "model_reward": 0.5})
            if decided.output["defer"]:
                learner.learn(decided.pending,
                              {"part": "human", "human_reward": 0.5, "human_cost": 0.5})
    summary = learner.summary()
    assert {"budget", "budget_spent", "budget_reserved", "budget_remaining",
            "deferral_rate"} <= set(summary)
    assert ("dual_price" in summary) == (algorithm in ("ucb", "neural_linear"))
    params = {**COMMON, **EXTRA.get(algorithm, {}), "feedback": "full"}
    state = json.loads(json.dumps(learner.to_state()))
    restored = ALGORITHMS[algorithm].from_state(params, state)
    assert restored.to_state() == learner.to_state()
    for pending in pendings:
        assert restored.expire(pending) == learner.expire(pending)
    assert restored.to_state() == learner.to_state()
    assert learner.reserved == 0.0 and learner.spent <= COMMON["budget"]
