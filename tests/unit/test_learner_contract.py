"""The learner contract, checked for every registered algorithm (river's ``check_estimator``
is the model): decisions valid for the family, the state round trip, determinism from
(state, event, seed), a rejected event changes nothing, and a state of bounded size.

Each family declares what the suite drives its algorithms with (its front door's
``contract``, as river's ``_unit_test_params``): a small synthetic environment (contexts, and
the feedback the application would send for a decision) and small configurations. The cases
are every registered family's algorithms when the suite is collected (a family registered by
a test runs it through :func:`check_learner_contract`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest

from banditflow.learners.base import Learner
from banditflow.learners.family import Contract
from banditflow.learners.registry import algorithms, families, family, make_learner
from banditflow.processors import Processor, Source
from banditflow.processors.redo import LazyGenerator

JSON = dict[str, Any]
# Events the bounded-state check drives (the other checks use fewer), unless the family's
# contract says fewer for a slow algorithm.
EVENTS = 10_000
ROUNDS = 300  # before the state round trip


def contract(family_name: str) -> Contract:
    declared = family(family_name).contract
    assert declared is not None, f"family {family_name!r} declares no contract parameters"
    return declared


def every_algorithm() -> Iterator[tuple[str, str]]:
    for name in families():
        for algorithm in algorithms(name):
            yield name, algorithm


def params_of(family_name: str, name: str) -> JSON:
    spec = contract(family_name)
    return {**spec.params, **spec.algorithm_params.get(name, {})}


def learner_of(family_name: str, name: str) -> Learner:
    return make_learner(family_name, name, params_of(family_name, name))


def drive(learner: Learner, family_name: str, events: int, seed: int,
          start: int = 0) -> list[JSON]:
    """``events`` rounds of decide and feedback (in order); the outputs."""
    spec = contract(family_name)
    rng = np.random.default_rng(seed)
    outputs = []
    for i in range(start, start + events):
        decided = learner.decide(spec.context(rng), LazyGenerator(seed, f"e{i}"))
        assert spec.valid(decided.output), decided.output
        outputs.append(decided.output)
        for feedback in spec.feedback(decided.output, rng):
            learner.learn(decided.pending, feedback)
    return outputs


def state_json(learner: Learner) -> bytes:
    return orjson.dumps(learner.to_state(), option=orjson.OPT_SERIALIZE_NUMPY)


CASES = list(every_algorithm())


def test_every_family_has_algorithms_under_contract() -> None:
    assert {family_name for family_name, _ in CASES} == set(families())
    for name in families():
        assert set(contract(name).algorithm_params) <= set(algorithms(name)), name


def check_round_trip_and_determinism(family: str, name: str) -> None:
    """Two learners fed the same events with the same seeds agree; a learner restored from
    its state decides and learns exactly as the original from then on."""
    first, second = learner_of(family, name), learner_of(family, name)
    rounds = contract(family).rounds.get(name, ROUNDS)
    assert drive(first, family, rounds, seed=1) == drive(second, family, rounds, seed=1)
    assert state_json(first) == state_json(second)
    state = json.loads(state_json(first))  # what the state log would hold
    restored = type(first).from_state(params_of(family, name), state)
    assert state_json(restored) == state_json(first)
    after = rounds // 3
    assert drive(restored, family, after, seed=2, start=rounds) == drive(
        first, family, after, seed=2, start=rounds
    )
    assert state_json(restored) == state_json(first)


def check_a_rejected_event_changes_nothing(family: str, name: str) -> None:
    """Through the processors: a context the learner refuses is dead-lettered and its
    learner is exactly as before; the next valid context is decided as if it never came."""
    spec = contract(family)
    assert spec.bad_context is not None
    config = {"learner_id": "c", "family": family, "algorithm": name,
              "params": params_of(family, name)}
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


def check_state_stays_bounded(family: str, name: str) -> None:
    """The whole state goes into the state log at every commit: it must level off, not grow
    with the number of events (each configuration bounds what its algorithm keeps)."""
    events = contract(family).events.get(name, EVENTS)
    learner = learner_of(family, name)
    drive(learner, family, events // 2, seed=4)
    half = len(state_json(learner))
    drive(learner, family, events // 2, seed=5, start=events // 2)
    full = len(state_json(learner))
    assert full <= 1.1 * half + 256, (half, full)


def check_learner_contract(family: str, name: str) -> None:
    """Every check of the suite, for one algorithm (a family registered at run time)."""
    check_round_trip_and_determinism(family, name)
    if contract(family).bad_context is not None:
        check_a_rejected_event_changes_nothing(family, name)
    check_state_stays_bounded(family, name)


@pytest.mark.parametrize(("family", "name"), CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_round_trip_and_determinism(family: str, name: str) -> None:
    check_round_trip_and_determinism(family, name)


@pytest.mark.parametrize(("family", "name"), CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_a_rejected_event_changes_nothing(family: str, name: str) -> None:
    if contract(family).bad_context is None:
        pytest.skip(f"no {family} context reaches the learner to be refused")
    check_a_rejected_event_changes_nothing(family, name)


@pytest.mark.parametrize(("family", "name"), CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_state_stays_bounded(family: str, name: str) -> None:
    check_state_stays_bounded(family, name)
