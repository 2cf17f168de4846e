"""ETC and Con-ETC: explore with the full label set, then commit to one threshold (paper, App. A).

Update rule: output the full set (``tau = -inf``) until ``m = explore_rounds`` feedbacks have
been incorporated, then commit for good to

    tau = sup{tau : G_m(tau) + eps <= 1 - c}
        = (floor(m (1 - c - eps)))-th smallest (0-indexed) of the m exploration values,

where ``G_m`` is the empirical CDF of those values and a miss is substituted by the threshold
it was decided with (same rule as SPS), which during exploration is ``-inf``: a miss under
the full set (the true label was not among the candidates, or a timeout) counts as a value
below every score. ETC uses ``eps = 0`` (the plug-in quantile, which overshoots ``tau*``
with probability about 1/2 and then undercovers every round). Con-ETC uses the DKW width
``eps = sqrt(ln(2/delta) / (2 m))`` with ``delta = 2 / T^2``, so ``tau <= tau*`` with
probability at least ``1 - 2/T``; if ``eps > 1 - c`` it commits to the full set.

Rounds are counted in incorporated feedbacks (as SPS counts ``n``): with delayed feedback
more than ``m`` decisions get the full set, and feedback arriving after the commit is
ignored.

Default ``m``: the SPS burn-in for the horizon, ``ceil(ln(T^2) / (2 (1 - c)^2))`` (922
for T = 10^4, c = 0.9), so ETC explores exactly as long as SPS outputs full sets. At this
``m`` Con-ETC's ``eps`` is just below ``1 - c`` and it commits to about the smallest
exploration score (nearly the full set); the paper grid-searches ``m``, so set
``explore_rounds`` explicitly for Con-ETC.

Memory: only the ``floor(m (1 - c - eps)) + 1`` smallest exploration scores are kept
(``lowest``), and none after the commit.

Parameters: ``target_coverage`` c (default 0.9; former name
``alpha``); ``horizon`` T (required);
``explore_rounds`` m (default above; 1 <= m <= T).

>>> import numpy as np
>>> from banditflow.learners.conformal.etc import ETC
>>> rng = np.random.default_rng(0)
>>> etc = ETC.from_params({"target_coverage": 0.9, "horizon": 2000, "explore_rounds": 500})
>>> for t in range(2000):  # the true label "a" scores U(0, 1), so tau* = 0.1
...     decided = etc.decide({"labels": ["a", "b"], "scores": [rng.uniform(), -1.0]}, rng)
...     covered = "a" in decided.output["labels"]
...     _ = etc.learn(decided.pending, {"label": "a"} if covered else {"missed": True})
...     if t == 498:
...         print(etc.threshold)
-inf
>>> round(etc.threshold, 2)  # the 50th smallest of the first 500 scores: above tau* here
0.11
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar, Self

from banditflow.learners.base import LearnerError
from banditflow.learners.conformal.base import ConformalLearner, ConformalParams
from banditflow.learners.conformal.sps import fixed_log_term
from banditflow.learners.declared import State, param


def sps_burn_in(coverage: float, horizon: int) -> int:
    """Feedbacks SPS needs before eps_n <= 1 - c (it outputs full sets until then)."""
    return math.ceil(fixed_log_term(horizon) / (2.0 * (1.0 - coverage) ** 2))


@dataclass(frozen=True, kw_only=True)
class ETCParams(ConformalParams):
    horizon: int = param(ge=2, what="T")
    explore_rounds: int | None = None
    """m; None: the SPS burn-in for the horizon."""

    def validated(self) -> Self:
        explore_rounds = self.explore_rounds
        source = ""
        if explore_rounds is None:
            explore_rounds = sps_burn_in(self.target_coverage, self.horizon)
            source = " (default: SPS burn-in)"
        if not 1 <= explore_rounds <= self.horizon:
            raise LearnerError(
                f"parameter 'explore_rounds'{source} must be in [1, horizon={self.horizon}], "
                f"got {explore_rounds}"
            )
        return dataclasses.replace(self, explore_rounds=explore_rounds)


@dataclass(kw_only=True)
class ETCState(State):
    tau: float | None
    committed: bool
    n: int
    n_miss: int
    lowest: list[float]


class ETC(ConformalLearner):
    """Explore-then-commit to the empirical quantile; see the module docstring."""

    algorithm: ClassVar[str] = "etc"
    Params = ETCParams
    State = ETCState

    def __init__(self, params: ETCParams) -> None:
        super().__init__(params)
        assert params.explore_rounds is not None  # (the params record sets its default)
        self.horizon = params.horizon
        self.explore_rounds = params.explore_rounds
        # < 0: the full set
        self.rank = math.floor(self.explore_rounds * (1.0 - self.target_coverage - self.width()))
        self.n = 0  # exploration feedbacks incorporated
        self.n_miss = 0
        self.lowest: list[float] = []  # the rank + 1 smallest exploration scores, sorted
        self.committed = False
        self.tau: float | None = None  # None is -inf: the full label set

    def width(self) -> float:
        """The confidence width eps added to the empirical CDF at the commit (0 for ETC)."""
        return 0.0

    @property
    def threshold(self) -> float:
        return -math.inf if self.tau is None else self.tau

    def observe(self, score: float | None) -> None:
        """Record one exploration value; commit after the m-th. Ignored once committed."""
        if self.committed:
            return
        self.n += 1
        if score is None:
            self.n_miss += 1  # substituted by the full set's threshold, -inf
        else:
            bisect.insort(self.lowest, score)
            if len(self.lowest) > self.rank + 1:
                self.lowest.pop()
        if self.n == self.explore_rounds:
            index = self.rank - self.n_miss  # < 0: the selected value is a substituted -inf
            self.tau = self.lowest[index] if index >= 0 else None
            self.lowest = []
            self.committed = True


class ConETC(ETC):
    """Explore-then-commit to the DKW-corrected (conservative) quantile."""

    algorithm: ClassVar[str] = "con_etc"

    def width(self) -> float:
        """eps_m = sqrt(ln(2/delta) / (2m)) with the paper's delta = 2 / T^2."""
        return math.sqrt(fixed_log_term(self.horizon) / (2.0 * self.explore_rounds))
