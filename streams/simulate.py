"""A simulated application: produces contexts, reads decisions, answers with delayed feedback.

It talks to the broker like any real client would (aiokafka, default murmur2 partitioner):
contexts go to ``contexts``, decisions are read from ``decisions``, and after a random
delay the semi-bandit feedback goes to ``feedback`` and the ground truth to ``truth``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from offline.environments import GaussianScores, Round
from streams.topics import Topics


def add_simulation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--learner-id", default="demo", help="learner to drive (default: demo)")
    parser.add_argument(
        "--events", type=int, default=5000, help="contexts to send (default: %(default)s)"
    )
    parser.add_argument("--labels", type=int, default=20, help="candidate labels per context")
    parser.add_argument("--alpha", type=float, default=0.9, help="target coverage")
    parser.add_argument(
        "--window",
        type=int,
        default=500,
        help="contexts in flight without a decision (default: %(default)s)",
    )
    parser.add_argument(
        "--delay-mean",
        type=float,
        default=0.2,
        help="mean feedback delay in seconds, exponential (default: %(default)s)",
    )
    parser.add_argument(
        "--feedback-loss",
        type=float,
        default=0.0,
        help="probability that feedback is never sent (default: %(default)s)",
    )
    parser.add_argument(
        "--no-create-learner",
        dest="create_learner",
        action="store_false",
        help="do not produce the learner's config first",
    )
    parser.add_argument(
        "--feedback-timeout",
        type=float,
        default=30.0,
        help="the learner's feedback timeout in seconds",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="give up after this many seconds (default: %(default)s)",
    )


@dataclass
class SimulationSettings:
    bootstrap: str = "127.0.0.1:9092"
    prefix: str = "banditflow"
    learner_id: str = "demo"
    events: int = 5000
    labels: int = 20
    alpha: float = 0.9
    window: int = 500
    delay_mean: float = 0.2
    feedback_loss: float = 0.0
    create_learner: bool = True
    feedback_timeout: float = 30.0
    seed: int = 0
    timeout: float = 600.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SimulationSettings:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in vars(args).items() if k in names})


@dataclass
class SimulationReport:
    sent: int = 0
    decided: int = 0
    rejected: int = 0
    feedback_sent: int = 0
    covered: int = 0
    set_size_sum: int = 0
    last_threshold: float | None = None
    # Per decision: worker latency (decided_at - context ts) and the application's round trip
    # (decision received - context sent), in seconds.
    latencies: list[float] = field(default_factory=list)
    round_trips: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    timed_out: bool = False

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    @property
    def decisions_per_s(self) -> float:
        return self.decided / self.elapsed if self.elapsed > 0 else 0.0

    def render(self) -> str:
        coverage = self.covered / self.decided if self.decided else float("nan")
        size = self.set_size_sum / self.decided if self.decided else float("nan")
        status = " (TIMED OUT)" if self.timed_out else ""
        if self.rejected:
            status += f", {self.rejected} contexts dead-lettered"
        return (
            f"sent {self.sent} contexts, {self.decided} decisions, {self.feedback_sent} "
            f"feedback in {self.elapsed:.1f}s ({self.decisions_per_s:.0f} decisions/s)"
            f"{status}; realised coverage {coverage:.3f}, mean set size {size:.2f}"
        )


def learner_config(settings: SimulationSettings) -> dict:
    return {
        "learner_id": settings.learner_id,
        "family": "conformal",
        "algorithm": "sps",
        "params": {"alpha": settings.alpha, "horizon": max(settings.events, 2)},
        "feedback_timeout_s": settings.feedback_timeout,
    }


async def simulate(
    settings: SimulationSettings, progress: Callable[[SimulationReport], None] | None = None
) -> SimulationReport:
    topics = Topics(settings.prefix)
    env = GaussianScores(labels=settings.labels, alpha=settings.alpha)
    rng = np.random.default_rng(settings.seed)
    report = SimulationReport()
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap, group_id=None, enable_auto_commit=False
    )
    await producer.start()
    await consumer.start()
    run = f"{int(time.time() * 1000):x}"  # event ids unique across runs
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
            await producer.send_and_wait(
                topics.learners,
                key=settings.learner_id.encode(),
                value=json.dumps(learner_config(settings)).encode(),
            )
        rounds: dict[str, Round] = {}
        sent_at: dict[str, float] = {}
        in_flight = asyncio.Semaphore(settings.window)
        feedback_tasks: set[asyncio.Task] = set()
        done = asyncio.Event()

        async def send_feedback(
            event_id: str, output: dict, round_: Round, delay: float, lost: bool
        ) -> None:
            await asyncio.sleep(delay)
            key = settings.learner_id.encode()
            envelope = {"learner_id": settings.learner_id, "event_id": event_id, "ts": time.time()}
            if not lost:
                body = {**envelope, **env.feedback(output, round_)}
                await producer.send(topics.feedback, key=key, value=json.dumps(body).encode())
            truth = {**envelope, **env.truth(output, round_)}
            await producer.send(topics.truth, key=key, value=json.dumps(truth).encode())
            report.feedback_sent += 1

        async def produce() -> None:
            for i in range(settings.events):
                await in_flight.acquire()
                event_id = f"{run}-{i}"
                round_ = env.draw(rng)
                rounds[event_id] = round_
                sent_at[event_id] = time.time()
                body = {
                    "learner_id": settings.learner_id,
                    "event_id": event_id,
                    "ts": sent_at[event_id],
                    **round_.context,
                }
                await producer.send(
                    topics.contexts,
                    key=settings.learner_id.encode(),
                    value=json.dumps(body).encode(),
                )
                report.sent += 1

        async def consume() -> None:
            while report.decided + report.rejected < settings.events:
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for record in records:
                        decision = json.loads(record.value)
                        if decision.get("learner_id") != settings.learner_id:
                            continue
                        round_ = rounds.pop(decision.get("event_id"), None)
                        if round_ is None:
                            continue
                        if record.topic == topics.deadletter:
                            report.rejected += 1
                            in_flight.release()
                            continue
                        output = decision["output"]
                        report.decided += 1
                        sent = sent_at.pop(decision["event_id"])
                        report.latencies.append(decision["decided_at"] - sent)
                        report.round_trips.append(time.time() - sent)
                        report.covered += round_.true_label in output["labels"]
                        report.set_size_sum += output["set_size"]
                        report.last_threshold = output["threshold"]
                        in_flight.release()
                        delay = float(rng.exponential(settings.delay_mean))
                        lost = bool(rng.random() < settings.feedback_loss)
                        task = asyncio.create_task(
                            send_feedback(decision["event_id"], output, round_, delay, lost)
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
            await asyncio.wait_for(done.wait(), timeout=settings.timeout)
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
