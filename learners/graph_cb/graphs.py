"""Feedback graphs: validation, the named graphs, structure detection and independence numbers.

A feedback graph is a K x K array with ``G[a, j]`` = probability that playing ``a`` reveals the
loss of ``j`` (row = played, column = revealed); entries in [0, 1], self-loops optional.

Vowpal Wabbit's ``--graph_feedback`` uses the transpose (column = played, row = revealed): a
banditflow graph goes to VW as ``G.T`` (``tests/benchmarks/bench_graph_cb_vw.py``,
``vw_graph``, writes VW's ``row,col,value`` triples from ``G.T``), and a VW graph comes here
transposed. Sent untransposed, VW silently learns from the wrong reveals.

>>> from banditflow.learners.graph_cb.graphs import named_graph, detect_kind, independence_number
>>> G = named_graph("inventory", 4)
>>> G.astype(int).tolist()
[[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
>>> detect_kind(G)
'inventory'
>>> independence_number(named_graph("bandit", 5)), independence_number(named_graph("full", 5))
(5, 1)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from banditflow.learners.base import LearnerError
from banditflow.learners.graph_cb import kernels

GRAPH_KINDS = ("bandit", "full", "cops_and_robbers", "apple_tasting", "inventory")
"""Names accepted by :func:`named_graph` (and the learners' ``graph_kind`` parameter)."""


# Named graphs of at most this many actions are built once and kept: a candidate-set learner
# asks for its graph over each event's candidates twice an event, and building it cost more
# than the candidates' scores. Every kind at every size up to it takes under 3 MB.
CACHED_GRAPH_ACTIONS = 64


def named_graph(kind: str, actions: int) -> np.ndarray:
    """The K x K matrix of a named graph (apple tasting exists only for K = 2), read-only
    (it may be shared: :data:`CACHED_GRAPH_ACTIONS`)."""
    if actions <= CACHED_GRAPH_ACTIONS:
        return _kept_named_graph(kind, actions)
    return _read_only(_build_named_graph(kind, actions))


@functools.cache
def _kept_named_graph(kind: str, actions: int) -> np.ndarray:
    return _read_only(_build_named_graph(kind, actions))  # (a refused kind raises: not kept)


def _read_only(graph: np.ndarray) -> np.ndarray:
    graph.flags.writeable = False
    return graph


def _build_named_graph(kind: str, actions: int) -> np.ndarray:
    if actions < 1:
        raise LearnerError(f"a feedback graph needs at least one action, got {actions}")
    if kind == "bandit":
        return np.eye(actions)
    if kind == "full":
        return np.ones((actions, actions))
    if kind == "cops_and_robbers":
        return np.ones((actions, actions)) - np.eye(actions)
    if kind == "apple_tasting":
        if actions != 2:
            raise LearnerError(f"the apple tasting graph has exactly 2 actions, got {actions}")
        return np.array([[1.0, 1.0], [0.0, 0.0]])
    if kind == "inventory":
        return np.tril(np.ones((actions, actions)))
    raise LearnerError(f"unknown graph kind {kind!r}; known: {', '.join(GRAPH_KINDS)}")


def as_graph(
    graph: Sequence[Sequence[float]] | np.ndarray, actions: int | None = None
) -> np.ndarray:
    """``graph`` as a float K x K array; raises :class:`LearnerError` if it is not a valid,
    observable feedback graph (every column needs a nonzero entry: some action reveals it)."""
    try:
        matrix = np.array(graph, dtype=float)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LearnerError(f"a feedback graph must be a K x K array of numbers: {exc}") from exc
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] == 0:
        raise LearnerError(f"a feedback graph must be a non-empty K x K array, got {matrix.shape}")
    if actions is not None and matrix.shape[0] != actions:
        raise LearnerError(f"the feedback graph has {matrix.shape[0]} actions, expected {actions}")
    if not np.all(np.isfinite(matrix)) or matrix.min() < 0.0 or matrix.max() > 1.0:
        raise LearnerError("feedback graph entries are probabilities and must lie in [0, 1]")
    unobservable = np.flatnonzero(matrix.max(axis=0) <= 0.0)
    if unobservable.size:
        raise LearnerError(
            f"unobservable action(s) {unobservable.tolist()}: no action reveals their loss "
            "(all-zero column of G), so no exploration distribution has a finite dec"
        )
    return matrix


def detect_kind(G: np.ndarray) -> str | None:
    """The closed-form family ``G`` belongs to, or None.

    One of ``"bandit"``, ``"cops_and_robbers"``, ``"apple_tasting"`` (either action may be
    the one that reveals both), ``"inventory"`` (lower triangular ones) and ``"self_aware"``
    (a 0/1 symmetric graph with every self-loop, which includes the full-information graph).
    """
    actions = G.shape[0]
    if actions < 2 or not np.all((G == 0.0) | (G == 1.0)):
        return None
    identity = np.eye(actions)
    if np.array_equal(G, identity):
        return "bandit"
    if np.array_equal(G, 1.0 - identity):
        return "cops_and_robbers"
    if actions == 2 and sorted(G.sum(axis=1).tolist()) == [0.0, 2.0]:
        return "apple_tasting"
    if np.array_equal(G, np.tril(np.ones_like(G))):
        return "inventory"
    if np.array_equal(G, G.T) and np.all(np.diag(G) == 1.0):
        return "self_aware"
    return None


def independence_number(G: np.ndarray) -> int:
    """A greedy estimate of the independence number alpha(G), at least 1.

    Nodes i != j are adjacent when either may reveal the other (``G[i, j] > 0`` or
    ``G[j, i] > 0``; stochastic edges count as edges). The estimate repeatedly takes a node of
    minimum remaining degree and removes its neighbours: a maximal independent set, hence a
    lower bound on alpha(G) that is exact for the named graphs (bandit K; full,
    cops-and-robbers, apple tasting, inventory 1). Computing alpha exactly is NP-hard; the
    gamma schedule only needs its order of magnitude.
    """
    return int(kernels.greedy_independent_set_size(np.ascontiguousarray(G, dtype=float)))
