"""``banditflow warm-start`` on the real embedded broker: a graph_cb oracle trained on an
archive of uniformly logged rounds, where action 2 always costs least, is published with
the learner's config; the worker's warm learner favours action 2 from its first decision,
while a cold learner of the same config starts uniform."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.offline.archive import write_archive
from banditflow.offline.formats import EventNumbers, imported_round

pytestmark = pytest.mark.integration

PREFIX = run_prefix("warmst")
PARAMS = {"actions": 3, "feature_dim": 2, "graph_kind": "bandit", "update": "rls",
          "gamma_schedule": "constant", "gamma": 50.0}
LOGGED = 300
CONTEXTS = 20


def test_warm_started_learner_starts_from_the_logged_rounds(
    broker, start_worker, producer: KafkaProducer, read_topic, tmp_path
) -> None:
    rng = np.random.default_rng(4)
    numbers = EventNumbers()
    records = []
    for i in range(LOGGED):
        action = int(rng.integers(3))
        loss = 0.0 if action == 2 else 1.0
        records += imported_round(numbers, "old", f"o{i}", None,
                                  {"features": rng.normal(size=2).round(3).tolist()},
                                  {"action": action, "p": [1 / 3] * 3}, loss, "test")
    archive = tmp_path / "logged.archive.jsonl"
    write_archive(archive, records, source="kafka")
    config = tmp_path / "warm.json"
    config.write_text(json.dumps({"learner_id": "warm", "family": "graph_cb",
                                  "algorithm": "squarecb_g", "seed": 1, "params": PARAMS}))

    worker = start_worker(PREFIX, partitions=2)
    finished = subprocess.run(
        [sys.executable, "-m", "banditflow.streams.cli", "warm-start", str(archive), "--config",
         str(config), "--bootstrap", broker.bootstrap, "--prefix", PREFIX, "--partitions", "2"],
        capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert f"trained on {LOGGED} logged rounds" in finished.stderr
    producer.send(worker.topics.learners, key=b"cold", value=json.dumps({
        "learner_id": "cold", "family": "graph_cb", "algorithm": "squarecb_g", "seed": 1,
        "params": PARAMS}).encode())
    for learner in ("warm", "cold"):
        for i in range(CONTEXTS):
            producer.send(worker.topics.contexts, key=learner.encode(), value=json.dumps({
                "learner_id": learner, "event_id": f"c{i}",
                "features": rng.normal(size=2).round(3).tolist()}).encode())
    producer.flush()

    decisions = read_topic(worker.topics.decisions).wait_for(
        lambda rs: len(rs) >= 2 * CONTEXTS)
    warm = [r["output"]["p"] for r in decisions if r["learner_id"] == "warm"]
    cold = [r["output"]["p"] for r in decisions if r["learner_id"] == "cold"]
    assert len(warm) == len(cold) == CONTEXTS
    assert min(p[2] for p in warm) > 0.9
    assert cold[0] == pytest.approx([1 / 3] * 3)
    configs = [r for r in read_topic(worker.topics.learners).wait_for(lambda rs: len(rs) >= 2)
               if r["learner_id"] == "warm"]
    assert configs[0]["params"]["initial_oracle"]["updates"] == LOGGED
