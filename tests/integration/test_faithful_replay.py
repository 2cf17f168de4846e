"""``banditflow replay --faithful`` on the real embedded broker: live runs of three families
(simulated applications with delayed feedback, so that learning happens between decisions)
are archived, then replayed into a fresh prefix served by a fresh worker, which must make
the same decision (action, set, propensities: the whole output) for every event id."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict

import pytest
from conftest import run_prefix

from banditflow.streams.simulate import SimulationSettings, run_simulations

pytestmark = pytest.mark.integration

SOURCE, TARGET = run_prefix("faithsrc"), run_prefix("faithdst")
FAMILIES = ("conformal", "graph_cb", "deferral")
EVENTS = 250


def test_a_faithful_replay_reproduces_every_decision(
    broker, start_worker, read_topic, tmp_path,
) -> None:
    start_worker(SOURCE, partitions=2)
    reports = run_simulations([
        SimulationSettings(kafka=broker.connection, prefix=SOURCE, family=family,
                           events=EVENTS, window=40, delay_mean=0.05, seed=3, timeout=90,
                           workdir=tmp_path / "logs")
        for family in FAMILIES
    ])
    for report in reports:
        assert not report.timed_out and report.decided == EVENTS, report.render()
    archive = tmp_path / "live.archive.jsonl"
    archived = run("archive", "--bootstrap", broker.bootstrap, "--prefix", SOURCE, "--out",
                   str(archive), "--from-beginning", "--until-idle", "3")
    contexts = sum('"topic":"contexts"' in line for line in archive.read_text().splitlines())
    assert contexts == len(FAMILIES) * EVENTS, archived.stderr  # the archive is complete
    live = [r for r in read_topic(f"{SOURCE}.decisions").wait_for(
        lambda rs: len(rs) >= len(FAMILIES) * EVENTS)]
    # Learning happened between decisions, interleaved with them: each learner decided
    # after some but not all of its feedback, so the order matters.
    updates = defaultdict(list)
    for decision in live:
        updates[decision["learner_id"]].append(decision["learner_updates"])
    assert len(updates) == len(FAMILIES)
    for counts in updates.values():
        assert counts == sorted(counts) and 0 < counts[len(counts) // 2] < counts[-1]

    start_worker(TARGET, partitions=2)
    finished = run("replay", str(archive), "--bootstrap", broker.bootstrap, "--prefix", TARGET,
                   "--partitions", "2", "--faithful", "--decision-wait", "30",
                   context=archived.stderr)
    total = len(FAMILIES) * EVENTS
    assert f"faithful: {total:,} of {total:,} decisions reproduced" in finished.stderr

    replayed = read_topic(f"{TARGET}.decisions").wait_for(lambda rs: len(rs) >= total)
    first = {(r["learner_id"], r["event_id"]): r for r in live}
    assert len(replayed) == total and not any(r["redelivered"] for r in replayed)
    for decision in replayed:
        original = first[(decision["learner_id"], decision["event_id"])]
        assert (decision["output"], decision["learner_updates"]) == (
            original["output"], original["learner_updates"])


def run(*args: str, context: str = "") -> subprocess.CompletedProcess[str]:
    """Run a banditflow command; on failure show its stderr (and ``context``: the archive's
    stderr for the replay)."""
    finished = subprocess.run([sys.executable, "-m", "banditflow.streams.cli", *args],
                              capture_output=True, text=True, timeout=180)
    assert finished.returncode == 0, context[-3000:] + finished.stderr[-3000:]
    return finished
