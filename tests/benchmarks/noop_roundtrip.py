"""The floor of bench_latency.py: the least any design can add on the broker it runs on.

An aiokafka consumer of the input topics that re-publishes each context record at once, as it
is, to the output topic (feedback is read and dropped): one fetch and one produce per
decision, no state, no commit. Configured by environment variables (bench_latency.py sets
them and starts it as a subprocess, as it starts a worker):

    NOOP_BOOTSTRAP      broker, host:port
    NOOP_CONTEXTS       the topic whose records are re-published
    NOOP_FEEDBACK       a topic read and dropped (the load a worker reads too)
    NOOP_OUTPUT         output topic
    NOOP_FETCH_WAIT_MS  the consumer's fetch_max_wait_ms

Run: ``python tests/benchmarks/noop_roundtrip.py``; it prints "ready" once it reads.
"""

from __future__ import annotations

import asyncio
import os
import signal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition


async def main() -> None:
    bootstrap = os.environ["NOOP_BOOTSTRAP"]
    contexts, feedback = os.environ["NOOP_CONTEXTS"], os.environ["NOOP_FEEDBACK"]
    output = os.environ["NOOP_OUTPUT"]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
        fetch_max_wait_ms=int(os.environ["NOOP_FETCH_WAIT_MS"]),
    )
    await producer.start()
    await consumer.start()
    await consumer.topics()
    consumer.assign([
        TopicPartition(topic, p)
        for topic in (contexts, feedback)
        for p in sorted(consumer.partitions_for_topic(topic) or ())
    ])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    try:
        while not stop.is_set():
            fetched = await consumer.getmany(timeout_ms=100)
            for tp, records in fetched.items():
                if tp.topic == contexts:
                    for record in records:
                        await producer.send(output, record.value, record.key,
                                            partition=tp.partition)
    finally:
        await consumer.stop()
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(main())
