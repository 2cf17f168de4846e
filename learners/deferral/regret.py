"""Deferral regret against OPT, live.

OPT is the fractional knapsack of the realised rounds (gain = human - model reward, weight =
human cost), solved greedily by gain/cost ratio over a histogram of ratios (bins of a quarter
octave between 2^-8 and 2^8), so it stays compact and approximate to within the bin width;
the budget is pro-rated to the rounds seen.

>>> stats = {}
>>> record_truth(stats, deferred=True, truth={"model_reward": 0.0, "human_reward": 1.0,
...                                           "human_cost": 0.5})
>>> record_truth(stats, deferred=False, truth={"model_reward": 1.0})
>>> stats["truth_reward"], opt_reward(stats, budget=0.5)
(2.0, 2.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from banditflow.learners.base import Stats, add_stat

RATIO_BINS = 64


def _ratio_bin(gain: float, cost: float) -> int:
    if cost <= 0.0:
        return RATIO_BINS - 1  # free gain: always taken first
    return min(RATIO_BINS - 1, max(0, math.floor(4 * math.log2(gain / cost)) + RATIO_BINS // 2))


def record_truth(stats: Stats, deferred: bool, truth: Mapping[str, Any]) -> None:
    """Count one round's ground truth: the reward the decision got, and the round's gain
    from deferring in the ratio histogram."""
    model, human = float(truth["model_reward"]), float(truth.get("human_reward") or 0.0)
    cost = float(truth.get("human_cost") or 0.0)
    add_stat(stats, "truth_reward", human if deferred else model)
    add_stat(stats, "truth_model_reward", model)
    if human > model:
        i = _ratio_bin(human - model, cost)
        add_stat(stats, f"opt_gain_{i}", human - model)
        add_stat(stats, f"opt_cost_{i}", cost)


def opt_reward(stats: Stats, budget: float) -> float:
    """Approximate OPT of the rounds with truth so far, given ``budget``."""
    value, left = stats.get("truth_model_reward", 0.0), budget
    for i in reversed(range(RATIO_BINS)):
        gain, cost = stats.get(f"opt_gain_{i}", 0.0), stats.get(f"opt_cost_{i}", 0.0)
        if gain <= 0.0:
            continue
        share = 1.0 if cost <= left else left / cost
        value += share * gain
        left -= share * cost
        if left <= 0.0:
            break
    return value
