"""Offline benchmarks of the deferral family: OPT and BestReject's threshold in hindsight.

OPT on a sequence of T events is the fractional knapsack LP

    max  sum_t r_m,t + sum_t pi_t (r_h,t - r_m,t)   s.t.  sum_t pi_t c_t <= B,  pi_t in [0, 1]

(the paper's printed sign and index are typos). Pass expected rewards and costs to get the
best static randomised policy in expectation on the realised contexts, or realised values
for the clairvoyant bound. It is solved exactly by the greedy by ratio: events with a gain
and zero cost are free, then events by decreasing gain / cost until the budget is used up,
the last one fractionally.

>>> from banditflow.learners.deferral.opt import fractional_knapsack_opt
>>> result = fractional_knapsack_opt([0.5, 0.2, 0.9], [0.9, 0.8, 0.1], [1.0, 0.5, 0.0], 0.75)
>>> round(result.value, 6), result.pi.round(6).tolist()
(2.3, [0.25, 1.0, 0.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OptResult:
    """The LP's optimal value and a maximiser ``pi`` (deferral probabilities per event)."""

    value: float
    pi: np.ndarray


def spent_before_each(costs: np.ndarray) -> np.ndarray:
    """The running total of ``costs`` before each element (exclusive cumulative sum)."""
    return np.concatenate(([0.0], np.cumsum(costs)))[:-1]


def fractional_knapsack_opt(
    model_reward: Sequence[float] | np.ndarray,
    human_reward: Sequence[float] | np.ndarray,
    human_cost: Sequence[float] | np.ndarray,
    budget: float,
) -> OptResult:
    """Solve the deferral LP exactly by the greedy by gain / cost ratio."""
    model = np.asarray(model_reward, dtype=float)
    gain = np.asarray(human_reward, dtype=float) - model
    cost = np.asarray(human_cost, dtype=float)
    if not model.shape == gain.shape == cost.shape or model.ndim != 1:
        raise ValueError("model_reward, human_reward and human_cost must be 1-d of equal length")
    if np.any(cost < 0.0) or budget < 0.0:
        raise ValueError("costs and the budget must be non-negative")
    pi = np.zeros(model.size)
    useful = gain > 0.0
    free = useful & (cost == 0.0)
    pi[free] = 1.0
    candidates = np.flatnonzero(useful & (cost > 0.0))
    order = candidates[np.argsort(-gain[candidates] / cost[candidates], kind="stable")]
    spent_before = spent_before_each(cost[order])
    pi[order] = np.clip((budget - spent_before) / cost[order], 0.0, 1.0)
    return OptResult(value=float(model.sum() + pi @ gain), pi=pi)


def best_reject_threshold(
    model_mean: Sequence[float] | np.ndarray,
    human_reward: Sequence[float] | np.ndarray,
    model_reward: Sequence[float] | np.ndarray,
    human_cost: Sequence[float] | np.ndarray,
    budget: float,
    c_max: float = 1.0,
    thresholds: Sequence[float] | np.ndarray | None = None,
) -> tuple[float, float]:
    """BestReject's best threshold in hindsight and its total reward (NOT feasible online).

    Replays :class:`banditflow.learners.deferral.baselines.BestReject` with immediate feedback over
    the
    whole sequence for every threshold (default: 0, 0.01, ..., 1, as in the paper): it
    defers when ``model_mean < threshold`` and ``spent + c_max <= budget``. Returns the best
    ``(threshold, total reward)``; the reward counts ``human_reward`` on deferrals and
    ``model_reward`` otherwise (pass expected or realised values).
    """
    mean = np.asarray(model_mean, dtype=float)
    human = np.asarray(human_reward, dtype=float)
    model = np.asarray(model_reward, dtype=float)
    cost = np.asarray(human_cost, dtype=float)
    grid = np.linspace(0.0, 1.0, 101) if thresholds is None else np.asarray(thresholds, float)
    best = (float(grid[0]), -np.inf)
    for threshold in grid:
        candidates = np.flatnonzero(mean < threshold)
        spent_before = spent_before_each(cost[candidates])
        # spent only grows, so deferrals stop for good once spent + c_max exceeds the budget
        deferred = candidates[spent_before + c_max <= budget]
        total = float(model.sum() + (human[deferred] - model[deferred]).sum())
        if total > best[1]:
            best = (float(threshold), total)
    return best
