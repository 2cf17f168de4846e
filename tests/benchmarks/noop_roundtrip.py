"""The floors of bench_latency.py: the least a design can add on the broker it runs on.

An aiokafka consumer of the input topics that re-publishes each context record as it is to
the output topic (feedback is read and dropped): no learner, no state of its own. Two modes:

- **plain** (the issue-26 floor of any design): each context re-published at once, one
  fetch and one produce per decision;
- **state first** (``NOOP_STATE_TOPIC`` set; the floor of any design that publishes a decision
  only once the state it came from is acknowledged, as the worker's commit protocol does):
  the contexts fetched since the last state write are written, as one record per partition,
  to the state topic, and re-published once those records are acknowledged. Pipelined like
  streams/committer.py: one state write in flight at a time, and the next one goes out with
  the outputs of the one before, in one produce request.

Either with its **feedback paced** (``NOOP_FEEDBACK_INTERVAL_MS`` set): the feedback
partitions paused as a worker's with ``--feedback-fetch-interval-ms`` pauses them
(streams/fetch_wait.py's FetchPacing) once an answer shows them caught up.

Each output carries the wall time of the fetch that brought its context (header
``fetched_at``), as a decision carries ``decided_at``. On SIGTERM it prints, as one JSON
list, its own latency per context (ms, from the fetch that brought it to its output
acknowledged: what the worker's ``banditflow_decision_in_worker_seconds`` measures).
Configured by environment variables (bench_latency.py sets them and starts it as a
subprocess, as it starts a worker):

    NOOP_BOOTSTRAP      broker, host:port
    NOOP_CONTEXTS       the topic whose records are re-published
    NOOP_FEEDBACK       a topic read and dropped (the load a worker reads too)
    NOOP_OUTPUT         output topic
    NOOP_FETCH_WAIT_MS  the consumer's fetch_max_wait_ms
    NOOP_STATE_TOPIC    (optional) the state first mode's state topic
    NOOP_FEEDBACK_INTERVAL_MS  (optional) the feedback's pace, as a worker's
                        --feedback-fetch-interval-ms

Run: ``python tests/benchmarks/noop_roundtrip.py``; it prints "ready" once it reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections import defaultdict

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from banditflow.streams.fetch_wait import FetchPacing

# The header of each output that says when its context was fetched (time.time(), as text): the
# worker's decisions say it in ``decided_at``, so the application tells the time before the
# fetch from the time after it for the floors as for the worker (bench_latency.py).
FETCHED_AT = "fetched_at"


class Republisher:
    """Re-publishes fetched contexts (plain, or state first) and keeps each one's latency."""

    def __init__(self, producer: AIOKafkaProducer, output: str, state_topic: str | None) -> None:
        self.producer, self.output, self.state_topic = producer, output, state_topic
        # (when fetched: time.monotonic(), its header FETCHED_AT, record), not written yet
        self.fetched: list[tuple[float, bytes, ConsumerRecord[bytes, bytes]]] = []
        self.wanted = asyncio.Event()
        self.latencies_ms: list[float] = []
        self.failure: BaseException | None = None  # an output the broker did not take

    def add(self, fetched_at: float, wall: float, records: list[ConsumerRecord[bytes, bytes]]
            ) -> None:
        stamp = repr(wall).encode()
        self.fetched.extend((fetched_at, stamp, record) for record in records)
        self.wanted.set()

    async def run(self) -> None:
        """Write what was fetched: at once (plain), or after its state records (state first,
        one per partition as the worker writes one per partition; one write in flight at a
        time)."""
        while True:
            await self.wanted.wait()
            self.wanted.clear()
            batch, self.fetched = self.fetched, []
            if self.state_topic is not None:
                states: dict[int, list[bytes]] = defaultdict(list)
                for _, _, record in batch:
                    states[record.partition].append(record.value)
                sent = [await self.producer.send(self.state_topic, b"".join(values),
                                                 partition=partition)
                        for partition, values in states.items()]
                for ack in sent:
                    await ack
            acks = [
                await self.producer.send(self.output, record.value, record.key,
                                         partition=record.partition,
                                         headers=[(FETCHED_AT, stamp)])
                for _, stamp, record in batch
            ]
            fetched_at = [at for at, _, _ in batch]
            asyncio.gather(*acks).add_done_callback(
                lambda done, fetched_at=fetched_at: self._acknowledged(done, fetched_at)
            )

    def _acknowledged(self, done: asyncio.Future[list[object]], fetched_at: list[float]) -> None:
        if done.exception() is not None:
            self.failure = done.exception()
            return
        now = time.monotonic()
        self.latencies_ms.extend((now - at) * 1000 for at in fetched_at)


class PacedFeedback:
    """Pauses the feedback partitions as a paced worker does (FetchPacing), once an answer
    since they were resumed shows nothing unread; but waits each pause out, where the worker
    ends it at a fetch that brings nothing (the contexts quiet, which at the benchmark's
    fixed rates they seldom are)."""

    def __init__(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition], interval_s: float
                 ) -> None:
        self.consumer, self.tps, self.pacing = consumer, tps, FetchPacing(interval_s)
        self.read_to = dict.fromkeys(tps, 0)
        self.paused: set[TopicPartition] = set()

    def polled(self, fetched: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]) -> None:
        for tp, records in fetched.items():
            if tp in self.read_to and records:
                self.read_to[tp] = records[-1].offset + 1
        now = time.time()
        for tp in self.tps:
            if tp in self.paused:
                continue
            # (a paused partition is in no fetch asked while it is paused: an answer processed
            # since its resumption was asked since, as the worker's FetchAnswers dates it)
            answered_ms = self.consumer.last_poll_timestamp(tp)
            unread = max(0, (self.consumer.highwater(tp) or 0) - self.read_to[tp])
            pause = self.pacing.pause_for(tp, now, answered_ms / 1000 if answered_ms else None,
                                          unread, self.read_to[tp])
            if pause is not None:
                self.consumer.pause(tp)
                self.paused.add(tp)
                asyncio.get_running_loop().call_later(pause, self._resume, tp)

    def _resume(self, tp: TopicPartition) -> None:
        self.paused.discard(tp)
        self.consumer.resume(tp)
        self.pacing.resumed(tp, time.time())


async def main() -> None:
    bootstrap = os.environ["NOOP_BOOTSTRAP"]
    contexts, feedback = os.environ["NOOP_CONTEXTS"], os.environ["NOOP_FEEDBACK"]
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
    interval_ms = float(os.environ.get("NOOP_FEEDBACK_INTERVAL_MS", 0))
    paced = PacedFeedback(consumer, [tp for tp in consumer.assignment() if tp.topic == feedback],
                          interval_ms / 1000) if interval_ms else None
    republisher = Republisher(producer, os.environ["NOOP_OUTPUT"],
                              os.environ.get("NOOP_STATE_TOPIC"))
    writing = asyncio.ensure_future(republisher.run())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    try:
        while not stop.is_set():
            if writing.done():
                writing.result()  # (raises what stopped it)
            fetched = await consumer.getmany(timeout_ms=100)
            now, wall = time.monotonic(), time.time()
            for tp, records in fetched.items():
                if tp.topic == contexts:
                    republisher.add(now, wall, records)
            if paced is not None:
                paced.polled(fetched)
    finally:
        writing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writing
        await consumer.stop()
        await producer.stop()
    if republisher.failure is not None:
        raise republisher.failure
    if not republisher.latencies_ms:
        raise SystemExit("no output was acknowledged")
    print(json.dumps([round(ms, 3) for ms in republisher.latencies_ms]), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
