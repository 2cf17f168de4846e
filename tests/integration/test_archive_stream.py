"""``banditflow archive`` on the real embedded broker: a worker decides graph_cb contexts,
the application answers most of them (one feedback delivered twice, some never answered),
then the archive of the prefix validates against the published archive schema and its
joined view holds every decision once, with the propensity of the played action, the
reward the feedback revealed for it, and the context's features; ``banditflow ope`` scores
the answered rounds of it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import jsonschema
import numpy as np
import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.offline.archive import joined_rounds, read_archive
from banditflow.schemas.archive import SCHEMA_PATH

pytestmark = pytest.mark.integration

PREFIX = run_prefix("archived")
LID = "router"
ACTIONS = 3
DIM = 2
EVENTS = 40
UNANSWERED = {"e5", "e6"}


def test_archive_of_a_graph_cb_run_joins_contexts_decisions_and_feedback(
    broker, start_worker, producer: KafkaProducer, read_topic, tmp_path
) -> None:
    worker = start_worker(PREFIX, partitions=2)
    topics = worker.topics

    def send(topic: str, body: dict[str, Any]) -> None:
        producer.send(topic, key=LID.encode(), value=json.dumps(body).encode())

    send(topics.learners, {
        "learner_id": LID, "family": "graph_cb", "algorithm": "squarecb_g", "seed": 3,
        "params": {"actions": ACTIONS, "feature_dim": DIM, "graph_kind": "bandit",
                   "gamma_schedule": "constant", "gamma": 5.0},
    })
    rng = np.random.default_rng(1)
    features = {f"e{i}": rng.normal(size=DIM).round(3).tolist() for i in range(EVENTS)}
    for event_id, x in features.items():
        send(topics.contexts, {"learner_id": LID, "event_id": event_id, "features": x})
    producer.flush()
    decisions = {
        r["event_id"]: r
        for r in read_topic(topics.decisions).wait_for(lambda rs: len(rs) >= EVENTS, 60)
    }
    losses = {}
    for event_id, decision in decisions.items():
        if event_id in UNANSWERED:
            continue
        action = decision["output"]["action"]
        losses[event_id] = round(0.1 * action + 0.01 * int(event_id[1:]), 4)
        send(topics.feedback, {"learner_id": LID, "event_id": event_id,
                               "losses": {str(action): losses[event_id]}})
    send(topics.feedback, {"learner_id": LID, "event_id": "e0",
                           "losses": {str(decisions["e0"]["output"]["action"]): losses["e0"]}})
    send(topics.feedback, {"learner_id": LID, "event_id": "e0"})  # carries nothing: dead
    producer.flush()

    out = tmp_path / "run.archive.jsonl"
    finished = subprocess.run(
        [sys.executable, "-m", "banditflow.streams.cli", "archive", "--bootstrap", broker.bootstrap,
         "--prefix", PREFIX, "--out", str(out), "--from-beginning", "--until-idle", "3"],
        capture_output=True, text=True, timeout=120,
    )
    assert finished.returncode == 0, finished.stderr

    schema = json.loads(SCHEMA_PATH.read_text())
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    for line in lines:
        jsonschema.validate(line, schema)
    header, records = read_archive(out)
    assert header.source == "kafka" and header.prefix == PREFIX
    by_topic: dict[str, int] = {}
    for record in records:
        by_topic[record["topic"]] = by_topic.get(record["topic"], 0) + 1
    assert by_topic["learners"] == 1 and by_topic["contexts"] == EVENTS
    assert by_topic["decisions"] == EVENTS and by_topic["feedback"] == EVENTS
    assert by_topic["deadletter"] == 1

    rounds = {r.event_id: r for r in joined_rounds(records)}
    assert set(rounds) == set(features)
    for event_id, logged in rounds.items():
        output = decisions[event_id]["output"]
        assert logged.action == output["action"]
        assert logged.p == output["p"] and logged.actions == ACTIONS
        assert logged.propensity == output["p"][output["action"]] > 0
        assert logged.features == features[event_id]
        expected = None if event_id in UNANSWERED else -losses[event_id]
        assert logged.reward == expected

    # The same archive through `banditflow ope`: the answered rounds are scored, and the
    # logging policy's estimate is their mean reward (every weight is 1).
    scored = subprocess.run(
        [sys.executable, "-m", "banditflow.streams.cli", "ope", str(out), "--policy", "logged",
         "--policy", "uniform", "--json"], capture_output=True, text=True, timeout=120)
    assert scored.returncode == 0, scored.stderr
    report = json.loads(scored.stdout)
    assert report["rounds"] == EVENTS - len(UNANSWERED)
    logged, uniform = report["policies"]
    assert logged["ips"]["value"] == pytest.approx(-np.mean(list(losses.values())))
    assert logged["ess"] == pytest.approx(EVENTS - len(UNANSWERED))
    assert uniform["policy"] == "uniform" and uniform["dr"]["ci_low"] <= uniform["dr"]["value"]
