"""The worker's own CPU time per decision, without a broker: a partition task applying
contexts and their feedback and cutting commits, as the worker's loop drives it.

On 2 cores the embedded broker, the load generator and the worker share the machine, so a
decision's latency moves with every CPU millisecond any of them spends; and the worker's
share is hard to see in an end-to-end run, whose noise is larger than it. This measures it
alone: a :class:`banditflow.streams.partition_task.PartitionTask` with one conformal SPS
learner (K = 20, exact horizon 10^5, as ``bench_latency.py``), ``DECISIONS`` contexts, each
batch of ``per_commit`` contexts followed by a commit, then their feedback and a commit (a
commit writes the learner's state, the decisions and the input marks, as in the worker).
The records land in an in-memory log (``acked``, ``written``, ``committed`` as the committer
calls them). No Kafka client runs: what aiokafka costs per record is not in these numbers.

Reported per ``per_commit`` (``PER_COMMIT``: the commits per decision at 500/s and 2,000/s in
``bench_latency.py`` are about 0.22 and 0.03, i.e. 2 commits per 9 and per 60 decisions):
the CPU time per decision (process time, medians of ``rounds``), the share of it spent
cutting commits, the longest cut (the worker's loop does nothing else meanwhile: a
decision waits for it), and state log bytes per decision. Asserts correctness only: every
context decided, every feedback applied, no dead letter, and the log read back equal to the
live state.

Then a snapshot over a large state: ``RETAINED`` settled decisions (kept ``retention_s`` for
dedupe: 10 minutes at 2,000/s is 1.2 million), and the commits that write it, one slice each
(the commit that starts it lists the keys): the longest cut and the cuts' CPU in all,
medians of ``rounds``.

Run: ``make bench`` or ``python tests/benchmarks/bench_task_cpu.py [--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from bench_state_layer import OUT, code_version, conformal_answer, conformal_contexts, sps_config

from banditflow.streams.metrics import PrometheusSink
from banditflow.streams.partition_task import PartitionTask
from banditflow.streams.settings import WorkerSettings
from banditflow.streams.statelog_reader import LogReader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_statelog import append, live, recover  # (the state log's test helpers)

DECISIONS = 20_000
PER_COMMIT = (9, 60)
RETAINED = 200_000
CAUGHT_UP: dict[str, float | None] = {"learners": None, "contexts": None, "feedback": None}


@dataclass
class Record:
    """What a task reads of a consumer record."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes
    value: bytes


def measure(per_commit: int, decisions: int = DECISIONS) -> dict[str, Any]:
    """One run: CPU per decision, the share cutting commits, state log bytes per decision."""
    task = PartitionTask(0, LogReader(), WorkerSettings(), PrometheusSink(), time.time)
    offsets = {"learners": 0, "contexts": 0, "feedback": 0}
    log: list[tuple[int, bytes, bytes]] = []
    now = time.time()
    cut_s = longest_cut_s = 0.0
    state_bytes = 0

    def handle(stream: str, value: bytes) -> None:
        record = Record(stream, 0, offsets[stream], int(now * 1000), b"lat", value)
        offsets[stream] += 1
        task.handle(stream, record, now)

    def commit() -> None:
        nonlocal cut_s, longest_cut_s, state_bytes
        started = time.process_time()
        pending = task.cut(CAUGHT_UP)
        took = time.process_time() - started
        cut_s += took
        longest_cut_s = max(longest_cut_s, took)
        assert pending is not None and task.log.acked(append(log, pending.state))
        state_bytes += sum(len(value) for _, value in pending.state)
        task.written(pending)
        task.committed(pending)

    handle("learners", orjson.dumps(sps_config("lat")))
    commit()
    contexts, truth = conformal_contexts(["lat"], 0, decisions, seed=7)
    answer = conformal_answer(truth)
    decided: list[tuple[str, dict[str, Any]]] = []
    started = time.process_time()
    for first in range(0, decisions, per_commit):
        for _, eid, raw in contexts[first:first + per_commit]:
            now += 0.0005
            handle("contexts", raw)
            decided.append((eid, orjson.loads(task.decisions[-1])))
        commit()
        for eid, decision in decided:
            handle("feedback", answer("lat", eid, decision["output"]))
        decided.clear()
        commit()
    cpu_s = time.process_time() - started
    store = task.processor.store
    entry = store.learners["lat"]
    assert entry.stats["decisions"] == decisions and entry.updates == decisions, entry.stats
    assert not task.dead_letters
    reader = recover(log)
    assert {key: orjson.loads(value) for key, value in reader.values.items()} == live(store)
    return {"cpu_ms_per_decision": cpu_s * 1000 / decisions, "cut_share": cut_s / cpu_s,
            "longest_cut_ms": longest_cut_s * 1000,
            "state_log_bytes_per_decision": state_bytes / decisions, "task": task, "log": log}


def measure_snapshot(retained: int = RETAINED) -> dict[str, float]:
    """A snapshot of ``retained`` settled decisions, a slice per commit: the longest cut and
    the cuts' CPU in all (ms)."""
    run = measure(2000, retained)
    task, log = run["task"], run["log"]
    task.log.snapshots.taken_at = float("-inf")  # (due by age: it starts with the next cut)
    cuts: list[float] = []
    while True:
        started = time.process_time()
        pending = task.cut(CAUGHT_UP)
        cuts.append(time.process_time() - started)
        assert pending is not None and task.log.acked(append(log, pending.state))
        task.written(pending)
        task.committed(pending)
        if task.log.snapshots.writing is None:
            break
    assert len(recover(log).values) == task.processor.store.key_count()
    return {"commits": len(cuts), "longest_cut_ms": max(cuts) * 1000,
            "cut_ms": sum(cuts) * 1000}


def run_benchmark(rounds: int) -> str:
    results: dict[str, Any] = {"code": code_version(), "rounds": rounds, "decisions": DECISIONS,
                               "per_commit": {}}
    lines = ["| contexts per commit | CPU per decision (ms) | cutting commits | longest cut (ms) "
             "| state log bytes per decision |", "|---:|---:|---:|---:|---:|"]
    keys = ("cpu_ms_per_decision", "cut_share", "longest_cut_ms", "state_log_bytes_per_decision")
    for per_commit in PER_COMMIT:
        runs = [{key: measure(per_commit)[key] for key in keys} for _ in range(rounds)]
        results["per_commit"][str(per_commit)] = runs
        cpu, share, longest, size = (statistics.median(run[key] for run in runs) for key in keys)
        lines.append(f"| {per_commit} | {cpu:.3f} | {share:.0%} | {longest:.1f} | {size:,.0f} |")
    snapshots = [measure_snapshot() for _ in range(rounds)]
    results["snapshot"] = snapshots
    commits, longest, total = (statistics.median(run[key] for run in snapshots)
                               for key in ("commits", "longest_cut_ms", "cut_ms"))
    report = (f"The worker's own CPU per decision, no broker: one SPS learner (K = 20, horizon "
              f"10^5), {DECISIONS:,} contexts with their feedback, medians of {rounds} runs; "
              f"code {results['code']}.\n\n" + "\n".join(lines) + "\n\n"
              f"A snapshot of {RETAINED:,} settled decisions: {commits:.0f} commits, the "
              f"longest cut {longest:.1f} ms, the cuts' CPU {total:,.0f} ms in all.\n")
    print(f"\n{report}", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "task_cpu.md").write_text(report)
    (OUT / "task_cpu.json").write_text(json.dumps(results, indent=2) + "\n")
    return report


def test_task_cpu_benchmark() -> None:
    """Prints the table (``pytest -s``)."""
    run_benchmark(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="(default %(default)s)")
    run_benchmark(parser.parse_args().rounds)


if __name__ == "__main__":
    main()
