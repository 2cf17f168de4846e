"""The compiled per-decision arithmetic of graph_cb against the plain formulas it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from banditflow.learners.graph_cb import kernels
from banditflow.learners.graph_cb.base import sample
from banditflow.learners.graph_cb.candidates import pair_features
from banditflow.learners.graph_cb.graphs import independence_number
from banditflow.learners.graph_cb.solver import decision_estimation_coefficient


def dec_by_definition(p: np.ndarray, fhat: np.ndarray, G: np.ndarray, gamma: float) -> float:
    """dec from its definition, term by term over a K x K array (0/0 = 0, x/0 = +inf)."""
    reveal = G.T @ p
    deviation_sq = (p[None, :] - np.eye(p.size)) ** 2  # row a: (p_i - 1[i = a])^2
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(deviation_sq > 0.0, deviation_sq / reveal[None, :], 0.0)
    return float(np.max(np.dot(p, fhat) - fhat + ratio.sum(axis=1) / gamma))


def random_case(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """A distribution (some with zeros or a point mass), losses and a graph (some with
    unrevealed actions and no self-loops)."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 25))
    p = rng.dirichlet(np.ones(size) * rng.choice([0.05, 1.0, 10.0]))
    if seed % 5 == 0 and size > 1:
        p[int(np.argmin(p))] = 0.0
        p /= p.sum()
    elif seed % 5 == 1:
        p = np.zeros(size)
        p[int(rng.integers(size))] = 1.0
    graph = (rng.random((size, size)) < rng.choice([0.1, 0.5, 1.0])).astype(float)
    graph *= rng.choice([1.0, 0.5])
    if seed % 2:
        np.fill_diagonal(graph, 1.0)
    if seed % 7 == 0:
        graph = np.eye(size)
    return p, rng.random(size), graph, float(rng.choice([1.0, 10.0, 1000.0]))


@pytest.mark.parametrize("seed", range(400))
def test_dec_equals_its_definition(seed: int) -> None:
    p, fhat, graph, gamma = random_case(seed)
    expected = dec_by_definition(p, fhat, graph, gamma)
    got = decision_estimation_coefficient(p, fhat, graph, gamma)
    if np.isinf(expected):
        assert got == expected
    else:
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_dec_refuses_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="K x K"):
        decision_estimation_coefficient([0.5, 0.5], [0.0, 0.1], np.eye(3), 1.0)
    with pytest.raises(ValueError, match="K x K"):
        decision_estimation_coefficient([0.5, 0.5], [0.0, 0.1, 0.2], np.eye(2), 1.0)


@pytest.mark.parametrize(("shared_dim", "items", "bias"),
                         [(0, 1, True), (1, 3, False), (5, 5, True), (3, 2, False)])
def test_pair_scores_and_vector_follow_the_pair_features(shared_dim: int, items: int,
                                                         bias: bool) -> None:
    rng = np.random.default_rng(shared_dim * 10 + items)
    shared, candidates = rng.normal(size=shared_dim), rng.normal(size=(9, items))
    pairs = pair_features(shared, candidates)
    if bias:
        pairs = np.hstack([pairs, np.ones((9, 1))])
    weights = rng.normal(size=pairs.shape[1])
    scores = kernels.pair_scores(weights, shared, candidates, bias, -0.5, 0.75)
    assert scores == pytest.approx(np.clip(pairs @ weights, -0.5, 0.75), rel=1e-12, abs=1e-12)
    assert kernels.pair_vector(shared, candidates[4], bias).tolist() == pairs[4].tolist()
    with pytest.raises(ValueError, match="do not fit"):
        kernels.pair_scores(weights[:-1], shared, candidates, bias, -1.0, 1.0)


@pytest.mark.parametrize(("low", "high"), [(-50.0, 50.0), (-50.0, -40.0), (40.0, 50.0)],
                         ids=["inside", "clipped_above", "clipped_below"])
def test_rls_step_is_the_sherman_morrison_update(low: float, high: float) -> None:
    rng = np.random.default_rng(3)
    size = 8
    weights, inverse = rng.normal(size=size), np.eye(size) / 2.0
    vector, loss = rng.normal(size=size), 0.3
    prediction = float(weights @ vector)
    assert -40.0 < prediction < 40.0  # (so the three ranges take the three branches)
    residual = min(max(prediction, low), high) - loss
    direction = inverse @ vector
    gain = direction / (1.0 + vector @ direction)
    expected_weights = weights - residual * gain
    expected_inverse = inverse - np.outer(gain, direction)
    # the inverse of (Gram + x x^T): what recursive least squares keeps
    assert expected_inverse == pytest.approx(np.linalg.inv(2.0 * np.eye(size)
                                                           + np.outer(vector, vector)))
    kernels.rls_step(weights, inverse, vector, loss, low, high)
    assert weights == pytest.approx(expected_weights, rel=1e-14)
    assert inverse == pytest.approx(expected_inverse, rel=1e-14, abs=1e-15)
    with pytest.raises(ValueError, match="differ in size"):
        kernels.rls_step(weights[:-1], inverse, vector, loss, low, high)


@pytest.mark.parametrize("bias", [True, False])
def test_the_rls_pair_step_is_the_rls_step_on_the_pair_vector(bias: bool) -> None:
    rng = np.random.default_rng(11)
    shared, candidate = rng.normal(size=3), rng.normal(size=4)
    vector = kernels.pair_vector(shared, candidate, bias)
    weights, inverse = rng.normal(size=vector.size), np.eye(vector.size) / 2.0
    expected_weights, expected_inverse = weights.copy(), inverse.copy()
    kernels.rls_step(expected_weights, expected_inverse, vector, 0.3, -0.5, 0.5)
    kernels.rls_pair_step(weights, inverse, shared, candidate, bias, 0.3, -0.5, 0.5)
    assert weights.tolist() == expected_weights.tolist()
    assert inverse.tolist() == expected_inverse.tolist()
    with pytest.raises(ValueError, match="differ in size"):
        kernels.rls_pair_step(weights, inverse, shared[:-1], candidate, bias, 0.3, -0.5, 0.5)


@pytest.mark.parametrize("seed", range(200))
def test_the_inverse_gap_decision_is_p_its_dec_and_the_draw(seed: int) -> None:
    _, fhat, graph, gamma = random_case(seed)
    uniform = float(np.random.default_rng(seed).random())
    p, dec, action = kernels.inverse_gap_decision(fhat, graph, gamma, uniform)
    expected = kernels.inverse_gap_weighting(fhat, gamma)
    assert p.tolist() == expected.tolist()
    assert dec == decision_estimation_coefficient(expected, fhat, graph, gamma)
    assert action == kernels.draw(expected, uniform)
    read_only = graph.copy()
    read_only.flags.writeable = False  # (a named graph is)
    assert kernels.inverse_gap_decision(fhat, read_only, gamma, uniform)[2] == action


@pytest.mark.parametrize("algorithm", ["squarecb", "epsilon_greedy"])
def test_the_decision_is_the_distribution_and_the_draw(algorithm: str) -> None:
    # SquareCB computes its decision in one compiled call: it must stay what distribution()
    # says p is, with the draw sample() makes. (SquareCB.G's solver is warm-started from its
    # last call, so two calls differ; it keeps the default decision.)
    from banditflow.learners.registry import make_learner

    learner = make_learner("graph_cb", algorithm, {"actions": 6, "feature_dim": 2,
                                                   "graph_kind": "cops_and_robbers"})
    for seed in range(30):
        _, fhat, _, gamma = random_case(seed)
        fhat = fhat[:6] if fhat.size >= 6 else np.resize(fhat, 6)
        p, dec, action = learner.decision(fhat, learner.graph, gamma,
                                          np.random.default_rng([seed, 2]))
        expected, expected_dec = learner.distribution(fhat, learner.graph, gamma)
        assert p.tolist() == expected.tolist() and dec == expected_dec
        assert action == sample(expected, np.random.default_rng([seed, 2]))


@pytest.mark.parametrize("seed", range(200))
def test_sample_draws_what_generator_choice_draws(seed: int) -> None:
    p, _, _, _ = random_case(seed)
    expected = np.random.default_rng([seed, 1]).choice(p.size, p=p)
    assert sample(p, np.random.default_rng([seed, 1])) == expected


def greedy_by_definition(G: np.ndarray) -> int:
    """Take a node of minimum remaining degree (the first), remove it and its neighbours."""
    adjacent = (G > 0.0) | (G.T > 0.0)
    np.fill_diagonal(adjacent, False)
    remaining = np.ones(G.shape[0], dtype=bool)
    size = 0
    while remaining.any():
        degrees = np.where(remaining, (adjacent & remaining).sum(axis=1), G.shape[0] + 1)
        node = int(np.argmin(degrees))
        remaining &= ~adjacent[node]
        remaining[node] = False
        size += 1
    return size


@pytest.mark.parametrize("seed", range(300))
def test_the_greedy_independence_number_follows_its_definition(seed: int) -> None:
    _, _, graph, _ = random_case(seed)
    assert independence_number(graph) == greedy_by_definition(graph)


def test_the_oracle_takes_arrays_in_any_memory_order() -> None:
    """The kernels take C-contiguous float64 arrays; the oracle hands them any array."""
    from banditflow.learners.graph_cb.oracles import LinearOracle

    per_action = LinearOracle(actions=3, feature_dim=2, layout="per_action", update="rls",
                              bias=False)
    transposed = np.arange(6.0).reshape(2, 3).T  # (a view in Fortran order)
    per_action.update(transposed, 1, 0.5)
    assert per_action.updates == 1
    pairs = LinearOracle(actions=4, feature_dim=2 * 3 + 3 + 2, layout="pairs", update="rls")
    shared, candidates = np.arange(4.0)[::2], np.asfortranarray(np.ones((4, 3)))
    pairs.update_pair(shared, candidates[0], 0.3)  # (a row of a Fortran-order array)
    expected = np.hstack([pair_features(np.ascontiguousarray(shared), np.ones((4, 3))),
                          np.ones((4, 1))]) @ pairs.weights[0]
    assert pairs.predict_pairs(shared, candidates) == pytest.approx(expected)
