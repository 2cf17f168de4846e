"""The Faust worker: one agent over the co-partitioned input topics, two changelog tables.

The agent is thin: it turns each Kafka record into a :class:`processors.Processor` call and
publishes what comes back. A timer sends a tick into the ``ticks`` topic for every partition
this worker owns, so that timeouts are handled by the agent (Faust tables may only change
inside stream processing, and a tick arrives on the partition whose state it touches).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import faust
from aiohttp.web import Response

from processors import Processor, Source
from processors.engine import Emitted
from schemas import DeadLetter, Decision, Limits
from streams.metrics import CONTENT_TYPE, PrometheusSink
from streams.topics import Topics, partition_for

log = logging.getLogger("banditflow.worker")


@dataclass(frozen=True)
class WorkerSettings:
    """Everything ``banditflow worker`` can be told (see ``banditflow worker --help``)."""

    bootstrap: str = "127.0.0.1:9092"
    app_id: str = "banditflow"
    prefix: str = "banditflow"
    partitions: int = 4
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    tick_interval_s: float = 1.0
    retention_s: float = 600.0
    max_exported_learners: int = 100
    limits: Limits = field(default_factory=Limits)
    # Short group timeouts: the first join otherwise waits ~30 s on the embedded broker.
    session_timeout_s: float = 10.0
    heartbeat_interval_s: float = 1.0
    rebalance_timeout_s: float = 10.0
    # Batch produced records (changelogs, decisions) for this long: one request per record
    # otherwise costs more CPU than the learning itself.
    linger_ms: float = 5.0
    # Tansu reports a partition's end offset as the base offset of its last record batch + 1,
    # so Faust's table recovery, which reads a changelog up to that offset, would miss the
    # rest of the last batch after a crash. One record per batch makes the offset right.
    single_record_batches: bool = False


def create_app(settings: WorkerSettings) -> faust.App:
    topics = Topics(settings.prefix)
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.bootstrap}",
        store="memory://",
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=settings.heartbeat_interval_s,
        broker_rebalance_timeout=settings.rebalance_timeout_s,
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=False,
        producer_acks=-1,
        producer_linger=0.0 if settings.single_record_batches else settings.linger_ms / 1000.0,
        producer_max_batch_size=1 if settings.single_record_batches else 16384,
        key_serializer="json",
        value_serializer="json",
    )
    raw: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    inputs = app.topic(*topics.inputs(), **raw)
    ticks = app.topic(topics.ticks, partitions=settings.partitions, **raw)
    decisions = app.topic(topics.decisions, **raw)
    deadletter = app.topic(topics.deadletter, **raw)
    # Learner entries and pending records share one table, so one changelog partition orders
    # every write of a partition: a crash loses a suffix of them, never one in the middle,
    # which is what the write ordering of processors/engine.py relies on. Keys and values
    # travel as JSON (the app's default serializers below).
    state = app.Table("state", partitions=settings.partitions, key_type=str)
    sink = PrometheusSink(max_learners=settings.max_exported_learners)
    processor = Processor(
        KeyPrefixView(state, "learner:"),
        KeyPrefixView(state, "pending:"),
        limits=settings.limits,
        sink=sink,
        retention_s=settings.retention_s,
        expected_partition=lambda key: partition_for(key, settings.partitions),
    )
    handlers = {
        topics.learners: lambda key, value, src, now: processor.on_config(key, value, src, now),
        topics.contexts: lambda key, value, src, now: processor.on_context(value, src, now),
        topics.feedback: lambda key, value, src, now: processor.on_feedback(value, src, now),
        topics.truth: lambda key, value, src, now: processor.on_truth(value, src, now),
        topics.ticks: lambda key, value, src, now: processor.on_tick(src.partition, now),
    }

    # Decisions wait here until the state they depend on is durable (see publish()).
    outbox: list[tuple[faust.EventT, list[Decision]]] = []
    outbox_ready = asyncio.Event()

    @app.agent(inputs)
    async def process(stream: faust.StreamT) -> None:
        # Manual acks: an offset may be committed only once its decisions are published.
        async for event in stream.noack().events():
            message = event.message
            source = Source(message.topic, message.partition, message.offset, message.timestamp)
            key = message.key.decode("utf-8", "replace") if message.key is not None else None
            now = time.time()
            try:
                emitted = handlers[message.topic](key, message.value, source, now)
            except Exception as exc:  # a bug must not stop the worker: dead-letter and go on
                log.exception(
                    "internal error on %s[%s]@%s", message.topic, message.partition, message.offset
                )
                emitted = Emitted(
                    dead_letters=[
                        DeadLetter(
                            reason="internal_error",
                            detail=f"{type(exc).__name__}: {exc}",
                            source_topic=message.topic,
                            partition=message.partition,
                            offset=message.offset,
                            raw=(message.value or b"").decode("utf-8", "replace"),
                            ts=now,
                        )
                    ]
                )
                sink.dead_lettered("internal_error")
            for dead in emitted.dead_letters:
                await deadletter.send(
                    key=(dead.learner_id or "").encode() or None,
                    value=dead.model_dump_json().encode(),
                )
            if emitted.decisions:
                outbox.append((event, emitted.decisions))
                outbox_ready.set()
            else:
                # Faust flushes the producer before it commits, so the state is durable first.
                event.ack()

    @app.task
    async def publish() -> None:
        """Publish decisions only once their state is durable, then ack their events.

        Without Kafka transactions, a decision published before its table writes reach the
        changelog could be forgotten by a crash and decided differently after the restart.
        """
        while True:
            await outbox_ready.wait()
            outbox_ready.clear()
            await asyncio.sleep(settings.linger_ms / 1000.0)  # gather a batch
            batch = outbox[:]
            del outbox[:]
            await flush_durably(app)
            for event, emitted in batch:
                for decision in emitted:
                    await decisions.send(
                        key=decision.learner_id.encode(), value=decision.model_dump_json().encode()
                    )
                event.ack()

    @app.timer(settings.tick_interval_s)
    async def tick() -> None:
        owned = {tp.partition for tp in app.consumer.assignment() if tp.topic == topics.ticks}
        for partition in sorted(owned):
            await ticks.send(value=b"{}", partition=partition)

    @app.on_partitions_revoked.connect
    async def on_revoked(app: faust.App, revoked: Any, **kwargs: Any) -> None:
        processor.forget_cache()

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Response:
        return Response(body=sink.exposition(), headers={"Content-Type": CONTENT_TYPE})

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Response:
        return Response(text="ok")

    @app.page("/ready")
    async def ready(web: Any, request: Any) -> Response:
        """200 once this worker owns partitions and their tables are recovered."""
        owned = app.consumer.assignment() if app.consumer is not None else set()
        if owned and app.tables.recovery.completed.is_set():
            return Response(text=f"ready: {len(owned)} partitions")
        return Response(status=503, text="joining the consumer group / recovering tables")

    return app


async def flush_durably(app: faust.App) -> None:
    """Wait until every record produced so far (table changelogs included) is acknowledged.

    Faust's buffer flush gives up after 0.1 s without progress, so drain it until empty
    before waiting for the Kafka producer's in-flight batches.
    """
    producer = app.producer
    while producer.buffer.size:
        await producer.buffer.flush()
    await producer.flush()


class KeyPrefixView(MutableMapping[str, Any]):
    """The keys of a table that start with ``prefix``, seen without it."""

    def __init__(self, table: MutableMapping[str, Any], prefix: str) -> None:
        self.table = table
        self.prefix = prefix

    def __getitem__(self, key: str) -> Any:
        return self.table[self.prefix + key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.table[self.prefix + key] = value

    def __delitem__(self, key: str) -> None:
        del self.table[self.prefix + key]

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self.items())

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]
        cut = len(self.prefix)
        return [(k[cut:], v) for k, v in self.table.items() if k.startswith(self.prefix)]
