"""A simulated application per family: produces contexts, reads decisions, answers with delayed
feedback and the ground truth.

It talks to the broker like any real client would (aiokafka, default murmur2 partitioner):
contexts go to ``contexts``, decisions are read from ``decisions``, and after a random delay
the feedback goes to ``feedback`` and the ground truth to ``truth`` (from which the worker
computes exact regret). What it plays is the family's offline evaluation task on a bundled
log (:mod:`banditflow.offline.environments`), so the live and the offline runs answer a decision
alike.
With a baseline, every context goes to the learner and to the baseline (same event id, same
traffic), and each decision gets its own feedback.

The application keeps its own tally per learner from the decisions and the truth it sent
(the family's ``stats_on_truth``, as the worker does): the live view and the report's curves
come from it; the summary figures come from the worker's ``/metrics``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from banditflow.learners.base import Learner, Stats, add_stat
from banditflow.learners.registry import learner_class
from banditflow.offline.candidate_task import candidate_traffic
from banditflow.offline.environments import Traffic, applications, traffic
from banditflow.streams.connection import KafkaConnection
from banditflow.streams.topics import Topics

RECENT = 500  # decisions in the "recent" coverage and set size (what convergence shows)


def add_simulation_options(parser: argparse.ArgumentParser, family_default: str | None) -> None:
    if family_default is None:
        parser.add_argument("--family", choices=sorted(applications()), required=True,
                            help="the family whose simulated application runs")
    parser.add_argument("--learner-id", default=None,
                        help="learner to drive (default: <family>-<algorithm>)")
    parser.add_argument("--algorithm", default=None,
                        help="the learner's algorithm (default: the family's demo learner)")
    parser.add_argument("--baseline", action="store_true",
                        help="also drive the family's baseline on the same traffic")
    parser.add_argument("--candidate", dest="candidates", action="append", default=[],
                        metavar="ALGORITHM",
                        help="evaluate this algorithm of the family live beside the learner (a "
                        "candidate of its config, named after it, with the traffic's "
                        "parameters; live OPE, families whose decisions carry p: graph_cb); "
                        "repeatable")
    parser.add_argument("--candidates", dest="candidate_sets", action="store_true",
                        help="graph_cb: requests offering their own candidates (5-50 items of a "
                             "1,000-item catalogue, with features), decided by learners with "
                             "action_features (banditflow.offline.candidate_task)")
    parser.add_argument("--events", type=int, default=None,
                        help="contexts to send (per learner)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="load: contexts per second (0: as fast as --window allows; "
                        "default: %(default)s)")
    parser.add_argument("--window", type=int, default=200,
                        help="contexts in flight without a decision (default: %(default)s)")
    parser.add_argument("--delay-mean", type=float, default=0.2,
                        help="mean feedback delay in seconds, exponential (default: %(default)s)")
    parser.add_argument("--feedback-loss", type=float, default=0.0,
                        help="probability that a decision's feedback is never sent "
                        "(default: %(default)s)")
    parser.add_argument("--no-create-learner", dest="create_learner", action="store_false",
                        help="do not produce the learners' configs first")
    parser.add_argument("--feedback-timeout", type=float, default=30.0,
                        help="the learners' feedback timeout in seconds")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the log, the delays and the losses (default: 0)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="give up after this many seconds (default: %(default)s)")
    parser.add_argument("--workdir", type=Path, default=Path("runs/simulate"),
                        help="where the bundled log is built (default: %(default)s)")


@dataclass
class SimulationSettings:
    kafka: KafkaConnection = field(default_factory=KafkaConnection)
    prefix: str = "banditflow"
    family: str = "conformal"
    learner_id: str | None = None
    algorithm: str | None = None
    baseline: bool = False
    candidates: list[str] = field(default_factory=list)
    candidate_sets: bool = False
    events: int | None = None
    rate: float = 0.0
    window: int = 200
    delay_mean: float = 0.2
    feedback_loss: float = 0.0
    create_learner: bool = True
    feedback_timeout: float = 30.0
    seed: int = 0
    timeout: float = 600.0
    workdir: Path = Path("runs/simulate")

    def __post_init__(self) -> None:
        if self.candidate_sets and self.family != "graph_cb":
            raise ValueError("--candidates drives graph_cb learners (candidate sets), not "
                             f"{self.family}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SimulationSettings:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in vars(args).items() if k in names})


@dataclass
class Point:
    """One sample of a learner's trajectory (every few decisions)."""

    decided: int
    regret: float
    coverage: float | None = None
    set_size: float | None = None
    spent: float | None = None


@dataclass
class LearnerTally:
    """What the application knows about one learner: its decisions and their truth."""

    learner_id: str
    algorithm: str
    role: str  # "learner" or "baseline"
    cls: type[Learner]
    params: dict[str, Any]
    candidates: dict[str, Any] = field(default_factory=dict)  # (its config's)
    decided: int = 0
    rejected: int = 0
    truths: int = 0
    covered: deque[bool] = field(default_factory=lambda: deque(maxlen=RECENT))
    set_sizes: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT))
    covered_total: int = 0
    set_size_total: int = 0
    deferred: int = 0
    spent: float = 0.0
    dual_price: float | None = None
    stats: Stats = field(default_factory=dict)
    trajectory: list[Point] = field(default_factory=list)

    def decision(self, output: dict[str, Any], round_: Any) -> None:
        self.decided += 1
        if "set_size" in output:
            covered = round_.hidden in output["labels"]
            self.covered.append(covered)
            self.set_sizes.append(int(output["set_size"]))
            self.covered_total += covered
            self.set_size_total += int(output["set_size"])
        if "defer" in output:
            self.deferred += bool(output["defer"])
            if output.get("dual_price") is not None:
                self.dual_price = float(output["dual_price"])

    def truth(self, output: dict[str, Any], truth: dict[str, Any]) -> None:
        """The family's exact-regret statistics, as the worker keeps them."""
        self.truths += 1
        add_stat(self.stats, "truth_rounds")
        self.cls.stats_on_truth(self.stats, output, truth, self.params)
        if output.get("defer"):
            self.spent += float(truth["human_cost"])
        if self.truths % 25 == 0:
            self.trajectory.append(Point(self.truths, self.regret, self.coverage,
                                         self.set_size, self.spent))

    @property
    def regret(self) -> float:
        values: dict[str, Any] = {}
        self.cls.stats_gauges(self.stats, self.params, values)
        return float(values.get("regret_exact", 0.0))

    @property
    def coverage(self) -> float | None:
        """Recent coverage (the last RECENT decisions), conformal only."""
        return sum(self.covered) / len(self.covered) if self.covered else None

    @property
    def set_size(self) -> float | None:
        return sum(self.set_sizes) / len(self.set_sizes) if self.set_sizes else None


@dataclass
class SimulationReport:
    family: str
    events: int
    tallies: list[LearnerTally]
    oracle_set_size: float | None = None
    budget: float | None = None
    target_coverage: float | None = None
    sent: int = 0
    feedback_sent: int = 0
    # Per decision: worker latency (decided_at - context ts) and the application's round trip
    # (decision received - context sent), in seconds.
    latencies: list[float] = field(default_factory=list)
    round_trips: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    timed_out: bool = False

    @property
    def decided(self) -> int:
        return sum(t.decided for t in self.tallies)

    @property
    def rejected(self) -> int:
        return sum(t.rejected for t in self.tallies)

    @property
    def expected(self) -> int:
        return self.events * len(self.tallies)

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    @property
    def decisions_per_s(self) -> float:
        return self.decided / self.elapsed if self.elapsed > 0 else 0.0

    def render(self) -> str:
        status = " (TIMED OUT)" if self.timed_out else ""
        if self.rejected:
            status += f", {self.rejected} contexts dead-lettered"
        lines = [f"{self.family}: sent {self.sent} contexts, {self.decided} decisions, "
                 f"{self.feedback_sent} feedback in {self.elapsed:.1f}s "
                 f"({self.decisions_per_s:.0f} decisions/s){status}"]
        for t in self.tallies:
            line = f"  {t.learner_id} ({t.algorithm}): regret {t.regret:.2f}"
            if t.coverage is not None:
                line += f", recent coverage {t.coverage:.3f}, set size {t.set_size:.2f}"
                if self.oracle_set_size is not None:
                    line += f" (oracle {self.oracle_set_size:.2f})"
            if self.budget is not None:
                line += f", spent {t.spent:.1f} of budget {self.budget:.1f}"
            lines.append(line)
        return "\n".join(lines)


def prepare(settings: SimulationSettings) -> tuple[Traffic, SimulationReport]:
    """The family's traffic and an empty report with one tally per driven learner."""
    application = applications()[settings.family]
    events = settings.events or 3000
    if settings.candidate_sets:
        played = candidate_traffic(events, settings.seed)
    else:
        played = traffic(settings.family, events, settings.seed, settings.workdir)
    algorithms = [("learner", settings.algorithm or application.learner)]
    if settings.baseline:
        algorithms.append(("baseline", application.baseline))
    tallies = []
    for role, algorithm in algorithms:
        if role == "learner" and settings.learner_id:
            learner_id = settings.learner_id
        else:
            learner_id = f"{settings.family}-{algorithm}"
        params = played.params_for(algorithm)
        if algorithm == application.learner:
            params |= application.learner_params
        candidates = {name: {"algorithm": name, "params": played.params_for(name),
                             "seed": settings.seed}
                      for name in settings.candidates} if role == "learner" else {}
        tallies.append(LearnerTally(learner_id, algorithm, role,
                                    learner_class(settings.family, algorithm), params,
                                    candidates))
    report = SimulationReport(settings.family, events, tallies, played.oracle_set_size(),
                              played.budget(), played.target_coverage())
    return played, report


def learner_config(settings: SimulationSettings, tally: LearnerTally) -> dict[str, Any]:
    return {
        "learner_id": tally.learner_id,
        "family": settings.family,
        "algorithm": tally.algorithm,
        "params": tally.params,
        "seed": settings.seed,
        "feedback_timeout_s": settings.feedback_timeout,
        "candidates": tally.candidates,
    }


async def simulate(
    settings: SimulationSettings,
    progress: Callable[[SimulationReport], None] | None = None,
    prepared: tuple[Traffic, SimulationReport] | None = None,
) -> SimulationReport:
    played, report = prepared or prepare(settings)
    topics = Topics(settings.prefix)
    rng = np.random.default_rng([settings.seed, 1])
    tallies = {t.learner_id: t for t in report.tallies}
    producer = AIOKafkaProducer(**settings.kafka.aiokafka_kwargs(), acks="all")
    consumer = AIOKafkaConsumer(
        **settings.kafka.aiokafka_kwargs(), group_id=None, enable_auto_commit=False
    )
    await producer.start()
    await consumer.start()
    run = f"{int(time.time() * 1000):x}"  # event ids unique across runs
    report.started = time.monotonic()
    try:
        await consumer.topics()  # refreshes the metadata
        assigned = []
        for topic in (topics.decisions, topics.deadletter):
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                raise RuntimeError(f"topic {topic!r} does not exist: start a worker first")
            assigned += [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_end(*assigned)
        for tp in assigned:
            await consumer.position(tp)
        if settings.create_learner:
            for tally in report.tallies:
                await producer.send_and_wait(
                    topics.learners,
                    key=tally.learner_id.encode(),
                    value=json.dumps(learner_config(settings, tally)).encode(),
                )
        rounds: dict[str, Any] = {}
        sent_at: dict[str, float] = {}
        open_decisions: dict[tuple[str, str], None] = {}
        in_flight = asyncio.Semaphore(settings.window)
        feedback_tasks: set[asyncio.Task] = set()
        done = asyncio.Event()

        async def send_feedback(tally: LearnerTally, event_id: str, output: dict[str, Any],
                                round_: Any, delay: float, lost: bool) -> None:
            await asyncio.sleep(delay)
            key = tally.learner_id.encode()
            envelope = {"learner_id": tally.learner_id, "event_id": event_id, "ts": time.time()}
            if not lost:
                for part in played.feedback(round_, output, rng):
                    body = {**envelope, **part}
                    await producer.send(topics.feedback, key=key, value=json.dumps(body).encode())
            truth = played.truth(round_, output)
            await producer.send(topics.truth, key=key,
                                value=json.dumps({**envelope, **truth}).encode())
            tally.truth(output, truth)
            report.feedback_sent += 1

        async def produce() -> None:
            started = time.monotonic()
            for i, round_ in enumerate(played.rounds):
                if settings.rate > 0:
                    await asyncio.sleep(max(0.0, started + i / settings.rate - time.monotonic()))
                event_id = f"{run}-{i}"
                rounds[event_id] = round_
                sent_at[event_id] = time.time()
                for tally in report.tallies:
                    await in_flight.acquire()
                    open_decisions[(tally.learner_id, event_id)] = None
                    body = {"learner_id": tally.learner_id, "event_id": event_id,
                            "ts": sent_at[event_id], **round_.context}
                    await producer.send(topics.contexts, key=tally.learner_id.encode(),
                                        value=json.dumps(body).encode())
                report.sent += 1

        async def consume() -> None:
            while report.decided + report.rejected < report.expected:
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for record in records:
                        decision = json.loads(record.value)
                        tally = tallies.get(decision.get("learner_id"))
                        event_id = decision.get("event_id")
                        if tally is None or (tally.learner_id, event_id) not in open_decisions:
                            continue
                        del open_decisions[(tally.learner_id, event_id)]
                        in_flight.release()
                        round_ = rounds[event_id]
                        if record.topic == topics.deadletter:
                            tally.rejected += 1
                            continue
                        output = decision["output"]
                        tally.decision(output, round_)
                        sent = sent_at[event_id]
                        report.latencies.append(decision["decided_at"] - sent)
                        report.round_trips.append(time.time() - sent)
                        delay = float(rng.exponential(settings.delay_mean))
                        lost = bool(rng.random() < settings.feedback_loss)
                        task = asyncio.create_task(
                            send_feedback(tally, event_id, output, round_, delay, lost)
                        )
                        feedback_tasks.add(task)
                        task.add_done_callback(feedback_tasks.discard)
            done.set()

        async def report_progress() -> None:
            while not done.is_set() and progress is not None:
                progress(report)
                await asyncio.sleep(1.0)

        tasks = [asyncio.create_task(c) for c in (produce(), consume(), report_progress())]
        try:
            remaining = settings.timeout - (time.monotonic() - report.started)
            await asyncio.wait_for(done.wait(), timeout=remaining)
            if feedback_tasks:
                await asyncio.gather(*feedback_tasks)
        except TimeoutError:
            report.timed_out = True
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await producer.flush()
    finally:
        report.finished = time.monotonic()
        await consumer.stop()
        await producer.stop()
    return report


def run_simulation(
    settings: SimulationSettings, progress: Callable[[SimulationReport], None] | None = None
) -> SimulationReport:
    return asyncio.run(simulate(settings, progress))


def run_simulations(settings: list[SimulationSettings]) -> list[SimulationReport]:
    """Several applications at once (e.g. one per family), each with its own clients."""

    async def all_of() -> list[SimulationReport]:
        return list(await asyncio.gather(*(simulate(s) for s in settings)))

    return asyncio.run(all_of())
