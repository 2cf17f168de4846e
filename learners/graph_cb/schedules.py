"""Exploration schedules: the gamma used at each decision.

* ``sqrt_alpha`` (paper experiments): ``gamma_t = gamma_c * sqrt(alpha(G_t) * t)``, t = this
  decision's index (1-based), alpha the (greedy estimate of the) independence number;
* ``vw`` (Vowpal Wabbit style): ``gamma = gamma_scale * max(n, 1) ** gamma_exponent``,
  n = number of learn calls so far (``max`` avoids gamma = 0 before the first feedback);
* ``doubling`` (paper App. D): start at ``gamma_initial``; accumulate the minimal dec of each
  decision; once the sum exceeds ``gamma * reg_sq`` (reg_sq: the oracle's square-loss regret
  budget) gamma doubles and the sum restarts. The oracle is kept, not restarted;
* ``constant``: ``gamma``.

>>> from banditflow.learners.graph_cb.schedules import GammaSchedule
>>> schedule = GammaSchedule("doubling", {"gamma_initial": 4.0, "reg_sq": 0.1})
>>> schedule.gamma(alpha=1)
4.0
>>> schedule.record_decision(0.5)
>>> schedule.gamma(alpha=1)
8.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from banditflow.learners.base import JSON

SCHEDULES = ("sqrt_alpha", "vw", "doubling", "constant")


class GammaSchedule:
    """The gamma of each decision and the counters it depends on (part of learner state)."""

    def __init__(self, kind: str, settings: Mapping[str, float]) -> None:
        self.kind = kind
        self.settings = dict(settings)
        self.decisions = 0
        self.learn_calls = 0
        self.doubling_gamma = self.settings.get("gamma_initial", 0.0)
        self.dec_sum = 0.0

    def gamma(self, alpha: int) -> float:
        """gamma for the next decision, whose graph has independence number ``alpha``."""
        if self.kind == "sqrt_alpha":
            return self.settings["gamma_c"] * math.sqrt(alpha * (self.decisions + 1))
        if self.kind == "vw":
            n = max(self.learn_calls, 1)
            return self.settings["gamma_scale"] * n ** self.settings["gamma_exponent"]
        if self.kind == "doubling":
            return self.doubling_gamma
        return self.settings["gamma"]

    def record_decision(self, dec: float) -> None:
        """Count one decision; ``dec`` is its (minimal) dec, used by the doubling schedule."""
        self.decisions += 1
        if self.kind == "doubling":
            self.dec_sum += dec
            if self.dec_sum > self.doubling_gamma * self.settings["reg_sq"]:
                self.doubling_gamma *= 2.0
                self.dec_sum = 0.0

    def record_learn(self) -> None:
        """Count one learn call (the VW schedule's n)."""
        self.learn_calls += 1

    def to_state(self) -> JSON:
        return {
            "decisions": self.decisions,
            "learn_calls": self.learn_calls,
            "doubling_gamma": self.doubling_gamma,
            "dec_sum": self.dec_sum,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.decisions = int(state["decisions"])
        self.learn_calls = int(state["learn_calls"])
        self.doubling_gamma = float(state["doubling_gamma"])
        self.dec_sum = float(state["dec_sum"])
