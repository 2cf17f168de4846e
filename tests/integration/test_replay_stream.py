"""``banditflow replay`` on the real embedded broker: a live graph_cb run is archived, then
replayed into a fresh prefix served by a fresh worker, which decides every context and
applies every feedback; replaying the same archive again changes nothing (every context
re-emits its decision, every feedback is deduplicated, the learner's state stays as it was).

The replay is not faithful: the fresh worker may interleave contexts and feedback otherwise
than the live one did, and decide differently (hence full feedback here; bandit feedback for
an action the replayed decision did not play is refused as contradicting)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.streams.scrape import value

pytestmark = pytest.mark.integration

SOURCE, TARGET = run_prefix("replaysrc"), run_prefix("replaydst")
LID = "router"
EVENTS = 30


def banditflow(*args: str) -> None:
    finished = subprocess.run([sys.executable, "-m", "banditflow.streams.cli", *args],
                              capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr


def test_replay_into_a_fresh_prefix_and_again(
    broker, start_worker, producer: KafkaProducer, read_topic, wait_until, learner_entries,
    tmp_path,
) -> None:
    live = start_worker(SOURCE, partitions=2)

    def send(topic: str, body: dict[str, Any]) -> None:
        producer.send(topic, key=LID.encode(), value=json.dumps(body).encode())

    send(live.topics.learners, {
        "learner_id": LID, "family": "graph_cb", "algorithm": "squarecb_g", "seed": 5,
        "params": {"actions": 3, "feature_dim": 2, "graph_kind": "full", "update": "rls"},
    })
    rng = np.random.default_rng(2)
    for i in range(EVENTS):
        send(live.topics.contexts, {"learner_id": LID, "event_id": f"e{i}",
                                    "features": rng.normal(size=2).round(3).tolist()})
    producer.flush()
    # Full feedback (every action reveals every loss): it fits whatever action a replay
    # decides, so none of it is refused where the replayed decision differs from the live one.
    for decision in read_topic(live.topics.decisions).wait_for(lambda rs: len(rs) >= EVENTS):
        send(live.topics.feedback, {"learner_id": LID, "event_id": decision["event_id"],
                                    "losses": {str(a): round(0.2 * a, 2) for a in range(3)}})
    producer.flush()
    wait_until(lambda: value(live.metrics(), "banditflow_learner_feedback",
                             learner_id=LID) == EVENTS)
    archive = tmp_path / "live.archive.jsonl"
    banditflow("archive", "--bootstrap", broker.bootstrap, "--prefix", SOURCE, "--out",
               str(archive), "--from-beginning", "--until-idle", "3")

    fresh = start_worker(TARGET, partitions=2)
    replay = ("replay", str(archive), "--bootstrap", broker.bootstrap, "--prefix", TARGET,
              "--partitions", "2")

    def metric(name: str, **labels: str) -> float | None:
        return value(fresh.metrics(), name, **labels)

    banditflow(*replay)
    decisions = read_topic(fresh.topics.decisions)
    first = decisions.wait_for(lambda rs: len(rs) >= EVENTS)
    assert sorted(r["event_id"] for r in first) == sorted(f"e{i}" for i in range(EVENTS))
    assert not any(r["redelivered"] for r in first)
    wait_until(lambda: metric("banditflow_learner_feedback", learner_id=LID) == EVENTS)

    def learner_state() -> dict[str, Any] | None:
        entries = learner_entries(TARGET, LID)
        return entries[-1] if entries else None

    wait_until(lambda: (learner_state() or {}).get("stats", {}).get("feedback") == EVENTS)
    before = learner_state()

    banditflow(*replay)
    wait_until(lambda: metric("banditflow_records_total", topic=fresh.topics.feedback,
                              outcome="deduplicated") == EVENTS)
    again = decisions.wait_for(lambda rs: len(rs) >= 2 * EVENTS)[EVENTS:]
    assert all(r["redelivered"] for r in again)
    outputs = {r["event_id"]: r["output"] for r in first}
    assert all(r["output"] == outputs[r["event_id"]] for r in again)
    assert metric("banditflow_learner_feedback", learner_id=LID) == EVENTS
    assert metric("banditflow_learner_decisions", learner_id=LID) == EVENTS
    after = learner_state()
    assert after is not None and before is not None
    assert after["state"] == before["state"]
    # The config came again, equal: the learner kept its version.
    assert {r["learner_version"] for r in first + again} == {1}
