"""graph_cb end to end on the real embedded broker: a SquareCB.G learner created through the
learners topic, contexts with per-event feedback graphs, decisions carrying the action, the
full distribution p, gamma and dec, feedback with the revealed losses (some of it delivered
twice, one context delivered twice), and the learner's state and /metrics checked: every
revealed loss trained the oracle exactly once, and the progressive-validation loss is
exported."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.offline.evaluation.graph_cb import reveal
from banditflow.streams.scrape import samples, value

pytestmark = pytest.mark.integration

PREFIX = run_prefix("gcbstream")
LID = "router"
ACTIONS = 4
DIM = 3
EVENTS = 60
DUPLICATES = ("e3", "e17", "e42")


def random_graph(rng: np.random.Generator) -> list[list[float]]:
    """Self-loops, off-diagonal entries 0, 0.5 (a stochastic edge) or 1."""
    graph = rng.choice([0.0, 0.5, 1.0], size=(ACTIONS, ACTIONS))
    np.fill_diagonal(graph, 1.0)
    return graph.tolist()



def test_graph_cb_decisions_feedback_state_and_metrics(
    broker, start_worker, producer: KafkaProducer, read_topic, wait_until, learner_entries
) -> None:
    worker = start_worker(PREFIX, partitions=2)
    topics = worker.topics

    def send(topic: str, body: dict[str, Any]) -> None:
        producer.send(topic, key=LID.encode(), value=json.dumps(body).encode())

    send(topics.learners, {
        "learner_id": LID, "family": "graph_cb", "algorithm": "squarecb_g", "seed": 11,
        "params": {"actions": ACTIONS, "feature_dim": DIM, "update": "rls",
                   "gamma_schedule": "constant", "gamma": 10.0},
        "feedback_timeout_s": 600, "early_feedback_grace_s": 30,
    })
    rng = np.random.default_rng(5)
    weights = rng.uniform(-0.3, 0.3, size=(ACTIONS, DIM))
    events: dict[str, dict[str, Any]] = {}
    for i in range(EVENTS):
        x = rng.normal(size=DIM)
        events[f"e{i}"] = {
            "features": x.round(4).tolist(),
            "graph": random_graph(rng),
            "losses": np.clip(0.5 + weights @ x, 0.0, 1.0).round(4).tolist(),
        }
    for event_id, event in events.items():
        send(topics.contexts, {"learner_id": LID, "event_id": event_id,
                               "features": event["features"], "graph": event["graph"]})
    producer.flush()

    decisions = read_topic(topics.decisions)
    first = {
        r["event_id"]: r
        for r in decisions.wait_for(lambda rs: len({r["event_id"] for r in rs}) >= EVENTS, 45)
    }
    assert set(first) == set(events)
    revealed_total = 0
    played_losses = []
    feedback: dict[str, dict[str, Any]] = {}
    for event_id, event in events.items():
        output = first[event_id]["output"]
        assert set(output) == {"action", "p", "gamma", "dec"}
        assert len(output["p"]) == ACTIONS and sum(output["p"]) == pytest.approx(1.0)
        assert output["p"][output["action"]] > 0 and output["gamma"] == 10.0
        assert output["dec"] is not None and output["dec"] >= -1e-9
        graph = np.array(event["graph"])
        shown = reveal(graph, output["action"], rng)
        assert output["action"] in shown  # self-loops: the played loss is always seen
        revealed_total += len(shown)
        played_losses.append(event["losses"][output["action"]])
        feedback[event_id] = {"learner_id": LID, "event_id": event_id,
                              "losses": {str(j): event["losses"][j] for j in shown}}
        send(topics.feedback, feedback[event_id])
    producer.flush()

    def metric(name: str, **labels: str) -> float | None:
        return value(worker.metrics(), name, **labels)

    wait_until(lambda: metric("banditflow_learner_feedback", learner_id=LID) == EVENTS)
    # At-least-once delivery: the same feedback again, and one context again.
    for event_id in DUPLICATES:
        send(topics.feedback, feedback[event_id])
    send(topics.contexts, {"learner_id": LID, "event_id": "e5",
                           "features": events["e5"]["features"],
                           "graph": events["e5"]["graph"]})
    producer.flush()
    wait_until(lambda: metric("banditflow_records_total", topic=topics.feedback,
                              outcome="deduplicated") == len(DUPLICATES))
    again = decisions.wait_for(lambda rs: any(r.get("redelivered") for r in rs), 20)
    redelivered = [r for r in again if r.get("redelivered")]
    assert [r["event_id"] for r in redelivered] == ["e5"]
    assert redelivered[0]["output"] == first["e5"]["output"]

    # The learner's entry in the state log: one oracle update per revealed loss, no more.
    def final_entry() -> dict[str, Any] | None:
        entries = learner_entries(PREFIX, LID)
        return entries[-1] if entries else None

    wait_until(lambda: (final_entry() or {}).get("stats", {}).get("feedback") == EVENTS)
    entry = final_entry()
    assert entry is not None
    assert entry["state"]["oracle"]["updates"] == revealed_total
    assert entry["stats"]["revealed"] == revealed_total
    assert entry["stats"]["loss_observed"] == EVENTS
    assert entry["state"]["schedule"]["learn_calls"] == EVENTS

    text = worker.metrics()
    pv_loss = float(np.mean(played_losses))
    assert value(text, "banditflow_learner_decisions", learner_id=LID) == EVENTS
    assert value(text, "banditflow_learner_feedback", learner_id=LID) == EVENTS
    # Progressive-validation loss, exported once.
    assert value(text, "banditflow_learner_mean_loss", learner_id=LID) == pytest.approx(pv_loss)
    learner_values = {dict(labels)["name"] for (name, labels), _ in samples(text).items()
                      if name == "banditflow_learner_value" and ("learner_id", LID) in labels}
    assert "pv_loss" not in learner_values
    assert value(text, "banditflow_feedback_delay_seconds_count") == EVENTS
