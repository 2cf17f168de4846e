"""graph_cb over per-event candidate sets with action features (VW's ADF form)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from banditflow.learners.base import ContradictingFeedback, LearnerError, LoggedExample
from banditflow.learners.graph_cb import ALGORITHMS
from banditflow.learners.graph_cb.candidates import pair_features
from banditflow.learners.registry import make_learner
from banditflow.offline.candidate_task import CandidateTask

FORM = {"feature_dim": 2, "action_features": 2, "max_actions": 4, "graph_kind": "bandit"}
CONTEXT = {"features": [0.5, -1.0],
           "actions": [{"id": "a", "features": [1.0, 0.0]}, {"id": "b", "features": [0.0, 1.0]},
                       {"id": "c", "features": [1.0, 1.0]}]}


def regrets(learner, task: CandidateTask, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Per round: the learner's regret, the uniform policy's, and whether the best candidate
    was a late item (released late in the stream, never offered before its release)."""
    rng = np.random.default_rng(seed)
    mine, uniform, late = [], [], []
    for t in range(task.rounds):
        request = task.request(t)
        decided = learner.decide(request.context, rng)
        action = decided.output["action"]
        assert decided.output["action_id"] == request.context["actions"][action]["id"]
        learner.learn(decided.pending, {"losses": task.feedback(request, action)})
        gap = request.means - request.means.min()
        mine.append(gap[action])
        uniform.append(gap.mean())
        late.append(bool(request.late[request.best]))
    return np.array(mine), np.array(uniform), np.array(late)


@pytest.mark.parametrize("algorithm", ["squarecb_g", "squarecb"])
def test_learns_the_hidden_preference_and_scores_unseen_items(algorithm: str) -> None:
    task = CandidateTask(seed=1, rounds=2000)
    learner = make_learner("graph_cb", algorithm, {**task.params, "update": "rls"})
    mine, uniform, late = regrets(learner, task)
    assert mine.mean() < 0.2 * uniform.mean()
    # Rounds whose best candidate is an item released at 3/4 of the stream: the learner had
    # never been offered it, and picks it (or one nearly as good) from its features.
    assert late.sum() >= 50
    assert mine[late].mean() < 0.2 * uniform[late].mean()


def test_random_graphs_and_the_neural_oracle() -> None:
    pytest.importorskip("torch")
    task = CandidateTask(seed=2, rounds=600, graph_edge=0.2, max_candidates=20)
    learner = make_learner("graph_cb", "squarecb_g",
                           {**task.params, "oracle": "neural", "hidden_size": 16})
    mine, uniform, _ = regrets(learner, task)
    assert mine[300:].mean() < 0.5 * uniform[300:].mean()


def test_pair_features_cross_the_shared_part_with_the_action() -> None:
    shared, actions = np.array([2.0, 3.0]), np.array([[5.0, 7.0]])
    assert pair_features(shared, actions).tolist() == [[10.0, 14.0, 15.0, 21.0, 5.0, 7.0,
                                                        2.0, 3.0]]
    assert pair_features(np.zeros(0), actions).tolist() == [[5.0, 7.0]]


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_decision_feedback_by_id_or_index_and_state(algorithm: str) -> None:
    params = {**FORM, "update": "rls"}
    learner = make_learner("graph_cb", algorithm, params)
    decided = learner.decide(CONTEXT, np.random.default_rng(4))
    output = decided.output
    assert set(output) == {"action", "action_id", "p", "gamma", "dec"}
    assert len(output["p"]) == 3 and sum(output["p"]) == pytest.approx(1.0)
    assert output["action_id"] == "abc"[output["action"]]
    json.dumps(decided.pending)
    by_id = make_learner("graph_cb", algorithm, {**FORM, "update": "rls"})
    by_id.decide(CONTEXT, np.random.default_rng(4))
    learner.learn(decided.pending, {"losses": {str(output["action"]): 0.25}})
    by_id.learn(decided.pending, {"losses": {output["action_id"]: 0.25}})
    assert learner.to_state() == by_id.to_state()
    restored = type(learner).from_state(params, json.loads(json.dumps(learner.to_state())))
    again = [m.decide(CONTEXT, np.random.default_rng(9)).output for m in (learner, restored)]
    assert again[0] == again[1]


def test_without_shared_features_and_with_a_context_graph() -> None:
    learner = make_learner("graph_cb", "squarecb_g",
                           {"action_features": 2, "update": "rls"})
    context = {"actions": CONTEXT["actions"], "graph": [[1, 1, 0], [0, 1, 0], [0, 0, 1]]}
    decided = learner.decide(context, np.random.default_rng(0))
    played = decided.output["action"]
    shown = [j for j in range(3) if context["graph"][played][j]]
    learned = learner.learn(decided.pending, {"losses": {"abc"[j]: 0.5 for j in shown}})
    assert learned.metrics["revealed"] == len(shown)
    hidden = next(j for j in range(3) if not context["graph"][played][j])
    with pytest.raises(ContradictingFeedback, match="cannot reveal"):
        learner.learn(decided.pending, {"losses": {"abc"[hidden]: 0.5}})
    assert learner.oracle.updates == len(shown)


@pytest.mark.parametrize(("feedback", "error", "message"), [
    ({"losses": {"zz": 0.1}}, ContradictingFeedback, "neither an id nor an index"),
    ({"losses": {"7": 0.1}}, ContradictingFeedback, "not in \\[0, 3\\)"),
    ({"losses": {"a": 2.0}}, LearnerError, "must lie in"),
])
def test_bad_feedback_is_refused_without_learning(feedback, error, message) -> None:
    learner = make_learner("graph_cb", "squarecb", {**FORM, "graph_kind": "full"})
    decided = learner.decide(CONTEXT, np.random.default_rng(0))
    with pytest.raises(error, match=message):
        learner.learn(decided.pending, feedback)
    assert learner.oracle.updates == 0


def test_a_loss_by_id_and_by_index_for_one_candidate_is_refused() -> None:
    learner = make_learner("graph_cb", "squarecb", {**FORM, "graph_kind": "full"})
    decided = learner.decide(CONTEXT, np.random.default_rng(0))
    with pytest.raises(LearnerError, match="two losses"):
        learner.learn(decided.pending, {"losses": {"a": 0.1, "0": 0.2}})


def candidates(*features: list[float]) -> list[dict]:
    return [{"id": f"i{n}", "features": f} for n, f in enumerate(features)]


@pytest.mark.parametrize(("context", "message"), [
    ({"features": [0.0, 0.0], "actions": [{"id": "x", "features": [1.0, 0.0]},
                                          {"id": "x", "features": [0.0, 1.0]}]},
     "unique within an event; repeated: x"),
    ({"features": [0.0, 0.0], "actions": candidates(*[[1.0, 0.0]] * 5)},
     "5 candidate actions, more than the learner's max_actions 4"),
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], [1.0])},
     "actions\\[1\\].features must be 2 numbers"),
    ({"features": [0.0, 0.0], "actions": candidates([1.0, float("nan")])},
     "actions\\[0\\].features must be finite"),
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], [0.0, 1.0],
                                                   [float("-inf"), 0.0])},
     "actions\\[2\\].features must be finite"),
    ({"features": [0.0, float("inf")], "actions": candidates([1.0, 0.0])},
     "'features' must be finite"),
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], [0.0, 1.0]),
      "graph": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]},
     "the feedback graph has 3 actions, expected 2"),
    ({"features": [0.0], "actions": candidates([1.0, 0.0])}, "'features' must be 2 numbers"),
    ({"features": [0.0, 0.0]}, "needs 'actions'"),
    ({"features": [0.0, 0.0], "actions": []}, "needs 'actions'"),
    # (a set that fails the one conversion of the whole set is named candidate by candidate)
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], [10**400, 0.0])},
     "actions\\[1\\].features must be 2 numbers"),
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], [[1.0], [2.0]])},
     "actions\\[1\\].features must be 2 numbers"),
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], "ab")},
     "actions\\[1\\].features must be 2 numbers"),
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], [1.0, {"x": 1}])},
     "actions\\[1\\].features must be 2 numbers"),
    # (numbers only: not numbers' text, which numpy would read, nor bytes or None)
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], ["1.5", "2"])},
     "actions\\[1\\].features must be 2 numbers"),
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], b"ab")},
     "actions\\[1\\].features must be 2 numbers"),
    ({"features": [0.0, 0.0], "actions": candidates([None, 0.0])},
     "actions\\[0\\].features must be 2 numbers"),
    ({"features": "12", "actions": candidates([1.0, 0.0])}, "'features' must be 2 numbers"),
    # (in-process callers' arrays: one-dimensional ones only)
    ({"features": [0.0, 0.0], "actions": candidates(np.zeros((2, 1)))},
     "actions\\[0\\].features must be 2 numbers"),
    ({"features": np.float64(1.0), "actions": candidates([1.0, 0.0])},
     "'features' must be 2 numbers"),
    ({"features": np.array(1.0), "actions": candidates([1.0, 0.0])},
     "'features' must be 2 numbers"),
    ({"features": [0.0, 0.0], "actions": [{"id": "a", "features": [1.0, 0.0]},
                                          {"id": 7, "features": [1.0, 0.0]}]},
     "actions\\[1\\] needs an 'id'"),
    ({"features": [0.0, 0.0], "actions": [{"id": "a", "features": [1.0, 0.0]}, [1.0, 0.0]]},
     "actions\\[1\\] needs an 'id'"),
    ({"features": [0.0, 0.0], "actions": [{"id": "a"}]}, "actions\\[0\\].features must be"),
    ({"features": [10**400, 0.0], "actions": candidates([1.0, 0.0])},
     "'features' must be 2 numbers"),
    ({"features": [0.0, 0.0], "actions": candidates([1.0, 0.0], [0.0, 1.0]),
      "graph": [[1.0, 10**400], [0.0, 1.0]]}, "array of numbers"),
])
def test_bad_candidate_sets_are_refused(context: dict, message: str) -> None:
    learner = make_learner("graph_cb", "squarecb_g", FORM)
    with pytest.raises(LearnerError, match=message):
        learner.decide(context, np.random.default_rng(0))
    assert learner.schedule.decisions == 0


def test_any_sequence_of_numbers_decides_alike_and_pending_state_is_json() -> None:
    # The pending state keeps the context's own lists (ints as the application sent them):
    # written to the state log as JSON and read back, it learns as the floats would.
    as_ints = {"features": [1, -1], "actions": [{"id": "a", "features": [1, 0]},
                                                {"id": "b", "features": [0, 1]}]}
    as_floats = {"features": [1.0, -1.0], "actions": [{"id": "a", "features": [1.0, 0.0]},
                                                      {"id": "b", "features": [0.0, 1.0]}]}
    as_arrays = {"features": np.array([1.0, -1.0]),
                 "actions": [{"id": "a", "features": (1.0, 0.0)},
                             {"id": "b", "features": np.array([0.0, 1.0])}]}
    states = []
    for context in (as_ints, as_floats, as_arrays):
        learner = make_learner("graph_cb", "squarecb", FORM)
        for t in range(20):
            decided = learner.decide(context, np.random.default_rng(t))
            pending = json.loads(json.dumps(decided.pending))
            learner.learn(pending, {"losses": {decided.output["action_id"]: 0.1 * (t % 3)}})
        states.append(json.dumps(learner.to_state()))
    assert states[0] == states[1] == states[2]


@pytest.mark.parametrize(("params", "message"), [
    ({**FORM, "actions": 3}, "'actions' belongs to the fixed-K form"),
    ({**FORM, "feature_layout": "per_action"}, "'feature_layout' belongs to the fixed-K form"),
    ({**FORM, "action_features": 0}, "must be >= 1"),
    ({**FORM, "max_actions": 5000}, "max_actions"),
    ({**FORM, "graph_kind": "nope"}, "unknown graph kind"),
])
def test_bad_candidate_parameters_are_refused(params: dict, message: str) -> None:
    with pytest.raises(LearnerError, match=message):
        make_learner("graph_cb", "squarecb_g", params)


def test_a_fixed_k_learner_refuses_candidates() -> None:
    learner = make_learner("graph_cb", "squarecb", {"actions": 3, "feature_dim": 2,
                                                    "graph_kind": "bandit"})
    with pytest.raises(LearnerError, match="fixed K"):
        learner.decide(CONTEXT, np.random.default_rng(0))


def test_warm_start_on_logged_candidate_rounds() -> None:
    task = CandidateTask(seed=5, rounds=800)
    logged = []
    rng = np.random.default_rng(1)
    for t in range(task.rounds):
        request = task.request(t)
        action = int(rng.integers(len(request.items)))
        logged.append(LoggedExample(request.context["features"], action,
                                    -float(request.losses[action]), {},
                                    request.context["actions"]))
    params = {**task.params, "update": "rls"}
    warm = ALGORITHMS["squarecb"].warm_params(params, logged)
    fresh = make_learner("graph_cb", "squarecb", params)
    started = make_learner("graph_cb", "squarecb", warm)
    assert started.oracle.updates == len(logged)
    test = CandidateTask(seed=5, rounds=300)
    gaps = {"fresh": [], "warm": []}
    for t in range(200, 300):  # (rounds the log did not hold)
        request = test.request(t + 1000)
        for name, learner in (("fresh", fresh), ("warm", started)):
            fhat = learner.oracle.predict(pair_features(
                np.asarray(request.context["features"]), test.catalogue[request.items]))
            gaps[name].append(request.means[int(np.argmin(fhat))] - request.means.min())
    assert np.mean(gaps["warm"]) < 0.3 * np.mean(gaps["fresh"])
