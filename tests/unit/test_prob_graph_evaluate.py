"""``banditflow evaluate --family prob_graph``: the task, regret accounting, the CLI, reports."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from banditflow.learners.prob_graph.scenarios import parse_scenario
from banditflow.offline.evaluation import prob_graph as evaluation
from banditflow.offline.evaluation.prob_graph import ProbGraphTask, split_feedback
from banditflow.offline.evaluation.replay import replay
from banditflow.offline.logs import builders
from banditflow.streams.cli import main

# Two arms: playing 0 reveals 1 with p = 0.5, playing 1 reveals 0 always. Gap 1, so
# b_0 = b_1 = 2 / 1^2 = 2; the LP needs c_1 >= 2 (arm 0 seen through 1) and 0.5 c_0 >= 2,
# so C* = Delta_1 c_1 = 2 (c_0 = 4 costs nothing: arm 0 is the best).
TWO_ARMS = {"arms": 2, "means": [1.0, 0.0], "edges": [[0, 1, 0.5], [1, 0, 1.0]]}
THREE_ARMS = {
    "arms": 3,
    "means": [1.0, 0.7, 0.2],
    "edges": [[0, 1, 0.5], [1, 0, 1.0], [2, 0, 0.9], [2, 1, 0.9], [2, 2, 1.0]],
}


def write_scenario(path: Path, spec: dict) -> Path:
    path.write_text(json.dumps(spec))
    return path


def test_rounds_are_context_free_and_feedback_is_complete_and_revealable() -> None:
    task = ProbGraphTask(parse_scenario(THREE_ARMS), horizon=50)
    rounds = list(task.rounds())
    assert len(rounds) == 50 and len({r.event_id for r in rounds}) == 50
    assert all(r.context == {} for r in rounds)
    rng = np.random.default_rng(0)
    seen: set[str] = set()
    for _ in range(200):
        (event,) = task.feedback(rounds[0], {"arm": 2}, rng)
        assert event["complete"] is True and "part" not in event
        seen |= set(event["rewards"])
    assert seen == {"0", "1", "2"}  # arm 2 reveals everything, itself included
    for _ in range(100):
        (event,) = task.feedback(rounds[0], {"arm": 1}, rng)
        assert set(event["rewards"]) == {"0"}  # 1 -> 0 with p = 1, nothing else


def test_split_feedback_has_distinct_parts_and_one_complete_marker() -> None:
    event = {"rewards": {"0": 0.1, "1": 0.2, "2": 0.3}, "complete": True}
    parts = split_feedback(event, 3)
    assert [p["part"] for p in parts] == ["p0", "p1", "p2"]
    assert [p["complete"] for p in parts] == [False, False, True]
    merged = {k: v for p in parts for k, v in p["rewards"].items()}
    assert merged == event["rewards"]
    assert split_feedback(event, 1) == [event]
    assert split_feedback({"rewards": {}, "complete": True}, 2)[1] == {
        "rewards": {},
        "part": "p1",
        "complete": True,
    }


def test_regret_accounting_matches_a_hand_computation() -> None:
    task = ProbGraphTask(parse_scenario(THREE_ARMS), horizon=6)
    arms = [2, 2, 1, 0, 0, 1]
    rows = [{"t": t, **task.row(t, None, {"arm": a, "branch": "x"})} for t, a in enumerate(arms)]
    # gaps: arm 0 -> 0, arm 1 -> 0.3, arm 2 -> 0.8
    assert [r["regret"] for r in rows] == pytest.approx([0.8, 1.6, 1.9, 1.9, 1.9, 2.2])
    assert set(rows[0]) == {"t", "arm", "regret"}
    summary = task.summary(rows)
    assert summary["regret"] == pytest.approx(2.2)
    assert summary["arm_pulls"] == [2, 2, 2]
    assert summary["regret_over_log_t"] == pytest.approx(2.2 / math.log(6))
    assert summary["c_star_log_t"] == pytest.approx(summary["c_star"] * math.log(6))
    assert summary["branches"] == {"x": 6}
    # A new run (t = 0) starts from zero again.
    assert task.row(0, None, {"arm": 1})["regret"] == pytest.approx(0.3)


def test_c_star_of_the_two_armed_graph() -> None:
    task = ProbGraphTask(parse_scenario(TWO_ARMS), horizon=10)
    assert task.c_star == pytest.approx(2.0)
    assert task.allocation == pytest.approx([4.0, 2.0])
    rows = [{"t": t, **task.row(t, None, {"arm": 1})} for t in range(10)]
    summary = task.summary(rows)
    assert summary["regret"] == pytest.approx(10.0)
    assert summary["regret_over_c_star_log_t"] == pytest.approx(10.0 / (2.0 * math.log(10)))


def test_c_star_zero_gives_no_ratio() -> None:
    # The cascade on a clique: the best arm observes itself through a cycle, C* = 0.
    spec = {**TWO_ARMS, "edges": [[0, 1, 1.0], [1, 0, 1.0]], "case": "cascade"}
    task = ProbGraphTask(parse_scenario(spec), horizon=5)
    rows = [{"t": t, **task.row(t, None, {"arm": 0})} for t in range(5)]
    summary = task.summary(rows)
    assert task.c_star == pytest.approx(0.0)
    assert summary["regret"] == 0.0 and summary["regret_over_c_star_log_t"] is None


def test_replay_through_the_processors_accounts_every_round() -> None:
    scenario = parse_scenario(THREE_ARMS)
    rows, summary, processor = replay(
        ProbGraphTask(scenario, 300), "lp_policy", scenario.learner_params(), seed=3
    )
    gaps = scenario.means.max() - scenario.means
    assert summary["rounds"] == 300 and sum(summary["arm_pulls"]) == 300
    assert summary["regret"] == pytest.approx(sum(gaps[r["arm"]] for r in rows))
    assert rows[-1]["regret"] == pytest.approx(summary["regret"])
    assert summary["feedback_rejected"] == {} and summary["feedback_lost"] == 0
    assert sum(summary["branches"].values()) == 300
    state = processor.store.value("l/replay")["state"]
    assert sum(state["plays"]) == 300 and state["open"] == {}


def test_partial_feedback_in_parts_learns_exactly_as_one_event() -> None:
    scenario = parse_scenario(THREE_ARMS)
    runs = [
        replay(ProbGraphTask(scenario, 200, parts), "ucb_n", scenario.learner_params(), seed=1)
        for parts in (1, 2)
    ]
    assert [r["arm"] for r in runs[0][0]] == [r["arm"] for r in runs[1][0]]
    states = [run[2].store.value("l/replay")["state"] for run in runs]
    assert states[0] == states[1]


def test_cli_writes_summary_and_trajectory(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "s.json", THREE_ARMS)
    out = tmp_path / "out"
    argv = ["evaluate", "--family", "prob_graph", "--learner", "thompson", "--quiet"]
    argv += ["--scenario", str(scenario), "--horizon", "120", "--seed", "2", "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert len(rows) == summary["rounds"] == 120
    assert set(rows[0]) == {"t", "arm", "regret"}
    assert summary["learner"] == "thompson" and summary["seed"] == 2
    assert summary["regret"] == pytest.approx(rows[-1]["regret"])
    assert summary["regret_over_log_t"] == pytest.approx(summary["regret"] / math.log(120))
    assert "means" not in summary["params"]  # the learner never sees the true means


def test_cli_needs_a_scenario_and_a_horizon(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "s.json", TWO_ARMS)
    base = ["evaluate", "--family", "prob_graph", "--learner", "ucb_n", "--out", str(tmp_path)]
    with pytest.raises(SystemExit, match="--scenario"):
        main([*base, "--horizon", "10"])
    with pytest.raises(SystemExit, match="--horizon"):
        main([*base, "--scenario", str(scenario)])
    bad = write_scenario(tmp_path / "bad.json", {**TWO_ARMS, "means": [1.0]})
    with pytest.raises(SystemExit, match="2 arms but 1 means"):
        main([*base, "--scenario", str(bad), "--horizon", "10"])


def test_make_log_writes_every_report_scenario(tmp_path: Path) -> None:
    known = builders()
    names = [f"prob-graph-{n}" for n in evaluation_names()]
    for name in names:
        out = tmp_path / f"{name}.json"
        description = known[name](out, 0, 0)
        scenario = parse_scenario(json.loads(out.read_text()))
        assert "C*(theta)" in description
        assert scenario.setting.case == ("cascade" if name.endswith("cascade") else "one_step")
    tree = parse_scenario(json.loads((tmp_path / "prob-graph-revealing-cascade.json").read_text()))
    assert tree.setting.probabilities[19].sum() == pytest.approx(1.0 + 0.9 * 3)  # self + hubs


def evaluation_names() -> list[str]:
    from banditflow.offline.logs.prob_graph import NAMES

    return NAMES


def test_direct_runs_and_report(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "s.json", THREE_ARMS)
    runs = tmp_path / "runs" / "three"
    args = ["simulate", "--scenario", str(scenario), "--learners", "lp_policy,ucb_n"]
    assert evaluation.main([*args, "--seeds", "0-1", "--horizon", "100", "--out", str(runs)]) == 0
    summary = json.loads((runs / "ucb_n-seed1" / "summary.json").read_text())
    assert summary["rounds"] == 100 and summary["driver"].startswith("direct")
    report = tmp_path / "report"
    assert evaluation.main(["report", str(tmp_path / "runs"), str(report), "--at", "50,80"]) == 0
    table = (report / "regret_table.md").read_text()
    assert "| three | 3 | one_step | 100 | 2 |" in table
    assert "lp_policy R_50" in table and "ucb_n R_80" in table
    results = json.loads((report / "results.json").read_text())
    lp = results["three"]["learners"]["lp_policy"]
    assert len(lp["regret"]) == 2 and len(lp["regret_at"]["50"]) == 2
    for seed, at_50, at_80 in zip(lp["seeds"], lp["regret_at"]["50"], lp["regret_at"]["80"],
                                  strict=True):
        rows = (runs / f"lp_policy-seed{seed}" / "trajectory.jsonl").read_text().splitlines()
        assert at_50 == pytest.approx(json.loads(rows[49])["regret"])
        assert at_80 == pytest.approx(json.loads(rows[79])["regret"])
    assert (report / "three.png").stat().st_size > 10_000
