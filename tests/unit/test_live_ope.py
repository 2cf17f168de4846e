"""Live off-policy evaluation (issue 13 item 5): the streaming estimators, the processor's
candidates (scoring, learning, persistence, reconfiguration, rejection), and the estimates'
statistics on a synthetic stream with a known target value."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import orjson
import pytest

from banditflow.learners.graph_cb.graphs import named_graph
from banditflow.offline.archive import LoggedRound
from banditflow.offline.ope.evaluation import evaluate
from banditflow.offline.ope.policies import parse_policy
from banditflow.processors import Processor, Source, StreamTimes
from banditflow.processors.estimators import (
    MIN_INTERVAL_SIZE,
    MIN_PROPENSITY,
    Z_95,
    Estimate,
    PolicyEstimates,
    Sums,
)
from banditflow.processors.ope import RewardModel
from banditflow.processors.records import LearnerEntry, Settled
from banditflow.processors.store import PartitionStore

LID = "ads"
ACTIONS = 3
# Mean loss of each action (features are uniform on [-1, 1]^2, mean 0, so this is each
# action's expected loss); every loss stays in [0, 1], as graph_cb requires.
BASE_LOSS = np.array([0.25, 0.5, 0.8])
SLOPES = np.array([[0.1, -0.1], [0.0, 0.2], [-0.1, 0.0]])
PARAMS = {"actions": ACTIONS, "feature_dim": 2, "graph_kind": "bandit"}
UNIFORM = {"algorithm": "epsilon_greedy", "params": {**PARAMS, "epsilon": 1.0}, "seed": 3}
# The logged learner (epsilon 0.3, 3 actions) gives every action at least 0.1: the largest
# explore_eval bound that is never clipped.
GREEDY = {"algorithm": "epsilon_greedy", "params": {**PARAMS, "epsilon": 0.1}, "seed": 4,
          "explore_eval_bound": 0.1}
CONFIGS, CONTEXTS, FEEDBACK = Source("learners"), Source("contexts"), Source("feedback")


def encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode()


def config(candidates: dict[str, Any] | None = None, **overrides: Any) -> bytes:
    record: dict[str, Any] = {
        "learner_id": LID, "family": "graph_cb", "algorithm": "epsilon_greedy",
        "params": {**PARAMS, "epsilon": 0.3}, "seed": 1, "feedback_timeout_s": 100.0,
    }
    if candidates is not None:
        record["candidates"] = candidates
    record.update(overrides)
    return encode(record)


class Stream:
    """A synthetic graph_cb application: contexts, and the logged action's loss as feedback."""

    def __init__(self, processor: Processor, seed: int) -> None:
        self.processor = processor
        self.rng = np.random.default_rng(seed)
        self.time = 0.0
        self.rounds: list[LoggedRound] = []

    def round(self, event_id: str) -> None:
        x = self.rng.uniform(-1.0, 1.0, size=2)
        self.time += 1.0
        decided = self.processor.on_context(
            encode({"learner_id": LID, "event_id": event_id, "features": x.tolist()}),
            CONTEXTS, self.time)
        output = decided.decisions[0].output
        action = output["action"]
        mean = BASE_LOSS[action] + SLOPES[action] @ x
        loss = float(mean + self.rng.uniform(-0.05, 0.05))
        self.processor.on_feedback(
            encode({"learner_id": LID, "event_id": event_id, "losses": {str(action): loss}}),
            FEEDBACK, self.time)
        self.rounds.append(LoggedRound(LID, event_id, action=action, actions=ACTIONS,
                                       propensity=output["p"][action], p=output["p"],
                                       reward=-loss, features=x.tolist()))

    def run(self, rounds: int, start: int = 0, prefix: str = "e") -> Stream:
        """``rounds`` rounds, event ids ``<prefix><i>`` (the logged draws depend on them)."""
        for i in range(start, start + rounds):
            self.round(f"{prefix}{i}")
        return self


def started(candidates: dict[str, Any] | None, **options: Any) -> Processor:
    processor = Processor(**options)
    out = processor.on_config(LID, config(candidates), CONFIGS, 0.0)
    assert not out.dead_letters, out.dead_letters
    return processor


def estimates(processor: Processor) -> dict[str, PolicyEstimates]:
    found = processor.ope_estimates(LID)
    assert found is not None
    return {e.policy: e for e in found}


# ------------------------------------------------------------------ streaming estimators
def reference(terms: np.ndarray) -> Estimate:
    """The textbook mean and normal interval (two-pass standard deviation)."""
    mean = float(np.mean(terms))
    half = Z_95 * float(np.std(terms, ddof=1)) / math.sqrt(len(terms))
    return Estimate(mean, mean - half, mean + half)


def close(a: Estimate, b: Estimate) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
               for x, y in zip((a.value, a.ci_low, a.ci_high), (b.value, b.ci_low, b.ci_high),
                               strict=True))


@pytest.mark.parametrize("seed", range(5))
def test_running_sums_equal_the_batch_estimators(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 500
    weights = rng.choice([0.0, 0.5, 2.0, 40.0], size=n) * rng.uniform(0.5, 1.5, size=n)
    rewards = rng.uniform(-1.0, 1.0, size=n)
    direct, modelled = rng.uniform(-1, 1, size=n), rng.uniform(-1, 1, size=n)
    terms = direct + weights * (rewards - modelled)
    live = Sums()
    for w, r, t in zip(weights, rewards, terms, strict=True):
        live.add(float(w), float(w * r), float(t))
    batch = Sums.of(weights, rewards, terms)
    # live == the offline estimators on the same rounds, to float precision ...
    assert close(live.ips(), batch.ips())
    assert close(live.snips(), batch.snips())
    assert close(live.dr(), batch.dr())
    assert math.isclose(live.ess(), batch.ess(), rel_tol=1e-12)
    # ... and both == the textbook formulas (SNIPS: the delta method's linearised terms)
    assert close(live.ips(), reference(weights * rewards))
    assert close(live.dr(), reference(terms))
    value = float(np.sum(weights * rewards) / np.sum(weights))
    linearised = reference(weights * (rewards - value) / np.mean(weights))
    half = linearised.ci_high - linearised.value
    assert close(live.snips(), Estimate(value, value - half, value + half))
    assert live.ess() == pytest.approx(np.sum(weights) ** 2 / np.sum(weights**2))
    assert Sums.from_json(orjson.loads(orjson.dumps(live.to_json()))) == live


def test_variances_survive_a_large_offset() -> None:
    """Terms of 10^8 + noise of 10^-2: sums of squares would cancel to garbage (or to a zero
    width), running centred moments keep the textbook interval."""
    rng = np.random.default_rng(0)
    rewards = 1e8 + rng.normal(0.0, 0.01, size=1000)
    weights = np.ones_like(rewards)
    live = Sums()
    for r in rewards:
        live.add(1.0, float(r), float(r))
    assert close(live.ips(), reference(rewards))
    assert close(live.dr(), reference(rewards))
    assert close(Sums.of(weights, rewards, rewards).ips(), reference(rewards))
    value = live.snips()
    assert value.ci_high - value.ci_low == pytest.approx(
        reference(rewards).ci_high - reference(rewards).ci_low, rel=1e-6)


def test_small_samples_have_no_interval() -> None:
    sums = Sums()
    assert math.isnan(sums.ips().value) and math.isnan(sums.snips().value) and sums.ess() == 0
    for _ in range(MIN_INTERVAL_SIZE - 1):
        sums.add(2.0, 1.0, 1.0)
    assert sums.ips().value == 1.0 and math.isnan(sums.ips().ci_low)
    assert sums.snips().value == 0.5 and math.isnan(sums.snips().ci_high)
    sums.add(2.0, 1.0, 1.0)
    assert sums.ips().ci_low == sums.ips().ci_high == 1.0  # n = ESS = 10: an interval
    # one nonzero weight among many rounds: ESS 1, so SNIPS (a single ratio) has no interval
    lone = Sums.of(np.array([5.0] + [0.0] * 99), np.ones(100), np.zeros(100))
    assert lone.ess() == pytest.approx(1.0) and lone.snips().value == pytest.approx(1.0)
    assert math.isnan(lone.snips().ci_low) and math.isnan(lone.ips().ci_low)
    # a batch given without DR terms has no DR estimate (not 0)
    assert math.isnan(Sums.of(np.ones(20), np.ones(20)).dr().value)
    assert math.isnan(Sums.of(np.zeros(3), np.ones(3)).snips().value)
    assert Sums.of(np.zeros(3), np.ones(3)).ess() == 0.0


# ------------------------------------------------------------------ the processor
def test_candidates_are_scored_on_the_live_stream_like_banditflow_ope() -> None:
    """The uniform candidate's IPS and SNIPS, and the logged policy's, equal what
    ``banditflow ope`` computes from the same rounds (the DR reward models differ: live it
    is fit on earlier rounds, offline cross-fitted)."""
    processor = started({"uniform": UNIFORM, "greedy": GREEDY})
    stream = Stream(processor, 0).run(400)
    live = estimates(processor)
    assert list(live) == ["logged", "uniform", "greedy"]
    offline = {p.policy: p for p in evaluate(stream.rounds,
                                              [parse_policy("uniform"), parse_policy("logged")],
                                              min_propensity=MIN_PROPENSITY).policies}
    for name in ("uniform", "logged"):
        assert live[name].rounds == 400
        assert close(live[name].ips, offline[name].ips), name
        assert close(live[name].snips, offline[name].snips), name
        assert live[name].ess == pytest.approx(offline[name].ess, rel=1e-9)
    # the paired difference from the logged policy, on the same rounds
    for name in ("uniform", "greedy"):
        ips_difference, dr_difference = live[name].ips_difference, live[name].dr_difference
        assert ips_difference is not None and dr_difference is not None
        assert ips_difference.value == pytest.approx(live[name].ips.value
                                                     - live["logged"].ips.value)
        assert dr_difference.value == pytest.approx(live[name].dr.value - live["logged"].dr.value)
        assert ips_difference.ci_low < ips_difference.value < ips_difference.ci_high
    # the logged policy on itself: weight 1, IPS = the mean logged reward
    assert live["logged"].ips.value == pytest.approx(np.mean([r.reward for r in stream.rounds]))
    assert live["logged"].ess == pytest.approx(400)
    # the candidates learn explore_eval-style: from some rounds, not all
    assert 0 < live["greedy"].learned_from < 400
    entry = processor.store.learners[LID]
    assert entry.ope is not None and entry.ope.candidates["greedy"].learner.oracle.updates > 0


def test_no_candidates_means_no_live_ope_work() -> None:
    processor = started(None)
    Stream(processor, 0).run(5)
    entry = processor.store.learners[LID]
    assert entry.ope is None and processor.ope_estimates(LID) is None
    assert "ope" not in entry.to_json()
    record = processor.store.decision(f"{LID}/e4")
    assert record is not None and record.ope is None and len(record.to_json()) == 12


def test_live_ope_off_leaves_the_candidates_alone() -> None:
    processor = started({"uniform": UNIFORM}, live_ope=False)
    Stream(processor, 0).run(20)
    assert estimates(processor)["uniform"].rounds == 0
    assert processor.store.decision(f"{LID}/e19").ope is None  # type: ignore[union-attr]


def test_a_timed_out_decision_is_not_scored() -> None:
    processor = started({"uniform": UNIFORM})
    processor.on_context(encode({"learner_id": LID, "event_id": "late", "features": [0, 0]}),
                         CONTEXTS, 0.0)
    assert processor.store.decision(f"{LID}/late").ope is not None  # type: ignore[union-attr]
    processor.on_tick(StreamTimes.at(1000.0))  # past the 100 s feedback timeout
    record = processor.store.decision(f"{LID}/late")
    assert record is not None and record.settled_by is Settled.TIMEOUT and record.ope is None
    assert all(e.rounds == 0 for e in estimates(processor).values())


def round_trip(processor: Processor) -> Processor:
    """The processor as a restarted worker rebuilds it from the state log."""
    store = processor.store
    values = []
    for key in store.log_keys():
        value = store.value(key)
        values.append((key, value if isinstance(value, bytes) else orjson.dumps(value)))
    return Processor(PartitionStore.load(values, retention_s=600.0, now=0.0))


def test_candidates_persist_across_a_state_log_round_trip() -> None:
    candidates = {"uniform": UNIFORM, "greedy": GREEDY}
    straight = started(candidates)
    Stream(straight, 7).run(300)
    restarted_before = started(candidates)
    stream = Stream(restarted_before, 7).run(150)
    restarted = round_trip(restarted_before)
    # open decisions too: a context decided before the restart, its feedback after
    stream.processor = restarted
    stream.run(150, start=150)
    assert estimates(restarted) == estimates(straight)
    entry = restarted.store.learners[LID]
    assert entry.ope is not None
    assert (entry.ope.candidates["greedy"].learner.to_state()
            == straight.store.learners[LID].ope.candidates["greedy"].learner.to_state())  # type: ignore[union-attr]
    # an older log's learner value (no "ope") still loads
    assert round_trip(started(None)).store.learners[LID].ope is None


def test_changing_only_the_candidates_keeps_the_learner_and_unchanged_estimates() -> None:
    processor = started({"uniform": UNIFORM, "greedy": GREEDY})
    stream = Stream(processor, 1).run(100)
    entry = processor.store.learners[LID]
    learner_state, version = entry.learner.to_state(), entry.version
    changed_greedy = {**GREEDY, "params": {**PARAMS, "epsilon": 0.2}}
    out = processor.on_config(LID, config({"uniform": UNIFORM, "greedy": changed_greedy}),
                              CONFIGS, stream.time)
    assert not out.dead_letters
    entry = processor.store.learners[LID]
    assert entry.version == version and entry.learner.to_state() == learner_state
    after = estimates(processor)
    assert after["uniform"].rounds == 100 and after["logged"].rounds == 100
    assert after["greedy"].rounds == 0  # a changed candidate starts afresh
    # decisions made before the change score the kept candidate, not the replaced one's
    # successor
    processor.on_context(encode({"learner_id": LID, "event_id": "late", "features": [0, 0]}),
                         CONTEXTS, stream.time)
    stream.run(10, start=100)
    after = estimates(processor)
    assert after["uniform"].rounds == 110 and after["greedy"].rounds == 10
    # removing every candidate drops the evaluation; a new learner version starts afresh
    processor.on_config(LID, config({}), CONFIGS, stream.time)
    assert processor.ope_estimates(LID) is None
    processor.on_config(LID, config({"uniform": UNIFORM}, seed=9), CONFIGS, stream.time)
    assert processor.store.learners[LID].version == version + 1
    assert estimates(processor)["uniform"].rounds == 0


def test_decisions_of_a_dropped_evaluation_are_not_scored_by_the_next() -> None:
    processor = started({"uniform": UNIFORM})
    decided = processor.on_context(
        encode({"learner_id": LID, "event_id": "e0", "features": [0.5, 0.5]}), CONTEXTS, 1.0)
    action = decided.decisions[0].output["action"]
    processor.on_config(LID, config({}), CONFIGS, 2.0)  # every candidate removed ...
    processor.on_config(LID, config({"uniform": UNIFORM}), CONFIGS, 3.0)  # ... and back
    out = processor.on_feedback(
        encode({"learner_id": LID, "event_id": "e0", "losses": {str(action): 0.5}}),
        FEEDBACK, 4.0)
    assert not out.dead_letters
    assert processor.store.learners[LID].stats["feedback"] == 1  # the learner learned it
    assert all(e.rounds == 0 for e in estimates(processor).values())


@pytest.mark.parametrize(("record", "detail"), [
    ({"family": "conformal", "algorithm": "sps", "params": {"alpha": 0.8},
      "candidates": {"other": {"algorithm": "sps", "params": {"alpha": 0.9}}}},
     "conformal decisions carry no distribution p"),
    ({"candidates": {"x": {"algorithm": "no_such_algorithm", "params": PARAMS}}},
     "candidate 'x'"),
    ({"candidates": {"x": {"algorithm": "epsilon_greedy", "params": {**PARAMS, "epsilon": 3}}}},
     "parameter 'epsilon' must be in [0, 1]"),
    ({"candidates": {"logged": UNIFORM}}, "names the logged policy itself"),
])
def test_a_bad_candidate_config_is_dead_lettered(record: dict[str, Any], detail: str) -> None:
    processor = Processor()
    out = processor.on_config(LID, config(**record), CONFIGS, 0.0)
    assert [d.reason for d in out.dead_letters] == ["invalid_config"]
    assert detail in out.dead_letters[0].detail
    assert LID not in processor.store.learners


def test_a_bad_candidate_leaves_a_running_learner_as_it_was() -> None:
    processor = started({"uniform": UNIFORM})
    Stream(processor, 2).run(20)
    out = processor.on_config(LID, config({"x": {"algorithm": "nope"}}), CONFIGS, 30.0)
    assert [d.reason for d in out.dead_letters] == ["invalid_config"]
    assert estimates(processor)["uniform"].rounds == 20


# ------------------------------------------------------------------ statistics
def assert_covered(found: dict[str, list[Estimate]], truth: float) -> None:
    """Each estimator's 95 % intervals over the seeds cover ``truth`` (all but two), and
    their mean is within three standard errors of it."""
    for name, values in found.items():
        seeds = len(values)
        covered = sum(e.ci_low <= truth <= e.ci_high for e in values)
        assert covered >= seeds - 2, (name, covered)
        mean = np.mean([e.value for e in values])
        spread = np.mean([e.ci_high - e.value for e in values]) / Z_95
        assert abs(mean - truth) < 3 * spread / math.sqrt(seeds), (name, mean, truth)


def test_live_estimates_of_a_fixed_policy_cover_its_known_value() -> None:
    """The uniform policy's value is known (minus the mean of the actions' mean losses); over
    seeded streams the live IPS, SNIPS and DR estimates are centred on it and their 95 %
    intervals cover it (a wrong weight, e.g. no clipping-aware mu or pi of the wrong action,
    moves IPS by far more than the tolerance)."""
    truth = -float(np.mean(BASE_LOSS))
    seeds, rounds = 12, 800
    found: dict[str, list[Estimate]] = {"ips": [], "snips": [], "dr": []}
    for seed in range(seeds):
        processor = started({"uniform": UNIFORM})
        # (event ids of its own per seed: the logging policy's draws are seeded by them)
        Stream(processor, 100 + seed).run(rounds, prefix=f"s{seed}-")
        uniform = estimates(processor)["uniform"]
        for name in found:
            found[name].append(getattr(uniform, name))
    assert_covered(found, truth)
    # the reward model makes DR no wider than IPS here
    assert (np.mean([e.ci_high - e.ci_low for e in found["dr"]])
            < np.mean([e.ci_high - e.ci_low for e in found["ips"]]))


# ------------------------------------------------------------------ failures and limits
def test_an_oversized_learner_with_candidates_is_refused() -> None:
    """The learner, its candidates and the reward model share one state budget
    (MAX_STATE_NUMBERS): each of these rls learners fits alone, two do not."""
    big = {"actions": 2, "feature_dim": 1600, "graph_kind": "bandit", "update": "rls"}
    processor = Processor()
    out = processor.on_config(LID, config(
        {"twin": {"algorithm": "squarecb_g", "params": big}},
        algorithm="squarecb_g", params=big), CONFIGS, 0.0)
    assert [d.reason for d in out.dead_letters] == ["invalid_config"]
    assert "with its candidates and reward model" in out.dead_letters[0].detail
    assert "over the limit of 10,000,000" in out.dead_letters[0].detail
    assert not processor.on_config(LID, config(algorithm="squarecb_g", params=big),
                                   CONFIGS, 0.0).dead_letters


@pytest.mark.parametrize(("candidate", "detail"), [
    ({"algorithm": "epsilon_greedy", "params": {**PARAMS, "feature_dim": 3}},
     "must be the learner's"),
    ({"algorithm": "epsilon_greedy", "params": {**PARAMS, "actions": 4}},
     "must be the learner's"),
    ({"algorithm": "epsilon_greedy", "params": {**PARAMS, "graph_kind": "full"}},
     "must be the learner's"),
])
def test_an_incompatible_candidate_is_refused(candidate: dict[str, Any], detail: str) -> None:
    out = Processor().on_config(LID, config({"x": candidate}), CONFIGS, 0.0)
    assert [d.reason for d in out.dead_letters] == ["invalid_config"]
    assert detail in out.dead_letters[0].detail


@pytest.mark.parametrize(("graph_kind", "actions"), [("cops_and_robbers", 3),
                                                    ("apple_tasting", 2), ("inventory", 3)])
def test_graph_aware_estimates_of_a_fixed_policy_cover_its_known_value(
        graph_kind: str, actions: int) -> None:
    """Graphs where playing an action does not reveal its own loss (cops and robbers: never;
    apple tasting: action 1 reveals nothing) or reveals others' too: every revealed loss is
    weighted by the logging policy's chance of revealing it, and the uniform candidate's
    estimates are centred on its known value (scoring only rounds that reveal the played
    action, as bandit OPE does, would score none, or a biased sample)."""
    truth = -float(np.mean(BASE_LOSS[:actions]))
    graph = named_graph(graph_kind, actions)
    params = {"actions": actions, "feature_dim": 2, "graph_kind": graph_kind}
    uniform = {"algorithm": "epsilon_greedy", "params": {**params, "epsilon": 1.0}}
    seeds, rounds = 10, 600
    found: dict[str, list[Estimate]] = {"ips": [], "snips": [], "dr": []}
    for seed in range(seeds):
        processor = Processor()
        assert not processor.on_config(LID, config({"uniform": uniform},
                                                   params={**params, "epsilon": 0.3}),
                                       CONFIGS, 0.0).dead_letters
        rng = np.random.default_rng(200 + seed)
        for i in range(rounds):
            x = rng.uniform(-1.0, 1.0, size=2)
            # (event ids differ by seed: the logged draws are a function of the event id)
            eid = f"s{seed}e{i}"
            out = processor.on_context(encode({"learner_id": LID, "event_id": eid,
                                               "features": x.tolist()}), CONTEXTS, 1.0)
            action = out.decisions[0].output["action"]
            losses = {str(j): float(BASE_LOSS[j] + SLOPES[j] @ x + rng.uniform(-0.05, 0.05))
                      for j in range(actions) if graph[action][j] > 0}
            assert not processor.on_feedback(encode({"learner_id": LID, "event_id": eid,
                                                     "losses": losses}),
                                             FEEDBACK, 1.0).dead_letters
        live = estimates(processor)
        assert live["uniform"].rounds == rounds
        for name in found:
            found[name].append(getattr(live["uniform"], name))
    assert_covered(found, truth)


class BrokenModel(RewardModel):
    """A reward model failing as no bad input would (a bug, memory): fault injection."""

    def __init__(self, model: RewardModel, fail_in: str) -> None:
        super().__init__(model.actions, model.dim)
        self.fail_in = fail_in

    def predict(self, inputs: list[float]) -> np.ndarray:
        if self.fail_in == "predict":
            raise MemoryError("predict")
        return super().predict(inputs)

    def update(self, inputs: list[float], action: int, reward: float) -> None:
        if self.fail_in == "update":
            raise AssertionError("update")
        super().update(inputs, action, reward)


def exploding(learner: Any, method: str) -> None:
    """Make ``learner``'s ``method`` raise a RuntimeError (a torch-style failure)."""
    def fail(self: Any, *args: Any) -> Any:
        raise RuntimeError(method)

    learner.__class__ = type("Exploding", (type(learner),), {method: fail})


def test_a_failing_evaluation_never_costs_the_live_decision_or_feedback() -> None:
    processor = started({"uniform": UNIFORM, "greedy": GREEDY})
    stream = Stream(processor, 5).run(20)
    entry = processor.store.learners[LID]
    ope = entry.ope
    assert ope is not None and ope.model is not None
    model = ope.model
    # the whole round's scoring fails when deciding: the decision is made, stored, published
    ope.model = BrokenModel(model, "predict")
    stream.run(1, start=20)
    record = processor.store.decision(f"{LID}/e20")
    assert record is not None and record.ope is None and record.settled_by is Settled.FEEDBACK
    assert entry.stats["decisions"] == 21 and entry.stats["feedback"] == 21
    assert ope.failures == 1
    # ... when its feedback comes: the feedback is applied and recorded
    ope.model = BrokenModel(model, "update")
    stream.run(1, start=21)
    record = processor.store.decision(f"{LID}/e21")
    assert record is not None and record.settled_by is Settled.FEEDBACK and record.ope is None
    assert entry.stats["feedback"] == 22 and ope.failures == 2
    ope.model = model
    # one candidate failing to decide is skipped (counted); the others are scored
    exploding(ope.candidates["uniform"].learner, "decide")
    stream.run(1, start=22)
    found = estimates(processor)
    assert found["uniform"].skipped == 1 and found["uniform"].rounds == 20
    assert found["greedy"].rounds == 21 and entry.stats["feedback"] == 23
    assert type(ope.candidates["uniform"].learner).__name__ != "Exploding"  # rolled back


def test_a_failed_candidate_learn_is_undone_to_just_before_it() -> None:
    """Not to the state last written to the state log (which would lose the rounds it
    learned since, and differ after a restart)."""
    processor = started({"greedy": GREEDY})
    stream = Stream(processor, 6).run(30)
    entry = processor.store.learners[LID]
    assert entry.ope is not None
    greedy = entry.ope.candidates["greedy"]
    assert greedy.learned_from > 0 and greedy.redo  # learned since its checkpoint
    for i in range(30, 400):  # a decision the candidate will learn from
        x = [0.1, 0.2]
        out = processor.on_context(encode({"learner_id": LID, "event_id": f"e{i}",
                                           "features": x}), CONTEXTS, stream.time)
        record = processor.store.decision(f"{LID}/e{i}")
        assert record is not None and record.ope is not None
        if record.ope.terms["greedy"].pending is not None:
            break
    before, learned = greedy.learner.to_state(), greedy.learned_from
    exploding(greedy.learner, "learn")
    action = out.decisions[0].output["action"]
    processor.on_feedback(encode({"learner_id": LID, "event_id": f"e{i}",
                                  "losses": {str(action): 0.5}}), FEEDBACK, stream.time)
    assert greedy.learner.to_state() == before and greedy.learned_from == learned
    assert estimates(processor)["greedy"].rounds == 31  # scored all the same


def test_feedback_keys_are_read_as_the_learner_reads_them() -> None:
    processor = started({"uniform": UNIFORM})
    out = processor.on_context(encode({"learner_id": LID, "event_id": "z", "features": [0, 0]}),
                               CONTEXTS, 1.0)
    action = out.decisions[0].output["action"]
    processor.on_feedback(encode({"learner_id": LID, "event_id": "z",
                                  "losses": {f"0{action}": 0.5}}), FEEDBACK, 1.0)
    assert processor.store.learners[LID].stats["feedback"] == 1
    assert estimates(processor)["uniform"].rounds == 1


def test_an_unrestorable_candidate_is_dropped_not_the_partition() -> None:
    processor = started({"uniform": UNIFORM, "greedy": GREEDY})
    Stream(processor, 8).run(10)
    entry = processor.store.learners[LID]
    data = entry.to_json()
    data["ope"]["candidates"]["greedy"]["state"] = {"garbage": True}
    restored = LearnerEntry.from_json(entry.config_json(), orjson.loads(orjson.dumps(data)))
    assert restored.ope is not None and list(restored.ope.candidates) == ["uniform"]
    assert restored.ope.candidates["uniform"].sums.n == 10


def test_a_learner_without_candidates_writes_its_config_as_before() -> None:
    processor = started(None)
    assert "candidates" not in processor.store.learners[LID].config_json()["config"]


def test_the_published_schema_enforces_candidate_names() -> None:
    schema = json.loads((Path(__file__).parents[2] / "schemas"
                         / "learner_config.schema.json").read_text())
    record = json.loads(config({"uniform": UNIFORM}))
    jsonschema.validate(record, schema)
    record["candidates"]["no spaces"] = UNIFORM
    with pytest.raises(jsonschema.ValidationError, match="does not match"):
        jsonschema.validate(record, schema)


# ------------------------------------------------------------------ candidate sets
def test_candidate_sets_are_scored_live_like_banditflow_ope() -> None:
    """A learner of candidate sets (action_features) and a uniform candidate: live IPS and
    SNIPS equal what ``banditflow ope`` computes from the same rounds; feedback keyed by
    candidate id reaches the estimators and the pair-feature reward model."""
    from banditflow.offline.candidate_task import CandidateTask

    task = CandidateTask(seed=4, rounds=300, max_candidates=8)
    form = {**task.params, "update": "rls"}
    processor = Processor()
    record = {"learner_id": LID, "family": "graph_cb", "algorithm": "epsilon_greedy",
              "params": {**form, "epsilon": 0.3}, "seed": 1, "feedback_timeout_s": 100.0,
              "candidates": {"uniform": {"algorithm": "epsilon_greedy",
                                         "params": {**form, "epsilon": 1.0}, "seed": 3}}}
    assert not processor.on_config(LID, encode(record), CONFIGS, 0.0).dead_letters
    rounds = []
    for t in range(task.rounds):
        request = task.request(t)
        event = {"learner_id": LID, "event_id": f"c{t}"}
        output = processor.on_context(encode({**event, **request.context}), CONTEXTS,
                                      float(t)).decisions[0].output
        losses = task.feedback(request, output["action"])
        processor.on_feedback(encode({**event, "losses": losses}), FEEDBACK, float(t))
        rounds.append(LoggedRound(LID, f"c{t}", action=output["action"],
                                  actions=len(output["p"]),
                                  propensity=output["p"][output["action"]], p=output["p"],
                                  reward=-losses[output["action_id"]],
                                  features=request.context["features"],
                                  candidates=request.context["actions"]))
    live = estimates(processor)
    offline = {p.policy: p for p in evaluate(rounds, [parse_policy("uniform"),
                                                      parse_policy("logged")],
                                             min_propensity=MIN_PROPENSITY).policies}
    for name in ("uniform", "logged"):
        assert live[name].rounds == task.rounds
        assert close(live[name].ips, offline[name].ips), name
        assert close(live[name].snips, offline[name].snips), name
    entry = processor.store.learners[LID]
    assert entry.ope is not None and entry.ope.model is not None
    assert entry.ope.model.actions == 1 and entry.ope.model.low < entry.ope.model.high
    # the reward model learnt something: DR narrower than IPS
    assert (live["uniform"].dr.ci_high - live["uniform"].dr.ci_low
            < live["uniform"].ips.ci_high - live["uniform"].ips.ci_low)
