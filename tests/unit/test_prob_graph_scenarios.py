"""Scenario parsing, the simulated environment and the graph generators of prob_graph."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.prob_graph import ALGORITHMS
from banditflow.learners.prob_graph.scenarios import (
    Environment,
    erdos_renyi,
    loopless_clique,
    parse_scenario,
    random_probabilities,
    revealing_action,
    simulate,
)

CHAIN: dict[str, Any] = {
    "arms": 3,
    "means": [1.0, 0.5, 0.0],
    "edges": [[0, 1, 0.8], [1, 2, 0.5], [2, 0, 1.0]],
}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"means": [1.0, 0.5]}, "3 arms but 2 means"),
        ({"means": "high"}, "list of numbers"),
        ({"means": [1.0, "x", 0.0]}, "numbers"),
        ({"means": [1.0, float("inf"), 0.0]}, "finite"),
        ({"rewards": "bernoulli", "means": [1.5, 0.5, 0.0]}, r"\[0, 1\]"),
        ({"case": "multi"}, "case"),
        ({"edges": [[0, 1, 0.8]]}, "no in-edge"),
        ({"seed": 3}, "unknown scenario field"),
    ],
)
def test_parse_scenario_errors(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(LearnerError, match=message):
        parse_scenario({**CHAIN, **changes})


def test_parse_scenario_requires_fields_and_an_object() -> None:
    with pytest.raises(LearnerError, match="required"):
        parse_scenario({"arms": 3, "edges": CHAIN["edges"]})
    with pytest.raises(LearnerError, match="object"):
        parse_scenario([CHAIN])  # type: ignore[arg-type]


def test_scenario_round_trips_through_its_dict() -> None:
    scenario = parse_scenario({**CHAIN, "case": "cascade"})
    assert scenario.to_dict() == {**CHAIN, "case": "cascade", "rewards": "gaussian"}
    assert parse_scenario(scenario.to_dict()).to_dict() == scenario.to_dict()


def reveal_frequencies(scenario_spec: dict[str, Any], arm: int, rounds: int) -> np.ndarray:
    environment = Environment(parse_scenario(scenario_spec))
    rng = np.random.default_rng(0)
    counts = np.zeros(scenario_spec["arms"])
    for _ in range(rounds):
        counts[list(environment.reveal(arm, rng))] += 1
    return counts / rounds


def test_one_step_environment_reveals_each_edge_with_its_probability() -> None:
    frequencies = reveal_frequencies(CHAIN, 0, 4000)
    np.testing.assert_allclose(frequencies, [0.0, 0.8, 0.0], atol=0.03)


def test_cascade_environment_follows_live_paths() -> None:
    # From arm 0: 1 with 0.8; 2 via 0 -> 1 -> 2 with 0.4; 0 itself via the cycle with 0.4.
    frequencies = reveal_frequencies({**CHAIN, "case": "cascade"}, 0, 4000)
    np.testing.assert_allclose(frequencies, [0.4, 0.8, 0.4], atol=0.03)


def test_rewards_follow_the_reward_family() -> None:
    rng = np.random.default_rng(1)
    gaussian = Environment(parse_scenario({**CHAIN, "edges": [*CHAIN["edges"], [2, 1, 1.0]]}))
    samples = [gaussian.reveal(2, rng)[1] for _ in range(4000)]
    assert np.mean(samples) == pytest.approx(0.5, abs=0.05)
    assert np.std(samples) == pytest.approx(1.0, abs=0.05)
    bernoulli = Environment(
        parse_scenario({**CHAIN, "means": [0.9, 0.3, 0.0], "rewards": "bernoulli"})
    )
    feedback = [bernoulli.feedback(0, rng) for _ in range(2000)]
    values = [event["rewards"]["1"] for event in feedback if "1" in event["rewards"]]
    assert set(values) == {0.0, 1.0}
    assert np.mean(values) == pytest.approx(0.3, abs=0.04)
    assert all(event["complete"] for event in feedback)


def test_erdos_renyi_has_uniform_p_no_self_loops_and_in_edges() -> None:
    scenario = erdos_renyi([1.0, 0.5, 0.3, 0.2, 0.0, -0.1], 0.1, 0.4, np.random.default_rng(2))
    P = scenario.setting.probabilities
    assert np.all(np.diag(P) == 0.0)
    assert set(np.unique(P[P > 0])) == {0.4}
    assert np.all((P > 0).any(axis=0))


def test_loopless_clique() -> None:
    P = loopless_clique([1.0, 0.5, 0.0, 0.2], p=0.3).setting.probabilities
    np.testing.assert_array_equal(P, 0.3 * (1 - np.eye(4)))


def test_revealing_action_graph() -> None:
    scenario = revealing_action([1.0, 0.6, 0.2], revealer=2, reveal_p=0.8, self_p=0.5)
    np.testing.assert_array_equal(
        scenario.setting.probabilities, [[0.5, 0.0, 0.0], [0.0, 0.5, 0.0], [0.8, 0.8, 0.5]]
    )
    with pytest.raises(LearnerError, match="revealer"):
        revealing_action([1.0, 0.6], revealer=2)


def test_random_probabilities_within_bounds() -> None:
    P = random_probabilities([1.0, 0.5, 0.0], np.random.default_rng(0), low=0.2, high=0.6)
    off_diagonal = P.setting.probabilities[~np.eye(3, dtype=bool)]
    assert np.all((off_diagonal >= 0.2) & (off_diagonal <= 0.6))
    assert len(set(off_diagonal.tolist())) == 6
    with pytest.raises(LearnerError, match="low"):
        random_probabilities([1.0, 0.0], np.random.default_rng(0), low=0.0)


@pytest.mark.parametrize("case", ["one_step", "cascade"])
def test_every_learner_runs_on_every_generator(case: str) -> None:
    rng = np.random.default_rng(4)
    means = [1.0, 0.6, 0.4, 0.1]
    scenarios = [
        erdos_renyi(means, 0.5, 0.7, rng, case=case),
        loopless_clique(means, 0.5, case=case, rewards="bernoulli"),
        revealing_action(means, revealer=3, case=case),
        random_probabilities(means, rng, case=case),
    ]
    for scenario in scenarios:
        for cls in ALGORITHMS.values():
            learner = cls.from_params({**scenario.learner_params()})
            regret = simulate(learner, Environment(scenario), 150, seed=0, delay=2)
            assert regret.shape == (150,)
            assert learner.summary()["in_flight"] == 0.0
            assert sum(learner.summary()["arm_pulls"]) == 150


def test_simulate_keeps_delay_decisions_in_flight() -> None:
    scenario = loopless_clique([1.0, 0.0], p=1.0)
    learner = ALGORITHMS["ucb_n"].from_params(scenario.learner_params())
    environment = Environment(scenario)
    simulate(learner, environment, 20, seed=0, delay=5)
    assert learner.decisions == 20
    assert learner.summary()["in_flight"] == 0.0
    assert learner.observations.sum() == 20


def test_cascade_lower_bound_is_below_the_one_step_bound() -> None:
    one_step = parse_scenario(CHAIN).lower_bound()[0]
    cascade = parse_scenario({**CHAIN, "case": "cascade"}).lower_bound()[0]
    assert cascade < one_step
