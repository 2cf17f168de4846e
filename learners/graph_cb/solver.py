"""The decision estimation coefficient (dec) and the distribution that minimises it.

For predicted losses f, a feedback graph G (``G[a, j]`` = P(playing a reveals j)) and
``gamma > 0``, with ``W = G^T p`` (``W_j`` = probability that j is revealed)::

    dec(p) = max_a <p - e_a, f> + (1/gamma) sum_i (p_i - 1[i = a])^2 / W_i

(0/0 = 0, x/0 = +inf). SquareCB.G plays ``argmin_{p in simplex} dec(p)``, the convex program

    min_{p in simplex, z} <p, f> + z   s.t.   g_a(p) <= gamma (f_a + z) for every a,
    g_a(p) = sum_i (p_i - 1[i = a])^2 / W_i

:func:`min_dec_distribution` returns the optimum (certified within ``rtol`` relative or ``atol``
absolute). By default (``solver="auto"``) it uses the closed form only for the bandit graph,
where the closed form *is* the optimum; every other graph goes to the numeric solver. The
other closed forms (cops-and-robbers, apple tasting, inventory, self-aware) are only
constant-factor optimal: on cops-and-robbers with gamma = 100 the closed form's dec is up to
2x the optimum, because dec is steep where one p_i nears 1 (``p_i^2 / (1 - p_i)`` on a graph
without self-loops). They are used only when named (``solver="inventory"`` ...), e.g. at
K in the hundreds, where the numeric solver's O(K^3) steps cost 0.1-2 s per call.

The numeric solver:

* the production path is the compiled primal-dual interior-point method of
  :mod:`banditflow.learners.graph_cb.primal_dual` (Mehrotra predictor-corrector, one K x K Cholesky
  per
  step), optionally warm-started from the previous call through a :class:`WarmStart`; it stops
  on the certificate described below, and when it cannot certify the tolerance (or numba is
  not installed) the call falls back to the log-barrier method below, so every result is
  certified the same way;
* the fallback is a log-barrier interior-point method written for this program:

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
>>> from banditflow.learners.graph_cb.solver import min_dec_distribution
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

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from banditflow.learners.base import LearnerError
from banditflow.learners.graph_cb import closed_forms, kernels, primal_dual
from banditflow.learners.graph_cb.graphs import as_graph, detect_kind

SOLVERS = ("auto", "numeric", "bandit", "cops_and_robbers", "apple_tasting", "inventory",
           "self_aware")
"""Accepted values of ``solver``: ``auto`` is the optimum (the exact closed form on the bandit
graph, else ``numeric``); naming a closed form forces it (an error if the graph is not of that
kind), trading optimality (a constant factor) for O(K) time."""

GraphLike = Sequence[Sequence[float]] | np.ndarray

_PRIMAL_DUAL_ITERATIONS = 60
"""Iteration cap of a cold primal-dual attempt (it needs 5 to 15 on random graphs)."""
_WARM_ITERATIONS = 30
"""Iteration cap of a warm attempt, after which the call restarts cold."""


@dataclass
class WarmStart:
    """Numeric-solver state carried from one call to the next (the learner keeps one).

    Pass the same object to consecutive :func:`min_dec_distribution` calls: each numeric solve
    starts from the previous solution and multipliers, mixed with the uniform point (weight
    ``0.05``, or ``0.2`` when the graph changed) so the start is interior, and stores its own
    solution. A warm start changes only the iterations, not the certified tolerance: a warm
    attempt that cannot certify restarts cold. ``method`` and ``iterations`` describe the last
    numeric solve (``"primal_dual"`` cold, ``"warm"``, or ``"barrier"`` for the fallback).

    The state is JSON-able (:meth:`to_state`), so a learner restored from a checkpoint makes
    bit-identical decisions.
    """

    p: np.ndarray | None = None
    lam: np.ndarray | None = None
    graph_key: str = ""
    method: str = ""
    iterations: int = 0

    def start(self, graph: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The interior starting point ``(p, lam)`` for ``graph``, or None (no usable state)."""
        if self.p is None or self.lam is None or self.p.size != graph.shape[0]:
            return None
        theta = 0.05 if _graph_key(graph) == self.graph_key else 0.2
        uniform = theta / graph.shape[0]
        return (1.0 - theta) * self.p + uniform, (1.0 - theta) * self.lam + uniform

    def store(self, p: np.ndarray, lam: np.ndarray, graph: np.ndarray) -> None:
        """Remember a solution, its multipliers and (a digest of) the graph."""
        self.p, self.lam, self.graph_key = p, lam, _graph_key(graph)

    def clear(self) -> None:
        """Forget the solution: the next call starts cold."""
        self.p, self.lam, self.graph_key = None, None, ""

    def to_state(self) -> dict[str, list[float] | str | None]:
        """JSON-able state (floats round-trip exactly through JSON)."""
        return {
            "p": None if self.p is None else self.p.tolist(),
            "lam": None if self.lam is None else self.lam.tolist(),
            "graph_key": self.graph_key,
        }

    def load_state(self, state: dict) -> None:
        """Restore :meth:`to_state` output."""
        self.p = None if state.get("p") is None else np.array(state["p"], dtype=float)
        self.lam = None if state.get("lam") is None else np.array(state["lam"], dtype=float)
        self.graph_key = str(state.get("graph_key", ""))


def _graph_key(graph: np.ndarray) -> str:
    """A digest identifying a graph (same K x K float64 entries, same key)."""
    return hashlib.blake2b(np.ascontiguousarray(graph).tobytes(), digest_size=16).hexdigest()


def decision_estimation_coefficient(
    p: np.ndarray | Sequence[float], fhat: np.ndarray | Sequence[float], G: GraphLike,
    gamma: float,
) -> float:
    """dec_gamma(p) for any distribution p (``+inf`` if an action the worst case needs is never
    revealed).

    >>> round(decision_estimation_coefficient([0.5, 0.5], [0.0, 0.1], np.eye(2), 10.0), 4)
    0.15
    """
    p = np.ascontiguousarray(p, dtype=float)
    fhat = np.ascontiguousarray(fhat, dtype=float)
    G = np.ascontiguousarray(G, dtype=float)
    return kernels.dec(p, fhat, G, float(gamma))


def min_dec_distribution(
    fhat: np.ndarray | Sequence[float],
    G: GraphLike,
    gamma: float,
    solver: str = "auto",
    rtol: float = 1e-3,
    atol: float = 1e-10,
    warm_start: WarmStart | None = None,
) -> tuple[np.ndarray, float]:
    """``(p, dec(p))`` with p minimising dec over the simplex (or a named closed form's p).

    Raises :class:`LearnerError` for invalid inputs and for graphs with an unobservable
    action (an all-zero column of G). ``rtol`` / ``atol`` bound the numeric solver's certified
    suboptimality of dec (relative / absolute, in dec units). dec is of order 1/gamma and is
    exactly 0 when the best action reveals every action cheaply enough, so the absolute
    tolerance is tiny (1e-10): a looser one would hide relative errors at large gamma.
    ``warm_start`` (optional, used only by the numeric solver) carries the previous call's
    solution to speed up this one and receives this call's.
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
    if solver == "numeric":  # no graph detection needed
        return _numeric_distribution(fhat, matrix, gamma, rtol, atol, warm_start)
    kind = detect_kind(matrix)
    if solver == "auto":  # the optimum: only the bandit closed form is exact
        solver = "bandit" if kind == "bandit" else "numeric"
    elif solver != "numeric" and solver != kind:
        raise LearnerError(
            f"solver {solver!r} needs a {solver} graph; this graph is "
            f"{kind or 'none of the named kinds'}"
        )
    if solver == "numeric":
        return _numeric_distribution(fhat, matrix, gamma, rtol, atol, warm_start)
    if solver == "bandit":
        return closed_forms.bandit(fhat, gamma)
    if solver == "cops_and_robbers":
        p = closed_forms.cops_and_robbers(fhat, gamma)
    elif solver == "apple_tasting":
        p = closed_forms.apple_tasting(fhat, gamma, revealing=int(np.argmax(matrix.sum(axis=1))))
    elif solver == "inventory":
        p = closed_forms.inventory(fhat, gamma)
    else:
        p = closed_forms.self_aware(fhat, gamma, matrix)
    return p, decision_estimation_coefficient(p, fhat, matrix, gamma)


def _numeric_distribution(
    fhat: np.ndarray, G: np.ndarray, gamma: float, rtol: float, atol: float,
    warm_start: WarmStart | None,
) -> tuple[np.ndarray, float]:
    """The numeric solver on validated inputs: ``(p, dec(p))`` in dec units."""
    p, scaled_dec = _numeric(gamma * (fhat - fhat.min()), G, rtol, atol * gamma, warm_start)
    if scaled_dec is None:
        return p, decision_estimation_coefficient(p, fhat, G, gamma)
    return p, scaled_dec / gamma


def _numeric(
    gaps: np.ndarray, G: np.ndarray, rtol: float, atol: float, warm_start: WarmStart | None
) -> tuple[np.ndarray, float | None]:
    """The certified numeric minimiser of the scaled program and its scaled dec (None when the
    barrier fallback produced p: the caller evaluates dec then).

    Order: a warm primal-dual attempt (with a usable ``warm_start``), a cold one, the barrier
    method. Each primal-dual attempt is accepted only with its certificate. When none
    certifies, the best point seen wins: a stalled primal-dual run often has an optimal p
    with poor multipliers (hence a weak bound), and the barrier's p can be slightly worse.
    """
    state = warm_start if warm_start is not None else WarmStart()
    fallback_p, fallback_dec = None, np.inf
    if primal_dual.AVAILABLE:
        tolerance = max(rtol, 0.0), max(atol, 0.0)
        attempts = []
        warm = state.start(G)
        if warm is not None:
            attempts.append(("warm", warm[0], warm[1], 0.1, _WARM_ITERATIONS))
        ones = np.ones(gaps.size)
        attempts.append(("primal_dual", ones, ones, 1.0, _PRIMAL_DUAL_ITERATIONS))
        for method, p_start, lam_start, slack, iterations in attempts:
            p, lam, upper, lower, used = primal_dual.solve(
                gaps, np.ascontiguousarray(G), np.ascontiguousarray(p_start, dtype=float),
                np.ascontiguousarray(lam_start, dtype=float), slack, *tolerance, iterations,
            )
            if upper - lower <= max(tolerance[0] * abs(upper), tolerance[1]):
                state.method, state.iterations = method, used
                state.store(p, lam, G)
                return p, upper
            if upper < fallback_dec:
                fallback_p, fallback_dec = p, upper
    p = _barrier_method(gaps, G, rtol, atol)
    state.method, state.iterations = "barrier", 0
    state.clear()  # no multipliers: the next call starts cold
    if fallback_p is not None and fallback_dec < _scaled_dec(p, gaps, G):
        return fallback_p, fallback_dec
    return p, None


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


def _scaled_dec(p: np.ndarray, gaps: np.ndarray, G: np.ndarray) -> float:
    """dec of p in scaled units (``gaps = gamma (f - min f)``): gamma times dec."""
    return float(np.dot(p, gaps) + np.max(_information(p, G.T @ p) - gaps))


def _information(p: np.ndarray, reveal: np.ndarray) -> np.ndarray:
    """g_a(p) = sum_i (p_i - 1[i = a])^2 / W_i = Q(p) + (1 - 2 p_a) / W_a for every a."""
    inverse = 1.0 / reveal
    return np.dot(p * p, inverse) + (1.0 - 2.0 * p) * inverse


def _max_step(x: np.ndarray, dx: np.ndarray) -> float:
    """The largest step keeping x + step dx >= 0 (x > 0), or 1 if that is larger."""
    shrink = float(np.max(-dx / x))
    return 1.0 if shrink <= 1.0 else 1.0 / shrink
