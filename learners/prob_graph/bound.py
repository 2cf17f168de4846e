"""The asymptotic regret lower bound ``C*(theta)`` of probabilistic graph feedback (an LP).

``C*(theta) = min_{c >= 0} sum_i c_i Delta_i  s.t.  sum_{i in N_in(j)} p_ij c_i >= b_j`` for
every arm ``j``, where ``b_j = 1 / KL(theta_j, theta_i1)`` for ``j != i1`` and
``b_i1 = 1 / KL(theta_i1, theta_i2)`` (``i2`` the second best arm). For unit-variance Gaussian
rewards ``KL = Delta^2 / 2``, i.e. ``b_j = 2 / Delta_j^2`` and ``b_i1 = 2 / Delta_min^2``; for
Bernoulli rewards ``KL`` is the Bernoulli divergence (an infinite divergence gives
``b_j = 0``). Any consistent policy has ``liminf R_T / log T >= C*(theta)``. In the cascade case
pass the reachability matrix ``r`` (see :func:`banditflow.learners.prob_graph.graph.reachability`)
instead of ``p``.

[R] ``Delta_i1 = 0`` in the objective, so ``c_i1`` is not determined by the cost alone; with
``tie_break=True`` (the spec's default) a second LP minimises ``c_i1`` at the optimal cost.

>>> from banditflow.learners.prob_graph.bound import lower_bound_constant
>>> value, c = lower_bound_constant([[0.0, 0.5], [1.0, 0.0]], [1.0, 0.0])
>>> value, c.round(6).tolist()
(2.0, [4.0, 2.0])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import linprog

from banditflow.learners.base import LearnerError
from banditflow.learners.prob_graph.graph import REWARDS, check_in_edges

# Relative slack of the tie-break LP's cost constraint: enough for HiGHS to stay feasible.
COST_SLACK = 1e-10


def kl_bernoulli(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Elementwise ``KL(Bernoulli(p) || Bernoulli(q))`` with ``0 log 0 = 0`` (``inf`` when
    ``q`` puts no mass where ``p`` does)."""
    p, q = np.broadcast_arrays(np.asarray(p, dtype=float), np.asarray(q, dtype=float))
    total = np.zeros(p.shape)
    for a, b in ((p, q), (1.0 - p, 1.0 - q)):
        with np.errstate(divide="ignore", invalid="ignore"):
            term = np.where(b > 0.0, a * np.log(a / b), np.inf)
        total += np.where(a > 0.0, term, 0.0)
    return np.maximum(total, 0.0)


def information_targets(means: np.ndarray, rewards: str) -> tuple[int, np.ndarray, np.ndarray]:
    """``(i1, b, Delta)`` for the mean vector ``means``.

    ``b_j = 1 / KL(theta_j, theta_i1)`` (``j != i1``) and ``b_i1 = 1 / KL(theta_i1, theta_i2)``
    is the number of observations of ``j`` per ``log T`` needed to tell ``j`` apart from the
    best arm; it is ``inf`` when ``j`` ties with the best arm (no number of observations
    suffices) and 0 when the divergence is infinite.
    """
    order = np.argsort(-means, kind="stable")
    best, second = int(order[0]), int(order[1])
    gaps = means[best] - means
    alternatives = np.full(len(means), means[best])
    alternatives[best] = means[second]
    if rewards == "gaussian":
        divergences = (means - alternatives) ** 2 / 2.0
    else:
        divergences = kl_bernoulli(means, alternatives)
    with np.errstate(divide="ignore"):
        targets = 1.0 / divergences
    return best, targets, gaps


def solve_lp(
    matrix: np.ndarray, targets: np.ndarray, gaps: np.ndarray, best: int, *, tie_break: bool = True
) -> tuple[float, np.ndarray]:
    """``min gaps . c  s.t.  matrix.T c >= targets, c >= 0`` (finite targets, feasible graph).

    With ``tie_break`` a second LP minimises ``c[best]`` among the optimal solutions.
    """
    arms = len(targets)
    bounds = [(0.0, None)] * arms
    a_ub = -matrix.T
    b_ub = -targets
    first = linprog(gaps, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if first.status != 0:
        raise LearnerError(f"the lower-bound LP failed: {first.message}")
    value = float(first.fun)
    solution = first.x
    if tie_break:
        unit = np.zeros(arms)
        unit[best] = 1.0
        cap = value * (1.0 + COST_SLACK) + COST_SLACK
        second = linprog(
            unit,
            A_ub=np.vstack([a_ub, gaps]),
            b_ub=np.append(b_ub, cap),
            bounds=bounds,
            method="highs",
        )
        if second.status == 0:
            solution = second.x
    return value, np.maximum(solution, 0.0)


def lower_bound_constant(
    P: Sequence[Sequence[float]] | np.ndarray,
    means: Sequence[float] | np.ndarray,
    *,
    rewards: str = "gaussian",
    tie_break: bool = True,
) -> tuple[float, np.ndarray]:
    """``(C*(theta), c)``: the LP's optimal cost and an optimal allocation ``c``.

    ``P[i, j]`` is the edge probability ``p_ij`` (one-step case) or the reachability ``r_ij``
    (cascade case). ``rewards`` is ``"gaussian"`` (unit variance) or ``"bernoulli"`` (means in
    [0, 1]). Raises :class:`LearnerError` for a non-square ``P``, a shape mismatch, values out of
    range, a non-unique best arm or an arm without an in-edge.
    """
    if rewards not in REWARDS:
        raise LearnerError(f"rewards must be one of {', '.join(REWARDS)}, got {rewards!r}")
    matrix = np.asarray(P, dtype=float)
    theta = np.asarray(means, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise LearnerError(f"P must be a square K x K matrix, got shape {matrix.shape}")
    if theta.ndim != 1 or theta.shape[0] != matrix.shape[0]:
        raise LearnerError(
            f"means must have one entry per arm: P is {matrix.shape}, means has shape {theta.shape}"
        )
    if theta.shape[0] < 2:
        raise LearnerError("the lower bound needs at least 2 arms")
    if not np.all(np.isfinite(matrix)) or not np.all((matrix >= 0.0) & (matrix <= 1.0)):
        raise LearnerError("P must hold probabilities in [0, 1]")
    if not np.all(np.isfinite(theta)):
        raise LearnerError("means must be finite")
    if rewards == "bernoulli" and not np.all((theta >= 0.0) & (theta <= 1.0)):
        raise LearnerError("Bernoulli means must lie in [0, 1]")
    check_in_edges(matrix)
    best, targets, gaps = information_targets(theta, rewards)
    if np.count_nonzero(theta == theta[best]) > 1:
        tied = np.flatnonzero(theta == theta[best]).tolist()
        raise LearnerError(f"the best arm must be unique; arms {tied} share the best mean")
    return solve_lp(matrix, targets, gaps, best, tie_break=tie_break)
