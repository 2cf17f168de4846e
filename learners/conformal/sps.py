"""SPS: Semi-bandit Prediction Sets (Ge, Bastani & Bastani), in order-statistic form.

The learner outputs ``C_t = {y : score(y) >= tau}``. On feedback it inverts the DKW upper
bound of the empirical CDF of ``max(tau, s_j)`` at ``1 - c`` and only ever raises ``tau``.
Misses (and timeouts) are substituted by the threshold they were decided with, which is at
most the current ``tau``, so they are simply counted in ``n_le``.

State: ``n`` incorporated feedbacks, ``n_le`` values at or below ``tau``, and the sorted
observed scores above ``tau`` (``above``). With a known horizon ``T`` the selected rank never
exceeds ``(1 - c) T``, so only the ``ceil((1 - c) T) + 1`` smallest values are kept
(``memory_bound``); values that would rank higher are counted in ``dropped`` and their
minimum kept in ``drop_floor``. Should a rank ever fall among the dropped values (only past
the horizon) the threshold is rounded **down** to ``drop_floor``, which keeps it safe.

Bounded memory for any schedule (``max_values = m``, meant for the anytime schedule, whose
exact state otherwise grows with the stream). The scores above ``tau`` are kept as at most
``m`` weighted entries ``(value, count)``, sorted by value; equal scores share one entry.
When an insertion makes ``m + 1`` entries, ``m // 4`` disjoint pairs of adjacent entries are
merged, **each pair into its lower value** with the summed count (an O(m log m) pass once per
~``m/4`` insertions). The pairs chosen are the cheapest by relative rank error,
``(count_i + count_{i+1}) / (1 + count below entry i)``: the lowest entries, where the next
threshold is looked up, stay (nearly) exact and the coarse entries sit far above ``tau``
(a low-biased quantile sketch). The selected rank is looked up by cumulative count, so an
order statistic that falls inside a merged entry is rounded down to that entry's value. The
rank-based trim above is not used in this mode; the state holds at most ``m`` values and ``m``
counts. Measured on N(1, 1) scores (c = 0.9, anytime, 5 x 10^4 rounds): the final
threshold is within about 0.01 of the exact learner's at ``m = 256``, about 0.1 at ``m = 64``
(tests/unit/test_sps_memory.py).

Safety of the bounded learner (it never exceeds the exact learner, hence never ``tau*`` on the
paper's event). Run the exact learner (``E``) and the bounded one (``B``) on the same data:
the same true-label scores ``s_j``, the same feedback order, delays and losses. Claim: after
every event, ``tau_B <= tau_E``, and the incorporated feedbacks can be paired so that B's
stored value for feedback ``j`` (its score, its substituted threshold, or the lower value it
was merged into; values at or below ``tau`` live in ``n_le``) is at most E's, ``v'_j <= v_j``.
Induction over events. A decision changes nothing. A feedback for a decision made with
thresholds ``t_B <= t_E`` (the claim held then): if E covered, ``s_j >= t_E >= t_B``, so B
covered too and both store ``s_j``; if E missed, E stores ``t_E`` while B stores ``s_j < t_E``
(covered) or ``t_B <= t_E`` (missed). A timeout is a miss of both. Merging only lowers B's
values. Both learners have the same ``n``, hence the same ``eps_n`` (in either schedule), the
same burn-in and the same rank ``k``; the ``k``-th smallest of ``{max(tau_B, v'_j)}`` is at
most the ``k``-th smallest of ``{max(tau_E, v_j)}``, as the two multisets are paired
elementwise. So ``tau_B' = max(tau_B, c_B) <= max(tau_E, c_E) = tau_E'``. Hence, with the
probability of Theorem 1 (``1 - 2/T``, or ``1 - delta`` for the anytime schedule), every set
of the bounded learner contains the optimal set; the price is only a slower approach to
``tau*`` (regret), never coverage.

>>> import numpy as np
>>> from banditflow.learners.conformal.sps import SPS
>>> rng = np.random.default_rng(0)
>>> sps = SPS.from_params({"target_coverage": 0.9, "horizon": 2000})
>>> for t in range(2000):  # the true label "a" scores U(0, 1), so tau* = 0.1
...     decided = sps.decide({"labels": ["a", "b"], "scores": [rng.uniform(), -1.0]}, rng)
...     covered = "a" in decided.output["labels"]
...     _ = sps.learn(decided.pending, {"label": "a"} if covered else {"missed": True})
>>> 0.0 < sps.threshold <= 0.1
True
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar, Self

import numpy as np

from banditflow.learners.base import LearnerError
from banditflow.learners.conformal.base import ConformalLearner, ConformalParams
from banditflow.learners.declared import State, param

MIN_MAX_VALUES = 16


def fixed_log_term(horizon: int) -> float:
    """ln(2 / delta) for the paper's delta = 2 / T^2."""
    return math.log(horizon**2)


def anytime_log_term(n: int, delta: float) -> float:
    """ln(2 / delta_n) for the anytime schedule delta_n = 6 delta / (pi^2 n^2)."""
    return math.log(2.0 * math.pi**2 * n * n / (6.0 * delta))


@dataclass(frozen=True, kw_only=True)
class SPSParams(ConformalParams):
    horizon: int | None = None
    """T, required by the fixed schedule."""
    schedule: str | None = param(None, choices=("fixed", "anytime"))
    """None: ``fixed`` when a horizon is given, else ``anytime``."""
    delta: float = param(0.01, gt=0, lt=1)
    max_values: int | None = param(None, ge=MIN_MAX_VALUES)

    def validated(self) -> Self:
        schedule = self.schedule or ("fixed" if self.horizon is not None else "anytime")
        if schedule == "fixed":
            if self.horizon is None:
                raise LearnerError(
                    "the fixed schedule needs parameter 'horizon' (T); use schedule 'anytime' "
                    "when the horizon is unknown"
                )
            if self.horizon < 2:
                raise LearnerError(f"parameter 'horizon' must be >= 2, got {self.horizon}")
        return dataclasses.replace(self, schedule=schedule)


@dataclass(kw_only=True)
class SPSState(State):
    tau: float | None
    n: int
    n_le: int
    above: list[float]
    dropped: int = 0
    drop_floor: float | None = None


@dataclass(kw_only=True)
class BoundedSPSState(SPSState):
    """With ``max_values``: ``above`` holds distinct values and ``weights`` their counts."""

    weights: list[int] | None = None


class SPS(ConformalLearner):
    """SPS with the paper's fixed-horizon schedule or an anytime schedule.

    Parameters: ``target_coverage`` c (default 0.9; former name ``alpha``); ``horizon`` T
    (fixed schedule);
    ``schedule`` ``"fixed"`` (delta = 2/T^2, the paper's) or ``"anytime"``
    (delta_n = 6 delta / (pi^2 n^2), no horizon needed); ``delta`` for the anytime schedule
    (default 0.01); ``max_values`` (default none: exact) bounds the stored scores by merging
    them into lower values (module docstring; at least ``MIN_MAX_VALUES``).
    """

    algorithm: ClassVar[str] = "sps"
    Params = SPSParams
    State = SPSState

    def __init__(self, params: SPSParams) -> None:
        super().__init__(params)
        self.schedule = params.schedule
        self.horizon = horizon = params.horizon
        self.delta = params.delta
        self.tau: float | None = None  # None is -inf: the full label set
        self.n = 0
        self.n_le = 0
        self.above: list[float] = []
        self.dropped = 0
        self.drop_floor: float | None = None
        self.max_values = max_values = params.max_values
        # With max_values, ``above`` holds distinct values and ``weights`` their counts.
        self.weights: list[int] | None = [] if max_values is not None else None
        fixed = params.schedule == "fixed" and horizon
        self.memory_bound = (
            math.ceil((1.0 - self.target_coverage) * horizon) + 1
            if fixed and max_values is None
            else None
        )
        self._fixed_log = fixed_log_term(horizon) if fixed else 0.0

    def state_record(self) -> type[State]:
        return SPSState if self.max_values is None else BoundedSPSState

    def restored(self) -> None:
        if self.max_values is not None and self.weights is None:  # (an unbounded learner's)
            self.weights = [1] * len(self.above)

    @property
    def threshold(self) -> float:
        return -math.inf if self.tau is None else self.tau

    def epsilon(self, n: int) -> float:
        """The DKW width eps_n after n incorporated feedbacks."""
        log_term = self._fixed_log if self.schedule == "fixed" else anytime_log_term(n, self.delta)
        return math.sqrt(log_term / (2.0 * n))

    def observe(self, score: float | None) -> None:
        """Incorporate one feedback: the true score if covered, None for a miss."""
        if self.weights is not None:
            self._observe_bounded(score, self.weights)
            return
        self.n += 1
        if score is None or (self.tau is not None and score <= self.tau):
            self.n_le += 1
        elif self.drop_floor is not None and score >= self.drop_floor:
            self.dropped += 1  # ranks above the memory bound: never selectable before T
        else:
            bisect.insort(self.above, score)
        if self.memory_bound is not None and self.n_le + len(self.above) > self.memory_bound:
            self._trim()
        eps = self.epsilon(self.n)
        if eps > 1.0 - self.target_coverage:
            return  # burn-in: the DKW band is too wide to exclude any label yet
        k = math.floor(self.n * (1.0 - self.target_coverage - eps))
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

    def _observe_bounded(self, score: float | None, weights: list[int]) -> None:
        """``observe`` with at most ``max_values`` weighted entries (module docstring)."""
        self.n += 1
        above = self.above
        if score is None or (self.tau is not None and score <= self.tau):
            self.n_le += 1
        else:
            i = bisect.bisect_left(above, score)
            if i < len(above) and above[i] == score:
                weights[i] += 1
            else:
                above.insert(i, score)
                weights.insert(i, 1)
                if len(above) > self.max_values:  # type: ignore[operator]
                    self._merge_down(above, weights)
        eps = self.epsilon(self.n)
        if eps > 1.0 - self.target_coverage:
            return
        k = math.floor(self.n * (1.0 - self.target_coverage - eps))
        if k < self.n_le:
            return
        rank = k - self.n_le  # 0-indexed, < n - n_le = sum(weights)
        index, seen = 0, weights[0]
        while seen <= rank:
            index += 1
            seen += weights[index]
        candidate = above[index]
        if self.tau is not None and candidate <= self.tau:
            return
        self.n_le += sum(weights[:index])
        del above[:index]
        del weights[:index]
        self.tau = candidate

    def _merge_down(self, above: list[float], weights: list[int]) -> None:
        """Merge ``max_values // 4`` disjoint adjacent pairs of entries, each into its lower
        value (scores are only ever rounded down: see the safety proof). The pairs merged are
        the cheapest by ``(count_i + count_{i+1}) / (1 + count below entry i)``, a relative
        rank error, so the low ranks the threshold moves through stay (nearly) exact; pairs
        start at even or odd entries by the parity of ``n`` so no boundary is fixed."""
        merges = self.max_values // 4  # type: ignore[operator]
        counts = np.asarray(weights, dtype=np.float64)
        below = np.cumsum(counts) - counts
        first = np.arange(self.n % 2, len(counts) - 1, 2)
        cost = (counts[first] + counts[first + 1]) / (below[first] + 1.0)
        if len(first) > merges:
            first = first[np.argpartition(cost, merges - 1)[:merges]]
        for i in sorted(first.tolist(), reverse=True):
            weights[i] += weights[i + 1]
            del above[i + 1]
            del weights[i + 1]

    def _trim(self) -> None:
        """Drop the values whose rank exceeds the memory bound: ranks only grow, and no rank
        above (1 - c) T is ever selected within the horizon."""
        while self.above and self.n_le + len(self.above) > self.memory_bound:  # type: ignore[operator]
            largest = self.above.pop()
            self.dropped += 1
            self.drop_floor = largest if self.drop_floor is None else min(self.drop_floor, largest)

    def summary(self) -> dict[str, float | list[float]]:
        # n_le / n estimates G*(tau): tau only rises, so every miss lies at or below it.
        return {**super().summary(), "miscoverage_estimate": self.n_le / self.n if self.n else 0.0}
