"""Per-learner running statistics kept in the learner's table entry.

They are updated in the same write as the learner state, so they survive restarts and are
never counted twice. ``gauges`` turns them into the live values the metrics side exports.
Regret is exact where ground truth (the ``truth`` topic) arrived, otherwise an estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from learners.conformal.base import target_coverage

Stats = dict[str, float]

# The paper's phi for conformal regret: under-coverage costs lambda1 per unit of miscoverage
# below target, over-shooting the miscoverage target (too-small sets) costs lambda2.
CONFORMAL_LAMBDA_UNDER = 0.1
CONFORMAL_LAMBDA_OVER = 10.0


def conformal_round_regret(miscoverage: float, target_miscoverage: float) -> float:
    """phi(tau*) - phi(tau) with phi of the paper (phi(tau*) = 0)."""
    gap = miscoverage - target_miscoverage
    return (CONFORMAL_LAMBDA_UNDER if gap <= 0 else CONFORMAL_LAMBDA_OVER) * abs(gap)


def add(stats: Stats, name: str, value: float = 1.0) -> None:
    stats[name] = stats.get(name, 0.0) + value


def on_decided(
    stats: Stats,
    family: str,
    output: Mapping[str, Any],
    params: Mapping[str, Any],
    summary: Mapping[str, Any],
) -> None:
    add(stats, "decisions")
    if family == "conformal":
        add(stats, "set_size", float(output["set_size"]))
        target = 1.0 - target_coverage(params)
        estimate = summary.get("miscoverage_estimate")
        if estimate is None:
            feedback = stats.get("feedback", 0.0)
            estimate = 1.0 - stats.get("covered", 0.0) / feedback if feedback else 0.0
        add(stats, "regret_estimate", conformal_round_regret(float(estimate), target))


# Per-decision observations averaged over the decisions that revealed them (a graph without
# self-loops may not reveal the played action's loss).
AVERAGED = ("loss", "reward")


def on_learned(stats: Stats, metrics: Mapping[str, float], settled: bool) -> None:
    for name, value in metrics.items():
        add(stats, name, float(value))
        if name in AVERAGED:
            add(stats, f"{name}_observed")
    if settled:
        add(stats, "feedback")


def on_truth(
    stats: Stats,
    family: str,
    output: Mapping[str, Any],
    truth: Mapping[str, Any],
    params: Mapping[str, Any],
) -> None:
    add(stats, "truth_rounds")
    if family == "deferral" and truth.get("model_reward") is not None:
        deferral_truth(stats, bool(output.get("defer")), truth)
    if family == "conformal":
        if truth.get("label") is not None:
            add(stats, "truth_covered", float(truth["label"] in output["labels"]))
        if truth.get("miscoverage") is not None:
            target = truth.get("target_miscoverage")
            if target is None:
                target = 1.0 - target_coverage(params)
            add(stats, "regret_exact", conformal_round_regret(truth["miscoverage"], target))


# Deferral regret against OPT, live: OPT is the fractional knapsack of the realised rounds
# (gain = human - model reward, weight = human cost), solved greedily by gain/cost ratio over a
# histogram of ratios (bins of a quarter octave between 2^-8 and 2^8), so it stays compact
# and approximate to within the bin width; the budget is pro-rated to the rounds seen.
RATIO_BINS = 64


def _ratio_bin(gain: float, cost: float) -> int:
    if cost <= 0.0:
        return RATIO_BINS - 1  # free gain: always taken first
    return min(RATIO_BINS - 1, max(0, math.floor(4 * math.log2(gain / cost)) + RATIO_BINS // 2))


def deferral_truth(stats: Stats, deferred: bool, truth: Mapping[str, Any]) -> None:
    model, human = float(truth["model_reward"]), float(truth.get("human_reward") or 0.0)
    cost = float(truth.get("human_cost") or 0.0)
    add(stats, "truth_reward", human if deferred else model)
    add(stats, "truth_model_reward", model)
    if human > model:
        i = _ratio_bin(human - model, cost)
        add(stats, f"opt_gain_{i}", human - model)
        add(stats, f"opt_cost_{i}", cost)


def deferral_opt(stats: Stats, budget: float) -> float:
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


def gauges(family: str, stats: Stats, summary: Mapping[str, Any]) -> dict[str, Any]:
    """Live values for the metrics side."""
    values: dict[str, Any] = dict(summary)
    decisions = stats.get("decisions", 0.0)
    feedback = stats.get("feedback", 0.0)
    values["decisions"] = decisions
    values["feedback"] = feedback
    values["timeouts"] = stats.get("timed_out", 0.0)
    if family == "conformal":
        if feedback:
            values["coverage"] = stats.get("covered", 0.0) / feedback
        if decisions:
            values["mean_set_size"] = stats.get("set_size", 0.0) / decisions
        values["regret_estimate"] = stats.get("regret_estimate", 0.0)
        if stats.get("truth_rounds"):
            values["regret_exact"] = stats.get("regret_exact", 0.0)
            values["coverage_exact"] = stats.get("truth_covered", 0.0) / stats["truth_rounds"]
    if family == "deferral" and stats.get("truth_rounds") and "budget" in summary:
        horizon = float(summary.get("horizon") or stats["truth_rounds"])
        budget = float(summary["budget"]) * stats["truth_rounds"] / horizon  # pro-rated
        values["opt_reward"] = deferral_opt(stats, budget)
        values["regret_exact"] = values["opt_reward"] - stats.get("truth_reward", 0.0)
    for name in AVERAGED:
        if stats.get(f"{name}_observed"):
            values[f"mean_{name}"] = stats[name] / stats[f"{name}_observed"]
    return values
