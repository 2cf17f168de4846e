"""The worker's producer (streams/producer.py) against the real broker: one request per
turn of the event loop, requests pipelined and landing in order, and clear errors for what a
broker cannot take or does not have."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, MessageSizeTooLargeError, UnknownTopicOrPartitionError
from conftest import run_prefix

from banditflow.streams.broker import EmbeddedBroker, free_port
from banditflow.streams.connection import KafkaConnection
from banditflow.streams.producer import BATCH_BYTES, PipelinedProducer

pytestmark = pytest.mark.integration

MAX_REQUEST = 4 << 20


def with_producer(connection: KafkaConnection, topics: dict[str, int],
                  body: Callable[[PipelinedProducer], Awaitable[Any]]) -> Any:
    """Create ``topics`` (name -> partitions), run ``body`` with a started producer."""

    async def run() -> Any:
        admin = AIOKafkaAdminClient(**connection.aiokafka_kwargs())
        await admin.start()
        try:
            await admin.create_topics([NewTopic(name, n, 1) for name, n in topics.items()])
        finally:
            await admin.close()
        producer = PipelinedProducer(AIOKafkaClient(**connection.aiokafka_kwargs()),
                                     max_request_size=MAX_REQUEST)
        await producer.start()
        try:
            return await body(producer)
        finally:
            await producer.stop()

    return asyncio.run(run())


def read_back(connection: KafkaConnection, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of ``topic``'s ``partition``, read until a fetch
    brings nothing more (not up to the end offset: Tansu answers it off by a batch, see
    test_state_layer.py)."""

    async def run() -> list[tuple[int, bytes]]:
        consumer = AIOKafkaConsumer(**connection.aiokafka_kwargs(), enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            records: list[tuple[int, bytes]] = []
            while batch := (await consumer.getmany(tp, timeout_ms=2000)).get(tp):
                records += [(r.offset, r.value) for r in batch]
            return records
        finally:
            await consumer.stop()

    return asyncio.run(run())


def test_a_turns_records_leave_in_one_request_and_each_ack_says_where_it_landed(broker) -> None:
    topic = run_prefix("produce-turn")

    async def body(producer: PipelinedProducer) -> list[tuple[int, int, bytes]]:
        values = [(0, b"a0"), (1, b"b0"), (0, b"a1"), (0, b"a2"), (1, b"b1")]
        acks = [await producer.send(topic, value, partition=p) for p, value in values]
        assert producer.requests_sent == 0  # (filed: they leave at the end of the turn)
        landed = [await ack for ack in acks]
        assert producer.requests_sent == 1
        return [(ack.partition, ack.offset, value)
                for ack, (_, value) in zip(landed, values, strict=True)]

    landed = with_producer(broker.connection, {topic: 2}, body)
    assert [(p, offset) for p, offset, _ in landed] == [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1)]
    for partition in (0, 1):
        assert read_back(broker.connection, topic, partition) == [
            (offset, value) for p, offset, value in landed if p == partition]


def test_requests_in_flight_do_not_hold_the_next_back_and_land_in_the_order_sent(broker) -> None:
    topic, rounds = run_prefix("produce-pipelined"), 300

    async def body(producer: PipelinedProducer) -> tuple[list[int], int]:
        acks, most_in_flight = [], 0
        for i in range(rounds):
            acks.append(await producer.send(topic, b"%d" % i, partition=0))
            await asyncio.sleep(0)  # (a turn ends: this record's request goes out)
            most_in_flight = max(most_in_flight, producer.requests_in_flight)
            if i % 4 == 3:  # four turns' requests at a time
                await asyncio.gather(*acks[-4:])
        return [(await ack).offset for ack in acks], most_in_flight

    offsets, most_in_flight = with_producer(broker.connection, {topic: 1}, body)
    assert most_in_flight >= 2  # (aiokafka's producer keeps it at 1)
    assert offsets == list(range(rounds))
    assert read_back(broker.connection, topic, 0) == [(i, b"%d" % i) for i in range(rounds)]


def test_a_partitions_records_beyond_one_batch_go_in_the_next_request_in_order(broker) -> None:
    topic = run_prefix("produce-batches")
    values = [bytes([65 + i]) * (BATCH_BYTES * 2 // 5) for i in range(5)]  # 2 per batch

    async def body(producer: PipelinedProducer) -> list[int]:
        acks = [await producer.send(topic, value, partition=0) for value in values]
        offsets = [(await ack).offset for ack in acks]
        assert producer.requests_sent == 3
        return offsets

    assert with_producer(broker.connection, {topic: 1}, body) == [0, 1, 2, 3, 4]
    assert [value for _, value in read_back(broker.connection, topic, 0)] == values


def test_a_record_larger_than_a_request_is_refused_at_send_for_good(broker) -> None:
    topic = run_prefix("produce-large")

    async def body(producer: PipelinedProducer) -> None:
        with pytest.raises(MessageSizeTooLargeError, match="larger than the largest request"
                           ) as refused:
            await producer.send(topic, b"x" * MAX_REQUEST, partition=0)
        assert not refused.value.retriable  # (the worker dead-letters it: streams/worker.py)
        assert (await (await producer.send(topic, b"small", partition=0))).offset == 0

    with_producer(broker.connection, {topic: 1}, body)


def test_a_partition_the_broker_does_not_have_is_a_clear_error(broker) -> None:
    topic = run_prefix("produce-nopart")

    async def body(producer: PipelinedProducer) -> None:
        with pytest.raises(UnknownTopicOrPartitionError, match=f"no partition 7 of topic {topic}"):
            await producer.send(topic, b"v", partition=7)

    with_producer(broker.connection, {topic: 1}, body)


@pytest.mark.embedded_broker
def test_a_broker_gone_fails_the_acks_with_a_retriable_error(tmp_path) -> None:
    """The committer takes such a commit up again (streams/committer.py)."""
    with EmbeddedBroker(port=free_port(), log_path=tmp_path / "broker.log") as own:
        topic = "produce-gone"

        async def body(producer: PipelinedProducer) -> None:
            assert (await (await producer.send(topic, b"v", partition=0))).offset == 0
            own.stop()
            ack = await producer.send(topic, b"w", partition=0)  # (the leader is known)
            with pytest.raises(KafkaError) as failed:
                await asyncio.wait_for(ack, 60)
            assert failed.value.retriable

        with_producer(own.connection, {topic: 1}, body)
