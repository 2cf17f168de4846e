"""The graph_cb neural oracle: state round-trip, determinism, learning, missing torch."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from banditflow.learners.base import LearnerError  # noqa: E402
from banditflow.learners.graph_cb import ALGORITHMS  # noqa: E402
from banditflow.learners.graph_cb.oracles import LinearOracle, NeuralOracle  # noqa: E402
from banditflow.learners.registry import make_learner  # noqa: E402

ACTIONS, DIM = 5, 4
NEURAL = {"actions": ACTIONS, "feature_dim": DIM, "graph_kind": "bandit", "oracle": "neural",
          "hidden_size": 16}


def stream(seed: int, rounds: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Contexts and losses: the action argmax(theta x) has mean loss -0.8, the others 0.8."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(ACTIONS, DIM))
    for _ in range(rounds):
        x = rng.normal(size=DIM)
        mean = 0.8 * (1.0 - 2.0 * (np.arange(ACTIONS) == np.argmax(theta @ x)))
        yield x, np.clip(mean + rng.normal(0.0, 0.1, ACTIONS), -1.0, 1.0)


def play(learner, rounds: int, seed: int = 0, skip: int = 0) -> tuple[list[dict], float, float]:
    """Decision outputs, the learner's mean loss and the uniform policy's mean loss (bandit
    feedback), over rounds ``skip..rounds`` of the seeded stream."""
    outputs: list[dict] = []
    total = uniform = 0.0
    for t, (x, losses) in enumerate(stream(seed, rounds)):
        if t < skip:
            continue
        decided = learner.decide({"features": x.tolist()}, np.random.default_rng([seed, t]))
        action = decided.output["action"]
        learner.learn(decided.pending, {"losses": {str(action): float(losses[action])}})
        outputs.append(decided.output)
        total += losses[action]
        uniform += losses.mean()
    played = rounds - skip
    return outputs, total / played, uniform / played


def test_selected_by_params_and_linear_unchanged() -> None:
    assert isinstance(make_learner("graph_cb", "squarecb_g", NEURAL).oracle, NeuralOracle)
    linear = {k: v for k, v in NEURAL.items() if k not in ("oracle", "hidden_size")}
    assert isinstance(make_learner("graph_cb", "squarecb_g", linear).oracle, LinearOracle)
    with pytest.raises(LearnerError, match="hidden_size"):
        make_learner("graph_cb", "squarecb_g", {**linear, "hidden_size": 4})
    with pytest.raises(LearnerError, match="update"):
        make_learner("graph_cb", "squarecb_g", {**NEURAL, "update": "rls"})
    with pytest.raises(LearnerError, match="oracle"):
        make_learner("graph_cb", "squarecb_g", {**NEURAL, "oracle": "forest"})


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_state_round_trip_reproduces_decisions(algorithm: str) -> None:
    original = make_learner("graph_cb", algorithm, NEURAL)
    play(original, 150)
    state = json.loads(json.dumps(original.to_state()))
    restored = ALGORITHMS[algorithm].from_state(NEURAL, state)
    assert restored.to_state() == original.to_state()
    expected, _, _ = play(original, 250, skip=150)
    again, _, _ = play(restored, 250, skip=150)
    assert again == expected
    assert restored.to_state() == original.to_state()


def test_per_action_layout_round_trip() -> None:
    params = {**NEURAL, "feature_layout": "per_action"}
    oracle = make_learner("graph_cb", "squarecb", params).oracle
    x = np.random.default_rng(1).normal(size=(ACTIONS, DIM))
    for action in range(ACTIONS):
        oracle.update(x, action, 0.1 * action)
    state = json.loads(json.dumps(oracle.to_state()))
    copy = make_learner("graph_cb", "squarecb", params).oracle
    copy.load_state(state)
    assert np.array_equal(copy.predict(x), oracle.predict(x))
    assert np.all(np.abs(oracle.predict(x)) < 1.0)


def test_deterministic_given_seed() -> None:
    first, second = (make_learner("graph_cb", "squarecb_g", NEURAL) for _ in range(2))
    assert first.to_state() == second.to_state()
    assert play(first, 200)[0] == play(second, 200)[0]
    assert first.to_state() == second.to_state()
    other = make_learner("graph_cb", "squarecb_g", {**NEURAL, "oracle_seed": 1})
    assert other.to_state()["oracle"] != make_learner(
        "graph_cb", "squarecb_g", NEURAL).to_state()["oracle"]


def test_state_is_compact() -> None:
    state = make_learner("graph_cb", "squarecb_g", NEURAL).to_state()["oracle"]
    numbers = sum(len(w) * len(w[0]) + len(b) for w, b in state["layers"])
    assert numbers == (DIM + 1) * 16 + (16 + 1) * ACTIONS


@pytest.mark.parametrize("hidden_size", [0, 16])
def test_learns_far_better_than_uniform(hidden_size: int) -> None:
    learner = make_learner("graph_cb", "squarecb_g", {**NEURAL, "hidden_size": hidden_size})
    _, loss, uniform = play(learner, 1500)
    assert uniform > 0.4
    assert loss < uniform - 0.6  # progressive-validation loss


def test_clear_error_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(LearnerError, match=r"install banditflow\[neural\]"):
        make_learner("graph_cb", "squarecb_g", NEURAL)
    linear = {k: v for k, v in NEURAL.items() if k not in ("oracle", "hidden_size")}
    make_learner("graph_cb", "squarecb_g", linear)  # the linear oracle never needs torch
