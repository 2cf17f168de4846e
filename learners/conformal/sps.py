"""SPS: Semi-bandit Prediction Sets (Ge, Bastani & Bastani), in order-statistic form.

The learner outputs ``C_t = {y : score(y) >= tau}``. On feedback it inverts the DKW upper
bound of the empirical CDF of ``max(tau, s_j)`` at ``1 - alpha`` and only ever raises ``tau``.
Misses (and timeouts) are substituted by the threshold they were decided with, which is at
most the current ``tau``, so they are simply counted in ``n_le``.

State: ``n`` incorporated feedbacks, ``n_le`` values at or below ``tau``, and the sorted
observed scores above ``tau`` (``above``). With a known horizon ``T`` the selected rank never
exceeds ``(1 - alpha) T``, so only the ``ceil((1 - alpha) T) + 1`` smallest values are kept
(``memory_bound``); values that would rank higher are counted in ``dropped`` and their
minimum kept in ``drop_floor``. Should a rank ever fall among the dropped values (only past
the horizon) the threshold is rounded **down** to ``drop_floor``, which keeps it safe.

>>> import numpy as np
>>> from learners.conformal.sps import SPS
>>> rng = np.random.default_rng(0)
>>> sps = SPS.from_params({"alpha": 0.9, "horizon": 2000})
>>> for t in range(2000):  # the true label "a" scores U(0, 1), so tau* = 0.1
...     decided = sps.decide({"labels": ["a", "b"], "scores": [rng.uniform(), -1.0]}, rng)
...     covered = "a" in decided.output["labels"]
...     _ = sps.learn(decided.pending, {"label": "a"} if covered else {"missed": True})
>>> 0.0 < sps.threshold <= 0.1
True
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from learners.base import LearnerError, check_unknown, require
from learners.conformal.base import ConformalLearner


def fixed_log_term(horizon: int) -> float:
    """ln(2 / delta) for the paper's delta = 2 / T^2."""
    return math.log(horizon**2)


def anytime_log_term(n: int, delta: float) -> float:
    """ln(2 / delta_n) for the anytime schedule delta_n = 6 delta / (pi^2 n^2)."""
    return math.log(2.0 * math.pi**2 * n * n / (6.0 * delta))


class SPS(ConformalLearner):
    """SPS with the paper's fixed-horizon schedule or an anytime schedule.

    Parameters: ``alpha`` target coverage (default 0.9); ``horizon`` T (fixed schedule);
    ``schedule`` ``"fixed"`` (delta = 2/T^2, the paper's) or ``"anytime"``
    (delta_n = 6 delta / (pi^2 n^2), no horizon needed); ``delta`` for the anytime schedule
    (default 0.01).
    """

    algorithm: ClassVar[str] = "sps"
    PARAMS: ClassVar[set[str]] = {"alpha", "horizon", "schedule", "delta"}

    def __init__(self, alpha: float, schedule: str, horizon: int | None, delta: float) -> None:
        self.alpha = alpha
        self.schedule = schedule
        self.horizon = horizon
        self.delta = delta
        self.tau: float | None = None  # None is -inf: the full label set
        self.n = 0
        self.n_le = 0
        self.above: list[float] = []
        self.dropped = 0
        self.drop_floor: float | None = None
        self.memory_bound = (
            math.ceil((1.0 - alpha) * horizon) + 1 if schedule == "fixed" and horizon else None
        )
        self._fixed_log = fixed_log_term(horizon) if schedule == "fixed" and horizon else 0.0

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        check_unknown(params, cls.PARAMS)
        alpha = require(params, "alpha", float, 0.9)
        if not 0.0 < alpha < 1.0:
            raise LearnerError(
                f"parameter 'alpha' (target coverage) must be in (0, 1), got {alpha}"
            )
        horizon = params.get("horizon")
        schedule = str(params.get("schedule") or ("fixed" if horizon is not None else "anytime"))
        if schedule not in ("fixed", "anytime"):
            raise LearnerError(
                f"parameter 'schedule' must be 'fixed' or 'anytime', got {schedule!r}"
            )
        if schedule == "fixed":
            if horizon is None:
                raise LearnerError(
                    "the fixed schedule needs parameter 'horizon' (T); use schedule 'anytime' "
                    "when the horizon is unknown"
                )
            horizon = require(params, "horizon", int)
            if horizon < 2:
                raise LearnerError(f"parameter 'horizon' must be >= 2, got {horizon}")
        delta = require(params, "delta", float, 0.01)
        if not 0.0 < delta < 1.0:
            raise LearnerError(f"parameter 'delta' must be in (0, 1), got {delta}")
        return cls(alpha, schedule, horizon, delta)

    @property
    def threshold(self) -> float:
        return -math.inf if self.tau is None else self.tau

    def epsilon(self, n: int) -> float:
        """The DKW width eps_n after n incorporated feedbacks."""
        log_term = self._fixed_log if self.schedule == "fixed" else anytime_log_term(n, self.delta)
        return math.sqrt(log_term / (2.0 * n))

    def observe(self, score: float | None) -> None:
        """Incorporate one feedback: the true score if covered, None for a miss."""
        self.n += 1
        if score is None or (self.tau is not None and score <= self.tau):
            self.n_le += 1
        elif self.drop_floor is not None and score >= self.drop_floor:
            self.dropped += 1  # ranks above the memory bound: never selectable before T
        else:
            bisect.insort(self.above, score)
        self._trim()
        eps = self.epsilon(self.n)
        if eps > 1.0 - self.alpha:
            return  # burn-in: the DKW band is too wide to exclude any label yet
        k = math.floor(self.n * (1.0 - self.alpha - eps))
        if k < self.n_le:
            return
        index = k - self.n_le
        candidate = self.above[index] if index < len(self.above) else self.drop_floor
        if candidate is None or (self.tau is not None and candidate <= self.tau):
            return
        below = bisect.bisect_left(self.above, candidate)
        del self.above[:below]
        self.n_le += below
        self.tau = candidate

    def _trim(self) -> None:
        """Drop the values whose rank exceeds the memory bound: ranks only grow, and no rank
        above (1 - alpha) T is ever selected within the horizon."""
        if self.memory_bound is None:
            return
        while self.above and self.n_le + len(self.above) > self.memory_bound:
            largest = self.above.pop()
            self.dropped += 1
            self.drop_floor = largest if self.drop_floor is None else min(self.drop_floor, largest)

    def summary(self) -> dict[str, float | list[float]]:
        # n_le / n estimates G*(tau): tau only rises, so every miss lies at or below it.
        return {**super().summary(), "miscoverage_estimate": self.n_le / self.n if self.n else 0.0}

    def to_state(self) -> dict[str, Any]:
        return {
            "tau": self.tau,
            "n": self.n,
            "n_le": self.n_le,
            "above": list(self.above),
            "dropped": self.dropped,
            "drop_floor": self.drop_floor,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.tau = state["tau"]
        self.n = int(state["n"])
        self.n_le = int(state["n_le"])
        self.above = [float(v) for v in state["above"]]
        self.dropped = int(state.get("dropped", 0))
        self.drop_floor = state.get("drop_floor")
