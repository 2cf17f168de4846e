"""``banditflow evaluate --family graph_cb``: reveal simulation, summary, regret, CLI, logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from banditflow.learners.graph_cb import SquareCBG
from banditflow.offline.evaluation.graph_cb import GraphCBTask, LogError, read_log, reveal
from banditflow.offline.evaluation.replay import LoggedRound, replay
from banditflow.offline.logs import builders
from banditflow.offline.logs.graph_cb import inventory_losses, random_self_aware_graph
from banditflow.streams.cli import main


def write_log(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_reveal_frequencies_match_the_graph() -> None:
    graph = np.array(
        [[1.0, 0.3, 0.0, 0.75], [0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.1, 1.0], [0.9, 0.0, 0.2, 0.6]]
    )
    rng = np.random.default_rng(0)
    draws = 5000
    for action in range(4):
        counts = np.zeros(4)
        for _ in range(draws):
            counts[reveal(graph, action, rng)] += 1
        frequency = counts / draws
        sigma = np.sqrt(graph[action] * (1 - graph[action]) / draws)
        assert np.all(np.abs(frequency - graph[action]) <= 4 * sigma + 1e-12), (action, frequency)
        # Zero entries are never revealed, ones always.
        assert np.all(counts[graph[action] == 0.0] == 0)
        assert np.all(counts[graph[action] == 1.0] == draws)


def test_feedback_events_carry_exactly_the_revealed_losses() -> None:
    records = [{"event_id": "a", "features": [1.0], "losses": np.array([0.1, 0.9])}]
    task = GraphCBTask(records, np.array([[1.0, 1.0], [0.0, 0.0]]))  # apple tasting
    round_ = next(task.rounds())
    rng = np.random.default_rng(1)
    assert task.feedback(round_, {"action": 0}, rng) == [{"losses": {"0": 0.1, "1": 0.9}}]
    # "let through" reveals nothing: an empty observation, which the learners accept.
    assert task.feedback(round_, {"action": 1}, rng) == [{"losses": {}}]
    learner = SquareCBG.from_params(
        {"graph_kind": "apple_tasting", "actions": 2, "feature_dim": 1})
    learned = learner.learn({"features": [1.0], "action": 1, "p": [0.5, 0.5]}, {"losses": {}})
    assert learned.done and learned.metrics == {"revealed": 0.0}
    assert learner.oracle.updates == 0


def test_summary_and_regret_by_hand() -> None:
    losses = [[0.0, 1.0], [1.0, 0.5], [0.2, 0.2], [0.6, -0.4]]
    records = [
        {"event_id": str(t), "features": [0.0], "losses": np.array(row)}
        for t, row in enumerate(losses)
    ]
    task = GraphCBTask(records, np.eye(2))
    rows = [
        {"t": 0, "action": 1, "loss": 1.0, "dec": 0.5},
        {"t": 1, "action": 1, "loss": 0.5, "dec": None},
        {"t": 2, "action": 0, "loss": 0.2, "dec": 0.1},
        {"t": 3, "action": 0, "loss": 0.6, "dec": 0.3},
    ]
    summary = task.summary(rows)
    # Per-round best: 0, 0.5, 0.2, -0.4 -> regret 1 + 0 + 0 + 1 = 2.
    assert summary["rounds"] == 4 and summary["actions"] == 2
    assert summary["pv_loss"] == pytest.approx(2.3 / 4)
    assert summary["oracle_loss"] == pytest.approx(0.3 / 4)
    assert summary["regret"] == pytest.approx(2.0)
    assert summary["mean_regret"] == pytest.approx(0.5)
    # Best single action: mean of column 0 is 0.45, of column 1 0.325.
    assert summary["best_fixed_loss"] == pytest.approx(0.325)
    assert summary["mean_dec"] == pytest.approx(0.3) and summary["infinite_dec"] == 1
    curves = task.curves(rows)
    assert curves["cumulative regret vs per-round best"].tolist() == pytest.approx([1, 1, 1, 2])
    assert curves["progressive validation loss"][-1] == pytest.approx(2.3 / 4)


def test_replay_learns_every_revealed_loss_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    records = [
        {"event_id": f"e{t}", "features": rng.normal(size=3).round(4).tolist(),
         "losses": rng.uniform(0, 1, size=4).round(4).tolist(),
         "graph": random_self_aware_graph(4, rng).tolist()}
        for t in range(200)
    ]
    log = read_log(write_log(tmp_path / "log.jsonl", records))
    task = GraphCBTask(log)
    params = {"actions": 4, "feature_dim": 3}
    rows, summary, processor = replay(task, "squarecb_g", params, seed=5)
    assert [r["loss"] for r in rows] == [records[t]["losses"][r["action"]]
                                         for t, r in enumerate(rows)]
    state = processor.store.value("l/replay")["state"]
    assert state["oracle"]["updates"] == sum(task.revealed)
    assert summary["mean_revealed"] == pytest.approx(np.mean(task.revealed))
    assert summary["pv_loss"] == pytest.approx(np.mean([r["loss"] for r in rows]))


def test_cli_on_a_small_digits_log(tmp_path: Path) -> None:
    log = tmp_path / "digits.jsonl"
    assert main(["make-log", "graph_cb-digits", "--rounds", "300", "--out", str(log)]) == 0
    out = tmp_path / "out"
    argv = ["evaluate", "--family", "graph_cb", "--learner", "squarecb_g", "--log", str(log),
            "--graph-kind", "cops_and_robbers", "--gamma-scale", "8", "--seed", "2",
            "--out", str(out), "--quiet"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert summary["rounds"] == len(rows) == 300
    assert set(rows[0]) == {"t", "action", "loss", "dec"}
    assert summary["params"]["graph_kind"] == "cops_and_robbers"
    assert summary["params"]["gamma_c"] == 8.0
    assert summary["mean_revealed"] == 9.0  # cops and robbers: all but the played action
    assert summary["pv_loss"] == pytest.approx(np.mean([r["loss"] for r in rows]))
    assert summary["regret"] == pytest.approx(sum(r["loss"] for r in rows))  # best loss is 0
    assert summary["pv_loss"] < 0.6  # learns well beyond the 0.9 of a random guess
    assert (out / "curves.png").stat().st_size > 10_000
    # The same seed reproduces the run.
    again = tmp_path / "again"
    assert main([*argv[:-3], "--out", str(again), "--quiet"]) == 0
    assert (again / "trajectory.jsonl").read_text() == (out / "trajectory.jsonl").read_text()


def test_a_log_without_graphs_needs_one(tmp_path: Path) -> None:
    log = write_log(tmp_path / "log.jsonl",
                    [{"event_id": "a", "features": [1.0], "losses": [0.0, 1.0]}])
    with pytest.raises(SystemExit, match="--graph-kind"):
        main(["evaluate", "--family", "graph_cb", "--learner", "squarecb", "--log", str(log),
              "--out", str(tmp_path / "o"), "--quiet"])
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps([[1, 0], [1, 1]]))
    assert main(["evaluate", "--family", "graph_cb", "--learner", "epsilon_greedy", "--log",
                 str(log), "--graph", str(graph), "--out", str(tmp_path / "o"), "--quiet"]) == 0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"event_id": "a", "features": [1.0], "losses": [0.0, 2.0]}, r"\[-1, 1\]"),
        ({"event_id": "a", "features": [1.0]}, "losses"),
        ({"event_id": "a", "features": [1.0], "losses": [0, 1], "graph": [[0, 0], [1, 0]]},
         "unobservable"),
    ],
)
def test_bad_lines_are_reported(tmp_path: Path, line: dict, message: str) -> None:
    with pytest.raises(LogError, match=message):
        read_log(write_log(tmp_path / "log.jsonl", [line]))


def test_log_builders(tmp_path: Path) -> None:
    known = builders()
    assert {"graph_cb-digits", "graph_cb-digits-random", "graph_cb-spam", "graph_cb-inventory-101",
            "graph_cb-inventory-301", "graph_cb-inventory-501", "graph_cb-multilabel"} <= set(known)
    known["graph_cb-inventory-101"](tmp_path / "inv.jsonl", 400, 1)
    inv = read_log(tmp_path / "inv.jsonl")
    assert len(inv) == 400 and inv[0]["losses"].size == 101 and len(inv[0]["features"]) == 100
    # Losses h (a - d)+ + b (d - a)+ on the grid a = i / 100: the minimum sits at the demand.
    demand = np.array([0.0, 0.305, 1.0])
    grid = inventory_losses(demand, 101)
    assert grid[1, 30] == pytest.approx(0.005) and grid[1, 31] == pytest.approx(0.25 * 0.005)
    assert grid[0, 100] == pytest.approx(0.25) and grid[2, 0] == pytest.approx(1.0)
    best = np.array([r["losses"].argmin() for r in inv]) / 100
    assert best.min() == 0.0 and best.max() == 1.0  # min-max normalised demand

    known["graph_cb-digits-random"](tmp_path / "dr.jsonl", 300, 0)
    graphs = np.array([r["graph"] for r in read_log(tmp_path / "dr.jsonl")])
    assert np.all(graphs[:, range(10), range(10)] == 1.0)
    off = graphs[:, ~np.eye(10, dtype=bool)]
    assert abs(off.mean() - 0.75) < 0.02

    known["graph_cb-spam"](tmp_path / "spam.jsonl", 100, 0)
    spam = read_log(tmp_path / "spam.jsonl")
    assert all(r["graph"].tolist() == [[1.0, 1.0], [0.0, 0.0]] for r in spam)
    assert all(sorted(r["losses"].tolist()) == [0.0, 1.0] for r in spam)

    known["graph_cb-multilabel"](tmp_path / "ml.jsonl", 200, 0)
    multilabel = read_log(tmp_path / "ml.jsonl")
    losses = np.array([r["losses"] for r in multilabel])
    features = np.array([r["features"] for r in multilabel])
    assert losses.shape == (200, 50) and set(np.unique(losses)) == {0.0, 1.0}
    assert np.all(losses.min(axis=1) == 0.0)  # every document has a topic
    assert 2.0 < (1.0 - losses).sum(axis=1).mean() < 4.5  # about 3 topics per document
    assert np.allclose(np.linalg.norm(features, axis=1), 1.0, atol=1e-3)


def test_rows_record_the_played_loss() -> None:
    records = [{"event_id": "a", "features": [1.0], "losses": np.array([0.25, -0.5])}]
    task = GraphCBTask(records, np.ones((2, 2)))
    round_ = LoggedRound("a", {"features": [1.0]}, records[0])
    assert task.row(0, round_, {"action": 1, "dec": None}) == {
        "action": 1, "loss": -0.5, "dec": None}


def test_vw_head_to_head_sends_the_transposed_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """VW's --graph_feedback reads column = played, row = revealed, the transpose of
    G[a][j] (a reveals j): the benchmark must write VW's ``row,col,value`` triples from G.T."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_graph_cb_vw.py"
    spec = importlib.util.spec_from_file_location("bench_graph_cb_vw", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses look it up
    spec.loader.exec_module(bench)
    apple = [[1.0, 1.0], [0.0, 0.0]]  # action 0 (inspect) reveals both, action 1 nothing
    assert bench.vw_graph(apple) == "0,0,1 1,0,1"  # column 0 (played) reveals rows 0 and 1
    graph = np.array([[0.0, 0.25, 0.0], [0.0, 0.0, 1.0], [0.5, 0.0, 0.0]])
    triples = [tuple(float(x) for x in t.split(",")) for t in bench.vw_graph(graph).split()]
    played, revealed = np.nonzero(graph)
    expected = [(j, a, graph[a, j]) for a, j in zip(played, revealed, strict=True)]
    assert sorted(triples) == sorted(expected)
