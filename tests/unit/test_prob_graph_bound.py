"""The lower-bound LP C*(theta) and the Monte Carlo reachability of the prob_graph family."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.prob_graph import lower_bound_constant, reachability
from banditflow.learners.prob_graph.bound import kl_bernoulli


def gaussian_targets(means: np.ndarray) -> np.ndarray:
    """b_j = 2 / Delta_j^2, b_i1 = 2 / Delta_min^2."""
    best = int(np.argmax(means))
    gaps = means[best] - means
    gaps[best] = means[best] - np.sort(means)[-2]
    return 2.0 / gaps**2


def brute_force(P: np.ndarray, means: np.ndarray) -> tuple[float, float]:
    """Vertex enumeration of the Gaussian LP: (optimal cost, smallest c_i1 among optima)."""
    arms = len(means)
    best = int(np.argmax(means))
    gaps = means[best] - means
    targets = gaussian_targets(means)
    rows = np.vstack([P.T, np.eye(arms)])
    rhs = np.concatenate([targets, np.zeros(arms)])
    vertices = []
    for active in itertools.combinations(range(2 * arms), arms):
        system = rows[list(active)]
        if abs(np.linalg.det(system)) < 1e-12:
            continue
        c = np.linalg.solve(system, rhs[list(active)])
        if np.all(rows @ c >= rhs - 1e-9):
            vertices.append(c)
    value = min(float(gaps @ c) for c in vertices)
    optimal = [c for c in vertices if gaps @ c <= value + 1e-7 * max(1.0, value)]
    return value, min(float(c[best]) for c in optimal)


def test_two_arm_instance_solved_by_hand() -> None:
    # Arm 0 is observed only through arm 1 (p=1), arm 1 only through arm 0 (p=0.5).
    # b = 2 / 1^2 = 2 for both: c_1 >= 2 (cost 2 * Delta_1 = 2), c_0 >= 2 / 0.5 = 4 (free).
    value, c = lower_bound_constant([[0.0, 0.5], [1.0, 0.0]], [1.0, 0.0])
    assert value == pytest.approx(2.0)
    np.testing.assert_allclose(c, [4.0, 2.0], atol=1e-7)


def test_revealing_instance_solved_by_hand() -> None:
    # Self-loops everywhere; arm 2 (Delta=1) also reveals arms 0 and 1. b = (8, 8, 2).
    # Arm 2 needs c_2 >= 2; arm 1 then needs c_1 >= 8 - c_2 = 6, cost 2 * 1 + 6 * 0.5 = 5
    # (moving mass to c_2 costs 1 per unit instead of 0.5). Tie-break: c_0 = 8 - c_2 = 6.
    P = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    value, c = lower_bound_constant(P, [1.0, 0.5, 0.0])
    assert value == pytest.approx(5.0)
    np.testing.assert_allclose(c, [6.0, 6.0, 2.0], atol=1e-6)


def test_tie_break_minimises_the_best_arms_allocation() -> None:
    # Arm 0 (best) is revealed by itself (p=1) and by arm 1 (p=1); any c_0 >= 0 with
    # c_1 = 2 is optimal for cost, and the tie-break picks c_0 = 0 (arm 1 already gives 2 >= 2).
    P = np.array([[1.0, 0.0], [1.0, 1.0]])
    _, tied = lower_bound_constant(P, [1.0, 0.0])
    assert tied[0] == pytest.approx(0.0, abs=1e-7)
    value, untied = lower_bound_constant(P, [1.0, 0.0], tie_break=False)
    assert value == pytest.approx(2.0)
    assert untied[1] == pytest.approx(2.0)


@pytest.mark.parametrize("seed", range(12))
def test_lp_matches_brute_force_on_tiny_instances(seed: int) -> None:
    rng = np.random.default_rng(seed)
    arms = int(rng.integers(2, 5))
    P = rng.uniform(0.1, 1.0, (arms, arms)) * (rng.random((arms, arms)) < 0.6)
    P[rng.integers(0, arms, arms), np.arange(arms)] = rng.uniform(0.1, 1.0, arms)
    means = rng.normal(0.0, 1.0, arms)
    value, c = lower_bound_constant(P, means)
    expected_value, expected_best_allocation = brute_force(P, means)
    assert value == pytest.approx(expected_value, rel=1e-6)
    best = int(np.argmax(means))
    assert c[best] == pytest.approx(expected_best_allocation, rel=1e-5, abs=1e-6)
    assert np.all(P.T @ c >= gaussian_targets(means) * (1.0 - 1e-7))
    assert np.all(c >= 0.0)


def test_bernoulli_uses_kl_divergences() -> None:
    # Each arm is revealed only by the other. b_1 = 1 / kl(0.5, 0.9) bounds c_0 (free);
    # b_0 = 1 / kl(0.9, 0.5) bounds c_1, so C* = 0.4 / kl(0.9, 0.5), not 0.4 * 2 / 0.4^2.
    P = [[0.0, 1.0], [1.0, 0.0]]
    value, c = lower_bound_constant(P, [0.9, 0.5], rewards="bernoulli")
    kl_best = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    kl_other = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert value == pytest.approx(0.4 / kl_best)
    np.testing.assert_allclose(c, [1.0 / kl_other, 1.0 / kl_best], rtol=1e-6)
    gaussian_value, _ = lower_bound_constant(P, [0.9, 0.5])
    assert gaussian_value == pytest.approx(0.4 * 2.0 / 0.4**2)


def test_bernoulli_infinite_divergence_needs_no_observations() -> None:
    # A best arm with mean 1 is told apart from a mean-0.5 arm by a single failure: b_1 = 0.
    value, c = lower_bound_constant([[0.0, 1.0], [1.0, 0.0]], [1.0, 0.5], rewards="bernoulli")
    assert c[0] == pytest.approx(0.0, abs=1e-9)
    assert value == pytest.approx(0.5 / (math.log(1.0 / 0.5)))


def test_kl_bernoulli_conventions() -> None:
    values = kl_bernoulli(np.array([0.5, 0.0, 1.0, 0.3]), np.array([0.5, 0.5, 1.0, 0.0]))
    np.testing.assert_allclose(values[:3], [0.0, math.log(2.0), 0.0])
    assert math.isinf(values[3])


@pytest.mark.parametrize(
    ("P", "means", "message"),
    [
        ([[0.0, 1.0], [1.0, 0.0]], [1.0, 1.0], "best arm must be unique"),
        ([[0.0, 1.0], [0.0, 0.0]], [1.0, 0.0], "no in-edge"),
        ([[0.0, 1.0], [1.0, 0.0]], [1.0, 0.0, 0.5], "one entry per arm"),
        ([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]], [1.0, 0.0], "square"),
        ([[0.0, 1.5], [1.0, 0.0]], [1.0, 0.0], "probabilities"),
        ([[0.0, 1.0], [1.0, 0.0]], [1.0, float("nan")], "finite"),
    ],
)
def test_invalid_input_raises_learner_error(P: list, means: list, message: str) -> None:
    with pytest.raises(LearnerError, match=message):
        lower_bound_constant(P, means)


def test_invalid_reward_family_and_bernoulli_range() -> None:
    with pytest.raises(LearnerError, match="rewards"):
        lower_bound_constant([[0.0, 1.0], [1.0, 0.0]], [1.0, 0.0], rewards="poisson")
    with pytest.raises(LearnerError, match=r"\[0, 1\]"):
        lower_bound_constant([[0.0, 1.0], [1.0, 0.0]], [1.5, 0.0], rewards="bernoulli")


def exact_reachability(P: np.ndarray) -> np.ndarray:
    """r_ij by enumerating every live-edge realisation of a small graph."""
    arms = P.shape[0]
    edges = list(zip(*np.nonzero(P), strict=True))
    result = np.zeros((arms, arms))
    for live in itertools.product([False, True], repeat=len(edges)):
        weight = 1.0
        adjacency = np.zeros((arms, arms), dtype=bool)
        for (i, j), on in zip(edges, live, strict=True):
            weight *= P[i, j] if on else 1.0 - P[i, j]
            adjacency[i, j] = on
        reach = adjacency.copy()
        for _ in range(arms):
            reach |= (reach.astype(int) @ adjacency.astype(int)) > 0
        result += weight * reach
    return result


def test_reachability_matches_exact_enumeration() -> None:
    P = np.array(
        [[0.0, 0.7, 0.2, 0.0], [0.0, 0.0, 0.5, 0.0], [0.4, 0.0, 0.0, 0.9], [0.0, 0.3, 0.0, 0.0]]
    )
    estimate = reachability(P, 20_000, np.random.default_rng(0))
    np.testing.assert_allclose(estimate, exact_reachability(P), atol=0.02)
    assert estimate[1, 1] > 0.0  # 1 -> 2 -> 0 -> 1 is a cycle back to arm 1


def test_cascade_lower_bound_uses_reachability() -> None:
    # A chain 0 -> 1 -> 2 -> 0: in the cascade case arm 0 also reveals arm 2 (r_02 = 0.5).
    P = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.5], [1.0, 0.0, 0.0]])
    means = [1.0, 0.0, 0.5]
    one_step, _ = lower_bound_constant(P, means)
    R = exact_reachability(P)
    cascade, c = lower_bound_constant(R, means)
    assert cascade < one_step
    estimated, _ = lower_bound_constant(reachability(P, 20_000, np.random.default_rng(1)), means)
    assert estimated == pytest.approx(cascade, rel=0.05)
    assert np.all(R.T @ c >= gaussian_targets(np.array(means)) * (1.0 - 1e-7))


def test_reachability_rejects_bad_input() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(LearnerError, match="square"):
        reachability(np.zeros((2, 3)), 10, rng)
    with pytest.raises(LearnerError, match="samples"):
        reachability(np.eye(2), 0, rng)
