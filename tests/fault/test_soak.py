"""Soak test (issue 12, part d): one real worker on the embedded broker (4 partitions) under a
fixed load of a realistic mix, sampled every second.

The application (this test) sends ``SOAK_RATE`` contexts/s (default 200) for
``SOAK_SECONDS`` (default 30, a scaled-down run for ``make test``; ``make soak`` runs 1800)
to eight learners: conformal SPS (anytime schedule, ``max_values`` bounding its state) and
ACI (a sliding window), and graph_cb SquareCB.G (SGD and RLS oracles, a feedback graph per
context). It answers each decision with its feedback after a short random delay, and also
leaves a few decisions unanswered (their timeouts fire), sends a few feedbacks and contexts
twice (the dedupe) and a few malformed records (dead letters).

Sampled every second: the worker's RSS (VmRSS), the contexts sent and decided (the lag as
the application sees it, and as the worker's /metrics counts the contexts it handled), its
open decisions and state keys, decisions/s; and each decision's latency as the application
sees it (context sent -> decision read), summarised as p50/p99 per 10 s window. Written to
``$SOAK_OUT/soak.json`` and ``soak.png`` (default ``runs/soak``;
docs/results/soak.md quotes a full run).

Asserted: every context decided exactly once (a context sent twice: its decision once more,
``redelivered``); every decision settled, by its feedback or, unanswered, by its timeout;
on event time: no decision whose feedback was produced before its deadline timed out, and
feedback produced after it may find its decision expired, then every copy of it is a
``decision_expired`` dead letter; each other duplicate feedback deduplicated; besides those,
exactly the malformed records dead-lettered, with their reasons, and no ``internal_error``;
the worker never exited, never re-read its partitions and logged no error; the lag stayed
bounded (``LAG_BOUND_S``); and the RSS slope over the second half of the run stayed under
``RSS_GROWTH_MB``. Latency is reported, never asserted:
performance targets live in the benchmarks.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pytest
from _integration_fixtures import (  # loaded by tests/fault/conftest.py
    ExternalBroker,
    Worker,
    decisions_consumer,
    run_prefix,
)
from aiokafka import AIOKafkaProducer
from test_corpus import growth, metric

from banditflow.offline.environments import GaussianScores
from banditflow.offline.evaluation.graph_cb import reveal
from banditflow.streams.broker import EmbeddedBroker
from banditflow.streams.scrape import samples
from banditflow.streams.topics import partition_for

matplotlib.use("Agg")
import matplotlib.pyplot as plt

pytestmark = [pytest.mark.integration, pytest.mark.fault]

SECONDS = float(os.environ.get("SOAK_SECONDS", "30"))
RATE = float(os.environ.get("SOAK_RATE", "200"))
SEED = int(os.environ.get("SOAK_SEED", "20240612"))
OUT = Path(os.environ.get("SOAK_OUT", "runs/soak"))
PARTITIONS = 4
PREFIX = run_prefix("soak")
# Settled decisions are kept this long (stream time) to recognise a record sent again: the
# worker's default (600 s) in the 30-minute soak, a third of a shorter run, so that what the
# worker keeps levels off well before the second half, where the RSS slope is measured.
RETENTION_S = min(600.0, SECONDS / 3)
TIMEOUT_S = 5.0  # the learners' feedback timeout: unanswered decisions settle after it
FEEDBACK_DELAY_S = (0.05, 0.5)  # the application answers after a uniform delay in this range
AGAIN_DELAY_S = (0.1, 1.0)  # a record sent twice comes again this long after the first
UNANSWERED = 0.02  # decisions never answered
MARGIN_S = 0.05  # a feedback record is stamped a moment after the application's clock read
DUPLICATE_FEEDBACK = 0.01  # feedback sent twice
DUPLICATE_CONTEXT = 0.005  # contexts sent twice
MALFORMED = 0.002  # a malformed record after this share of contexts
WINDOW_S = 10.0  # latency percentiles per window
# Flat memory: the worker's RSS may grow at most this much over the second half of the run
# (least-squares slope times that half's duration). What the worker keeps is bounded by time
# (settled decisions RETENTION_S, open ones TIMEOUT_S) and by count (SPS at most max_values
# scores, ACI its window, a redo log 256 calls), so it levels off within the first half.
# The second half of the 30-minute soak sends 900 s x 200/s = 180,000 contexts, each with
# its feedback: a leak of 120 bytes per context (24 kB/s) would exceed 20 MB; the scaled-down
# default (15 s x 200/s = 3,000 contexts) catches 7 kB per context (about 1.4 MB/s).
RSS_GROWTH_MB = 20.0
# The lag (contexts sent, not yet decided) over the last window of the run must stay under
# this many seconds of traffic: a worker that keeps up stays within a fraction of a second.
LAG_BOUND_S = 10.0

CONFORMAL_ENV = GaussianScores(labels=10, alpha=0.9)
GRAPH_ACTIONS = 4
GRAPH_DIM = 4
KINDS: dict[str, dict[str, Any]] = {  # learner kind -> config (without the learner id)
    "sps": {"family": "conformal", "algorithm": "sps",
            "params": {"alpha": 0.9, "schedule": "anytime", "max_values": 64}},
    "aci": {"family": "conformal", "algorithm": "aci",
            "params": {"alpha": 0.9, "gamma": 0.005, "window": 500}},
    "gcb": {"family": "graph_cb", "algorithm": "squarecb_g", "seed": 3,
            "params": {"actions": GRAPH_ACTIONS, "feature_dim": GRAPH_DIM}},
    "gcbrls": {"family": "graph_cb", "algorithm": "squarecb_g", "seed": 4,
               "params": {"actions": GRAPH_ACTIONS, "feature_dim": GRAPH_DIM,
                          "update": "rls"}},
}
LEARNER_KINDS = ["sps", "sps", "sps", "aci", "aci", "gcb", "gcb", "gcbrls"]
# (reason, topic, body) of the malformed records, sent in turn; {n} numbers them.
MALFORMED_RECORDS = [
    ("malformed_json", "contexts", '{{"learner_id": "{lid}", "event_id": "bad{n}'),
    # (a wrong type in the envelope, invalid for every family: "missed": 7 is conformal's
    # field, which a graph_cb learner's feedback may not carry at all: contradicting_feedback)
    ("invalid_schema", "feedback", '{{"learner_id": "{lid}", "event_id": ["e0"]}}'),
    ("non_finite", "contexts",
     '{{"learner_id": "{lid}", "event_id": "bad{n}", "labels": ["a"], "scores": [NaN]}}'),
]


def learners() -> dict[str, str]:
    """Learner id -> kind, as many learners on each partition."""
    chosen: dict[str, str] = {}
    per = Counter[int]()
    limit = -(-len(LEARNER_KINDS) // PARTITIONS)
    for kind in LEARNER_KINDS:
        for i in itertools.count():
            lid = f"{kind}{i}"
            if lid not in chosen and per[partition_for(lid, PARTITIONS)] < limit:
                chosen[lid] = kind
                per[partition_for(lid, PARTITIONS)] += 1
                break
    return chosen


def config(lid: str, kind: str) -> dict[str, Any]:
    return {"learner_id": lid, **KINDS[kind], "feedback_timeout_s": TIMEOUT_S}


Answer = Callable[[dict[str, Any]], dict[str, Any]]  # decision output -> feedback fields


class Traffic:
    """Contexts and the feedback only the application knows (seeded)."""

    def __init__(self, rng: np.random.Generator, ids: dict[str, str]) -> None:
        self.rng = rng
        self.weights = {lid: rng.uniform(-0.3, 0.3, (GRAPH_ACTIONS, GRAPH_DIM))
                        for lid, kind in ids.items() if kind.startswith("gcb")}

    def context(self, lid: str) -> tuple[dict[str, Any], Answer]:
        """A context's fields for learner ``lid`` and how to answer its decision."""
        if lid not in self.weights:
            round_ = CONFORMAL_ENV.draw(self.rng)
            return round_.context, lambda output: CONFORMAL_ENV.feedback(output, round_)
        x = self.rng.normal(size=GRAPH_DIM)
        graph = self.rng.choice([0.0, 0.5, 1.0], size=(GRAPH_ACTIONS, GRAPH_ACTIONS))
        np.fill_diagonal(graph, 1.0)  # the played action's loss is always revealed
        losses = np.clip(0.5 + self.weights[lid] @ x, 0.0, 1.0).round(4)

        def answer(output: dict[str, Any]) -> dict[str, Any]:
            shown = reveal(graph, output["action"], self.rng)
            return {"losses": {str(j): float(losses[j]) for j in shown}}

        return {"features": x.round(4).tolist(), "graph": graph.tolist()}, answer


@dataclass
class Run:
    """What the application sent and saw."""

    open: dict[tuple[str, str], tuple[float, Answer]] = field(default_factory=dict)
    sent: Counter[str] = field(default_factory=Counter)  # what was sent, by kind
    expected_dead: Counter[str] = field(default_factory=Counter)  # by reason
    decided: int = 0  # first decisions read
    redelivered: int = 0
    extra: list[str] = field(default_factory=list)  # first decisions of no open context
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (read at, s)
    series: list[dict[str, Any]] = field(default_factory=list)  # the samples, one a second
    start: float = 0.0  # monotonic time the load started
    end: float = 0.0  # ... and stopped
    deadline: dict[tuple[str, str], float] = field(default_factory=dict)  # context ts + timeout
    # (learner, event) -> wall times its feedback was produced (the first copy, then again)
    answered_at: dict[tuple[str, str], list[float]] = field(default_factory=dict)


def rss_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


async def drive(broker: EmbeddedBroker | ExternalBroker, worker: Worker, ids: dict[str, str]
                ) -> Run:
    """Run the load for SECONDS, then until every context is decided and every decision
    settled; sample the worker every second throughout."""
    topics = worker.topics
    rng = np.random.default_rng(SEED)
    traffic = Traffic(rng, ids)
    run = Run()
    producer = AIOKafkaProducer(**broker.connection.aiokafka_kwargs(), linger_ms=5)
    await producer.start()
    consumer = await decisions_consumer(broker.connection, topics.decisions)
    # (due, seq, topic, key, value, the (learner, event) whose feedback it is, or None)
    later: list[tuple[float, int, str, bytes, bytes, tuple[str, str] | None]] = []
    seq = itertools.count()
    loading = True
    lids = list(ids)

    def send_at(due: float, topic: str, key: bytes, value: bytes,
                feedback_of: tuple[str, str] | None = None) -> float:
        heapq.heappush(later, (due, next(seq), topic, key, value, feedback_of))
        return due

    async def send_contexts() -> None:
        for i in itertools.count():
            if time.monotonic() - run.start >= SECONDS:
                return
            lid = lids[int(rng.integers(len(lids)))]
            fields, answer = traffic.context(lid)
            eid = f"e{i}"
            ts = time.time()
            run.deadline[lid, eid] = ts + TIMEOUT_S
            value = json.dumps({"learner_id": lid, "event_id": eid, "ts": ts,
                                **fields}).encode()
            run.open[lid, eid] = (time.monotonic(), answer)
            await producer.send(topics.contexts, value, lid.encode())
            run.sent["contexts"] += 1
            if rng.random() < DUPLICATE_CONTEXT:
                send_at(time.monotonic() + float(rng.uniform(*AGAIN_DELAY_S)),
                        topics.contexts, lid.encode(), value)
                run.sent["duplicate_contexts"] += 1
            if rng.random() < MALFORMED:
                n = run.sent["malformed"]
                reason, topic, body = MALFORMED_RECORDS[n % len(MALFORMED_RECORDS)]
                await producer.send(getattr(topics, topic), body.format(lid=lid, n=n).encode(),
                                    lid.encode())
                run.sent["malformed"] += 1
                run.sent[f"malformed_{topic}"] += 1
                run.expected_dead[reason] += 1
            await asyncio.sleep(max(0.0, run.start + (i + 1) / RATE - time.monotonic()))

    async def answer_decisions() -> None:
        while True:
            fetched = await consumer.getmany(timeout_ms=100)
            now = time.monotonic()
            for records in fetched.values():
                for record in records:
                    decision = json.loads(record.value)
                    lid, eid = decision["learner_id"], decision["event_id"]
                    if decision["redelivered"]:
                        run.redelivered += 1
                        continue
                    opened = run.open.pop((lid, eid), None)
                    if opened is None:
                        run.extra.append(f"{lid}/{eid}")
                        continue
                    run.decided += 1
                    run.latencies.append((now - run.start, now - opened[0]))
                    if rng.random() < UNANSWERED:
                        run.sent["unanswered"] += 1
                        continue
                    body = {"learner_id": lid, "event_id": eid, **opened[1](decision["output"])}
                    value = json.dumps(body).encode()
                    due = send_at(now + float(rng.uniform(*FEEDBACK_DELAY_S)),
                                  topics.feedback, lid.encode(), value, (lid, eid))
                    run.sent["feedback"] += 1
                    if rng.random() < DUPLICATE_FEEDBACK:
                        send_at(due + float(rng.uniform(*AGAIN_DELAY_S)), topics.feedback,
                                lid.encode(), value, (lid, eid))
                        run.sent["duplicate_feedback"] += 1

    async def send_later() -> None:
        while True:
            while later and later[0][0] <= time.monotonic():
                _, _, topic, key, value, feedback_of = heapq.heappop(later)
                if feedback_of is not None:
                    run.answered_at.setdefault(feedback_of, []).append(time.time())
                await producer.send(topic, value, key)
            await asyncio.sleep(0.005)

    async def sample() -> None:
        last_t, last_decided = 0.0, 0
        while True:
            t = time.monotonic() - run.start
            try:
                text = await asyncio.to_thread(worker.metrics)
            except OSError:
                text = ""
            handled = metric(text, "banditflow_records_total", topic=topics.contexts)
            sent_contexts = (run.sent["contexts"] + run.sent["duplicate_contexts"]
                             + run.sent["malformed_contexts"])
            run.series.append({
                "t": round(t, 2),
                "loading": loading,
                "alive": worker.process.poll() is None,
                "rss_mb": rss_mb(worker.process.pid),
                # (the embedded broker keeps every record in memory, the state log's too;
                # an external broker's process is not ours to sample)
                "broker_rss_mb": (rss_mb(broker.process.pid) if isinstance(broker, EmbeddedBroker)
                                  and broker.process else None),
                "sent": run.sent["contexts"],
                "decided": run.decided,
                "lag": run.sent["contexts"] - run.decided,
                "worker_lag": sent_contexts - handled if text else None,
                "open_decisions": metric(text, "banditflow_pending_decisions") if text else None,
                "state_keys": metric(text, "banditflow_state_keys") if text else None,
                "state_log_mb": (metric(text, "banditflow_state_log_bytes_total") / 2**20
                                 if text else None),
                "decisions_per_s": round((run.decided - last_decided) / max(t - last_t, 1e-3),
                                         1),
            })
            last_t, last_decided = t, run.decided
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - run.start - t)))

    def settled() -> bool:
        try:
            text = worker.metrics()
        except OSError:
            return False
        return (
            metric(text, "banditflow_pending_decisions") == 0
            and metric(text, "banditflow_learner_timeouts") >= run.sent["unanswered"]
        )

    run.start = time.monotonic()
    tasks = [asyncio.create_task(coroutine()) for coroutine in
             (answer_decisions, send_later, sample)]
    try:
        await send_contexts()
        run.end = time.monotonic()
        loading = False
        # Then until every context is decided, everything sent, every decision settled
        # (the unanswered ones by their timeouts): at most a minute past the last timeout.
        deadline = time.monotonic() + TIMEOUT_S + 60
        while time.monotonic() < deadline and (
            run.open or later or not await asyncio.to_thread(settled)
        ):
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)  # anything more (a decision again) would show now
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.stop()
        await consumer.stop()
    return run


def windows(run: Run, seconds: float) -> list[dict[str, float]]:
    """Latency (context sent -> decision read) p50/p99 per WINDOW_S, over the load (the
    windows that end by ``seconds``)."""
    out = []
    by_window: dict[int, list[float]] = {}
    for at, latency in run.latencies:
        by_window.setdefault(int(at // WINDOW_S), []).append(latency)
    for index in sorted(i for i in by_window if (i + 1) * WINDOW_S <= seconds + 0.5):
        values = np.array(by_window[index]) * 1000
        out.append({"t": (index + 0.5) * WINDOW_S, "count": len(values),
                    "p50_ms": round(float(np.percentile(values, 50)), 1),
                    "p99_ms": round(float(np.percentile(values, 99)), 1),
                    "max_ms": round(float(values.max()), 1)})
    return out


def per_second(series: list[dict[str, Any]], key: str, start: float, end: float) -> float | None:
    """How fast the counter ``key`` of the samples rose between ``start`` and ``end``."""
    points = [(s["t"], s[key]) for s in series if start <= s["t"] <= end and s[key] is not None]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return round((points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0]), 3)


def plot(path: Path, series: list[dict[str, Any]], latency: list[dict[str, float]],
         fit: tuple[float, float, float], seconds: float) -> None:
    """RSS, latency p50/p99 and lag over time, in three panels."""
    t = [s["t"] for s in series]
    fig, (ax_rss, ax_lat, ax_lag) = plt.subplots(3, 1, sharex=True, figsize=(8, 7.5))
    ax_rss.plot(t, [s["rss_mb"] for s in series], lw=0.8, label="worker RSS")
    start, slope, intercept = fit
    ax_rss.plot([start, seconds], [intercept, intercept + slope * (seconds - start)], "r--",
                lw=1.2, label=f"slope, second half: {slope * 1024:+.2f} kB/s")
    ax_rss.set_ylabel("RSS (MB)")
    ax_rss.legend(loc="lower right", fontsize=8)
    lat_t = [w["t"] for w in latency]
    ax_lat.plot(lat_t, [w["p50_ms"] for w in latency], marker=".", lw=0.8, label="p50")
    ax_lat.plot(lat_t, [w["p99_ms"] for w in latency], marker=".", lw=0.8, label="p99")
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel(f"latency per {WINDOW_S:.0f} s (ms)")
    ax_lat.legend(loc="upper right", fontsize=8)
    ax_lag.plot(t, [s["lag"] for s in series], lw=0.8, label="sent, not yet decided (app)")
    ax_lag.plot(t, [s["worker_lag"] for s in series], lw=0.8,
                label="sent, not yet handled (worker /metrics)")
    ax_lag.set_ylabel("lag (contexts)")
    ax_lag.set_xlabel("seconds since the load started")
    ax_lag.legend(loc="upper right", fontsize=8)
    for ax in (ax_rss, ax_lat, ax_lag):
        ax.axvline(seconds, color="grey", lw=0.8, ls=":")
        ax.grid(alpha=0.3)
    fig.suptitle(f"soak: {RATE:.0f} contexts/s for {seconds:.0f} s, one worker, "
                 f"{PARTITIONS} partitions", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def test_soak_fixed_load(broker, start_worker, read_topic) -> None:
    ids = learners()
    worker = start_worker(PREFIX, partitions=PARTITIONS,
                          extra_args=["--retention", str(RETENTION_S)])
    topics = worker.topics
    dead = read_topic(topics.deadletter)

    async def create() -> None:
        producer = AIOKafkaProducer(**broker.connection.aiokafka_kwargs())
        await producer.start()
        try:
            for lid, kind in ids.items():
                await producer.send(topics.learners, json.dumps(config(lid, kind)).encode(),
                                    lid.encode())
        finally:
            await producer.stop()
        while metric(worker, "banditflow_records_total", topic=topics.learners,
                     outcome="created") < len(ids):
            await asyncio.sleep(0.2)

    asyncio.run(asyncio.wait_for(create(), 30))
    run = asyncio.run(drive(broker, worker, ids))
    seconds = run.end - run.start

    # ------------------------------------------------------------------ outcomes
    text = worker.metrics()
    reasons = Counter[str]()
    while True:  # (a poll reads one batch)
        before = len(dead.records)
        dead.poll()
        if len(dead.records) == before:
            break
    reasons.update(letter["reason"] for letter in dead.records if letter is not None)
    counted = {dict(labels)["reason"]: v for (name, labels), v in samples(text).items()
               if name == "banditflow_dead_letters_total"}
    applied = metric(text, "banditflow_learner_feedback")
    timeouts = metric(text, "banditflow_learner_timeouts")
    # Event time: feedback produced after its decision's deadline may find it expired (every
    # copy then a decision_expired dead letter); feedback produced before it never does.
    expired = Counter((letter["learner_id"], letter["event_id"]) for letter in dead.records
                      if letter is not None and letter["reason"] == "decision_expired")
    late = {key for key, times in run.answered_at.items()
            if times[0] >= run.deadline[key] - MARGIN_S}
    expected_dead = run.expected_dead + Counter(decision_expired=sum(expired.values()))
    log = worker.log()
    outcomes = {
        "contexts": run.sent["contexts"],
        "decided_once": run.decided,
        "not_decided": len(run.open),
        "decided_again_without_redelivered": len(run.extra),
        "duplicate_contexts": run.sent["duplicate_contexts"],
        "redelivered": run.redelivered,
        "feedback": run.sent["feedback"],
        "duplicate_feedback": run.sent["duplicate_feedback"],
        "deduplicated_feedback": metric(text, "banditflow_records_total",
                                        topic=topics.feedback, outcome="deduplicated"),
        "feedback_after_its_deadline": len(late),
        "expired_decisions_answered": len(expired),
        "expired_though_answered_in_time": len(set(expired) - late),
        "unanswered": run.sent["unanswered"],
        "settled_by_feedback": applied - timeouts,
        "settled_by_timeout": timeouts,
        "open_decisions": metric(text, "banditflow_pending_decisions"),
        "malformed": run.sent["malformed"],
        "dead_letters": dict(sorted(reasons.items())),
        "dead_letters_counted": dict(sorted(counted.items())),
        "worker_alive": all(s["alive"] for s in run.series) and worker.process.poll() is None,
        "partition_recoveries": log.count("recovered in"),
        "log_errors": {bad.strip(): log.count(bad) for bad in
                       ("Traceback", "commit failed", " ERROR ", " CRITICAL ")},
    }

    # ------------------------------------------------------------------ memory, lag, latency
    loaded = [s for s in run.series if s["t"] <= seconds and s["rss_mb"] is not None]
    half = [(s["t"], s["rss_mb"]) for s in loaded if s["t"] >= seconds / 2]
    slope, grown = growth(half)
    intercept = float(np.mean([mb for _, mb in half]) - slope * (
        np.mean([t for t, _ in half]) - half[0][0])) if half else 0.0
    latency = windows(run, seconds)
    last = [s for s in loaded if s["t"] >= seconds - WINDOW_S]
    steady = [s["decisions_per_s"] for s in loaded if s["t"] >= 2.0]
    summary = {
        "rate": RATE, "seconds": round(seconds, 1), "seed": SEED, "partitions": PARTITIONS,
        "retention_s": RETENTION_S, "timeout_s": TIMEOUT_S, "learners": ids,
        "rss_mb": {"start": loaded[0]["rss_mb"] if loaded else None,
                   "end": loaded[-1]["rss_mb"] if loaded else None,
                   "peak": max((s["rss_mb"] for s in loaded), default=None),
                   "second_half_slope_kb_per_s": round(slope * 1024, 3),
                   "second_half_growth_mb": round(grown, 2), "bound_mb": RSS_GROWTH_MB},
        "latency_ms": {"first_window": latency[0] if latency else None,
                       "last_window": latency[-1] if latency else None,
                       "overall_p50": round(float(np.percentile(
                           [lat for _, lat in run.latencies], 50)) * 1000, 1),
                       "overall_p99": round(float(np.percentile(
                           [lat for _, lat in run.latencies], 99)) * 1000, 1)},
        "lag": {"max": max(s["lag"] for s in loaded), "last_window_max":
                max(s["lag"] for s in last),
                "worker_max": max((s["worker_lag"] or 0) for s in loaded),
                "bound": RATE * LAG_BOUND_S},
        "decisions_per_s": {"mean": round(float(np.mean(steady)), 1),
                            "min": min(steady), "max": max(steady)},
        "state_log_mb_per_s": {
            "first_window": per_second(loaded, "state_log_mb", 0.0, WINDOW_S),
            "last_window": per_second(loaded, "state_log_mb", seconds - WINDOW_S, seconds)},
        "broker_rss_mb": {"start": loaded[0]["broker_rss_mb"] if loaded else None,
                          "end": loaded[-1]["broker_rss_mb"] if loaded else None},
        "outcomes": outcomes,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "soak.json").write_text(json.dumps(
        {**summary, "latency_windows": latency, "series": run.series}, indent=1) + "\n")
    plot(OUT / "soak.png", run.series, latency, (seconds / 2, slope, intercept), seconds)
    print(f"\nsoak: {json.dumps(summary, indent=1)}\nreport {OUT / 'soak.json'}")

    # ------------------------------------------------------------------ assertions
    assert outcomes["worker_alive"], f"the worker exited:\n{log[-3000:]}"
    assert outcomes["not_decided"] == 0 and not run.extra, (
        f"{len(run.open)} contexts not decided, e.g. {list(run.open)[:5]}; "
        f"first decisions again: {run.extra[:5]}")
    assert run.decided == run.sent["contexts"]
    assert run.redelivered == run.sent["duplicate_contexts"]
    assert set(expired) <= late, f"timed out, though answered in time: {set(expired) - late}"
    assert all(count == len(run.answered_at[key]) for key, count in expired.items())
    assert outcomes["deduplicated_feedback"] == sum(
        len(times) - 1 for key, times in run.answered_at.items() if key not in expired)
    assert (applied - timeouts, timeouts) == (run.sent["feedback"] - len(expired),
                                              run.sent["unanswered"] + len(expired))
    assert outcomes["open_decisions"] == 0
    assert reasons == expected_dead, "dead letters other than the malformed and late records"
    assert counted == dict(expected_dead)  # (so no internal_error either)
    assert outcomes["partition_recoveries"] == PARTITIONS, "the worker re-read its partitions"
    assert not any(outcomes["log_errors"].values()), outcomes["log_errors"]
    assert summary["lag"]["last_window_max"] <= RATE * LAG_BOUND_S
    assert grown < RSS_GROWTH_MB, (
        f"RSS grew {grown:.1f} MB over the second half ({slope * 1024:.1f} kB/s), bound "
        f"{RSS_GROWTH_MB} MB")
