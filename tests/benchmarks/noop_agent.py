"""The reference of bench_state_layer.py: the simplest Faust agent, one record in, one out.

It consumes the input topics and, per record, sends the same key and value to the output
topic: what a stream processor on Faust costs before it does any work. Configured by
environment variables (bench_state_layer.py sets them and starts it as a subprocess):

    NOOP_BOOTSTRAP      broker, host:port
    NOOP_APP_ID         Faust app id = consumer group
    NOOP_INPUTS         input topics, comma-separated (created beforehand, same partitions)
    NOOP_OUTPUT         output topic
    NOOP_PARTITIONS     partitions per topic (default 4)
    NOOP_DATADIR        Faust's data directory (default: a temporary one)
    NOOP_FETCH_WAIT_MS  the consumer's fetch_max_wait_ms (default 10, as the banditflow worker)

Run: ``python tests/benchmarks/noop_agent.py worker -l warn``.

One deviation from a stock Faust app: Faust hard-codes ``fetch_max_wait_ms=1500`` for its
consumer, and the embedded broker (Tansu) answers a fetch that found no data only when that
wait ends, so every burst after a pause would start up to 1.5 s late. The agent uses the
banditflow worker's 10 ms instead, so that the comparison measures processing, not that wait.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

FETCH_WAIT_MS = int(os.environ.get("NOOP_FETCH_WAIT_MS", "10"))
_create_worker_consumer = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer


def _short_fetch_wait(self: Any, transport: Any) -> Any:
    consumer = _create_worker_consumer(self, transport)
    consumer._fetch_max_wait_ms = FETCH_WAIT_MS  # read by consumer.start() (its Fetcher)
    return consumer


faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = _short_fetch_wait

PARTITIONS = int(os.environ.get("NOOP_PARTITIONS", "4"))
RAW: dict[str, Any] = {
    "key_type": bytes,
    "value_type": bytes,
    "key_serializer": "raw",
    "value_serializer": "raw",
    "partitions": PARTITIONS,
}

app = faust.App(
    os.environ.get("NOOP_APP_ID", "noop"),
    broker=f"kafka://{os.environ.get('NOOP_BOOTSTRAP', '127.0.0.1:9092')}",
    store="memory://",
    datadir=os.environ.get("NOOP_DATADIR") or tempfile.mkdtemp(prefix="noop-agent-"),
    web_enabled=False,
    topic_partitions=PARTITIONS,
    topic_replication_factor=1,
    broker_session_timeout=2.0,
    broker_heartbeat_interval=0.5,
    broker_rebalance_timeout=5.0,
    consumer_auto_offset_reset="earliest",
    stream_wait_empty=False,
    key_serializer="raw",
    value_serializer="raw",
)
inputs = app.topic(*os.environ.get("NOOP_INPUTS", "noop.in").split(","), **RAW)
output = app.topic(os.environ.get("NOOP_OUTPUT", "noop.out"), **RAW)


@app.agent(inputs)
async def noop(stream: faust.StreamT) -> None:
    async for event in stream.events():
        await output.send(key=event.key, value=event.value)


if __name__ == "__main__":
    app.main()
