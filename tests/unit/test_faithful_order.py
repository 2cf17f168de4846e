"""A faithful replay's order: decisions' learner_updates, contexts that wait for updates
(processors), and the plan that gates feedback (offline.faithful)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from offline.faithful import FaithfulError, faithful_plan
from processors import Processor, Source, StreamTimes
from processors.store import PartitionStore

LID = "shop"
CONFIGS, CONTEXTS, FEEDBACK = Source("learners"), Source("contexts"), Source("feedback")


def encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode()


def context(event_id: str, after: int | None = None, offset: int = 0) -> tuple[bytes, Source]:
    body: dict[str, Any] = {"learner_id": LID, "event_id": event_id,
                            "labels": ["y0", "y1", "y2"], "scores": [0.9, 0.5, 0.1]}
    if after is not None:
        body["after_updates"] = after
    return encode(body), Source("contexts", 0, offset)


def feedback(event_id: str, label: str = "y0") -> bytes:
    return encode({"learner_id": LID, "event_id": event_id, "label": label})


@pytest.fixture
def processor() -> Processor:
    p = Processor(retention_s=100.0)
    p.on_config(LID, encode({"learner_id": LID, "family": "conformal", "algorithm": "sps",
                             "params": {"alpha": 0.8, "horizon": 200},
                             "feedback_timeout_s": 10.0}), CONFIGS, 0.0)
    return p


def decide(p: Processor, event_id: str, after: int | None = None, offset: int = 0,
           now: float = 1.0) -> list[Any]:
    return p.on_context(*context(event_id, after, offset), now).decisions


def test_decisions_carry_the_updates_their_learner_had_absorbed(processor: Processor) -> None:
    assert decide(processor, "e1")[0].learner_updates == 0
    decide(processor, "e2")
    processor.on_feedback(feedback("e1"), FEEDBACK, 2.0)
    assert decide(processor, "e3")[0].learner_updates == 1
    processor.on_tick(StreamTimes.at(20.0))  # e2 and e3 time out: two more updates
    assert decide(processor, "e4", now=20.0)[0].learner_updates == 3
    redelivered = decide(processor, "e3", now=20.0)[0]
    assert (redelivered.redelivered, redelivered.learner_updates) == (True, 1)


def test_a_context_waits_for_its_updates_and_is_decided_when_they_come(
    processor: Processor,
) -> None:
    decide(processor, "e1")
    decide(processor, "e2")
    assert decide(processor, "e3", after=2, offset=3) == []  # held
    assert decide(processor, "e4", after=2, offset=4) == []  # behind it
    assert decide(processor, "e3", after=2, offset=3) == []  # the same context again
    assert processor.on_feedback(feedback("e1"), FEEDBACK, 2.0).decisions == []
    released = processor.on_feedback(feedback("e2", "y1"), FEEDBACK, 2.0).decisions
    assert [(d.event_id, d.learner_updates) for d in released] == [("e3", 2), ("e4", 2)]
    assert decide(processor, "e5", after=1)[0].learner_updates == 2  # (past it: decided)


def test_an_undrained_wait_ends_at_the_feedback_timeout_on_the_feedback_stream(
    processor: Processor,
) -> None:
    decide(processor, "e1", now=1.0)
    assert decide(processor, "e2", after=1, now=1.0) == []
    # Not on the contexts' clock: the wait is for feedback.
    assert processor.on_tick(StreamTimes(learners=50.0, contexts=50.0, feedback=5.0)).decisions \
        == []
    out = processor.on_tick(StreamTimes(learners=50.0, contexts=50.0, feedback=11.0))
    # e1 expired at 11 (an update) and released e2, which waited for exactly that.
    assert [(d.event_id, d.learner_updates) for d in out.decisions] == [("e2", 1)]


def test_waiting_contexts_survive_a_restart_from_the_state_log(processor: Processor) -> None:
    decide(processor, "e1")
    decide(processor, "e2", after=1, offset=2)
    decide(processor, "e3", after=1, offset=3)
    values = [(key, orjson.dumps(value)) for key, value in processor.store.changes().puts]
    restarted = Processor(PartitionStore.load(values, retention_s=100.0), retention_s=100.0)
    assert restarted.store.learners[LID].updates == 0
    out = restarted.on_feedback(feedback("e1"), FEEDBACK, 2.0)
    assert [d.event_id for d in out.decisions] == ["e2", "e3"]  # in their order
    assert dict(restarted.store.changes().puts)["l/" + LID]["updates"] == 1  # (logged)


def decision(event_id: str, updates: int | None, version: int = 1) -> dict[str, Any]:
    value: dict[str, Any] = {"learner_id": LID, "event_id": event_id, "family": "conformal",
                             "algorithm": "sps", "learner_version": version,
                             "output": {"set": [event_id]}}
    if updates is not None:
        value["learner_updates"] = updates
    return {"topic": "decisions", "key": LID, "value": value}


def fb(event_id: str, **payload: Any) -> dict[str, Any]:
    return {"topic": "feedback", "key": LID,
            "value": {"learner_id": LID, "event_id": event_id, **payload}}


def test_the_plan_gates_each_applied_feedback_behind_the_decisions_before_it() -> None:
    records = [
        decision("a", 0), decision("b", 0),
        fb("a", label="y0"),                  # 1st update: after a, b
        fb("a", label="y0"),                  # a copy: no update
        fb("a", label="y1"),                  # contradicts: no update
        fb("zz", label="y0"),                 # no decision: not gated
        decision("c", 1),
        fb("b", missed=True),                 # 2nd update: after c
        decision("d", 2), decision("e", 2),
    ]
    plan = faithful_plan(records)
    assert plan.order[LID] == ["a", "b", "c", "d", "e"]
    assert [plan.after_updates[(LID, e)] for e in "abcde"] == [0, 0, 1, 2, 2]
    assert plan.feedback_gates == {2: (LID, 2), 3: (LID, 2), 4: (LID, 2), 7: (LID, 3)}


def test_the_plan_refuses_what_it_cannot_keep_the_order_of() -> None:
    with pytest.raises(FaithfulError, match="carries no learner_updates"):
        faithful_plan([decision("a", None)])
    with pytest.raises(FaithfulError, match="changed config"):
        faithful_plan([decision("a", 0), decision("b", 0, version=2)])


def test_feedback_dead_lettered_live_is_no_update() -> None:
    refused = {**fb("b", label="nope"), "partition": 0, "offset": 7}  # refused live
    applied = {**fb("a", label="y0"), "partition": 0, "offset": 8}
    records = [
        decision("a", 0), decision("b", 0), refused, applied, decision("c", 1),
        {"topic": "deadletter", "key": LID, "value": {
            "reason": "learner_rejected", "source_topic": "live.feedback",
            "partition": 0, "offset": 7, "learner_id": LID, "event_id": "b"}},
    ]
    assert faithful_plan(records).feedback_gates == {2: (LID, 2), 3: (LID, 2)}
    # Counted as an update, the refused record would hold a's feedback back until c is
    # decided, and c waits for that feedback: the replay would stall.
    assert faithful_plan(records[:-1]).feedback_gates == {2: (LID, 2), 3: (LID, 3)}
