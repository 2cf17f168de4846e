"""Offline replay: the worker's processors driven from a log, without Kafka.

Time is measured in rounds: round ``t`` decides the ``t``-th logged context at ``now = t``,
and the family's task turns the decision into the feedback the application would have
seen. That feedback is delivered ``delay`` rounds later (0 = before the next round) or never
(``loss``), in which case the learner's timeout rule applies after ``feedback_timeout_s``
rounds. Everything goes through :class:`banditflow.processors.Processor`, exactly as in the worker.
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
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from banditflow.processors import Emitted, PartitionStore, Processor, Source, StreamTimes

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


class LogError(ValueError):
    """A log (or scenario) file that cannot be replayed; the message says where and why."""


def log_records(path: Path, horizon: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for the JSON object on each non-blank line of a JSONL log,
    the first ``horizon`` only; a line that is not a JSON object is a :class:`LogError`
    naming it."""
    count = 0
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if horizon is not None and count >= horizon:
                return
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LogError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(record, dict):
                raise LogError(f"{path}:{number}: expected a JSON object")
            count += 1
            yield number, record


class ReplayError(RuntimeError):
    """The processors rejected an event of the replay (a config or context of the log)."""


def _raise_dead_letters(emitted: Emitted, what: str) -> None:
    if emitted.dead_letters:
        first = emitted.dead_letters[0]
        raise ReplayError(f"{what} rejected ({first.reason}): {first.detail}")


def _count(emitted: Emitted, rejected: dict[str, int]) -> None:
    for dead in emitted.dead_letters:
        rejected[dead.reason] = rejected.get(dead.reason, 0) + 1


class FeedbackSchedule:
    """When simulated feedback arrives, in rounds: the one timing model of every replay driver.

    ``send(t, item)`` draws the item's delay with :meth:`Delay.draw` (in call order, so two
    drivers sending the same parts draw the same delays) and returns False when it is lost.
    ``arrived(t)`` pops the items due by round ``t``, in send order among equal rounds; a driver
    applies them before round ``t``'s timeout sweep and decision. ``sweep(t)`` says whether the
    timeout sweep runs at round ``t``: only once something was lost (nothing else can time
    out before it arrives), then every tenth of the timeout. ``in_flight(end)`` drains what
    is still on its way after the last round, each item with its arrival time.
    """

    def __init__(self, delay: Delay, feedback_timeout: float, rng: np.random.Generator) -> None:
        self.delay = delay
        self.feedback_timeout = feedback_timeout
        self.rng = rng
        self.lost = 0
        self._due: list[tuple[int, int, Any]] = []  # heap of (round, send order, item)
        self._sent = 0
        self._next_sweep = feedback_timeout

    def send(self, t: int, item: Any) -> bool:
        wait = self.delay.draw(self.rng)
        if wait is None:
            self.lost += 1
            return False
        heapq.heappush(self._due, (t + 1 + wait, self._sent, item))
        self._sent += 1
        return True

    def arrived(self, t: int) -> list[Any]:
        due = self._due
        items = []
        while due and due[0][0] <= t:
            items.append(heapq.heappop(due)[2])
        return items

    def sweep(self, t: int) -> bool:
        if not self.lost or t < self._next_sweep:
            return False
        self._next_sweep = t + max(1.0, self.feedback_timeout / 10)
        return True

    def in_flight(self, end: int) -> Iterator[tuple[float, Any]]:
        while self._due:
            round_at, _, item = heapq.heappop(self._due)
            yield float(max(round_at, end)), item


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
    """Run ``task`` through a fresh processor; returns trajectory rows, summary, processor.

    The summary adds to the task's: ``feedback_lost`` (parts never delivered) and
    ``feedback_rejected`` (dead-lettered parts by reason, e.g. ``decision_expired`` for
    feedback that arrived after its decision timed out, ``feedback_without_decision`` when
    that decision's record was already purged).
    """
    delay = delay or Delay()
    processor = Processor(PartitionStore(retention_s=0.0, track_changes=False))
    config = replay_config(task.family, algorithm, params, seed, feedback_timeout)
    _raise_dead_letters(processor.on_config(LEARNER_ID, config, CONFIGS, 0.0), "learner config")
    rng = np.random.default_rng(seed)
    schedule = FeedbackSchedule(delay, feedback_timeout, rng)
    rows: list[dict[str, Any]] = []
    rejected: dict[str, int] = {}
    t = 0
    for t, round_ in enumerate(task.rounds()):
        for raw in schedule.arrived(t):
            _count(processor.on_feedback(raw, FEEDBACK, float(t)), rejected)
        if schedule.sweep(t):
            _count(processor.on_tick(StreamTimes.at(float(t))), rejected)
        emitted = processor.on_context(context_event(round_), CONTEXTS, float(t))
        _raise_dead_letters(emitted, f"context of round {t} (event {round_.event_id!r})")
        output = emitted.decisions[0].output
        rows.append({"t": t, **task.row(t, round_, output)})
        for part in task.feedback(round_, output, rng):
            body = {"learner_id": LEARNER_ID, "event_id": round_.event_id, **part}
            schedule.send(t, json.dumps(body).encode())
        if progress is not None:
            progress(t + 1)
    end = t + 1
    last = float(end)
    for last, raw in schedule.in_flight(end):
        _count(processor.on_feedback(raw, FEEDBACK, last), rejected)
    _count(processor.on_tick(StreamTimes.at(final_sweep(end, last, feedback_timeout))), rejected)
    return rows, replay_summary(task.summary(rows), schedule, rejected), processor


def replay_config(
    family: str, algorithm: str, params: Mapping[str, Any], seed: int, feedback_timeout: float
) -> bytes:
    """The replayed learner's LearnerConfig event (no early-feedback grace: rounds are exact)."""
    config = {
        "learner_id": LEARNER_ID,
        "family": family,
        "algorithm": algorithm,
        "params": dict(params),
        "seed": seed,
        "feedback_timeout_s": feedback_timeout,
        "early_feedback_grace_s": 0.0,
    }
    return json.dumps(config).encode()


def context_event(round_: LoggedRound) -> bytes:
    """The context event of a logged round, as the application would produce it."""
    body = {"learner_id": LEARNER_ID, "event_id": round_.event_id, **round_.context}
    return json.dumps(body).encode()


def final_sweep(end: int, last_arrival: float, feedback_timeout: float) -> float:
    """When the closing timeout sweep runs: once every decision has timed out and every
    feedback still in flight at the end of the log has arrived."""
    return max(float(end) + feedback_timeout, last_arrival)


def replay_summary(
    summary: dict[str, Any], schedule: FeedbackSchedule, rejected: Mapping[str, int]
) -> dict[str, Any]:
    """The task's summary with what happened to the feedback."""
    delay = schedule.delay
    return {
        **summary,
        "feedback_lost": schedule.lost,
        "feedback_rejected": dict(rejected),
        "delay": delay.__dict__ | {"args": list(delay.args)},
    }


class Progress:
    """Progress on stderr for long evaluations: a line every two seconds while the replay
    runs, then ``finish`` with the rounds replayed (a replay shorter than two seconds prints
    that line alone)."""

    def __init__(self, label: str, total: int | None) -> None:
        self.label = label
        self.total = total
        self.started = time.monotonic()
        self.last = self.started

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last >= 2.0:
            self.last = now
            total = f" of {self.total:,}" if self.total else ""
            self.line(f"{done:,}{total} rounds", done, now)

    def finish(self, done: int) -> None:
        now = time.monotonic()
        self.line(f"{done:,} rounds in {now - self.started:.1f} s", done, now)

    def line(self, text: str, done: int, now: float) -> None:
        rate = done / max(now - self.started, 1e-9)
        print(f"  {self.label}: {text} ({rate:,.0f}/s)", file=sys.stderr, flush=True)


def finite_or_none(value: float) -> float | None:
    """JSON has no infinities: -inf thresholds (the full set) are written as null."""
    return None if value is None or math.isinf(value) else value
