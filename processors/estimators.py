"""Off-policy evaluation from running sums: the estimator maths of ``banditflow ope``
(:mod:`banditflow.offline.ope.evaluation`) and of live OPE (:mod:`banditflow.processors.ope`),
which both import it.

**Estimators.** A target policy pi is scored on logged rounds (context x_i, logged action
a_i drawn with propensity mu_i, reward r_i) through per-round weights
w_i = pi(a_i | x_i) / mu_i. :class:`Sums` keeps the handful of moments the estimators need,
so that the batch estimators of ``banditflow ope`` (:mod:`banditflow.offline.ope.evaluation`, which
builds it from arrays, :meth:`Sums.of`) and the live ones (which add one round at a time)
are the same formulas:

* IPS: the mean of w_i r_i, with a normal 95 % interval;
* SNIPS: sum w_i r_i / sum w_i, its interval from the delta method (the variance of the
  linearised terms w_i (r_i - value) / mean w);
* DR: the mean of direct_i + w_i (r_i - modelled_i), where direct_i = sum_a pi(a | x_i)
  q(x_i, a) and modelled_i = q(x_i, a_i) come from a reward model q that never saw round i;
* Kish's effective sample size (sum w)^2 / sum w^2.

Variances come from running means and centred co-moments (Welford's update, the same
numbers whether the rounds come one at a time or as a batch), not from raw sums of squares,
which cancel catastrophically when the terms are large next to their spread. An interval
needs :data:`MIN_INTERVAL_SIZE` rounds and as large an effective sample size: with fewer, the
normal approximation is meaningless (one nonzero weight gives SNIPS a zero-width interval), so
the bounds are left undefined (NaN) and only the value is reported.

>>> import numpy as np
>>> sums = Sums.of(np.array([2.0, 0.0, 2.0, 0.0]), np.array([1.0, 0.0, 0.5, 1.0]))
>>> sums.ips().value, sums.snips().value, sums.ess()
(0.75, 0.75, 2.0)
>>> live = Sums()
>>> for w, r in ((2.0, 1.0), (0.0, 0.0), (2.0, 0.5), (0.0, 1.0)):
...     live.add(w, w * r, w * r)
>>> live.ips() == sums.ips() and live.snips() == sums.snips()
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

Z_95 = 1.959963984540054
# Propensities below this are raised to it in the weights pi / mu: no round weighs more than
# 1 / MIN_PROPENSITY (``banditflow ope --min-propensity``'s default; see offline.ope.evaluation).
MIN_PROPENSITY = 1e-3
# The fewest rounds, and the smallest effective sample size, with which an estimate gets its
# 95 % interval: below, the normal approximation says nothing (an estimate from one nonzero
# weight has a zero-width interval), so only the value is given.
MIN_INTERVAL_SIZE = 10
RIDGE = 1.0  # the reward model's ridge penalty (offline and live)

@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95 % confidence interval (NaN when undefined)."""

    value: float
    ci_low: float
    ci_high: float

    def as_dict(self) -> dict[str, float | None]:
        """JSON-ready: NaN (undefined) bounds become None."""
        return {name: (number if math.isfinite(number) else None)
                for name, number in (("value", self.value), ("ci_low", self.ci_low),
                                     ("ci_high", self.ci_high))}


UNDEFINED = Estimate(math.nan, math.nan, math.nan)


def with_interval(value: float, variance: float, n: int, ess: float) -> Estimate:
    """``value`` and its normal 95 % interval from the variance of its ``n`` per-round terms,
    if ``n`` and the effective sample size ``ess`` reach :data:`MIN_INTERVAL_SIZE`."""
    if n < MIN_INTERVAL_SIZE or ess < MIN_INTERVAL_SIZE:
        return Estimate(value, math.nan, math.nan)
    half = Z_95 * math.sqrt(max(0.0, variance) / n)
    return Estimate(value, value - half, value + half)


@dataclass(slots=True)
class Sums:
    """Running means and centred co-moments of scored rounds (module docstring): weights w,
    weighted rewards y = w r and DR terms t. ``mean_t`` is NaN for rounds given without DR
    terms (DR is then undefined)."""

    n: int = 0
    mean_w: float = 0.0
    mean_y: float = 0.0
    mean_t: float = 0.0
    m2_w: float = 0.0  # sum (w - mean_w)^2
    m2_y: float = 0.0  # sum (y - mean_y)^2
    c_wy: float = 0.0  # sum (w - mean_w)(y - mean_y)
    m2_t: float = 0.0  # sum (t - mean_t)^2

    @classmethod
    def of(cls, weights: np.ndarray, rewards: np.ndarray,
           terms: np.ndarray | None = None) -> Sums:
        """The sums of a batch of rounds (``terms``: their DR terms; without, DR is
        undefined)."""
        n = len(weights)
        if n == 0:
            return cls(mean_t=0.0 if terms is not None else math.nan)
        y = weights * rewards
        dw, dy = weights - np.mean(weights), y - np.mean(y)
        if terms is None:
            mean_t = m2_t = math.nan
        else:
            mean_t = float(np.mean(terms))
            m2_t = float(np.sum((terms - mean_t) ** 2))
        return cls(n, float(np.mean(weights)), float(np.mean(y)), mean_t,
                   float(dw @ dw), float(dy @ dy), float(dw @ dy), m2_t)

    def add(self, weight: float, weighted: float, term: float) -> None:
        """One more round: its weight w, weighted reward y (w r with bandit feedback) and DR
        term t (Welford's update)."""
        y = weighted
        self.n += 1
        n = self.n
        dw = weight - self.mean_w
        dy = y - self.mean_y
        dt = term - self.mean_t
        self.mean_w += dw / n
        self.mean_y += dy / n
        self.mean_t += dt / n
        self.m2_w += dw * (weight - self.mean_w)
        self.m2_y += dy * (y - self.mean_y)
        self.c_wy += dw * (y - self.mean_y)
        self.m2_t += dt * (term - self.mean_t)

    def ips(self) -> Estimate:
        """Inverse propensity scoring: mean of w_i r_i (unbiased when every mu_i > 0 where
        pi > 0)."""
        n = self.n
        if n == 0:
            return UNDEFINED
        return with_interval(self.mean_y, self.m2_y / max(1, n - 1), n, self.ess())

    def snips(self) -> Estimate:
        """Self-normalised IPS: sum w_i r_i / sum w_i (biased, consistent, often lower
        variance; undefined when the target never plays a logged action). Its variance is the
        delta method's: that of the linearised terms (y_i - value w_i) / mean w, whose sum of
        squares is exactly m2_y - 2 value c_wy + value^2 m2_w (they sum to zero)."""
        n = self.n
        if n == 0 or self.mean_w <= 0.0:
            return UNDEFINED
        value = self.mean_y / self.mean_w
        squares = self.m2_y - 2.0 * value * self.c_wy + value * value * self.m2_w
        variance = squares / max(1, n - 1) / (self.mean_w * self.mean_w)
        return with_interval(value, variance, n, self.ess())

    def dr(self) -> Estimate:
        """Doubly robust: mean of the DR terms; unbiased when the weights are right, whatever
        the reward model, provided the model never saw the round it corrects."""
        n = self.n
        if n == 0 or math.isnan(self.mean_t):
            return UNDEFINED
        return with_interval(self.mean_t, self.m2_t / max(1, n - 1), n, self.ess())

    def ess(self) -> float:
        """Kish's effective sample size (sum w)^2 / sum w^2: how many rounds the estimate is
        worth (the number of rounds when every weight is equal, 0 when all are 0)."""
        squares = self.m2_w + self.n * self.mean_w * self.mean_w  # sum w^2
        return (self.n * self.mean_w) ** 2 / squares if squares > 0 else 0.0

    def estimates(self, policy: str, learned_from: int | None = None) -> PolicyEstimates:
        return PolicyEstimates(policy, self.ips(), self.snips(), self.dr(), self.ess(),
                               learned_from, self.n)

    def to_json(self) -> list[float]:
        return [self.n, self.mean_w, self.mean_y, self.mean_t, self.m2_w, self.m2_y,
                self.c_wy, self.m2_t]

    @classmethod
    def from_json(cls, data: list[float]) -> Sums:
        return cls(int(data[0]), *data[1:])

    @classmethod
    def from_raw(cls, data: list[float]) -> Sums:
        """Sums as the first live OPE logs kept them, raw: n, sum w, w^2, w r, w^2 r, w^2 r^2,
        t, t^2 (read once, then written as moments)."""
        n, w, w2, y, wy, y2, t, t2 = data
        n = int(n)
        if n == 0:
            return cls()
        mean_w, mean_y, mean_t = w / n, y / n, t / n
        return cls(n, mean_w, mean_y, mean_t, max(0.0, w2 - n * mean_w * mean_w),
                   max(0.0, y2 - n * mean_y * mean_y), wy - n * mean_w * mean_y,
                   max(0.0, t2 - n * mean_t * mean_t))


@dataclass
class PolicyEstimates:
    """One target policy's estimates, effective sample size and scored rounds; live, also the
    rounds a candidate could not be scored on (``skipped``: it failed to decide) and those
    whose explore_eval acceptance was clipped (``clipped``: the logged propensity was below
    its bound)."""

    policy: str
    ips: Estimate
    snips: Estimate
    dr: Estimate
    ess: float
    learned_from: int | None = None  # a learning policy: the rounds it learned from
    rounds: int = 0
    skipped: int = 0
    clipped: int = 0
    # live, a candidate's paired difference from the logged policy on the same rounds (the
    # mean of its IPS / DR terms minus the logged policy's): narrower than the difference of
    # two separate intervals, for both share each round's reward noise
    ips_difference: Estimate | None = None
    dr_difference: Estimate | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "ips": self.ips.as_dict(),
                "snips": self.snips.as_dict(), "dr": self.dr.as_dict(), "ess": self.ess}


def ridge_coefficients(gram: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """Ridge regression's coefficients from X^T X and X^T y (batched over leading axes)."""
    penalised = gram + RIDGE * np.eye(gram.shape[-1])
    return np.linalg.solve(penalised, moment[..., None])[..., 0]


def explore_eval_acceptance(target: float, bound: float, propensity: float) -> float:
    """The probability with which a learning policy learns from a logged round,
    explore_eval-style: pi(a) bound / mu(a), where ``bound`` is at most every clipped
    propensity the round's action could have had, so that the rounds accepted are distributed
    as if the policy had played them (its own distribution pi). Above 1 (mu below the bound),
    acceptance is clipped and the accepted rounds under-represent that round's kind."""
    return target * bound / propensity
