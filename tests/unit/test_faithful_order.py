"""A faithful replay's order: decisions' learner_updates, contexts that wait for updates
(processors), and the plan that gates feedback (offline.faithful)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from banditflow.offline.faithful import FaithfulError, faithful_plan
from banditflow.processors import Processor, Source, StreamTimes
from banditflow.processors.store import PartitionStore

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
    p = Processor(PartitionStore(retention_s=100.0))
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
    # In their order; the copy re-emits its decision, as for a context sent again.
    assert [(d.event_id, d.learner_updates, d.redelivered) for d in released] == [
        ("e3", 2, False), ("e3", 2, True), ("e4", 2, False)]
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
    restarted = Processor(PartitionStore.load(values, retention_s=100.0))
    assert restarted.store.learners[LID].updates == 0
    out = restarted.on_feedback(feedback("e1"), FEEDBACK, 2.0)
    assert [d.event_id for d in out.decisions] == ["e2", "e3"]  # in their order
    assert dict(restarted.store.changes().puts)["l/" + LID]["updates"] == 1  # (logged)


def test_a_context_decided_at_its_deadline_with_its_early_feedback_is_decided_once(
    processor: Processor,
) -> None:
    # e2's feedback came first (held); e2 and e3 wait for two updates, of which one comes:
    # at their deadline e2 is decided, its feedback applied (the second update), which
    # releases e3 before the deadline loop reaches it.
    decide(processor, "e1", now=1.0)
    processor.on_feedback(feedback("e1"), FEEDBACK, 1.0)
    processor.on_feedback(feedback("e2"), FEEDBACK, 1.0)
    assert decide(processor, "e2", after=2, offset=2, now=1.0) == []
    assert decide(processor, "e3", after=2, offset=3, now=1.0) == []
    out = processor.on_tick(StreamTimes(learners=1.0, contexts=1.0, feedback=11.5))
    assert [(d.event_id, d.learner_updates) for d in out.decisions] == [("e2", 1), ("e3", 2)]
    assert not out.dead_letters and not processor.store.holds

def test_a_reconfigured_learner_decides_what_waited_and_a_deleted_one_dead_letters_it(
    processor: Processor,
) -> None:
    decide(processor, "e1")
    assert decide(processor, "e2", after=5) == []
    out = processor.on_config(LID, encode({"learner_id": LID, "family": "conformal",
                                           "algorithm": "sps",
                                           "params": {"alpha": 0.9, "horizon": 200}}),
                              CONFIGS, 2.0)
    assert [(d.event_id, d.learner_version) for d in out.decisions] == [("e2", 2)]
    assert decide(processor, "e3", after=5) == []
    out = processor.on_config(LID, None, CONFIGS, 3.0)
    assert [(d.event_id, d.reason) for d in out.dead_letters] == [("e3", "unknown_learner")]


def test_contexts_that_never_get_their_updates_leave_no_index_behind(
    processor: Processor,
) -> None:
    for i in range(5_000):  # hostile: far beyond any update count
        decide(processor, f"e{i}", after=2**53, offset=i, now=float(i) / 1000)
    out = processor.on_tick(StreamTimes(learners=20.0, contexts=20.0, feedback=20.0))
    assert len(out.decisions) == 5_000 and not processor.store.holds
    decide(processor, "last", after=2**53, offset=9_999)
    assert len(processor.store._awaiting_updates[LID]) <= 2 + 16  # compacted


def record(topic: str, event_id: str, offset: int = 0, **value: Any) -> dict[str, Any]:
    return {"topic": topic, "key": LID, "partition": 0, "offset": offset,
            "value": {"learner_id": LID, "event_id": event_id, **value}}


def decision(event_id: str, updates: int | None, version: int = 1) -> dict[str, Any]:
    value: dict[str, Any] = {"family": "conformal", "algorithm": "sps",
                             "learner_version": version, "output": {"set": [event_id]}}
    if updates is not None:
        value["learner_updates"] = updates
    return record("decisions", event_id, **value)


def context_of(event_id: str) -> dict[str, Any]:
    return record("contexts", event_id)


def fb(event_id: str, offset: int = 0, **payload: Any) -> dict[str, Any]:
    return record("feedback", event_id, offset, **payload)


def steps(records: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """The plan's steps as (topic, event, after)."""
    plan = faithful_plan(records)
    return [(records[s.index]["topic"][0], records[s.index]["value"]["event_id"], s.after)
            for s in plan.steps[LID]]


def test_the_plan_rebuilds_the_live_order_of_contexts_and_feedback() -> None:
    records = [
        context_of("a"), context_of("b"), context_of("c"), context_of("d"),
        decision("a", 0), decision("b", 0),
        fb("a", 1, label="y0"),               # update 1, after a and b
        fb("a", 2, label="y0"),               # a copy: no update
        fb("zz", 3, label="y0"),              # no decision: not replayed
        decision("c", 1),
        fb("d", 4, missed=True),              # before its decision: held live ...
        fb("b", 5, missed=True),              # ... so b's is update 2
        decision("d", 2),                     # ... and d's (update 3) right after d
    ]
    assert steps(records) == [
        ("c", "a", 0), ("c", "b", 0), ("f", "a", 2), ("c", "c", 1), ("f", "a", 3),
        ("f", "b", 3), ("c", "d", 2), ("f", "d", 4),
    ]
    plan = faithful_plan(records)
    assert plan.decisions[LID] == ["a", "b", "c", "d"] and plan.skipped == 1


def test_truth_and_contexts_sent_again_follow_their_decision() -> None:
    records = [context_of("a"), decision("a", 0), context_of("a"), record("truth", "a"),
               record("contexts", "other", learner_id="x")]
    plan = faithful_plan(records)
    assert plan.followers[(LID, "a")] == [2, 3] and plan.unplanned == [4]


def test_the_plan_refuses_what_it_cannot_keep_the_order_of() -> None:
    with pytest.raises(FaithfulError, match="carries no learner_updates"):
        faithful_plan([context_of("a"), decision("a", None)])
    with pytest.raises(FaithfulError, match="reconfigured, deleted or re-created"):
        faithful_plan([context_of("a"), decision("a", 0), context_of("b"),
                       decision("b", 0, version=2)])
    with pytest.raises(FaithfulError, match="reconfigured, deleted or re-created"):
        faithful_plan([context_of("a"), decision("a", 1), context_of("b"), decision("b", 0)])
    with pytest.raises(FaithfulError, match="reconfigured, deleted or re-created"):
        faithful_plan([context_of("a"), decision("a", 0),
                       {"topic": "learners", "key": LID, "value": None}])
    with pytest.raises(FaithfulError, match="no context in the archive"):
        faithful_plan([decision("a", 0)])
    with pytest.raises(FaithfulError, match="version 1"):
        faithful_plan([context_of("a"), decision("a", 0)], archive_version=1)
    # a settled by its timeout (an update), then b: no feedback explains it
    with pytest.raises(FaithfulError, match="settled by their timeout"):
        faithful_plan([context_of("a"), context_of("b"), decision("a", 0), decision("b", 1)])


def test_feedback_dead_lettered_live_is_no_update() -> None:
    records = [
        context_of("a"), context_of("b"), context_of("c"),
        decision("a", 0), decision("b", 0),
        fb("b", 7, label="nope"),  # refused live
        fb("a", 8, label="y0"),
        decision("c", 1),
        {"topic": "deadletter", "key": LID, "value": {
            "reason": "learner_rejected", "source_topic": "live.feedback",
            "partition": 0, "offset": 7, "learner_id": LID, "event_id": "b"}},
    ]
    assert steps(records) == [("c", "a", 0), ("c", "b", 0), ("f", "a", 2), ("c", "c", 1)]
    assert faithful_plan(records).skipped == 1
    # Counted as an update, the refused record would be the one c waits for, and a's
    # feedback would wait for c: the replay, where it is refused again, would stall.
    assert steps(records[:-1]) == [("c", "a", 0), ("c", "b", 0), ("f", "b", 2),
                                   ("c", "c", 1), ("f", "a", 3)]
