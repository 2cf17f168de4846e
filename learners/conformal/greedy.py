"""Greedy: the plug-in threshold of the paper's baseline section, with no confidence width.

Update rule (paper, eq. 3 and "Baselines"): after ``n`` incorporated feedbacks,

    tau_{n+1} = sup{tau : G_n(tau) <= 1 - alpha},
    G_n(tau) = (1/n) sum_j 1[max(tau_n, s_j) <= tau],

where a miss contributes the threshold it was decided with as its ``s_j`` (the same
substitution as SPS). This is SPS with ``eps_n = 0`` and therefore no burn-in: the first
covered feedback already moves ``tau`` to that score.

Monotone, like SPS. The paper's ``G_n`` is the empirical CDF of ``max(tau_n, s_j)``, which is
0 below ``tau_n``, so ``sup{tau : G_n(tau) <= 1 - alpha} >= tau_n``: read literally, the
paper's greedy never lowers ``tau`` (its "increasingly truncated" ``G_t`` in the regret
discussion is this effect). Without a confidence width the plug-in quantile overshoots
``tau*`` early (after one feedback it is that very score) and a monotone threshold never
comes back, so greedy undercovers for the rest of the stream, the failure the paper reports:
on U(0, 1) scores with alpha = 0.9 its coverage rate over 10^4 rounds is 0.37 to 0.73 on
seeds 0-2. (A non-monotone reading, recomputing the quantile of all substituted values
without the truncation at ``tau_n``, would need every value kept and is not what eq. 3
says.) Because ``tau`` only rises, every miss is at or below the current ``tau`` and is
simply counted in ``n_le``, even when its feedback is late.

In order statistics: with ``k = floor(n (1 - alpha))`` the new threshold is the ``k``-th
(0-indexed) smallest of the substituted values, raised to the old ``tau`` if smaller.

State and memory: ``n``, ``n_le`` (values at or below ``tau``) and the sorted scores above
``tau`` (``above``). The rank ``k`` never exceeds ``(1 - alpha) T`` before the horizon ``T``,
so at most ``ceil((1 - alpha) T) + 1`` values are kept (``memory_bound``); larger ones are
counted in ``dropped`` with their minimum in ``drop_floor``. Past the horizon a rank that
falls among the dropped values rounds ``tau`` down to ``drop_floor``.

Parameters: ``alpha`` target coverage (default 0.9); ``horizon`` T (required; it only bounds
the memory).

>>> import numpy as np
>>> from learners.conformal.greedy import Greedy
>>> rng = np.random.default_rng(0)
>>> greedy = Greedy.from_params({"alpha": 0.9, "horizon": 2000})
>>> thresholds = []
>>> for t in range(2000):  # the true label "a" scores U(0, 1), so tau* = 0.1
...     thresholds.append(greedy.threshold)
...     decided = greedy.decide({"labels": ["a", "b"], "scores": [rng.uniform(), -1.0]}, rng)
...     covered = "a" in decided.output["labels"]
...     _ = greedy.learn(decided.pending, {"label": "a"} if covered else {"missed": True})
>>> thresholds == sorted(thresholds)  # monotone
True
>>> greedy.threshold > 0.1  # overshot tau* and stays there
True
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from learners.base import LearnerError, check_unknown, require
from learners.conformal.base import ConformalLearner


class Greedy(ConformalLearner):
    """The plug-in (no confidence width) monotone threshold; see the module docstring."""

    algorithm: ClassVar[str] = "greedy"
    PARAMS: ClassVar[set[str]] = {"alpha", "horizon"}

    def __init__(self, alpha: float, horizon: int) -> None:
        self.alpha = alpha
        self.horizon = horizon
        self.memory_bound = math.ceil((1.0 - alpha) * horizon) + 1
        self.tau: float | None = None  # None is -inf: the full label set
        self.n = 0
        self.n_le = 0
        self.above: list[float] = []
        self.dropped = 0
        self.drop_floor: float | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        check_unknown(params, cls.PARAMS)
        alpha = require(params, "alpha", float, 0.9)
        if not 0.0 < alpha < 1.0:
            raise LearnerError(
                f"parameter 'alpha' (target coverage) must be in (0, 1), got {alpha}"
            )
        if params.get("horizon") is None:
            raise LearnerError("greedy needs parameter 'horizon' (T); it bounds the memory")
        horizon = require(params, "horizon", int)
        if horizon < 1:
            raise LearnerError(f"parameter 'horizon' must be >= 1, got {horizon}")
        return cls(alpha, horizon)

    @property
    def threshold(self) -> float:
        return -math.inf if self.tau is None else self.tau

    def observe(self, score: float | None) -> None:
        """Incorporate one feedback: the true score if covered, None for a miss."""
        self.n += 1
        if score is not None and (self.tau is None or score > self.tau):
            self._insert(score)
        else:
            self.n_le += 1
        k = math.floor(self.n * (1.0 - self.alpha))
        if k < self.n_le:
            return  # the k-th value is at or below tau: G_n(tau) already exceeds 1 - alpha
        index = k - self.n_le
        candidate = self.above[index] if index < len(self.above) else self.drop_floor
        if candidate is None or (self.tau is not None and candidate <= self.tau):
            return
        below = bisect.bisect_left(self.above, candidate)
        del self.above[:below]
        self.n_le += below
        self.tau = candidate

    def _insert(self, score: float) -> None:
        if self.drop_floor is not None and score >= self.drop_floor:
            self.dropped += 1  # ranks above the memory bound: never selectable before T
            return
        bisect.insort(self.above, score)
        if self.n_le + len(self.above) > self.memory_bound:
            largest = self.above.pop()
            self.dropped += 1
            self.drop_floor = largest if self.drop_floor is None else min(self.drop_floor, largest)

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
        self.dropped = int(state["dropped"])
        self.drop_floor = state["drop_floor"]
