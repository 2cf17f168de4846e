"""Aggregate the runs of docs/results/deferral.sh into tables, figures and results.json.

Usage: aggregate.py RUNS_DIR OUT_DIR. Each run directory is
``<setting>-<learner>-<budget>-<feedback>`` with the ``summary.json`` and
``trajectory.jsonl`` of ``banditflow evaluate --family deferral``. Fails (exit 1) if any run
spent more than its budget, per its summary or at any round of its trajectory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

SETTINGS = ("uniform", "complementary", "digits")
LEARNERS = ("ucb", "best_reject", "arbitrary_human", "model_only")
NAMES = {"ucb": "UCB", "best_reject": "BestReject (hindsight)",
         "arbitrary_human": "ArbitraryHuman", "model_only": "ModelOnly"}


def load(runs: Path) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    found = {}
    for directory in sorted(runs.iterdir()):
        summary_path = directory / "summary.json"
        if not summary_path.exists():
            continue
        setting, rest = directory.name.split("-", 1)
        learner, budget, feedback = rest.rsplit("-", 2)
        summary = json.loads(summary_path.read_text())
        with open(directory / "trajectory.jsonl") as lines:
            rows = [json.loads(line) for line in lines]
        summary["max_spent"] = max(row["spent"] for row in rows)
        summary["spent_series"] = np.array([row["spent"] for row in rows])
        summary["reward_series"] = np.cumsum([row["reward"] for row in rows])
        found[(setting, learner, budget, feedback)] = summary
    return found


def check_budgets(runs: dict[tuple[str, str, str, str], dict[str, Any]]) -> list[str]:
    """Every run: spent <= B at every round and at the end."""
    problems = []
    for key, summary in runs.items():
        budget = summary["budget"]
        if not (summary["spent"] <= budget + 1e-9 and summary["max_spent"] <= budget + 1e-9
                and summary["within_budget"]):
            problems.append(f"{key}: spent {summary['spent']} (max {summary['max_spent']}) > B "
                            f"{budget}")
    return problems


def budgets_of(runs: dict, setting: str) -> list[str]:
    found = {k[2] for k in runs if k[0] == setting and k[1] == "ucb" and k[3] == "full"}
    return sorted(found, key=lambda b: float("inf") if b == "unlimited" else float(b))


def percent(runs: dict, setting: str, learner: str, budget: str, kind: str) -> float | None:
    """% of OPT (kind: 'expected' or 'realised'); ModelOnly's one run against each B's OPT."""
    reference = runs.get((setting, "ucb", budget, "full"))
    run = runs.get((setting, learner, "unlimited" if learner == "model_only" else budget, "full"))
    if run is None or reference is None:
        return None
    if kind == "expected":
        return 100.0 * run["expected_reward"] / reference["opt_expected"]
    return 100.0 * run["total_reward"] / reference["opt"]


def label(budget: str, rounds: int) -> str:
    if budget == "unlimited":
        return "unlimited"
    return f"B = T/{round(rounds / float(budget))} = {budget}"


def tables(runs: dict) -> tuple[str, dict[str, Any]]:
    lines: list[str] = []
    results: dict[str, Any] = {}
    for setting in SETTINGS:
        budgets = budgets_of(runs, setting)
        if not budgets:
            continue
        rounds = runs[(setting, "ucb", budgets[0], "full")]["rounds"]
        results[setting] = {}
        for kind, title in (("expected", "% of OPT in expectation (paper's benchmark)"),
                            ("realised", "% of clairvoyant OPT on the realised outcomes")):
            lines += [f"### {setting}: {title}", "",
                      "| learner | " + " | ".join(label(b, rounds) for b in budgets) + " |",
                      "|---|" + "---|" * len(budgets)]
            for learner in LEARNERS:
                cells = []
                for budget in budgets:
                    value = percent(runs, setting, learner, budget, kind)
                    results[setting].setdefault(learner, {}).setdefault(budget, {})[kind] = value
                    cells.append("n/a" if value is None else f"{value:.1f}")
                lines.append(f"| {NAMES[learner]} | " + " | ".join(cells) + " |")
            lines.append("")
        lines += [f"### {setting}: budget use (spent / B, deferral rate)", "",
                  "| learner | " + " | ".join(label(b, rounds) for b in budgets) + " |",
                  "|---|" + "---|" * len(budgets)]
        for learner in LEARNERS:
            cells = []
            for budget in budgets:
                run = runs.get((setting, learner,
                                "unlimited" if learner == "model_only" else budget, "full"))
                if run is None:
                    cells.append("n/a")
                    continue
                share = run["spent"] / float(runs[(setting, "ucb", budget, "full")]["budget"])
                cells.append(f"{share:.3f}, {run['deferral_rate']:.3f}")
                results[setting][learner][budget]["spent"] = run["spent"]
                results[setting][learner][budget]["deferral_rate"] = run["deferral_rate"]
            lines.append(f"| {NAMES[learner]} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["### UCB: full vs bandit feedback (% of OPT in expectation; realised)", "",
              "| setting | budget | full | bandit | difference |", "|---|---|---|---|---|"]
    results["bandit"] = {}
    for (setting, learner, budget, feedback), run in sorted(runs.items()):
        if feedback != "bandit":
            continue
        full = runs.get((setting, learner, budget, "full"))
        if full is None:
            continue
        a, b = full["percent_of_opt_expected"], run["percent_of_opt_expected"]
        ra, rb = full["percent_of_opt"], run["percent_of_opt"]
        lines.append(f"| {setting} | {label(budget, run['rounds'])} | {a:.1f}; {ra:.1f} | "
                     f"{b:.1f}; {rb:.1f} | {b - a:+.1f}; {rb - ra:+.1f} |")
        results["bandit"][f"{setting}-{budget}"] = {"full": a, "bandit": b, "full_realised": ra,
                                                     "bandit_realised": rb}
    lines.append("")
    return "\n".join(lines), results


def figures(runs: dict, out: Path) -> None:
    for setting in SETTINGS:
        budgets = budgets_of(runs, setting)
        if not budgets:
            continue
        rounds = runs[(setting, "ucb", budgets[0], "full")]["rounds"]
        fig, (bars, spend) = plt.subplots(1, 2, figsize=(12, 4))
        width = 0.8 / len(LEARNERS)
        for i, learner in enumerate(LEARNERS):
            values = [percent(runs, setting, learner, b, "expected") or 0.0 for b in budgets]
            bars.bar(np.arange(len(budgets)) + i * width, values, width, label=NAMES[learner])
        bars.set_xticks(np.arange(len(budgets)) + 0.4 - width / 2,
                        [label(b, rounds).split(" = ")[0] if b != "unlimited" else b
                         .replace("B = ", "") for b in budgets])
        low = min(percent(runs, setting, "model_only", b, "expected") or 100 for b in budgets)
        bars.set_ylim(max(0.0, low - 10), 101)
        bars.set_ylabel("% of OPT (expectation)")
        bars.set_title(f"{setting}: reward as % of OPT")
        bars.legend(fontsize=8)
        for budget in budgets:
            run = runs[(setting, "ucb", budget, "full")]
            (line,) = spend.plot(run["spent_series"], label=f"UCB, {label(budget, rounds)}")
            if budget != "unlimited":
                spend.axhline(run["budget"], color=line.get_color(), linestyle=":")
        spend.set_xlabel("t")
        spend.set_ylabel("human cost spent")
        spend.set_title(f"{setting}: UCB's spend (dotted: B)")
        spend.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"{setting}.png", dpi=100)
        plt.close(fig)
    pairs = [(k, r) for k, r in sorted(runs.items()) if k[3] == "bandit"]
    if pairs:
        fig, axes = plt.subplots(1, len(pairs), figsize=(4 * len(pairs), 3.5), squeeze=False)
        for ax, ((setting, learner, budget, _), run) in zip(axes[0], pairs, strict=True):
            full = runs[(setting, learner, budget, "full")]
            t = np.arange(1, run["rounds"] + 1)
            ax.plot(t, full["reward_series"] / t, label="full")
            ax.plot(t, run["reward_series"] / t, label="bandit")
            ax.set_title(f"{setting}, B={budget}", fontsize=9)
            ax.set_xlabel("t")
            ax.set_ylim(0.0, 1.0)
        axes[0][0].set_ylabel("mean realised reward so far")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "full_vs_bandit.png", dpi=100)
        plt.close(fig)


def main(runs_dir: str, out_dir: str) -> int:
    runs = load(Path(runs_dir))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems = check_budgets(runs)
    if problems:
        print("BUDGET EXCEEDED:\n" + "\n".join(problems), file=sys.stderr)
        return 1
    text, results = tables(runs)
    results["runs"] = {
        "-".join(key): {k: v for k, v in run.items() if not k.endswith("_series")}
        for key, run in runs.items()
    }
    results["all_within_budget"] = True
    (out / "tables.md").write_text(
        f"<!-- generated by docs/results/deferral.sh; {len(runs)} runs, every one ended (and "
        "stayed at every round) with spent <= B -->\n\n" + text)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    figures(runs, out)
    print(text)
    print(f"{len(runs)} runs, all within budget")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
