"""The learner contract, checked for every registered algorithm (river's ``check_estimator``
is the model): decisions valid for the family, the state round trip, determinism from
(state, event, seed), a rejected event changes nothing, and a state of bounded size.

Each family has a small synthetic environment here (contexts, and the feedback the
application would send for a decision); each algorithm a small configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pytest

from banditflow.learners.base import Learner
from banditflow.learners.registry import FAMILIES, algorithms, make_learner
from banditflow.processors import Processor, Source
from banditflow.processors.redo import LazyGenerator

JSON = dict[str, Any]
LABELS = ["a", "b", "c", "d", "e"]
ACTIONS, DIM, ARMS = 3, 2, 3


def conformal_context(rng: np.random.Generator) -> JSON:
    return {"labels": LABELS, "scores": rng.random(len(LABELS)).round(6).tolist()}


def conformal_feedback(output: JSON, rng: np.random.Generator) -> list[JSON]:
    label = LABELS[int(rng.integers(len(LABELS)))]
    return [{"label": label} if label in output["labels"] else {"missed": True}]


def conformal_valid(output: JSON) -> None:
    assert set(output["labels"]) <= set(LABELS) and output["set_size"] == len(output["labels"])


def features_context(rng: np.random.Generator) -> JSON:
    x = rng.normal(size=DIM)
    return {"features": (0.9 * x / max(1.0, float(np.linalg.norm(x)))).round(6).tolist()}


def graph_cb_feedback(output: JSON, rng: np.random.Generator) -> list[JSON]:
    return [{"losses": {str(output["action"]): round(float(rng.random()), 6)}}]


def graph_cb_valid(output: JSON) -> None:
    p = np.asarray(output["p"])
    assert p.shape == (ACTIONS,) and np.all(p >= 0) and abs(p.sum() - 1) < 1e-9
    assert 0 <= output["action"] < ACTIONS and p[output["action"]] > 0


def deferral_feedback(output: JSON, rng: np.random.Generator) -> list[JSON]:
    parts = [{"part": "model", "model_reward": round(float(rng.random()), 6)}]
    if output["defer"]:
        parts.append({"part": "human", "human_reward": round(float(rng.random()), 6),
                      "human_cost": round(0.1 * float(rng.random()), 6)})
    return parts


def deferral_valid(output: JSON) -> None:
    assert isinstance(output["defer"], bool)


def prob_graph_feedback(output: JSON, rng: np.random.Generator) -> list[JSON]:
    rewards = {str(arm): round(float(rng.random()), 6) for arm in range(ARMS)}
    return [{"rewards": rewards, "complete": True}]


def prob_graph_valid(output: JSON) -> None:
    assert 0 <= output["arm"] < ARMS


@dataclass(frozen=True)
class Family:
    context: Callable[[np.random.Generator], JSON]
    feedback: Callable[[JSON, np.random.Generator], list[JSON]]
    valid: Callable[[JSON], None]
    bad_context: JSON | None  # the learner itself refuses it (None: no context can be)
    params: JSON  # shared by its algorithms (each adds its own below)


EVERY_ARM = [[i, j, 1.0] for i in range(ARMS) for j in range(ARMS)]
FAMILY = {
    "conformal": Family(conformal_context, conformal_feedback, conformal_valid,
                        {"labels": [], "scores": []}, {"target_coverage": 0.8}),
    "graph_cb": Family(features_context, graph_cb_feedback, graph_cb_valid,
                       {"features": [0.1] * (DIM + 1)},
                       {"actions": ACTIONS, "feature_dim": DIM, "graph_kind": "full"}),
    "deferral": Family(features_context, deferral_feedback, deferral_valid,
                       {"features": [0.1] * (DIM + 1)},
                       {"dim": DIM, "budget": 0.3, "c_max": 0.1, "horizon": 200}),
    # a prob_graph context has no fields: one with any is refused before its learner
    "prob_graph": Family(lambda rng: {}, prob_graph_feedback, prob_graph_valid,
                         None, {"arms": ARMS, "edges": EVERY_ARM}),
}
# Algorithm parameters beyond the family's (required ones, and bounds on what they keep).
PARAMS: dict[tuple[str, str], JSON] = {
    ("conformal", "sps"): {"horizon": 1000, "max_values": 64},
    ("conformal", "greedy"): {"horizon": 1000},
    ("conformal", "aci"): {"window": 100},
    ("conformal", "etc"): {"horizon": 1000},
    ("conformal", "con_etc"): {"horizon": 1000},
    ("deferral", "best_reject"): {"model_theta": [0.1] * DIM, "threshold": 0.5},
    ("deferral", "neural_linear"): {"hidden_size": 4, "window": 50, "retrain_every": 50,
                                    "train_steps": 2, "batch_size": 16},
}
# Events the bounded-state check drives (the other checks use fewer).
EVENTS = 10_000
SLOW = {("deferral", "neural_linear"): 1_000}  # a network retrained every 50 events
ROUNDS = {("deferral", "neural_linear"): 100}  # before the round trip (300 for the others)


def every_algorithm() -> Iterator[tuple[str, str]]:
    for family in FAMILIES:
        for name in algorithms(family):
            yield family, name


CASES = list(every_algorithm())


def learner_of(family: str, name: str) -> Learner:
    return make_learner(family, name, {**FAMILY[family].params, **PARAMS.get((family, name), {})})


def drive(learner: Learner, family: str, events: int, seed: int, start: int = 0) -> list[JSON]:
    """``events`` rounds of decide and feedback (in order); the outputs."""
    spec = FAMILY[family]
    rng = np.random.default_rng(seed)
    outputs = []
    for i in range(start, start + events):
        decided = learner.decide(spec.context(rng), LazyGenerator(seed, f"e{i}"))
        spec.valid(decided.output)
        outputs.append(decided.output)
        for feedback in spec.feedback(decided.output, rng):
            learner.learn(decided.pending, feedback)
    return outputs


def state_json(learner: Learner) -> bytes:
    return orjson.dumps(learner.to_state(), option=orjson.OPT_SERIALIZE_NUMPY)


def test_every_family_has_algorithms_under_contract() -> None:
    assert {family for family, _ in CASES} == set(FAMILIES)
    assert set(PARAMS) <= set(CASES)


@pytest.mark.parametrize(("family", "name"), CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_round_trip_and_determinism(family: str, name: str) -> None:
    """Two learners fed the same events with the same seeds agree; a learner restored from
    its state decides and learns exactly as the original from then on."""
    first, second = learner_of(family, name), learner_of(family, name)
    rounds = ROUNDS.get((family, name), 300)
    assert drive(first, family, rounds, seed=1) == drive(second, family, rounds, seed=1)
    assert state_json(first) == state_json(second)
    params = {**FAMILY[family].params, **PARAMS.get((family, name), {})}
    state = json.loads(state_json(first))  # what the state log would hold
    restored = type(first).from_state(params, state)
    assert state_json(restored) == state_json(first)
    after = rounds // 3
    assert drive(restored, family, after, seed=2, start=rounds) == drive(
        first, family, after, seed=2, start=rounds
    )
    assert state_json(restored) == state_json(first)


@pytest.mark.parametrize(("family", "name"), CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_a_rejected_event_changes_nothing(family: str, name: str) -> None:
    """Through the processors: a context the learner refuses is dead-lettered and its
    learner is exactly as before; the next valid context is decided as if it never came."""
    spec = FAMILY[family]
    if spec.bad_context is None:
        pytest.skip(f"no {family} context reaches the learner to be refused")
    config = {"learner_id": "c", "family": family, "algorithm": name,
              "params": {**spec.params, **PARAMS.get((family, name), {})}}
    processors = [Processor(), Processor()]
    rng = np.random.default_rng(3)
    valid = [spec.context(rng) for _ in range(20)]
    for index, processor in enumerate(processors):
        processor.on_config("c", orjson.dumps(config), Source("learners"), 0.0)
        for i, context in enumerate(valid[:10]):
            processor.on_context(orjson.dumps({"learner_id": "c", "event_id": f"e{i}", **context}),
                                 Source("contexts"), 1.0)
        if index == 0:
            before = state_json(processor.store.learners["c"].learner)
            bad = orjson.dumps({"learner_id": "c", "event_id": "bad", **spec.bad_context})
            (dead,) = processor.on_context(bad, Source("contexts"), 1.0).dead_letters
            assert dead.reason == "learner_rejected", dead.detail
            assert state_json(processor.store.learners["c"].learner) == before
    outputs = [[processor.on_context(
        orjson.dumps({"learner_id": "c", "event_id": f"e{i}", **context}), Source("contexts"), 1.0,
    ).decisions[0].output for i, context in enumerate(valid[10:], start=10)]
        for processor in processors]
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize(("family", "name"), CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_state_stays_bounded(family: str, name: str) -> None:
    """The whole state goes into the state log at every commit: it must level off, not grow
    with the number of events (each configuration above bounds what its algorithm keeps)."""
    events = SLOW.get((family, name), EVENTS)
    learner = learner_of(family, name)
    drive(learner, family, events // 2, seed=4)
    half = len(state_json(learner))
    drive(learner, family, events // 2, seed=5, start=events // 2)
    full = len(state_json(learner))
    assert full <= 1.1 * half + 256, (half, full)
