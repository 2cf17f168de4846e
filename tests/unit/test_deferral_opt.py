"""OPT of the deferral family: the greedy equals HiGHS; BestReject's hindsight threshold."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from banditflow.learners.deferral import ALGORITHMS
from banditflow.learners.deferral.opt import best_reject_threshold, fractional_knapsack_opt
from banditflow.learners.deferral.scenarios import play, synthetic


def highs_opt(model: np.ndarray, human: np.ndarray, cost: np.ndarray, budget: float) -> float:
    result = linprog(-(human - model), A_ub=cost[None, :], b_ub=[budget], bounds=(0.0, 1.0),
                     method="highs")
    assert result.status == 0
    return float(model.sum() - result.fun)


@pytest.mark.parametrize("seed", range(25))
def test_greedy_equals_highs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 300))
    model, human, cost = rng.uniform(size=(3, size))
    cost[rng.uniform(size=size) < 0.1] = 0.0  # free deferrals
    budget = float(rng.uniform(0.0, 0.6) * cost.sum())
    result = fractional_knapsack_opt(model, human, cost, budget)
    assert result.value == pytest.approx(highs_opt(model, human, cost, budget), abs=1e-7)
    assert np.all((result.pi >= 0.0) & (result.pi <= 1.0))
    assert result.pi @ cost <= budget + 1e-9
    assert result.value == pytest.approx(model.sum() + result.pi @ (human - model))
    assert np.count_nonzero((result.pi > 0.0) & (result.pi < 1.0)) <= 1  # one fractional item


def test_edge_cases() -> None:
    everything = fractional_knapsack_opt([0.0, 0.2], [1.0, 0.1], [0.5, 0.5], budget=10.0)
    assert everything.value == pytest.approx(1.2) and everything.pi.tolist() == [1.0, 0.0]
    nothing = fractional_knapsack_opt([0.3], [0.9], [0.5], budget=0.0)
    assert nothing.value == pytest.approx(0.3) and nothing.pi.tolist() == [0.0]
    empty = fractional_knapsack_opt([], [], [], budget=1.0)
    assert empty.value == 0.0 and empty.pi.size == 0
    with pytest.raises(ValueError, match="equal length"):
        fractional_knapsack_opt([0.1], [0.2, 0.3], [0.1], 1.0)
    with pytest.raises(ValueError, match="non-negative"):
        fractional_knapsack_opt([0.1], [0.2], [-0.1], 1.0)


def test_best_reject_threshold_matches_the_online_learner() -> None:
    scenario = synthetic("complementary", horizon=1500, seed=3)
    threshold, total = best_reject_threshold(
        scenario.model_mean, scenario.human_reward, scenario.model_reward,
        scenario.human_cost, scenario.budget)
    assert 0.0 < threshold < 1.0
    common = {"dim": 20, "budget": scenario.budget, "horizon": 1500,
              "model_theta": scenario.theta_model.tolist()}
    best = play(ALGORITHMS["best_reject"].from_params({**common, "threshold": threshold}), scenario)
    assert best.realised_reward == pytest.approx(total)
    for other in (threshold - 0.1, threshold + 0.1):
        result = play(ALGORITHMS["best_reject"].from_params({**common, "threshold": other}),
                      scenario)
        assert result.realised_reward <= total + 1e-9
