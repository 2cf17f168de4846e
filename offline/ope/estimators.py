"""Off-policy estimators of a target policy's mean reward from logged bandit rounds.

Every estimator takes per-round arrays: ``weights`` w_i = pi(a_i | x_i) / mu_i (the target
policy's probability of the logged action over the logging propensity), ``rewards`` r_i, and
for DR ``direct`` (sum_a pi(a | x_i) q(x_i, a), the reward model's value of the target policy)
and ``modelled`` (q(x_i, a_i), the model's reward of the logged action). Each returns an
:class:`Estimate` with a two-sided 95 % interval from the central limit theorem: IPS and DR
are means of independent per-round terms; SNIPS is a ratio of two means, its standard error
from the delta method. With heavy-tailed weights (a small effective sample size,
:func:`effective_sample_size`) the normal interval can undercover.

The formulas are :class:`processors.ope.Sums`'s, which live OPE updates one round at a time:
a batch here is the sums of its rounds, so the two paths agree to float precision.

>>> import numpy as np
>>> w, r = np.array([2.0, 0.0, 2.0, 0.0]), np.array([1.0, 0.0, 0.5, 1.0])
>>> ips(w, r).value, snips(w, r).value, effective_sample_size(w)
(0.75, 0.75, 2.0)
"""

from __future__ import annotations

import numpy as np

from processors.ope import UNDEFINED, Z_95, Estimate, Sums

__all__ = ["UNDEFINED", "Z_95", "Estimate", "doubly_robust", "effective_sample_size", "ips",
           "snips"]


def ips(weights: np.ndarray, rewards: np.ndarray) -> Estimate:
    """Inverse propensity scoring: mean of w_i r_i (unbiased when every mu_i > 0 where pi > 0)."""
    return Sums.of(weights, rewards).ips()


def snips(weights: np.ndarray, rewards: np.ndarray) -> Estimate:
    """Self-normalised IPS: sum w_i r_i / sum w_i (biased, consistent, often lower variance;
    undefined when the target never plays a logged action)."""
    return Sums.of(weights, rewards).snips()


def doubly_robust(weights: np.ndarray, rewards: np.ndarray, direct: np.ndarray,
                  modelled: np.ndarray) -> Estimate:
    """Doubly robust: mean of direct_i + w_i (r_i - modelled_i); unbiased when the weights
    are right, whatever the reward model, provided the model was not fit on round i (the
    caller cross-fits it)."""
    return Sums.of(weights, rewards, direct + weights * (rewards - modelled)).dr()


def effective_sample_size(weights: np.ndarray) -> float:
    """Kish's effective sample size (sum w)^2 / sum w^2: how many rounds the estimate is
    worth (the number of rounds when every weight is equal, 0 when all are 0)."""
    return Sums.of(weights, np.zeros_like(weights)).ess()
