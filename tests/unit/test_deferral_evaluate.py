"""``banditflow evaluate --family deferral`` and ``make-log deferral-*``: task, summary, CLI."""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from banditflow.learners.deferral import ALGORITHMS
from banditflow.learners.deferral.opt import fractional_knapsack_opt
from banditflow.learners.registry import family
from banditflow.offline.evaluation.deferral import DeferralTask, LogError, parse_budget, read_log
from banditflow.offline.evaluation.replay import Delay, replay
from banditflow.offline.logs import builders
from banditflow.offline.logs.deferral import digits_scenario
from banditflow.streams.cli import build_parser, main


def write_log(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("logs") / "uniform.jsonl"
    builders()["deferral-uniform"](out, 200, 3)
    return out


def test_log_builders_write_valid_logs(tmp_path: Path) -> None:
    for name in ("deferral-uniform", "deferral-complementary", "deferral-digits"):
        out = tmp_path / f"{name}.jsonl"
        description = builders()[name](out, 50, 1)
        assert "50 rounds" in description
        log = read_log(out)
        assert log.rounds == 50 and log.means is not None
        assert np.all(np.linalg.norm(log.features, axis=1) <= 1.0 + 1e-9)
        for name_ in ("model_reward", "human_reward", "human_cost"):
            values = getattr(log, name_)
            assert np.all((values >= 0) & (values <= 1))


def test_digits_experts_depend_on_the_context() -> None:
    columns = digits_scenario(3000, seed=0)
    assert columns["features"].shape == (3000, 13)
    confidence = columns["features"][:, 1] * 2.0
    hard = confidence < np.median(confidence)
    # experts answer hard images more slowly and less accurately; the model is worse there
    assert columns["cost_mean"][hard].mean() > columns["cost_mean"][~hard].mean() + 0.1
    assert columns["human_mean"][hard].mean() < columns["human_mean"][~hard].mean()
    assert columns["model_reward"][hard].mean() < columns["model_reward"][~hard].mean() - 0.1
    # deferring the hard images is worth it: the human beats the model there
    assert columns["human_mean"][hard].mean() > columns["model_reward"][hard].mean()
    assert abs(columns["human_cost"].mean() - columns["cost_mean"].mean()) < 0.02


def test_read_log_rejects_bad_lines(tmp_path: Path) -> None:
    good = {"event_id": "a", "features": [0.5, 0.5], "model_reward": 1, "human_reward": 0,
            "human_cost": 0.5}
    cases = {
        "features": {**good, "features": "x"},
        r"in \[0, 1\]": {**good, "human_cost": 1.5},
        "finite number": {**good, "model_reward": None},
        "all of": {**good, "model_mean": 0.5},
    }
    for message, row in cases.items():
        with pytest.raises(LogError, match=message):
            read_log(write_log(tmp_path / "bad.jsonl", [good, row]))
    with pytest.raises(LogError, match="unique"):
        read_log(write_log(tmp_path / "dup.jsonl", [good, good]))
    log = read_log(write_log(tmp_path / "ok.jsonl", [good, {**good, "event_id": "b"}]), 1)
    assert log.rounds == 1 and log.means is None


def test_budget_parsing() -> None:
    assert parse_budget("unlimited", 100, 1.0) == 100.0
    assert parse_budget("12.5", 100, 1.0) == 12.5
    assert parse_budget(None, 50_000, 1.0) == pytest.approx(8000.0)
    with pytest.raises(SystemExit):
        parse_budget("-1", 100, 1.0)


@pytest.mark.parametrize("mode", ["full", "bandit"])
def test_feedback_parts_follow_the_mode(small_log: Path, mode: str) -> None:
    task = DeferralTask(read_log(small_log), budget=10.0, feedback=mode)
    round_ = next(task.rounds())
    rng = np.random.default_rng(0)
    kept = task.feedback(round_, {"defer": False}, rng)
    deferred = task.feedback(round_, {"defer": True}, rng)
    assert [p["part"] for p in kept] == ["model"]
    assert [p["part"] for p in deferred] == (["model", "human"] if mode == "full" else ["human"])
    assert set(deferred[-1]) == {"part", "human_reward", "human_cost"}


def test_replay_summary_and_trajectory_agree_with_the_log(small_log: Path) -> None:
    log = read_log(small_log)
    budget = 20.0
    task = DeferralTask(log, budget, "full")
    params = {"dim": log.dim, "budget": budget, "horizon": log.rounds, "feedback": "full"}
    rows, summary, processor = replay(task, "ucb", params, seed=0, delay=Delay.parse("3"))
    deferred = np.array([row["deferred"] for row in rows])
    reward = np.where(deferred, log.human_reward, log.model_reward)
    assert summary["rounds"] == log.rounds and summary["deferrals"] == deferred.sum() > 0
    assert summary["total_reward"] == pytest.approx(reward.sum())
    assert summary["spent"] == pytest.approx(log.human_cost[deferred].sum())
    assert summary["spent"] <= budget and summary["within_budget"]
    assert rows[-1]["spent"] == pytest.approx(summary["spent"])
    assert all(a["spent"] <= b["spent"] for a, b in itertools.pairwise(rows))
    opt = fractional_knapsack_opt(log.model_reward, log.human_reward, log.human_cost, budget)
    assert summary["opt"] == pytest.approx(opt.value)
    assert summary["percent_of_opt"] == pytest.approx(100 * reward.sum() / opt.value)
    assert 0 < summary["percent_of_opt_expected"] <= 100.0 + 1e-9
    # the learner's own account agrees: every part applied once, nothing reserved
    entry = processor.store.value("l/replay")
    assert entry["state"]["spent"] == pytest.approx(summary["spent"])
    assert entry["state"]["reserved"] == 0.0
    assert entry["state"]["human"]["count"] == deferred.sum()
    assert entry["state"]["model"]["count"] == log.rounds
    assert entry["stats"]["feedback"] == log.rounds


def test_bandit_mode_observes_only_the_chosen_arm(small_log: Path) -> None:
    log = read_log(small_log)
    task = DeferralTask(log, 30.0, "bandit")
    params = {"dim": log.dim, "budget": 30.0, "horizon": log.rounds, "feedback": "bandit"}
    _, summary, processor = replay(task, "arbitrary_human", params)
    state = processor.store.value("l/replay")["state"]
    assert summary["spent"] <= 30.0 and state["partial"] == {}
    assert processor.store.value("l/replay")["stats"]["feedback"] == log.rounds


def test_best_reject_gets_a_hindsight_threshold(small_log: Path) -> None:
    task = DeferralTask(read_log(small_log), 40.0, "full")
    params = task.best_reject_params(1.0)
    assert 0.0 <= params["threshold"] <= 1.0 and len(params["model_theta"]) == 20
    # the synthetic log's model mean is linear in the features: least squares recovers it
    fitted = task.log.features @ np.array(params["model_theta"])
    assert np.allclose(fitted, task.log.means["model_mean"], atol=1e-8)


def test_option_names_do_not_collide() -> None:
    parser = build_parser()
    args = parser.parse_args(["evaluate", "--family", "deferral", "--learner", "ucb", "--out",
                              "x", "--feedback", "bandit", "--feedback-timeout", "5",
                              "--budget", "unlimited"])
    assert args.feedback == "bandit" and args.feedback_timeout == 5.0
    assert args.budget == "unlimited"
    args = parser.parse_args(["evaluate", "--family", "deferral", "--learner", "ucb", "--out",
                              "x", "--feedback-timeout", "7"])
    assert args.feedback == "full" and args.feedback_timeout == 7.0


def test_cli_end_to_end(small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["evaluate", "--family", "deferral", "--learner", "ucb", "--log", str(small_log),
                 "--budget", "25", "--feedback", "bandit", "--quiet", "--out", str(out),
                 "--param", "warmup=20"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["params"]["warmup"] == 20 and summary["params"]["feedback"] == "bandit"
    assert summary["feedback_mode"] == "bandit" and summary["spent"] <= 25
    lines = (out / "trajectory.jsonl").read_text().splitlines()
    assert len(lines) == 200
    assert set(json.loads(lines[0])) == {"t", "deferred", "reward", "spent"}
    assert (out / "curves.png").exists()
    capsys.readouterr()
    compare = tmp_path / "compare"
    assert main(["evaluate", "--family", "deferral", "--learner",
                 "model_only,arbitrary_human,best_reject", "--log", str(small_log), "--horizon",
                 "100", "--budget", "20", "--quiet", "--out", str(compare)]) == 0
    table = (compare / "comparison.md").read_text()
    assert "best_reject" in table and "percent_of_opt" in table
    results = json.loads((compare / "comparison.json").read_text())
    assert results["model_only"][0]["spent"] == 0.0
    assert all(run[0]["spent"] <= 20 and run[0]["rounds"] == 100 for run in results.values())


def test_cli_needs_a_log() -> None:
    with pytest.raises(SystemExit, match="--log"):
        main(["evaluate", "--family", "deferral", "--learner", "ucb", "--out", "x", "--quiet"])


def test_summary_keys_are_the_worker_gauges() -> None:
    for name, cls in ALGORITHMS.items():
        extra = {"threshold": 0.5, "model_theta": [0.1, 0.2]} if name == "best_reject" else {}
        learner = cls.from_params({"dim": 2, "budget": 3.0, "horizon": 10, **extra})
        summary = learner.summary()
        declared = family("deferral").gauges
        for gauge in ("budget_spent", "budget_remaining", "deferral_rate"):
            assert gauge in declared and gauge in summary, (name, gauge)
        assert summary["budget"] == 3.0
        assert ("dual_price" in summary) == (name in ("ucb", "neural_linear"))


def test_build_checks_the_budget_and_caches_best_reject(small_log: Path) -> None:
    from banditflow.offline.evaluation.deferral import build

    def args(budget: str) -> argparse.Namespace:
        return argparse.Namespace(log=small_log, horizon=100, budget=budget, c_max=1.0,
                                  feedback="full")

    with pytest.raises(SystemExit, match="below --c-max"):
        build(args("0.5"), 0)
    task, params_for = build(args("unlimited"), 0)
    assert task.log.rounds == 100 and params_for("ucb")["budget"] == 100.0
    assert params_for("best_reject") == params_for("best_reject")
    assert "threshold" not in params_for("ucb")
