"""Probabilistic feedback graphs: parsing, structure and Monte Carlo reachability.

A graph over ``K`` arms is given as edges ``[[i, j, p], ...]``: when arm ``i`` is played the
edge ``(i, j)`` is live with probability ``p`` and then the reward of arm ``j`` is revealed
(one-step case). In the cascade case every arm reachable from the played arm through live
edges is revealed, so ``r_ij = P[a live path i -> j]`` replaces ``p_ij``. Paths have at least
one edge: an arm observes itself only through a self-loop or a live cycle.

>>> import numpy as np
>>> from banditflow.learners.prob_graph.graph import edge_matrix, reachability
>>> P = edge_matrix(3, [[0, 1, 1.0], [1, 2, 0.5], [2, 0, 1.0]])
>>> R = reachability(P, 4000, np.random.default_rng(0))
>>> round(float(R[0, 2]), 1)  # 0 -> 1 -> 2 is live with probability 1 * 0.5
0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from banditflow.learners.base import LearnerError, check_state_size

CASES = ("one_step", "cascade")
REWARDS = ("gaussian", "bernoulli")


def edge_matrix(arms: int, edges: Sequence[Sequence[Any]]) -> np.ndarray:
    """The ``K x K`` matrix ``P[i, j] = p_ij`` of ``edges``; errors name the bad edge.

    Every arm needs an in-edge with positive probability, otherwise it can never be observed.
    """
    if isinstance(arms, bool) or not isinstance(arms, int | np.integer) or arms < 2:
        raise LearnerError(f"parameter 'arms' must be an integer >= 2, got {arms!r}")
    # the policies keep K x K matrices (edge probabilities, reach counts)
    check_state_size(2 * arms * arms, f"parameter 'arms' = {arms}")
    if isinstance(edges, str | bytes) or not isinstance(edges, Sequence):
        raise LearnerError(f"parameter 'edges' must be a list of [i, j, p], got {edges!r}")
    matrix = np.zeros((arms, arms))
    seen: set[tuple[int, int]] = set()
    for edge in edges:
        if isinstance(edge, str | bytes) or not isinstance(edge, Sequence) or len(edge) != 3:
            raise LearnerError(f"edge {edge!r} must be [i, j, p]")
        i, j, p = edge
        for end in (i, j):
            if isinstance(end, bool) or not isinstance(end, int | np.integer):
                raise LearnerError(f"edge {edge!r}: endpoints must be integers")
            if not 0 <= end < arms:
                raise LearnerError(f"edge {edge!r}: arm {end} is outside 0..{arms - 1}")
        try:
            probability = float(p)
        except (TypeError, ValueError) as exc:
            raise LearnerError(f"edge {edge!r}: probability must be a number") from exc
        if not 0.0 < probability <= 1.0:
            raise LearnerError(f"edge {edge!r}: probability must be in (0, 1], got {p!r}")
        if (int(i), int(j)) in seen:
            raise LearnerError(f"edge {edge!r} is duplicated")
        seen.add((int(i), int(j)))
        matrix[int(i), int(j)] = probability
    check_in_edges(matrix)
    return matrix


def check_in_edges(matrix: np.ndarray) -> None:
    """Raise unless every arm (column) has an in-edge with positive probability."""
    orphans = np.flatnonzero(~(matrix > 0).any(axis=0))
    if orphans.size:
        raise LearnerError(
            f"arm(s) {', '.join(map(str, orphans.tolist()))} have no in-edge and can never be "
            "observed; every arm needs an edge [i, j, p] with p > 0 pointing to it"
        )


def transitive_closure(adjacency: np.ndarray) -> np.ndarray:
    """Boolean reachability through paths of length >= 1 (batched over leading axes)."""
    reach = adjacency.astype(bool)
    while True:
        extended = reach | (np.matmul(reach.astype(np.int64), reach.astype(np.int64)) > 0)
        if np.array_equal(extended, reach):
            return reach
        reach = extended


def sample_reach_counts(
    matrix: np.ndarray, samples: int, rng: np.random.Generator, batch: int = 256
) -> np.ndarray:
    """How many of ``samples`` live-edge realisations connect ``i`` to ``j`` (integer counts)."""
    arms = matrix.shape[0]
    counts = np.zeros((arms, arms), dtype=np.int64)
    done = 0
    while done < samples:
        size = min(batch, samples - done)
        live = rng.random((size, arms, arms)) < matrix
        counts += transitive_closure(live).sum(axis=0)
        done += size
    return counts


def reachability(P: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Monte Carlo estimate of ``r_ij = P[a live path i -> j]`` from ``samples`` realisations.

    Each realisation keeps every edge independently with probability ``P[i, j]``; the
    estimate's standard error is at most ``0.5 / sqrt(samples)``.
    """
    matrix = np.asarray(P, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise LearnerError(f"P must be a square matrix, got shape {matrix.shape}")
    if not np.all((matrix >= 0.0) & (matrix <= 1.0)):
        raise LearnerError("P must hold probabilities in [0, 1]")
    if samples < 1:
        raise LearnerError(f"samples must be >= 1, got {samples}")
    return sample_reach_counts(matrix, samples, rng) / samples


@dataclass(frozen=True)
class Setting:
    """The known part of a problem: graph, feedback case and reward family.

    ``revealable[i, j]`` says whether playing ``i`` can ever reveal ``j`` (used to reject
    impossible feedback); ``parents[j]`` is ``bestParent(j) = argmax_i p_ij``.
    """

    probabilities: np.ndarray
    case: str
    rewards: str

    @property
    def arms(self) -> int:
        return int(self.probabilities.shape[0])

    @cached_property
    def revealable(self) -> np.ndarray:
        positive = self.probabilities > 0
        return transitive_closure(positive) if self.case == "cascade" else positive

    @cached_property
    def certain(self) -> np.ndarray:
        """``certain[i, j]``: playing ``i`` always reveals ``j`` (an edge of probability 1, or
        in the cascade case a path of them), so complete feedback without ``j`` is false."""
        sure = self.probabilities >= 1.0
        return transitive_closure(sure) if self.case == "cascade" else sure

    @cached_property
    def parents(self) -> np.ndarray:
        return np.argmax(self.probabilities, axis=0)


def parse_setting(arms: Any, edges: Any, case: Any, rewards: Any) -> Setting:
    """Validate the shared parameters of every ``prob_graph`` learner and scenario."""
    if case not in CASES:
        raise LearnerError(f"parameter 'case' must be one of {', '.join(CASES)}, got {case!r}")
    if rewards not in REWARDS:
        raise LearnerError(
            f"parameter 'rewards' must be one of {', '.join(REWARDS)}, got {rewards!r}"
        )
    return Setting(edge_matrix(arms, edges), case, rewards)
