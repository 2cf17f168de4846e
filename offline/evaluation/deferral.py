"""Evaluating ``deferral`` learners on a log with both arms' outcomes, under a budget.

Log: JSONL, one round per line, ``{"event_id", "features": [...], "model_reward",
"human_reward", "human_cost"}``, optionally with the expected values ``model_mean``,
``human_mean`` and ``cost_mean`` (all or none; ``banditflow make-log deferral-*`` writes
them). The learner sees only the features; the application then sends what the feedback
mode (``--feedback``) reveals: in ``full`` mode the model's reward for every decision
(``{"part": "model", "model_reward"}``) and, for a deferral, the human's reward and cost
(``{"part": "human", "human_reward", "human_cost"}``); in ``bandit`` mode only the chosen
arm's part. With ``--delay`` the parts travel independently (another order, other rounds).

The learners' ``T`` is the number of replayed rounds (``--horizon`` or the whole log: one
budget period) and ``B`` is ``--budget`` (a number, or ``unlimited`` = ``T * c_max``, which
never binds; default the paper's ratio ``B / T = 0.16``).

Reported (``summary.json``): rounds, total realised reward, OPT = the fractional knapsack LP
(:func:`banditflow.learners.deferral.opt.fractional_knapsack_opt`) on the realised sequence
(clairvoyant:
it knows every realised outcome) and its percentage reached, the realised human cost spent,
whether it stayed within the budget, and the deferral rate. When the log has expected values
also OPT in expectation (the paper's benchmark: the best static randomised policy on the
realised contexts) with the learner's expected reward and percentage. The trajectory
(``trajectory.jsonl``) has one line per round, ``{"t", "deferred", "reward", "spent"}`` with
the realised reward of the chosen arm and the cumulative realised human cost of the
deferrals so far (what the budget is charged once their feedback arrives; a deferral whose
human part is lost is charged its reservation ``c_max`` by the learner instead).

BestReject is given its known expected model reward as ``mu(x . model_theta)``, with
``model_theta`` the least-squares fit of ``model_mean`` (else ``model_reward``) on the
features over the whole log, and its best threshold in hindsight
(:func:`banditflow.learners.deferral.opt.best_reject_threshold` on the realised outcomes): neither
is
feasible online, as in the paper.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from banditflow.learners.deferral.opt import best_reject_threshold, fractional_knapsack_opt
from banditflow.learners.deferral.scenarios import PAPER_BUDGET_RATE
from banditflow.offline.evaluation.replay import LogError, LoggedRound, log_records

OUTCOMES = ("model_reward", "human_reward", "human_cost")
MEANS = ("model_mean", "human_mean", "cost_mean")
FEEDBACK_MODES = ("full", "bandit")


def _unit(path: Path, number: int, record: Mapping[str, Any], name: str) -> float:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LogError(f"{path}:{number}: {name!r} must be a finite number, got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise LogError(f"{path}:{number}: {name!r} must be in [0, 1], got {value}")
    return float(value)


@dataclass
class DeferralLog:
    """A deferral log as arrays (one row per round)."""

    event_ids: list[str]
    features: np.ndarray  # (T, d)
    model_reward: np.ndarray
    human_reward: np.ndarray
    human_cost: np.ndarray
    means: dict[str, np.ndarray] | None  # model_mean, human_mean, cost_mean, when logged

    @property
    def rounds(self) -> int:
        return len(self.event_ids)

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])


def read_log(path: Path, horizon: int | None = None) -> DeferralLog:
    """The first ``horizon`` rounds of a deferral log, checked line by line."""
    ids: list[str] = []
    features: list[list[float]] = []
    columns: dict[str, list[float]] = {name: [] for name in (*OUTCOMES, *MEANS)}
    with_means: bool | None = None
    for number, record in log_records(path, horizon):
        x = record.get("features")
        if (
            not isinstance(x, list)
            or not x
            or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in x
            )
        ):
            raise LogError(f"{path}:{number}: 'features' must be a non-empty list of numbers")
        if features and len(x) != len(features[0]):
            raise LogError(
                f"{path}:{number}: {len(x)} features, the first round has {len(features[0])}"
            )
        has = [name in record for name in MEANS]
        if any(has) and not all(has):
            raise LogError(f"{path}:{number}: give all of {MEANS} or none")
        if with_means is None:
            with_means = all(has)
        elif with_means != all(has):
            raise LogError(f"{path}:{number}: expected values on some rounds only")
        for name in (*OUTCOMES, *(MEANS if with_means else ())):
            columns[name].append(_unit(path, number, record, name))
        ids.append(str(record.get("event_id", number)))
        features.append([float(v) for v in x])
    if not ids:
        raise LogError(f"{path}: no rounds")
    if len(set(ids)) != len(ids):
        raise LogError(f"{path}: event_id values must be unique")
    means = {name: np.array(columns[name]) for name in MEANS} if with_means else None
    return DeferralLog(
        ids, np.array(features), *(np.array(columns[name]) for name in OUTCOMES), means
    )


def parse_budget(text: str | None, rounds: int, c_max: float) -> float:
    """``--budget``: a positive number, ``unlimited`` (``T * c_max``) or None (paper ratio)."""
    if text is None:
        return PAPER_BUDGET_RATE * rounds
    if text.strip().lower() in ("unlimited", "inf", "none"):
        return rounds * c_max
    try:
        budget = float(text)
    except ValueError:
        raise SystemExit(f"--budget {text!r}: expected a number or 'unlimited'") from None
    if not math.isfinite(budget) or budget <= 0.0:
        raise SystemExit(f"--budget must be > 0 (or 'unlimited'), got {text!r}")
    return budget


class DeferralTask:
    """A deferral log as an evaluation task (see the module docstring)."""

    family = "deferral"

    def __init__(self, log: DeferralLog, budget: float, feedback: str) -> None:
        if feedback not in FEEDBACK_MODES:
            raise ValueError(f"feedback must be one of {FEEDBACK_MODES}, got {feedback!r}")
        self.log = log
        self.budget = budget
        self.feedback_mode = feedback
        self.index = {event_id: t for t, event_id in enumerate(log.event_ids)}
        self._spent = 0.0

    def truth(self, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        """The truth event a live application sends: both arms' outcomes (exact regret)."""
        t, log = round_.hidden, self.log
        return {"model_reward": float(log.model_reward[t]),
                "human_reward": float(log.human_reward[t]),
                "human_cost": float(log.human_cost[t])}

    def rounds(self) -> Iterator[LoggedRound]:
        self._spent = 0.0
        for t, event_id in enumerate(self.log.event_ids):
            yield LoggedRound(event_id, {"features": self.log.features[t].tolist()}, t)

    def feedback(
        self, round_: LoggedRound, output: Mapping[str, Any], rng: np.random.Generator
    ) -> list[dict[str, Any]]:
        t = round_.hidden
        parts = []
        if self.feedback_mode == "full" or not output["defer"]:
            parts.append({"part": "model", "model_reward": float(self.log.model_reward[t])})
        if output["defer"]:
            parts.append({
                "part": "human",
                "human_reward": float(self.log.human_reward[t]),
                "human_cost": float(self.log.human_cost[t]),
            })
        return parts

    def row(self, t: int, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        i = round_.hidden
        deferred = bool(output["defer"])
        if deferred:
            self._spent += float(self.log.human_cost[i])
        reward = self.log.human_reward[i] if deferred else self.log.model_reward[i]
        return {"deferred": deferred, "reward": float(reward), "spent": self._spent}

    def deferred(self, rows: list[dict[str, Any]]) -> np.ndarray:
        return np.array([row["deferred"] for row in rows], dtype=bool)

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(rows)
        log = self.log
        deferred = self.deferred(rows)
        reward = float(sum(row["reward"] for row in rows))
        spent = float(log.human_cost[:n][deferred].sum())
        opt = fractional_knapsack_opt(
            log.model_reward[:n], log.human_reward[:n], log.human_cost[:n], self.budget
        ).value
        summary: dict[str, Any] = {
            "rounds": n,
            "budget": self.budget,
            "feedback_mode": self.feedback_mode,
            "total_reward": reward,
            "opt": opt,
            "percent_of_opt": 100.0 * reward / opt if opt > 0 else None,
            "spent": spent,
            "within_budget": spent <= self.budget + 1e-9,
            "deferrals": int(deferred.sum()),
            "deferral_rate": float(deferred.mean()),
            "model_only_reward": float(log.model_reward[:n].sum()),
        }
        if log.means is not None:
            means = {name: values[:n] for name, values in log.means.items()}
            expected = float(
                np.where(deferred, means["human_mean"], means["model_mean"]).sum()
            )
            opt_expected = fractional_knapsack_opt(
                means["model_mean"], means["human_mean"], means["cost_mean"], self.budget
            ).value
            summary.update(
                expected_reward=expected,
                opt_expected=opt_expected,
                percent_of_opt_expected=(
                    100.0 * expected / opt_expected if opt_expected > 0 else None
                ),
            )
        return summary

    def curves(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Cumulative reward, spend against the budget, running deferral rate."""
        t = np.arange(1, len(rows) + 1)
        return {
            "cumulative reward": np.cumsum([row["reward"] for row in rows]),
            "spent (budget B)": np.array([row["spent"] for row in rows]),
            "deferral rate (running)": np.cumsum(self.deferred(rows)) / t,
        }

    def model_theta(self) -> np.ndarray:
        """Least-squares fit of the expected (else realised) model reward on the features."""
        target = self.log.means["model_mean"] if self.log.means else self.log.model_reward
        theta, *_ = np.linalg.lstsq(self.log.features, target, rcond=None)
        return theta

    def best_reject_params(self, c_max: float) -> dict[str, Any]:
        """BestReject's known model reward (``model_theta``) and best threshold in hindsight."""
        theta = self.model_theta()
        estimate = self.log.features @ theta
        threshold, _ = best_reject_threshold(
            estimate, self.log.human_reward, self.log.model_reward, self.log.human_cost,
            self.budget, c_max,
        )
        return {"model_theta": theta.tolist(), "threshold": threshold}


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--budget",
        help="deferral: human budget B for the replayed rounds: a number or 'unlimited' "
        "(default: the paper's B/T = 0.16)",
    )
    group.add_argument(
        "--feedback",
        choices=FEEDBACK_MODES,
        default="full",
        help="deferral: 'full' (the model's reward always, the human's when deferred; "
        "default) or 'bandit' (the chosen arm's only)",
    )
    group.add_argument(
        "--c-max",
        type=float,
        default=1.0,
        help="deferral: largest human cost, reserved per deferral (default 1)",
    )


def build(
    args: argparse.Namespace, seed: int
) -> tuple[DeferralTask, Callable[[str], dict[str, Any]]]:
    if args.log is None:
        raise SystemExit("--family deferral needs --log FILE (see banditflow make-log deferral-*)")
    log = read_log(args.log, args.horizon)
    horizon = max(args.horizon or log.rounds, 3)
    budget = parse_budget(args.budget, horizon, args.c_max)
    if budget < args.c_max:
        raise SystemExit(f"--budget {budget} is below --c-max {args.c_max}: nothing to defer")
    task = DeferralTask(log, budget, args.feedback)
    common = {
        "dim": log.dim,
        "budget": budget,
        "horizon": horizon,
        "feedback": args.feedback,
        "c_max": args.c_max,
    }
    cache: dict[str, dict[str, Any]] = {}

    def params_for(algorithm: str) -> dict[str, Any]:
        if algorithm == "best_reject":
            if "best_reject" not in cache:
                cache["best_reject"] = task.best_reject_params(args.c_max)
            return {**common, **cache["best_reject"]}
        return dict(common)

    return task, params_for
