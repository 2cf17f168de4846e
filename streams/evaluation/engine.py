"""Offline replay: the worker's processors driven from a log, without Kafka.

Time is measured in rounds: round ``t`` decides the ``t``-th logged context at ``now = t``,
and the family's task turns the decision into the feedback the application would have
seen. That feedback is delivered ``delay`` rounds later (0 = before the next round) or never
(``loss``), in which case the learner's timeout rule applies after ``feedback_timeout_s``
rounds. Everything goes through :class:`processors.Processor`, exactly as in the worker.
"""

from __future__ import annotations

import heapq
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from processors import Processor, Source
from processors.engine import Emitted

LEARNER_ID = "replay"
CONFIGS, CONTEXTS, FEEDBACK = Source("learners"), Source("contexts"), Source("feedback")


@dataclass(frozen=True)
class LoggedRound:
    """One logged round: the context fields the learner sees and what only the log knows."""

    event_id: str
    context: dict[str, Any]
    hidden: Any


class Task(Protocol):
    """One family's evaluation: its log, its simulated feedback, its report."""

    family: str

    def rounds(self) -> Iterator[LoggedRound]: ...

    def feedback(
        self, round_: LoggedRound, output: Mapping[str, Any], rng: np.random.Generator
    ) -> list[dict[str, Any]]:
        """The feedback events (without envelope) the application sends for this decision."""

    def row(self, t: int, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        """The trajectory line of round ``t``."""

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Delay:
    """Feedback delay in rounds: ``0`` (immediate), ``fixed:K``, ``uniform:A:B``,
    ``geometric:P`` (number of failures before a success, mean (1-P)/P) or ``poisson:MEAN``;
    ``loss`` is the probability that feedback never arrives."""

    kind: str = "fixed"
    args: tuple[float, ...] = (0.0,)
    loss: float = 0.0

    @classmethod
    def parse(cls, spec: str | None, loss: float = 0.0) -> Delay:
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"feedback loss must be in [0, 1), got {loss}")
        if spec is None or spec.strip() in ("", "0"):
            return cls(loss=loss)
        if re.fullmatch(r"\d+", spec.strip()):
            return cls("fixed", (float(spec),), loss)
        kind, _, rest = spec.partition(":")
        arity = {"fixed": 1, "uniform": 2, "geometric": 1, "poisson": 1}
        try:
            args = tuple(float(a) for a in rest.split(":")) if rest else ()
        except ValueError:
            args = ()
        if kind not in arity or len(args) != arity[kind] or any(a < 0 for a in args):
            raise ValueError(
                f"bad delay {spec!r}: use 0, K, fixed:K, uniform:A:B, geometric:P or poisson:MEAN"
            )
        if kind == "geometric" and not 0 < args[0] <= 1:
            raise ValueError(f"geometric delay needs 0 < P <= 1, got {args[0]}")
        return cls(kind, args, loss)

    def draw(self, rng: np.random.Generator) -> int | None:
        """Rounds until the feedback arrives (None: it never does)."""
        if self.loss and rng.random() < self.loss:
            return None
        if self.kind == "fixed":
            return int(self.args[0])
        if self.kind == "uniform":
            return int(rng.integers(int(self.args[0]), int(self.args[1]) + 1))
        if self.kind == "geometric":
            return int(rng.geometric(self.args[0])) - 1
        return int(rng.poisson(self.args[0]))


class ReplayError(RuntimeError):
    pass


def _raise_dead_letters(emitted: Emitted, what: str) -> None:
    if emitted.dead_letters:
        first = emitted.dead_letters[0]
        raise ReplayError(f"{what} rejected ({first.reason}): {first.detail}")


def _count(emitted: Emitted, rejected: dict[str, int]) -> None:
    for dead in emitted.dead_letters:
        rejected[dead.reason] = rejected.get(dead.reason, 0) + 1


def replay(
    task: Task,
    algorithm: str,
    params: Mapping[str, Any],
    *,
    seed: int = 0,
    delay: Delay | None = None,
    feedback_timeout: float = 1000.0,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any], Processor]:
    """Run ``task`` through a fresh processor; returns trajectory rows, summary, processor."""
    delay = delay or Delay()
    rng = np.random.default_rng(seed)
    processor = Processor({}, {}, retention_s=0.0, persist_state=False)
    config = {
        "learner_id": LEARNER_ID,
        "family": task.family,
        "algorithm": algorithm,
        "params": dict(params),
        "seed": seed,
        "feedback_timeout_s": feedback_timeout,
        "early_feedback_grace_s": 0.0,
    }
    _raise_dead_letters(
        processor.on_config(LEARNER_ID, json.dumps(config).encode(), CONFIGS, 0.0), "learner config"
    )
    due: list[tuple[int, int, bytes]] = []  # (round, order, feedback bytes)
    order = 0
    rows: list[dict[str, Any]] = []
    lost = 0
    late: dict[str, int] = {}  # feedback dead-lettered, e.g. arriving after its timeout
    next_tick = feedback_timeout
    t = 0
    for t, round_ in enumerate(task.rounds()):
        while due and due[0][0] <= t:
            _, _, raw = heapq.heappop(due)
            _count(processor.on_feedback(raw, FEEDBACK, float(t)), late)
        if lost and t >= next_tick:
            processor.on_tick(0, float(t))  # only lost feedback needs the timeout sweep
            next_tick = t + max(1.0, feedback_timeout / 10)
        body = {"learner_id": LEARNER_ID, "event_id": round_.event_id, **round_.context}
        emitted = processor.on_context(json.dumps(body).encode(), CONTEXTS, float(t))
        _raise_dead_letters(emitted, f"context of round {t} (event {round_.event_id!r})")
        output = emitted.decisions[0].output
        rows.append({"t": t, **task.row(t, round_, output)})
        for part in task.feedback(round_, output, rng):
            wait = delay.draw(rng)
            if wait is None:
                lost += 1
                continue
            body = {"learner_id": LEARNER_ID, "event_id": round_.event_id, **part}
            heapq.heappush(due, (t + 1 + wait, order, json.dumps(body).encode()))
            order += 1
        if progress is not None:
            progress(t + 1)
    end = t + 1
    while due:  # feedback still in flight at the end of the log
        round_at, _, raw = heapq.heappop(due)
        _count(processor.on_feedback(raw, FEEDBACK, float(max(round_at, end))), late)
    processor.on_tick(0, float(end) + feedback_timeout)
    processor.flush_state()
    summary = task.summary(rows)
    summary.update(
        feedback_lost=lost,
        feedback_rejected=late,
        delay=delay.__dict__ | {"args": list(delay.args)},
    )
    return rows, summary, processor


class Progress:
    """Progress on stderr for long evaluations (at most every two seconds)."""

    def __init__(self, label: str, total: int | None) -> None:
        self.label = label
        self.total = total
        self.started = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last < 2.0 and done != self.total:
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        total = f"/{self.total}" if self.total else ""
        print(f"  {self.label}: {done}{total} rounds ({rate:,.0f}/s)", file=sys.stderr, flush=True)


def finite_or_none(value: float) -> float | None:
    """JSON has no infinities: -inf thresholds (the full set) are written as null."""
    return None if value is None or math.isinf(value) else value
