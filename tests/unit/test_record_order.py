"""The order a worker applies one fetch's records of one partition number in
(streams/record_order.py); on a real broker: tests/integration/test_record_order.py."""

from __future__ import annotations

from dataclasses import dataclass

from banditflow.streams.record_order import by_partition, in_record_time_order


@dataclass(frozen=True)
class Rec:
    name: str
    timestamp: int


def order(*batches: tuple[str, list[Rec]]) -> list[str]:
    return [record.name for _, record in in_record_time_order(list(batches))]


def test_older_heads_first_and_ties_in_the_order_of_the_streams_given() -> None:
    assert order(
        ("learners", [Rec("config", 20)]),
        ("contexts", [Rec("c1", 10), Rec("c2", 20), Rec("c3", 30)]),
        ("feedback", [Rec("f1", 20)]),
    ) == ["c1", "config", "c2", "f1", "c3"]


def test_each_streams_own_order_is_kept_even_when_its_timestamps_go_back() -> None:
    # Producers' clocks differ: a partition's timestamps need not grow.
    assert order(
        ("learners", [Rec("config", 15)]),
        ("contexts", [Rec("c1", 30), Rec("c2", 10), Rec("c3", 40)]),
    ) == ["config", "c1", "c2", "c3"]


def test_a_record_without_timestamp_goes_with_its_predecessor() -> None:
    assert order(
        ("learners", [Rec("config", 25)]),
        ("contexts", [Rec("c1", 20), Rec("c2", -1), Rec("c3", 30)]),
    ) == ["c1", "c2", "config", "c3"]


def test_one_stream_passes_through_and_streams_are_labelled() -> None:
    records = [Rec("a", 5), Rec("b", 1)]
    assert list(in_record_time_order([("contexts", records)])) == [
        ("contexts", records[0]), ("contexts", records[1])]
    assert [stream for stream, _ in in_record_time_order(
        [("learners", [Rec("x", 2)]), ("truth", [Rec("y", 1)])])] == ["truth", "learners"]


def test_a_fetch_is_grouped_per_partition_number_streams_in_tie_order() -> None:
    @dataclass(frozen=True)
    class TP:
        topic: str
        partition: int

    streams = {"p.contexts": "contexts", "p.learners": "learners", "p.feedback": "feedback"}
    c0, l0, f1 = [Rec("c", 1)], [Rec("l", 1)], [Rec("f", 1)]
    fetched = {TP("p.contexts", 0): c0, TP("p.feedback", 1): f1, TP("p.learners", 0): l0}
    assert by_partition(fetched, streams) == {
        0: [("learners", l0), ("contexts", c0)], 1: [("feedback", f1)]}
