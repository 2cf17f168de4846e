"""Event handling shared by every prob_graph learner, and the UCB-N / Thompson baselines."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.prob_graph import ALGORITHMS, UCBN, ThompsonSampling
from banditflow.learners.prob_graph.scenarios import Environment, loopless_clique, simulate
from banditflow.learners.registry import make_learner

PARAMS: dict[str, Any] = {"arms": 3, "edges": [[0, 1, 1.0], [1, 0, 0.5], [1, 2, 0.5], [2, 0, 1.0]]}


@pytest.fixture(params=sorted(ALGORITHMS))
def algorithm(request: pytest.FixtureRequest) -> str:
    return request.param


def test_registry_builds_every_algorithm(algorithm: str) -> None:
    learner = make_learner("prob_graph", algorithm, PARAMS)
    assert learner.family == "prob_graph"
    assert learner.algorithm == algorithm


def test_any_context_is_accepted(algorithm: str) -> None:
    learner = make_learner("prob_graph", algorithm, PARAMS)
    decided = learner.decide({"segment": "eu", "anything": [1, 2]}, np.random.default_rng(0))
    assert set(decided.output) == {"arm", "branch"}
    assert decided.pending == {"decision": 1, "arm": decided.output["arm"]}


def test_partial_feedback_is_applied_once_per_arm(algorithm: str) -> None:
    learner = make_learner("prob_graph", algorithm, PARAMS)
    decided = learner.decide({}, np.random.default_rng(0))
    arm = decided.output["arm"]
    revealed = [j for j in range(3) if learner.setting.probabilities[arm, j] > 0]
    first, *rest = revealed
    learned = learner.learn(decided.pending, {"rewards": {str(first): 1.0}, "complete": False})
    assert not learned.done
    assert learner.summary()["in_flight"] == 1.0
    repeat = {str(j): 5.0 for j in revealed}
    learned = learner.learn(decided.pending, {"rewards": repeat, "complete": True})
    assert learned.done
    assert learner.reward_sums[first] == 1.0  # the repeated reward was not applied again
    assert all(learner.reward_sums[j] == 5.0 for j in rest)
    assert learner.observations.tolist() == [1.0 if j in revealed else 0.0 for j in range(3)]
    assert learner.summary()["arm_pulls"][arm] == 1.0
    assert learner.summary()["in_flight"] == 0.0


def test_feedback_after_close_and_expire_are_ignored(algorithm: str) -> None:
    learner = make_learner("prob_graph", algorithm, PARAMS)
    decided = learner.decide({}, np.random.default_rng(0))
    assert learner.expire(decided.pending).metrics == {"timed_out": 1.0}
    state = learner.to_state()
    assert learner.learn(decided.pending, {"rewards": {"1": 1.0}}).done
    assert learner.expire(decided.pending).done
    assert learner.to_state() == state
    assert state["plays"][decided.output["arm"]] == 1  # the timed-out play counts as played


def test_reward_metric_only_when_the_played_arm_is_observed() -> None:
    learner = UCBN.from_params({"arms": 2, "edges": [[0, 0, 1.0], [0, 1, 1.0], [1, 1, 1.0]]})
    decided = learner.decide({}, np.random.default_rng(0))
    assert decided.output == {"arm": 0, "branch": "warmup"}
    learned = learner.learn(decided.pending, {"rewards": {"0": 0.25, "1": 0.5}})
    assert learned.metrics == {"reward": 0.25}
    decided = learner.decide({}, np.random.default_rng(0))
    assert learner.learn(decided.pending, {"rewards": {"1": 0.5}, "complete": True}).metrics == (
        {} if decided.output["arm"] == 0 else {"reward": 0.5})


def test_complete_feedback_may_omit_only_arms_revealed_by_chance() -> None:
    """Arm 1 reveals itself with probability 1 and arm 0 with 0.5: complete feedback without
    arm 0 is a plain outcome, without arm 1 it cannot be true (README's prob_graph example)."""
    learner = UCBN.from_params({"arms": 2, "edges": [[0, 0, 0.5], [1, 0, 0.9], [1, 1, 1.0]]})
    decided = learner.decide({}, np.random.default_rng(0))
    assert decided.output["arm"] == 1
    state = learner.to_state()
    with pytest.raises(LearnerError, match="always reveals"):
        learner.learn(decided.pending, {"rewards": {"0": 0.4}, "complete": True})
    assert learner.to_state() == state
    assert learner.learn(decided.pending, {"rewards": {"1": 0.7}, "complete": False}).done is False
    assert learner.learn(decided.pending, {"rewards": {"0": 0.4}, "complete": True}).done


@pytest.mark.parametrize(
    ("feedback", "message"),
    [
        ({"rewards": [1.0]}, "object"),
        ({"rewards": {"x": 1.0}}, "not an arm index"),
        ({"rewards": {"7": 1.0}}, "outside"),
        ({"rewards": {"0": "high"}}, "number"),
        ({"rewards": {"0": True}}, "number"),
        ({"rewards": {"0": float("nan")}}, "finite"),
        ({"rewards": {"0": 1.0}, "complete": "yes"}, "complete"),
        ({"rewards": {"0": 1.0, "1": 1.0}}, "cannot reveal"),
        ({"rewards": {}, "complete": True}, r"lacks the reward of arm\(s\) \[0\]"),
        ({"rewards": {}}, "always reveals"),
    ],
)
def test_invalid_feedback_is_rejected_without_changing_state(
    feedback: dict[str, Any], message: str
) -> None:
    learner = UCBN.from_params(PARAMS)
    decided = learner.decide({}, np.random.default_rng(0))
    assert decided.output["arm"] == 2  # warm-up: bestParent(0) = 2, which reveals only arm 0
    state = learner.to_state()
    with pytest.raises(LearnerError, match=message):
        learner.learn(decided.pending, feedback)
    assert learner.to_state() == state


def test_bernoulli_rewards_must_be_in_unit_interval() -> None:
    learner = ThompsonSampling.from_params({**PARAMS, "rewards": "bernoulli"})
    decided = learner.decide({}, np.random.default_rng(0))
    with pytest.raises(LearnerError, match=r"\[0, 1\]"):
        learner.learn(decided.pending, {"rewards": {"0": 2.0}})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"edges": PARAMS["edges"]}, "required"),
        ({**PARAMS, "arms": 1}, "arms"),
        ({**PARAMS, "case": "two_step"}, "case"),
        ({**PARAMS, "rewards": "poisson"}, "rewards"),
        ({**PARAMS, "edges": [[0, 1, 1.0]]}, "no in-edge"),
        ({**PARAMS, "edges": [*PARAMS["edges"], [0, 1, 0.5]]}, "duplicated"),
        ({**PARAMS, "edges": [*PARAMS["edges"], [0, 3, 0.5]]}, "outside"),
        ({**PARAMS, "edges": [*PARAMS["edges"], [0, 2, 0.0]]}, r"\(0, 1\]"),
        ({**PARAMS, "edges": [*PARAMS["edges"], [0, 2]]}, r"\[i, j, p\]"),
        ({**PARAMS, "warmup_observations": 0}, "warmup_observations"),
        ({**PARAMS, "exploration": 1}, "unknown parameter"),
    ],
)
def test_invalid_parameters_are_named(params: dict[str, Any], message: str) -> None:
    for cls in ALGORITHMS.values():
        with pytest.raises(LearnerError, match=message):
            cls.from_params(params)


def test_state_is_json_and_round_trips(algorithm: str) -> None:
    scenario = loopless_clique([1.0, 0.5, 0.0], p=0.6)
    params = scenario.learner_params()
    learner = make_learner("prob_graph", algorithm, params)
    simulate(learner, Environment(scenario), 200, seed=3, delay=4)
    decided = learner.decide({}, np.random.default_rng(0))  # leave one decision open
    state = json.loads(json.dumps(learner.to_state()))
    restored = type(learner).from_state(params, state)
    assert restored.to_state() == learner.to_state()
    assert restored.learn(decided.pending, {"rewards": {}}).done
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    learner.learn(decided.pending, {"rewards": {}})
    for _ in range(20):
        assert restored.decide({}, rng_a).output == learner.decide({}, rng_b).output


def test_load_state_rejects_a_state_for_another_graph() -> None:
    learner = UCBN.from_params(PARAMS)
    state = UCBN.from_params({"arms": 2, "edges": [[0, 1, 1.0], [1, 0, 1.0]]}).to_state()
    with pytest.raises(LearnerError, match="expected 3"):
        learner.load_state(state)


def test_ucb_n_plays_the_largest_index() -> None:
    learner = UCBN.from_params({"arms": 2, "edges": [[0, 0, 1.0], [1, 1, 1.0], [0, 1, 1.0]]})
    state = learner.to_state()
    state.update(decisions=100, plays=[50, 50], observations=[100, 4], reward_sums=[60.0, 2.0])
    learner.load_state(state)
    # Indexes: 0.6 + sqrt(2 log 101 / 100) = 0.90 < 0.5 + sqrt(2 log 101 / 4) = 2.02.
    assert learner.decide({}, np.random.default_rng(0)).output == {"arm": 1, "branch": "ucb"}


@pytest.mark.parametrize("rewards", ["gaussian", "bernoulli"])
def test_thompson_learns_the_best_arm(rewards: str) -> None:
    scenario = loopless_clique([0.8, 0.4, 0.2], p=0.7, rewards=rewards)
    learner = ThompsonSampling.from_params(scenario.learner_params())
    regret = simulate(learner, Environment(scenario), 1500, seed=0)
    assert regret[-500:].mean() < 0.05
    assert learner.decide({}, np.random.default_rng(0)).output["branch"] == "thompson"


def test_thompson_is_deterministic_given_the_seed() -> None:
    scenario = loopless_clique([0.8, 0.4, 0.2], p=0.7)
    runs = [
        simulate(
            ThompsonSampling.from_params(scenario.learner_params()),
            Environment(scenario),
            300,
            seed=11,
        )
        for _ in range(2)
    ]
    np.testing.assert_array_equal(*runs)


def test_pending_without_a_decision_number_is_rejected() -> None:
    learner = UCBN.from_params(PARAMS)
    with pytest.raises(LearnerError, match="decision"):
        learner.learn({"arm": 0}, {"rewards": {}})
    with pytest.raises(LearnerError, match="decision"):
        learner.expire({"decision": "1"})
