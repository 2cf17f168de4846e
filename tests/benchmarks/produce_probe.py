"""The broker's own acknowledgement time, for bench_latency.py: one produce request at a time.

A process that does nothing else sends one record per produce request to a topic of its own
(partition 0), ``PROBE_RATE`` requests a second, each only once the one before is answered,
and times each from its send to its answer. It goes through aiokafka's client directly (a
``ProduceRequest`` of one record batch, ``acks=all``): no accumulator, no sender task, no
linger, so what it times is the connection and the broker, the least any client waits for a
record to be acknowledged. bench_latency.py runs it alone on a fresh broker, then beside the
floor's load: any design that publishes a decision only once its state is acknowledged
waits for two such answers, one after the other.

On SIGTERM it prints, as one JSON list, ``[sent at (time.monotonic(), s), time (ms)]`` per
request. Configured by environment variables:

    PROBE_BOOTSTRAP  broker, host:port
    PROBE_TOPIC      its topic (partition 0)
    PROBE_RATE       requests per second

Run: ``python tests/benchmarks/produce_probe.py``; it prints "ready" once it can send.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

RECORD = b"p" * 200  # about a decision's size
REQUEST_TIMEOUT_MS = 30_000


def one_record_batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20,
    )
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


async def main() -> None:
    topic, rate = os.environ["PROBE_TOPIC"], float(os.environ["PROBE_RATE"])
    client = AIOKafkaClient(bootstrap_servers=os.environ["PROBE_BOOTSTRAP"])
    await client.bootstrap()
    await client._wait_on_metadata(topic)
    leader = client.cluster.leader_for_partition(TopicPartition(topic, 0))
    if leader is None:
        raise SystemExit(f"no leader for {topic}[0]")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    timed: list[tuple[float, float]] = []
    print("ready", flush=True)
    started = time.monotonic()
    try:
        while not stop.is_set():
            due = started + len(timed) / rate - time.monotonic()
            if due > 0:
                try:
                    await asyncio.wait_for(stop.wait(), due)
                    break
                except TimeoutError:
                    pass
            request = ProduceRequest(None, -1, REQUEST_TIMEOUT_MS,
                                     [(topic, [(0, one_record_batch(RECORD))])])
            sent = time.monotonic()
            response = await client.send(leader, request)
            timed.append((sent, (time.monotonic() - sent) * 1000))
            errors = [code for _, partitions in response.topics for _, code, *_ in partitions
                      if code != 0]
            if errors:
                raise SystemExit(f"the broker refused a probe record: error {errors[0]}")
    finally:
        await client.close()
    print(json.dumps([[round(at, 6), round(ms, 3)] for at, ms in timed]), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
