"""Environments that generate contexts and answer decisions with (partial) feedback.

They are pure (numpy only), so the Kafka simulator and offline tests drive the same ones.

>>> import numpy as np
>>> env = GaussianScores(labels=5, alpha=0.9)
>>> round(env.tau_star, 4)
-0.2816
>>> round(env.miscoverage(env.tau_star), 3)
0.1
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Round:
    """One round: the context fields the application sends and what only it knows."""

    context: dict[str, Any]
    true_label: Any


@dataclass(frozen=True)
class GaussianScores:
    """Conformal scenario: the true label scores N(signal, 1), the others N(0, 1).

    So G*(tau) = Phi(tau - signal) and tau* = signal + Phi^{-1}(1 - alpha) are known exactly,
    which lets the metrics compute exact regret from the ``truth`` topic.
    """

    labels: int = 20
    alpha: float = 0.9
    signal: float = 1.0

    @property
    def tau_star(self) -> float:
        return self.signal + NormalDist().inv_cdf(1.0 - self.alpha)

    def miscoverage(self, threshold: float | None) -> float:
        """G*(threshold): the probability that the true label scores below it."""
        if threshold is None or math.isinf(threshold):
            return 0.0
        return NormalDist(self.signal, 1.0).cdf(threshold)

    def draw(self, rng: np.random.Generator) -> Round:
        names = [f"label-{i}" for i in range(self.labels)]
        scores = rng.normal(0.0, 1.0, self.labels)
        true_index = int(rng.integers(self.labels))
        scores[true_index] += self.signal
        return Round(
            {"labels": names, "scores": [round(float(s), 6) for s in scores]}, names[true_index]
        )

    def feedback(self, output: dict[str, Any], round_: Round) -> dict[str, Any]:
        """Semi-bandit feedback: the true label only if it is in the set."""
        if round_.true_label in output["labels"]:
            return {"label": round_.true_label}
        return {"missed": True}

    def truth(self, output: dict[str, Any], round_: Round) -> dict[str, Any]:
        return {
            "label": round_.true_label,
            "miscoverage": self.miscoverage(output["threshold"]),
            "target_miscoverage": 1.0 - self.alpha,
        }
