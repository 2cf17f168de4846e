"""Frozen workers (issue 28): SIGSTOP/SIGCONT of worker processes under load, as a long GC
pause, a VM migration or a container throttled to zero would stop them.

An application (this test) sends contexts for conformal learners at a steady rate, answers
each decision 50-300 ms after it reads it, and now and then sends a malformed feedback
record. Meanwhile the workers are frozen in turn, each time for longer than the feedback
timeout (and than the group's session: with two workers the frozen one's partitions move to
the other, and it resumes as a zombie). Checked at the end:

- every context decided, every copy of a decision identical, each decision settled once
  (by its feedback or its timeout: the learner's state counts one observation each);
- no decision timed out whose feedback was produced before its deadline (before the fix, a
  worker resumed from a pause took a fetch answer given before the pause as news from after
  it, and expired decisions whose feedback came during the pause, still unread);
- one dead letter per malformed record (copies identical: the last commit's are published
  again by whoever recovers it), and no dead letter of a zombie's commit (before the fix a
  resumed zombie re-published dead letters the new owner had published);
- the dead-letter counters of the workers add up to the distinct dead letters on the topic
  (each counted once, by the worker whose commit published it);
- a zombie's late record costs the rightful owner no recovery: only the zombie reads its
  partition back (at most once per freeze), the owner writes its commit again after it.

``FROZEN_FREEZES`` sets the number of freezes (``make fault``: 12; ``make test``: 3).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from conftest import decisions_consumer, run_prefix

from banditflow.streams.scrape import samples
from banditflow.streams.topics import partition_for

FREEZES = int(os.environ.get("FROZEN_FREEZES", "3"))
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300 + 40 * FREEZES)]

PARTITIONS = 2
TIMEOUT = 3.0
RATE = 40.0  # contexts per second, over all learners
FREEZE_S = (5.0, 7.0)
# Learner ids on each partition.
LEARNERS = [
    next(f"frz-{p}-{i}" for i in range(100) if partition_for(f"frz-{p}-{i}", PARTITIONS) == p)
    for p in range(PARTITIONS)
]


def config(lid: str) -> dict[str, Any]:
    return {"learner_id": lid, "family": "conformal", "algorithm": "sps",
            "params": {"target_coverage": 0.9, "horizon": 100_000},
            "feedback_timeout_s": TIMEOUT}


@pytest.mark.parametrize("workers", [1, 2])
def test_frozen_workers_expire_nothing_in_time_and_publish_no_zombie_dead_letters(
    broker, start_worker, read_topic, wait_until, state_of, workers: int
) -> None:
    prefix = run_prefix(f"frozen{workers}")
    running = [start_worker(prefix, partitions=PARTITIONS, wait=False) for _ in range(workers)]
    for worker in running:
        worker.wait_ready()
    topics = running[0].topics
    rng = random.Random(28 + workers)
    context_ts: dict[str, float] = {}
    feedback_ts: dict[str, float] = {}
    decisions: dict[str, bytes] = {}
    copies_differ: list[str] = []
    malformed: list[str] = []
    freezes: list[tuple[float, float]] = []

    async def application() -> None:
        producer = AIOKafkaProducer(**broker.connection.aiokafka_kwargs(), linger_ms=5)
        await producer.start()
        consumer = await decisions_consumer(broker.connection, topics.decisions)
        for lid in LEARNERS:
            await producer.send_and_wait(topics.learners, json.dumps(config(lid)).encode(),
                                         lid.encode())
        stop = asyncio.Event()

        async def answer(eid: str, lid: str) -> None:
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            stamp = time.time()
            await producer.send(topics.feedback, json.dumps(
                {"learner_id": lid, "event_id": eid, "label": "a"}).encode(), lid.encode(),
                timestamp_ms=int(stamp * 1000))
            feedback_ts[eid] = stamp

        async def send_contexts() -> None:
            i = 0
            while not stop.is_set():
                lid = LEARNERS[i % len(LEARNERS)]
                eid = f"{lid}-e{i}"
                stamp = time.time()
                context_ts[eid] = stamp
                await producer.send(topics.contexts, json.dumps(
                    {"learner_id": lid, "event_id": eid, "labels": ["a", "b"],
                     "scores": [1.0, 0.0]}).encode(), lid.encode(),
                    timestamp_ms=int(stamp * 1000))
                if i % 97 == 13:  # a malformed feedback record on this learner's partition
                    await producer.send(topics.feedback, b"{not json " + eid.encode(),
                                        lid.encode())
                    malformed.append(eid)
                i += 1
                await asyncio.sleep(1 / RATE)

        async def freeze() -> None:
            await asyncio.sleep(4.0)
            for n in range(FREEZES):
                worker = running[n % len(running)]
                seconds = rng.uniform(*FREEZE_S)
                started = time.time()
                os.kill(worker.process.pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(seconds)
                finally:
                    os.kill(worker.process.pid, signal.SIGCONT)
                freezes.append((started, time.time()))
                await asyncio.sleep(rng.uniform(3.0, 5.0))
            stop.set()

        tasks = [asyncio.create_task(send_contexts()), asyncio.create_task(freeze())]
        answers: set[asyncio.Task[None]] = set()
        deadline = time.monotonic() + 120 + 20 * FREEZES
        while time.monotonic() < deadline and not (stop.is_set() and decisions.keys()
                                                   >= context_ts.keys()):
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    body = json.loads(record.value)
                    eid = body["event_id"]
                    if eid in decisions:
                        if decisions[eid] != record.value:
                            copies_differ.append(eid)
                        continue
                    decisions[eid] = record.value
                    task = asyncio.create_task(answer(eid, body["learner_id"]))
                    answers.add(task)
                    task.add_done_callback(answers.discard)
        await asyncio.gather(*tasks, *answers)
        await producer.stop()
        await consumer.stop()

    asyncio.run(application())
    assert decisions.keys() >= context_ts.keys(), "contexts never decided"
    assert copies_differ == []
    # Every decision settled: by its feedback, or (feedback late) by its timeout.
    deadletter = read_topic(topics.deadletter)

    def settled() -> bool:
        """Each learner's decisions all settled, as the worker that owns it exports them."""
        done = dict.fromkeys(LEARNERS, 0.0)
        for worker in running:
            for (name, labels), number in samples(worker.metrics()).items():
                lid = dict(labels).get("learner_id", "")
                if lid in done and name in ("banditflow_learner_feedback",
                                            "banditflow_learner_timeouts"):
                    done[lid] += number
        return sum(done.values()) >= len(context_ts)

    wait_until(settled, timeout_s=60)
    final = state_of(prefix)
    for lid in LEARNERS:
        ours = sum(1 for eid in context_ts if eid.startswith(f"{lid}-"))
        assert final[f"l/{lid}"]["state"]["n"] == ours, (lid, final[f"l/{lid}"]["state"]["n"])
    deadletter.wait_for(lambda records: len(malformed) <= len(
        [r for r in records if r and r["reason"] == "malformed_json"]), 30)
    time.sleep(2)  # (anything a late commit would still publish)
    letters = deadletter.poll()
    by_source: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for letter in letters:
        by_source.setdefault(
            (letter["source_topic"], letter["partition"], letter["offset"]), []
        ).append(letter)
    different = [copies for copies in by_source.values()
                 if any(copy != copies[0] for copy in copies)]
    assert different == [], f"dead letters of one record that differ: {different[:3]}"
    distinct = [copies[0] for copies in by_source.values()]
    assert sorted(d["reason"] for d in distinct if d["reason"] == "malformed_json") == [
        "malformed_json"] * len(malformed)
    assert {d["reason"] for d in distinct} <= {"malformed_json", "decision_expired"}
    expired = {d["event_id"] for d in distinct if d["reason"] == "decision_expired"}
    in_time = {eid for eid, ts in feedback_ts.items() if ts < context_ts[eid] + TIMEOUT}
    assert expired & in_time == set(), (
        f"{len(expired & in_time)} decisions timed out although their feedback was "
        f"produced in time; freezes {freezes}"
    )
    # The test shows nothing unless feedback came in time while a worker was frozen, with a
    # deadline before the freeze ended.
    exposed = [eid for eid in in_time if any(
        start <= feedback_ts[eid] and context_ts[eid] + TIMEOUT < end for start, end in freezes
    )]
    assert len(exposed) >= FREEZES, (len(exposed), freezes)
    # Each dead letter counted once, by the worker whose commit published it (a recovery
    # that publishes the last commit's again does not count them again).
    counted = sum(
        number for worker in running
        for (name, _), number in samples(worker.metrics()).items()
        if name == "banditflow_dead_letters_total"
    )
    assert counted == len(distinct), (counted, len(distinct), len(letters))
    fenced = sum(worker.log().count("another worker wrote to its state log")
                 for worker in running)
    assert fenced <= (FREEZES if workers > 1 else 0), fenced
