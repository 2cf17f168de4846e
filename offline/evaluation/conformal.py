"""Evaluating ``conformal`` learners on a full-information log with simulated semi-bandit
feedback.

Log: JSONL, one round per line, ``{"event_id", "labels": [...], "scores": [...],
"true_label"}`` (higher score = more likely). A true label absent from ``labels`` is never
coverable: its score counts as -inf. The learner sees only the labels and scores; the
feedback is the true label when it is in the set, ``missed`` otherwise, and none when the
set held every candidate (a miss would contradict such a set: the timeout settles it).

Reported with the log's own ground truth (the empirical distribution of true-label scores):
G*(tau) = share of rounds whose true label scores below tau (the miscoverage of the set
``{score >= tau}``), tau* = sup{tau : G*(tau) <= 1 - c} for the target coverage c,
undercoverage = rounds with tau_t > tau*, and regret sum_t phi(tau*) - phi(tau_t) with the
paper's phi (lambda1 = 0.1 below the target miscoverage, lambda2 = 10 above).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from banditflow.learners.base import LearnerError
from banditflow.learners.conformal.base import ConformalLearner
from banditflow.learners.conformal.regret import conformal_round_regret
from banditflow.learners.registry import learner_class
from banditflow.offline.evaluation.replay import (
    Delay,
    FeedbackSchedule,
    LogError,
    LoggedRound,
    ReplayError,
    context_event,
    final_sweep,
    finite_or_none,
    log_records,
    replay_config,
    replay_summary,
)
from banditflow.schemas.events import LearnerConfig
from banditflow.schemas.parsing import Limits, Rejected, parse_event, parse_family_event


def read_log(path: Path, horizon: int | None = None) -> list[dict[str, Any]]:
    """The first ``horizon`` rounds of a conformal log, checked line by line.

    Each round's context goes through the worker's own validation (the conformal context model and
    the default input limits), exactly as the processors would receive it, so a log that
    reads here replays the same way with either engine. Event ids default to the line
    number and must be unique (a repeated id would be a re-delivery to the processors); the
    true label must be a string, an integer (the schema's label types) or null.
    """
    rounds: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    limits = Limits()
    for number, record in log_records(path, horizon):
        where = f"{path}:{number}"
        if "true_label" not in record:
            raise LogError(f"{where}: missing 'true_label'")
        true_label = record["true_label"]
        if true_label is not None and (
            not isinstance(true_label, str | int) or isinstance(true_label, bool)
        ):
            raise LogError(f"{where}: 'true_label' must be a string, an integer or null")
        event_id = str(record["event_id"] if record.get("event_id") is not None else number)
        if event_id in seen:
            raise LogError(f"{where}: event_id {event_id!r} repeats line {seen[event_id]}")
        seen[event_id] = number
        context = {"labels": record.get("labels"), "scores": record.get("scores")}
        if context["labels"] is None or context["scores"] is None:
            raise LogError(f"{where}: needs 'labels' and 'scores'")
        try:
            parsed = parse_family_event(
                context_event(LoggedRound(event_id, context, true_label)), "conformal", "context",
                limits)
        except Rejected as exc:
            raise LogError(f"{where}: {exc.reason}: {exc.detail}") from None
        if not parsed.labels:
            raise LogError(f"{where}: needs at least one label")
        rounds.append(
            {
                "event_id": event_id,
                "labels": parsed.labels,
                "scores": parsed.scores,
                "true_label": true_label,
            }
        )
    if not rounds:
        raise LogError(f"{path}: no rounds")
    return rounds


def true_score(record: Mapping[str, Any]) -> float:
    """The true label's score; NaN when it is not a candidate (never covered)."""
    labels = record["labels"]
    if record["true_label"] in labels:
        return float(record["scores"][labels.index(record["true_label"])])
    return math.nan


def threshold_of(row: Mapping[str, Any]) -> float:
    """A trajectory row's threshold as a number: null is unbounded, -inf for the full set
    and +inf for the empty set (the only sets without a finite threshold)."""
    if row["threshold"] is not None:
        return float(row["threshold"])
    return -math.inf if row["set_size"] else math.inf


class ConformalTask:
    """A conformal log as an evaluation task (see the module docstring)."""

    family = "conformal"

    def __init__(self, records: list[dict[str, Any]], target_coverage: float) -> None:
        self.records = records
        self.target_coverage = target_coverage  # the learners', a live application's figure
        self.round_true_scores = [true_score(r) for r in records]
        self.round_min_scores = [min(r["scores"]) for r in records]
        # A true label that is not a candidate scores below everything: -inf in G*.
        self.true_scores = np.sort(np.nan_to_num(self.round_true_scores, nan=-np.inf))
        n = len(self.true_scores)
        # #{s < tau} <= floor(n (1 - c)) holds exactly up to the (floor + 1)-th score
        # (the epsilon keeps e.g. 10 * (1 - 0.8) = 1.9999999999999996 from flooring to 1).
        rank = math.floor(n * (1.0 - target_coverage) + 1e-9)
        self.tau_star = float(self.true_scores[min(rank, n - 1)])
        self.target_miscoverage = 1.0 - target_coverage

    def truth(self, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        """The truth event a live application sends for this decision: the label and G* of
        the threshold used, from which the worker computes exact regret and coverage."""
        threshold = output["threshold"]
        tau = -math.inf if threshold is None else float(threshold)
        return {"label": round_.hidden,
                "miscoverage": float(self.miscoverage(np.array([tau]))[0]),
                "target_miscoverage": self.target_miscoverage}

    def oracle_set_size(self, rounds: Sequence[LoggedRound]) -> float:
        """The mean set size of the best fixed threshold tau* on ``rounds``."""
        return float(np.mean([sum(s >= self.tau_star for s in r.context["scores"])
                              for r in rounds]))

    def miscoverage(self, thresholds: np.ndarray) -> np.ndarray:
        """G*(tau) under the log's empirical distribution, for an array of thresholds."""
        return np.searchsorted(self.true_scores, thresholds, side="left") / len(self.true_scores)

    def round_regret(self, thresholds: np.ndarray) -> np.ndarray:
        """phi(tau*) - phi(tau_t) per round, with the paper's phi."""
        regret = np.vectorize(conformal_round_regret, otypes=[float])
        target = self.target_miscoverage
        optimum = conformal_round_regret(float(self.miscoverage(self.tau_star)), target)
        # phi is piecewise linear in G*: evaluate it once per distinct threshold.
        distinct, inverse = np.unique(thresholds, return_inverse=True)
        return regret(self.miscoverage(distinct), target)[inverse] - optimum

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
        if output["set_size"] == len(round_.context["labels"]):
            # The true label is not a candidate and the set held them all: "missed" would
            # contradict the decision (dead-lettered), so the timeout settles it as a miss.
            return []
        return [{"missed": True}]

    def row(self, t: int, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "threshold": finite_or_none(output["threshold"]),
            "covered": round_.hidden in output["labels"],
            "set_size": output["set_size"],
        }

    def columns(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        return {
            "threshold": np.array([threshold_of(row) for row in rows], dtype=float),
            "covered": np.array([row["covered"] for row in rows], dtype=bool),
            "set_size": np.array([row["set_size"] for row in rows], dtype=float),
        }

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        columns = self.columns(rows)
        thresholds = columns["threshold"]
        return {
            "rounds": len(rows),
            "target_coverage": self.target_coverage,
            "coverage": float(columns["covered"].mean()),
            "mean_set_size": float(columns["set_size"].mean()),
            "tau_star": finite_or_none(self.tau_star),
            "final_threshold": rows[-1]["threshold"],
            "undercoverage_count": int(np.count_nonzero(thresholds > self.tau_star)),
            "regret": float(self.round_regret(thresholds).sum()),
        }

    def curves(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Per-round series for the plots: cumulative regret, running coverage and set size."""
        columns = self.columns(rows)
        t = np.arange(1, len(rows) + 1)
        return {
            "cumulative regret": np.cumsum(self.round_regret(columns["threshold"])),
            "coverage (running)": np.cumsum(columns["covered"]) / t,
            "set size (running mean)": np.cumsum(columns["set_size"]) / t,
        }

    def set_sizes(self, thresholds: np.ndarray) -> np.ndarray:
        """``|{y : score_t(y) >= threshold_t}|`` per round, the set every conformal learner
        decides (:meth:`banditflow.learners.conformal.base.ConformalLearner.decide`)."""
        sizes = np.empty(len(self.records), dtype=np.int64)
        widths = {len(r["scores"]) for r in self.records}
        chunk = max(1, 2**22 // max(widths))  # rows per block: a few tens of MB at a time
        for start in range(0, len(self.records), chunk):
            block = self.records[start : start + chunk]
            if len(widths) == 1:
                scores = np.array([r["scores"] for r in block], dtype=float)
            else:  # ragged candidate lists: pad with NaN, which is in no set
                scores = np.full((len(block), max(widths)), np.nan)
                for i, record in enumerate(block):
                    scores[i, : len(record["scores"])] = record["scores"]
            bound = thresholds[start : start + chunk, None]
            sizes[start : start + chunk] = np.count_nonzero(scores >= bound, axis=1)
        return sizes


def replay_direct(
    task: ConformalTask,
    algorithm: str,
    params: Mapping[str, Any],
    *,
    seed: int = 0,
    delay: Delay | None = None,
    feedback_timeout: float = 1000.0,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any], ConformalLearner]:
    """:func:`banditflow.offline.evaluation.replay.replay` without the processors, for speed: the
    same
    rows and summary (tests/unit/test_conformal_direct.py checks every learner, delay and loss
    against the processors), returned with the learner instead of the processor.

    Every conformal learner decides ``{y : score(y) >= threshold}`` and learns by
    ``observe(score)``, the true label's score when it was in the set and None for a miss or
    a timeout (what ``learn`` and ``expire`` reduce to), so a round needs only the threshold
    and the true label's score: no JSON, no validation (``read_log`` checked the log), no
    pending store. The feedback
    timing is the processors' replay's own :class:`FeedbackSchedule`; the timeout sweep and
    the dead-letter reasons of late feedback follow the processor's rules: a decision expires
    at the first sweep ``feedback_timeout`` rounds after it, and its record is purged at the
    next sweep (``retention_s = 0``).
    """
    delay = delay or Delay()
    try:  # the processors' own checks of the config, then of the learner's parameters
        parse_event(
            replay_config("conformal", algorithm, params, seed, feedback_timeout),
            LearnerConfig,
            Limits(),
        )
        learner = learner_class("conformal", algorithm).from_params(params)
    except Rejected as exc:
        raise ReplayError(f"learner config rejected ({exc.reason}): {exc.detail}") from None
    except LearnerError as exc:
        raise ReplayError(f"learner config rejected (invalid_config): {exc}") from None
    assert isinstance(learner, ConformalLearner)
    schedule = FeedbackSchedule(delay, feedback_timeout, np.random.default_rng(seed))
    truth = task.round_true_scores
    rounds = len(truth)
    thresholds = np.empty(rounds)
    covered = np.zeros(rounds, dtype=bool)
    observe = learner.observe  # what learn() (true label's score or None) and expire() do
    open_decisions: OrderedDict[int, None] = OrderedDict()  # only while feedback can be lost
    min_scores = task.round_min_scores
    # Rounds whose miss the application cannot report (see ConformalTask.feedback) expire.
    track = delay.loss > 0 or any(math.isnan(score) for score in truth)
    expired_at: dict[int, float] = {}
    last_sweep = -math.inf
    rejected: dict[str, int] = {}

    def arrive(decision: int, score: float | None) -> None:
        if track:
            if decision not in open_decisions:  # it timed out before this feedback came
                purged = last_sweep > expired_at[decision]
                reason = "feedback_without_decision" if purged else "decision_expired"
                rejected[reason] = rejected.get(reason, 0) + 1
                return
            del open_decisions[decision]
        observe(score)

    def sweep(now: float) -> None:
        nonlocal last_sweep
        while open_decisions:
            decision = next(iter(open_decisions))
            if now < decision + feedback_timeout:
                break
            open_decisions.popitem(last=False)
            expired_at[decision] = now
            observe(None)
        last_sweep = now

    send, arrived = schedule.send, schedule.arrived
    for t in range(rounds):
        for decision, score in arrived(t):
            arrive(decision, score)
        if schedule.sweep(t):
            sweep(float(t))
        tau = learner.threshold
        thresholds[t] = tau
        score = truth[t]
        if score >= tau:  # False for NaN: a true label that is not a candidate
            covered[t] = True
        else:
            score = None
        if track:
            open_decisions[t] = None
        if not (math.isnan(truth[t]) and min_scores[t] >= tau):
            send(t, (t, score))
        if progress is not None:
            progress(t + 1)
    last = float(rounds)
    for now, (decision, score) in schedule.in_flight(rounds):
        arrive(decision, score)
        last = now
    sweep(final_sweep(rounds, last, feedback_timeout))
    sizes = task.set_sizes(thresholds).tolist()
    rows = [
        {"t": t, "threshold": finite_or_none(tau), "covered": cover, "set_size": size}
        for t, (tau, cover, size) in enumerate(
            zip(thresholds.tolist(), covered.tolist(), sizes, strict=True)
        )
    ]
    return rows, replay_summary(task.summary(rows), schedule, rejected), learner


class DeprecatedAlpha(argparse.Action):
    """``--alpha``, still accepted as the former name of ``--target-coverage``, says so."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print("banditflow evaluate: --alpha is deprecated, use --target-coverage (the same "
              "number: the target coverage)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--target-coverage", type=float, default=0.9,
                       help="conformal: the learners' target coverage c (default 0.9)")
    group.add_argument("--alpha", type=float, dest="target_coverage", action=DeprecatedAlpha,
                       help="deprecated: the former name of --target-coverage (the conformal "
                       "literature's alpha is the miscoverage 1 - c)")
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
        params: dict[str, Any] = {"target_coverage": args.target_coverage}
        if "horizon" in learner_class("conformal", algorithm).parameters():
            params["horizon"] = horizon
        return params

    return ConformalTask(records, args.target_coverage), params_for
