"""cvxpy reference solver of min_p dec_gamma(p) (tests and benchmarks only: the correctness
oracle for :func:`learners.graph_cb.min_dec_distribution`, not a production path).

It follows the paper (App. A.3): variables p and an auxiliary variable v = G^T p (which keeps
the problem DPP, so one compiled problem serves every f, G, gamma of a size), quad_over_lin
constraints, f shifted by its minimum and everything scaled by sqrt(gamma):

    min  sqrt(gamma) <f, p> + z   s.t.  sum_i (p_i - 1[i=a])^2 / v_i <= sqrt(gamma) f_a + z,
    where v = sqrt(gamma) G^T p;  the optimal dec is (objective) / sqrt(gamma).

>>> import numpy as np
>>> from graph_cb_reference import reference_min_dec
>>> p, dec = reference_min_dec(np.array([0.1998, 0.0999]), 1.0 - np.eye(2), 10.0)
>>> p.round(3).tolist(), round(dec, 3)
([0.382, 0.618], 0.1)
"""

from __future__ import annotations

from functools import cache

import cvxpy as cp
import numpy as np


@cache
def _problem(actions: int) -> tuple[cp.Problem, cp.Parameter, cp.Parameter, cp.Variable]:
    """The compiled DPP problem for K actions and its parameters."""
    sqrt_gamma_graph = cp.Parameter((actions, actions), nonneg=True)
    sqrt_gamma_fhat = cp.Parameter(actions)
    p = cp.Variable(actions, nonneg=True)
    z = cp.Variable()
    reveal = cp.Variable(actions)  # an auxiliary variable, not the expression: that is DPP
    constraints = [cp.sum(p) == 1, reveal == sqrt_gamma_graph.T @ p]
    for a in range(actions):
        information = cp.sum(
            [cp.quad_over_lin((1.0 if i == a else 0.0) - p[i], reveal[i]) for i in range(actions)]
        )
        constraints.append(information <= sqrt_gamma_fhat[a] + z)
    problem = cp.Problem(cp.Minimize(sqrt_gamma_fhat @ p + z), constraints)
    assert problem.is_dcp(dpp=True)
    return problem, sqrt_gamma_graph, sqrt_gamma_fhat, p


def reference_min_dec(fhat: np.ndarray, G: np.ndarray, gamma: float) -> tuple[np.ndarray, float]:
    """``(p, optimal dec)`` solved by cvxpy (Clarabel)."""
    fhat = np.asarray(fhat, dtype=float)
    problem, graph_parameter, fhat_parameter, p = _problem(fhat.size)
    root = np.sqrt(gamma)
    graph_parameter.value = root * np.asarray(G, dtype=float)
    fhat_parameter.value = root * (fhat - fhat.min())
    value = problem.solve(solver=cp.CLARABEL)
    distribution = np.maximum(p.value, 0.0)
    return distribution / distribution.sum(), float(value) / root
