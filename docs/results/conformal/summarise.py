"""Tables and comparison plots of docs/results/conformal.md from ``banditflow evaluate`` runs.

Reads ``RUNS/main/<task>/<learner>-seed<k>/{summary.json,trajectory.jsonl}`` (and
``RUNS/scale/...``) written by docs/results/conformal.sh, and writes ``OUT/tables.md`` and one
PNG per task, ``OUT/<task>.png``: cumulative regret (log scale, as in the paper's Figure 1),
running coverage rate (Figure 2), cumulative undercoverage count (Figure 3) and running mean
set size; mean over seeds with a 95% confidence band (t-interval over the seeds).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

TASKS = ("digits", "retrieval", "auction")
LEARNERS = ("sps", "greedy", "aci", "dlr", "etc", "con_etc")
COLUMNS = (
    ("coverage", "coverage", "{:.4f}"),
    ("undercoverage_count", "undercoverage count", "{:.0f}"),
    ("regret", "final regret", "{:.1f}"),
    ("mean_set_size", "mean set size", "{:.3f}"),
)
T_975 = 2.262  # Student t, 9 degrees of freedom (10 seeds)


def load_runs(directory: Path) -> dict[str, list[tuple[dict[str, Any], list[dict[str, Any]]]]]:
    """learner -> [(summary, trajectory rows)] sorted by seed."""
    runs: dict[str, list[tuple[dict[str, Any], list[dict[str, Any]]]]] = {}
    for run in sorted(directory.glob("*-seed*")):
        summary = json.loads((run / "summary.json").read_text())
        rows = [json.loads(line) for line in (run / "trajectory.jsonl").read_text().splitlines()]
        runs.setdefault(summary["learner"], []).append((summary, rows))
    for learner in runs:
        runs[learner].sort(key=lambda pair: pair[0]["seed"])
    return runs


def cell(values: list[float], fmt: str) -> str:
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(np.mean(values))} ± {fmt.format(np.std(values))}"


def table(runs: dict[str, list[tuple[dict[str, Any], list[dict[str, Any]]]]],
          label: dict[str, str] | None = None) -> str:
    lines = [
        "| learner | seeds | " + " | ".join(title for _, title, _ in COLUMNS)
        + " | final threshold (median) |",
        "|---|---|" + "---|" * (len(COLUMNS) + 1),
    ]
    for learner, pairs in runs.items():
        cells = [cell([s[key] for s, _ in pairs], fmt) for key, _, fmt in COLUMNS]
        finals = [s["final_threshold"] for s, _ in pairs]
        finite = [f for f in finals if f is not None]
        final = f"{np.median(finite):.4g}" if finite else "none"
        if len(finite) < len(finals):  # null: the full set (or, for ACI, the empty set)
            final += f" ({len(finals) - len(finite)} null)"
        name = (label or {}).get(learner, learner)
        lines.append(f"| {name} | {len(pairs)} | " + " | ".join(cells) + f" | {final} |")
    return "\n".join(lines) + "\n"


def curves(log: Path, pairs: list[tuple[dict[str, Any], list[dict[str, Any]]]],
           target_coverage: float) -> dict[str, np.ndarray]:
    """Per-seed series (seeds x T) of the four panels."""
    from banditflow.offline.evaluation.conformal import ConformalTask, read_log

    task = ConformalTask(read_log(log), target_coverage)
    out: dict[str, list[np.ndarray]] = {}
    for _, rows in pairs:
        series = task.curves(rows)
        under = np.cumsum([r["threshold"] is not None and r["threshold"] > task.tau_star
                           for r in rows])
        for name, values in (("cumulative regret", series["cumulative regret"]),
                             ("coverage rate", series["coverage (running)"]),
                             ("undercoverage count", under),
                             ("mean set size", series["set size (running mean)"])):
            out.setdefault(name, []).append(np.asarray(values, dtype=float))
    return {name: np.vstack(values) for name, values in out.items()}


def plot(path: Path, title: str, per_learner: dict[str, dict[str, np.ndarray]],
         target_coverage: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(next(iter(per_learner.values())))
    fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names), 3.8))
    for ax, name in zip(axes, names, strict=True):
        for learner, series in per_learner.items():
            values = series[name]
            t = np.arange(1, values.shape[1] + 1)
            mean = values.mean(axis=0)
            half = T_975 * values.std(axis=0, ddof=1) / np.sqrt(len(values)) if len(values) > 1 \
                else np.zeros_like(mean)
            (line,) = ax.plot(t, mean, label=learner, linewidth=1.3)
            ax.fill_between(t, mean - half, mean + half, alpha=0.18, color=line.get_color())
        if name == "cumulative regret":
            ax.set_yscale("symlog", linthresh=1.0)
        if name == "coverage rate":
            ax.axhline(target_coverage, color="black", linestyle=":", linewidth=1)
            ax.set_ylim(max(0.0, ax.get_ylim()[0]), 1.005)
        ax.set_title(name)
        ax.set_xlabel("t")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/conformal"))
    parser.add_argument("--out", type=Path, default=Path("docs/results/conformal"))
    parser.add_argument("--target-coverage", type=float, default=0.9)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = []
    for task in TASKS:
        directory = args.runs / "main" / task
        if not directory.exists():
            continue
        runs = load_runs(directory)
        runs = {name: runs[name] for name in LEARNERS if name in runs}
        tau_star = next(iter(runs.values()))[0][0]["tau_star"]
        parts.append(f"### {task} (tau* = {tau_star:.4g})\n\n{table(runs)}")
        coverage = args.target_coverage
        per_learner = {name: curves(args.runs / "logs" / f"{task}.jsonl", pairs, coverage)
                       for name, pairs in runs.items()}
        plot(args.out / f"{task}.png", f"{task}: target coverage {coverage}, mean and 95% CI "
             f"over {len(next(iter(runs.values())))} seeds", per_learner, coverage)
    scale = args.runs / "scale"
    if scale.exists():
        rows: dict[str, list[tuple[dict[str, Any], list[dict[str, Any]]]]] = {}
        for task in ("digits", "digits-softmax", "retrieval", "auction"):
            main_runs = load_runs(args.runs / "main" / task) if (args.runs / "main" / task
                                                                 ).exists() else {}
            if "dlr" in main_runs:
                rows[f"{task}: dlr lr=1 (default)"] = main_runs["dlr"]
            for directory in sorted(scale.glob(f"{task}-lr*")) + (
                [scale / task] if (scale / task).exists() else []
            ):
                for learner, pairs in load_runs(directory).items():
                    lr = pairs[0][0]["params"].get("lr", 1.0)
                    suffix = " (default)" if lr == 1.0 else ""
                    rows[f"{task}: {learner}" + (f" lr={lr:g}{suffix}" if learner == "dlr"
                                                 else "")] = pairs
        parts.append("### DLR and the score scale\n\n" + table(rows))
    beyond = args.runs / "beyond"
    if beyond.exists():
        rows = {}
        if (args.runs / "main" / "digits").exists():
            rows["sps fixed T=10^4, no delay (main run)"] = load_runs(
                args.runs / "main" / "digits")["sps"]
        labels = {
            "fixed-delayed": "sps fixed T=10^4, delay Poisson(100), 3% lost",
            "anytime256": "sps anytime, max_values=256, no delay",
            "anytime256-delayed": "sps anytime, max_values=256, delay Poisson(100), 3% lost",
        }
        for directory in sorted(p for p in beyond.iterdir() if p.is_dir()):
            for _, pairs in load_runs(directory).items():
                rows[labels.get(directory.name, directory.name)] = pairs
        lost = {name: np.mean([s["feedback_lost"] for s, _ in pairs])
                for name, pairs in rows.items()}
        parts.append("### digits: delayed and lost feedback, anytime schedule with bounded "
                     "memory\n\n" + table(rows) + "\nMean feedback lost per run: "
                     + ", ".join(f"{name}: {value:.0f}" for name, value in lost.items()) + "\n")
    (args.out / "tables.md").write_text("\n".join(parts))
    print((args.out / "tables.md").read_text())


if __name__ == "__main__":
    main()
