"""Evaluating ``graph_cb`` learners on a full-information log with simulated graph feedback.

Log: JSONL, one round per line, ``{"event_id", "features": [...] (or one vector per action),
"losses": [K losses in [-1, 1]], "graph": optional K x K}`` (``offline/logs/graph_cb.py``
builds some). The learner sees the features and the line's graph; the losses stay hidden.

Feedback graph of a round: the line's ``graph`` if it has one (sent with the context, so the
learner decides with it), otherwise the fixed graph of ``--graph FILE`` (a JSON K x K array) or
``--graph-kind NAME`` (bandit, full, cops_and_robbers, apple_tasting, inventory), which is
also given to the learner as its ``graph``/``graph_kind`` parameter.

Reveal simulation: with G the round's graph and a the played action, the loss of every j is
revealed independently with probability ``G[a][j]`` (one uniform per action from the
replay's seeded generator, so a seed reproduces the run). The application then sends one
feedback event ``{"losses": {"j": loss_j for every revealed j}}`` - also when nothing was
revealed (a played action without self-loop or out-edges, e.g. apple tasting's "let
through"): ``{"losses": {}}`` settles the decision at once with no observation, which is what
the timeout rule would do later, but it does not keep the decision pending for
``--feedback-timeout`` rounds and it counts as a learn call (the ``vw`` gamma schedule counts
them, as Vowpal Wabbit counts examples). ``--loss`` / ``--delay`` act on that event as usual.

Reported with the log's full losses: ``pv_loss`` (progressive-validation loss, the mean loss of
the played actions, revealed or not), ``oracle_loss`` (the mean loss of the best action of
each round), ``regret`` = sum_t (loss_t(a_t) - min_a loss_t(a)) and ``mean_regret`` = regret /
rounds, ``best_fixed_loss`` (the best single action in hindsight), ``mean_dec`` (mean of the
finite dec values of the played distributions), ``infinite_dec`` (rounds whose dec was
infinite) and ``mean_revealed`` (revealed losses per round; no delay/loss counted).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from banditflow.learners.base import LearnerError
from banditflow.learners.graph_cb.graphs import GRAPH_KINDS, as_graph, named_graph
from banditflow.offline.evaluation.replay import LogError, LoggedRound, log_records


def _check_graph(graph: Any, actions: int, where: str) -> np.ndarray:
    try:
        return as_graph(graph, actions)
    except LearnerError as exc:
        raise LogError(f"{where}: bad graph: {exc}") from None


def read_log(path: Path, horizon: int | None = None) -> list[dict[str, Any]]:
    """The first ``horizon`` rounds of a graph_cb log, checked line by line. Each record gets
    ``losses`` and (if the line has one) ``graph`` as float arrays."""
    rounds: list[dict[str, Any]] = []
    actions: int | None = None
    for number, record in log_records(path, horizon):
        where = f"{path}:{number}"
        features, losses = record.get("features"), record.get("losses")
        if not isinstance(features, list) or not features:
            raise LogError(f"{where}: needs a non-empty 'features' list")
        if not isinstance(losses, list) or not losses:
            raise LogError(f"{where}: needs a non-empty 'losses' list (one per action)")
        try:
            loss_array = np.array(losses, dtype=float)
        except (TypeError, ValueError):
            raise LogError(f"{where}: 'losses' must be numbers") from None
        if loss_array.ndim != 1 or not np.all(np.abs(loss_array) <= 1.0):
            raise LogError(f"{where}: 'losses' must be K numbers in [-1, 1]")
        if actions is None:
            actions = loss_array.size
        elif loss_array.size != actions:
            raise LogError(f"{where}: {loss_array.size} losses, earlier lines had {actions}")
        parsed: dict[str, Any] = {
            "event_id": str(record.get("event_id", number)),
            "features": features,
            "losses": loss_array,
        }
        if record.get("graph") is not None:
            parsed["graph"] = _check_graph(record["graph"], actions, where)
        rounds.append(parsed)
    if not rounds:
        raise LogError(f"{path}: no rounds")
    return rounds


def reveal(graph: np.ndarray, action: int, rng: np.random.Generator) -> np.ndarray:
    """The actions whose loss playing ``action`` reveals: j with probability ``G[action, j]``
    (one uniform per action, drawn even for 0/1 entries so the stream of draws is fixed)."""
    return np.flatnonzero(rng.random(graph.shape[1]) < graph[action])


class GraphCBTask:
    """A graph_cb log as an evaluation task (see the module docstring)."""

    family = "graph_cb"

    def truth(self, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        """The truth event a live application sends: every action's loss (exact regret)."""
        return {"all_losses": {str(a): float(v) for a, v in enumerate(round_.hidden["losses"])}}

    def __init__(self, records: list[dict[str, Any]], graph: np.ndarray | None = None) -> None:
        self.records = records
        self.graph = graph
        missing = [r["event_id"] for r in records if "graph" not in r]
        if graph is None and missing:
            raise LogError(
                f"round {missing[0]!r} has no 'graph' line field: give --graph FILE or "
                f"--graph-kind ({', '.join(GRAPH_KINDS)})"
            )
        self.losses = np.vstack([r["losses"] for r in records])
        self.best = self.losses.min(axis=1)
        self.revealed: list[int] = []

    @property
    def actions(self) -> int:
        return int(self.losses.shape[1])

    def round_graph(self, record: Mapping[str, Any]) -> np.ndarray:
        graph = record.get("graph")
        return self.graph if graph is None else graph  # type: ignore[return-value]

    def rounds(self) -> Iterator[LoggedRound]:
        for record in self.records:
            context: dict[str, Any] = {"features": record["features"]}
            if "graph" in record:
                context["graph"] = record["graph"].tolist()
            yield LoggedRound(record["event_id"], context, record)

    def feedback(
        self, round_: LoggedRound, output: Mapping[str, Any], rng: np.random.Generator
    ) -> list[dict[str, Any]]:
        record = round_.hidden
        revealed = reveal(self.round_graph(record), int(output["action"]), rng)
        self.revealed.append(int(revealed.size))
        return [{"losses": {str(j): float(record["losses"][j]) for j in revealed}}]

    def row(self, t: int, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        action = int(output["action"])
        return {"action": action, "loss": float(round_.hidden["losses"][action]),
                "dec": output["dec"]}

    def per_round_regret(self, rows: list[dict[str, Any]]) -> np.ndarray:
        return np.array([row["loss"] - self.best[row["t"]] for row in rows])

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(rows)
        losses = np.array([row["loss"] for row in rows])
        decs = [row["dec"] for row in rows if row["dec"] is not None]
        regret = float(self.per_round_regret(rows).sum())
        played = np.array([row["t"] for row in rows])
        summary: dict[str, Any] = {
            "rounds": n,
            "actions": self.actions,
            "pv_loss": float(losses.mean()),
            "oracle_loss": float(self.best[played].mean()),
            "best_fixed_loss": float(self.losses[played].mean(axis=0).min()),
            "regret": regret,
            "mean_regret": regret / n,
            "mean_dec": float(np.mean(decs)) if decs else None,
            "infinite_dec": n - len(decs),
        }
        if len(self.revealed) == n:
            summary["mean_revealed"] = float(np.mean(self.revealed))
        return summary

    def curves(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Per-round series for the plots: running PV loss, cumulative regret, running dec."""
        t = np.arange(1, len(rows) + 1)
        decs = np.array([math.nan if r["dec"] is None else r["dec"] for r in rows])
        finite = np.isfinite(decs)
        dec_running = np.cumsum(np.where(finite, decs, 0.0)) / np.maximum(np.cumsum(finite), 1)
        return {
            "progressive validation loss": np.cumsum([r["loss"] for r in rows]) / t,
            "cumulative regret vs per-round best": np.cumsum(self.per_round_regret(rows)),
            "dec (running mean)": dec_running,
        }


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--graph",
        type=Path,
        metavar="FILE",
        help="graph_cb: JSON K x K feedback graph (G[a][j] = P(playing a reveals j)) for "
        "lines without their own 'graph'",
    )
    group.add_argument(
        "--graph-kind",
        choices=GRAPH_KINDS,
        help="graph_cb: a named feedback graph for lines without their own 'graph'",
    )
    group.add_argument(
        "--gamma-scale",
        type=float,
        metavar="C",
        help="graph_cb: exploration scale: gamma_c of the sqrt_alpha schedule "
        "(gamma_t = C sqrt(alpha t)) and gamma_scale of the vw schedule",
    )


def build(
    args: argparse.Namespace, seed: int
) -> tuple[GraphCBTask, Callable[[str], dict[str, Any]]]:
    if args.log is None:
        raise SystemExit("--family graph_cb needs --log FILE")
    if args.graph is not None and args.graph_kind is not None:
        raise SystemExit("give either --graph or --graph-kind, not both")
    records = read_log(args.log, args.horizon)
    actions = records[0]["losses"].size
    graph_param: dict[str, Any] = {}
    graph = None
    if args.graph is not None:
        graph = _check_graph(json.loads(args.graph.read_text()), actions, str(args.graph))
        graph_param = {"graph": graph.tolist()}
    elif args.graph_kind is not None:
        try:
            graph = named_graph(args.graph_kind, actions)
        except LearnerError as exc:
            raise SystemExit(f"--graph-kind {args.graph_kind}: {exc}") from None
        graph_param = {"graph_kind": args.graph_kind}
    try:
        task = GraphCBTask(records, graph)
    except LogError as exc:
        raise SystemExit(str(exc)) from None
    first = np.asarray(records[0]["features"], dtype=float)
    layout = "per_action" if first.ndim == 2 else "shared"

    def params_for(algorithm: str) -> dict[str, Any]:
        params: dict[str, Any] = {
            "actions": actions,
            "feature_dim": int(first.shape[-1]),
            "feature_layout": layout,
            "update": "rls",
            **graph_param,
        }
        if args.gamma_scale is not None:
            params.update(gamma_c=args.gamma_scale, gamma_scale=args.gamma_scale)
        return params

    return task, params_for
