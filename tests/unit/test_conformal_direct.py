"""The direct conformal engine gives exactly the processors' rows and summary.

``replay_direct`` skips the processors for speed; these tests hold it to
:func:`streams.evaluation.engine.replay` (the worker's processors) round by round, for every
conformal learner, under immediate, delayed and lost feedback with timeouts, on logs with
ragged candidate lists, true labels outside the candidates and tied scores.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from processors.stats import conformal_round_regret
from streams.cli import main
from streams.evaluation.conformal import ConformalTask, read_log, replay_direct
from streams.evaluation.engine import Delay, LogError, ReplayError, replay

ROUNDS = 1500
LEARNERS: dict[str, dict[str, Any]] = {
    "sps": {"horizon": ROUNDS},
    "sps anytime, bounded": {"schedule": "anytime", "max_values": 16},
    "greedy": {"horizon": ROUNDS},
    "aci": {"gamma": 0.05},  # large steps: the level leaves [0, 1] (empty and full sets)
    "dlr": {},
    "etc": {"horizon": ROUNDS},
    "con_etc": {"horizon": ROUNDS},
}
DELAYS = [("0", 0.0), ("geometric:0.1", 0.0), ("uniform:0:30", 0.15), ("poisson:60", 0.05)]


def records(seed: int, rounds: int = ROUNDS) -> list[dict[str, Any]]:
    """Ragged candidate lists (3 to 12 labels), some true labels outside them, scores
    rounded to 1 decimal so ties with the threshold are common."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(rounds):
        k = int(rng.integers(3, 13))
        scores = rng.normal(size=k).round(1)
        true = int(rng.integers(k + 2))  # k or k + 1: not a candidate
        if true < k:
            scores[true] += 1.0
        out.append(
            {
                "event_id": f"e{t}",
                "labels": list(range(k)),
                "scores": scores.tolist(),
                "true_label": true,
            }
        )
    return out


@pytest.mark.parametrize("name", list(LEARNERS))
@pytest.mark.parametrize(("delay", "loss"), DELAYS)
def test_direct_engine_equals_the_processors(name: str, delay: str, loss: float) -> None:
    algorithm = name.split()[0]
    params = {"alpha": 0.85, **LEARNERS[name]}
    task = ConformalTask(records(seed=len(name) + len(delay)), 0.85)
    spec = Delay.parse(delay, loss)
    expected = replay(task, algorithm, params, seed=5, delay=spec, feedback_timeout=40)
    got = replay_direct(task, algorithm, params, seed=5, delay=spec, feedback_timeout=40)
    assert got[0] == expected[0]  # every round's threshold, coverage and set size
    assert got[1] == expected[1]
    learner = expected[2]._learner("replay", expected[2].learners["replay"])
    assert got[2].to_state() == learner.to_state()  # the learners end in the same state
    if loss:
        assert got[1]["feedback_lost"] > 0
    if delay == "poisson:60":  # later than the timeout: both dead-letter reasons occur
        assert set(got[1]["feedback_rejected"]) == {
            "decision_expired",
            "feedback_without_decision",
        }


def test_set_sizes_and_coverage_follow_the_threshold() -> None:
    task = ConformalTask(records(seed=1, rounds=400), 0.9)
    rows, summary, _ = replay_direct(task, "sps", {"alpha": 0.9, "horizon": 400})
    for row, record in zip(rows, task.records, strict=True):
        tau = -math.inf if row["threshold"] is None else row["threshold"]
        chosen = [y for y, s in zip(record["labels"], record["scores"], strict=True) if s >= tau]
        assert row["set_size"] == len(chosen)
        assert row["covered"] == (record["true_label"] in chosen)
    assert summary["coverage"] == sum(row["covered"] for row in rows) / 400


def test_empty_sets_count_as_full_miscoverage() -> None:
    """ACI's level can exceed 1 (the empty set, threshold +inf, written null with set size
    0): such rounds have miscoverage 1, not 0, and count as undercoverage."""
    task = ConformalTask(records(seed=2, rounds=200), 0.9)
    rows = [{"t": 0, "threshold": None, "covered": False, "set_size": 0}]
    summary = task.summary(rows)
    assert summary["undercoverage_count"] == 1
    optimum = conformal_round_regret(float(task.miscoverage(task.tau_star)), 0.1)
    assert summary["regret"] == pytest.approx(10 * (1.0 - 0.1) - optimum)  # phi's lambda2 = 10


def test_bad_parameters_are_a_replay_error() -> None:
    task = ConformalTask(records(seed=3, rounds=10), 0.9)
    with pytest.raises(ReplayError, match="horizon"):
        replay_direct(task, "greedy", {"alpha": 0.9})


def test_read_log_rejects_what_the_processors_reject(tmp_path: Path) -> None:
    """The direct engine trusts read_log; a duplicate label is rejected there, as the
    processors' schema would."""
    log = tmp_path / "dup.jsonl"
    log.write_text(json.dumps({"labels": ["a", "a"], "scores": [1, 2], "true_label": "a"}) + "\n")
    with pytest.raises(LogError, match="duplicate labels"):
        read_log(log)
    log.write_text(json.dumps({"labels": [True, 1], "scores": [1, 2], "true_label": 1}) + "\n")
    with pytest.raises(LogError, match="strings or integers"):
        read_log(log)


def test_cli_direct_engine_and_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records(seed=4, rounds=300)))
    outputs = {}
    for engine in ("processors", "direct"):
        out = tmp_path / engine
        args = ["evaluate", "--family", "conformal", "--learner", "sps", "--log", str(log),
                "--engine", engine, "--delay", "geometric:0.2", "--out", str(out), "--quiet"]
        assert main(args) == 0
        outputs[engine] = json.loads((out / "summary.json").read_text())
        assert outputs[engine].pop("engine") == engine
    assert outputs["processors"] == outputs["direct"]
    capsys.readouterr()
    with pytest.raises(SystemExit, match="only for: conformal"):
        main(["evaluate", "--family", "prob_graph", "--learner", "ucb_n", "--engine", "direct",
              "--scenario", str(log), "--horizon", "10", "--out", str(tmp_path / "x")])
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(SystemExit, match="no rounds"):
        main(["evaluate", "--family", "conformal", "--learner", "sps", "--log",
              str(tmp_path / "empty.jsonl"), "--out", str(tmp_path / "y")])
