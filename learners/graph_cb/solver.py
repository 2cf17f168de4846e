"""The decision estimation coefficient (dec) and the distribution that minimises it.

For predicted losses f, a feedback graph G (``G[a, j]`` = P(playing a reveals j)) and
``gamma > 0``, with ``W = G^T p`` (``W_j`` = probability that j is revealed)::

    dec(p) = max_a <p - e_a, f> + (1/gamma) sum_i (p_i - 1[i = a])^2 / W_i

(0/0 = 0, x/0 = +inf). SquareCB.G plays ``argmin_{p in simplex} dec(p)``, the convex program

    min_{p in simplex, z} <p, f> + z   s.t.   g_a(p) <= gamma (f_a + z) for every a,
    g_a(p) = sum_i (p_i - 1[i = a])^2 / W_i

:func:`min_dec_distribution` solves it with a closed form when G is one of the graphs that have
one, else (or with ``solver="numeric"``) with a log-barrier interior-point method written for
this program:

* scaled: ``d = gamma (f - min f)``, ``Z = gamma z``, so values are O(alpha(G)) whatever gamma;
* Newton steps on ``t (<p, d> + Z) - sum_a log(d_a + Z - g_a(p)) - sum_i log p_i`` with the
  equality ``sum(p) = 1`` in the KKT system, a backtracking line search that keeps every
  iterate strictly feasible, and ``t`` multiplied by 50 once a point is centred;
* the Hessian of ``sum_a lambda_a g_a`` has a closed form,
  ``diag(2 L / W) + diag(c) G^T + G diag(c) + G diag(e) G^T``, O(K^3) with BLAS;
* it stops on a certificate, not a residual: for ``q = lambda / sum(lambda)`` (``lambda_a``
  = inverse slacks, the central-path multipliers), weak duality and convexity on the simplex
  give the lower bound ``phi(p) - (<grad phi(p), p> - min_k grad_k phi(p))`` on the optimum,
  with ``phi(p) = <p, d> + sum_a q_a (g_a(p) - d_a)``; it stops once ``dec(p)`` is within
  ``rtol`` (relative) or ``atol`` (absolute) of that bound.

The returned p is always a distribution (clipped at 0 and renormalised) and ``dec`` is
``decision_estimation_coefficient(p, ...)`` of the returned p.

>>> import numpy as np
>>> from learners.graph_cb.solver import min_dec_distribution
>>> p, dec = min_dec_distribution(np.array([0.1998, 0.0999]), 1.0 - np.eye(2), 10.0,
...                               solver="numeric")
>>> p.round(3).tolist(), round(dec, 3)
([0.382, 0.618], 0.1)
>>> p, dec = min_dec_distribution(np.array([0.0999, 0.1998]), [[1, 1], [0, 0]], 10.0,
...                               solver="numeric")
>>> p.round(2).tolist(), round(dec, 4)
([0.67, 0.33], 0.0667)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from learners.base import LearnerError
from learners.graph_cb import closed_forms
from learners.graph_cb.graphs import as_graph, detect_kind

SOLVERS = ("auto", "numeric", "bandit", "cops_and_robbers", "apple_tasting", "inventory",
           "self_aware")
"""Accepted values of ``solver``: ``auto`` uses the closed form of a detected graph, else
``numeric``; naming a closed form forces it (an error if the graph is not of that kind)."""

GraphLike = Sequence[Sequence[float]] | np.ndarray


def decision_estimation_coefficient(
    p: np.ndarray | Sequence[float], fhat: np.ndarray | Sequence[float], G: GraphLike,
    gamma: float,
) -> float:
    """dec_gamma(p) for any distribution p (``+inf`` if an action the worst case needs is never
    revealed).

    >>> round(decision_estimation_coefficient([0.5, 0.5], [0.0, 0.1], np.eye(2), 10.0), 4)
    0.15
    """
    p = np.asarray(p, dtype=float)
    fhat = np.asarray(fhat, dtype=float)
    G = np.asarray(G, dtype=float)
    reveal = G.T @ p
    deviation_sq = (p[None, :] - np.eye(p.size)) ** 2  # row a: (p_i - 1[i = a])^2
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(deviation_sq > 0.0, deviation_sq / reveal[None, :], 0.0)
    information = ratio.sum(axis=1) / gamma
    return float(np.max(np.dot(p, fhat) - fhat + information))


def min_dec_distribution(
    fhat: np.ndarray | Sequence[float],
    G: GraphLike,
    gamma: float,
    solver: str = "auto",
    rtol: float = 1e-3,
    atol: float = 1e-7,
) -> tuple[np.ndarray, float]:
    """``(p, dec(p))`` with p minimising dec over the simplex (or a closed form's p).

    Raises :class:`LearnerError` for invalid inputs and for graphs with an unobservable
    action (an all-zero column of G). ``rtol`` / ``atol`` bound the numeric solver's certified
    suboptimality of dec (relative / absolute, in dec units).
    """
    fhat = np.asarray(fhat, dtype=float)
    matrix = as_graph(G, fhat.size)
    if fhat.ndim != 1 or not np.all(np.isfinite(fhat)):
        raise LearnerError("fhat must be a finite vector with one prediction per action")
    if not (np.isfinite(gamma) and gamma > 0.0):
        raise LearnerError(f"gamma must be positive and finite, got {gamma}")
    if solver not in SOLVERS:
        raise LearnerError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")
    if fhat.size == 1:
        return np.ones(1), decision_estimation_coefficient(np.ones(1), fhat, matrix, gamma)
    kind = detect_kind(matrix)
    if solver == "auto":
        solver = kind or "numeric"
    elif solver != "numeric" and solver != kind:
        raise LearnerError(
            f"solver {solver!r} needs a {solver} graph; this graph is "
            f"{kind or 'none of the named kinds'}"
        )
    if solver == "bandit":
        return closed_forms.bandit(fhat, gamma)
    if solver == "numeric":
        p = _barrier_method(gamma * (fhat - fhat.min()), matrix, rtol, atol * gamma)
    elif solver == "cops_and_robbers":
        p = closed_forms.cops_and_robbers(fhat, gamma)
    elif solver == "apple_tasting":
        p = closed_forms.apple_tasting(fhat, gamma, revealing=int(np.argmax(matrix.sum(axis=1))))
    elif solver == "inventory":
        p = closed_forms.inventory(fhat, gamma)
    else:
        p = closed_forms.self_aware(fhat, gamma, matrix)
    return p, decision_estimation_coefficient(p, fhat, matrix, gamma)


def _barrier_method(
    gaps: np.ndarray, G: np.ndarray, rtol: float, atol: float, max_newton_steps: int = 200
) -> np.ndarray:
    """Minimise ``<p, gaps> + Z`` s.t. ``g_a(p) - gaps_a <= Z``, p in the simplex (gaps >= 0 is
    the scaled f) by the log-barrier method; returns the best certified p (a distribution)."""
    size = gaps.size
    GT = G.T
    diagonal = slice(None, None, size + 1)  # flat indices of a K x K diagonal
    p = np.full(size, 1.0 / size)
    info = _information(p, GT @ p)
    Z = float(np.max(info - gaps)) + 1.0
    slack = gaps + Z - info
    t = 1.0
    best_p, best_upper = p, np.inf
    kkt = np.zeros((size + 2, size + 2))
    kkt[:size, size + 1] = kkt[size + 1, :size] = 1.0
    rhs = np.zeros(size + 2)
    for _ in range(max_newton_steps):
        Wi = 1.0 / (GT @ p)
        Wi2 = Wi * Wi
        jac = (2.0 * p * Wi - G @ (p * p * Wi2))[None, :] - ((1.0 - 2.0 * p) * Wi2)[:, None] * GT
        jac.flat[diagonal] -= 2.0 * Wi  # jac[a, k] = d g_a / d p_k
        lam = 1.0 / slack  # t times the multipliers of the constraints on the central path
        total = lam.sum()
        # certificate: dec(p) and a lower bound on the optimum from q = lam / sum(lam)
        upper = float(np.dot(p, gaps) + np.max(info - gaps))
        if upper < best_upper:
            best_p, best_upper = p, upper
        grad_phi = gaps + lam @ jac / total
        lower = float(np.dot(p, gaps) + np.dot(lam, info - gaps) / total
                      - np.dot(grad_phi, p) + grad_phi.min())
        if best_upper - lower <= max(rtol * abs(best_upper), atol):
            break
        # Newton step on t (<p, gaps> + Z) - sum log slack - sum log p, s.t. sum(p) = 1
        inverse_p = 1.0 / p
        cross = -2.0 * (total * p - lam) * Wi2
        weight = lam * lam
        wjac = weight[:, None] * jac
        hessian = (G * (2.0 * (total * p * p - 2.0 * lam * p + lam) * Wi2 * Wi)) @ GT
        hessian += jac.T @ wjac + cross[:, None] * GT + G * cross[None, :]
        hessian.flat[diagonal] += 2.0 * total * Wi + inverse_p * inverse_p
        kkt[:size, :size] = hessian
        column = wjac.sum(axis=0)
        kkt[:size, size] = kkt[size, :size] = -column
        kkt[size, size] = weight.sum()
        rhs[:size] = -(t * gaps + lam @ jac - inverse_p)
        rhs[size] = total - t
        try:
            step = np.linalg.solve(kkt, rhs)
        except np.linalg.LinAlgError:
            break
        dp, dZ = step[:size], step[size]
        decrement = float(np.dot(rhs[: size + 1], step[: size + 1]))
        if decrement < 1e-6:  # centred: move along the central path
            t *= 50.0
            continue
        barrier = t * (np.dot(p, gaps) + Z) - np.log(slack).sum() - np.log(p).sum()
        length = min(1.0, 0.99 * _max_step(p, dp))
        for _halving in range(50):  # backtracking line search on the barrier
            trial_p = p + length * dp
            trial_Z = Z + length * dZ
            trial_info = _information(trial_p, GT @ trial_p)
            trial_slack = gaps + trial_Z - trial_info
            if trial_slack.min() > 0.0:
                trial = (t * (np.dot(trial_p, gaps) + trial_Z) - np.log(trial_slack).sum()
                         - np.log(trial_p).sum())
                if trial <= barrier - 0.25 * length * decrement:
                    break
            length *= 0.5
        else:
            break
        p, Z, slack, info = trial_p, trial_Z, trial_slack, trial_info
    return best_p / best_p.sum()


def _information(p: np.ndarray, reveal: np.ndarray) -> np.ndarray:
    """g_a(p) = sum_i (p_i - 1[i = a])^2 / W_i = Q(p) + (1 - 2 p_a) / W_a for every a."""
    inverse = 1.0 / reveal
    return np.dot(p * p, inverse) + (1.0 - 2.0 * p) * inverse


def _max_step(x: np.ndarray, dx: np.ndarray) -> float:
    """The largest step keeping x + step dx >= 0 (x > 0), or 1 if that is larger."""
    shrink = float(np.max(-dx / x))
    return 1.0 if shrink <= 1.0 else 1.0 / shrink
