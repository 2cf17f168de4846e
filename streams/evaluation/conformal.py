"""Evaluating ``conformal`` learners on a full-information log with simulated semi-bandit
feedback.

Log: JSONL, one round per line, ``{"event_id", "labels": [...], "scores": [...],
"true_label"}`` (higher score = more likely). A true label absent from ``labels`` is never
coverable: its score counts as -inf. The learner sees only the labels and scores; the
feedback is the true label when it is in the set, ``missed`` otherwise.

Reported with the log's own ground truth (the empirical distribution of true-label scores):
G*(tau) = share of rounds whose true label scores below tau (the miscoverage of the set
``{score >= tau}``), tau* = sup{tau : G*(tau) <= 1 - alpha}, undercoverage = rounds with
tau_t > tau*, and regret sum_t phi(tau*) - phi(tau_t) with the paper's phi
(lambda1 = 0.1 below the target miscoverage, lambda2 = 10 above).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from learners.registry import learner_class
from processors.stats import conformal_round_regret
from streams.evaluation.engine import LoggedRound, finite_or_none


class LogError(ValueError):
    pass


def read_log(path: Path, horizon: int | None = None) -> list[dict[str, Any]]:
    """The first ``horizon`` rounds of a conformal log, checked line by line."""
    rounds = []
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if horizon is not None and len(rounds) >= horizon:
                break
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LogError(f"{path}:{number}: not JSON: {exc}") from None
            labels, scores = record.get("labels"), record.get("scores")
            if not isinstance(labels, list) or not isinstance(scores, list) or not labels:
                raise LogError(f"{path}:{number}: needs non-empty 'labels' and 'scores' lists")
            if len(labels) != len(scores):
                raise LogError(f"{path}:{number}: {len(labels)} labels but {len(scores)} scores")
            if not all(isinstance(s, int | float) and math.isfinite(s) for s in scores):
                raise LogError(f"{path}:{number}: scores must be finite numbers")
            if "true_label" not in record:
                raise LogError(f"{path}:{number}: missing 'true_label'")
            rounds.append(
                {
                    "event_id": str(record.get("event_id", number)),
                    "labels": labels,
                    "scores": scores,
                    "true_label": record["true_label"],
                }
            )
    if not rounds:
        raise LogError(f"{path}: no rounds")
    return rounds


def true_score(record: Mapping[str, Any]) -> float:
    labels = record["labels"]
    if record["true_label"] in labels:
        return float(record["scores"][labels.index(record["true_label"])])
    return -math.inf


class ConformalTask:
    """A conformal log as an evaluation task (see the module docstring)."""

    family = "conformal"

    def __init__(self, records: list[dict[str, Any]], alpha: float) -> None:
        self.records = records
        self.alpha = alpha
        self.true_scores = sorted(true_score(r) for r in records)
        n = len(self.true_scores)
        # #{s < tau} <= floor(n (1 - alpha)) holds exactly up to the (floor + 1)-th score
        # (the epsilon keeps e.g. 10 * (1 - 0.8) = 1.9999999999999996 from flooring to 1).
        rank = math.floor(n * (1.0 - alpha) + 1e-9)
        self.tau_star = self.true_scores[min(rank, n - 1)]
        self.target_miscoverage = 1.0 - alpha

    def miscoverage(self, threshold: float | None) -> float:
        """G*(threshold) under the log's empirical distribution."""
        if threshold is None:
            return 0.0
        return bisect.bisect_left(self.true_scores, threshold) / len(self.true_scores)

    def rounds(self) -> Iterator[LoggedRound]:
        for record in self.records:
            yield LoggedRound(
                record["event_id"],
                {"labels": record["labels"], "scores": record["scores"]},
                record["true_label"],
            )

    def feedback(
        self, round_: LoggedRound, output: Mapping[str, Any], rng: np.random.Generator
    ) -> list[dict[str, Any]]:
        if round_.hidden in output["labels"]:
            return [{"label": round_.hidden}]
        return [{"missed": True}]

    def row(self, t: int, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "threshold": finite_or_none(output["threshold"]),
            "covered": round_.hidden in output["labels"],
            "set_size": output["set_size"],
        }

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        optimum = conformal_round_regret(self.miscoverage(self.tau_star), self.target_miscoverage)
        regret = sum(
            conformal_round_regret(self.miscoverage(row["threshold"]), self.target_miscoverage)
            - optimum
            for row in rows
        )
        return {
            "rounds": len(rows),
            "alpha": self.alpha,
            "coverage": sum(row["covered"] for row in rows) / len(rows),
            "mean_set_size": sum(row["set_size"] for row in rows) / len(rows),
            "tau_star": finite_or_none(self.tau_star),
            "final_threshold": rows[-1]["threshold"],
            "undercoverage_count": sum(
                row["threshold"] is not None and row["threshold"] > self.tau_star for row in rows
            ),
            "regret": regret,
        }

    def curves(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Per-round series for the plots: cumulative regret, running coverage and set size."""
        optimum = conformal_round_regret(self.miscoverage(self.tau_star), self.target_miscoverage)
        per_round = np.array(
            [
                conformal_round_regret(self.miscoverage(r["threshold"]), self.target_miscoverage)
                - optimum
                for r in rows
            ]
        )
        t = np.arange(1, len(rows) + 1)
        return {
            "cumulative regret": np.cumsum(per_round),
            "coverage (running)": np.cumsum([r["covered"] for r in rows]) / t,
            "set size (running mean)": np.cumsum([r["set_size"] for r in rows]) / t,
        }


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--alpha", type=float, default=0.9, help="target coverage (default 0.9)")
    group.add_argument(
        "--shuffle", action="store_true", help="replay the log in an order permuted by the seed"
    )


def build(
    args: argparse.Namespace, seed: int
) -> tuple[ConformalTask, Callable[[str], dict[str, Any]]]:
    if args.log is None:
        raise SystemExit("--family conformal needs --log FILE")
    records = read_log(args.log, args.horizon)
    if args.shuffle:
        records = [records[i] for i in np.random.default_rng(seed).permutation(len(records))]
    horizon = max(args.horizon or len(records), 2)

    def params_for(algorithm: str) -> dict[str, Any]:
        params: dict[str, Any] = {"alpha": args.alpha}
        if "horizon" in learner_class("conformal", algorithm).parameters():
            params["horizon"] = horizon
        return params

    return ConformalTask(records, args.alpha), params_for
