"""In which order a worker applies the records one fetch brought for one partition number.

Kafka keeps order within a topic partition only, and a fetch answers per topic partition:
a learner's config (``learners``) and the contexts an application sent after it
(``contexts``) can come in one fetch, and applied topic by topic, the contexts would be
decided by the old version of the learner, or dead-lettered ``unknown_learner`` before the
config that creates it. So, as Kafka Streams' ``PartitionGroup`` does for a task's
partitions, the records of one partition number are merged by their timestamps: each
topic's own order is kept, and of two heads the older goes first (at equal timestamps,
in the order of the topics given: a config before the contexts it was sent with).

What no merge can do is order a record against one not fetched yet (a config whose
partition's leader is a slower broker): the README's "Processing semantics" says so.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

# The order in which one partition's streams break timestamp ties: a config before the
# contexts sent with it, a context before its feedback.
STREAM_RANK = {"learners": 0, "contexts": 1, "feedback": 2, "truth": 3}


class Stamped(Protocol):
    @property
    def timestamp(self) -> int: ...


R = TypeVar("R", bound=Stamped)


def by_partition(
    fetched: Mapping[Any, Sequence[R]], streams: Mapping[str, str]
) -> dict[int, list[tuple[str, Sequence[R]]]]:
    """A fetch's batches (by topic partition) per partition number, each as (stream,
    records), the streams in STREAM_RANK's order; ``streams`` maps a topic to its stream."""
    grouped: dict[int, list[tuple[str, Sequence[R]]]] = {}
    for tp, records in sorted(fetched.items(),
                              key=lambda item: STREAM_RANK[streams[item[0].topic]]):
        grouped.setdefault(tp.partition, []).append((streams[tp.topic], records))
    return grouped


def in_record_time_order(batches: Sequence[tuple[str, Sequence[R]]]) -> Iterator[tuple[str, R]]:
    """``(stream, record)`` of every batch, each batch's order kept, merged oldest first.

    ``batches`` come in the order ties break. A record without a timestamp (-1: an old
    producer's) sorts as its batch's predecessor did: merging only ever compares batch
    heads, so no batch is reordered."""
    if len(batches) == 1:
        stream, records = batches[0]
        return ((stream, record) for record in records)
    return _merged(batches)


def _merged(batches: Sequence[tuple[str, Sequence[R]]]) -> Iterator[tuple[str, R]]:
    def keyed(rank: int, stream: str, records: Iterable[R]) -> Iterator[tuple[int, int, str, R]]:
        last = -1
        for record in records:
            if record.timestamp >= 0:
                last = record.timestamp
            yield last, rank, stream, record

    for _, _, stream, record in heapq.merge(
        *(keyed(rank, stream, records) for rank, (stream, records) in enumerate(batches)),
        key=lambda item: (item[0], item[1]),
    ):
        yield stream, record
