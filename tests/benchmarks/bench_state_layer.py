"""The state layer side by side: banditflow's worker against a no-op Faust agent, one broker.

Everything runs on one embedded broker (Tansu), 4 partitions per topic, fresh topics and
app ids per measurement, a fresh worker / agent process per measurement (not timed: its
start-up, and the seconds until it is idle, see ``settle``). Measured:

(a) reference: ``noop_agent.py``, the simplest Faust agent (one record in, one record out);
(b) banditflow, one conformal SPS learner, K = 20 labels;
(c) as (b), 1,000 conformal learners, contexts round-robin over them;
(d) as (b), one graph_cb learner (squarecb_g, linear oracle), K = 10 actions;
    each in two phases: N contexts produced as fast as possible (a backlog), timed until the
    first decision is on the decisions topic (decisions flow while the backlog is read, not
    once it runs out) and until all N are (t1); then one feedback per decision, timed until
    all N are applied (t2; the worker's /metrics; for the agent, N more outputs).
    events/s = 2N / (t1 + t2); decisions/s with their feedback = N / (t1 + t2).
    (a) and (b) alternate (a, b, a, b, ...) for R rounds, so (b)/(a) is a per-pair ratio;
    (c) and (d) run once per round after the pair;
(e) latency at a fixed 500 contexts/s, each decision answered with feedback at once: the
    application's (decision received - context sent) and the worker's (decided_at - ts),
    percentiles of each of R runs (the table's median is over the runs);
(f) memory: the worker's VmRSS per conformal learner with one context and one feedback, the
    marginal cost of the last 9,000 of 10^4 (the first 1,000 warm the worker up);
(g) state log bytes per decision (with its feedback), from the (b) runs (a backlog: few,
    large commits) and from (e) (paced: a commit every 50 ms rewrites the learner's state);
(h) recovery: kill -9 after a history of 10^5 (and 10^6) events over 1,000 learners, then
    restart: kill -> /ready, kill -> the decision of a context produced right after the kill,
    bytes read by the recovery, bytes in the state topic;
(i) in-process: ``Processor.on_tick`` with 10^4 learners and 10^5 open decisions, nothing due;
(j) failover: two workers of one app id (8 SPS learners over the 4 partitions, 200 contexts/s,
    feedback at once); kill -9 of one -> the first decision of a context produced after the
    kill on a partition it owned (the survivor takes over after the session timeout); then a
    third worker joins, SIGTERM of the other -> the same, for a context produced after it
    left the group (until then it still decides what it fetched); every context decided, no
    dead letters, the learners' counts of decisions and feedback checked against the load.

Prints one markdown table and writes it, with the raw numbers, to runs/bench/state_layer.md
and .json (logs of every process in runs/bench/state_layer-logs/). Asserts correctness only
(every context decided, every feedback applied), nothing about time: the machine is shared.

Run: ``make bench`` (env BENCH_STATE_LAYER_QUICK=1, _ROUNDS, _EVENTS) or directly
``python tests/benchmarks/bench_state_layer.py [--quick] [--rounds R] [--events N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from noop_roundtrip import FETCHED_AT

from banditflow.processors import PartitionStore, Processor, Source, StreamTimes
from banditflow.streams.broker import EmbeddedBroker, free_port
from banditflow.streams.demo import start_worker, stop, wait_until_ready
from banditflow.streams.scrape import fetch, samples, value
from banditflow.streams.topics import Topics, ensure_topics, partition_for, state_topic

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[1] / "runs" / "bench"
PARTITIONS = 4
LABELS = [f"label-{i}" for i in range(20)]
ACTIONS, FEATURES = 10, 8
WARMUP = b"__warmup__"  # key of the agent's warm-up records (excluded from every count)
METRICS_POLL_S = 0.02


@dataclass
class Settings:
    events: int = 10_000  # N contexts per throughput measurement
    rounds: int = 3
    latency_s: float = 20.0
    latency_rate: float = 500.0
    many_learners: int = 1_000
    memory_learners: int = 10_000
    histories: tuple[int, ...] = (100_000, 1_000_000)
    tick_learners: int = 10_000
    tick_decisions: int = 100_000
    tick_calls: int = 1_000
    failover_learners: int = 8
    failover_rate: float = 200.0

    @classmethod
    def make(cls, quick: bool, rounds: int | None, events: int | None) -> Settings:
        base = cls(events=2_000, latency_s=10.0, histories=(100_000,)) if quick else cls()
        base.rounds = rounds or base.rounds
        base.events = events or base.events
        return base


# ---------------------------------------------------------------------------- workloads
Record = tuple[str, str, bytes]  # learner id, event id, JSON value


def dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def sps_config(learner_id: str) -> dict[str, Any]:
    return {
        "learner_id": learner_id, "family": "conformal", "algorithm": "sps",
        "params": {"alpha": 0.9, "horizon": 100_000}, "feedback_timeout_s": 300,
    }


def graph_config(learner_id: str) -> dict[str, Any]:
    return {
        "learner_id": learner_id, "family": "graph_cb", "algorithm": "squarecb_g",
        "params": {"actions": ACTIONS, "feature_dim": FEATURES, "graph_kind": "cops_and_robbers"},
        "feedback_timeout_s": 300,
    }


@dataclass
class Workload:
    """Learner configs, contexts, and how the application answers each decision."""

    name: str
    configs: list[dict[str, Any]]
    contexts: list[Record]
    # (learner id, event id, the decision's output or None for the agent) -> feedback value
    answer: Callable[[str, str, dict[str, Any] | None], bytes]


def conformal_contexts(
    learner_ids: Sequence[str], first: int, count: int, seed: int, tag: str = "e"
) -> tuple[list[Record], dict[str, str]]:
    """Contexts ``first .. first+count-1``, round-robin over ``learner_ids``: 20 labels, the
    true one scoring N(1, 1), the others N(0, 1). Returns them and each event's true label."""
    rng = np.random.default_rng([seed, first])
    scores = rng.normal(0.0, 1.0, (count, len(LABELS)))
    true = rng.integers(len(LABELS), size=count)
    scores[np.arange(count), true] += 1.0
    records, truth = [], {}
    for i, (row, t) in enumerate(zip(scores.round(4).tolist(), true.tolist(), strict=True)):
        lid, eid = learner_ids[(first + i) % len(learner_ids)], f"{tag}{first + i}"
        records.append((lid, eid, dumps(
            {"learner_id": lid, "event_id": eid, "labels": LABELS, "scores": row}
        )))
        truth[eid] = LABELS[t]
    return records, truth


def conformal_answer(truth: dict[str, str]) -> Callable[[str, str, dict | None], bytes]:
    """Semi-bandit feedback: the true label if the decision's set holds it, else missed."""

    def answer(lid: str, eid: str, output: dict[str, Any] | None) -> bytes:
        label = truth[eid]
        body: dict[str, Any] = {"learner_id": lid, "event_id": eid}
        if output is None or label in output["labels"]:
            body["label"] = label
        else:
            body["missed"] = True
        return dumps(body)

    return answer


def conformal_workload(learners: int, events: int, seed: int) -> Workload:
    ids = [f"c{i}" for i in range(learners)]
    contexts, truth = conformal_contexts(ids, 0, events, seed)
    name = "1 conformal learner" if learners == 1 else f"{learners:,} conformal learners"
    return Workload(name, [sps_config(i) for i in ids], contexts, conformal_answer(truth))


def graph_workload(events: int, seed: int) -> Workload:
    """One squarecb_g learner; losses linear in the features; the cops-and-robbers graph
    reveals every action's loss except the played one's."""
    rng = np.random.default_rng(seed)
    weights = rng.uniform(-0.3, 0.3, (ACTIONS, FEATURES))
    features = rng.normal(size=(events, FEATURES)).round(4)
    losses = np.clip(0.5 + features @ weights.T, 0.0, 1.0).round(4).tolist()
    contexts = [
        ("g0", f"e{i}", dumps({"learner_id": "g0", "event_id": f"e{i}", "features": x}))
        for i, x in enumerate(features.tolist())
    ]

    def answer(lid: str, eid: str, output: dict[str, Any] | None) -> bytes:
        played = 0 if output is None else output["action"]
        row = losses[int(eid[1:])]
        revealed = {str(j): row[j] for j in range(ACTIONS) if j != played}
        return dumps({"learner_id": lid, "event_id": eid, "losses": revealed})

    return Workload("1 graph_cb learner", [graph_config("g0")], contexts, answer)


# ---------------------------------------------------------------------------- Kafka helpers
def producer(bootstrap: str, linger_ms: int = 5) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=linger_ms, max_batch_size=1 << 20
    )


async def produce(
    client: AIOKafkaProducer, topic: str, records: Iterable[tuple[str, bytes]]
) -> None:
    """Enqueue every (key, value) without waiting for acknowledgements (murmur2 by key)."""
    for key, value_ in records:
        await client.send(topic, value_, key=key.encode())


class Reader:
    """Reads a topic of this run from its beginning in the background (fetch_max_wait_ms=10:
    Tansu looks again at an empty fetch only after half its wait). Keeps the first record of every
    (learner id, event id) and counts all records; warm-up records are left out. A floor's
    output (noop_roundtrip.py) says when its context was fetched in a header: it is read as
    the ``decided_at`` of a decision."""

    def __init__(
        self, bootstrap: str, topic: str,
        on_new: Callable[[dict[str, Any], float], Awaitable[None]] | None = None,
    ) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=10
        )
        self.topic = topic
        self.on_new = on_new
        self.decisions: dict[str, dict[str, Any]] = {}  # "lid/eid" -> first record
        self.seen: set[str] = set()
        self.distinct = 0
        self.records = 0
        self.warmups = 0
        # time.monotonic() of the batch that brought the first / latest new (learner, event),
        # and the latest record
        self.first_new = self.last_new = self.last_record = 0.0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Reader:
        await self.consumer.start()
        tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        self.consumer.assign(tps)
        await self.consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.consumer.stop()

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=100)
            wall, mono = time.time(), time.monotonic()
            for records in batch.values():
                for record in records:
                    if record.key == WARMUP:
                        self.warmups += 1
                        continue
                    self.records += 1
                    self.last_record = mono
                    body = json.loads(record.value)
                    for name, stamp in record.headers:
                        if name == FETCHED_AT:
                            body.setdefault("decided_at", float(stamp))
                    key = f"{body['learner_id']}/{body['event_id']}"
                    if key not in self.seen:
                        self.seen.add(key)
                        self.decisions[key] = body
                        self.distinct += 1
                        self.last_new = mono
                        self.first_new = self.first_new or mono
                        if self.on_new is not None:
                            await self.on_new(body, wall)
            self._changed.set()

    async def wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what}: {self.distinct} distinct / {self.records} records")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(left, 1.0))


async def topic_bytes(bootstrap: str, topic: str) -> tuple[int, int]:
    """(records, sum of value sizes) of every partition of ``topic``, read to the Fetch high
    watermark (Tansu's ListOffsets may stop at the last batch's first record)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=10
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        count = size = 0
        pending = list(tps)
        while pending:
            fetched = await consumer.getmany(*pending, timeout_ms=200, max_records=10_000)
            for records in fetched.values():
                count += len(records)
                size += sum(len(r.value or b"") for r in records)
            for tp in list(pending):
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= highwater:
                    pending.remove(tp)
        return count, size
    finally:
        await consumer.stop()


# ---------------------------------------------------------------------------- processes
def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def settle(pid: int, timeout_s: float = 60.0, window_s: float = 0.5) -> float:
    """Wait until process ``pid`` uses under 15% of a CPU in two windows in a row, and return
    how long that took. A worker that just started imports the learner families on a
    thread (numba loads graph_cb's kernels) and runs slower meanwhile; Faust settles after
    its join: timing starts on a quiet process."""
    started = time.monotonic()
    quiet, last = 0, cpu_seconds(pid)
    while quiet < 2 and time.monotonic() - started < timeout_s:
        await asyncio.sleep(window_s)
        now = cpu_seconds(pid)
        quiet = quiet + 1 if now - last < 0.15 * window_s else 0
        last = now
    return time.monotonic() - started


class Run:
    """Fresh names and the log directory of one benchmark run."""

    def __init__(self, bootstrap: str, logs: Path) -> None:
        self.bootstrap = bootstrap
        self.logs = logs
        self.tag = uuid.uuid4().hex[:6]
        self.count = 0

    def fresh(self, kind: str) -> str:
        self.count += 1
        return f"{kind}-{self.tag}-{self.count}"


class WorkerProcess:
    """A banditflow worker started with streams.demo.start_worker (app id = prefix)."""

    def __init__(
        self, run: Run, prefix: str, port: int | None = None, log: str | None = None,
        args: Sequence[str] = (),
    ) -> None:
        """``port``: a restarted worker keeps its predecessor's web port (its identity, as
        under a supervisor), so that it evicts the dead member from the group at once.
        ``log``: the log file's name (default: the prefix; workers side by side need one each).
        ``args``: more ``banditflow worker`` options."""
        self.run, self.prefix, self.topics = run, prefix, Topics(prefix)
        self.port = port or free_port()
        self.process = start_worker(
            run.bootstrap, self.port, PARTITIONS, prefix, run.logs / f"{log or prefix}.log",
            extra_args=args,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def ready(self, timeout_s: float = 120.0) -> None:
        await asyncio.to_thread(wait_until_ready, self.process, self.port, timeout_s)

    async def metrics(self) -> str:
        return await asyncio.to_thread(fetch, f"{self.url}/metrics")

    def count(self, text: str, stream: str, outcome: str) -> float:
        """``banditflow_records_total{topic, outcome}`` by a plain scan of the text: the
        Prometheus parser takes ~20 ms on the 90 KB of 100 exported learners."""
        labels = (f'topic="{getattr(self.topics, stream)}"', f'outcome="{outcome}"')
        for line in text.splitlines():
            if line.startswith("banditflow_records_total{") and all(x in line for x in labels):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    async def wait_count(
        self, stream: str, outcome: str, target: int, timeout_s: float
    ) -> tuple[float, str]:
        """Poll /metrics until ``records_total{stream, outcome}`` reaches ``target``: the
        time.monotonic() of that scrape and its text."""
        deadline = time.monotonic() + timeout_s
        while True:
            asked = time.monotonic()
            text = await self.metrics()
            seen = time.monotonic()
            got = self.count(text, stream, outcome)
            if got >= target:
                return seen, text
            if self.process.poll() is not None:
                raise RuntimeError(f"worker {self.prefix} exited ({self.process.returncode})")
            if seen > deadline:
                raise TimeoutError(f"{self.prefix}: {stream} {outcome} {got:.0f} < {target}")
            # A scrape costs the worker CPU (~10 ms for 100 exported learners): at most a
            # quarter of its time goes to being watched.
            await asyncio.sleep(max(METRICS_POLL_S, 3 * (seen - asked)))

    def rss(self) -> int:
        """VmRSS of the worker process, in bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    async def create(self, client: AIOKafkaProducer, configs: list[dict[str, Any]]) -> None:
        """Produce the learner configs and wait until the worker has created them all."""
        await produce(client, self.topics.learners, ((c["learner_id"], dumps(c)) for c in configs))
        await client.flush()
        await self.wait_count("learners", "created", len(configs), timeout_s=120)

    def stop(self) -> None:
        stop(self.process)


def agent_process(run: Run, prefix: str) -> subprocess.Popen[bytes]:
    topics = Topics(prefix)
    ensure_topics(run.bootstrap, topics, PARTITIONS)
    env = dict(
        os.environ,
        NOOP_BOOTSTRAP=run.bootstrap,
        NOOP_APP_ID=prefix,
        NOOP_INPUTS=f"{topics.contexts},{topics.feedback}",
        NOOP_OUTPUT=topics.decisions,
        NOOP_PARTITIONS=str(PARTITIONS),
        NOOP_DATADIR=str(run.logs / f"{prefix}-data"),
    )
    command = [sys.executable, str(HERE / "noop_agent.py"), "worker", "-l", "warn"]
    with open(run.logs / f"{prefix}.log", "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


# ---------------------------------------------------------------------------- (a)-(d)
@dataclass
class Phases:
    events: int  # N contexts (and N feedback)
    t1: float  # s until all N decisions were read
    t2: float  # s until all N feedback were applied
    state_log_bytes: float | None = None
    extra: dict[str, float] = field(default_factory=dict)
    first: float | None = None  # s until the first decision was read (phase 1)

    @property
    def events_per_s(self) -> float:
        return 2 * self.events / (self.t1 + self.t2)

    @property
    def decisions_per_s(self) -> float:
        return self.events / (self.t1 + self.t2)


async def two_phases(
    client: AIOKafkaProducer, topics: Topics, reader: Reader, workload: Workload,
    applied: Callable[[], Awaitable[float]],
) -> tuple[float, float, float]:
    """Phase 1: every context as fast as possible, until all decisions are read (the time of
    the first one and of the last, t1). Phase 2: one feedback per decision as fast as
    possible, until ``applied()`` returns (its time, t2). Returns (first, t1, t2)."""
    n = reader.distinct + len(workload.contexts)  # (a reader may have read earlier ones)
    started = time.monotonic()
    await produce(client, topics.contexts, ((lid, raw) for lid, _, raw in workload.contexts))
    await client.flush()
    await reader.wait(lambda: reader.distinct >= n, 300, "decisions")
    first, t1 = reader.first_new - started, reader.last_new - started
    answers = []
    for lid, eid, _ in workload.contexts:
        decision = reader.decisions[f"{lid}/{eid}"]
        answers.append((lid, workload.answer(lid, eid, decision.get("output"))))
    started = time.monotonic()
    await produce(client, topics.feedback, answers)
    await client.flush()
    t2 = await applied() - started
    return first, t1, t2


async def measure_agent(run: Run, workload: Workload) -> Phases:
    """(a): the no-op Faust agent; ready once a warm-up record per partition came back."""
    prefix = run.fresh("noop")
    topics = Topics(prefix)
    process = await asyncio.to_thread(agent_process, run, prefix)
    client = producer(run.bootstrap)
    await client.start()
    try:
        async with Reader(run.bootstrap, topics.decisions) as reader:
            for partition in range(PARTITIONS):
                await client.send(topics.contexts, b"{}", key=WARMUP, partition=partition)
            await client.flush()
            deadline = time.monotonic() + 180
            while reader.warmups < PARTITIONS:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the no-op agent did not come up (see {prefix}.log)")
                await asyncio.sleep(0.05)
            settled = await settle(process.pid)
            n = len(workload.contexts)

            async def outputs() -> float:
                await reader.wait(lambda: reader.records >= 2 * n, 300, "agent outputs")
                return reader.last_record

            first, t1, t2 = await two_phases(client, topics, reader, workload, outputs)
            assert reader.distinct == n and reader.records == 2 * n
    finally:
        await client.stop()
        await asyncio.to_thread(stop, process)
    return Phases(len(workload.contexts), t1, t2, extra={"settle_s": settled}, first=first)


async def measure_banditflow(run: Run, workload: Workload) -> Phases:
    """(b), (c), (d): a fresh worker, the configs (not timed), then the two phases."""
    worker = WorkerProcess(run, run.fresh("bf"))
    client = producer(run.bootstrap)
    await client.start()
    try:
        await worker.ready()
        await worker.create(client, workload.configs)
        settled = await settle(worker.process.pid)
        n = len(workload.contexts)
        final: dict[str, str] = {}

        async def applied() -> float:
            seen, final["text"] = await worker.wait_count("feedback", "applied", n, 300)
            return seen

        async with Reader(run.bootstrap, worker.topics.decisions) as reader:
            first, t1, t2 = await two_phases(client, worker.topics, reader, workload, applied)
            assert reader.distinct == n, (reader.distinct, n)
        text = final["text"]
        assert worker.count(text, "contexts", "decided") == n
        dead = dead_letters(text)
        assert not dead, f"{worker.prefix}: dead letters {dead}"
        state = value(text, "banditflow_state_log_bytes_total")
        commits = sum(v for (name, _), v in samples(text).items()
                      if name == "banditflow_commits_total")
        return Phases(n, t1, t2, state, {"commits": commits, "settle_s": settled}, first)
    finally:
        await client.stop()
        await asyncio.to_thread(worker.stop)


def dead_letters(text: str) -> dict[str, float]:
    return {
        dict(labels)["reason"]: v
        for (name, labels), v in samples(text).items()
        if name == "banditflow_dead_letters_total" and v
    }


# ---------------------------------------------------------------------------- (e) latency
async def measure_latency(run: Run, rate: float, duration_s: float) -> dict[str, Any]:
    """A fixed rate of contexts; every decision answered with feedback as soon as it is read."""
    worker = WorkerProcess(run, run.fresh("lat"))
    contexts_client, feedback_client = producer(run.bootstrap, 0), producer(run.bootstrap, 0)
    await contexts_client.start()
    await feedback_client.start()
    total = int(rate * duration_s)
    contexts, truth = conformal_contexts(["lat"], 0, total, seed=7)
    answer = conformal_answer(truth)
    app_ms: list[float] = []
    worker_ms: list[float] = []
    sent_at: dict[str, float] = {}

    async def on_decision(decision: dict[str, Any], received: float) -> None:
        eid = decision["event_id"]
        app_ms.append((received - sent_at[eid]) * 1000)
        worker_ms.append((decision["decided_at"] - decision["context_ts"]) * 1000)
        await feedback_client.send(
            worker.topics.feedback, answer("lat", eid, decision["output"]), key=b"lat"
        )

    try:
        await worker.ready()
        await worker.create(contexts_client, [sps_config("lat")])
        await settle(worker.process.pid)
        async with Reader(run.bootstrap, worker.topics.decisions, on_decision) as reader:
            started = time.monotonic()
            for i, (lid, eid, raw) in enumerate(contexts):
                delay = started + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent_at[eid] = now = time.time()
                body = json.loads(raw)
                body["ts"] = now
                await contexts_client.send(worker.topics.contexts, dumps(body), key=lid.encode())
            sending = time.monotonic() - started
            await reader.wait(lambda: reader.distinct >= total, 120, "latency decisions")
        await feedback_client.flush()
        _, text = await worker.wait_count("feedback", "applied", total, 120)
        assert not dead_letters(text)
    finally:
        await contexts_client.stop()
        await feedback_client.stop()
        await asyncio.to_thread(worker.stop)
    return {
        "contexts": total,
        "achieved_rate": total / sending,
        "state_log_bytes_per_decision": (
            value(text, "banditflow_state_log_bytes_total") or 0.0
        ) / total,
        "app_ms": percentiles(app_ms),
        "worker_ms": percentiles(worker_ms),
    }


def percentiles(values: list[float]) -> dict[str, float]:
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "max": max(values)}


# ---------------------------------------------------------------------------- (f) memory
async def measure_memory(run: Run, learners: int) -> dict[str, Any]:
    """The marginal RSS of a learner: a first tenth of the learners (config, one decision, one
    feedback each) warms the worker up (the families' modules, pydantic's validators, the
    clients' buffers, the allocator's pools), then the rest are measured: (RSS after them -
    RSS before them) / their number. Against the RSS at start, imports made after /ready
    (the families load on a thread meanwhile) were counted as if per learner."""
    worker = WorkerProcess(run, run.fresh("mem"))
    client = producer(run.bootstrap)
    await client.start()
    warm = learners // 10
    try:
        await worker.ready()
        await settle(worker.process.pid)
        rss: list[int] = []
        async with Reader(run.bootstrap, worker.topics.decisions) as reader:
            for first, count in ((0, warm), (warm, learners - warm)):
                ids = [f"m{i}" for i in range(first, first + count)]
                rss.append(worker.rss())
                await worker.create(client, [sps_config(i) for i in ids])
                rss.append(worker.rss())
                workload = Workload("memory", [], *conformal_contexts_with_answer(ids, count))

                async def applied(done: int = first + count) -> float:
                    return (await worker.wait_count("feedback", "applied", done, 300))[0]

                await two_phases(client, worker.topics, reader, workload, applied)
                await settle(worker.process.pid)
            rss.append(worker.rss())
    finally:
        await client.stop()
        await asyncio.to_thread(worker.stop)
    measured = learners - warm
    return {
        "learners": learners,
        "warm_up_learners": warm,
        "rss": rss,  # before/after the warm-up's configs, before/after the rest's, the end
        "per_learner_configs": (rss[3] - rss[2]) / measured,
        "per_learner": (rss[4] - rss[2]) / measured,
    }


def conformal_contexts_with_answer(
    ids: Sequence[str], count: int, first: int = 0, seed: int = 3
) -> tuple[list[Record], Callable[[str, str, dict | None], bytes]]:
    contexts, truth = conformal_contexts(ids, first, count, seed)
    return contexts, conformal_answer(truth)


# ---------------------------------------------------------------------------- (h) recovery
async def drive_history(
    worker: WorkerProcess, client: AIOKafkaProducer, reader: Reader, ids: Sequence[str],
    events: int, chunk: int,
) -> float:
    """``events`` / 2 contexts round-robin over ``ids`` and one feedback per decision, in
    chunks (a chunk's contexts, its decisions, its feedback; the next chunk's contexts
    overlap the worker's work on that feedback). Returns the events/s of the whole drive."""
    contexts_total = events // 2
    started = time.monotonic()
    for first in range(0, contexts_total, chunk):
        count = min(chunk, contexts_total - first)
        contexts, answer = conformal_contexts_with_answer(ids, count, first, seed=11)
        await produce(client, worker.topics.contexts, ((lid, raw) for lid, _, raw in contexts))
        await client.flush()
        await reader.wait(lambda n=first + count: reader.distinct >= n, 600, "history")
        answers = []
        for lid, eid, _ in contexts:
            decision = reader.decisions.pop(f"{lid}/{eid}")  # keeps the reader's memory flat
            answers.append((lid, answer(lid, eid, decision["output"])))
        await produce(client, worker.topics.feedback, answers)
        elapsed = time.monotonic() - started
        print(
            f"  history {events:,}: {2 * (first + count):,} events produced, "
            f"{first + count:,} decided, {elapsed:.0f}s ({2 * (first + count) / elapsed:,.0f}/s)",
            flush=True,
        )
    await client.flush()
    await worker.wait_count("feedback", "applied", contexts_total, 900)
    return events / (time.monotonic() - started)


async def poll_ready(url: str, timeout_s: float) -> float:
    """time.monotonic() when ``url``/ready first answers 200 (polled every 20 ms)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            await asyncio.to_thread(fetch, f"{url}/ready", 1.0)
            return time.monotonic()
        except (urllib.error.URLError, OSError):
            await asyncio.sleep(0.02)
    raise TimeoutError(f"{url} not ready within {timeout_s:.0f}s")


async def measure_recovery(run: Run, learners: int, events: int) -> dict[str, Any]:
    prefix = run.fresh("rec")
    worker = WorkerProcess(run, prefix)
    client = producer(run.bootstrap, linger_ms=20)
    await client.start()
    ids = [f"r{i}" for i in range(learners)]
    restarted: WorkerProcess | None = None
    try:
        await worker.ready()
        await worker.create(client, [sps_config(i) for i in ids])
        await settle(worker.process.pid)
        async with Reader(run.bootstrap, worker.topics.decisions) as reader:
            rate = await drive_history(worker, client, reader, ids, events, chunk=20_000)
            # Quiescent: nothing left to commit once the feedback count and the bytes settle.
            text, previous = await worker.metrics(), None
            while text != previous:
                await asyncio.sleep(0.5)
                previous, text = text, await worker.metrics()
            written = value(text, "banditflow_state_log_bytes_total") or 0.0
            rss = worker.rss()

            (lid, eid, raw), = conformal_contexts(ids[:1], 0, 1, seed=99, tag="after-kill-")[0]
            worker.process.kill()  # SIGKILL
            killed = time.monotonic()
            await client.send_and_wait(worker.topics.contexts, raw, key=lid.encode())
            await asyncio.to_thread(worker.process.wait)
            restarted = WorkerProcess(run, prefix, worker.port)  # same app id and identity
            spawned = time.monotonic()
            ready_at = await poll_ready(restarted.url, 300)
            await reader.wait(lambda: f"{lid}/{eid}" in reader.decisions, 300, "after-kill")
            decided_at = reader.last_new
        text = await restarted.metrics()
        recovery_bytes = sum(
            v for (name, _), v in samples(text).items() if name == "banditflow_recovery_bytes"
        )
        recovery_s = [
            v for (name, _), v in samples(text).items() if name == "banditflow_recovery_seconds"
        ]
        records, size = await topic_bytes(run.bootstrap, state_topic(prefix))
    finally:
        await client.stop()
        await asyncio.to_thread(worker.stop)
        if restarted is not None:
            await asyncio.to_thread(restarted.stop)
    return {
        "events": events,
        "learners": learners,
        "history_events_per_s": rate,
        "kill_to_spawn_s": spawned - killed,
        "kill_to_ready_s": ready_at - killed,
        "kill_to_decision_s": decided_at - killed,
        "recovery_bytes": recovery_bytes,
        "recovery_seconds_max": max(recovery_s, default=float("nan")),
        "state_log_bytes_metric": written,
        "state_topic_bytes": size,
        "state_topic_records": records,
        "rss_before_kill": rss,
    }


# ---------------------------------------------------------------------------- (i) tick
def measure_tick(learners: int, decisions: int, calls: int) -> dict[str, Any]:
    """``on_tick`` with ``decisions`` open decisions due in 10^6 s: nothing expires."""
    processor = Processor(PartitionStore(retention_s=600.0))
    ids = [f"t{i}" for i in range(learners)]
    for i, lid in enumerate(ids):
        config = {**sps_config(lid), "feedback_timeout_s": 1e6}
        processor.on_config(lid, dumps(config), Source("learners", 0, i), 0.0)
    contexts, _ = conformal_contexts(ids, 0, decisions, seed=5)
    for offset, (_, _, raw) in enumerate(contexts):
        assert processor.on_context(raw, Source("contexts", 0, offset), 1.0).decisions
    processor.store.changes()  # what a commit would have taken
    times = StreamTimes.at(100.0)
    timings = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        emitted = processor.on_tick(times)
        timings.append((time.perf_counter_ns() - started) / 1000)
        assert not emitted.decisions and not emitted.dead_letters
    assert processor.store.open_decisions == decisions
    return {
        "learners": learners,
        "open_decisions": decisions,
        "calls": calls,
        "median_us": statistics.median(timings),
        "p99_us": float(np.percentile(timings, 99)),
    }


# ---------------------------------------------------------------------------- (j) failover
def spread_learners(count: int) -> list[str]:
    """``count`` learner ids, at most ceil(count / PARTITIONS) on a partition, every
    partition with one at least (ids picked in order until that holds)."""
    per = -(-count // PARTITIONS)
    ids: list[str] = []
    taken = [0] * PARTITIONS
    i = 0
    while len(ids) < count:
        lid, i = f"f{i}", i + 1
        if taken[p := partition_for(lid, PARTITIONS)] < per:
            taken[p] += 1
            ids.append(lid)
    assert all(taken), taken
    return ids


class SteadyLoad:
    """Contexts at a fixed rate, round-robin over ``ids``, in the background; remembers when
    each was produced (time.monotonic(), taken before the send) and its partition."""

    def __init__(
        self, client: AIOKafkaProducer, topic: str, ids: Sequence[str], rate: float, seed: int
    ) -> None:
        self.client, self.topic, self.ids, self.rate, self.seed = client, topic, ids, rate, seed
        self.keys: list[str] = []  # "lid/eid", in the order produced
        self.sent: dict[str, tuple[float, int]] = {}  # key -> (time produced, partition)
        self.truth: dict[str, str] = {}  # event id -> true label (grows with the load)
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._cursor = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop after the context being produced (never half-way through a send)."""
        self._stopping.set()
        if self._task is not None:
            await self._task
        await self.client.flush()

    async def _run(self) -> None:
        started = time.monotonic()
        i, chunk = 0, 1_000
        contexts: list[Record] = []
        while not self._stopping.is_set():
            if i % chunk == 0:
                contexts, truth = conformal_contexts(self.ids, i, chunk, self.seed, tag="j")
                self.truth.update(truth)
            delay = started + i / self.rate - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), timeout=delay)
                if self._stopping.is_set():
                    break
            lid, eid, raw = contexts[i % chunk]
            key = f"{lid}/{eid}"
            self.sent[key] = (time.monotonic(), partition_for(lid, PARTITIONS))
            self.keys.append(key)
            await self.client.send(self.topic, raw, key=lid.encode())
            i += 1

    def decided_through(self, seen: set[str]) -> int:
        """How many of the contexts, in the order produced, are decided without a gap."""
        while self._cursor < len(self.keys) and self.keys[self._cursor] in seen:
            self._cursor += 1
        return self._cursor


async def owned_partitions(worker: WorkerProcess) -> list[int] | None:
    """The partitions ``worker``'s /ready lists once it is ready ("ready: partitions [a, b]"),
    else None."""
    try:
        text = await asyncio.to_thread(fetch, f"{worker.url}/ready", 1.0)
    except (urllib.error.URLError, OSError):
        return None
    match = re.fullmatch(r"ready: partitions \[([\d, ]*)\]", text.strip())
    return [int(x) for x in match.group(1).split(",") if x.strip()] if match else None


async def wait_split(workers: Sequence[WorkerProcess], timeout_s: float) -> list[list[int]]:
    """Poll /ready until every one of ``workers`` is ready with an equal share of the
    partitions, all of them owned; returns each one's partitions."""
    deadline = time.monotonic() + timeout_s
    share = PARTITIONS // len(workers)
    while True:
        owned = [await owned_partitions(w) for w in workers]
        if all(o is not None and len(o) == share for o in owned) and sorted(
            p for o in owned for p in o or []
        ) == list(range(PARTITIONS)):
            return [o or [] for o in owned]
        for w in workers:
            if w.process.poll() is not None:
                raise RuntimeError(f"worker on port {w.port} exited ({w.process.returncode})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no even split of the partitions within {timeout_s:.0f}s: "
                               f"{owned}")
        await asyncio.sleep(0.05)


async def wait_owns_all(worker: WorkerProcess, timeout_s: float) -> float:
    """time.monotonic() when ``worker``'s /ready first lists every partition (50 ms polls)."""
    deadline = time.monotonic() + timeout_s
    while await owned_partitions(worker) != list(range(PARTITIONS)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker on port {worker.port}: not all partitions")
        await asyncio.sleep(0.05)
    return time.monotonic()


def member_prefix(worker: WorkerProcess) -> str:
    """How ``worker``'s member ids in its group begin (``<client id>-``, the client id being
    the app id, host name and web port, as the worker names itself)."""
    return f"{worker.prefix}-{socket.gethostname()}-{worker.port}-"


async def group_members(admin: AIOKafkaAdminClient, group: str) -> list[str]:
    """The member ids of consumer group ``group``."""
    described = await admin.describe_consumer_groups([group])
    # (error code, group, state, protocol type, protocol, members)
    return [member[0] for response in described for found in response.groups
            for member in found[5]]


async def wait_left(admin: AIOKafkaAdminClient, worker: WorkerProcess, timeout_s: float) -> float:
    """time.monotonic() of the first look at the group (every 50 ms) without ``worker``'s
    member: it left (SIGTERM) or its session timed out (kill -9)."""
    deadline = time.monotonic() + timeout_s
    while True:
        asked = time.monotonic()
        members = await group_members(admin, worker.prefix)
        if not any(m.startswith(member_prefix(worker)) for m in members):
            return asked
        if asked > deadline:
            raise TimeoutError(f"{member_prefix(worker)}* still in group {worker.prefix}")
        await asyncio.sleep(0.05)


async def measure_failover(run: Run, learners: int, rate: float) -> dict[str, Any]:
    prefix = run.fresh("fail")
    topics = Topics(prefix)
    ids = spread_learners(learners)
    contexts_client, feedback_client = producer(run.bootstrap, 0), producer(run.bootstrap, 0)
    admin = AIOKafkaAdminClient(bootstrap_servers=run.bootstrap)
    await contexts_client.start()
    await feedback_client.start()
    await admin.start()
    load = SteadyLoad(contexts_client, topics.contexts, ids, rate, seed=13)
    answer = conformal_answer(load.truth)
    decided_at: dict[str, float] = {}  # key -> time.monotonic() the decision was read

    async def on_decision(decision: dict[str, Any], _wall: float) -> None:
        lid, eid = decision["learner_id"], decision["event_id"]
        decided_at[f"{lid}/{eid}"] = time.monotonic()
        await feedback_client.send(
            topics.feedback, answer(lid, eid, decision["output"]), key=lid.encode()
        )

    async def caught_up(reader: Reader, lag_s: float = 1.0) -> None:
        """Until every context produced more than ``lag_s`` ago is decided."""

        def done() -> bool:
            n = load.decided_through(reader.seen)
            return n == len(load.keys) or load.sent[load.keys[n]][0] > time.monotonic() - lag_s

        await reader.wait(done, 120, "steady load")

    async def fail(
        reader: Reader, victim: WorkerProcess, survivor: WorkerProcess, partitions: list[int],
        how: Callable[[], None],
    ) -> dict[str, Any]:
        """``how`` to ``victim``; wait until ``survivor`` owns every partition, the victim
        has exited and every context produced until 2 s later is decided. "Decisions again":
        the first decision on one of the victim's ``partitions`` of a context produced after
        the kill, or for a SIGTERM after the victim left the group (a stopping worker still
        decides what it fetched before the signal, and a little after: that is not the
        survivor taking over; ``to_first_decision_any_s`` counts those too)."""
        members = await group_members(admin, prefix)
        assert any(m.startswith(member_prefix(victim)) for m in members), members
        how()
        since = time.monotonic()
        left = asyncio.create_task(wait_left(admin, victim, 120))
        owns = asyncio.create_task(wait_owns_all(survivor, 120))

        def reap() -> float:
            victim.process.wait(60)
            return time.monotonic()

        exited = asyncio.create_task(asyncio.to_thread(reap))
        owns_all, left_at, exited_at = await owns, await left, await exited
        await asyncio.sleep(2.0)  # the steady load goes on; then all of it decided
        await caught_up(reader, lag_s=0.5)
        produced = len(load.keys)
        await reader.wait(lambda: load.decided_through(reader.seen) >= produced, 120,
                          "contexts of the failover")
        since_then = [k for k in load.keys[:produced] if load.sent[k][0] >= since]
        cutoff = since if victim.process.returncode == -signal.SIGKILL else left_at

        def first_decision(after: float) -> float:
            return min(decided_at[k] for k in since_then
                       if load.sent[k][0] >= after and load.sent[k][1] in partitions) - since

        def longest_wait(on_victim: bool) -> float:
            return max((decided_at[k] - load.sent[k][0] for k in since_then
                        if (load.sent[k][1] in partitions) == on_victim), default=0.0)

        return {
            "victim_partitions": partitions,
            "to_decision_s": first_decision(cutoff),
            "to_first_decision_any_s": first_decision(since),
            "to_survivor_owns_all_s": owns_all - since,
            "to_victim_left_group_s": left_at - since,
            "to_victim_exited_s": exited_at - since,
            # decision read - context produced, of the contexts produced since
            "longest_wait_victim_partitions_s": longest_wait(True),
            "longest_wait_other_partitions_s": longest_wait(False),
            "contexts_produced": produced,  # since the load started
            "contexts_decided": sum(k in reader.seen for k in load.keys[:produced]),
        }

    a = WorkerProcess(run, prefix, log=f"{prefix}-A")
    workers = [a]
    try:
        await a.ready()
        await a.create(contexts_client, [sps_config(i) for i in ids])
        b = WorkerProcess(run, prefix, log=f"{prefix}-B")
        workers.append(b)
        await wait_split([a, b], 120)
        await settle(a.process.pid, timeout_s=15)
        await settle(b.process.pid, timeout_s=15)
        async with Reader(run.bootstrap, topics.decisions, on_decision) as reader:
            load.start()
            await asyncio.sleep(2.0)
            await caught_up(reader)
            a_parts, _ = await wait_split([a, b], 10)
            kill = await fail(reader, a, b, a_parts, a.process.kill)
            print(f"  failover, kill -9: {kill}", flush=True)

            c = WorkerProcess(run, prefix, log=f"{prefix}-C")
            workers.append(c)
            await wait_split([b, c], 120)
            await settle(c.process.pid, timeout_s=15)
            await caught_up(reader)
            b_parts, _ = await wait_split([b, c], 10)
            term = await fail(
                reader, b, c, b_parts, lambda: b.process.send_signal(signal.SIGTERM)
            )
            print(f"  failover, SIGTERM: {term}", flush=True)
            await load.stop()
            total = len(load.keys)
            await reader.wait(lambda: load.decided_through(reader.seen) >= total, 120,
                              "every context")
            assert reader.distinct == total, (reader.distinct, total)
            published = reader.records
        await feedback_client.flush()

        def counts(text: str, name: str) -> float:
            return sum(value(text, f"banditflow_learner_{name}", learner_id=i) or 0.0
                       for i in ids)

        deadline = time.monotonic() + 120
        while counts(text := await c.metrics(), "feedback") < total:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        dead = dead_letters(text)
        assert not dead, f"{prefix}: dead letters {dead}"
        dead_records, _ = await topic_bytes(run.bootstrap, topics.deadletter)
        assert dead_records == 0, f"{prefix}: {dead_records} dead letters"
        learner_decisions, learner_feedback = counts(text, "decisions"), counts(text, "feedback")
        if (learner_decisions, learner_feedback) != (total, total):
            print(f"  WARNING failover: the learners count {learner_decisions:.0f} decisions "
                  f"and {learner_feedback:.0f} feedback of {total} contexts", flush=True)
    finally:
        await admin.close()
        await contexts_client.stop()
        await feedback_client.stop()
        for worker in workers:
            await asyncio.to_thread(worker.stop)
    return {
        "learners": learners,
        "learner_partitions": [partition_for(i, PARTITIONS) for i in ids],
        "rate": rate,
        "kill": kill,
        "sigterm": term,
        "contexts": total,
        "decisions_published": published,
        "dead_letters": dead_records,
        "learner_decisions": learner_decisions,
        "learner_feedback": learner_feedback,
    }


# ---------------------------------------------------------------------------- the report
def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def table(results: dict[str, Any]) -> str:
    rows: list[tuple[str, str, Sequence[float], str]] = []

    def phases(label: str, key: str) -> None:
        runs = [Phases(**r) for r in results[key]]
        rows.append((label, "events/s = 2N/(t1+t2)", [r.events_per_s for r in runs], ",.0f"))
        rows.append((label, "decisions/s with feedback", [r.decisions_per_s for r in runs],
                     ",.0f"))
        rows.append((label, "t1 contexts -> decisions (s)", [r.t1 for r in runs], ".2f"))
        rows.append((label, "t2 feedback -> applied (s)", [r.t2 for r in runs], ".2f"))

    n = results["settings"]["events"]
    phases(f"(a) Faust no-op agent, N={n:,}", "a")
    phases("(b) banditflow, 1 SPS learner (K=20)", "b")
    rows.append(("(b) banditflow, 1 SPS learner (K=20)",
                 f"first decision after {n:,} backlogged contexts (s)",
                 [r["first"] for r in results["b"]], ".2f"))
    rows.append(("(b)/(a)", "events/s ratio, per pair", results["ratio_b_a"], ".2f"))
    phases(f"(c) banditflow, {results['settings']['many_learners']:,} SPS learners", "c")
    phases(f"(d) banditflow, 1 graph_cb learner (K={ACTIONS})", "d")
    lat = results["e"]
    rate = f"{np.median([run['achieved_rate'] for run in lat]):.0f}/s"
    for who, key in (("application", "app_ms"), ("worker", "worker_ms")):
        label = f"(e) latency at {rate}, {who}"
        metric = ("decision received - context sent (ms)" if who == "application"
                  else "decided_at - context ts (ms)")
        for pct in ("p50", "p95", "p99"):
            rows.append((label, f"{metric}, {pct} of a run", [run[key][pct] for run in lat],
                         ".1f"))
    mem = results["f"]
    rows.append((f"(f) memory, {mem['learners']:,} learners", "RSS bytes per learner "
                 "(config + 1 decision + 1 feedback)", [mem["per_learner"]], ",.0f"))
    rows.append((f"(f) memory, {mem['learners']:,} learners", "RSS bytes per learner "
                 "(config only)", [mem["per_learner_configs"]], ",.0f"))
    rows.append(("(g) state log", "bytes per decision (with feedback), from (b)",
                 [r["state_log_bytes"] / r["events"] for r in results["b"]], ",.0f"))
    rows.append(("(g) state log", f"bytes per decision (with feedback), from (e) at {rate}",
                 [run["state_log_bytes_per_decision"] for run in lat], ",.0f"))
    for rec in results["h"]:
        label = f"(h) recovery, {rec['learners']:,} learners, {rec['events']:,} events"
        rows.append((label, "kill -> /ready (s)", [rec["kill_to_ready_s"]], ".2f"))
        rows.append((label, "kill -> decision of a new context (s)",
                     [rec["kill_to_decision_s"]], ".2f"))
        rows.append((label, "banditflow_recovery_seconds (s, max over partitions)",
                     [rec["recovery_seconds_max"]], ".2f"))
        rows.append((label, "recovery read (MB, sum over partitions)",
                     [rec["recovery_bytes"] / 1e6], ",.1f"))
        rows.append((label, "state topic (MB, sum of values)",
                     [rec["state_topic_bytes"] / 1e6], ",.1f"))
        rows.append((label, "history driven at (events/s)", [rec["history_events_per_s"]],
                     ",.0f"))
    tick = results["i"]
    rows.append((f"(i) on_tick, {tick['learners']:,} learners, {tick['open_decisions']:,} open",
                 f"µs per tick, nothing due (median of {tick['calls']:,})",
                 [tick["median_us"]], ",.1f"))
    fail = results["j"]
    label = (f"(j) failover, 2 workers, {fail['learners']} SPS learners, "
             f"{fail['rate']:.0f} contexts/s")
    for key, what in (("kill", "kill -9"), ("sigterm", "SIGTERM")):
        case = fail[key]
        rows.append((label, f"{what} of one of two workers -> decisions again on its "
                     "partitions (s)", [case["to_decision_s"]], ".2f"))
        rows.append((label, f"{what} -> out of the group / the survivor's /ready lists all "
                     "partitions / the process is gone (s)",
                     [case["to_victim_left_group_s"], case["to_survivor_owns_all_s"],
                      case["to_victim_exited_s"]], "slash"))
        rows.append((label, f"{what}: longest wait of a context on its partitions / on the "
                     "others (s)", [case["longest_wait_victim_partitions_s"],
                                    case["longest_wait_other_partitions_s"]], "slash"))
    rows.append((label, "kill -9: contexts produced / decided (load start to 2 s after the "
                 "takeover)", [fail["kill"]["contexts_produced"],
                               fail["kill"]["contexts_decided"]], "slash"))
    rows.append((label, "contexts in all, all decided, no dead letters",
                 [fail["contexts"]], ",.0f"))
    rows.append((label, "decisions published again (after a takeover; readers keep the first)",
                 [fail["decisions_published"] - fail["contexts"]], ",.0f"))
    rows.append((label, "the learners' counts: decisions / feedback (= contexts if exact)",
                 [fail["learner_decisions"], fail["learner_feedback"]], "slash"))

    lines = [
        "| measurement | metric | median | min | max | runs |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, metric, values, fmt in rows:
        if fmt == "slash":  # several numbers of one run
            digits = 2 if any(v % 1 for v in values) else 0
            cells = [" / ".join(f"{v:.{digits}f}" for v in values), "", ""]
            count = 1
        else:
            s = spread(values)
            cells = [f"{s['median']:{fmt}}", *(
                (f"{s['min']:{fmt}}", f"{s['max']:{fmt}}") if len(values) > 1 else ("", "")
            )]
            count = len(values)
        lines.append(f"| {label} | {metric} | {' | '.join(cells)} | {count} |")
    return "\n".join(lines)


async def run_brokered(settings: Settings, run: Run, results: dict[str, Any]) -> None:
    n = settings.events
    for r in range(settings.rounds):
        seed = 100 + r
        agent = await measure_agent(run, conformal_workload(1, n, seed))
        ours = await measure_banditflow(run, conformal_workload(1, n, seed))
        results["a"].append(asdict(agent))
        results["b"].append(asdict(ours))
        results["ratio_b_a"].append(ours.events_per_s / agent.events_per_s)
        many = await measure_banditflow(run, conformal_workload(settings.many_learners, n, seed))
        results["c"].append(asdict(many))
        graph = await measure_banditflow(run, graph_workload(n, seed))
        results["d"].append(asdict(graph))
        print(
            f"round {r + 1}/{settings.rounds}: events/s (a) {agent.events_per_s:,.0f}  "
            f"(b) {ours.events_per_s:,.0f}  (c) {many.events_per_s:,.0f}  "
            f"(d) {graph.events_per_s:,.0f}",
            flush=True,
        )
    results["e"] = []
    for _ in range(settings.rounds):  # a tail percentile of one run is noisy on 2 shared cores
        results["e"].append(await measure_latency(run, settings.latency_rate, settings.latency_s))
        print(f"latency: {results['e'][-1]}", flush=True)
    results["f"] = await measure_memory(run, settings.memory_learners)
    print(f"memory: {results['f']}", flush=True)
    results["j"] = await measure_failover(run, settings.failover_learners, settings.failover_rate)
    print(f"failover: {results['j']}", flush=True)
    for events in settings.histories:
        results["h"].append(await measure_recovery(run, settings.many_learners, events))
        print(f"recovery: {results['h'][-1]}", flush=True)


SOURCES = ("processors", "streams", "learners", "schemas")


def source_digest() -> str:
    """A digest of the measured code (every .py file of the packages), committed or not."""
    digest = hashlib.sha1()
    for path in sorted(p for name in SOURCES for p in (HERE.parents[1] / name).rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


def code_version() -> str:
    """The commit, whether the packages differ from it, and the digest of their sources."""
    git = ["git", "-C", str(HERE.parents[1])]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip() or "unknown"
    dirty = subprocess.run([*git, "status", "--porcelain", "--", *SOURCES],
                           capture_output=True, text=True, check=False).stdout.strip()
    return f"{head}{' + uncommitted changes' if dirty else ''}, sources {source_digest()}"


def run_benchmark(settings: Settings) -> str:
    started = time.monotonic()
    logs = OUT / "state_layer-logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    results: dict[str, Any] = {
        "code": code_version(),
        "settings": asdict(settings), "a": [], "b": [], "c": [], "d": [], "ratio_b_a": [],
        "h": [],
    }
    results["i"] = measure_tick(
        settings.tick_learners, settings.tick_decisions, settings.tick_calls
    )
    print(f"tick: {results['i']}", flush=True)
    with EmbeddedBroker(port=free_port(), log_path=logs / "broker.log") as broker:
        asyncio.run(run_brokered(settings, Run(broker.bootstrap, logs), results))
    results["wall_s"] = time.monotonic() - started
    if (now := source_digest()) not in results["code"]:
        results["code"] += f", CHANGED during the run to sources {now}"
    text = table(results)
    heading = (
        f"State layer benchmark: N = {settings.events:,} contexts per run, "
        f"{settings.rounds} rounds, {PARTITIONS} partitions, one embedded broker, "
        f"{os.cpu_count()} CPUs; {results['wall_s']:.0f}s in all; code {results['code']}."
    )
    report = f"{heading}\n\n{text}\n"
    print(f"\n{report}", flush=True)
    (OUT / "state_layer.md").write_text(report)
    (OUT / "state_layer.json").write_text(json.dumps(results, indent=2) + "\n")
    return report


@pytest.mark.timeout(7200)  # a benchmark on a shared machine, not a unit test
def test_state_layer_benchmark() -> None:
    """Prints the table (``pytest -s``). BENCH_STATE_LAYER_QUICK=1, _ROUNDS, _EVENTS."""
    quick = os.environ.get("BENCH_STATE_LAYER_QUICK", "") not in ("", "0")
    rounds = int(os.environ.get("BENCH_STATE_LAYER_ROUNDS", 0)) or None
    events = int(os.environ.get("BENCH_STATE_LAYER_EVENTS", 0)) or None
    run_benchmark(Settings.make(quick, rounds, events))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="N = 2,000, 10 s of latency, no 10^6-event recovery")
    parser.add_argument("--rounds", type=int, default=None, help="(a)/(b) pairs (default 3)")
    parser.add_argument("--events", type=int, default=None,
                        help="contexts per throughput run (default 10,000; 2,000 with --quick)")
    args = parser.parse_args()
    run_benchmark(Settings.make(args.quick, args.rounds, args.events))


if __name__ == "__main__":
    main()
