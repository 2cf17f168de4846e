"""Records past an offset the broker has not stored yet (streams/offset_gaps.py).

The embedded broker (Tansu 0.6.0), while several producers write one partition, can hand a
consumer offset n + 1 before it has stored n; the first test shows that quirk (and that the
archive, reading meanwhile, has every record), the second that a worker still decides every
context sent that way, holding back what came past the gap until the broker filled it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from conftest import run_prefix, send_json

from banditflow.offline.archive import read_archive
from banditflow.streams.scrape import value
from banditflow.streams.topics import Topics, ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.embedded_broker]

PRODUCERS = 4
LIMIT_S = 40.0  # producing stops at the first gap seen, or after this long
# The worker's test: twice the producers, and attempts on fresh topics, each until the worker
# filled a gap or for so long (see there)
WORKER_PRODUCERS = 8
GAP_ATTEMPTS = 4
GAP_ATTEMPT_S = 10.0


async def produce_until(bootstrap: str, topic: str, value_of, seen_gap, rate: float,
                        limit_s: float = LIMIT_S, writers: int = PRODUCERS) -> int:
    """``writers`` producers write ``value_of(i)`` to partition 0 of ``topic``, each at
    ``rate`` records a second, until ``seen_gap()`` or ``limit_s``; how many were sent."""
    producers = [AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
                 for _ in range(writers)]
    for producer in producers:
        await producer.start()
    sent = 0
    stop_at = time.monotonic() + limit_s

    async def write(producer: AIOKafkaProducer) -> None:
        nonlocal sent
        started, mine = time.monotonic(), 0
        while time.monotonic() < stop_at and not await seen_gap():
            for _ in range(10):
                sent += 1
                mine += 1
                await producer.send(topic, value_of(sent), partition=0)
            await asyncio.sleep(max(0.0, started + mine / rate - time.monotonic()))

    try:
        await asyncio.gather(*(write(producer) for producer in producers))
    finally:
        for producer in producers:
            await producer.stop()
    return sent


class Tail:
    """A consumer reading partition 0 of ``topic`` as it is written, noting each gap in the
    offsets it is handed (``gaps``: (first missing, next handed out))."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.tp = TopicPartition(topic, 0)
        self.consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                         fetch_max_wait_ms=5)
        self.gaps: list[tuple[int, int]] = []
        self.stop = asyncio.Event()

    async def read(self) -> None:
        consumer, tp = self.consumer, self.tp
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, 0)
        next_offset = 0
        while not self.stop.is_set():
            for record in (await consumer.getmany(timeout_ms=50)).get(tp, []):
                if record.offset != next_offset:
                    self.gaps.append((next_offset, record.offset))
                next_offset = record.offset + 1
        await consumer.stop()

    async def seen_gaps(self, count: int) -> bool:
        return len(self.gaps) >= count


def test_embedded_broker_hands_out_records_past_an_offset_not_stored_yet(
    broker, tmp_path
) -> None:
    """The quirk; and ``banditflow archive``, reading meanwhile, still has every record."""
    prefix = run_prefix("gapquirk")
    topics = Topics(prefix)
    ensure_topics(broker.connection, topics, 1, prefix)
    out = tmp_path / "archive.jsonl"
    archiving = subprocess.Popen(
        [sys.executable, "-m", "banditflow.streams.cli", "archive", "--bootstrap",
         broker.bootstrap, "--prefix", prefix, "--out", str(out), "--from-beginning",
         "--until-idle", "5"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    async def run() -> tuple[Tail, int, list[int]]:
        tail = Tail(broker.bootstrap, topics.contexts)
        reading = asyncio.create_task(tail.read())
        sent = await produce_until(broker.bootstrap, topics.contexts, lambda i: json.dumps(
            {"learner_id": "a", "event_id": f"e{i}"}).encode(), lambda: tail.seen_gaps(3),
            rate=2000)
        tail.stop.set()
        await reading
        full = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await full.start()
        full.assign([tail.tp])
        full.seek(tail.tp, 0)
        offsets: list[int] = []
        while len(offsets) < sent:
            offsets += [r.offset for r in (await full.getmany(timeout_ms=500)).get(tail.tp, [])]
        await full.stop()
        return tail, sent, offsets

    tail, sent, offsets = asyncio.run(run())
    assert tail.gaps, "no gap within the limit: has the broker stopped handing out records early?"
    # A later read has what the tail skipped: the offsets were given out, not stored yet.
    assert offsets == list(range(sent)), tail.gaps[:3]
    output = archiving.communicate(timeout=60)[0]
    assert archiving.returncode == 0, output
    _, archived = read_archive(out)
    assert [r["offset"] for r in archived if r["topic"] == "contexts"] == list(range(sent))


def test_worker_decides_every_context_sent_by_concurrent_producers(
    broker, start_worker, producer, read_topic, wait_until
) -> None:
    # Whether a gap reaches the worker is up to the race it comes from, and the worker fetches
    # less often than the tail above: caught up, it fetches again only once a commit's
    # decisions are out (HOLD_INPUT_S). With 4 producers and one 40-s attempt, one-off runs
    # (2026-11-29) saw the worker's first gap after 0.5 and 4 s, once late (the run took 80
    # s), and once not at all (the test failed, as it had in 2 full test runs since the
    # hold); with 8 producers, within 10 s in each of 6. Hence 8, and attempts on fresh
    # topics, each checked in full.
    for attempt in range(1, GAP_ATTEMPTS + 1):
        filled = decide_concurrent_contexts(broker, start_worker, producer, read_topic,
                                            wait_until, f"gapworker{attempt}")
        if filled:
            return
    pytest.fail(f"no gap came in {GAP_ATTEMPTS} attempts of {GAP_ATTEMPT_S:g} s: the test "
                "did not show what it is for")


def decide_concurrent_contexts(broker, start_worker, producer, read_topic, wait_until,
                               name: str) -> float:
    """A worker given contexts by ``WORKER_PRODUCERS`` producers at once, until it filled a
    gap or for ``GAP_ATTEMPT_S``; asserts that every context sent was decided once, and
    returns the gaps it filled."""
    worker = start_worker(run_prefix(name), partitions=1)
    topics, lid = worker.topics, "gaps"
    send_json(producer, topics.learners, lid, {
        "learner_id": lid, "family": "conformal", "algorithm": "sps",
        "params": {"target_coverage": 0.9, "horizon": 100_000},
    })

    def gaps(outcome: str) -> float:
        return value(worker.metrics(), "banditflow_offset_gaps_total", outcome=outcome) or 0.0

    checked = {"at": 0.0, "filled": 0.0}

    async def seen_gap() -> bool:  # (scraped at most every 0.5 s)
        if time.monotonic() - checked["at"] >= 0.5:
            checked["at"] = time.monotonic()
            checked["filled"] = await asyncio.to_thread(gaps, "filled")
        return checked["filled"] > 0

    def context(i: int) -> bytes:
        return json.dumps({"learner_id": lid, "event_id": f"e{i}", "labels": ["a", "b"],
                           "scores": [0.9, 0.1]}).encode()

    # (the worker reads at the head: 8 x 300 contexts a second, a few ms behind)
    sent = asyncio.run(produce_until(broker.bootstrap, topics.contexts, context, seen_gap,
                                     rate=300, limit_s=GAP_ATTEMPT_S,
                                     writers=WORKER_PRODUCERS))
    decisions = read_topic(topics.decisions)
    dead = read_topic(topics.deadletter)
    # (Reading the decisions back is slow when many were sent: the embedded broker's fetch
    # cost grows with the partition's batch count. A worker had decided all of 48,000, by its
    # records_total, while the reader still lacked 740 after 60 s; it had them all 20 s
    # later, 2026-11-28. Hence the long wait, which a passing run does not spend.)
    with contextlib.suppress(AssertionError):  # (the assertions below say what is missing)
        wait_until(lambda: len(decisions.poll()) + len(dead.poll()) >= sent, 180)
    assert not dead.records, dead.records[:3]
    decided = [int(d["event_id"][1:]) for d in decisions.records]
    missing = sorted(set(range(1, sent + 1)) - set(decided))
    assert not missing, f"{len(missing)} of {sent} contexts without a trace: {missing[:10]}"
    assert len(decided) == sent, "a context decided twice"
    filled = gaps("filled")
    worker.stop()  # (the next attempt's worker has the machine to itself)
    return filled
