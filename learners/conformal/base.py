"""Shared event handling of the conformal family: one threshold, sets ``score >= threshold``.

Every conformal algorithm differs only in how it moves the threshold after observing either
the true label's score (covered) or a miss, so subclasses implement ``observe`` and
``threshold``; deciding, learning and the timeout rule (a timeout is a miss) live here once.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from learners.base import Decided, Learned, Learner, LearnerError, require


def target_coverage(params: Mapping[str, Any]) -> float:
    """The ``alpha`` parameter (target coverage, default 0.9), checked to lie in (0, 1)."""
    alpha = require(params, "alpha", float, 0.9)
    if not 0.0 < alpha < 1.0:
        raise LearnerError(f"parameter 'alpha' (target coverage) must be in (0, 1), got {alpha}")
    return alpha


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


class ConformalLearner(Learner):
    """Base of the conformal family. ``threshold`` is -inf for the full set."""

    family: ClassVar[str] = "conformal"

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
        }
        return Decided(output=output, pending=pending)

    def learn(self, pending: Mapping[str, Any], feedback: Mapping[str, Any]) -> Learned:
        label = feedback.get("label")
        score = None
        if label is not None and label in pending["labels"]:
            score = pending["scores"][pending["labels"].index(label)]
        self.observe(score)
        return Learned(done=True, metrics={"covered": 0.0 if score is None else 1.0})

    def expire(self, pending: Mapping[str, Any]) -> Learned:
        self.observe(None)  # timeouts count as misses: safe, they can only lower tau
        return Learned(done=True, metrics={"covered": 0.0, "timed_out": 1.0})

    alpha: float  # target coverage, set by every algorithm

    def summary(self) -> dict[str, float | list[float]]:
        return {"threshold": self.threshold, "coverage_target": self.alpha}
