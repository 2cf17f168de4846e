"""The graph_cb solver: optimality against the cvxpy reference, closed forms, validation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.graph_cb import (
    decision_estimation_coefficient,
    min_dec_distribution,
    primal_dual,
)
from banditflow.learners.graph_cb import solver as solver_module
from banditflow.learners.graph_cb.graphs import (
    CACHED_GRAPH_ACTIONS,
    detect_kind,
    independence_number,
    named_graph,
)
from banditflow.learners.graph_cb.solver import WarmStart

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
pytest.importorskip("cvxpy")
from graph_cb_reference import GRAPH_KINDS, random_losses, reference_min_dec
from graph_cb_reference import random_graph as kind_graph

GAMMAS = (4.0, 10.0, 100.0, 1000.0)


def random_graph(kind: str, actions: int, rng: np.random.Generator) -> np.ndarray:
    """A seeded random observable graph: strongly observable (all self-loops), weakly
    observable (some node neither sees itself nor is seen by all others) or stochastic."""
    if kind == "stochastic":
        graph = rng.random((actions, actions)) * (rng.random((actions, actions)) < 0.5)
    else:
        graph = (rng.random((actions, actions)) < 0.3).astype(float)
        np.fill_diagonal(graph, 1.0 if kind == "strong" else rng.random(actions) < 0.5)
        if kind == "weak":
            graph[0, 0] = 0.0
            graph[1:, 0] = 0.0
            graph[-1, 0] = 1.0  # node 0 is only revealed by the last node
    for column in np.flatnonzero(graph.max(axis=0) == 0.0):
        graph[rng.integers(actions), column] = 1.0
    return graph


def assert_distribution(p: np.ndarray, actions: int) -> None:
    assert p.shape == (actions,)
    assert np.all(p >= 0.0)
    assert abs(p.sum() - 1.0) < 1e-9


@pytest.mark.parametrize("kind", ["strong", "weak", "stochastic"])
@pytest.mark.parametrize(("actions", "instances"), [(2, 4), (5, 4), (10, 3), (20, 2), (50, 1)])
def test_numeric_solver_matches_cvxpy(kind: str, actions: int, instances: int) -> None:
    rng = np.random.default_rng(1000 * actions + len(kind))
    for _ in range(instances):
        graph = random_graph(kind, actions, rng)
        fhat = rng.uniform(-1.0, 1.0, actions)
        gamma = float(rng.choice(GAMMAS))
        p, dec = min_dec_distribution(fhat, graph, gamma, solver="numeric")
        _, optimum = reference_min_dec(fhat, graph, gamma)
        assert_distribution(p, actions)
        assert dec == pytest.approx(decision_estimation_coefficient(p, fhat, graph, gamma))
        assert dec <= optimum * 1.01 + 1e-6
        assert dec >= optimum - 1e-6  # nothing beats the optimum (up to cvxpy's tolerance)


def assert_optimal(dec: float, optimum: float) -> None:
    """Within 1 % of the optimum, or 1e-9 absolute (dec is of order 1/gamma, so only a
    relative tolerance sees an error at large gamma; the absolute one is for optima near 0)."""
    assert dec <= optimum * 1.01 + 1e-9, (dec, optimum)
    assert dec >= optimum * 0.99 - 1e-9, (dec, optimum)  # cvxpy's own error is below 1 %


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize(("actions", "instances"),
                         [(2, 6), (3, 8), (5, 8), (8, 6), (12, 5), (20, 4), (35, 2), (50, 2)])
def test_default_solver_is_optimal_on_every_graph_kind(
    kind: str, actions: int, instances: int
) -> None:
    """Issue 16: what SquareCB.G plays (the default ``solver="auto"``) is within 1 % of the
    cvxpy optimum on every kind of graph, K from 2 to 50 and gamma up to 1e4, including the
    corners where one p_i nears 1 (a clearly best action at large gamma)."""
    rng = np.random.default_rng(97 * actions + GRAPH_KINDS.index(kind))
    gammas = [4.0, 1e4] + [float(np.exp(rng.uniform(np.log(4.0), np.log(1e4))))
                           for _ in range(instances - 2)]
    for gamma in gammas:
        graph, fhat = kind_graph(kind, actions, rng), random_losses(actions, rng)
        p, dec = min_dec_distribution(fhat, graph, gamma)
        _, optimum = reference_min_dec(fhat, graph, gamma)
        assert_distribution(p, actions)
        assert dec == pytest.approx(decision_estimation_coefficient(p, fhat, graph, gamma),
                                    rel=1e-9, abs=1e-15)
        assert_optimal(dec, optimum)


@pytest.mark.parametrize(
    ("fhat", "graph", "optimum"),
    [
        ([0.637, 0.2698, 0.041], 1.0 - np.eye(3), 0.0100),  # closed form: dec 0.0192
        ([0.836, 0.878, 0.039], [[1, 0, 0], [0, 1, 1], [0, 1, 1]], 0.0100),  # closed form 0.0198
    ],
)
def test_issue_16_counterexamples(fhat: list[float], graph: list, optimum: float) -> None:
    """The two reproducers of issue 16 (gamma = 100): the constant-factor closed forms that
    ``auto`` used to pick give about twice the optimal dec; the default now gives the optimum."""
    graph = np.asarray(graph, dtype=float)
    named = detect_kind(graph)
    _, closed = min_dec_distribution(fhat, graph, 100.0, solver=named)
    _, reference = reference_min_dec(np.array(fhat), graph, 100.0)
    p, dec = min_dec_distribution(fhat, graph, 100.0)
    assert reference == pytest.approx(optimum, rel=1e-3)
    assert closed > 1.9 * reference  # the reason for the change
    assert_optimal(dec, reference)
    assert dec == pytest.approx(reference, rel=1e-3)  # certified to 0.1 %
    assert p[2] > 0.95


def test_graph_kind_generators() -> None:
    """The generators behind the gap tests make the graphs they are named for."""
    rng = np.random.default_rng(4)
    for _ in range(20):
        actions = int(rng.integers(3, 12))
        self_aware = kind_graph("self_aware", actions, rng)
        assert np.all(np.diag(self_aware) == 1.0)
        assert np.array_equal(kind_graph("loopless", actions, rng), 1.0 - np.eye(actions))
        strong = kind_graph("strongly_observable", actions, rng)
        for node in np.flatnonzero(np.diag(strong) == 0.0):
            assert strong[:, node].sum() == actions - 1  # revealed by every other node
        weak = kind_graph("weakly_observable", actions, rng)
        assert weak[0, 0] == 0.0 and weak[:, 0].sum() < actions - 1  # not strongly observable
        stochastic = kind_graph("stochastic", actions, rng)
        for graph in (self_aware, strong, weak, stochastic):
            assert graph.max(axis=0).min() > 0.0  # every action observable


def test_weak_generator_is_weakly_observable() -> None:
    graph = random_graph("weak", 6, np.random.default_rng(0))
    seen_by_others = graph[:, 0].sum() - graph[0, 0]
    assert graph[0, 0] == 0.0 and seen_by_others < 5


@pytest.mark.parametrize("solver", ["auto", "numeric"])
def test_unobservable_action_is_rejected(solver: str) -> None:
    graph = np.eye(3)
    graph[2, 2] = 0.0
    with pytest.raises(LearnerError, match="unobservable"):
        min_dec_distribution([0.1, 0.2, 0.3], graph, 10.0, solver=solver)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (([0.1, 0.2], np.eye(3), 10.0), "expected 2"),
        (([0.1, 0.2], np.eye(2), 0.0), "gamma"),
        (([0.1, 0.2], 2 * np.eye(2), 10.0), r"\[0, 1\]"),
        (([0.1, np.nan], np.eye(2), 10.0), "finite"),
    ],
)
def test_invalid_inputs_are_rejected(arguments: tuple, message: str) -> None:
    with pytest.raises(LearnerError, match=message):
        min_dec_distribution(*arguments)


def test_forcing_a_closed_form_on_another_graph_is_rejected() -> None:
    with pytest.raises(LearnerError, match="needs a inventory graph"):
        min_dec_distribution([0.1, 0.2, 0.3], np.eye(3), 10.0, solver="inventory")


@pytest.mark.parametrize(
    ("fhat", "gamma"),
    [([0.0, 0.0, 0.0], 10.0), ([0.0, 1.0, -1.0], 1e6), ([0.3], 10.0), ([0.2, 0.9], 1e-3)],
)
def test_extreme_inputs_give_distributions(fhat: list[float], gamma: float) -> None:
    rng = np.random.default_rng(3)
    graph = random_graph("weak", len(fhat), rng) if len(fhat) > 2 else np.ones((len(fhat),) * 2)
    p, dec = min_dec_distribution(fhat, graph, gamma, solver="numeric")
    assert_distribution(p, len(fhat))
    assert np.isfinite(dec) and dec >= 0.0


def test_spec_reference_values() -> None:
    cops = named_graph("cops_and_robbers", 2)
    p, dec = min_dec_distribution([0.1998, 0.0999], cops, 10.0, solver="numeric")
    assert p == pytest.approx([0.382, 0.618], abs=2e-3) and dec == pytest.approx(0.100, abs=1e-3)
    apple = named_graph("apple_tasting", 2)
    p, dec = min_dec_distribution([0.0999, 0.1998], apple, 10.0, solver="numeric")
    assert p == pytest.approx([0.666, 0.334], abs=2e-3) and dec == pytest.approx(0.0667, abs=1e-4)
    # the default is the optimum too; the closed forms only when named
    p, dec = min_dec_distribution([0.1998, 0.0999], cops, 10.0)
    assert p == pytest.approx([0.382, 0.618], abs=2e-3) and dec == pytest.approx(0.100, abs=1e-3)
    p, dec = min_dec_distribution([0.1998, 0.0999], cops, 10.0, solver="cops_and_robbers")
    assert p == pytest.approx([1 / 2.999, 1.999 / 2.999])
    assert dec <= 6.0 / 10.0
    p, dec = min_dec_distribution([0.0999, 0.1998], apple, 10.0, solver="apple_tasting")
    assert p.tolist() == [1.0, 0.0] and dec <= 6.0 / 10.0


def test_detection_of_named_graphs() -> None:
    assert detect_kind(named_graph("bandit", 4)) == "bandit"
    assert detect_kind(named_graph("cops_and_robbers", 4)) == "cops_and_robbers"
    assert detect_kind(named_graph("apple_tasting", 2)) == "apple_tasting"
    assert detect_kind(np.array([[0.0, 0.0], [1.0, 1.0]])) == "apple_tasting"
    assert detect_kind(named_graph("inventory", 4)) == "inventory"
    assert detect_kind(named_graph("full", 4)) == "self_aware"
    assert detect_kind(np.full((3, 3), 0.5)) is None
    assert [independence_number(named_graph(kind, 6)) for kind in
            ("bandit", "full", "cops_and_robbers", "inventory")] == [6, 1, 1, 1]


@pytest.mark.parametrize("actions", [2, 5, 20])
def test_bandit_closed_form_is_exact(actions: int) -> None:
    rng = np.random.default_rng(actions)
    for gamma in GAMMAS:
        fhat = rng.uniform(-1.0, 1.0, actions)
        p, dec = min_dec_distribution(fhat, np.eye(actions), gamma)
        _, optimum = reference_min_dec(fhat, np.eye(actions), gamma)
        assert_distribution(p, actions)
        assert dec == pytest.approx(optimum, rel=1e-6, abs=1e-9)
        evaluated = decision_estimation_coefficient(p, fhat, np.eye(actions), gamma)
        assert dec == pytest.approx(evaluated)


def closed_form_cases(kind: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    actions = 2 if kind == "apple_tasting" else int(rng.integers(2, 12))
    if kind == "self_aware":
        upper = np.triu(rng.random((actions, actions)) < 0.3, 1).astype(float)
        graph = upper + upper.T + np.eye(actions)
    else:
        graph = named_graph(kind, actions)
    fhat = rng.random(actions) * rng.choice([0.01, 0.1, 1.0])
    return graph, fhat, float(rng.choice(GAMMAS))


@pytest.mark.parametrize(
    ("kind", "bound"),
    [
        # dec <= bound * alpha / gamma. Cops-and-robbers and apple tasting: the paper's proven
        # 6 / gamma (App. B.1, B.2). Self-aware: O(alpha / gamma), 3 alpha / gamma here
        # (observed <= 2). Inventory: App. B.3 states 3 / gamma, but its step through
        # Lemma E.2 uses mas = 1 while the inventory graph is acyclic (mas = K): we observe up
        # to 3.7 / gamma, so we check 5 / gamma (and the ratio to the optimum below).
        ("cops_and_robbers", 6.0),
        ("apple_tasting", 6.0),
        ("inventory", 5.0),
        ("self_aware", 3.0),
    ],
)
def test_closed_forms_are_constant_factor_optimal(kind: str, bound: float) -> None:
    rng = np.random.default_rng(len(kind))
    for _ in range(40):
        graph, fhat, gamma = closed_form_cases(kind, rng)
        p, dec = min_dec_distribution(fhat, graph, gamma, solver=detect_kind(graph))
        _, optimum = min_dec_distribution(fhat, graph, gamma)
        assert_distribution(p, fhat.size)
        assert dec <= bound * independence_number(graph) / gamma + 1e-12
        if kind != "self_aware":  # alpha = 1: the bound also holds relative to the optimum
            assert dec <= 3.0 * optimum + 1e-9


def drifting_sequence(kind: str, actions: int, rounds: int, seed: int):
    """A realistic learner sequence: one graph and gamma, f drifting by N(0, 0.01^2)."""
    rng = np.random.default_rng(seed)
    graph = random_graph(kind, actions, rng)
    fhat = rng.uniform(-1.0, 1.0, actions)
    gamma = float(rng.choice(GAMMAS))
    for _ in range(rounds):
        yield fhat, graph, gamma
        fhat = np.clip(fhat + rng.normal(0.0, 0.01, actions), -1.0, 1.0)


@pytest.mark.parametrize("kind", ["strong", "weak", "stochastic"])
@pytest.mark.parametrize("actions", [5, 20])
def test_warm_start_matches_cold_solves(kind: str, actions: int) -> None:
    state = WarmStart()
    methods = []
    for fhat, graph, gamma in drifting_sequence(kind, actions, 12, actions + len(kind)):
        p_warm, dec_warm = min_dec_distribution(fhat, graph, gamma, solver="numeric",
                                                warm_start=state)
        methods.append(state.method)
        _, dec_cold = min_dec_distribution(fhat, graph, gamma, solver="numeric")
        assert_distribution(p_warm, actions)
        assert dec_warm == pytest.approx(decision_estimation_coefficient(p_warm, fhat, graph,
                                                                         gamma))
        # both are certified within 0.1% of the optimum
        assert abs(dec_warm - dec_cold) <= 2e-3 * dec_cold + 2e-7
    assert methods[0] == "primal_dual" and methods[1:].count("warm") >= 9


def test_warm_start_survives_a_new_graph_and_size() -> None:
    state = WarmStart()
    rng = np.random.default_rng(8)
    for actions in (6, 6, 9):
        graph, fhat = random_graph("weak", actions, rng), rng.uniform(-1.0, 1.0, actions)
        p, dec = min_dec_distribution(fhat, graph, 100.0, solver="numeric", warm_start=state)
        _, optimum = reference_min_dec(fhat, graph, 100.0)
        assert_distribution(p, actions)
        assert optimum - 1e-6 <= dec <= optimum * 1.01 + 1e-6
    restored = WarmStart()
    restored.load_state(json.loads(json.dumps(state.to_state())))
    assert restored.to_state() == state.to_state()
    assert np.array_equal(restored.p, state.p) and np.array_equal(restored.lam, state.lam)


@pytest.mark.parametrize("disable", ["iterations", "numba"])
def test_fallback_to_the_barrier_method(disable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if disable == "iterations":  # too few steps to certify: the certificate fails
        monkeypatch.setattr(solver_module, "_PRIMAL_DUAL_ITERATIONS", 1)
        monkeypatch.setattr(solver_module, "_WARM_ITERATIONS", 1)
    else:
        monkeypatch.setattr(primal_dual, "AVAILABLE", False)
    state = WarmStart()
    for fhat, graph, gamma in drifting_sequence("stochastic", 8, 3, 4):
        p, dec = min_dec_distribution(fhat, graph, gamma, solver="numeric", warm_start=state)
        _, optimum = reference_min_dec(fhat, graph, gamma)
        assert state.method == "barrier" and state.p is None
        assert_distribution(p, 8)
        assert optimum - 1e-6 <= dec <= optimum * 1.01 + 1e-6


def test_primal_dual_certificate_is_a_valid_bound() -> None:
    rng = np.random.default_rng(12)
    for kind in ("strong", "weak", "stochastic"):
        graph, fhat, gamma = random_graph(kind, 10, rng), rng.uniform(-1.0, 1.0, 10), 100.0
        gaps = gamma * (fhat - fhat.min())
        for iterations in (1, 3, 60):  # any iterate's bound is below the optimum
            p, lam, upper, lower, used = primal_dual.solve(
                gaps, graph, np.ones(10), np.ones(10), 1.0, 1e-3, 1e-7 * gamma, iterations
            )
            _, optimum = reference_min_dec(fhat, graph, gamma)
            assert lower / gamma <= optimum + 1e-6 and upper / gamma >= optimum - 1e-6
            assert upper / gamma == pytest.approx(
                decision_estimation_coefficient(p, fhat, graph, gamma))
            assert used <= iterations and lam.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("actions", [3, CACHED_GRAPH_ACTIONS + 1])
def test_named_graphs_are_read_only_whether_kept_or_not(actions: int) -> None:
    graph = named_graph("inventory", actions)
    assert graph.tolist() == np.tril(np.ones((actions, actions))).tolist()
    with pytest.raises(ValueError, match="read-only"):
        graph[0, 0] = 0.0
    kept = named_graph("inventory", actions) is graph
    assert kept == (actions <= CACHED_GRAPH_ACTIONS)
    with pytest.raises(LearnerError, match="unknown graph kind"):
        named_graph("nonsense", actions)
