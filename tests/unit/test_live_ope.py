"""Live off-policy evaluation (issue 13 item 5): the streaming estimators, the processor's
candidates (scoring, learning, persistence, reconfiguration, rejection), and the estimates'
statistics on a synthetic stream with a known target value."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import orjson
import pytest

from offline.archive import LoggedRound
from offline.ope.estimators import doubly_robust, effective_sample_size, ips, snips
from offline.ope.evaluation import evaluate
from offline.ope.policies import parse_policy
from processors import Processor, Source, StreamTimes
from processors.ope import MIN_PROPENSITY, Z_95, Estimate, PolicyEstimates, Sums
from processors.records import Settled
from processors.store import PartitionStore

LID = "ads"
ACTIONS = 3
# Mean loss of each action (features are uniform on [-1, 1]^2, mean 0, so this is each
# action's expected loss); every loss stays in [0, 1], as graph_cb requires.
BASE_LOSS = np.array([0.25, 0.5, 0.8])
SLOPES = np.array([[0.1, -0.1], [0.0, 0.2], [-0.1, 0.0]])
PARAMS = {"actions": ACTIONS, "feature_dim": 2, "graph_kind": "bandit"}
UNIFORM = {"algorithm": "epsilon_greedy", "params": {**PARAMS, "epsilon": 1.0}, "seed": 3}
GREEDY = {"algorithm": "epsilon_greedy", "params": {**PARAMS, "epsilon": 0.1}, "seed": 4}
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

    def run(self, rounds: int, start: int = 0) -> Stream:
        for i in range(start, start + rounds):
            self.round(f"e{i}")
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
    live = Sums()
    for w, r, d, m in zip(weights, rewards, direct, modelled, strict=True):
        live.add(float(w), float(r), float(d + w * (r - m)))
    # live == the offline estimators on the same rounds, to float precision ...
    assert close(live.ips(), ips(weights, rewards))
    assert close(live.snips(), snips(weights, rewards))
    assert close(live.dr(), doubly_robust(weights, rewards, direct, modelled))
    assert math.isclose(live.ess(), effective_sample_size(weights), rel_tol=1e-12)
    # ... and both == the textbook formulas (SNIPS: the delta method's linearised terms)
    assert close(live.ips(), reference(weights * rewards))
    assert close(live.dr(), reference(direct + weights * (rewards - modelled)))
    value = float(np.sum(weights * rewards) / np.sum(weights))
    linearised = reference(weights * (rewards - value) / np.mean(weights))
    half = linearised.ci_high - linearised.value
    assert close(live.snips(), Estimate(value, value - half, value + half))
    assert live.ess() == pytest.approx(np.sum(weights) ** 2 / np.sum(weights**2))
    assert Sums.from_json(orjson.loads(orjson.dumps(live.to_json()))) == live


def test_empty_and_single_round_sums_are_undefined_or_unbounded() -> None:
    sums = Sums()
    assert math.isnan(sums.ips().value) and math.isnan(sums.snips().value) and sums.ess() == 0
    sums.add(2.0, 0.5, 1.0)
    assert sums.ips().value == 1.0 and sums.ips().ci_low == -math.inf
    assert sums.snips().value == 0.5 and sums.snips().ci_high == math.inf


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
        Stream(processor, 100 + seed).run(rounds)
        uniform = estimates(processor)["uniform"]
        for name in found:
            found[name].append(getattr(uniform, name))
    for name, values in found.items():
        covered = sum(e.ci_low <= truth <= e.ci_high for e in values)
        assert covered >= seeds - 2, (name, covered)
        mean = np.mean([e.value for e in values])
        spread = np.mean([e.ci_high - e.value for e in values]) / Z_95
        assert abs(mean - truth) < 3 * spread / math.sqrt(seeds), (name, mean, truth)
    # the reward model makes DR no wider than IPS here
    assert (np.mean([e.ci_high - e.ci_low for e in found["dr"]])
            < np.mean([e.ci_high - e.ci_low for e in found["ips"]]))
