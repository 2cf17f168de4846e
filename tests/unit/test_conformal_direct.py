"""The direct conformal engine gives exactly the processors' rows and summary.

``replay_direct`` skips the processors for speed; these tests hold it to
:func:`banditflow.offline.evaluation.replay.replay` (the worker's processors) round by round, for
every
conformal learner, under immediate, delayed and lost feedback with timeouts (including
feedback still arriving after the last decision timed out), on logs with ragged candidate
lists, tied scores, and true labels that are sometimes not candidates.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from banditflow.learners.conformal.regret import conformal_round_regret
from banditflow.offline.evaluation.conformal import ConformalTask, read_log, replay_direct
from banditflow.offline.evaluation.replay import Delay, LogError, ReplayError, replay
from banditflow.streams.cli import main

ROUNDS = 1500
LEARNERS: dict[str, dict[str, Any]] = {
    "sps": {"horizon": ROUNDS},
    "sps anytime, bounded": {"schedule": "anytime", "max_values": 16},
    "greedy": {"horizon": ROUNDS},
    "aci": {"gamma": 0.2},  # large steps: the level leaves [0, 1] (empty and full sets)
    "dlr": {},
    "etc": {"horizon": ROUNDS},
    "con_etc": {"horizon": ROUNDS, "explore_rounds": 500},  # a DKW width below 1 - alpha
}
# (delay, loss, timeout): the last one delivers feedback after the closing timeout sweep.
DELAYS = [
    ("0", 0.0, 40.0),
    ("geometric:0.1", 0.0, 40.0),
    ("uniform:0:30", 0.15, 40.0),
    ("poisson:60", 0.05, 40.0),
    ("fixed:100", 0.1, 20.0),
]


def records(seed: int, rounds: int = ROUNDS, absent: float = 0.0) -> list[dict[str, Any]]:
    """Ragged candidate lists (3 to 12 labels) with scores rounded to 1 decimal (ties with
    the threshold are common); the true label is not a candidate with probability
    ``absent``."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(rounds):
        k = int(rng.integers(3, 13))
        scores = rng.normal(size=k).round(1)
        true = int(rng.integers(k))
        scores[true] += 1.0
        if rng.random() < absent:
            true = k  # not a candidate
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
@pytest.mark.parametrize(("delay", "loss", "timeout"), DELAYS)
@pytest.mark.parametrize("absent", [0.0, 0.05])
def test_direct_engine_equals_the_processors(
    name: str, delay: str, loss: float, timeout: float, absent: float
) -> None:
    algorithm = name.split()[0]
    alpha = 0.7
    params = {"alpha": alpha, **LEARNERS[name]}
    task = ConformalTask(records(len(name) + len(delay), absent=absent), alpha)
    spec = Delay.parse(delay, loss)
    expected = replay(task, algorithm, params, seed=5, delay=spec, feedback_timeout=timeout)
    got = replay_direct(task, algorithm, params, seed=5, delay=spec, feedback_timeout=timeout)
    if not loss:  # the comparison is meaningful: thresholds move and sets vary in size
        assert sum(row["threshold"] is not None for row in got[0]) > ROUNDS // 3
        assert len({row["set_size"] for row in got[0]}) >= 3
    assert got[0] == expected[0]  # every round's threshold, coverage and set size
    assert got[1] == expected[1]
    learner = expected[2].store.learners["replay"].learner
    assert got[2].to_state() == learner.to_state()  # the learners end in the same state
    if loss:
        assert got[1]["feedback_lost"] > 0
    if delay in ("poisson:60", "fixed:100"):  # later than the timeout: both reasons occur
        assert set(got[1]["feedback_rejected"]) == {
            "decision_expired",
            "feedback_without_decision",
        }


def test_aci_empty_sets_replay_identically() -> None:
    """ACI's level above 1 decides the empty set (threshold +inf, written null with set size
    0): both engines agree on those rounds too."""
    task = ConformalTask(records(7, rounds=600), 0.3)
    params = {"alpha": 0.3, "gamma": 0.5}
    got = replay_direct(task, "aci", params, seed=1)
    assert any(row["set_size"] == 0 for row in got[0])
    expected = replay(task, "aci", params, seed=1)
    assert got[:2] == expected[:2]


def test_set_sizes_and_coverage_follow_the_threshold() -> None:
    task = ConformalTask(records(seed=1, rounds=400, absent=0.05), 0.7)
    rows, summary, _ = replay_direct(task, "greedy", {"alpha": 0.7, "horizon": 400})
    assert sum(row["threshold"] is not None for row in rows) > 300
    for row, record in zip(rows, task.records, strict=True):
        tau = -math.inf if row["threshold"] is None else row["threshold"]
        chosen = [y for y, s in zip(record["labels"], record["scores"], strict=True) if s >= tau]
        assert row["set_size"] == len(chosen)
        assert row["covered"] == (record["true_label"] in chosen)
    assert summary["coverage"] == sum(row["covered"] for row in rows) / 400


def test_empty_sets_count_as_full_miscoverage() -> None:
    """A null threshold with set size 0 is the empty set: miscoverage 1 (not 0), and it
    counts as undercoverage."""
    task = ConformalTask(records(seed=2, rounds=200), 0.9)
    summary = task.summary([{"t": 0, "threshold": None, "covered": False, "set_size": 0}])
    assert summary["undercoverage_count"] == 1
    optimum = conformal_round_regret(float(task.miscoverage(task.tau_star)), 0.1)
    assert summary["regret"] == pytest.approx(10 * (1.0 - 0.1) - optimum)  # lambda2 = 10


@pytest.mark.parametrize(
    ("params", "timeout", "seed", "message"),
    [
        ({"alpha": 0.9}, 1000.0, 0, "horizon"),  # greedy needs one
        ({"alpha": 0.9, "horizon": 10}, 0.0, 0, "feedback_timeout_s"),
        ({"alpha": 0.9, "horizon": 10}, 1000.0, -1, "seed"),
    ],
)
def test_bad_configs_are_replay_errors_in_both_engines(
    params: dict[str, Any], timeout: float, seed: int, message: str
) -> None:
    task = ConformalTask(records(seed=3, rounds=10), 0.9)
    for engine in (replay, replay_direct):
        with pytest.raises(ReplayError, match=message):
            engine(task, "greedy", params, seed=seed, feedback_timeout=timeout)


BAD_LINES = [
    ({"labels": ["a", "a"], "scores": [1, 2], "true_label": "a"}, "duplicate label"),
    ({"labels": [True, 1], "scores": [1, 2], "true_label": 1}, "invalid_schema"),
    ({"labels": [0, 1], "scores": [True, 2.0], "true_label": 1}, "invalid_schema"),
    ({"labels": [0, 1], "scores": [10**400, 2.0], "true_label": 1}, "scores"),
    ({"labels": [0, 1], "scores": [1.0, 2.0], "true_label": 2.0}, "true_label"),
    ({"labels": [0, 1], "scores": [1.0, 2.0], "true_label": True}, "true_label"),
    ({"labels": [0, 1], "scores": [1.0], "true_label": 1}, "equal length"),
    ({"labels": [], "scores": [], "true_label": 1}, "at least one label"),
    ({"labels": [0], "scores": [1.0]}, "missing 'true_label'"),
    ({"event_id": "x" * 300, "labels": [0], "scores": [1.0], "true_label": 0}, "event_id"),
    ({"labels": list(range(10_001)), "scores": [0.0] * 10_001, "true_label": 0}, "oversize"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_read_log_rejects_what_the_processors_reject(
    tmp_path: Path, line: dict[str, Any], message: str
) -> None:
    """read_log validates every context with the worker's schema and limits, so the direct
    engine never replays a log the processors would reject."""
    log = tmp_path / "bad.jsonl"
    log.write_text(json.dumps(line) + "\n")
    with pytest.raises(LogError, match=message):
        read_log(log)


def test_read_log_event_ids(tmp_path: Path) -> None:
    log = tmp_path / "ids.jsonl"
    line = {"labels": [0, 1], "scores": [0.5, 1.5], "true_label": None}
    log.write_text(json.dumps(line) + "\n" + json.dumps({**line, "event_id": None}) + "\n")
    assert [r["event_id"] for r in read_log(log)] == ["1", "2"]  # defaults: line numbers
    log.write_text(json.dumps({**line, "event_id": "a"}) + "\n" + json.dumps(
        {**line, "event_id": "a"}) + "\n")
    with pytest.raises(LogError, match="repeats line 1"):
        read_log(log)


def test_cli_direct_replay_and_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records(seed=4, rounds=300)))
    outputs = {}
    # (--engine: the option's former name, still accepted)
    for how, option in (("processors", "--replay"), ("direct", "--engine")):
        out = tmp_path / how
        args = ["evaluate", "--family", "conformal", "--learner", "greedy", "--log", str(log),
                "--alpha", "0.7", option, how, "--delay", "geometric:0.2",
                "--loss", "0.05", "--feedback-timeout", "30", "--out", str(out), "--quiet"]
        assert main(args) == 0
        outputs[how] = json.loads((out / "summary.json").read_text())
        assert outputs[how].pop("replay") == how
    assert outputs["processors"] == outputs["direct"]
    assert outputs["direct"]["final_threshold"] is not None
    assert outputs["direct"]["feedback_lost"] > 0
    capsys.readouterr()
    with pytest.raises(SystemExit, match="only for: conformal"):
        main(["evaluate", "--family", "prob_graph", "--learner", "ucb_n", "--replay", "direct",
              "--scenario", str(log), "--horizon", "10", "--out", str(tmp_path / "x")])
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(SystemExit, match="no rounds"):
        main(["evaluate", "--family", "conformal", "--learner", "sps", "--log",
              str(tmp_path / "empty.jsonl"), "--out", str(tmp_path / "y")])
