"""cvxpy reference solver of min_p dec_gamma(p) (tests and benchmarks only: the correctness
oracle for :func:`banditflow.learners.graph_cb.min_dec_distribution`, not a production path).

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
    """``(p, optimal dec)`` solved by cvxpy (Clarabel).

    The optimal dec is Clarabel's objective, not dec of its p: where dec is steep (a p_i near
    1 on a graph without self-loops) the small infeasibility Clarabel tolerates in p can cost
    a few percent of dec, while the objective is within its duality-gap tolerance (1e-8
    relative) of the optimum. dec is never negative, so a value a tolerance below 0 is 0.
    """
    fhat = np.asarray(fhat, dtype=float)
    problem, graph_parameter, fhat_parameter, p = _problem(fhat.size)
    root = np.sqrt(gamma)
    graph_parameter.value = root * np.asarray(G, dtype=float)
    fhat_parameter.value = root * (fhat - fhat.min())
    value = problem.solve(solver=cp.CLARABEL)
    distribution = np.maximum(p.value, 0.0)
    return distribution / distribution.sum(), max(float(value), 0.0) / root


GRAPH_KINDS = ("self_aware", "loopless", "strongly_observable", "weakly_observable",
               "stochastic")
"""The graph families of the solver's relative-gap tests and benchmark (:func:`random_graph`)."""


def random_graph(kind: str, actions: int, rng: np.random.Generator) -> np.ndarray:
    """A seeded random observable graph of one of :data:`GRAPH_KINDS` (``G[a, j]`` = P(a
    reveals j)):

    * ``self_aware``: every self-loop, off-diagonal edges with a random density, symmetric
      half of the time (the closed form's family);
    * ``loopless``: the strongly observable graph without self-loops, ones minus identity
      (cops-and-robbers), where dec has its ``p_i^2 / (1 - p_i)`` terms;
    * ``strongly_observable``: some self-loops missing, every node without one revealed by all
      others;
    * ``weakly_observable``: random edges, self-loops with probability 0 or 1/2, node 0 without
      a self-loop and revealed by one other node only (weakly observable for K >= 3; with
      K = 2 every observable graph is strongly observable);
    * ``stochastic``: probabilities U(0, 1) on a random half of the entries (diagonal
      included or not).

    Every column gets a nonzero entry (an unobservable action has no finite dec).
    """
    density = rng.uniform(0.1, 0.7)
    if kind == "self_aware":
        graph = (rng.random((actions, actions)) < density).astype(float)
        if rng.random() < 0.5:
            graph = np.triu(graph, 1)
            graph += graph.T
        np.fill_diagonal(graph, 1.0)
    elif kind == "loopless":
        graph = 1.0 - np.eye(actions)
    elif kind == "strongly_observable":
        loops = rng.random(actions) < 0.5
        graph = (rng.random((actions, actions)) < density).astype(float)
        np.fill_diagonal(graph, loops)
        graph[:, ~loops] = 1.0
        graph[np.flatnonzero(~loops), np.flatnonzero(~loops)] = 0.0
    elif kind == "weakly_observable":
        graph = (rng.random((actions, actions)) < density).astype(float)
        np.fill_diagonal(graph, rng.random(actions) < rng.choice([0.0, 0.5]))
        graph[:, 0] = 0.0
        graph[rng.integers(1, actions), 0] = 1.0
    elif kind == "stochastic":
        graph = rng.random((actions, actions)) * (rng.random((actions, actions)) < 0.5)
        if rng.random() < 0.5:
            np.fill_diagonal(graph, 0.0)
    else:
        raise ValueError(f"unknown graph kind {kind!r}; known: {', '.join(GRAPH_KINDS)}")
    for column in np.flatnonzero(graph.max(axis=0) == 0.0):
        graph[(column + 1 + rng.integers(actions - 1)) % actions, column] = 1.0
    return graph


def random_losses(actions: int, rng: np.random.Generator) -> np.ndarray:
    """Predicted losses at a random scale (0.01, 0.1 or 1); a third of the time one action
    is clearly best, which puts nearly all of the optimal p on it (dec's steep corner)."""
    fhat = rng.uniform(0.0, 1.0, actions) * rng.choice([0.01, 0.1, 1.0])
    if rng.random() < 1.0 / 3.0:
        fhat[rng.integers(actions)] -= rng.uniform(0.05, 0.5)
    return fhat
