"""The worker's producer: the records sent in one turn of the event loop leave at the end of
that turn, as one produce request per broker, whatever requests are still in flight.

aiokafka's producer keeps one request in flight per broker: a commit's state record, sent
while the outputs of the commit before are out, waits for their answer; and each record
passes its accumulator and its sender task, a few turns of the event loop each way. The
committer (streams/committer.py) asks less of a producer: the records it sends without
yielding leave in one request, and each record's acknowledgement says where it landed.
:class:`PipelinedProducer` does only that, on aiokafka's client (its connections, TLS, SASL
and metadata):

- :meth:`PipelinedProducer.send` files a record under its partition and returns its
  acknowledgement, a future; at the end of the turn the filed records go as one
  ``ProduceRequest`` per leader, one record batch per partition (``acks=all``, no compression:
  the state log compresses its own records). A partition's records beyond ``BATCH_BYTES``
  go in the next request (a request holds one batch per partition);
- requests are not held back behind those in flight: a Kafka broker handles one connection's
  requests one at a time, in the order they came, so a partition's records land in the order
  they were sent (``tests/integration/test_producer.py`` checks it on the embedded broker;
  the committer never has two requests for one partition out at once anyway);
- a partition's error answer fails its records with aiokafka's error for that code, and asks
  for new metadata when the error says the leader moved. Nothing is retried here: the
  committer takes a failed commit up again with the same records, and dead-letters a record
  the broker can never take (a non-retriable error; a record larger than
  ``max_request_size`` is refused at ``send``, as aiokafka's producer refuses it).

Against aiokafka's producer, at 500 contexts/s on the embedded broker (one-off runs that
alternated the two on fresh brokers, 3 rounds of 20 s, medians): the worker's CPU per
decision 0.49 ms against 0.53 (lower in 5 of 6 pairs), its state and decisions' round trips
1.5 and 1.2 ms at p50 against 1.7 and 1.3 (the README, "A producer of its own").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import aiokafka.errors as errors
from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

ACKS_ALL = -1
# A record batch's size, beyond its first record: below the 1 MB a broker takes by default
# (``message.max.bytes``), as aiokafka's ``max_batch_size`` was for the worker.
BATCH_BYTES = 1 << 20
# How long stop() waits for the requests in flight (the worker settles its commits before it
# stops: any request still out is to a broker that does not answer).
STOP_WAIT_S = 5.0


class Acked(NamedTuple):
    """Where a record landed."""

    topic: str
    partition: int
    offset: int


class UnansweredPartition(errors.KafkaError):
    """The broker's answer to a produce request left out a partition the request held."""

    retriable = True


_Filed = list[tuple[bytes | None, bytes, "asyncio.Future[Acked]"]]


class PipelinedProducer:
    """Sends each turn's records as one request per broker, at once (see the module doc)."""

    def __init__(self, client: AIOKafkaClient, max_request_size: int,
                 request_timeout_ms: int = 30_000) -> None:
        self.client = client
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.requests_sent = 0
        self._filed: dict[TopicPartition, _Filed] = {}
        self._flush_due = False
        self._in_flight: set[asyncio.Task[None]] = set()

    @property
    def requests_in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._in_flight)

    async def start(self) -> None:
        await self.client.bootstrap()

    async def stop(self) -> None:
        """Send what is filed, wait a little for the requests in flight (their records fail
        if unanswered by then), close the connections."""
        self._flush()
        if self._in_flight:
            _, unanswered = await asyncio.wait(self._in_flight, timeout=STOP_WAIT_S)
            for request in unanswered:
                request.cancel()
        await self.client.close()

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None) -> asyncio.Future[Acked]:
        """File ``value`` for ``topic``'s ``partition``; its acknowledgement. Returns without
        yielding to the event loop once the partition's leader is known."""
        if partition is None:
            raise ValueError("PipelinedProducer.send needs a partition")
        size = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, [])
        if size > self.max_request_size:
            raise errors.MessageSizeTooLargeError(
                f"a {size}-byte record is larger than the largest request this producer "
                f"sends ({self.max_request_size} bytes)"
            )
        tp = TopicPartition(topic, partition)
        if self.client.cluster.leader_for_partition(tp) is None:  # (not in the metadata)
            await self.client.add_topic(topic)
            if self.client.cluster.leader_for_partition(tp) is None:
                await self.client.force_metadata_update()
            if self.client.cluster.leader_for_partition(tp) is None:
                raise errors.UnknownTopicOrPartitionError(
                    f"the broker knows no partition {partition} of topic {topic}")
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[Acked] = loop.create_future()
        self._filed.setdefault(tp, []).append((key, value, acked))
        if not self._flush_due:
            self._flush_due = True
            loop.call_soon(self._flush)
        return acked

    def _flush(self) -> None:
        """Send the filed records: per leader, one request per batch of each partition."""
        self._flush_due = False
        filed, self._filed = self._filed, {}
        by_leader: dict[int, list[tuple[TopicPartition, _Filed]]] = {}
        for tp, records in filed.items():
            leader = self.client.cluster.leader_for_partition(tp)
            if leader is None or leader < 0:
                self.client.force_metadata_update()
                _fail(records, errors.LeaderNotAvailableError(f"no leader for {tp}"))
                continue
            by_leader.setdefault(leader, []).append((tp, records))
        for leader, partitions in by_leader.items():
            for request in _requests(partitions):
                task = asyncio.ensure_future(self._send(leader, request))
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)

    async def _send(self, leader: int, batches: list[tuple[TopicPartition, bytes, _Filed]]
                    ) -> None:
        topics: dict[str, list[tuple[int, bytes]]] = {}
        for tp, data, _ in batches:
            topics.setdefault(tp.topic, []).append((tp.partition, data))
        request = ProduceRequest(None, ACKS_ALL, self.request_timeout_ms, list(topics.items()))
        self.requests_sent += 1
        try:
            self._answered(batches, await self.client.send(leader, request))
        except asyncio.CancelledError:  # (the producer stops: nobody waits in vain)
            for _, _, records in batches:
                _fail(records, errors.KafkaConnectionError("the producer stopped"))
            raise
        except Exception as exc:  # a broker or connection error, or a bug: never left waiting
            if getattr(exc, "invalid_metadata", False):
                self.client.force_metadata_update()
            for _, _, records in batches:
                _fail(records, exc)

    def _answered(self, batches: list[tuple[TopicPartition, bytes, _Filed]], response: Any
                  ) -> None:
        """Settle each partition's records by the broker's answer for it."""
        answers = {
            (topic, answer[0]): (answer[1], answer[2])
            for topic, partitions in response.topics for answer in partitions
        }
        for tp, _, records in batches:
            code, base_offset = answers.get((tp.topic, tp.partition), (None, -1))
            if code == 0:
                for i, (_, _, acked) in enumerate(records):
                    if not acked.done():
                        acked.set_result(Acked(tp.topic, tp.partition, base_offset + i))
                continue
            if code is None:
                error: errors.KafkaError = UnansweredPartition(str(tp))
            else:
                error = errors.for_code(code)(f"{tp}")
                if getattr(error, "invalid_metadata", False):
                    self.client.force_metadata_update()
            _fail(records, error)


def _requests(partitions: list[tuple[TopicPartition, _Filed]]
              ) -> Iterator[list[tuple[TopicPartition, bytes, _Filed]]]:
    """The requests for ``partitions``' records: the k-th holds each partition's k-th batch."""
    batches = {tp: list(_batches(records)) for tp, records in partitions}
    for k in range(max(map(len, batches.values()), default=0)):
        yield [(tp, *made[k]) for tp, made in batches.items() if k < len(made)]


def _batches(records: _Filed) -> Iterator[tuple[bytes, _Filed]]:
    """``records`` as record batches of at most ``BATCH_BYTES`` (a larger record alone)."""
    timestamp = int(time.time() * 1000)
    builder, held = _builder(), []
    for record in records:
        key, value, _ = record
        if builder.append(len(held), timestamp=timestamp, key=key, value=value,
                          headers=[]) is None:
            yield bytes(builder.build()), held
            builder, held = _builder(), []
            builder.append(0, timestamp=timestamp, key=key, value=value, headers=[])
        held.append(record)
    yield bytes(builder.build()), held


def _builder() -> DefaultRecordBatchBuilder:
    return DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=BATCH_BYTES,
    )


def _fail(records: _Filed, error: BaseException) -> None:
    for _, _, acked in records:
        if not acked.done():
            acked.set_exception(error)
            acked.exception()  # (retrieved: a commit that fails awaits only its first)
