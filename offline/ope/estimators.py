"""Off-policy estimators of a target policy's mean reward from logged bandit rounds.

Every estimator takes per-round arrays: ``weights`` w_i = pi(a_i | x_i) / mu_i (the target
policy's probability of the logged action over the logging propensity), ``rewards`` r_i, and
for DR ``direct`` (sum_a pi(a | x_i) q(x_i, a), the reward model's value of the target policy)
and ``modelled`` (q(x_i, a_i), the model's reward of the logged action). Each returns an
:class:`Estimate` with a two-sided 95 % interval from the central limit theorem: IPS and DR
are means of independent per-round terms; SNIPS is a ratio of two means, its standard error
from the delta method. With heavy-tailed weights (a small effective sample size,
:func:`effective_sample_size`) the normal interval can undercover.

>>> import numpy as np
>>> w, r = np.array([2.0, 0.0, 2.0, 0.0]), np.array([1.0, 0.0, 0.5, 1.0])
>>> ips(w, r).value, snips(w, r).value, effective_sample_size(w)
(0.75, 0.75, 2.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Z_95 = 1.959963984540054


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95 % confidence interval (NaN when undefined)."""

    value: float
    ci_low: float
    ci_high: float

    def as_dict(self) -> dict[str, float | None]:
        """JSON-ready: NaN (undefined) and infinite bounds (one round) become None."""
        return {name: (number if math.isfinite(number) else None)
                for name, number in (("value", self.value), ("ci_low", self.ci_low),
                                     ("ci_high", self.ci_high))}


UNDEFINED = Estimate(math.nan, math.nan, math.nan)


def mean_with_interval(terms: np.ndarray) -> Estimate:
    """The mean of independent per-round terms and its normal 95 % interval."""
    n = len(terms)
    if n == 0:
        return UNDEFINED
    mean = float(np.mean(terms))
    half = Z_95 * float(np.std(terms, ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    return Estimate(mean, mean - half, mean + half)


def ips(weights: np.ndarray, rewards: np.ndarray) -> Estimate:
    """Inverse propensity scoring: mean of w_i r_i (unbiased when every mu_i > 0 where pi > 0)."""
    return mean_with_interval(weights * rewards)


def snips(weights: np.ndarray, rewards: np.ndarray) -> Estimate:
    """Self-normalised IPS: sum w_i r_i / sum w_i (biased, consistent, often lower variance;
    undefined when the target never plays a logged action)."""
    n = len(weights)
    total = float(np.sum(weights))
    if n == 0 or total <= 0.0:
        return UNDEFINED
    value = float(np.sum(weights * rewards)) / total
    if n == 1:
        return Estimate(value, -math.inf, math.inf)
    linearised = weights * (rewards - value) / (total / n)
    half = Z_95 * float(np.std(linearised, ddof=1)) / math.sqrt(n)
    return Estimate(value, value - half, value + half)


def doubly_robust(weights: np.ndarray, rewards: np.ndarray, direct: np.ndarray,
                  modelled: np.ndarray) -> Estimate:
    """Doubly robust: mean of direct_i + w_i (r_i - modelled_i); unbiased when the weights
    are right, whatever the reward model, provided the model was not fit on round i (the
    caller cross-fits it)."""
    return mean_with_interval(direct + weights * (rewards - modelled))


def effective_sample_size(weights: np.ndarray) -> float:
    """Kish's effective sample size (sum w)^2 / sum w^2: how many rounds the estimate is
    worth (the number of rounds when every weight is equal, 0 when all are 0)."""
    squares = float(np.sum(weights**2))
    return float(np.sum(weights)) ** 2 / squares if squares > 0 else 0.0
