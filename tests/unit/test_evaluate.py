"""``banditflow evaluate`` on small generated logs: outputs, the engine, delays, losses."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from banditflow.learners.conformal.sps import SPS
from banditflow.offline.evaluation.conformal import ConformalTask, read_log
from banditflow.offline.evaluation.replay import Delay, replay
from banditflow.streams.cli import main


def write_log(path: Path, rounds: int, seed: int = 0, labels: int = 6) -> Path:
    rng = np.random.default_rng(seed)
    with open(path, "w") as out:
        for t in range(rounds):
            scores = rng.normal(size=labels)
            true = int(rng.integers(labels))
            scores[true] += 1.5
            out.write(
                json.dumps(
                    {
                        "event_id": f"r{t}",
                        "labels": [f"l{i}" for i in range(labels)],
                        "scores": scores.round(6).tolist(),
                        "true_label": f"l{true}",
                    }
                )
                + "\n"
            )
    return path


def test_single_run_writes_summary_trajectory_and_plot(tmp_path: Path) -> None:
    log = write_log(tmp_path / "log.jsonl", 3000)
    out = tmp_path / "out"
    assert (
        main(
            [
                "evaluate",
                "--family",
                "conformal",
                "--learner",
                "sps",
                "--log",
                str(log),
                "--alpha",
                "0.9",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert summary["rounds"] == len(rows) == 3000
    assert set(rows[0]) == {"t", "threshold", "covered", "set_size"}
    assert rows[0]["threshold"] is None  # -inf: the full set during burn-in
    assert summary["undercoverage_count"] == 0 and summary["coverage"] >= 0.9
    assert summary["coverage"] == pytest.approx(np.mean([r["covered"] for r in rows]))
    assert (out / "curves.png").stat().st_size > 10_000


def test_replay_equals_the_learner_run_directly(tmp_path: Path) -> None:
    """The processors add nothing to the algorithm: same thresholds round by round."""
    records = read_log(write_log(tmp_path / "log.jsonl", 2500, seed=1))
    rows, _, _ = replay(ConformalTask(records, 0.9), "sps", {"alpha": 0.9, "horizon": 2500})
    sps = SPS.from_params({"alpha": 0.9, "horizon": 2500})
    for record, row in zip(records, rows, strict=True):
        tau = sps.threshold
        assert row["threshold"] == (None if math.isinf(tau) else tau)
        s = record["scores"][record["labels"].index(record["true_label"])]
        sps.observe(s if s >= tau else None)


def test_tau_star_and_undercoverage_by_hand(tmp_path: Path) -> None:
    records = [
        {
            "event_id": str(i),
            "labels": ["a", "b"],
            "scores": [float(i), -5.0],
            "true_label": "a" if i < 9 else "zzz",
        }
        for i in range(10)
    ]
    task = ConformalTask(records, target_coverage=0.8)
    # True scores: -inf (absent label), 0..8. floor(10 * 0.2) = 2 -> tau* = the 3rd smallest.
    assert task.tau_star == 1.0
    assert task.miscoverage(1.0) == 0.2 and task.miscoverage(1.5) == 0.3
    rows = [{"threshold": t, "covered": True, "set_size": 1} for t in (None, 0.5, 1.0, 2.0)]
    assert task.summary(rows)["undercoverage_count"] == 1


@pytest.mark.parametrize("delay", ["geometric:0.05", "uniform:0:40"])
def test_delayed_and_lost_feedback_keep_coverage(tmp_path: Path, delay: str) -> None:
    records = read_log(write_log(tmp_path / "log.jsonl", 6000, seed=2))
    task = ConformalTask(records, 0.9)
    rows, summary, _ = replay(
        task,
        "sps",
        {"alpha": 0.9, "horizon": 6000},
        seed=3,
        delay=Delay.parse(delay, loss=0.03),
        feedback_timeout=200,
    )
    assert summary["feedback_lost"] > 100
    # Feedback later than the timeout is rejected, before or after its record was purged.
    assert set(summary["feedback_rejected"]) <= {"decision_expired", "feedback_without_decision"}
    assert summary["undercoverage_count"] == 0
    assert summary["coverage"] >= 0.9
    assert rows[-1]["threshold"] is not None  # it still learns


def test_comparison_over_learners_and_seeds(tmp_path: Path) -> None:
    log = write_log(tmp_path / "log.jsonl", 1500)
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "evaluate",
                "--family",
                "conformal",
                "--learner",
                "sps,greedy",
                "--seed",
                "0,1",
                "--shuffle",
                "--log",
                str(log),
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    table = (out / "comparison.md").read_text()
    assert "| sps | 2 |" in table and "| greedy | 2 |" in table
    runs = json.loads((out / "comparison.json").read_text())
    assert runs["greedy"][0]["undercoverage_count"] > 0
    first = [
        json.loads(x) for x in (out / "sps-seed0" / "trajectory.jsonl").read_text().splitlines()
    ]
    second = [
        json.loads(x) for x in (out / "sps-seed1" / "trajectory.jsonl").read_text().splitlines()
    ]
    assert [r["covered"] for r in first] != [r["covered"] for r in second]  # shuffled per seed
    assert (out / "comparison.png").exists()


@pytest.mark.parametrize("spec", ["exp:3", "uniform:5", "geometric:0", "fixed:-1"])
def test_bad_delay_specs_are_explained(spec: str) -> None:
    with pytest.raises(ValueError, match="delay"):
        Delay.parse(spec)
