"""Head-to-head: banditflow's SquareCB.G against Vowpal Wabbit's ``--cb_explore_adf
--graph_feedback`` on the very same graph_cb streams and seeds.

For each scenario a log is built with the ``banditflow make-log`` builders
(:mod:`banditflow.offline.logs.graph_cb`) and replayed three ways:

* ``banditflow (replay)``: the full offline replay
(:func:`banditflow.offline.evaluation.replay.replay`:
  JSON events through :class:`banditflow.processors.Processor`, exactly as the worker runs them);
* ``banditflow (learner)``: the same learner called directly (decide + learn, no processors);
* ``vw``: Vowpal Wabbit through its Python bindings, text format: a shared example
  ``shared graph r,c,v ... |s f:x ...`` (the graph in coordinate format, non-zero entries)
  and one line ``|a a<j>`` per action, with ``-q sa`` so the oracle is linear in x per action
  like banditflow's ``shared`` layout. Every revealed loss is a label ``0:loss:1`` on its
  action line (probability 1: unweighted square loss, as in the paper and in banditflow).

**Graph orientation.** banditflow's ``G[a][j]`` is the probability that playing ``a`` reveals
``j`` (row = played, column = revealed). VW's ``--graph_feedback`` reads its graph the other
way round: entry ``(r, c)`` is the probability that playing ``c`` reveals ``r`` (column =
played, row = revealed). The bench therefore sends the transpose: :func:`vw_graph` writes
``r,c,v`` for every non-zero entry of ``G.T`` (so ``G[a][j] = v`` becomes ``j,a,v``). With
banditflow's orientation unchanged VW learns the wrong graph (apple tasting: PV loss 0.49
instead of 0.05, and NaN probabilities on random graphs).

Both use gamma = gamma_scale * n^0.5 (banditflow: ``gamma_schedule=vw``) with the same
gamma_scale, both sample the action from the returned distribution, and the reveals come from
:func:`banditflow.offline.evaluation.graph_cb.reveal` with a generator seeded by the run's seed. The
oracles differ (banditflow: recursive least squares, or SGD on the inventory scenario; VW: its
default adaptive, normalised SGD), so losses compare the whole systems.

VW's graph_feedback solver is slow in the pip build (about 0.3-2 s per decision at K = 10 on
this shared machine; at K = 101 its first decision did not come within 15 minutes), so VW
replays only the first ``vw_rounds`` rounds of a scenario (none of the inventory one); the
table gives banditflow's PV loss both over its whole stream and over that same prefix.

Reported per scenario and tool: progressive-validation loss (mean loss of the played actions)
(VW rounds whose returned pmf had NaNs - played uniformly - are counted, summed over seeds),
and decisions per second (wall time of decide + learn over the stream, one core, the
machine is shared: read as indicative). Skipped when vowpalwabbit is not installed.

Run: ``make bench`` (pytest -s), or ``python tests/benchmarks/bench_graph_cb_vw.py [--seeds 0,1,2]
[--json OUT]`` (the report's script uses the latter).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from banditflow.learners.graph_cb import ALGORITHMS
from banditflow.learners.graph_cb.graphs import named_graph
from banditflow.offline.evaluation.graph_cb import GraphCBTask, read_log, reveal
from banditflow.offline.evaluation.replay import replay
from banditflow.offline.logs.graph_cb import LOGS
from banditflow.processors.redo import event_seed


@dataclass(frozen=True)
class Scenario:
    name: str
    log: str
    rounds: int
    graph_kind: str | None  # None: the log carries a graph per line
    gamma_scale: float
    vw_rounds: int  # VW replays only this prefix of the stream (its solver is slow; 0: skip)
    params: Mapping[str, Any] = field(default_factory=dict)


SCENARIOS = (
    Scenario("digits, cops-and-robbers", "graph_cb-digits", 1797, "cops_and_robbers", 10.0, 100),
    Scenario("digits, random graphs", "graph_cb-digits-random", 1797, None, 10.0, 100),
    Scenario("spam, apple tasting", "graph_cb-spam", 1500, None, 10.0, 1500),
    # VW's graph_feedback solver gave no decision within 15 min at K = 101 here: not run.
    # SquareCB.G with the inventory closed form (the paper's choice; the optimal solver costs
    # ~0.1 s per call at K = 101).
    Scenario("inventory K=101", "graph_cb-inventory-101", 2000, "inventory", 10.0, 0,
             {"update": "sgd", "learning_rate": 0.5, "solver": "inventory"}),
)


def learner_params(scenario: Scenario, task: GraphCBTask) -> dict[str, Any]:
    params: dict[str, Any] = {
        "actions": task.actions,
        "feature_dim": len(task.records[0]["features"]),
        "update": "rls",
        "gamma_schedule": "vw",
        "gamma_scale": scenario.gamma_scale,
        **scenario.params,
    }
    if scenario.graph_kind is not None:
        params["graph_kind"] = scenario.graph_kind
    return params


def result(losses: list[float], elapsed: float, prefix: int) -> dict[str, float]:
    """PV loss over the stream and over its first ``prefix`` rounds, and decisions/s."""
    return {"pv_loss": float(np.mean(losses)), "pv_loss_prefix": float(np.mean(losses[:prefix])),
            "decisions_per_s": len(losses) / elapsed}


def run_replay(scenario: Scenario, task: GraphCBTask, seed: int) -> dict[str, float]:
    started = time.perf_counter()
    rows, _, _ = replay(task, "squarecb_g", learner_params(scenario, task), seed=seed)
    elapsed = time.perf_counter() - started
    return result([r["loss"] for r in rows], elapsed, scenario.vw_rounds or len(rows))


def run_learner(scenario: Scenario, task: GraphCBTask, seed: int) -> dict[str, float]:
    learner = ALGORITHMS["squarecb_g"].from_params(learner_params(scenario, task))
    rng = np.random.default_rng(seed)
    losses = []
    started = time.perf_counter()
    for record in task.records:
        context: dict[str, Any] = {"features": record["features"]}
        if "graph" in record:
            context["graph"] = record["graph"]
        decided = learner.decide(context, event_seed(seed, record["event_id"]))
        action = decided.output["action"]
        losses.append(float(record["losses"][action]))
        revealed = reveal(task.round_graph(record), action, rng)
        learner.learn(decided.pending, {"losses": {str(j): record["losses"][j] for j in revealed}})
    elapsed = time.perf_counter() - started
    return result(losses, elapsed, scenario.vw_rounds or len(losses))


def vw_graph(graph: np.ndarray) -> str:
    """A graph in VW's coordinate text format, ``row,col,val`` for every non-zero entry, with
    VW's orientation: **column = played, row = revealed**, the transpose of banditflow's
    ``G[a][j]`` (VW's wiki example [[0, 1], [0, 1]] is "action 1 reveals both"; measured here
    on the apple-tasting stream, VW's PV loss is 0.49 with banditflow's orientation and 0.05
    with the transpose)."""
    vw = np.asarray(graph).T
    rows, cols = np.nonzero(vw)
    return " ".join(f"{r},{c},{vw[r, c]:g}" for r, c in zip(rows, cols, strict=True))


def vw_example(features: list[float], graph_text: str, actions: int,
               labels: Mapping[int, float] | None = None) -> list[str]:
    """One multi-line ``cb_explore_adf`` example (labels: revealed action -> loss)."""
    shared = " ".join(f"f{i}:{v:g}" for i, v in enumerate(features) if v != 0.0)
    lines = [f"shared graph {graph_text} |s {shared}"]
    for a in range(actions):
        label = f"0:{labels[a]:g}:1 " if labels is not None and a in labels else ""
        lines.append(f"{label}|a a{a}")
    return lines


def run_vw(scenario: Scenario, task: GraphCBTask, seed: int) -> dict[str, float]:
    import vowpalwabbit

    workspace = vowpalwabbit.Workspace(
        f"--cb_explore_adf --graph_feedback --gamma_scale {scenario.gamma_scale} -q sa "
        f"--random_seed {seed} --quiet",
        enable_logging=False,
    )
    rng = np.random.default_rng(seed)
    fixed_text = None if task.graph is None else vw_graph(task.graph)
    losses = []
    invalid = 0
    started = time.perf_counter()
    for record in task.records[: scenario.vw_rounds]:
        graph = task.round_graph(record)
        graph_text = fixed_text if "graph" not in record else vw_graph(graph)
        example = vw_example(record["features"], graph_text, task.actions)
        pmf = np.asarray(workspace.predict(example), dtype=float)
        if not np.all(np.isfinite(pmf)) or pmf.sum() <= 0.0:
            invalid += 1  # VW returned NaNs: play uniformly at random, count it
            pmf = np.ones(task.actions)
        action = int(rng.choice(task.actions, p=pmf / pmf.sum()))
        losses.append(float(record["losses"][action]))
        revealed = reveal(graph, action, rng)
        labels = {int(j): float(record["losses"][j]) for j in revealed}
        workspace.learn(vw_example(record["features"], graph_text, task.actions, labels))
    elapsed = time.perf_counter() - started
    workspace.finish()
    return {**result(losses, elapsed, len(losses)), "invalid_pmf": float(invalid)}


RUNNERS: dict[str, Callable[[Scenario, GraphCBTask, int], dict[str, float]]] = {
    "banditflow (replay)": run_replay,
    "banditflow (learner)": run_learner,
    "vw": run_vw,
}


def compare(seeds: list[int], directory: Path,
            scenarios: tuple[Scenario, ...] = SCENARIOS) -> list[dict[str, Any]]:
    """One result row per scenario and tool: mean/std of pv loss and decisions/s over seeds."""
    results = []
    for scenario in scenarios:
        log = directory / f"{scenario.log}.jsonl"
        if not log.exists():
            LOGS[scenario.log](log, scenario.rounds, 0)
        records = read_log(log, scenario.rounds)
        for tool, runner in RUNNERS.items():
            if tool == "vw" and scenario.vw_rounds == 0:
                continue
            runs = []
            for seed in seeds:
                graph = None
                if scenario.graph_kind is not None:
                    graph = named_graph(scenario.graph_kind, len(records[0]["losses"]))
                runs.append(runner(scenario, GraphCBTask(records, graph), seed))
            results.append({
                "scenario": scenario.name, "tool": tool,
                "rounds": scenario.vw_rounds if tool == "vw" else len(records),
                "prefix": scenario.vw_rounds or len(records),
                "seeds": seeds, "gamma_scale": scenario.gamma_scale,
                **{f"{k}_{stat.__name__}": float(stat([r[k] for r in runs]))
                   for k in ("pv_loss", "pv_loss_prefix", "decisions_per_s")
                   for stat in (np.mean, np.std)},
                "invalid_pmf": float(sum(r.get("invalid_pmf", 0.0) for r in runs)),
            })
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| scenario | tool | rounds run | PV loss (all rounds run) | PV loss (first N) | N "
             "| decisions/s | NaN pmfs |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['scenario']} | {r['tool']} | {r['rounds']} | "
            f"{r['pv_loss_mean']:.4f} ± {r['pv_loss_std']:.4f} | "
            f"{r['pv_loss_prefix_mean']:.4f} ± {r['pv_loss_prefix_std']:.4f} | {r['prefix']} | "
            f"{r['decisions_per_s_mean']:,.1f} | {r['invalid_pmf']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def oracle_ablation(seeds: list[int], directory: Path) -> str:
    """The spam stream under full information (every loss revealed, so only the oracles
    differ): PV loss of SquareCB.G over banditflow's linear oracle with and without clipping
    (``rls``; ``sgd`` at learning rate 0.01), and of VW. Markdown table, mean ± std over seeds."""
    from banditflow.learners.graph_cb.oracles import LinearOracle

    spam = next(s for s in SCENARIOS if s.log == "graph_cb-spam")
    log = directory / f"{spam.log}.jsonl"
    if not log.exists():
        LOGS[spam.log](log, spam.rounds, 0)
    records = [{**r, "graph": np.ones((2, 2))} for r in read_log(log, spam.rounds)]
    task = GraphCBTask(records, None)
    unclipped = staticmethod(lambda: (-np.inf, np.inf))
    rows = []
    for update, extra in (("rls", {}), ("sgd", {"learning_rate": 0.01})):
        scenario = replace(spam, params={"update": update, **extra})
        for clipped in (True, False):
            original = LinearOracle.clip_range
            if not clipped:  # the plain square-loss fit, for comparison only
                LinearOracle.clip_range = unclipped  # type: ignore[method-assign,assignment]
            try:
                losses = [run_learner(scenario, task, seed)["pv_loss"] for seed in seeds]
            finally:
                LinearOracle.clip_range = original  # type: ignore[method-assign]
            label = f"banditflow, {update}{' lr 0.01' if extra else ''}, " + (
                "clipped" if clipped else "unclipped")
            rows.append((label, losses))
    try:
        import vowpalwabbit  # noqa: F401
    except ImportError:
        pass
    else:
        rows.append(("vw", [run_vw(spam, task, seed)["pv_loss"] for seed in seeds]))
    lines = ["| oracle (spam, full information, SquareCB.G) | PV loss |", "|---|---|"]
    lines += [f"| {label} | {np.mean(v):.4f} ± {np.std(v):.4f} |" for label, v in rows]
    return "\n".join(lines) + "\n"


def test_banditflow_against_vowpal_wabbit(tmp_path: Path) -> None:
    pytest.importorskip("vowpalwabbit")
    results = compare([0], tmp_path)
    print("\n" + table(results))
    for r in results:
        assert 0.0 <= r["pv_loss_mean"] <= 1.0 and r["decisions_per_s_mean"] > 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--logs", type=Path, help="directory for the logs (default: temporary)")
    parser.add_argument("--oracle-ablation", action="store_true",
                        help="only the full-information oracle comparison on the spam stream")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.logs or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        if args.oracle_ablation:
            print(oracle_ablation(seeds, directory))
            return 0
        results = compare(seeds, directory)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
