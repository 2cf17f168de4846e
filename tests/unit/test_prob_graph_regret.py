"""Seeded regret of the prob_graph learners against each other and against C*(theta) log T."""

from __future__ import annotations

import math

import numpy as np
import pytest

from banditflow.learners.prob_graph import ALGORITHMS
from banditflow.learners.prob_graph.scenarios import (
    Environment,
    Scenario,
    revealing_action,
    simulate,
)

pytestmark = pytest.mark.slow


def regrets(algorithm: str, scenario: Scenario, horizon: int, seeds: range) -> np.ndarray:
    """Total pseudo-regret of ``algorithm`` for each seed."""
    totals = []
    for seed in seeds:
        learner = ALGORITHMS[algorithm].from_params(scenario.learner_params())
        totals.append(simulate(learner, Environment(scenario), horizon, seed).sum())
    return np.array(totals)


def test_lp_policy_beats_ucb_n_on_the_revealing_action_graph() -> None:
    # 38 arms with gap 0.4 observe only themselves; arm 7 (gap 0.5) reveals them all with
    # p = 0.9; arm 20 is best. UCB-N pays for each arm's own exploration; the LP explores
    # through arm 7: C* = 0.5 * (2 / 0.4^2) / 0.9 = 6.9, C* log T = 59 at T = 5000. A policy
    # that never uses the revealer, or exploits greedily in the LP branch, fails this test.
    means = [0.6] * 40
    means[7], means[20] = 0.5, 1.0
    scenario = revealing_action(means, revealer=7, reveal_p=0.9)
    horizon, seeds = 5000, range(3)
    lp = regrets("lp_policy", scenario, horizon, seeds)
    ucb = regrets("ucb_n", scenario, horizon, seeds)
    reference = scenario.lower_bound()[0] * math.log(horizon)
    print(f"lp_policy {lp.round(1)}, ucb_n {ucb.round(1)}, C* log T {reference:.1f}")
    assert np.all(lp < 0.6 * ucb)
    assert lp.sum() < 0.4 * ucb.sum()
    assert lp.mean() < 5.0 * reference


def test_lp_policy_regret_over_log_t_is_near_c_star() -> None:
    # An easy instance (C* = 5.3): the revealer (gap 0.6) identifies both gap-0.5 arms.
    scenario = revealing_action([1.0, 0.5, 0.5, 0.4], revealer=3)
    horizon = 10_000
    ratios = regrets("lp_policy", scenario, horizon, range(4)) / math.log(horizon)
    ratios /= scenario.lower_bound()[0]
    print(f"regret / (C* log T) per seed: {ratios.round(2)}")
    assert 0.5 < ratios.mean() < 2.5
    assert np.all(ratios < 4.0)
