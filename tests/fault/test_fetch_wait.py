"""Tansu quirk: a partition of many record batches is read only by a fetch that may wait.

The embedded broker (Tansu 0.6.0, memory storage) answers a fetch with nothing once the
partition it reads holds some 40,000 record batches and the fetch may wait only 20 ms (the
worker's default on it then; 10 ms now): finding the offset costs more than the wait. A
worker that kept asking the same way never read again (the soak test found it after 13
minutes at 200 contexts/s of one-record batches). The worker doubles its fetch wait while
records wait unread (streams.fetch_wait.FetchWait). This test fills one contexts partition
with ``FAULT_FETCH_BATCHES`` one-record batches (default 45,000; 0 skips it) and checks that
a worker then decides every one of them: in about 8 s here, where the worker without the
adaptive wait decided none in 300 s. Then, caught up and idle, the worker probes its wait
back to the configured one, and a context sent after that is still decided (the wait rises
again for it).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from aiokafka import AIOKafkaProducer
from conftest import run_prefix

from banditflow.streams.connection import KafkaConnection

BATCHES = int(os.environ.get("FAULT_FETCH_BATCHES", "45000"))
pytestmark = [
    pytest.mark.integration,
    pytest.mark.fault,
    pytest.mark.skipif(BATCHES == 0, reason="FAULT_FETCH_BATCHES=0"),
]
PARTITIONS = 2
SENDERS = 16  # producers sending one-record batches side by side
CONFIGURED_WAIT_MS = 10  # (the worker's on the embedded broker, given explicitly)


async def fill(kafka: KafkaConnection, topic: str, learner_id: str, count: int,
               first: int = 0) -> None:
    """``count`` contexts (event ids from ``first``), one record a batch: ``SENDERS``
    producers, each waiting for every acknowledgement before its next send (one producer's
    concurrent sends would share batches)."""
    producers = [AIOKafkaProducer(**kafka.aiokafka_kwargs(), linger_ms=0)
                 for _ in range(SENDERS)]
    await asyncio.gather(*(producer.start() for producer in producers))
    try:
        async def sender(k: int) -> None:
            for i in range(first + k, first + count, SENDERS):
                body = {"learner_id": learner_id, "event_id": f"e{i}", "labels": ["a", "b"],
                        "scores": [0.6, 0.3]}
                await producers[k].send_and_wait(topic, json.dumps(body).encode(),
                                                 learner_id.encode())

        await asyncio.gather(*(sender(k) for k in range(SENDERS)))
    finally:
        await asyncio.gather(*(producer.stop() for producer in producers))


def test_a_worker_reads_a_partition_of_many_batches(broker, start_worker, read_topic,
                                                     wait_until) -> None:
    prefix, lid = run_prefix("fetchwait"), "lid"
    worker = start_worker(prefix, partitions=PARTITIONS)
    config = {"learner_id": lid, "family": "conformal", "algorithm": "sps",
              "params": {"target_coverage": 0.9, "horizon": 1000, "max_values": 64},
              "feedback_timeout_s": 3600}
    worker.stop()  # fill the partition first: the worker meets it as a backlog
    started = time.monotonic()
    asyncio.run(fill(broker.connection, worker.topics.contexts, lid, BATCHES))
    filled = time.monotonic() - started

    async def configure() -> None:
        producer = AIOKafkaProducer(**broker.connection.aiokafka_kwargs())
        await producer.start()
        await producer.send_and_wait(worker.topics.learners, json.dumps(config).encode(),
                                     lid.encode())
        await producer.stop()

    asyncio.run(configure())
    restarted = start_worker(prefix, partitions=PARTITIONS,
                             extra_args=["--fetch-wait-ms", str(CONFIGURED_WAIT_MS)])
    decisions = read_topic(restarted.topics.decisions)
    started = time.monotonic()
    decisions.wait_for(lambda records: len({r["event_id"] for r in records}) >= BATCHES, 120)
    decided = time.monotonic() - started

    def waits() -> list[str]:
        return [line.split(": ", 1)[-1] for line in restarted.log().splitlines()
                if "fetch wait now" in line]

    raised = waits()
    assert any("raised" in line for line in raised), raised
    # Caught up, with nothing more to read, the worker probes its wait back to the configured
    # one: the probes need no records (before, the wait stayed as the backlog's last poll
    # left it until records came again).
    back = f"fetch wait now {CONFIGURED_WAIT_MS} ms (lowered: probing)"
    wait_until(lambda: waits() and waits()[-1].endswith(back), 30)
    # At the configured wait the broker cannot list this partition: the next context waits
    # unread until the wait rises again, and is decided.
    asyncio.run(fill(broker.connection, restarted.topics.contexts, lid, 1, first=BATCHES))
    decisions.wait_for(lambda records: f"e{BATCHES}" in {r["event_id"] for r in records}, 30)
    print(f"{BATCHES:,} one-record batches filled in {filled:.0f} s, decided in "
          f"{decided:.0f} s; the worker's fetch waits: {waits()}")
