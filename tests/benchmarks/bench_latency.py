"""Decision latency beside its floors: banditflow against no-op round trips, same broker, same run.

On the embedded broker (Tansu) most of a decision's latency is the broker's: a fetch lists
every record batch of its partition, and an empty fetch is looked at again only after half
its wait. So the worker's own share is only visible beside the floors,
``noop_roundtrip.py``: an aiokafka consumer re-publishing each context (no learner, no state
of its own), either

- at once: the **floor** (one fetch and one produce per decision, the least any design
  adds), or
- once a state record of what it fetched is acknowledged: the **state-first floor**, the
  least any design adds that publishes a decision only after its state is durable, as the
  worker's commits do (streams/committer.py; pipelined the same way);
- at once, with its feedback paced as the worker's with ``--feedback-fetch-interval-ms 200``
  (paused once caught up): the **paced floor**, the floor of a design that does not fetch
  the feedback with every fetch of the contexts.

Tansu slows as batches accumulate, so every measurement gets a fresh broker; the floors and
banditflow alternate so that all meet the same machine load, and the table reports each and
banditflow's differences to each.

And the broker's own answer, the least any design's produce waits for: ``produce_probe.py``
sending one record per request (through aiokafka's client directly, one request at a time,
``PROBE_RATE`` a second), alone on a fresh broker, then beside the floor's load, in a fourth
measurement (the probe's load would shift the floor's latency were it in the floor's own).
A design that publishes a decision only once its state is acknowledged waits for two such
answers, one after the other.

Per measurement: one conformal SPS learner (K = 20, exact horizon 10^5), contexts at a fixed
rate (``RATES``) for ``seconds``, each decision answered with feedback as soon as it is
read (producers with ``linger_ms=0``, the decisions read with ``fetch_max_wait_ms=10``).
Reported, medians over ``rounds`` rounds of each run's p50 / p95 / p99:

- the application's latency (decision received - context sent), banditflow and both floors,
  and its two parts: up to the fetch that brought the context (the decision's
  ``decided_at``, a floor output's ``fetched_at`` header), the broker's way to the consumer;
  and from that fetch, the process and the way back to the application;
- inside the process, from the fetch that brought a context to its decision's (output's)
  publication acknowledged: the worker's ``banditflow_decision_in_worker_seconds``
  (interpolated in its buckets), of which ``banditflow_decision_queued_seconds`` waiting for
  its commit to be cut; and the floors' own (exact);
- a commit's time (``banditflow_commit_seconds``) and its stages
  (``banditflow_commit_stage_seconds``: cut, state, outputs);
- state log bytes per decision (with its feedback), at each rate;
- the CPU time per decision (with its feedback) of the worker and of the floors' processes;
- the idle CPU of the worker and of the floor (one learner, no load, ``IDLE_S`` seconds);
- the broker's answer to a lone produce request, idle and beside the floor's load;
- the broker's CPU share of one core in the first and the last quarter of the load, in
  banditflow's measurement and the floors': a fetch that finds a record costs the embedded
  broker time in proportion to its partition's batches, so its CPU climbs as a round's
  one-record batches accumulate, and with it the time its answers wait for a core.

The floors' fetch wait is the floor's best on this broker (``FLOOR_FETCH_WAIT_MS``: the issue-26
measurements at 500/s gave p50/p99 20.5/71.8 ms at 20 ms, 16.5/52.9 at 10, 26.6/135.8 at 5,
and a third of the records not back after seconds at 2).

Writes runs/bench/latency.md and .json. Asserts correctness only (every context decided,
every feedback applied, no dead letters), nothing about time: the machine is shared.

Run: ``make bench`` (env BENCH_LATENCY_ROUNDS, BENCH_LATENCY_SECONDS) or directly
``python tests/benchmarks/bench_latency.py [--rounds R] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from bench_state_layer import (
    OUT,
    PARTITIONS,
    Reader,
    Run,
    WorkerProcess,
    code_version,
    conformal_answer,
    conformal_contexts,
    cpu_seconds,
    dead_letters,
    dumps,
    percentiles,
    producer,
    settle,
    sps_config,
)

from banditflow.streams.broker import EmbeddedBroker, free_port
from banditflow.streams.metrics import COMMIT_STAGES
from banditflow.streams.scrape import value
from banditflow.streams.topics import Topics, ensure_topics, partition_for, state_topic

HERE = Path(__file__).resolve().parent
RATES = (500.0, 2000.0)
FLOOR_FETCH_WAIT_MS = 10
# The paced floor's feedback interval (the worker's --feedback-fetch-interval-ms 200).
FEEDBACK_INTERVAL_S = 0.2
IDLE_S = 10.0
# produce_probe.py: requests a second (a fifth of the contexts' rate at 500/s: enough
# answers for a p99 in 20 s, little beside the floor's load), and its seconds alone on the
# fresh broker.
PROBE_RATE = 100.0
PROBE_IDLE_S = 5.0
IN_WORKER = "banditflow_decision_in_worker_seconds"
QS = (0.5, 0.95, 0.99)
PARTITION = partition_for("lat", PARTITIONS)  # the learner's


async def drive(
    bootstrap: str, topics: Topics, rate: float, seconds: float, pid: int, broker_pid: int,
    on_done: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Contexts of one learner at ``rate`` for ``seconds``, feedback for each decision as
    soon as it is read; the application's latency of every decision (and its two parts,
    before and after the fetch that brought the context, by the decision's ``decided_at``),
    the CPU time per decision of process ``pid`` (the one deciding) from the first
    context to the last decision read, and the broker's (``broker_pid``) CPU share of one
    core in the first and the last quarter of the sending."""
    total = int(rate * seconds)
    contexts, truth = conformal_contexts(["lat"], 0, total, seed=7)
    answer = conformal_answer(truth)
    contexts_client, feedback_client = producer(bootstrap, 0), producer(bootstrap, 0)
    await contexts_client.start()
    await feedback_client.start()
    app_ms: list[float] = []
    # the application's latency, split where the context was fetched (the decision's
    # decided_at, a floor's fetched_at header): before, the broker's way to the consumer;
    # after, the process and the way back to the application
    to_fetch_ms: list[float] = []
    from_fetch_ms: list[float] = []
    sent_at: dict[str, float] = {}

    async def on_decision(decision: dict[str, Any], received: float) -> None:
        eid = decision["event_id"]
        app_ms.append((received - sent_at[eid]) * 1000)
        to_fetch_ms.append((decision["decided_at"] - sent_at[eid]) * 1000)
        from_fetch_ms.append((received - decision["decided_at"]) * 1000)
        await feedback_client.send(
            topics.feedback, answer("lat", eid, decision.get("output")), key=b"lat"
        )

    try:
        async with Reader(bootstrap, topics.decisions, on_decision) as reader:
            cpu_before = cpu_seconds(pid)
            started = time.monotonic()
            # (time, the broker's CPU seconds) at the sending's start, quarters and end
            broker_cpu = [(started, cpu_seconds(broker_pid))]
            quarters = {total * k // 4 for k in (1, 2, 3)} - {0}
            for i, (lid, eid, raw) in enumerate(contexts):
                delay = started + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if i in quarters:
                    broker_cpu.append((time.monotonic(), cpu_seconds(broker_pid)))
                sent_at[eid] = now = time.time()
                body = json.loads(raw)
                body["ts"] = now
                await contexts_client.send(topics.contexts, dumps(body), key=lid.encode())
            sending = time.monotonic() - started
            broker_cpu.append((time.monotonic(), cpu_seconds(broker_pid)))
            await reader.wait(lambda: reader.distinct >= total, 120, "latency decisions")
            cpu_ms = (cpu_seconds(pid) - cpu_before) * 1000 / total
        await feedback_client.flush()
        if on_done is not None:
            await on_done()
    finally:
        await contexts_client.stop()
        await feedback_client.stop()
    return {"contexts": total, "achieved_rate": total / sending, "app_ms": percentiles(app_ms),
            "to_fetch_ms": percentiles(to_fetch_ms), "from_fetch_ms": percentiles(from_fetch_ms),
            "cpu_ms_per_decision": cpu_ms,
            "broker_cpu_share": [(c1 - c0) / (t1 - t0)
                                 for (t0, c0), (t1, c1) in itertools.pairwise(broker_cpu)]}


def pid_of(broker: EmbeddedBroker) -> int:
    assert broker.process is not None, "the broker is not started"
    return broker.process.pid


async def idle_cpu(pid: int, seconds: float) -> float:
    """The share of one CPU process ``pid`` uses over ``seconds`` (after it settled)."""
    await settle(pid)
    before = cpu_seconds(pid)
    await asyncio.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


def bucket_quantiles(
    text: str, name: str, qs: tuple[float, ...], **labels: str
) -> dict[str, float]:
    """Quantiles (ms) of histogram ``name`` (its series with ``labels``) in a /metrics text,
    linear within its buckets."""
    wanted = [f'{label}="{value}"' for label, value in labels.items()]
    bounds: list[tuple[float, float]] = []
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{") and all(pair in line for pair in wanted):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            bounds.append((float(le), float(line.rsplit(" ", 1)[1])))
    if not bounds or bounds[-1][1] == 0:
        raise AssertionError(f"the worker exported no observations of {name} {labels}")
    bounds.sort()
    total, result = bounds[-1][1], {}
    for q in qs:
        target, below, lower = q * total, 0.0, 0.0
        for upper, count in bounds:
            if count >= target:
                share = (target - below) / (count - below) if count > below else 1.0
                top = upper if upper != float("inf") else lower
                result[f"p{round(q * 100)}"] = (lower + share * (top - lower)) * 1000
                break
            below, lower = count, upper
    return result


async def measure_banditflow(
    logs: Path, rate: float, seconds: float, worker_args: Sequence[str]
) -> dict[str, Any]:
    with EmbeddedBroker(port=free_port(), log_path=logs / "broker.log") as broker:
        run = Run(broker.bootstrap, logs)
        worker = WorkerProcess(run, run.fresh("lat"), args=worker_args)
        client = producer(run.bootstrap, 0)
        await client.start()
        final: dict[str, str] = {}
        try:
            await worker.ready()
            await worker.create(client, [sps_config("lat")])
            idle = await idle_cpu(worker.process.pid, IDLE_S)

            async def applied() -> None:
                total = int(rate * seconds)
                _, final["text"] = await worker.wait_count("feedback", "applied", total, 120)

            result = await drive(run.bootstrap, worker.topics, rate, seconds,
                                 worker.process.pid, pid_of(broker), applied)
        finally:
            await client.stop()
            await asyncio.to_thread(worker.stop)
    text = final["text"]
    assert not dead_letters(text), dead_letters(text)
    result["idle_cpu"] = idle
    result["state_log_bytes_per_decision"] = (
        value(text, "banditflow_state_log_bytes_total") or 0.0
    ) / result["contexts"]
    result["worker_ms"] = bucket_quantiles(text, IN_WORKER, QS)
    result["queued_ms"] = bucket_quantiles(text, "banditflow_decision_queued_seconds", QS)
    result["commit_ms"] = bucket_quantiles(text, "banditflow_commit_seconds", QS)
    for stage in COMMIT_STAGES:
        result[f"{stage}_ms"] = bucket_quantiles(text, "banditflow_commit_stage_seconds", QS,
                                                 stage=stage)
    result["commits_per_decision"] = (
        value(text, "banditflow_commits_total", partition=str(PARTITION)) or 0.0
    ) / result["contexts"]
    return result


class Reporter:
    """A benchmark's helper process (noop_roundtrip.py, produce_probe.py): started with
    ``env``, ready once it prints "ready"; on leaving, stopped with SIGTERM, and what it then
    prints, one JSON value, is :attr:`report`."""

    def __init__(self, script: str, env: dict[str, str], log: Path) -> None:
        self.script, self.env, self.log = script, env, log
        self.report: Any = None

    async def __aenter__(self) -> Reporter:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(HERE / self.script)], env={**os.environ, **self.env},
                stdout=subprocess.PIPE, stderr=log,
            )
        assert self.process.stdout is not None
        ready = await asyncio.to_thread(self.process.stdout.readline)
        if ready.strip() != b"ready":
            self.process.kill()
            raise AssertionError(f"{self.script} did not start ({ready!r}; see {self.log})")
        return self

    async def __aexit__(self, *exc: object) -> None:
        # (the report comes on stdout as it stops: read while waiting, as it outgrows a
        # pipe's buffer)
        self.process.terminate()
        try:
            out, _ = await asyncio.to_thread(self.process.communicate, timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = await asyncio.to_thread(self.process.communicate)
        if exc[0] is None:
            if not out.strip():
                raise AssertionError(f"{self.script} reported nothing (see {self.log})")
            self.report = json.loads(out)


async def measure_floor(
    logs: Path, rate: float, seconds: float, state_first: bool = False, probe: bool = False,
    paced: bool = False,
) -> dict[str, Any]:
    """The no-op round trip at ``rate`` (``state_first``: writing a state record before it
    re-publishes; ``paced``: its feedback paced, see noop_roundtrip.py);
    with its own latency per context, fetch -> output acknowledged (``process_ms``).
    ``probe``: with produce_probe.py timing the broker's acknowledgements, alone for
    ``PROBE_IDLE_S`` first (``ack_idle_ms``), then beside the load (``ack_loaded_ms``); the
    idle CPU is measured on the plain floor only."""
    assert not (probe and state_first), "the probe writes where the state-first floor does"
    with EmbeddedBroker(port=free_port(), log_path=logs / "broker.log") as broker:
        topics = Topics(f"floor-{os.getpid()}-{time.monotonic_ns()}")
        await asyncio.to_thread(ensure_topics, broker.bootstrap, topics, PARTITIONS, "floor")
        env = {
            "NOOP_BOOTSTRAP": broker.bootstrap, "NOOP_CONTEXTS": topics.contexts,
            "NOOP_FEEDBACK": topics.feedback, "NOOP_OUTPUT": topics.decisions,
            "NOOP_FETCH_WAIT_MS": str(FLOOR_FETCH_WAIT_MS),
        }
        if state_first:
            env["NOOP_STATE_TOPIC"] = state_topic("floor")
        if paced:
            env["NOOP_FEEDBACK_INTERVAL_MS"] = str(FEEDBACK_INTERVAL_S * 1000)
        idle: float | None = None
        async with contextlib.AsyncExitStack() as stack:
            if probe:
                acks = await stack.enter_async_context(Reporter(
                    "produce_probe.py", {"PROBE_BOOTSTRAP": broker.bootstrap,
                                         # (unused by the plain floor)
                                         "PROBE_TOPIC": state_topic("floor"),
                                         "PROBE_RATE": str(PROBE_RATE)}, logs / "probe.log"))
                await asyncio.sleep(PROBE_IDLE_S)
                alone_to = time.monotonic()
            async with Reporter("noop_roundtrip.py", env, logs / "floor.log") as floor:
                # (the state-first and paced floors idle as the floor does)
                if not (state_first or probe or paced):
                    idle = await idle_cpu(floor.process.pid, IDLE_S)
                loaded_from = time.monotonic()
                result = await drive(broker.bootstrap, topics, rate, seconds,
                                     floor.process.pid, pid_of(broker))
                loaded_to = time.monotonic()
        result["process_ms"] = percentiles(floor.report)
    if probe:
        result["ack_idle_ms"] = percentiles([ms for at, ms in acks.report if at < alone_to])
        result["ack_loaded_ms"] = percentiles(
            [ms for at, ms in acks.report if loaded_from <= at <= loaded_to]
        )
    if idle is not None:
        result["idle_cpu"] = idle
    return result


def median_of(runs: list[dict[str, Any]], key: str, pct: str) -> float:
    return statistics.median(run[key][pct] for run in runs)


def table(results: dict[str, Any]) -> str:
    lines = [
        "| rate | measurement | p50 | p95 | p99 |",
        "|---|---|---:|---:|---:|",
    ]
    pcts = ("p50", "p95", "p99")
    for both in results["rates"].values():
        ours, floor, state_first = both["banditflow"], both["floor"], both["state_first"]
        paced = both["paced_floor"]
        probed = both["broker_ack"]
        achieved = statistics.median(run["achieved_rate"] for run in ours)
        rate = f"{achieved:,.0f}/s"
        rows = [
            ("banditflow, as the application sees it (ms)", [median_of(ours, "app_ms", p)
                                                             for p in pcts]),
            (f"floor: no-op round trip, fetch wait {FLOOR_FETCH_WAIT_MS} ms (ms)",
             [median_of(floor, "app_ms", p) for p in pcts]),
            ("difference, banditflow - floor (ms)",
             [median_of(ours, "app_ms", p) - median_of(floor, "app_ms", p) for p in pcts]),
            ("paced floor: the floor with its feedback paced (200 ms) (ms)",
             [median_of(paced, "app_ms", p) for p in pcts]),
            ("difference, banditflow - paced floor (ms)",
             [median_of(ours, "app_ms", p) - median_of(paced, "app_ms", p) for p in pcts]),
            ("state-first floor: the no-op writing state before it publishes (ms)",
             [median_of(state_first, "app_ms", p) for p in pcts]),
            ("difference, banditflow - state-first floor (ms)",
             [median_of(ours, "app_ms", p) - median_of(state_first, "app_ms", p)
              for p in pcts]),
            *[(f"- {name}: {part} (ms)", [median_of(runs, key, p) for p in pcts])
              for part, key in (("context sent -> fetched", "to_fetch_ms"),
                                ("fetched -> decision received", "from_fetch_ms"))
              for name, runs in (("banditflow", ours), ("floor", floor),
                                 ("state-first floor", state_first))],
            ("inside the worker: fetch -> decision acknowledged (ms, buckets)",
             [median_of(ours, "worker_ms", p) for p in pcts]),
            ("- of which queued for its commit (ms, buckets)",
             [median_of(ours, "queued_ms", p) for p in pcts]),
            ("inside the state-first floor: fetch -> output acknowledged (ms)",
             [median_of(state_first, "process_ms", p) for p in pcts]),
            ("inside the floor: fetch -> output acknowledged (ms)",
             [median_of(floor, "process_ms", p) for p in pcts]),
            ("the broker's answer to a lone produce request, idle (ms)",
             [median_of(probed, "ack_idle_ms", p) for p in pcts]),
            (f"the same, {PROBE_RATE:.0f} a second beside the floor's load (ms)",
             [median_of(probed, "ack_loaded_ms", p) for p in pcts]),
            ("a commit: cut -> its decisions acknowledged (ms, buckets)",
             [median_of(ours, "commit_ms", p) for p in pcts]),
            *[(f"- a commit's {stage} (ms, buckets)",
               [median_of(ours, f"{stage}_ms", p) for p in pcts]) for stage in COMMIT_STAGES],
        ]
        for label, cells in rows:
            lines.append(f"| {rate} | {label} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
        per = statistics.median(run["state_log_bytes_per_decision"] for run in ours)
        lines.append(f"| {rate} | state log bytes per decision (with feedback) | {per:,.0f} "
                     "| | |")
        per = statistics.median(run["commits_per_decision"] for run in ours)
        lines.append(f"| {rate} | commits per decision | {per:.2f} | | |")
        cpu = [statistics.median(run["cpu_ms_per_decision"] for run in runs)
               for runs in (ours, floor, state_first)]
        lines.append(f"| {rate} | CPU per decision (ms), worker / floor / state-first floor | "
                     + " / ".join(f"{c:.2f}" for c in cpu) + " | | |")
        for quarter, index in (("first", 0), ("last", -1)):
            share = [statistics.median(run["broker_cpu_share"][index] for run in runs)
                     for runs in (ours, floor, state_first)]
            lines.append(f"| {rate} | the broker's CPU share of one core, the load's {quarter} "
                         "quarter, banditflow / floor / state-first floor | "
                         + " / ".join(f"{c:.2f}" for c in share) + " | | |")
    idle = [
        statistics.median(run["idle_cpu"] for both in results["rates"].values()
                          for run in both[kind])
        for kind in ("banditflow", "floor")
    ]
    lines.append(f"| idle | CPU share of one core, worker / floor (1 learner, {IDLE_S:.0f} s) "
                 f"| {idle[0]:.3f} / {idle[1]:.3f} | | |")
    return "\n".join(lines)


def run_benchmark(
    rounds: int, seconds: float, worker_args: Sequence[str] = (), rates: Sequence[float] = RATES
) -> str:
    started = time.monotonic()
    logs = OUT / "latency-logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"code": code_version(), "rounds": rounds, "seconds": seconds,
                               "worker_args": list(worker_args), "rates": {}}

    async def measure() -> None:
        for rate in rates:
            both: dict[str, list[dict[str, Any]]] = {
                "banditflow": [], "floor": [], "paced_floor": [], "state_first": [],
                "broker_ack": []
            }
            results["rates"][f"{rate:.0f}"] = both
            for r in range(rounds):
                both["floor"].append(await measure_floor(logs, rate, seconds))
                both["paced_floor"].append(await measure_floor(logs, rate, seconds, paced=True))
                both["state_first"].append(await measure_floor(logs, rate, seconds, True))
                both["banditflow"].append(
                    await measure_banditflow(logs, rate, seconds, worker_args)
                )
                both["broker_ack"].append(await measure_floor(logs, rate, seconds, probe=True))
                print(f"{rate:.0f}/s round {r + 1}/{rounds}: floor {both['floor'][-1]}\n"
                      f"  paced floor {both['paced_floor'][-1]}\n"
                      f"  state-first floor {both['state_first'][-1]}\n"
                      f"  banditflow {both['banditflow'][-1]}\n"
                      f"  broker's answers {both['broker_ack'][-1]}", flush=True)

    asyncio.run(measure())
    results["wall_s"] = time.monotonic() - started
    heading = (f"Latency beside its floors: {rounds} rounds of {seconds:.0f} s per rate, a fresh "
               f"embedded broker per measurement, {PARTITIONS} partitions, {os.cpu_count()} "
               f"CPUs; worker options {' '.join(worker_args) or '(defaults)'}; medians over "
               f"the rounds of each run's percentile; "
               f"{results['wall_s']:.0f}s in all; code {results['code']}.")
    report = f"{heading}\n\n{table(results)}\n"
    print(f"\n{report}", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "latency.md").write_text(report)
    (OUT / "latency.json").write_text(json.dumps(results, indent=2) + "\n")
    return report


@pytest.mark.timeout(3600)  # a benchmark on a shared machine, not a unit test
def test_latency_benchmark() -> None:
    """Prints the table (``pytest -s``). BENCH_LATENCY_ROUNDS, BENCH_LATENCY_SECONDS."""
    run_benchmark(int(os.environ.get("BENCH_LATENCY_ROUNDS", 3)),
                  float(os.environ.get("BENCH_LATENCY_SECONDS", 20)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="(default %(default)s)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="of load per measurement (default %(default)s)")
    parser.add_argument("--rates", default=",".join(f"{r:.0f}" for r in RATES),
                        help="contexts/s, comma-separated (default %(default)s)")
    parser.add_argument("worker_args", nargs="*",
                        help="more `banditflow worker` options, after --, e.g. -- "
                        "--fetch-wait-ms 10")
    args = parser.parse_args()
    rates = tuple(float(rate) for rate in args.rates.split(","))
    run_benchmark(args.rounds, args.seconds, args.worker_args, rates)


if __name__ == "__main__":
    main()
