"""Fault suite, part (a): a seeded corpus of hostile records, interleaved with valid traffic,
through one real worker on the embedded broker (issue 12).

Every record's (topic, partition, offset) comes from the producer's acknowledgement, and every
dead letter names the (topic, partition, offset) it rejects, so each record is matched to
what became of it. Asserted: each bad record has exactly one dead letter with its reason (or
the documented dedupe: a context sent again gets its decision again with ``redelivered``,
feedback sent again nothing); each valid context exactly one first decision; nothing but
valid feedback reached a learner (each learner's settled-feedback count is exactly its valid
feedback); zero ``internal_error``; the worker never exited, never re-read its partitions
and logged no traceback; and its memory stayed flat (see ``RSS_GROWTH_MB``).

Size: ``FAULT_CORPUS_SIZE`` bad records (default 20,000, about a minute; ``make fault`` runs
10^5), seed ``FAULT_SEED``, production rate ``FAULT_RATE`` records/s at most (0: no limit;
the producer also stays within ``BACKLOG`` records of the worker). ``FAULT_SKIP``
(comma-separated ``reason/kind`` categories or whole reasons) leaves them out, to measure the rest
while a problem the suite found is open. The numbers go to
``runs/fault/corpus.json`` (docs/results/fault_suite.md quotes them).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer
from conftest import run_prefix
from corpus import (
    ANY_REASON,
    DEDUPE,
    DOCUMENTED_REASONS,
    VALID,
    WORKER_ARGS,
    Learners,
    Record,
    corpus,
)

from banditflow.processors.store import KeyKind, StateKey
from banditflow.streams.connection import KafkaConnection
from banditflow.streams.scrape import samples

pytestmark = [pytest.mark.integration, pytest.mark.fault]

SIZE = int(os.environ.get("FAULT_CORPUS_SIZE", "20000"))
SEED = int(os.environ.get("FAULT_SEED", "20240612"))
RATE = float(os.environ.get("FAULT_RATE", "3000"))
BACKLOG = 2000  # records the producer may be ahead of the worker (about a second or two)
SKIP = frozenset(filter(None, os.environ.get("FAULT_SKIP", "").split(",")))
PARTITIONS = 2
PREFIX = run_prefix("fault")
REPORT = Path(os.environ.get("FAULT_REPORT", "runs/fault/corpus.json"))

# Flat memory: the worker's RSS may grow at most this much over the second half of the
# production of the corpus (least-squares slope times that half's duration). Everything the
# worker keeps is bounded by time (settled decisions RETENTION_S = 5 s of stream time, holds
# 1-10 s) or by count (SPS keeps at most (1 - alpha) T + 1 = 101 scores, a redo log at most
# 256 calls), so it levels off within the first seconds (the producer stays within BACKLOG
# records of the worker, so stream time, which retention counts, follows the wall clock). A
# leak of 1 kB per record would exceed 20 MB over the ~20,000 records of the second half of
# the default run, of 0.2 kB per record over the ~100,000 of `make fault` (the issue saw
# 16 MB per oversize dead letter); the runs so far stayed under +8 MB.
RSS_GROWTH_MB = 20.0


class RssSampler:
    """Samples a process's resident set size (VmRSS of /proc/<pid>/status) in a thread."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.pid = pid
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []  # (monotonic s, MB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    def rss_mb(self) -> float | None:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        return int(match.group(1)) / 1024 if match else None

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = self.rss_mb()
            if rss is not None:
                self.samples.append((time.monotonic(), rss))
            self._stop.wait(self.every_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def window(self, start: float, end: float) -> list[tuple[float, float]]:
        return [(t, mb) for t, mb in self.samples if start <= t <= end]


def growth(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(slope in MB/s, slope times the points' duration) of a least-squares line."""
    if len(points) < 3:
        return 0.0, 0.0
    t = np.array([p[0] for p in points])
    mb = np.array([p[1] for p in points])
    slope = float(np.polyfit(t - t[0], mb, 1)[0])
    return slope, slope * float(t[-1] - t[0])


async def produce(kafka: KafkaConnection, topics: dict[str, str], records: list[Record],
                  rate: float = 0.0, handled: Any = None) -> list[tuple[str, int, int]]:
    """Produce ``records`` in order and return each one's (topic, partition, offset) from
    the broker's acknowledgement. With ``rate``, at most that many records/s; with
    ``handled`` (the worker's count of records handled), never more than BACKLOG records
    ahead of the worker: stream time then follows the wall clock, as under a steady load,
    and retention bounds what the worker keeps (in a backlog every record is stamped within
    the few seconds the producer took, so nothing settled expires until it is read)."""
    producer = AIOKafkaProducer(**kafka.aiokafka_kwargs(), acks="all", linger_ms=5,
                                max_request_size=4 << 20)
    await producer.start()
    try:
        futures = []
        started = time.monotonic()
        base = handled() if handled is not None else 0.0
        for i, record in enumerate(records):
            futures.append(await producer.send(
                topics[record.stream], record.value, record.key, partition=record.partition
            ))
            if i % 100 == 99:
                ahead = (i + 1) / rate - (time.monotonic() - started) if rate else 0.0
                if ahead > 0:
                    await asyncio.sleep(ahead)
            if i % 1000 == 999:  # (each look is a /metrics scrape, served by the worker)
                waited = time.monotonic()
                while handled is not None and i - (handled() - base) > BACKLOG:
                    if time.monotonic() - waited > 15:  # stuck: what it lost will show
                        handled = None
                        break
                    await asyncio.sleep(0.2)
        done = [await future for future in futures]
    finally:
        await producer.stop()
    return [(meta.topic, meta.partition, meta.offset) for meta in done]


def metric(source: Any, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 if none), from
    a worker's /metrics or from their text."""
    try:
        text = source if isinstance(source, str) else source.metrics()
    except OSError:
        return 0.0
    return sum(
        v for (n, pairs), v in samples(text).items()
        if n == name and labels.items() <= dict(pairs).items()
    )


def drain(reader: Any) -> list[Any]:
    """Everything a topic reader can read now (its poll() takes one batch of at most 500
    records: a 10^5 run has as many dead letters and decisions)."""
    while True:
        before = len(reader.records)
        reader.poll()
        if len(reader.records) == before:
            return reader.records


def poll_for(condition: Any, timeout_s: float, progress: Any = None,
             stall_s: float = 15.0, every_s: float = 0.3) -> bool:
    """Poll ``condition()`` every ``every_s`` until it holds (True), ``timeout_s`` passes or
    ``progress()`` stays the same for ``stall_s`` (False): a record the worker lost must
    fail the run with the list of what is missing, not wait out a long timeout."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        if condition():
            return True
        if progress is not None:
            now = progress()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > stall_s:
                break
        time.sleep(every_s)
    return bool(condition())


def test_corpus_every_bad_record_one_dead_letter(
    broker, start_worker, read_topic, state_of
) -> None:
    started = time.monotonic()
    records = list(corpus(SEED, SIZE, partitions=PARTITIONS, skip=SKIP))
    generated_s = time.monotonic() - started
    worker = start_worker(PREFIX, partitions=PARTITIONS, extra_args=WORKER_ARGS)
    topics = {kind: f"{PREFIX}.{kind}" for kind in ("learners", "contexts", "feedback", "truth")}
    learners = Learners.spread(PARTITIONS)
    decisions = read_topic(f"{PREFIX}.decisions")
    dead = read_topic(f"{PREFIX}.deadletter")
    phases = {phase: [r for r in records if r.phase == phase] for phase in (-1, 0, 1, 2)}
    where: dict[tuple[str, int, int], Record] = {}
    notes: list[str] = []  # waits that timed out (the failures say what is missing)

    def first_decisions() -> set[tuple[str, str]]:
        return {(d["learner_id"], d["event_id"]) for d in drain(decisions) if d is not None
                and not d["redelivered"]}

    def decided(phase: list[Record]) -> bool:
        wanted = {r.event for r in phase if r.expect == VALID and r.stream == "contexts"}
        return wanted <= first_decisions()

    def handled() -> float:
        """Records the worker has handled, from its counts of outcomes per record: a held
        record is counted again when it is released or dead-lettered (and released feedback
        once more), so the held are left out until then (an overcount would let the
        producer run ahead of the worker for good)."""
        try:
            text = worker.metrics()
        except OSError:
            return 0.0
        total = sum(
            metric(text, "banditflow_records_total", topic=topic) for topic in topics.values()
        )
        return total - sum(
            metric(text, "banditflow_records_total", outcome=outcome)
            for outcome in ("held", "released_early_feedback")
        )

    def progress() -> tuple[int, int]:
        return len(drain(decisions)), len(drain(dead))

    # The learners first, as an application creates them before using them.
    offsets = asyncio.run(produce(broker.connection, topics, phases[-1]))
    where.update(zip(offsets, phases[-1], strict=True))
    if not poll_for(lambda: metric(worker, "banditflow_records_total", topic=topics["learners"],
                                   outcome="created") >= len(phases[-1]), 30):
        notes.append("the learners' configs were not all applied")
    with RssSampler(worker.process.pid) as rss:
        load_start = time.monotonic()
        # Phase 0: the bad records and the valid traffic.
        offsets = asyncio.run(produce(broker.connection, topics, phases[0], RATE, handled))
        where.update(zip(offsets, phases[0], strict=True))
        produced_s = time.monotonic() - load_start
        if not poll_for(lambda: decided(phases[0]), 60 + SIZE / 500, progress):
            notes.append("phase 0: not every valid context was decided in time")
        load_end = time.monotonic()
        # Phase 1: contexts of the learner with a 1 s timeout, a new version of rv; wait
        # until those decisions expired and rv's reconfiguration was applied. Expired
        # decisions are kept RETENTION_S (5 s) after expiring: phase 2 must come sooner, so
        # this waits on one /metrics scrape every 0.1 s, not on the topic readers.
        offsets = asyncio.run(produce(broker.connection, topics, phases[1]))
        where.update(zip(offsets, phases[1], strict=True))
        late = sum(1 for r in phases[1] if r.stream == "contexts")

        def expired_and_reconfigured() -> bool:
            try:
                text = worker.metrics()
            except OSError:
                return False
            exp = learners.expiring
            return (
                metric(text, "banditflow_learner_decisions", learner_id=exp) >= late
                and metric(text, "banditflow_learner_timeouts", learner_id=exp) >= late
                and metric(text, "banditflow_records_total", topic=topics["learners"],
                           outcome="reconfigured") >= 1
            )

        if not poll_for(expired_and_reconfigured, 30, every_s=0.1):
            notes.append("phase 1: decisions, timeouts or the reconfiguration missing")
        # Phase 2: feedback for the expired decisions and for rv's former version.
        offsets = asyncio.run(produce(broker.connection, topics, phases[2]))
        where.update(zip(offsets, phases[2], strict=True))
        expected_dead = sum(1 for r in records if r.expect not in (VALID, DEDUPE))
        # Holds are dead-lettered once their stream time passes their grace (10 s at most).
        if not poll_for(lambda: len(drain(dead)) >= expected_dead, 60, progress):
            notes.append(f"saw {len(dead.records)} of {expected_dead} dead letters in time")
        time.sleep(3.0)  # anything more (a second dead letter, a decision) would show now
        drain(dead)
        drain(decisions)
    total_s = time.monotonic() - started

    # ------------------------------------------------------------------ matching
    failures: dict[str, list[str]] = defaultdict(list)
    letters: dict[tuple[str, int, int], list[str]] = defaultdict(list)
    for letter in dead.records:
        letters[(letter["source_topic"], letter["partition"], letter["offset"])].append(
            letter["reason"]
        )
    for position, record in where.items():
        got = letters.get(position, [])
        if record.expect in (VALID, DEDUPE):
            ok = not got
        elif record.expect == ANY_REASON:
            ok = len(got) == 1 and got[0] in DOCUMENTED_REASONS
        else:
            ok = got == [record.expect]
        if not ok:
            failures[record.category].append(
                f"{position[0]}[{position[1]}]@{position[2]}: expected {record.expect}, "
                f"got {got or 'no dead letter'}: {(record.value or b'')[:120]!r}"
            )
    for position, got in letters.items():
        if position not in where:
            failures["unexpected"].append(f"a dead letter for {position}: {got}")

    first: Counter[tuple[str, str]] = Counter()
    again: Counter[tuple[str, str]] = Counter()
    sets_full = True
    offered = {r.event: r.value for r in where.values() if r.event is not None}
    for d in decisions.records:
        if d is None:
            continue
        event = (d["learner_id"], d["event_id"])
        (again if d["redelivered"] else first)[event] += 1
        if d["family"] == "conformal" and event in offered:
            labels = json.loads(offered[event] or b"{}").get("labels", [])
            sets_full &= d["output"]["set_size"] == len(labels)
    valid_events = [r.event for r in where.values()
                    if r.expect == VALID and r.stream == "contexts"]
    dup_events = Counter(r.event for r in where.values()
                         if r.expect == DEDUPE and r.stream == "contexts")
    for event in valid_events:
        if first[event] != 1:
            failures["valid/context"].append(f"{event}: {first[event]} first decisions")
    for event in set(first) - set(valid_events):
        failures["unexpected"].append(f"a decision for {event}, not a valid context")
    for event in set(again) | set(dup_events):
        if again[event] != dup_events[event]:
            failures["documented_dedupe/context"].append(
                f"{event}: {dup_events[event]} sent again, {again[event]} redelivered")
    if not sets_full:
        failures["premise"].append("a conformal decision left a label out: SPS left its "
                                   "burn-in, so the corpus's feedback expectations do not hold")

    # Nothing but valid feedback reached a learner: settled feedback = valid feedback.
    valid_feedback = Counter(
        json.loads(r.value or b"{}")["learner_id"] for r in where.values()
        if r.expect == VALID and r.stream == "feedback"
    )
    applied: dict[str, tuple[float, float]] = {}
    for lid in [*learners.conformal, *learners.graph, *learners.candidate_sets,
                learners.orphan]:
        settled = metric(worker, "banditflow_learner_feedback", learner_id=lid)
        timeouts = metric(worker, "banditflow_learner_timeouts", learner_id=lid)
        applied[lid] = (settled - timeouts, timeouts)
        if (settled - timeouts, timeouts) != (valid_feedback[lid], 0):
            failures["valid/feedback"].append(
                f"learner {lid}: {settled - timeouts:.0f} feedback applied and {timeouts:.0f} "
                f"timeouts, expected {valid_feedback[lid]} and 0"
            )

    # Every decision was settled: by its feedback, its timeout (exp) or a new version (rv).
    # One still open names the valid feedback that never reached its learner.
    pending = metric(worker, "banditflow_pending_decisions")
    open_report: dict[str, int] = {"count": 0}
    if pending or "valid/feedback" in failures:
        sent = {(body["learner_id"], body["event_id"]): position
                for position, record in where.items()
                if record.expect == VALID and record.stream == "feedback"
                and (body := json.loads(record.value or b"{}"))}
        before: dict[tuple[str, str], list[str]] = defaultdict(list)  # other feedback
        for position, record in where.items():
            if record.category.startswith(("contradicting_feedback", "decision_settled")):
                body = json.loads(record.value or b"{}")
                before[(body["learner_id"], body["event_id"])].append(
                    f"{record.category} at {position}")
        keys = [StateKey.parse(key) for key in state_of(PREFIX)]
        still_open = sorted(
            (key.learner_id, key.event_id) for key in keys if key.kind is KeyKind.OPEN
        )
        open_report["count"] = len(still_open)
        open_report["after_contradicting_feedback"] = sum(
            any(note.startswith("contradicting") for note in before.get(event, []))
            for event in still_open
        )
        for event in still_open:
            failures["valid/feedback"].append(
                f"decision {'/'.join(event)} still open: its feedback "
                f"{sent.get(event, '(none)')} was neither applied nor dead-lettered; other "
                f"feedback for it: {before.get(event, 'none')}"
            )
    reasons = Counter(letter["reason"] for letter in dead.records)
    internal = reasons["internal_error"]
    internal_metric = metric(worker, "banditflow_dead_letters_total", reason="internal_error")
    log = worker.log()
    recoveries = log.count("recovered in")
    alive = worker.process.poll() is None
    if not alive:
        failures["worker"].append(f"the worker exited with {worker.process.returncode}")
    if recoveries != PARTITIONS:
        failures["worker"].append(f"{recoveries} partition recoveries (re-reads), expected "
                                  f"{PARTITIONS}")
    for bad in ("Traceback", "commit failed", " ERROR ", " CRITICAL "):
        if bad in log:
            failures["worker"].append(f"{log.count(bad)} log lines with {bad.strip()!r}")
    if internal or internal_metric:
        failures["worker"].append(f"{internal} internal_error dead letters "
                                  f"({internal_metric:.0f} counted by the worker)")

    # ------------------------------------------------------------------ memory
    # The window is the production: the producer stays within BACKLOG records of the worker,
    # so the worker works through it too, and is idle after it while this test's readers
    # catch up (which would flatten the slope).
    produced_end = load_start + produced_s
    loaded = rss.window(load_start, produced_end)
    half = rss.window(load_start + produced_s / 2, produced_end)
    slope, grown = growth(half)
    rss_start = loaded[0][1] if loaded else 0.0
    rss_end = loaded[-1][1] if loaded else 0.0
    rss_peak = max((mb for _, mb in rss.samples), default=0.0)
    if grown >= RSS_GROWTH_MB:
        failures["memory"].append(f"RSS grew {grown:.1f} MB over the second half of the "
                                  f"production ({slope * 1024:.1f} kB/s), bound "
                                  f"{RSS_GROWTH_MB} MB")

    # ------------------------------------------------------------------ report
    categories = Counter(r.category for r in records)
    expected_by = {r.category: r.expect for r in records}
    report = {
        "seed": SEED, "bad_records": expected_dead, "size": SIZE, "rate": RATE,
        "skipped": sorted(SKIP), "records": len(records),
        "bad_by_category": {c: categories[c] for c in sorted(categories)
                            if expected_by[c] not in (VALID, DEDUPE)},
        "expected_reason": {c: expected_by[c] for c in sorted(expected_by)},
        "dedupe": {c: categories[c] for c in sorted(categories) if expected_by[c] == DEDUPE},
        "valid": {c: categories[c] for c in sorted(categories) if expected_by[c] == VALID},
        "dead_letters": len(dead.records),
        "dead_letters_by_reason": dict(sorted(reasons.items())),
        "decisions_first": sum(first.values()), "decisions_redelivered": sum(again.values()),
        "valid_contexts": len(valid_events),
        "feedback_applied": {lid: a for lid, (a, _) in applied.items()},
        "internal_errors": internal,
        "decisions_left_open": open_report,
        "worker_alive": alive, "partition_recoveries": recoveries,
        "rss_mb": {"start": round(rss_start, 1), "end": round(rss_end, 1),
                   "peak": round(rss_peak, 1),
                   "second_half_slope_kb_per_s": round(slope * 1024, 1),
                   "second_half_growth_mb": round(grown, 2),
                   "samples": [(round(t - load_start, 2), round(mb, 1))
                               for t, mb in rss.samples]},
        "seconds": {"generate": round(generated_s, 1), "produce": round(produced_s, 1),
                    "load": round(load_end - load_start, 1), "total": round(total_s, 1)},
        "notes": notes,
        "failures": {c: {"count": len(v), "examples": v[:20]} for c, v in failures.items()},
    }
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"\nfault corpus: seed {SEED}, {expected_dead} bad records in {len(categories)} "
        f"categories, {len(records)} records; {len(dead.records)} dead letters "
        f"{dict(sorted(reasons.items()))}; {sum(first.values())} first decisions for "
        f"{len(valid_events)} valid contexts, {sum(again.values())} redelivered; "
        f"{internal} internal errors\nRSS {rss_start:.1f} -> {rss_end:.1f} MB (peak "
        f"{rss_peak:.1f}), second half {slope * 1024:+.1f} kB/s = {grown:+.2f} MB; "
        f"produced in {produced_s:.1f} s, loaded {load_end - load_start:.1f} s, "
        f"total {total_s:.1f} s; report {REPORT}"
    )
    summary = "\n".join(
        f"{category}: {len(lines)} failing, e.g.\n    " + "\n    ".join(lines[:3])
        for category, lines in sorted(failures.items())
    )
    assert not failures, "\n".join([*notes, summary])
