"""Shared event handling of the conformal family: one threshold, sets ``score >= threshold``.

Every conformal algorithm differs only in how it moves the threshold after observing either
the true label's score (covered) or a miss, so subclasses implement ``observe`` and
``threshold``; deciding, learning and the timeout rule (a timeout is a miss) live here once.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from banditflow.learners.base import (
    ContradictingFeedback,
    Decided,
    Learned,
    Learner,
    LearnerError,
    Stats,
    add_stat,
)
from banditflow.learners.conformal.regret import conformal_round_regret
from banditflow.learners.declared import Declared, Params, param


@dataclass(frozen=True, kw_only=True)
class ConformalParams(Params):
    """The parameter every conformal algorithm takes. ``alpha`` is the former name of
    ``target_coverage``, still accepted: in the conformal literature alpha is the miscoverage
    (a target coverage of 1 - alpha), the reverse of what it meant here.

    >>> ConformalParams.read({"target_coverage": 0.8}), ConformalParams.read({"alpha": 0.8})
    (ConformalParams(target_coverage=0.8), ConformalParams(target_coverage=0.8))
    """

    target_coverage: float = param(0.9, gt=0, lt=1, what="target coverage", former="alpha")


def target_miscoverage(params: Mapping[str, Any]) -> float:
    """``1 - target_coverage`` of a config's ``params``."""
    return 1.0 - ConformalParams.read_one(params, "target_coverage")


def validate_context(context: Mapping[str, Any]) -> tuple[list[Any], list[float]]:
    """The candidate labels and their scores; errors say what is wrong."""
    labels = context.get("labels")
    scores = context.get("scores")
    if not labels or scores is None:
        raise LearnerError("a conformal context needs non-empty 'labels' and 'scores'")
    if len(labels) != len(scores):
        raise LearnerError(
            f"'labels' and 'scores' must have equal length, got {len(labels)} and {len(scores)}"
        )
    return list(labels), [float(s) for s in scores]


class ConformalLearner(Declared, Learner):
    """Base of the conformal family. ``threshold`` is -inf for the full set."""

    family: ClassVar[str] = "conformal"

    def __init__(self, params: ConformalParams) -> None:
        self.target_coverage = params.target_coverage

    @classmethod
    def stats_on_decided(
        cls,
        stats: Stats,
        output: Mapping[str, Any],
        params: Mapping[str, Any],
        summary: Mapping[str, Any],
    ) -> None:
        add_stat(stats, "set_size", float(output["set_size"]))
        estimate = summary.get("miscoverage_estimate")
        if estimate is None:
            feedback = stats.get("feedback", 0.0)
            estimate = 1.0 - stats.get("covered", 0.0) / feedback if feedback else 0.0
        target = target_miscoverage(params)
        add_stat(stats, "regret_estimate", conformal_round_regret(float(estimate), target))

    @classmethod
    def stats_on_truth(
        cls,
        stats: Stats,
        output: Mapping[str, Any],
        truth: Mapping[str, Any],
        params: Mapping[str, Any],
    ) -> None:
        if truth.get("label") is not None:
            add_stat(stats, "truth_covered", float(truth["label"] in output["labels"]))
        if truth.get("miscoverage") is not None:
            target = truth.get("target_miscoverage")
            if target is None:
                target = target_miscoverage(params)
            add_stat(stats, "regret_exact", conformal_round_regret(truth["miscoverage"], target))

    @classmethod
    def stats_gauges(
        cls, stats: Stats, summary: Mapping[str, Any], values: dict[str, Any]
    ) -> None:
        decisions, feedback = stats.get("decisions", 0.0), stats.get("feedback", 0.0)
        if feedback:
            values["coverage"] = stats.get("covered", 0.0) / feedback
        if decisions:
            values["mean_set_size"] = stats.get("set_size", 0.0) / decisions
        values["regret_estimate"] = stats.get("regret_estimate", 0.0)
        if stats.get("truth_rounds"):
            values["regret_exact"] = stats.get("regret_exact", 0.0)
            values["coverage_exact"] = stats.get("truth_covered", 0.0) / stats["truth_rounds"]

    @property
    @abstractmethod
    def threshold(self) -> float:
        """The threshold tau of the next prediction set."""

    @abstractmethod
    def observe(self, score: float | None) -> None:
        """Incorporate the true label's score (covered) or None (miss or timeout)."""

    def decide(self, context: Mapping[str, Any], rng: np.random.Generator) -> Decided:
        labels, scores = validate_context(context)
        tau = self.threshold
        chosen = [
            (label, score) for label, score in zip(labels, scores, strict=True) if score >= tau
        ]
        threshold = None if math.isinf(tau) else tau
        output = {
            "labels": [label for label, _ in chosen],
            "threshold": threshold,
            "set_size": len(chosen),
        }
        pending = {
            "threshold": threshold,
            "labels": output["labels"],
            "scores": [score for _, score in chosen],
            "offered": len(labels),  # a miss is impossible when the set holds them all
        }
        return Decided(output=output, pending=pending)

    def learn(self, pending: Mapping[str, Any], feedback: Mapping[str, Any]) -> Learned:
        score = self.covered_score(pending, feedback)
        self.observe(score)
        return Learned(done=True, metrics={"covered": 0.0 if score is None else 1.0})

    @staticmethod
    def covered_score(pending: Mapping[str, Any], feedback: Mapping[str, Any]) -> float | None:
        """The true label's score when the feedback says the set covered it, None for a miss.

        Semi-bandit feedback names the label only when the set held it; a label outside the
        set, or a miss of a set that held every offered label, contradicts the decision.
        """
        label = feedback.get("label")
        labels = pending["labels"]
        if label is not None:
            if label not in labels:
                shown = ", ".join(map(repr, labels[:10])) + (", ..." if len(labels) > 10 else "")
                raise ContradictingFeedback(
                    f"label {label!r} was not in the prediction set [{shown}]: feedback names "
                    "the true label only when the set held it (else send \"missed\": true)"
                )
            return float(pending["scores"][labels.index(label)])
        if feedback.get("missed") is not True:
            raise ContradictingFeedback(
                "conformal feedback needs the covered 'label' or \"missed\": true"
            )
        offered = pending.get("offered")  # absent in records decided before it was kept
        if offered is not None and len(labels) >= offered:
            raise ContradictingFeedback(
                f"\"missed\": true, but the prediction set held all {offered} offered labels"
            )
        return None

    def expire(self, pending: Mapping[str, Any]) -> Learned:
        self.observe(None)  # timeouts count as misses: safe, they can only lower tau
        return Learned(done=True, metrics={"covered": 0.0, "timed_out": 1.0})

    def summary(self) -> dict[str, float | list[float]]:
        return {"threshold": self.threshold, "coverage_target": self.target_coverage}
