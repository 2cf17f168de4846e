"""Reading the state log from the broker: a recovery's read (:func:`read_partitions`, from the
latest complete snapshot to the end) and an audit's (:func:`read_commits`, everything).

Both read through :func:`read_to_high_watermark`, the one loop that reads partitions from
their positions to the Fetch high watermark (not to ListOffsets' end: on Tansu that is the
last batch's base offset + 1, see streams/statelog.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from banditflow.streams.connection import KafkaConnection, as_connection
from banditflow.streams.fetch_wait import FetchWait, adapt_fetch_wait, set_fetch_wait
from banditflow.streams.statelog import Commit, StateLogError, StateLogLost
from banditflow.streams.statelog_reader import LogReader, snapshot_named_last

log = logging.getLogger("banditflow.statelog")


async def read_to_high_watermark(
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    take: Callable[[TopicPartition, list[Any]], bool],
    *,
    poll_ms: int = 200,
    waits: FetchWait | None = None,
) -> dict[TopicPartition, int]:
    """Read ``tps`` from their positions until each reaches its high watermark, handing every
    fetched batch to ``take(tp, records)``, which returns False to stop reading that
    partition there. Each partition is fetched only while it is read (resumed here, paused
    when done). Returns the high watermark of each partition read to it.

    ``waits`` adapts the fetch wait to a broker that answers nothing (:class:`FetchWait`).
    Records removed while being read (retention) raise :class:`StateLogError`.
    """
    pending = list(tps)
    ends: dict[TopicPartition, int] = {}
    consumer.resume(*pending)
    try:
        while pending:
            try:
                fetched = await consumer.getmany(*pending, timeout_ms=poll_ms,
                                                 max_records=10_000)
            except OffsetOutOfRangeError as exc:
                topics = sorted({tp.topic for tp in pending})
                raise StateLogError(
                    f"{', '.join(topics)}: records were removed while being read ({exc}); "
                    "reading again"
                ) from None
            if waits is not None:  # (behind: it reads to the high watermarks)
                adapt_fetch_wait(consumer, waits, sum(map(len, fetched.values())),
                                 behind=True, reader="state log reader")
            for tp, records in fetched.items():
                if tp in pending and not take(tp, records):
                    pending.remove(tp)
                    consumer.pause(tp)
            for tp in list(pending):
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= highwater:
                    pending.remove(tp)
                    consumer.pause(tp)
                    ends[tp] = highwater
    finally:
        consumer.pause(*pending)
    return ends


async def read_partitions(
    consumer: AIOKafkaConsumer,
    topic: str,
    partitions: list[int],
    poll_ms: int = 200,
    *,
    fresh_if_lost: bool = False,
    fetch_wait_ms: int = 20,
) -> dict[int, LogReader]:
    """Read each partition's state log from its latest complete snapshot to its end.

    ``consumer`` is a group-less consumer with ``auto_offset_reset="none"``: a snapshot that
    the broker's retention removed must fail loudly (``StateLogLost``), not silently start
    later; with ``fresh_if_lost`` such a partition starts empty instead, after what its log
    holds now.

    A recovery is on the path of every restart and failover, and it seeks: a fetch already
    waiting at the old position holds the next one back for up to its wait (aiokafka's 500 ms
    default cost every recovery about 0.6 s). It reads records that exist, so its fetches
    wait ``fetch_wait_ms``, whatever the worker's input waits, and longer only while a broker
    answers them with nothing (:class:`FetchWait`); a partition is fetched only while it is
    being read.
    """
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    readers = {p: LogReader() for p in partitions}
    if not tps:
        return readers
    # A position at once, and paused: else the fetcher asks for a position reset, which
    # auto_offset_reset="none" refuses, and backs off for 100 ms before any fetch.
    for tp in tps:
        consumer.seek(tp, 0)
    consumer.pause(*tps)
    waits = FetchWait(fetch_wait_ms)
    set_fetch_wait(consumer, fetch_wait_ms)
    ends = await consumer.end_offsets(tps)
    starts: dict[TopicPartition, int | None] = {}
    for tp in tps:
        if ends[tp] > 0:
            try:
                starts[tp] = await _snapshot_pointer(consumer, tp, ends[tp], poll_ms, waits)
            except StateLogLost as lost:
                if not fresh_if_lost:
                    raise
                readers[tp.partition].end_offset = lost.end_offset or 0
    pending = [tp for tp in tps if tp in starts]  # (an empty log: a fresh partition)
    beginnings = await consumer.beginning_offsets(pending) if pending else {}
    for tp in pending:
        start = starts[tp]
        consumer.seek(tp, beginnings[tp] if start is None else start)
    first = {tp: starts[tp] for tp in pending}

    def take(tp: TopicPartition, records: list[Any]) -> bool:
        expected = first.pop(tp, None)
        if records and expected is not None and records[0].offset != expected:
            if not fresh_if_lost:
                raise StateLogLost(
                    f"{topic}[{tp.partition}]: the snapshot at offset {expected} is gone "
                    f"(the log starts at {records[0].offset}); the topic's retention "
                    "removed it",
                    tp.partition,
                )
            readers[tp.partition] = LogReader()
            readers[tp.partition].end_offset = consumer.highwater(tp) or 0
            return False
        reader = readers[tp.partition]
        for record in records:
            reader.feed(record.offset, record.key, record.value)
        return True

    ends_read = await read_to_high_watermark(consumer, pending, take, poll_ms=poll_ms,
                                             waits=waits)
    for tp, highwater in ends_read.items():
        # (where the next record lands, also after records no reader took)
        reader = readers[tp.partition]
        reader.end_offset = max(reader.end_offset, highwater)
    consumer.unsubscribe()
    return readers


async def _snapshot_pointer(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    end: int,
    poll_ms: int,
    waits: FetchWait,
) -> int | None:
    """Where the latest complete snapshot starts (None: the log has none yet, or no record
    of it can be read), as the last record that landed where its writer expected names it.
    A failed writer's records at the end are passed over; so a window at the end of the log
    is read, and widened as long as it holds no such record. (On Tansu ``end`` is the last
    batch's first offset + 1: the window reaches the true end anyway, read to the high
    watermark.)"""
    window = 16
    window_records: list[tuple[int, bytes]] = []

    def take(_: TopicPartition, records: list[Any]) -> bool:
        window_records.extend((record.offset, record.key) for record in records)
        return True

    while True:
        start = max(0, end - window)
        consumer.seek(tp, start)
        window_records.clear()
        await read_to_high_watermark(consumer, [tp], take, poll_ms=poll_ms, waits=waits)
        found, pointer = snapshot_named_last(window_records)
        if found:
            return pointer
        if start == 0:
            # The whole log, from offset 0, and not one record of it where its writer
            # expected it: writes of a worker that had lost the partition, into an emptied
            # broker (it stops at the first: Committer.stop_writes). No commit of this log
            # is readable: its state is empty, as on a broker that has no log at all.
            log.warning("%s[%d]: none of its %d records landed where its writer expected "
                        "it (a former broker's worker wrote them); starting it empty",
                        tp.topic, tp.partition, len(window_records))
            return None
        window *= 8


async def read_commits(
    kafka: KafkaConnection | str, topic: str
) -> dict[int, list[tuple[int, Commit]]]:
    """Every complete commit of every partition of a state log, from its beginning, with
    the offset of its last record (for audits and tests; a recovery reads far less), each
    put whole (patches folded onto the values before them)."""
    consumer = AIOKafkaConsumer(**as_connection(kafka).aiokafka_kwargs(),
                                enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer.topics()  # refreshes the metadata
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp, offset in (await consumer.beginning_offsets(tps)).items():
            consumer.seek(tp, offset)  # (seek_to_beginning() races with assign()'s reset)
        readers = {p: LogReader(keep_puts=True) for p in partitions}
        commits: dict[int, list[tuple[int, Commit]]] = {p: [] for p in partitions}

        def take(tp: TopicPartition, records: list[Any]) -> bool:
            for record in records:
                commit = readers[tp.partition].feed(record.offset, record.key, record.value)
                if commit is not None:
                    commits[tp.partition].append((record.offset, commit))
            return True

        await read_to_high_watermark(consumer, [tp for tp in tps if ends[tp] > 0], take)
        return commits
    finally:
        await consumer.stop()
