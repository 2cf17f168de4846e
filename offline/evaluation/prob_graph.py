"""Evaluating ``prob_graph`` learners on a simulated scenario (stochastic arms, probabilistic
feedback graph).

Input: a scenario file (JSON), ``{"arms": K, "means": [...], "edges": [[i, j, p], ...],
"case": "one_step" | "cascade", "rewards": "gaussian" | "bernoulli"}`` (see
:mod:`banditflow.learners.prob_graph.scenarios`; ``banditflow make-log prob-graph-...`` writes the
report's scenarios). There is no log: ``--horizon T`` context-free rounds are generated, each
round's context carries only the envelope. The learner is configured with the scenario's graph,
case and reward family (never its means). The feedback of a decision is sampled by the
scenario's :class:`banditflow.learners.prob_graph.scenarios.Environment` with the evaluation
engine's
generator: which edges are live (one-step) or which arms a live path reaches (cascade), then the
rewards of the revealed arms, sent as ``{"rewards": {...}, "complete": true}``. With
``--reveal-parts N`` the revealed rewards are split over N events with distinct ``part``
values (``p0``, ``p1``, ...), only the last one ``complete`` - the streaming contract for
partial feedback. Under ``--delay`` each part is delayed independently, so a part that arrives
after the complete marker is rejected (``decision_settled``, counted in ``feedback_rejected``),
as it would be in the worker.

Reported: the pseudo-regret ``R_T = sum_t Delta_{I_t}`` (cumulative in ``trajectory.jsonl``,
one ``{"t", "arm", "regret"}`` line per round), the lower-bound constant ``C*(theta)`` of
:func:`banditflow.learners.prob_graph.lower_bound_constant` (cascade: on a 20,000-sample Monte Carlo
estimate of the reachability ``r``, generator seed 0), ``C*(theta) log T``, ``R_T / log T`` and
``R_T / (C*(theta) log T)``, per-arm pulls and (``lp_policy``) how many rounds each branch
chose.

:func:`aggregate` and :func:`plot_report` turn many runs (``evaluate`` with several learners and
seeds) into the tables and figures of ``docs/results/prob_graph.md``; ``python -m
offline.evaluation.prob_graph report RUNS OUT`` runs them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from banditflow.learners.base import LearnerError
from banditflow.learners.prob_graph.scenarios import Environment, Scenario, parse_scenario
from banditflow.offline.evaluation.replay import LoggedRound

# Monte Carlo samples (and seed) of the reachability estimate behind the cascade case's C*.
CASCADE_BOUND_SAMPLES = 20_000
CASCADE_BOUND_SEED = 0

_BOUNDS: dict[str, tuple[float, list[float]]] = {}


def load_scenario(path: Path) -> Scenario:
    """The validated scenario in ``path``; errors name the file and the bad field."""
    try:
        spec = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SystemExit(f"--scenario {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--scenario {path}: not JSON: {exc}") from None
    try:
        return parse_scenario(spec)
    except (LearnerError, TypeError, ValueError) as exc:
        raise SystemExit(f"--scenario {path}: {exc}") from None


def lower_bound(scenario: Scenario) -> tuple[float, list[float]]:
    """``(C*(theta), c)`` of ``scenario``, cached (the cascade estimate costs a second)."""
    key = json.dumps(scenario.to_dict(), sort_keys=True)
    if key not in _BOUNDS:
        value, allocation = scenario.lower_bound(
            np.random.default_rng(CASCADE_BOUND_SEED), CASCADE_BOUND_SAMPLES
        )
        _BOUNDS[key] = (float(value), allocation.tolist())
    return _BOUNDS[key]


def split_feedback(event: Mapping[str, Any], parts: int) -> list[dict[str, Any]]:
    """``event`` as ``parts`` events with distinct ``part`` values, only the last complete.

    The revealed rewards are dealt round-robin (in arm order); a part may carry no reward.

    >>> split_feedback({"rewards": {"0": 1.0, "2": 0.5, "3": 0.0}, "complete": True}, 2)
    [{'rewards': {'0': 1.0, '3': 0.0}, 'part': 'p0', 'complete': False}, \
{'rewards': {'2': 0.5}, 'part': 'p1', 'complete': True}]
    """
    if parts <= 1:
        return [dict(event)]
    items = sorted(event["rewards"].items(), key=lambda item: int(item[0]))
    return [
        {
            "rewards": dict(items[k::parts]),
            "part": f"p{k}",
            "complete": k == parts - 1,
        }
        for k in range(parts)
    ]


class ProbGraphTask:
    """``horizon`` context-free rounds of a scenario as an evaluation task."""

    family = "prob_graph"

    def truth(self, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        """The truth event a live application sends: the arms' means (exact regret)."""
        return {"arm_means": self.scenario.means.tolist()}

    def __init__(self, scenario: Scenario, horizon: int, reveal_parts: int = 1) -> None:
        if horizon < 2:
            raise SystemExit(f"--horizon must be >= 2 for prob_graph, got {horizon}")
        if reveal_parts < 1:
            raise SystemExit(f"--reveal-parts must be >= 1, got {reveal_parts}")
        self.scenario = scenario
        self.environment = Environment(scenario)
        self.horizon = horizon
        self.reveal_parts = reveal_parts
        self.c_star, self.allocation = lower_bound(scenario)
        self._reset()

    def _reset(self) -> None:
        self.cumulative = 0.0
        self.branches: dict[str, int] = {}

    def rounds(self) -> Iterator[LoggedRound]:
        for t in range(self.horizon):
            yield LoggedRound(f"r{t}", {}, None)

    def feedback(
        self, round_: LoggedRound, output: Mapping[str, Any], rng: np.random.Generator
    ) -> list[dict[str, Any]]:
        event = self.environment.feedback(int(output["arm"]), rng)
        return split_feedback(event, self.reveal_parts)

    def row(self, t: int, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        if t == 0:
            self._reset()
        arm = int(output["arm"])
        self.cumulative += float(self.environment.gaps[arm])
        branch = str(output.get("branch", ""))
        self.branches[branch] = self.branches.get(branch, 0) + 1
        return {"arm": arm, "regret": self.cumulative}

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        rounds = len(rows)
        log_t = math.log(rounds)
        gaps = self.environment.gaps
        pulls = np.bincount([row["arm"] for row in rows], minlength=self.scenario.arms)
        regret = float(pulls @ gaps)  # the same sum as rows[-1]["regret"], without rounding drift
        return {
            "rounds": rounds,
            "regret": regret,
            "c_star": self.c_star,
            "c_star_log_t": self.c_star * log_t,
            "regret_over_log_t": regret / log_t,
            # None when C* = 0 (the best arm informs itself, e.g. cascades through a cycle).
            "regret_over_c_star_log_t": (
                regret / (self.c_star * log_t) if self.c_star > 1e-9 else None
            ),
            "best_arm_share": float(pulls[int(np.argmin(gaps))] / rounds),
            "arm_pulls": pulls.tolist(),
            "lp_allocation": self.allocation,
            "branches": dict(sorted(self.branches.items())),
            "scenario": {
                "arms": self.scenario.arms,
                "case": self.scenario.setting.case,
                "rewards": self.scenario.setting.rewards,
            },
        }

    def curves(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Cumulative regret and regret / log t (``C*`` is the latter's limit for the best)."""
        regret = np.array([row["regret"] for row in rows])
        t = np.arange(1, len(rows) + 1)
        ratio = np.divide(regret, np.log(t), out=np.zeros_like(regret), where=t > 1)
        return {"cumulative regret": regret, "regret / log t": ratio}


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--scenario",
        type=Path,
        help="prob_graph: scenario JSON {arms, means, edges, case, rewards} "
        "(make-log prob-graph-* writes some); needs --horizon",
    )
    group.add_argument(
        "--reveal-parts",
        type=int,
        default=1,
        help="prob_graph: split each decision's revealed rewards over N feedback events "
        "(distinct parts, the last one complete; default 1)",
    )


def build(
    args: argparse.Namespace, seed: int
) -> tuple[ProbGraphTask, Callable[[str], dict[str, Any]]]:
    if args.scenario is None:
        raise SystemExit("--family prob_graph needs --scenario FILE")
    if args.horizon is None:
        raise SystemExit("--family prob_graph needs --horizon T (rounds are generated)")
    scenario = load_scenario(args.scenario)
    task = ProbGraphTask(scenario, args.horizon, args.reveal_parts)

    def params_for(algorithm: str) -> dict[str, Any]:
        return scenario.learner_params()

    return task, params_for


# ---------------------------------------------------------------------------- direct runs
def simulate_run(
    scenario: Scenario,
    algorithm: str,
    horizon: int,
    seed: int,
    params: Mapping[str, Any] | None = None,
    label: str | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The learner alone (no processors, no JSON): rows and summary as ``evaluate`` writes them.

    Same learner code and feedback model as :func:`banditflow.offline.evaluation.replay.replay`
    with no
    delay (feedback applied before the next round), but several times faster; the random
    streams differ (the learner and the environment draw from two children of ``seed``, as in
    :func:`banditflow.learners.prob_graph.scenarios.simulate`), so runs agree in distribution, not
    draw
    by draw. ``params`` adds learner parameters; ``label`` names the run (default: algorithm).
    """
    from banditflow.learners.prob_graph import ALGORITHMS

    learner = ALGORITHMS[algorithm].from_params({**scenario.learner_params(), **(params or {})})
    learner_rng, environment_rng = (
        np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(2)
    )
    task = ProbGraphTask(scenario, horizon)
    rows = []
    for t, round_ in enumerate(task.rounds()):
        decided = learner.decide(round_.context, learner_rng)
        rows.append({"t": t, **task.row(t, round_, decided.output)})
        event = task.environment.feedback(int(decided.output["arm"]), environment_rng)
        learner.learn(decided.pending, event)
    summary = {
        "family": "prob_graph",
        "learner": label or algorithm,
        "algorithm": algorithm,
        "params": dict(params or {}),
        "seed": seed,
        "driver": "direct (learner only, no processors)",
        **task.summary(rows),
    }
    return rows, summary


def parse_seeds(text: str) -> list[int]:
    """``"0-9"`` or ``"0,3,5"`` as a list of seeds."""
    if "-" in text:
        low, high = text.split("-", 1)
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",") if s.strip()]


# ---------------------------------------------------------------------------- report
def read_curve(directory: Path, points: np.ndarray) -> np.ndarray:
    """The cumulative regret of one run (its ``trajectory.jsonl``) at rounds ``points``."""
    regret = []
    with open(directory / "trajectory.jsonl") as lines:
        for line in lines:
            regret.append(json.loads(line)["regret"])
    series = np.asarray(regret)
    return series[np.minimum(points, len(series)) - 1]


def aggregate(root: Path, points: int = 200, at: Sequence[int] = ()) -> dict[str, Any]:
    """Summaries and regret curves of the runs under ``root/<scenario>/`` (any depth).

    Returns ``{scenario: {"c_star", "horizon", "t": [...], "learners": {learner: {"regret":
    [per seed], "curve_mean", "curve_low", "curve_high", ...}}}}`` with curves sampled at
    ``points`` log-spaced rounds; ``"regret_at"`` maps each round of ``at`` (as a string) to
    each seed's regret after it (or after its last round if shorter).
    """
    result: dict[str, Any] = {}
    for scenario_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = sorted(summary.parent for summary in scenario_dir.rglob("summary.json"))
        if not runs:
            continue
        first = json.loads((runs[0] / "summary.json").read_text())
        horizon = int(first["rounds"])
        t = np.unique(np.geomspace(1, horizon, points).round().astype(int))
        t = np.unique(np.append(t, [min(a, horizon) for a in at])).astype(int)
        learners: dict[str, Any] = {}
        for run in runs:
            summary = json.loads((run / "summary.json").read_text())
            entry = learners.setdefault(summary["learner"], {"seeds": [], "regret": [],
                                                             "curves": []})
            entry["seeds"].append(summary["seed"])
            entry["regret"].append(summary["regret"])
            entry["curves"].append(read_curve(run, t))
        for entry in learners.values():
            curves = np.vstack(entry.pop("curves"))
            entry["curve_mean"] = curves.mean(axis=0).tolist()
            entry["curve_low"] = np.quantile(curves, 0.1, axis=0).tolist()
            entry["curve_high"] = np.quantile(curves, 0.9, axis=0).tolist()
            regret = np.asarray(entry["regret"])
            entry["mean"] = float(regret.mean())
            entry["regret_at"] = {
                str(a): curves[:, int(np.searchsorted(t, min(a, horizon)))].tolist() for a in at
            }
            entry["std"] = float(regret.std(ddof=1)) if regret.size > 1 else 0.0
        result[scenario_dir.name] = {
            "c_star": first["c_star"],
            "horizon": horizon,
            "arms": first["scenario"]["arms"],
            "case": first["scenario"]["case"],
            "rewards": first["scenario"]["rewards"],
            "t": t.tolist(),
            "learners": learners,
        }
    return result


def regret_table(results: Mapping[str, Any], learners: Sequence[str]) -> str:
    """Markdown: per scenario, ``C* log T`` and each learner's mean ± std regret over seeds."""
    header = "| scenario | K | case | T | seeds | C*(theta) | C* log T | " + " | ".join(
        f"{name} R_T" for name in learners
    ) + " | " + " | ".join(f"{name} R_T/(C* log T)" for name in learners) + " |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for name, result in results.items():
        log_t = math.log(result["horizon"])
        reference = result["c_star"] * log_t
        cells, ratios = [], []
        seeds = 0
        for learner in learners:
            entry = result["learners"].get(learner)
            if entry is None:
                cells.append("n/a")
                ratios.append("n/a")
                continue
            seeds = max(seeds, len(entry["regret"]))
            cells.append(f"{entry['mean']:.1f} ± {entry['std']:.1f}")
            ratios.append(f"{entry['mean'] / reference:.2f}" if reference > 1e-9 else "-")
        lines.append(
            f"| {name} | {result['arms']} | {result['case']} | {result['horizon']} | {seeds} | "
            f"{result['c_star']:.2f} | {reference:.1f} | " + " | ".join(cells) + " | "
            + " | ".join(ratios) + " |"
        )
    return "\n".join(lines) + "\n"


def at_table(results: Mapping[str, Any], learners: Sequence[str], at: int) -> str:
    """Markdown: each learner's mean ± std regret after round ``at``, per scenario."""
    lines = [
        "| scenario | " + " | ".join(f"{name} R_{at}" for name in learners) + " |",
        "|---|" + "---|" * len(learners),
    ]
    for name, result in results.items():
        cells = []
        for learner in learners:
            entry = result["learners"].get(learner)
            if entry is None or str(at) not in entry.get("regret_at", {}):
                cells.append("n/a")
                continue
            values = np.asarray(entry["regret_at"][str(at)])
            spread = values.std(ddof=1) if values.size > 1 else 0.0
            cells.append(f"{values.mean():.1f} ± {spread:.1f} ({values.size})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_report(results: Mapping[str, Any], out: Path) -> list[Path]:
    """One PNG per scenario: mean cumulative regret (10-90% band over seeds) of each learner
    against ``C*(theta) log t``, linear and log-x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, result in results.items():
        t = np.asarray(result["t"])
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, log_x in zip(axes, (False, True), strict=True):
            for learner, entry in sorted(result["learners"].items()):
                (line,) = ax.plot(
                    t, entry["curve_mean"], label=f"{learner} ({len(entry['regret'])} seeds)"
                )
                ax.fill_between(
                    t, entry["curve_low"], entry["curve_high"], alpha=0.15, color=line.get_color()
                )
            ax.plot(t, result["c_star"] * np.log(t), "k--", label="C*(theta) log t")
            if log_x:
                ax.set_xscale("log")
            ax.set_xlabel("t (log scale)" if log_x else "t")
            ax.set_ylabel("cumulative regret")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(
            f"{name}: K={result['arms']}, {result['case']}, {result['rewards']}, "
            f"C*={result['c_star']:.2f}"
        )
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m offline.evaluation.prob_graph report RUNS OUT`` (table, JSON and PNGs) or
    ``... simulate --scenario FILE --horizon T --out DIR`` (direct runs)."""
    parser = argparse.ArgumentParser(prog="python -m offline.evaluation.prob_graph")
    sub = parser.add_subparsers(dest="command", required=True)
    report = sub.add_parser("report", help="aggregate RUNS/<scenario>/<learner>-seed<S>/ runs")
    report.add_argument("runs", type=Path)
    report.add_argument("out", type=Path)
    report.add_argument("--learners", default="lp_policy,ucb_n,thompson")
    report.add_argument(
        "--at", default="", help="also tabulate the mean regret after these rounds, e.g. 1000,10000"
    )
    direct = sub.add_parser(
        "simulate", help="direct runs (learner only) into OUT/<learner>-seed<S>/ (see simulate_run)"
    )
    direct.add_argument("--scenario", type=Path, required=True)
    direct.add_argument("--learners", default="lp_policy,ucb_n,thompson")
    direct.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,1,2")
    direct.add_argument("--horizon", type=int, required=True)
    direct.add_argument("--out", type=Path, required=True)
    direct.add_argument(
        "--param", action="append", default=[], metavar="NAME=JSON", help="learner parameter"
    )
    direct.add_argument("--label", help="run name instead of the algorithm (one learner)")
    args = parser.parse_args(argv)
    if args.command == "simulate":
        from banditflow.offline.evaluation import parse_params

        scenario = load_scenario(args.scenario)
        params = parse_params(args.param)
        for algorithm in [name for name in args.learners.split(",") if name]:
            label = args.label or algorithm
            for seed in parse_seeds(args.seeds):
                rows, summary = simulate_run(
                    scenario, algorithm, args.horizon, seed, params, label
                )
                directory = args.out / f"{label}-seed{seed}"
                directory.mkdir(parents=True, exist_ok=True)
                (directory / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
                with open(directory / "trajectory.jsonl", "w") as out:
                    out.writelines(json.dumps(row) + "\n" for row in rows)
                print(f"{args.out.name} {label} seed {seed}: regret {summary['regret']:.1f}",
                      file=sys.stderr, flush=True)
        return 0
    rounds = [int(a) for a in args.at.split(",") if a.strip()]
    results = aggregate(args.runs, at=rounds)
    learners = [name for name in args.learners.split(",") if name]
    args.out.mkdir(parents=True, exist_ok=True)
    plot_report(results, args.out)
    table = regret_table(results, learners)
    for at in rounds:
        table += f"\nMean regret after round {at} (all seeds):\n\n" + at_table(
            results, learners, at
        )
    compact = {
        name: {
            **{k: v for k, v in result.items() if k not in ("t", "learners")},
            "learners": {
                learner: {
                    k: entry[k] for k in ("seeds", "regret", "mean", "std", "regret_at")
                    if k in entry
                }
                for learner, entry in result["learners"].items()
            },
        }
        for name, result in results.items()
    }
    (args.out / "results.json").write_text(json.dumps(compact, indent=2) + "\n")
    (args.out / "regret_table.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
