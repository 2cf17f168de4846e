"""The graph_cb learners: contract, state, determinism and learning on a synthetic stream."""

from __future__ import annotations

import json

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.graph_cb import ALGORITHMS
from banditflow.learners.registry import make_learner

BASE = {"actions": 4, "feature_dim": 3, "graph_kind": "cops_and_robbers"}


def stream(rng: np.random.Generator, rounds: int, actions: int, dim: int):
    """Contexts with per-event strongly observable graphs and linear mean losses in [0, 1]."""
    theta = rng.normal(size=(actions, dim))
    for _ in range(rounds):
        x = rng.normal(size=dim)
        mean = 0.5 + 0.25 * np.tanh(theta @ x)
        graph = (rng.random((actions, actions)) < 0.3).astype(float)
        np.fill_diagonal(graph, 1.0)
        losses = np.clip(mean + rng.normal(0.0, 0.1, actions), 0.0, 1.0)
        yield x, graph, losses, mean


def run(learner, seed: int, rounds: int) -> tuple[float, float]:
    """Progressive-validation loss and mean regret of ``learner`` on the seeded stream."""
    rng = np.random.default_rng(seed)
    total = regret = 0.0
    for x, graph, losses, mean in stream(rng, rounds, 5, 4):
        decided = learner.decide({"features": x.tolist(), "graph": graph.tolist()}, rng)
        action = decided.output["action"]
        revealed = {str(j): float(losses[j]) for j in np.flatnonzero(graph[action] > 0)}
        learned = learner.learn(decided.pending, {"losses": revealed})
        assert learned.metrics["loss"] == pytest.approx(losses[action])
        total += losses[action]
        regret += mean[action] - mean.min()
    return total / rounds, regret / rounds


def test_registered() -> None:
    assert set(ALGORITHMS) == {"squarecb_g", "squarecb", "epsilon_greedy"}
    for name, cls in ALGORITHMS.items():
        assert cls.family == "graph_cb" and cls.algorithm == name
        assert isinstance(make_learner("graph_cb", name, BASE), cls)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_decision_output_and_pending(algorithm: str) -> None:
    learner = ALGORITHMS[algorithm].from_params(BASE)
    decided = learner.decide({"features": [0.1, 0.2, 0.3]}, np.random.default_rng(0))
    output = decided.output
    assert set(output) == {"action", "p", "gamma", "dec"}
    assert 0 <= output["action"] < 4 and len(output["p"]) == 4
    assert sum(output["p"]) == pytest.approx(1.0) and output["gamma"] > 0
    assert output["dec"] is None or output["dec"] >= 0.0
    json.dumps(output)
    json.dumps(decided.pending)
    assert decided.pending["action"] == output["action"] and "graph" not in decided.pending


def test_squarecb_g_learns_far_better_than_uniform() -> None:
    params = {"actions": 5, "feature_dim": 4, "update": "rls", "gamma_c": 8.0}
    learner = ALGORITHMS["squarecb_g"].from_params(params)
    _, regret = run(learner, seed=7, rounds=1500)
    uniform_regret = np.mean([m.mean() - m.min() for *_, m in
                              stream(np.random.default_rng(7), 1500, 5, 4)])
    assert regret < 0.35 * uniform_regret


def test_baselines_learn_from_every_revealed_loss() -> None:
    params = {"actions": 5, "feature_dim": 4, "update": "rls"}
    for algorithm in ("squarecb", "epsilon_greedy"):
        learner = ALGORITHMS[algorithm].from_params(params)
        run(learner, seed=3, rounds=50)
        assert learner.oracle.updates > 50  # every revealed loss, not only the played one


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("update", ["sgd", "rls"])
def test_state_round_trip_and_determinism(algorithm: str, update: str) -> None:
    params = {"actions": 5, "feature_dim": 4, "update": update}
    learner = ALGORITHMS[algorithm].from_params(params)
    run(learner, seed=11, rounds=30)
    state = learner.to_state()
    restored = ALGORITHMS[algorithm].from_state(params, json.loads(json.dumps(state)))
    assert restored.to_state() == state
    context = {"features": [0.3, -0.2, 0.1, 0.5]}
    graph = np.ones((5, 5)) - np.eye(5)
    context["graph"] = graph.tolist()
    first = learner.decide(context, np.random.default_rng(5)).output
    second = restored.decide(context, np.random.default_rng(5)).output
    assert first == second
    twin = ALGORITHMS[algorithm].from_params(params)
    assert run(twin, seed=11, rounds=30) == run(ALGORITHMS[algorithm].from_params(params), 11, 30)


def test_per_action_features_and_schedules() -> None:
    params = {"actions": 3, "feature_dim": 2, "feature_layout": "per_action",
              "graph_kind": "inventory", "gamma_schedule": "vw"}
    learner = ALGORITHMS["squarecb_g"].from_params(params)
    rng = np.random.default_rng(0)
    decided = learner.decide({"features": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]}, rng)
    assert decided.output["gamma"] == 1.0  # scale * max(n, 1) ** 0.5 before any feedback
    action = decided.output["action"]
    learner.learn(decided.pending, {"losses": {str(j): 0.5 for j in range(action + 1)}})
    assert learner.oracle.updates == action + 1
    doubling = ALGORITHMS["squarecb_g"].from_params(
        {**BASE, "gamma_schedule": "doubling", "gamma_initial": 4.0, "reg_sq": 0.01})
    gammas = [doubling.decide({"features": [0.0] * 3}, rng).output["gamma"] for _ in range(5)]
    assert gammas[0] == 4.0 and gammas[-1] > 4.0 and gammas == sorted(gammas)


def test_expire_is_no_observation() -> None:
    learner = ALGORITHMS["squarecb_g"].from_params(BASE)
    decided = learner.decide({"features": [0.1, 0.2, 0.3]}, np.random.default_rng(0))
    assert learner.expire(decided.pending).done and learner.oracle.updates == 0


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({**BASE, "typo": 1}, "unknown parameter"),
        ({"feature_dim": 3}, "actions"),
        ({**BASE, "graph": np.eye(4).tolist()}, "not both"),
        ({**BASE, "solver": "magic"}, "solver"),
        ({**BASE, "gamma_schedule": "weekly"}, "gamma_schedule"),
        ({**BASE, "feature_layout": "diagonal"}, "feature_layout"),
    ],
)
def test_bad_parameters_are_rejected(params: dict, message: str) -> None:
    with pytest.raises(LearnerError, match=message):
        ALGORITHMS["squarecb_g"].from_params(params)


def test_doubling_only_for_squarecb_g() -> None:
    with pytest.raises(LearnerError, match="doubling"):
        ALGORITHMS["squarecb"].from_params({**BASE, "gamma_schedule": "doubling"})


@pytest.mark.parametrize(
    ("feedback", "message"),
    [
        ({}, "losses"),
        ({"losses": {"9": 0.1}}, "not in"),
        ({"losses": {"0": 2.0}}, r"\[-1, 1\]"),
        ({"losses": {"x": 0.1}}, "bad revealed"),
    ],
)
def test_bad_feedback_is_rejected_without_learning(feedback: dict, message: str) -> None:
    learner = ALGORITHMS["squarecb_g"].from_params(BASE)
    decided = learner.decide({"features": [0.1, 0.2, 0.3]}, np.random.default_rng(0))
    with pytest.raises(LearnerError, match=message):
        learner.learn(decided.pending, feedback)
    assert learner.oracle.updates == 0


def test_loss_the_graph_cannot_reveal_is_rejected() -> None:
    learner = ALGORITHMS["squarecb_g"].from_params(BASE)  # cops and robbers: no self-loops
    decided = learner.decide({"features": [0.1, 0.2, 0.3]}, np.random.default_rng(0))
    played = str(decided.output["action"])
    with pytest.raises(LearnerError, match="cannot reveal"):
        learner.learn(decided.pending, {"losses": {played: 0.1}})


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({}, "features"),
        ({"features": [0.1, 0.2]}, "shape"),
        ({"features": [0.1, 0.2, 0.3], "graph": np.eye(3).tolist()}, "expected 4"),
        ({"features": [0.1, 0.2, 0.3], "graph": np.zeros((4, 4)).tolist()}, "unobservable"),
    ],
)
def test_bad_contexts_are_rejected(context: dict, message: str) -> None:
    learner = ALGORITHMS["squarecb_g"].from_params(BASE)
    with pytest.raises(LearnerError, match=message):
        learner.decide(context, np.random.default_rng(0))


def test_squarecb_g_warm_start_is_checkpointed() -> None:
    params = {"actions": 5, "feature_dim": 4, "update": "rls", "solver": "numeric"}
    learner = ALGORITHMS["squarecb_g"].from_params(params)
    run(learner, seed=13, rounds=20)
    assert learner.warm_start.method == "warm"  # per-event graphs, numeric solver, warm starts
    state = json.loads(json.dumps(learner.to_state()))
    assert state["warm_start"]["p"] is not None
    restored = ALGORITHMS["squarecb_g"].from_state(params, state)
    assert restored.to_state() == state
    rng = np.random.default_rng(21)
    for x, graph, *_ in stream(rng, 5, 5, 4):  # identical decisions, p bit for bit
        context = {"features": x.tolist(), "graph": graph.tolist()}
        first = learner.decide(context, np.random.default_rng(5)).output
        second = restored.decide(context, np.random.default_rng(5)).output
        assert first == second
    cold = ALGORITHMS["squarecb_g"].from_params({**params, "warm_start": False})
    assert cold.warm_start is None and "warm_start" not in cold.to_state()
    run(cold, seed=13, rounds=5)
    # checkpoints from before warm starts restore (and start cold)
    legacy = {key: value for key, value in state.items() if key != "warm_start"}
    assert ALGORITHMS["squarecb_g"].from_state(params, legacy).warm_start.p is None
    with pytest.raises(LearnerError, match="warm_start"):
        ALGORITHMS["squarecb_g"].from_params({**params, "warm_start": "yes"})


@pytest.mark.parametrize("update", ["sgd", "rls"])
def test_oracle_learns_on_its_clipped_prediction(update: str) -> None:
    """Predictions stay within the losses seen, and an example already predicted beyond them
    on its own side moves nothing, while a wrong one still does."""
    from banditflow.learners.graph_cb.oracles import LinearOracle

    oracle = LinearOracle(actions=1, feature_dim=1, update=update, learning_rate=0.5, bias=False)
    assert oracle.predict([1.0]).tolist() == [0.0]  # nothing seen yet: the [-1, 1] range
    oracle.update([1.0], 0, 0.0)
    oracle.update([1.0], 0, 1.0)
    assert oracle.loss_range == (0.0, 1.0)
    oracle.weights[0] = [-3.0]  # raw prediction -3 at x = 1
    assert oracle.predict([1.0]).tolist() == [0.0]  # clipped to the range seen
    before = oracle.to_state()
    oracle.update([1.0], 0, 0.0)  # predicted 0 after clipping, loss 0: nothing to learn
    assert oracle.weights[0].tolist() == [-3.0]
    oracle.update([1.0], 0, 1.0)  # wrong by the whole range: the weight moves up
    assert oracle.weights[0, 0] > -3.0
    restored = LinearOracle(actions=1, feature_dim=1, update=update, learning_rate=0.5, bias=False)
    restored.load_state(json.loads(json.dumps(before)))
    assert restored.loss_range == (0.0, 1.0) and restored.to_state() == before


def test_clipped_oracle_beats_least_squares_on_zero_one_losses() -> None:
    """The reason for clipping: 0/1 losses of a separable-ish linear problem. Least squares
    is pulled by confidently right examples; the clipped fit is not, and errs less."""
    from banditflow.learners.graph_cb.oracles import LinearOracle

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 5)) * np.array([3.0, 1.0, 1.0, 1.0, 1.0])
    label = (x @ np.array([1.0, 2.0, -1.0, 0.5, 0.0]) > 0).astype(float)
    errors = {}
    for clipped in (True, False):
        oracle = LinearOracle(actions=1, feature_dim=5, update="sgd", learning_rate=0.01)
        mistakes = 0
        for features, y in zip(x, label, strict=True):
            mistakes += int((oracle.predict(features)[0] > 0.5) != y)
            if not clipped:
                oracle.loss_range = (-np.inf, np.inf)  # a plain least-squares step
            oracle.update(features, 0, float(y))
        errors[clipped] = mistakes / len(x)
    assert errors[True] < 0.8 * errors[False]


def test_oracle_learns_normally_until_the_losses_span_an_interval() -> None:
    """One repeated loss is no range to clip to: RLS fed 100 losses of 1 then a 0 must
    predict like plain RLS (about 1), not collapse onto the single value seen."""
    from banditflow.learners.graph_cb.oracles import LinearOracle

    oracle = LinearOracle(actions=1, feature_dim=2, update="rls")
    for _ in range(100):
        oracle.update([1.0, 0.5], 0, 1.0)
    assert oracle.clip_range() == (-1.0, 1.0)
    oracle.update([1.0, 0.5], 0, 0.0)
    assert oracle.clip_range() == (0.0, 1.0)
    assert oracle.predict([1.0, 0.5])[0] > 0.95


def test_oracle_state_without_a_loss_range_still_learns() -> None:
    """States written before the loss range existed restore with none and keep learning."""
    from banditflow.learners.graph_cb.oracles import LinearOracle

    oracle = LinearOracle(actions=2, feature_dim=1, update="sgd", learning_rate=0.5)
    for _ in range(200):
        oracle.update([1.0], 0, 1.0)
        oracle.update([1.0], 1, 0.0)
    legacy = {key: value for key, value in oracle.to_state().items() if key != "loss_range"}
    restored = LinearOracle(actions=2, feature_dim=1, update="sgd", learning_rate=0.5)
    restored.load_state(legacy)
    assert restored.loss_range is None
    assert restored.predict([1.0]).round(2).tolist() == [1.0, 0.0]
    restored.update([1.0], 1, 0.0)
    assert restored.predict([1.0]).round(2).tolist() == [1.0, 0.0]
