"""ACI: Adaptive Conformal Inference (Gibbs & Candes 2021) run on semi-bandit feedback.

Update rule, with ``a = 1 - c`` the target miscoverage and ``err = 1[miss]``:

    a_1 = a,    a_{t+1} = a_t + gamma (a - err_t),
    tau_t = sup{tau : F_t(tau) <= a_t} = (floor(m a_t))-th smallest (0-indexed) observed score,

where ``F_t`` is the empirical CDF of the ``m`` retained scores. A miss lowers ``a_t`` (a
lower quantile, a bigger set); a covered round raises it slightly. Edge cases:
``a_t <= 0`` gives the full set (``tau = -inf``), ``a_t >= 1`` the empty set
(``tau = +inf``), and no retained score yet gives the full set.

Only covered rounds reveal a score, so ``F_t`` is fitted to scores at or above past
thresholds and is biased upward; this is the adaptation the paper evaluates. ``a_t`` is not
clipped (as in the original), and ACI's long-run guarantee on the miss rate holds for any
quantile function, so the coverage rate still ends near ``c``; the bias shows as a
threshold that oscillates around ``tau*``: on U(0, 1) scores with c = 0.9 over 10^4
rounds the coverage rate is 0.898 and ``tau_t > tau*`` in about half of the rounds.
A level ``>= 1`` publishes an empty set; the shared ``decide`` reports its threshold as
``null``, as for the full set, so read ``set_size`` to tell them apart.

Memory: the quantile is taken over the last ``window`` observed scores (a sliding window,
FIFO), so the state holds at most ``window`` floats plus ``a_t`` (about 20 kB of JSON at the
default, like SPS's bound for T = 10^4). With ``window`` at least the number of covered
rounds this is exactly "all scores observed so far"; a finite window is also how ACI is used
on drifting streams. The state keeps the window in arrival order; the sorted copy is rebuilt
on load.

Parameters: ``target_coverage`` c (default 0.9; former name
``alpha``); ``gamma`` step size (default 0.005;
the paper grid-searches {0.001, 0.002, 0.004, ..., 0.128}); ``window`` (default 1000).

>>> import numpy as np
>>> from banditflow.learners.conformal.aci import ACI
>>> rng = np.random.default_rng(0)
>>> aci = ACI.from_params({"target_coverage": 0.9, "gamma": 0.005})
>>> above_optimum = 0
>>> for t in range(2000):  # the true label "a" scores U(0, 1), so tau* = 0.1
...     above_optimum += aci.threshold > 0.1
...     decided = aci.decide({"labels": ["a", "b"], "scores": [rng.uniform(), -1.0]}, rng)
...     covered = "a" in decided.output["labels"]
...     _ = aci.learn(decided.pending, {"label": "a"} if covered else {"missed": True})
>>> above_optimum > 100  # undercovers often
True
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import ClassVar

from banditflow.learners.conformal.base import ConformalLearner, ConformalParams
from banditflow.learners.declared import State, param


@dataclass(frozen=True, kw_only=True)
class ACIParams(ConformalParams):
    gamma: float = param(0.005, gt=0, what="step size")
    window: int = param(1000, ge=1, what="retained scores")


@dataclass(kw_only=True)
class ACIState(State):
    level: float
    recent: deque[float]


class ACI(ConformalLearner):
    """ACI with the quantile of the covered rounds' scores; see the module docstring."""

    algorithm: ClassVar[str] = "aci"
    Params = ACIParams
    State = ACIState

    def __init__(self, params: ACIParams) -> None:
        super().__init__(params)
        self.gamma = params.gamma
        self.window = params.window
        self.level = 1.0 - params.target_coverage  # a_t, the current miscoverage level
        self.recent: deque[float] = deque()  # observed scores, oldest first
        self.ordered: list[float] = []  # the same scores, sorted

    @property
    def threshold(self) -> float:
        if self.level >= 1.0:
            return math.inf
        if self.level <= 0.0 or not self.ordered:
            return -math.inf
        return self.ordered[math.floor(len(self.ordered) * self.level)]

    def observe(self, score: float | None) -> None:
        """Move the miscoverage level and, when covered, retain the observed score."""
        err = 1.0 if score is None else 0.0
        self.level += self.gamma * ((1.0 - self.target_coverage) - err)
        if score is None:
            return
        self.recent.append(score)
        bisect.insort(self.ordered, score)
        if len(self.recent) > self.window:
            oldest = self.recent.popleft()
            del self.ordered[bisect.bisect_left(self.ordered, oldest)]

    def summary(self) -> dict[str, float | list[float]]:
        return {"threshold": self.threshold, "miscoverage_level": self.level}

    def restored(self) -> None:
        self.ordered = sorted(self.recent)
