"""Records past an offset the broker has not shown yet: held back until it shows it, or until
the gap is old enough to be one the log keeps.

Offsets in a Kafka partition increase but need not be contiguous: compaction (the learners
topic) and transaction markers leave gaps, for good. A broker must not, though, hand out a
record past an offset it has given a record that it has not stored yet, and the embedded
broker (Tansu 0.6.0) does: while several producers write to one partition, a fetch can
return offset n + 1 before n is stored, and a later read has both
(tests/integration/test_offset_gaps.py names it). Every consumer, aiokafka's and Java's
alike, takes a gap as final and moves on, so the record at n was never applied: a context
without a decision or a dead letter (one in 28,000 contexts of ``banditflow demo``). On
that broker, 4 producers writing one partition as fast as they could, a consumer tailing
it saw 7-11 gaps per 18,000 records, and each was filled when the consumer fetched again
from the gap, one fetch and 2-23 ms later (measured 2026-11-28 by a one-off script; the
integration test shows the gaps, not how soon they fill).

So a gap is held back: the records before it are applied, the partition is fetched again
from the gap at once, and, while the gap persists, paused until ``settle_s`` after it was
first seen; a fetch after that which still shows it takes it as final (``skipped``). A gap
below a high watermark that the broker reported at least ``settle_s`` ago is final at once:
its offsets were given out that long ago (a compacted topic read from far behind pays no
wait). On Apache Kafka a gap costs a fetch, and a gap at the head of a partition
(a transaction marker) waits ``settle_s``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from banditflow.streams.logfilters import Throttle

log = logging.getLogger(__name__)
SKIPPED = Throttle(every_s=10.0)

# Ten times the slowest fill measured (23 ms), and a small wait at a transaction marker.
SETTLE_S = 0.25


class Offset(Protocol):
    @property
    def offset(self) -> int: ...


R = TypeVar("R", bound=Offset)
# A topic partition: aiokafka's and kafka-python's TopicPartition are both (topic, partition).
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class HeldBack:
    """Fetch the partition again from ``offset``, after ``wait_s`` (0: at once)."""

    offset: int
    wait_s: float


@dataclass
class _Gap:
    offset: int  # the first offset missing
    first_seen: float


def _contiguous(records: Sequence[Offset], expected: int | None) -> bool:
    """Whether ``records`` start at ``expected`` (when known) and leave no offset out (the
    offsets of one partition's records only increase)."""
    first = records[0].offset
    return (expected is None or first == expected) and (
        records[-1].offset - first == len(records) - 1
    )


class OffsetGaps:
    """Which of a fetch's records of a partition to apply now (see the module docstring).

    ``settled(tp, now)`` is the high watermark that the broker reported for ``tp`` at least
    ``settle_s`` before ``now`` (0 if none); ``counted(outcome)`` is told of each gap held
    back and then ``filled`` by the broker, and each ``skipped`` (taken as final). Times
    (``now``) are those at which the fetch that brought the records was asked."""

    def __init__(self, settled: Callable[[TopicPartition, float], int],
                 counted: Callable[[str], None], settle_s: float = SETTLE_S) -> None:
        self.settled = settled
        self.counted = counted
        self.settle_s = settle_s
        self.gaps: dict[TopicPartition, _Gap] = {}

    def admit(self, tp: TopicPartition, expected: int | None, records: Sequence[R],
              now: float) -> tuple[Sequence[R], HeldBack | None]:
        """The records of ``tp`` to apply now, in order, and, when some are held back, from
        where and when to fetch again. ``expected`` is the next offset to apply (None when
        not known yet: a partition read from its beginning)."""
        gap = self.gaps.get(tp)
        if gap is None and records and _contiguous(records, expected):
            return records, None
        position = expected
        for index, record in enumerate(records):
            offset = record.offset
            if position is not None and offset > position:
                held = self._sighted(tp, position, offset, now)
                if held is not None:
                    return records[:index], held
                gap = None
            elif gap is not None and offset == gap.offset:
                del self.gaps[tp]
                self.counted("filled")
                gap = None
            if position is None or offset >= position:
                position = offset + 1
        return records, None

    def _sighted(self, tp: TopicPartition, offset: int, until: int,
                 now: float) -> HeldBack | None:
        """Offsets ``offset`` to ``until`` - 1 of ``tp`` missing in a fetch asked at ``now``:
        held back, or None when the gap is final."""
        gap = self.gaps.get(tp)
        if gap is None or gap.offset != offset:
            if until > self.settled(tp, now):
                self.gaps[tp] = _Gap(offset, now)
                return HeldBack(offset, 0.0)
        else:
            waited = now - gap.first_seen
            if waited < self.settle_s:
                return HeldBack(offset, self.settle_s - waited)
            del self.gaps[tp]
        self.counted("skipped")
        if SKIPPED.allow(now):
            log.warning("%s[%d]: offsets %d to %d are not in the log (compaction, transaction "
                        "markers, or retention removed them before they were read): skipped%s",
                        tp[0], tp[1], offset, until - 1, SKIPPED.suppressed_note())
        return None
