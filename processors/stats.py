"""Per-learner running statistics kept in the learner's table entry.

They are updated in the same write as the learner state, so they survive restarts and are
never counted twice. ``gauges`` turns them into the live values the metrics side exports.
Regret is exact where ground truth (the ``truth`` topic) arrived, otherwise an estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from banditflow.learners.base import Learner, Stats
from banditflow.learners.base import add_stat as add


def on_decided(
    stats: Stats,
    learner: type[Learner],
    output: Mapping[str, Any],
    params: Mapping[str, Any],
    summary: Mapping[str, Any],
) -> None:
    add(stats, "decisions")
    learner.stats_on_decided(stats, output, params, summary)


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
    learner: type[Learner],
    output: Mapping[str, Any],
    truth: Mapping[str, Any],
    params: Mapping[str, Any],
) -> None:
    add(stats, "truth_rounds")
    learner.stats_on_truth(stats, output, truth, params)


def gauges(learner: type[Learner], stats: Stats, summary: Mapping[str, Any]) -> dict[str, Any]:
    """Live values for the metrics side."""
    values: dict[str, Any] = dict(summary)
    values["decisions"] = stats.get("decisions", 0.0)
    values["feedback"] = stats.get("feedback", 0.0)
    values["timeouts"] = stats.get("timed_out", 0.0)
    learner.stats_gauges(stats, summary, values)
    for name in AVERAGED:
        if stats.get(f"{name}_observed"):
            values[f"mean_{name}"] = stats[name] / stats[f"{name}_observed"]
    return values
