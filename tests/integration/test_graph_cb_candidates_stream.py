"""graph_cb candidate sets end to end on the real embedded broker: a learner configured with
``action_features`` decides over each context's own candidates (decisions name the index,
the action id and p over the candidates), learns from feedback keyed by candidate id, and
every malformed candidate set (duplicate ids, too many candidates, ragged or non-finite
features, a graph of the wrong size) and a loss for a candidate the graph did not reveal is
dead-lettered with its reason, leaving the learner's state untouched."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.offline.candidate_task import CandidateTask

pytestmark = pytest.mark.integration

PREFIX = run_prefix("gcbcand")
LID = "shelf"
EVENTS = 40


def test_candidate_sets_decisions_feedback_and_dead_letters(
    broker, start_worker, producer: KafkaProducer, read_topic, wait_until, learner_entries
) -> None:
    worker = start_worker(PREFIX, partitions=2)
    topics = worker.topics
    task = CandidateTask(seed=6, rounds=EVENTS, max_candidates=12)

    def send(topic: str, body: dict[str, Any] | str) -> None:
        raw = body if isinstance(body, str) else json.dumps(body)
        producer.send(topic, key=LID.encode(), value=raw.encode())

    send(topics.learners, {
        "learner_id": LID, "family": "graph_cb", "algorithm": "squarecb_g", "seed": 2,
        "params": {**task.params, "update": "rls"},
        "feedback_timeout_s": 600, "early_feedback_grace_s": 30,
    })
    requests = {f"c{t}": task.request(t) for t in range(EVENTS)}
    for event_id, request in requests.items():
        send(topics.contexts, {"learner_id": LID, "event_id": event_id, **request.context})
    item = {"features": [0.1] * task.item_dim}
    user = [0.0] * task.user_dim
    bad_contexts = {
        "dup": {"features": user, "actions": [{"id": "x", **item}, {"id": "x", **item}]},
        "many": {"features": user, "actions": [{"id": f"i{i}", **item} for i in range(13)]},
        "ragged": {"features": user, "actions": [{"id": "x", **item},
                                                 {"id": "y", "features": [0.1]}]},
        "graph": {"features": user, "actions": [{"id": "x", **item}, {"id": "y", **item}],
                  "graph": [[1.0]]},
    }
    for event_id, context in bad_contexts.items():
        send(topics.contexts, {"learner_id": LID, "event_id": event_id, **context})
    # JSON cannot carry NaN; a client that writes it anyway (Python's json does) is refused.
    send(topics.contexts, '{"learner_id": "shelf", "event_id": "nan", "features": [0, 0, 0, '
                          '0, 0], "actions": [{"id": "x", "features": [NaN, 0, 0, 0, 0]}]}')
    producer.flush()

    decisions = read_topic(topics.decisions)
    first = {r["event_id"]: r for r in decisions.wait_for(
        lambda rs: len({r["event_id"] for r in rs}) >= EVENTS, 45)}
    assert set(first) == set(requests)
    # First, for c0, a loss of a candidate the bandit graph did not reveal: refused, and the
    # decision still waits for its feedback.
    played = first["c0"]["output"]["action"]
    other = next(a["id"] for j, a in enumerate(requests["c0"].context["actions"]) if j != played)
    send(topics.feedback, {"learner_id": LID, "event_id": "c0", "losses": {other: 0.0}})
    for event_id, request in requests.items():
        output = first[event_id]["output"]
        ids = [a["id"] for a in request.context["actions"]]
        assert set(output) == {"action", "action_id", "p", "gamma", "dec"}
        assert len(output["p"]) == len(ids) and sum(output["p"]) == pytest.approx(1.0)
        assert output["action_id"] == ids[output["action"]]
        send(topics.feedback, {"learner_id": LID, "event_id": event_id,
                               "losses": task.feedback(request, output["action"])})
    producer.flush()

    deadletters = read_topic(topics.deadletter)
    # (a record that fails validation is dead-lettered without its event id: found by its raw
    # bytes)
    dead = {r.get("event_id") or ("nan" if "NaN" in r["raw"] else None): r
            for r in deadletters.wait_for(lambda rs: len(rs) >= len(bad_contexts) + 2, 45)}
    assert dead["dup"]["reason"] == "learner_rejected"
    assert "unique within an event; repeated: x" in dead["dup"]["detail"]
    assert "more than the learner's max_actions 12" in dead["many"]["detail"]
    assert "actions[1].features must be 5 numbers" in dead["ragged"]["detail"]
    assert "the feedback graph has 1 actions, expected 2" in dead["graph"]["detail"]
    assert dead["nan"]["reason"] == "non_finite"
    assert "actions.0.features.0" in dead["nan"]["detail"]
    assert dead["c0"]["reason"] == "contradicting_feedback"
    assert "cannot reveal" in dead["c0"]["detail"]

    def final_entry() -> dict[str, Any]:
        entries = learner_entries(PREFIX, LID)
        return entries[-1] if entries else {}

    wait_until(lambda: final_entry().get("stats", {}).get("feedback") == EVENTS)
    entry = final_entry()
    assert entry["state"]["oracle"]["updates"] == EVENTS  # one revealed loss each, no more
    assert entry["state"]["schedule"]["decisions"] == EVENTS
