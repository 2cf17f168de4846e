"""Writing evaluation results: summary.json, trajectory.jsonl, PNG plots, comparisons."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def write_run(
    directory: Path,
    rows: Sequence[Mapping[str, Any]],
    summary: Mapping[str, Any],
    curves: Mapping[str, np.ndarray],
    title: str,
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with open(directory / "trajectory.jsonl", "w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    plot_curves(directory / "curves.png", {title: curves}, title)


def plot_curves(path: Path, runs: Mapping[str, Mapping[str, np.ndarray]], title: str) -> None:
    """One panel per curve, one line per run (mean and band when a run has several seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(next(iter(runs.values())))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for label, curves in runs.items():
            series = np.atleast_2d(curves[name])
            t = np.arange(1, series.shape[1] + 1)
            mean = series.mean(axis=0)
            (line,) = ax.plot(t, mean, label=label, linewidth=1.2)
            if series.shape[0] > 1:
                ax.fill_between(
                    t, series.min(axis=0), series.max(axis=0), alpha=0.15, color=line.get_color()
                )
        ax.set_title(name)
        ax.set_xlabel("t")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table_number(value: float) -> str:
    """Four significant digits, but never an exponent for a count or a large figure:
    10000 rounds is ``10,000``, not ``1e+04``."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def table_spread(value: float) -> str:
    """A standard deviation to two significant digits, without an exponent when large."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def comparison_table(
    summaries: Mapping[str, Sequence[Mapping[str, Any]]], columns: Sequence[str]
) -> str:
    """Markdown: one row per learner, each column mean ± std over seeds."""
    lines = [
        "| learner | seeds | " + " | ".join(columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for learner, runs in summaries.items():
        cells = []
        for column in columns:
            values = [r[column] for r in runs if isinstance(r.get(column), int | float)]
            if not values:
                cells.append("n/a")
            elif len(set(values)) == 1:  # one seed, or a figure the seeds share (rounds)
                cells.append(table_number(values[0]))
            else:
                cells.append(f"{table_number(float(np.mean(values)))} ± "
                             f"{table_spread(float(np.std(values)))}")
        lines.append(f"| {learner} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
