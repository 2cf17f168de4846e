"""The demo's summary, convergence checks and report (HTML with PNG plots).

The summary figures come from the worker's ``/metrics``; the curves from the applications'
own tallies (:class:`banditflow.streams.simulate.LearnerTally`), which follow the same definitions.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from banditflow.streams.scrape import value
from banditflow.streams.simulate import SimulationReport

SET_SIZE_TOLERANCE = 0.20  # conformal: recent set size within 20 % of the oracle's
# conformal: coverage "at target" means the guarantee holds: coverage over the run (the
# worker's) at least the target, and over the last decisions no more than 0.02 below it (SPS
# is conservative: it errs on the side of larger sets, which the set-size check catches).
COVERAGE_SLACK = 0.02
BUDGET_USE = 0.5  # deferral: at least half the budget spent, never more than all of it


@dataclass(frozen=True)
class Verdict:
    family: str
    passed: bool
    text: str


def summary_rows(text: str, reports: list[SimulationReport]) -> list[dict[str, Any]]:
    """One row per learner: the worker's gauges, and the application's recent figures."""
    rows = []
    for report in reports:
        for tally in report.tallies:
            lid = tally.learner_id

            def gauge(name: str, lid: str = lid) -> float | None:
                return value(text, f"banditflow_learner_{name}", learner_id=lid)

            rows.append({
                "family": report.family,
                "learner_id": lid,
                "algorithm": tally.algorithm,
                "role": tally.role,
                "decisions": gauge("decisions"),
                "feedback": gauge("feedback"),
                "regret": value(text, "banditflow_regret", learner_id=lid, kind="exact"),
                "coverage": gauge("coverage"),
                "mean_set_size": gauge("mean_set_size"),
                "recent_coverage": tally.coverage,
                "recent_set_size": tally.set_size,
                "oracle_set_size": report.oracle_set_size,
                "target_coverage": report.target_coverage,
                "budget_spent": gauge("budget_spent"),
                "budget": report.budget,
                "dual_price": gauge("dual_price"),
                "deferral_rate": gauge("deferral_rate"),
            })
    return rows


def checks(rows: list[dict[str, Any]], reports: list[SimulationReport]) -> list[Verdict]:
    """Did the demo show convergence? One verdict per family (see the module constants)."""
    verdicts = []
    for report in reports:
        learner, baseline = (next(r for r in rows if r["family"] == report.family
                                  and r["role"] == role) for role in ("learner", "baseline"))
        name = learner["algorithm"]
        # What the traffic offers decides the check: prediction sets have an oracle set size,
        # a budgeted family a budget; the others are judged on regret.
        if report.oracle_set_size is not None:
            size, oracle = learner["recent_set_size"], report.oracle_set_size
            coverage, target = learner["recent_coverage"], report.target_coverage
            off = abs(size - oracle) / oracle
            overall = learner["coverage"] or 0.0
            passed = (off <= SET_SIZE_TOLERANCE and overall >= target
                      and coverage >= target - COVERAGE_SLACK)
            text = (f"{name}: recent set size {size:.2f} vs oracle {oracle:.2f} ({off:.0%} off, "
                    f"<= {SET_SIZE_TOLERANCE:.0%}); coverage {overall:.3f} over the run, "
                    f"{coverage:.3f} recently (target {target})")
        elif report.budget is not None:
            spent, budget = learner["budget_spent"] or 0.0, report.budget or 0.0
            passed = BUDGET_USE * budget <= spent <= budget
            text = (f"{name}: spent {spent:.1f} of budget {budget:.1f} ({spent / budget:.0%}; "
                    f"on budget: {BUDGET_USE:.0%}-100 %); regret {learner['regret']:.1f} vs "
                    f"{baseline['algorithm']} {baseline['regret']:.1f}")
        else:
            mine, theirs = learner["regret"], baseline["regret"]
            passed = mine is not None and theirs is not None and mine < theirs
            text = f"{name}: regret {mine:.1f} < {baseline['algorithm']} {theirs:.1f}"
        verdicts.append(Verdict(report.family, bool(passed), text))
    return verdicts


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


COLUMNS = (
    ("learner", "learner_id", 0), ("decisions", "decisions", 0), ("regret", "regret", 1),
    ("coverage", "recent_coverage", 3), ("set size", "recent_set_size", 2),
    ("oracle size", "oracle_set_size", 2), ("spent", "budget_spent", 1),
    ("budget", "budget", 1), ("dual price", "dual_price", 3),
)


def summary_table(rows: list[dict[str, Any]]) -> str:
    """A plain-text table; coverage and set size are over the last decisions."""
    cells = [[title for title, _, _ in COLUMNS]]
    cells += [[_fmt(row[key], digits) for _, key, digits in COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                       enumerate(zip(line, widths, strict=True))) for line in cells]
    return "\n".join("  " + line for line in lines)


def plot(reports: list[SimulationReport], out: Path) -> list[Path]:
    """regret.png (every family, learner vs baseline), conformal.png (coverage and set size
    against the target and the oracle), budget.png (deferral's spending against B)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, axes = plt.subplots(1, len(reports), figsize=(4.2 * len(reports), 3.4), squeeze=False)
    for ax, report in zip(axes[0], reports, strict=True):
        for tally in report.tallies:
            ax.plot([p.decided for p in tally.trajectory], [p.regret for p in tally.trajectory],
                    label=f"{tally.algorithm} ({tally.role})")
        ax.set_title(report.family)
        ax.set_xlabel("decisions with truth")
        ax.set_ylabel("cumulative regret (exact)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "regret.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    for report in reports:
        if report.oracle_set_size is not None:
            fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
            for tally in report.tallies:
                xs = [p.decided for p in tally.trajectory]
                left.plot(xs, [p.coverage for p in tally.trajectory], label=tally.algorithm)
                right.plot(xs, [p.set_size for p in tally.trajectory], label=tally.algorithm)
            left.axhline(report.target_coverage, color="k", ls="--", lw=1, label="target")
            right.axhline(report.oracle_set_size, color="k", ls="--", lw=1, label="oracle")
            left.set_title("coverage (last decisions)")
            right.set_title("set size (last decisions)")
            for ax in (left, right):
                ax.set_xlabel("decisions")
                ax.legend(fontsize=8)
            fig.tight_layout()
            paths.append(out / "conformal.png")
            fig.savefig(paths[-1], dpi=110)
            plt.close(fig)
        if report.budget is not None:
            fig, ax = plt.subplots(figsize=(4.5, 3.4))
            for tally in report.tallies:
                ax.plot([p.decided for p in tally.trajectory],
                        [p.spent for p in tally.trajectory], label=tally.algorithm)
            ax.axhline(report.budget, color="k", ls="--", lw=1, label="budget B")
            ax.set_title("deferral: human cost spent")
            ax.set_xlabel("decisions")
            ax.legend(fontsize=8)
            fig.tight_layout()
            paths.append(out / "budget.png")
            fig.savefig(paths[-1], dpi=110)
            plt.close(fig)
    return paths


def write_report(out: Path, rows: list[dict[str, Any]], verdicts: list[Verdict],
                 reports: list[SimulationReport], elapsed: float) -> Path:
    """``out/report-<time>/``: index.html, summary.json and the plots; returns index.html."""
    directory = out / time.strftime("report-%Y%m%d-%H%M%S")
    directory.mkdir(parents=True, exist_ok=True)
    images = plot(reports, directory)
    (directory / "summary.json").write_text(json.dumps({
        "wall_time_s": round(elapsed, 1),
        "rows": rows,
        "checks": [asdict(v) for v in verdicts],
    }, indent=1) + "\n")
    head = "".join(f"<th>{html.escape(title)}</th>" for title, _, _ in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(row[key], digits))}</td>"
                         for _, key, digits in COLUMNS) + "</tr>"
        for row in rows)
    checks_html = "".join(
        f"<li><b>{'PASS' if v.passed else 'FAIL'}</b> {html.escape(v.family)}: "
        f"{html.escape(v.text)}</li>" for v in verdicts)
    figures = "".join(f'<p><img src="{p.name}" alt="{p.stem}"></p>' for p in images)
    page = (
        "<!doctype html><meta charset=utf-8><title>banditflow demo</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}</style>"
        f"<h1>banditflow demo</h1><p>wall time {elapsed:.1f} s</p>"
        f"<table><tr>{head}</tr>{body}</table><h2>convergence</h2><ul>{checks_html}</ul>"
        f"{figures}"
    )
    index = directory / "index.html"
    index.write_text(page)
    return index
