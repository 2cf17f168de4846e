"""A compiled primal-dual interior-point method for ``min_p dec(p)`` (the production path of
:func:`banditflow.learners.graph_cb.min_dec_distribution`).

The scaled program (``d = gamma (f - min f)``, ``Z = gamma z``, ``W = G^T p``)::

    min  <d, p> + Z   s.t.   g_a(p) - d_a - Z + s_a = 0,  s >= 0,  p >= 0,  sum(p) = 1,
    g_a(p) = sum_i (p_i - 1[i = a])^2 / W_i = Q(p) + (1 - 2 p_a) / W_a,   Q(p) = sum_i p_i^2 / W_i

is solved by an infeasible primal-dual method with Mehrotra's predictor-corrector: multipliers
``lam`` (the K constraints), ``mu`` (p >= 0), ``nu`` (the equality). The structure makes a
Newton step one symmetric positive definite K x K Cholesky solve:

* the Jacobian of g is ``J = 1 u^T - B`` with ``u = grad Q`` and
  ``B = diag(2 / W) + diag(c) G^T``, ``c = (1 - 2p) / W^2``, so after eliminating ``s``, ``lam``,
  ``mu`` and ``Z`` the rank-one ``u`` terms cancel and the matrix is
  ``H + B^T D B - y y^T / sum(D) + diag(mu / p)`` with ``D = lam / s``, ``y = B^T D 1``;
* the Lagrangian Hessian ``H = sum_a lam_a hess g_a`` is, with ``T = sum(lam)`` and
  ``n_i = T p_i^2 - 2 lam_i p_i + lam_i``,
  ``diag(2T / W) - diag(n' / W^2) G^T - G diag(n' / W^2) + G diag(2 n / W^3) G^T``;
* so the whole matrix is ``G diag(w) G^T`` (one BLAS product) plus diagonal, "diagonal times
  G" and rank-one terms: O(K^3 / 3) flops for the factorisation, O(K^2) for everything else.

It stops on the same certificate as the barrier method: for ``q = lam / sum(lam)``,
``phi(p) = <p, d> + sum_a q_a (g_a(p) - d_a)`` is a convex lower model of dec on the simplex
(weak duality), and ``phi(p) - (<grad phi(p), p> - min_k grad_k phi(p))`` (its Frank-Wolfe
bound) is a lower bound on the optimum. The best dec seen and the best lower bound seen must be
within ``rtol`` (relative) or ``atol`` (absolute); the caller falls back to the barrier method
when they are not (``certified`` False).

The kernels are compiled with numba when this module is imported, so no call pays for the
JIT: the first import in a fresh environment compiles them (about 10 s on the 2-core
machine), later imports load numba's on-disk cache (``cache=True``, under ``__pycache__``; set
``NUMBA_CACHE_DIR`` where that is read-only). Without numba, ``AVAILABLE`` is False and the
caller uses the numpy barrier method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

try:  # numba is the production path; the numpy barrier method is the fallback without it
    from numba import njit

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only where numba is not installed
    AVAILABLE = False

    def njit(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Stand-in decorator: the kernels stay importable (and slow) without numba."""

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            return function

        return decorate


_STEP_TO_BOUNDARY = 0.99
"""Fraction of the step to the boundary of p, s, lam, mu >= 0 that an iteration takes."""


@njit(cache=True, error_model="numpy")
def _dec_and_bound(
    p: np.ndarray, lam: np.ndarray, gaps: np.ndarray, G: np.ndarray, GT: np.ndarray
) -> tuple[float, float]:
    """``(dec(p), lower bound on the optimum)`` in scaled units for p on the simplex, with the
    multipliers ``q = lam / sum(lam)`` (see the module docstring)."""
    size = p.size
    W = GT @ p
    Q = 0.0
    for i in range(size):
        Q += p[i] * p[i] / W[i]
    worst = -np.inf
    linear = 0.0
    weighted = 0.0
    total = lam.sum()
    qc = np.empty(size)
    for a in range(size):
        excess = Q + (1.0 - 2.0 * p[a]) / W[a] - gaps[a]
        worst = max(worst, excess)
        linear += p[a] * gaps[a]
        q = lam[a] / total
        weighted += q * excess
        qc[a] = q * (1.0 - 2.0 * p[a]) / (W[a] * W[a])
    upper = linear + worst
    phi = linear + weighted
    # grad phi = d + u - (2 q / W + G (q c)), u = 2 p / W - G (p^2 / W^2)
    r2 = np.empty(size)
    for i in range(size):
        r2[i] = p[i] * p[i] / (W[i] * W[i]) + qc[i]
    Gr = G @ r2
    smallest = np.inf
    inner = 0.0
    for k in range(size):
        grad = gaps[k] + 2.0 * (p[k] - lam[k] / total) / W[k] - Gr[k]
        smallest = min(smallest, grad)
        inner += grad * p[k]
    return upper, phi - inner + smallest


@njit(cache=True, error_model="numpy")
def _cholesky(A: np.ndarray) -> bool:
    """In-place lower Cholesky factor of A (upper triangle left untouched); False if A is not
    numerically positive definite."""
    size = A.shape[0]
    for j in range(size):
        pivot = A[j, j]
        for k in range(j):
            pivot -= A[j, k] * A[j, k]
        if not pivot > 0.0:
            return False
        root = np.sqrt(pivot)
        A[j, j] = root
        for i in range(j + 1, size):
            value = A[i, j]
            for k in range(j):
                value -= A[i, k] * A[j, k]
            A[i, j] = value / root
    return True


@njit(cache=True, error_model="numpy")
def _cholesky_solve(L: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x with ``L L^T x = b`` for the lower factor L."""
    size = b.size
    x = b.copy()
    for i in range(size):
        value = x[i]
        for k in range(i):
            value -= L[i, k] * x[k]
        x[i] = value / L[i, i]
    for i in range(size - 1, -1, -1):
        value = x[i]
        for k in range(i + 1, size):
            value -= L[k, i] * x[k]
        x[i] = value / L[i, i]
    return x


@njit(cache=True, error_model="numpy")
def _max_step(x: np.ndarray, dx: np.ndarray) -> float:
    """The largest step in [0, 1] keeping ``x + step dx >= 0`` (x > 0)."""
    step = 1.0
    for i in range(x.size):
        if dx[i] < 0.0:
            step = min(step, -x[i] / dx[i])
    return step


_SOLVE_SIGNATURE = (
    "Tuple((float64[::1], float64[::1], float64, float64, int64))"
    "(float64[::1], float64[:, ::1], float64[::1], float64[::1], float64, float64, float64, int64)"
)
"""Explicit types: ``solve`` is compiled when this module is imported (or loaded from numba's
cache), never during a call."""


@njit(_SOLVE_SIGNATURE, cache=True, error_model="numpy")
def solve(
    gaps: np.ndarray, G: np.ndarray, p_start: np.ndarray, lam_start: np.ndarray,
    slack_start: float, rtol: float, atol: float, max_iterations: int,
) -> tuple[np.ndarray, np.ndarray, float, float, int]:
    """Primal-dual interior point from ``(p_start, lam_start)`` (both positive, any scale;
    all arrays C-contiguous float64).

    ``slack_start`` sets the initial Z (every slack at least that) and ``nu`` (every ``mu`` at
    least that). Returns ``(p, lam, dec, lower, iterations)``: the best certified p (on the
    simplex) with its scaled dec, the final multipliers (``sum(lam) = 1``), the best lower
    bound and the iteration count; ``dec - lower`` tells whether the tolerance was met.
    """
    size = gaps.size
    GT = np.ascontiguousarray(G.T)
    ones = np.ones(size)
    p = p_start / p_start.sum()
    lam = lam_start / lam_start.sum()
    # initial point: slacks >= slack_start, mu from stationarity with every mu >= slack_start
    W = GT @ p
    Q = np.sum(p * p / W)
    info = Q + (1.0 - 2.0 * p) / W
    Z = np.max(info - gaps) + slack_start
    s = gaps + Z - info
    c = (1.0 - 2.0 * p) / (W * W)
    u = 2.0 * p / W - G @ (p * p / (W * W))
    grad = gaps + u * lam.sum() - (2.0 * lam / W + G @ (lam * c))
    nu = slack_start - grad.min()
    mu = grad + nu
    best_p = p.copy()
    best_upper, best_lower = _dec_and_bound(p, lam, gaps, G, GT)
    iterations = 0
    while iterations < max_iterations:
        iterations += 1
        W = GT @ p
        Winv = 1.0 / W
        Q = np.sum(p * p * Winv)
        info = Q + (1.0 - 2.0 * p) * Winv
        c = (1.0 - 2.0 * p) * Winv * Winv
        u = 2.0 * p * Winv - G @ (p * p * Winv * Winv)
        total = lam.sum()
        # residuals: stationarity in p and Z, primal feasibility, the simplex equality
        r_p = gaps + u * total - (2.0 * lam * Winv + G @ (lam * c)) - mu + nu
        r_Z = 1.0 - total
        r_s = info - gaps - Z + s
        r_e = p.sum() - 1.0
        gap = (np.dot(s, lam) + np.dot(p, mu)) / (2.0 * size)
        # the reduced matrix A = G diag(w) G^T + diag(h) G^T + G diag(h) + diag + rank one
        D = lam / s
        sum_D = D.sum()
        slope = 2.0 * (total * p - lam)  # n'
        curvature = total * p * p - 2.0 * lam * p + lam  # n
        h = 2.0 * D * c * Winv - slope * Winv * Winv
        w = 2.0 * curvature * Winv * Winv * Winv + D * c * c
        y = 2.0 * D * Winv + G @ (D * c)
        A = (G * w) @ GT
        for k in range(size):
            for m in range(size):
                A[k, m] += h[k] * G[m, k] + G[k, m] * h[m] - y[k] * y[m] / sum_D
            A[k, k] += 2.0 * total * Winv[k] + 4.0 * D[k] * Winv[k] * Winv[k] + mu[k] / p[k]
        if not _cholesky(A):
            break
        A_ones = _cholesky_solve(A, ones)
        ones_A_ones = A_ones.sum()
        v = u * sum_D - y
        dp = np.empty(size)
        ds = np.empty(size)
        dlam = np.empty(size)
        dmu = np.empty(size)
        dZ = 0.0
        dnu = 0.0
        dp_aff = np.zeros(size)
        ds_aff = np.zeros(size)
        dlam_aff = np.zeros(size)
        dmu_aff = np.zeros(size)
        sigma_gap = 0.0
        for corrector in range(2):  # 0: affine predictor, 1: Mehrotra corrector
            r_c1 = sigma_gap - s * lam - ds_aff * dlam_aff
            r_c2 = sigma_gap - p * mu - dp_aff * dmu_aff
            rho = r_c1 / s + D * r_s
            sum_rho = rho.sum()
            rhs1 = -r_p - (u * sum_rho - (2.0 * rho * Winv + G @ (c * rho))) + r_c2 / p
            rhs2 = sum_rho - r_Z
            x = _cholesky_solve(A, rhs1 + v * (rhs2 / sum_D))
            dnu = (x.sum() + r_e) / ones_A_ones
            dp = x - dnu * A_ones
            dZ = (rhs2 + np.dot(v, dp)) / sum_D
            J_dp = np.dot(u, dp) - (2.0 * dp * Winv + c * (GT @ dp))
            ds = -r_s - J_dp + dZ
            dlam = (r_c1 - lam * ds) / s
            dmu = (r_c2 - mu * dp) / p
            if corrector == 0:
                primal = min(_max_step(p, dp), _max_step(s, ds))
                dual = min(_max_step(lam, dlam), _max_step(mu, dmu))
                affine_gap = (np.dot(s + primal * ds, lam + dual * dlam)
                              + np.dot(p + primal * dp, mu + dual * dmu)) / (2.0 * size)
                sigma = (affine_gap / gap) ** 3
                sigma_gap = min(sigma, 1.0) * gap
                dp_aff, ds_aff, dlam_aff, dmu_aff = dp, ds, dlam, dmu
        primal = _STEP_TO_BOUNDARY * min(_max_step(p, dp), _max_step(s, ds))
        dual = _STEP_TO_BOUNDARY * min(_max_step(lam, dlam), _max_step(mu, dmu))
        step = min(1.0, primal, dual)
        p = p + step * dp
        Z = Z + step * dZ
        s = s + step * ds
        lam = lam + step * dlam
        mu = mu + step * dmu
        nu = nu + step * dnu
        simplex_p = p / p.sum()
        upper, lower = _dec_and_bound(simplex_p, lam, gaps, G, GT)
        if upper < best_upper:
            best_upper = upper
            best_p = simplex_p
        best_lower = max(best_lower, lower)
        if best_upper - best_lower <= max(rtol * abs(best_upper), atol):
            break
    return best_p, lam / lam.sum(), best_upper, best_lower, iterations
