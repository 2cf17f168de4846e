"""``banditflow archive``: copy the learners, contexts, decisions, feedback, truth and
deadletter topics of a prefix into one archive file (:mod:`banditflow.schemas.archive`, read by
:mod:`banditflow.offline.archive`).

The archiver reads every partition of the six topics without a consumer group (it commits
nothing and changes nothing on the broker), from their beginning with ``from_beginning``,
else from their end, and writes each record as it comes: records of one partition keep their
order, records of different partitions and topics are interleaved as they arrive. Records
past an offset the broker has not stored yet wait until it has (streams/offset_gaps.py: the
embedded broker hands them out early); offsets that never come are logged as missing.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from banditflow.offline.archive import ArchiveWriter
from banditflow.schemas.archive import ARCHIVED_TOPICS
from banditflow.streams.connection import KafkaConnection
from banditflow.streams.offset_gaps import OffsetGaps
from banditflow.streams.topics import TopicError, Topics


@dataclass(frozen=True)
class ArchiveSettings:
    kafka: KafkaConnection
    prefix: str
    out: Path
    from_beginning: bool = False
    until_idle_s: float | None = None


def archive_record(kind: str, message: Any) -> dict[str, Any]:
    """The archive line of one consumed Kafka record of topic ``kind`` (without its prefix)."""
    record: dict[str, Any] = {
        "topic": kind,
        "partition": message.partition,
        "offset": message.offset,
        "timestamp": message.timestamp / 1000.0 if message.timestamp is not None else None,
        "key": message.key.decode("utf-8", "replace") if message.key is not None else None,
        "value": None,
    }
    if message.value is not None:
        try:
            value = json.loads(message.value)
        except ValueError:
            value = None
        if isinstance(value, dict):
            record["value"] = value
        else:
            record["raw"] = message.value.decode("utf-8", "replace")
    return record


def run_archive(settings: ArchiveSettings,
                progress: Callable[[int], None] | None = None) -> int:
    """Archive until ``until_idle_s`` seconds pass without a record (or SIGINT / SIGTERM);
    the number of records written."""
    topics = Topics(settings.prefix)
    kinds = {f"{settings.prefix}.{kind}": kind for kind in ARCHIVED_TOPICS}
    # (a position the broker no longer has restarts at its earliest record, never its end)
    consumer = KafkaConsumer(**settings.kafka.kafka_python_kwargs(), group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        assigned = [
            TopicPartition(name, partition)
            for name in kinds
            for partition in sorted(consumer.partitions_for_topic(name) or ())
        ]
        if not assigned:
            raise TopicError(
                f"no topics of prefix {topics.prefix!r} at {settings.kafka.describe()}")
        consumer.assign(assigned)
        if settings.from_beginning:
            consumer.seek_to_beginning(*assigned)
        else:
            consumer.seek_to_end(*assigned)
        expected = {partition: consumer.position(partition) for partition in assigned}
        # Records past an offset the broker has not stored yet wait for it; a gap that
        # persists is logged as offsets not in the log (streams/offset_gaps.py).
        gaps = OffsetGaps(lambda tp, now: 0, lambda outcome: None)
        with open(settings.out, "w") as out:
            writer = ArchiveWriter(out, source="kafka", prefix=settings.prefix)
            last_record = time.monotonic()
            try:
                while not stopping:
                    batches = consumer.poll(timeout_ms=200)
                    now = time.monotonic()
                    for partition, messages in batches.items():
                        # (the learners topic is compacted: gaps there are normal)
                        if kinds[partition.topic] != "learners":
                            messages, held = gaps.admit(partition, expected[partition],
                                                        messages, now)
                            if held is not None:  # (fetched again at once: no pause here)
                                consumer.seek(partition, held.offset)
                        for message in messages:
                            expected[partition] = message.offset + 1
                            writer.write(archive_record(kinds[partition.topic], message))
                    if batches:
                        last_record = time.monotonic()
                        out.flush()
                        if progress is not None:
                            progress(writer.records)
                    elif (settings.until_idle_s is not None
                          and time.monotonic() - last_record >= settings.until_idle_s):
                        break
            except KeyboardInterrupt:
                pass
            return writer.records
    finally:
        signal.signal(signal.SIGTERM, previous)
        consumer.close()
