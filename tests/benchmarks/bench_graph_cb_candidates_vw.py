"""Head-to-head on candidate sets with item features: banditflow's graph_cb learners in their
candidate-set form (``action_features``) against Vowpal Wabbit's ``--cb_explore_adf``, on the
very same stream and seeds.

The stream is :class:`banditflow.offline.candidate_task.CandidateTask`: a catalogue of 1,000
items (5 features each), 5 to 50 of them offered per request to a user (5 features), a hidden
preference over (user, item) features, Bernoulli losses; the last 20 % of the catalogue is
released only at 3/4 of the stream. Two tasks:

* **bandit**: banditflow ``squarecb`` against VW ``--cb_explore_adf --squarecb``; the played
  candidate's loss is all either sees (VW's label carries the played probability, as VW
  expects), 10^4 rounds;
* **graph**: a random self-aware feedback graph over each request's candidates (playing i
  reveals i and each other with probability ``GRAPH_EDGE``): banditflow ``squarecb_g`` against
  VW ``--cb_explore_adf --graph_feedback`` (its SquareCB.G; every revealed loss a label
  ``0:loss:1``, the graph sent transposed, see ``bench_graph_cb_vw.vw_graph``). VW's graph
  solver is slow in the pip build, so it runs as many rounds as it finishes within
  ``--vw-budget`` seconds (600 in ``make bench``) and banditflow is compared on those rounds.

Both tools get the same gamma schedule, gamma = 10 n^0.5 (banditflow ``gamma_schedule: vw``,
VW's default ``--gamma_scale 10 --gamma_exponent 0.5``), and VW the shared x item interactions
(``-q sa``) that banditflow's pair features hold. Oracles differ (banditflow: recursive least
squares on the pair features; VW: its adaptive, normalised SGD), so the losses compare the
whole systems.

What each tool's clock covers (wall clock of the learning loop, both in this process, on the
same pre-built requests; JSON decoding of a record is in neither):

* banditflow: per round, the worker's per-event generator (``LazyGenerator``), ``decide`` on the
  context as the application sends it (validating and converting the candidate set, scoring,
  p, the draw, the output and pending state), the feedback as the application sends it
  (losses keyed by item id) and ``learn`` (validating it, the oracle's update);
* VW: per round, writing the context as VW text (once: the learn example is the same lines
  with the played line's label), VW parsing it, ``predict``, the draw from its pmf and
  ``learn`` (a service in front of VW must write and VW must parse every example).

Each tool runs ``--repeats`` times per seed, alternating (VW, banditflow, VW, ...), so a load
that comes and goes on the shared machine falls on both; decisions/s are the medians, beside
the process CPU time's rate (less sensitive to other processes) and the 1-minute load
average around the runs.

Reported per task and tool: progressive loss (mean drawn loss of the played candidates) at
checkpoints, mean regret (mean loss of the played candidate minus the best's), decisions/s,
and the mean regret on the rounds whose best candidate is an item released late (never
offered before its release): how each scores items first seen late.

Run: ``make bench`` (pytest -s: the full sizes), or ``python
tests/benchmarks/bench_graph_cb_candidates_vw.py [--rounds N] [--vw-budget S] [--seeds 0,1]``.
Where a round's time goes: ``--steps`` (CPU time of each step) and ``--instructions 1000``
(instructions per round, counted by valgrind: the measure to compare two versions of the code
by on a machine whose clock is shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from banditflow.learners.registry import make_learner
from banditflow.offline.candidate_task import CandidateTask, Request
from banditflow.processors.redo import LazyGenerator
from tests.benchmarks.bench_graph_cb_vw import vw_graph

GAMMA_SCALE = 10.0
GRAPH_EDGE = 0.1
CHECKPOINTS = (1_000, 2_000, 5_000, 10_000)


def task_for(kind: str, rounds: int, seed: int) -> CandidateTask:
    return CandidateTask(seed=seed, rounds=rounds,
                         graph_edge=GRAPH_EDGE if kind == "graph" else 0.0)


def record(played: list[int], requests: list[Request], clock: Clock) -> dict[str, Any]:
    """Progressive loss at checkpoints, regret, decisions/s and late items' regret."""
    losses = np.array([r.losses[a] for r, a in zip(requests, played, strict=False)])
    regret = np.array([r.means[a] - r.means.min() for r, a in zip(requests, played, strict=False)])
    late = np.array([bool(r.late[r.best]) for r in requests[: len(played)]])
    return {
        "rounds": len(played),
        "progressive_loss": float(losses.mean()),
        "at": {n: float(losses[:n].mean()) for n in CHECKPOINTS if n <= len(played)},
        "regret": float(regret.mean()),
        "late_regret": float(regret[late].mean()) if late.any() else float("nan"),
        "late_rounds": int(late.sum()),
        "decisions_per_s": len(played) / clock.wall,
        "cpu_decisions_per_s": len(played) / clock.cpu,
        "load": clock.load,
    }


class Clock:
    """Wall and process CPU time of a block, and the 1-minute load average at its end."""

    def __enter__(self) -> Clock:
        self.started = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall = time.perf_counter() - self.started[0]
        self.cpu = time.process_time() - self.started[1]
        self.load = os.getloadavg()[0]

    def elapsed(self) -> float:
        return time.perf_counter() - self.started[0]


def banditflow_learner(kind: str, task: CandidateTask) -> Any:
    algorithm = "squarecb_g" if kind == "graph" else "squarecb"
    return make_learner("graph_cb", algorithm, {
        **task.params, "update": "rls", "gamma_schedule": "vw", "gamma_scale": GAMMA_SCALE})


def play(learner: Any, task: CandidateTask, requests: list[Request], seed: int,
         first: int = 0) -> list[int]:
    """banditflow's rounds ``first``, ``first + 1``, ... on ``requests``: the actions played."""
    played = []
    for t, request in enumerate(requests, start=first):
        decided = learner.decide(request.context, LazyGenerator(seed, f"r{t}"))
        action = decided.output["action"]
        learner.learn(decided.pending, {"losses": task.feedback(request, action)})
        played.append(action)
    return played


def run_banditflow(kind: str, task: CandidateTask, requests: list[Request],
                   seed: int) -> dict[str, Any]:
    learner = banditflow_learner(kind, task)
    with Clock() as clock:
        played = play(learner, task, requests, seed)
    return record(played, requests, clock)


def vw_lines(request: Request) -> list[str]:
    """The request as a VW ADF example, shared line first, without labels."""
    user = " ".join(f"u{i}:{v:g}" for i, v in enumerate(request.context["features"]))
    graph = "" if request.graph is None else f"graph {vw_graph(request.graph)} "
    lines = [f"shared {graph}|s {user}"]
    for action in request.context["actions"]:
        lines.append("|a " + " ".join(f"i{i}:{v:g}" for i, v in enumerate(action["features"])))
    return lines


def run_vw(kind: str, task: CandidateTask, requests: list[Request], seed: int,
           budget: float) -> dict[str, Any]:
    import vowpalwabbit

    explore = "--graph_feedback" if kind == "graph" else "--squarecb"
    workspace = vowpalwabbit.Workspace(
        f"--cb_explore_adf {explore} --gamma_scale {GAMMA_SCALE} -q sa --random_seed {seed} "
        "--quiet", enable_logging=False)
    rng = np.random.default_rng([seed, 0x77])
    played = []
    with Clock() as clock:
        for request in requests:
            if clock.elapsed() > budget:
                break
            lines = vw_lines(request)
            pmf = np.asarray(workspace.predict(lines), dtype=float)
            if not np.all(np.isfinite(pmf)) or pmf.sum() <= 0.0:
                pmf = np.ones(len(request.items))  # (never seen here; played uniformly if so)
            action = int(rng.choice(len(pmf), p=pmf / pmf.sum()))
            if request.graph is None:
                labels = {action: f"0:{request.losses[action]:g}:{pmf[action] / pmf.sum():g} "}
            else:
                labels = {int(j): f"0:{request.losses[j]:g}:1 "
                          for j in np.flatnonzero(request.graph[action] > 0)}
            for j, label in labels.items():  # (line 0 is the shared one)
                lines[j + 1] = label + lines[j + 1]
            workspace.learn(lines)
            played.append(action)
    workspace.finish()
    return record(played, requests, clock)


TOOLS = ("vw", "banditflow_at_vw_rounds", "banditflow")


def compare(kind: str, rounds: int, seeds: list[int], vw_budget: float,
            repeats: int) -> list[dict[str, Any]]:
    """Per seed and repeat: VW first (its budget may cut the stream), then banditflow on the
    whole stream and on VW's rounds. Losses are the first repeat's (every repeat plays the
    same rounds: both tools are deterministic given the seed); rates are medians."""
    rows = []
    for seed in seeds:
        task = task_for(kind, rounds, seed)
        requests = [task.request(t) for t in range(rounds)]
        runs: dict[str, list[dict[str, Any]]] = {tool: [] for tool in TOOLS}
        for _ in range(repeats):
            vw = run_vw(kind, task, requests, seed, vw_budget)
            runs["vw"].append(vw)
            runs["banditflow"].append(run_banditflow(kind, task, requests, seed))
            runs["banditflow_at_vw_rounds"].append(
                run_banditflow(kind, task, requests[: vw["rounds"]], seed))
        row: dict[str, Any] = {"task": kind, "seed": seed, "repeats": repeats}
        for tool, results in runs.items():
            row[tool] = {**results[0], **{
                name: float(np.median([r[name] for r in results]))
                for name in ("decisions_per_s", "cpu_decisions_per_s")},
                "load": [r["load"] for r in results]}
        rows.append(row)
    return rows


def rate(per_s: float) -> str:
    """Decisions/s, with decimals when there is less than one a second (VW's graph solver)."""
    return f"{per_s:,.0f}" if per_s >= 10 else f"{per_s:.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| task | seed | tool | rounds | progressive loss | at 1k / 2k / 5k / 10k | regret "
             "| late items' regret (rounds) | decisions/s (median) | CPU decisions/s | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for tool in TOOLS:
            r = row[tool]
            at = " / ".join(f"{r['at'][n]:.4f}" if n in r["at"] else "-" for n in CHECKPOINTS)
            load = ", ".join(f"{v:.1f}" for v in r["load"])
            lines.append(
                f"| {row['task']} | {row['seed']} | {tool} | {r['rounds']:,} | "
                f"{r['progressive_loss']:.4f} | {at} | {r['regret']:.4f} | "
                f"{r['late_regret']:.4f} ({r['late_rounds']}) | {rate(r['decisions_per_s'])} | "
                f"{rate(r['cpu_decisions_per_s'])} | {load} |")
    return "\n".join(lines) + "\n"


def summary(rows: list[dict[str, Any]]) -> str:
    """Medians over seeds of the ratios the issue's target names: banditflow's progressive
    loss over VW's (on VW's rounds), and banditflow's decisions/s over VW's (wall clock, and
    process CPU time)."""
    out = []
    for kind in sorted({r["task"] for r in rows}):
        mine = [r for r in rows if r["task"] == kind]
        loss = [r["banditflow_at_vw_rounds"]["progressive_loss"] / r["vw"]["progressive_loss"]
                for r in mine]
        speed = [r["banditflow"]["decisions_per_s"] / r["vw"]["decisions_per_s"] for r in mine]
        cpu = [r["banditflow"]["cpu_decisions_per_s"] / r["vw"]["cpu_decisions_per_s"]
               for r in mine]
        out.append(f"{kind}: progressive loss banditflow / VW at equal rounds, median "
                   f"{np.median(loss):.3f} (target <= 1.05); decisions/s banditflow / VW, "
                   f"median {np.median(speed):.2f}x (target >= 10x; CPU time: "
                   f"{np.median(cpu):.2f}x)")
    return "\n".join(out) + "\n"


# Its own timeout: VW's graph run alone may take its 600 s budget and one more decision past
# it (a single graph_feedback decision took 45-60 s here), beyond pytest's default 600 s.
@pytest.mark.timeout(1800)
def test_candidate_sets_against_vowpal_wabbit() -> None:
    pytest.importorskip("vowpalwabbit")
    rows = compare("bandit", 10_000, [0], vw_budget=600.0, repeats=3)
    rows += compare("graph", 10_000, [0], vw_budget=600.0, repeats=1)
    print("\n" + table(rows) + summary(rows))
    for row in rows:
        for tool in ("vw", "banditflow"):
            assert 0.0 <= row[tool]["progressive_loss"] <= 1.0
            assert row[tool]["decisions_per_s"] > 0


def round_steps(candidates: int = 27, seed: int = 0) -> list[tuple[str, float]]:
    """CPU µs of each step of a banditflow round (the minimum of 7 x 3,000 calls, process
    CPU clock) on the first request with ``candidates`` candidates after 1,500 rounds of the
    bandit task: the table in docs/results/graph_cb_candidates.md."""
    import timeit

    task = task_for("bandit", 2_000, seed)
    requests = [task.request(t) for t in range(2_000)]
    learner = make_learner("graph_cb", "squarecb", {
        **task.params, "update": "rls", "gamma_schedule": "vw", "gamma_scale": GAMMA_SCALE})
    for t, request in enumerate(requests[:1_500]):
        decided = learner.decide(request.context, LazyGenerator(seed, f"r{t}"))
        learner.learn(decided.pending,
                      {"losses": task.feedback(request, decided.output["action"])})
    request = next(r for r in requests[1_500:] if len(r.context["actions"]) == candidates)
    context, form, oracle = request.context, learner.form, learner.oracle
    shared, offered = form.shared(context["features"]), form.offered(context["actions"])
    graph = learner.event_graph(None, candidates)
    fhat = oracle.predict_pairs(shared, offered.features)
    decided = learner.decide(context, LazyGenerator(seed, "step"))
    feedback = {"losses": task.feedback(request, decided.output["action"])}
    played = np.asarray(decided.pending["candidates"][0], dtype=float)
    steps = {
        "the generator's draw (`LazyGenerator(...).random()`)":
            lambda: LazyGenerator(seed, "step").random(),
        "`decide` (with its generator)": lambda: learner.decide(context,
                                                                LazyGenerator(seed, "step")),
        "- shared features validated": lambda: form.shared(context["features"]),
        "- candidate set validated and converted (`CandidateForm.offered`)":
            lambda: form.offered(context["actions"]),
        "- the bandit graph over the set": lambda: learner.event_graph(None, candidates),
        "- scores (`predict_pairs`)": lambda: oracle.predict_pairs(shared, offered.features),
        "- SquareCB's p, its dec and the drawn action (`decision`, with its generator)":
            lambda: learner.decision(fhat, graph, GAMMA_SCALE, LazyGenerator(seed, "step")),
        "`learn`": lambda: learner.learn(decided.pending, feedback),
        "- feedback validated": lambda: learner._revealed_losses(decided.pending, feedback),
        "- RLS on the played pair (`update_pair`)": lambda: oracle.update_pair(shared, played,
                                                                                0.5),
    }
    return [(name, min(timeit.repeat(step, number=3_000, repeat=7, timer=time.process_time))
             / 3_000 * 1e6) for name, step in steps.items()]


def instructions_per_round(rounds: int = 1_000, seed: int = 0) -> float:
    """Instructions a banditflow round of the bandit task executes (generator, decide, the
    feedback, learn), counted by valgrind's callgrind over ``rounds`` rounds that follow as
    many uncounted ones: within 1 % run after run, where the clock of a shared machine
    moves by a third (needs valgrind, Debian's ``valgrind``). The two ``callgrind_control``
    calls that open and close the window are counted too, under 0.5 % of it."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                        f"--callgrind-out-file={out}", sys.executable, __file__,
                        "--instruction-window", str(rounds), "--seeds", str(seed)],
                       check=True, capture_output=True)
        totals = next(line for line in out.read_text().splitlines()
                      if line.startswith("totals:"))
    return int(totals.split()[1]) / rounds


def instruction_window(rounds: int, seed: int) -> None:
    """(Run by :func:`instructions_per_round`, inside valgrind.) ``2 rounds`` rounds of the
    bandit task, callgrind's instrumentation on for the second half only."""
    import subprocess

    task = task_for("bandit", 2 * rounds, seed)
    requests = [task.request(t) for t in range(2 * rounds)]
    learner = banditflow_learner("bandit", task)
    play(learner, task, requests[:rounds], seed)
    control = ["callgrind_control", "-i"]
    subprocess.run([*control, "on", str(os.getpid())], check=True, capture_output=True)
    play(learner, task, requests[rounds:], seed, first=rounds)
    subprocess.run([*control, "off", str(os.getpid())], check=True, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--vw-budget", type=float, default=600.0,
                        help="seconds VW may take on a stream (default: %(default)s)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--task", choices=("bandit", "graph", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=3,
                        help="alternating runs of each tool per seed (default: %(default)s)")
    parser.add_argument("--steps", action="store_true",
                        help="instead: the CPU time of each step of a round (27 candidates)")
    parser.add_argument("--instructions", type=int, metavar="ROUNDS",
                        help="instead: instructions per banditflow round of the bandit task, "
                        "over ROUNDS rounds after as many more (valgrind)")
    parser.add_argument("--instruction-window", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.instruction_window:
        instruction_window(args.instruction_window, int(args.seeds))
        return 0
    if args.instructions:
        per_round = instructions_per_round(args.instructions, int(args.seeds))
        print(f"{per_round:,.0f} instructions per round (seed {args.seeds}, "
              f"{args.instructions} rounds after {args.instructions})")
        return 0
    if args.steps:
        print("| step (27 candidates) | CPU µs |\n|---|---|")
        for name, micros in round_steps():
            print(f"| {name} | {micros:.1f} |")
        return 0
    seeds = [int(s) for s in args.seeds.split(",")]
    kinds = ("bandit", "graph") if args.task == "both" else (args.task,)
    rows = [row for kind in kinds
            for row in compare(kind, args.rounds, seeds, args.vw_budget, args.repeats)]
    print(table(rows) + summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
