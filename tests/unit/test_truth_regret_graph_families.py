"""Exact regret from the truth topic for graph_cb (every action's loss) and prob_graph (every
arm's mean): what the processors' statistics turn into the ``regret_exact`` gauge."""

from __future__ import annotations

import pytest

from banditflow.learners.graph_cb.algorithms import SquareCBG
from banditflow.learners.prob_graph.lp_policy import LPPolicy
from banditflow.processors.stats import gauges, on_truth


def test_graph_cb_regret_is_the_expected_loss_of_p_minus_the_best() -> None:
    stats: dict[str, float] = {}
    output = {"action": 1, "p": [0.25, 0.75, 0.0]}
    on_truth(stats, SquareCBG, output, {"all_losses": {"0": 0.0, "1": 1.0, "2": 1.0}}, {})
    on_truth(stats, SquareCBG, output, {"all_losses": {"0": 0.5, "1": 0.5, "2": 0.0}}, {})
    assert gauges(SquareCBG, stats, {})["regret_exact"] == pytest.approx(0.75 + 0.5)


def test_prob_graph_regret_is_the_gap_of_the_played_arm() -> None:
    stats: dict[str, float] = {}
    for arm in (0, 2, 2):
        on_truth(stats, LPPolicy, {"arm": arm}, {"arm_means": [0.9, 1.0, 0.4]}, {})
    assert gauges(LPPolicy, stats, {})["regret_exact"] == pytest.approx(0.1 + 0.6 + 0.6)


def test_no_truth_no_exact_regret() -> None:
    assert "regret_exact" not in gauges(SquareCBG, {}, {})
    assert "regret_exact" not in gauges(LPPolicy, {}, {})
