"""What a replay reports (issue 29): the records the workers dead-lettered while it ran, per
topic and reason, read from the dead-letter topic; and, with --learner-id, which version of
the learner it replayed and which it left out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_prefix

from banditflow.offline.archive import write_archive

pytestmark = pytest.mark.integration

LID = "versions"
PARAMS = {"actions": 3, "feature_dim": 2, "graph_kind": "bandit"}


def record(topic: str, offset: int, value: dict[str, Any]) -> dict[str, Any]:
    return {"topic": topic, "partition": 0, "offset": offset, "timestamp": None,
            "key": LID, "value": value}


def archive(path: Path) -> Path:
    """Two versions of one graph_cb learner; version 2's records include 2 contexts carrying
    another family's fields (learner_rejected) and 5 feedbacks revealing every action's loss,
    which bandit feedback cannot (contradicting_feedback)."""
    records = [record("learners", 0, {"learner_id": LID, "family": "graph_cb",
                                      "algorithm": "epsilon_greedy", "params": PARAMS})]
    records.append(record("contexts", 0, {"learner_id": LID, "event_id": "old",
                                          "features": [0.0, 1.0]}))
    records.append(record("decisions", 0, {"learner_id": LID, "event_id": "old",
                                           "family": "graph_cb", "learner_version": 1,
                                           "output": {"action": 0, "p": [1.0, 0.0, 0.0]}}))
    records.append(record("learners", 1, {"learner_id": LID, "family": "graph_cb",
                                          "algorithm": "squarecb_g", "params": PARAMS}))
    for i in range(10):
        event = f"e{i}"
        context: dict[str, Any] = {"learner_id": LID, "event_id": event, "features": [0.1 * i, 1.0]}
        if i < 2:
            context = {"learner_id": LID, "event_id": event, "labels": ["a"], "scores": [1.0]}
        records.append(record("contexts", 1 + i, context))
        records.append(record("decisions", 1 + i, {
            "learner_id": LID, "event_id": event, "family": "graph_cb", "learner_version": 2,
            "output": {"action": 0, "p": [1 / 3] * 3}}))
        if i >= 5:
            records.append(record("feedback", i, {"learner_id": LID, "event_id": event,
                                                  "losses": {"0": 0.5, "1": 0.5, "2": 0.5}}))
    write_archive(path, records, source="kafka")
    return path


def test_replay_reports_dead_letters_per_reason_and_the_version_left_out(
    broker, start_worker, tmp_path: Path
) -> None:
    worker = start_worker(run_prefix("report"), partitions=2)
    replayed = subprocess.run(
        [sys.executable, "-m", "banditflow.streams.cli", "replay", str(archive(tmp_path / "a")),
         "--bootstrap", broker.bootstrap, "--prefix", worker.prefix, "--partitions", "2",
         "--learner-id", LID], capture_output=True, text=True, timeout=120)
    assert replayed.returncode == 0, replayed.stderr
    lines = replayed.stderr.splitlines()
    assert lines[0] == (f"learner {LID!r}: version 2 (10 decisions); left out version 1 "
                        "(1 decision) (--learner-version chooses)")
    assert lines[1].startswith("replayed 16 records (1 learners, 10 contexts, 5 feedback) in ")
    assert lines[2].startswith("the workers dead-lettered 7 of the replayed records: "
                               "5 feedback contradicting_feedback, 2 contexts learner_rejected ")


def test_a_reconfigured_learner_replays_faithfully_by_version(
    broker, start_worker, read_topic, tmp_path: Path
) -> None:
    """Issue 29: an archive of a learner reconfigured under the same id made `replay
    --faithful` refuse; its latest version replays faithfully on its own."""
    from banditflow.streams.simulate import SimulationSettings, run_simulations

    source, target, lid, events = run_prefix("faithver"), run_prefix("faithverdst"), "twice", 120
    start_worker(source, partitions=2)
    for algorithm, count in (("epsilon_greedy", 30), ("squarecb_g", events)):
        (report,) = run_simulations([SimulationSettings(
            kafka=broker.connection, prefix=source, family="graph_cb", learner_id=lid,
            algorithm=algorithm, events=count, window=20, delay_mean=0.05, seed=3, timeout=90,
            workdir=tmp_path / algorithm)])
        assert not report.timed_out and report.decided == count, report.render()
    path = tmp_path / "live.jsonl"

    def banditflow(*args: str) -> subprocess.CompletedProcess[str]:
        finished = subprocess.run([sys.executable, "-m", "banditflow.streams.cli", *args],
                                  capture_output=True, text=True, timeout=180)
        assert finished.returncode == 0, finished.stderr[-3000:]
        return finished

    archived = banditflow("archive", "--bootstrap", broker.bootstrap, "--prefix", source,
                          "--out", str(path), "--from-beginning", "--until-idle", "3",
                          "--learner-id", lid)
    assert (f"learner {lid!r}: version 2 ({events} decisions); left out version 1 "
            "(30 decisions)") in archived.stderr
    start_worker(target, partitions=2)
    replayed = banditflow("replay", str(path), "--bootstrap", broker.bootstrap, "--prefix",
                          target, "--partitions", "2", "--faithful", "--learner-id", lid,
                          "--decision-wait", "30")
    assert f"faithful: {events} of {events} decisions reproduced" in replayed.stderr
    assert "the workers dead-lettered none of the replayed records" in replayed.stderr
