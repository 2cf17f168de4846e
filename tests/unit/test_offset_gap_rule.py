"""The gap rule (streams/offset_gaps.py): records past an offset not shown yet are held back,
fetched again at once, then after the rest of the settle time, and taken as final after
it; a gap below a high watermark reported long enough ago is final at once. The broker that
needs it is in tests/integration/test_offset_gaps.py."""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import TopicPartition

from banditflow.streams.offset_gaps import SETTLE_S, HeldBack, OffsetGaps

TP = TopicPartition("t.contexts", 0)


@dataclass(frozen=True)
class Record:
    offset: int


def records(*offsets: int) -> list[Record]:
    return [Record(o) for o in offsets]


def gaps(settled: int = 0) -> tuple[OffsetGaps, list[str]]:
    counted: list[str] = []
    return OffsetGaps(lambda tp, now: settled, counted.append), counted


def test_contiguous_records_are_all_admitted() -> None:
    rule, counted = gaps()
    batch = records(5, 6, 7)
    assert rule.admit(TP, 5, batch, now=1.0) == (batch, None)
    assert rule.admit(TP, None, records(9, 10), now=1.0)[1] is None  # no mark yet: no gap
    assert counted == []


def test_records_already_applied_are_no_gap() -> None:
    """(a fetch that raced a seek brings records below the mark; the task skips them)"""
    rule, _ = gaps()
    batch = records(3, 4, 5, 6)
    assert rule.admit(TP, 5, batch, now=1.0) == (batch, None)


def test_a_gap_is_held_back_then_filled() -> None:
    rule, counted = gaps()
    kept, held = rule.admit(TP, 5, records(5, 6, 8, 9), now=1.0)
    assert kept == records(5, 6) and held == HeldBack(7, 0.0)  # fetched again at once
    kept, held = rule.admit(TP, 7, records(7, 8, 9), now=1.01)  # the broker stored 7 since
    assert kept == records(7, 8, 9) and held is None
    assert counted == ["filled"]


def test_a_gap_at_the_start_of_a_fetch_is_held_back() -> None:
    rule, counted = gaps()
    assert rule.admit(TP, 7, records(8, 9), now=1.0) == ([], HeldBack(7, 0.0))
    # Seen again soon: paused for the rest of the settle time.
    kept, held = rule.admit(TP, 7, records(8, 9), now=1.05)
    assert kept == [] and held is not None and held.offset == 7
    assert abs(held.wait_s - (SETTLE_S - 0.05)) < 1e-9
    # Seen by a fetch asked after it: final.
    assert rule.admit(TP, 7, records(8, 9), now=1.0 + SETTLE_S) == (records(8, 9), None)
    assert counted == ["skipped"]
    # (and forgotten: a later gap elsewhere is held back anew)
    assert rule.admit(TP, 10, records(12), now=2.0) == ([], HeldBack(10, 0.0))


def test_a_gap_below_a_settled_high_watermark_is_final_at_once() -> None:
    """A compacted topic read from far behind: its offsets were given out long ago."""
    rule, counted = gaps(settled=100)
    batch = records(5, 7, 9, 100, 102)
    assert rule.admit(TP, 5, batch, now=1.0) == (batch[:4], HeldBack(101, 0.0))
    assert counted == ["skipped", "skipped", "skipped"]  # 6, 8 and 10-99; not 101


def test_partitions_are_held_back_apart() -> None:
    rule, counted = gaps()
    other = TopicPartition("t.feedback", 0)
    assert rule.admit(TP, 0, records(1), now=1.0)[1] == HeldBack(0, 0.0)
    assert rule.admit(other, 0, records(0, 1), now=1.0)[1] is None
    assert rule.admit(TP, 0, records(0, 1), now=1.01)[1] is None
    assert counted == ["filled"]
