"""Caught-up times from fetch answers (streams/stream_time.py), with an injected clock and a
scripted fetcher that answers as aiokafka's does; the pause of a real worker is in
tests/integration/test_frozen_worker.py."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.subscription_state import SubscriptionState

from banditflow.streams.stream_time import FetchAnswer, FetchAnswers, caught_up_at

TP = TopicPartition("t.feedback", 0)


def test_caught_up_only_at_or_past_the_reported_high_watermark() -> None:
    answer = FetchAnswer(highwater=40, asked_at=100.0)
    assert caught_up_at(None, 40) is None  # no answer yet
    assert caught_up_at(answer, 39) is None  # a record waits unread
    assert caught_up_at(answer, 40) == 100.0
    assert caught_up_at(answer, 41) == 100.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedFetcher:
    """Answers each fetch as aiokafka's ``Fetcher._proc_fetch_request`` does: after the
    broker's answer (here: ``answer`` set, then whatever pause ``freeze_s`` says), it sets
    the high watermark and stamps the partition with the time it processed the answer."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.answer = asyncio.Event()
        self.highwater = 0
        self.freeze_s = 0.0
        self.brought = True  # the answer brought records (aiokafka's result)
        self.fails = False  # the fetch fails: no partition stamped, False

    async def _proc_fetch_request(self, assignment: Any, node_id: int, request: Any) -> bool:
        await self.answer.wait()
        highwater = self.highwater  # what the broker said when it answered
        self.clock.now += self.freeze_s  # the process stops before it reads the answer
        if self.fails:
            return False
        for topic, partitions in request.topics:
            for partition, *_ in partitions:
                state = assignment.state_value(TopicPartition(topic, partition))
                state.highwater = highwater
                state.timestamp = int(self.clock.now * 1000)
        return self.brought


def assigned() -> Any:
    subscription = SubscriptionState()
    subscription.assign_from_user({TP})
    assignment = subscription.subscription.assignment
    assignment.state_value(TP).seek(0)
    return assignment


def request() -> Any:
    return SimpleNamespace(topics=[(TP.topic, [(TP.partition, 0, 1 << 20)])])


async def fetch(fetcher: ScriptedFetcher, assignment: Any, highwater: int,
                freeze_s: float = 0.0) -> None:
    fetcher.highwater, fetcher.freeze_s = highwater, freeze_s
    fetcher.answer.set()
    await fetcher._proc_fetch_request(assignment, 0, request())


def installed(clock: Clock, on_empty: Any = None) -> tuple[FetchAnswers, ScriptedFetcher, Any]:
    assignment = assigned()
    fetcher = ScriptedFetcher(clock)
    answers = FetchAnswers(clock, on_empty=on_empty).install(
        SimpleNamespace(_fetcher=fetcher)  # type: ignore[arg-type]
    )
    return answers, fetcher, assignment


def test_an_answer_processed_after_a_pause_is_dated_when_it_was_asked() -> None:
    """The broker answered at t=10 (everything read: high watermark 25); the process froze
    for 7 s before reading the answer. Up to t=10 the partition was read, not up to t=17:
    feedback produced in between is unread."""

    async def main() -> None:
        clock = Clock(10.0)
        answers, fetcher, assignment = installed(clock)
        await fetch(fetcher, assignment, highwater=25, freeze_s=7.0)
        assert clock.now == 17.0
        assert answers.caught_up_at(TP, 25) == 10.0
        # The next fetch, asked after the pause, reports the records that came meanwhile:
        # not caught up until they are read, then as of when it was asked.
        await fetch(fetcher, assignment, highwater=31)
        assert answers.caught_up_at(TP, 25) is None
        assert answers.caught_up_at(TP, 31) == 17.0

    asyncio.run(main())


def test_a_partition_the_answer_did_not_update_keeps_its_answer() -> None:
    """A partition whose answer aiokafka discarded (the position moved meanwhile) or failed
    keeps an older stamp: the new request's time does not make it caught up."""

    async def main() -> None:
        clock = Clock(50.0)
        answers, assignment = FetchAnswers(clock), assigned()
        state = assignment.state_value(TP)
        state.highwater, state.timestamp = 12, 49_000  # an answer from before this request
        answers.answered(assignment, request(), asked_at=clock())
        assert answers.caught_up_at(TP, 12) is None
        state.timestamp = 50_000
        answers.answered(assignment, request(), asked_at=clock())
        assert answers.caught_up_at(TP, 12) == 50.0

    asyncio.run(main())


def test_an_answer_that_brought_no_record_is_reported_with_when_it_was_asked() -> None:
    """on_empty (the worker resumes the partitions pacing paused): called for an answer that
    brought no record, with its asking time; not for one that brought records, nor for a
    fetch that failed (aiokafka answers False then too, but stamps no partition)."""

    async def main() -> None:
        clock, empty = Clock(20.0), []
        answers, fetcher, assignment = installed(clock, on_empty=empty.append)
        await fetch(fetcher, assignment, highwater=3)
        assert empty == []
        fetcher.brought = False
        clock.now = 21.0
        await fetch(fetcher, assignment, highwater=3, freeze_s=0.5)
        assert empty == [21.0]
        fetcher.fails, clock.now = True, 30.0
        await fetch(fetcher, assignment, highwater=3)
        assert empty == [21.0]
        assert answers.asked_at(TP) == 21.0  # (the failed fetch left the answer as it was)

    asyncio.run(main())


def test_the_aiokafka_internals_it_wraps_are_there() -> None:
    parameters = list(inspect.signature(Fetcher._proc_fetch_request).parameters)
    assert parameters == ["self", "assignment", "node_id", "request"]
    assert inspect.iscoroutinefunction(Fetcher._proc_fetch_request)
    source = inspect.getsource(Fetcher._proc_fetch_request)
    assert "tp_state.highwater = highwater" in source
    assert "tp_state.timestamp = now_ms" in source
    # its result: whether it buffered records (or an error) for the consumer
    assert "return needs_wakeup" in source


def test_a_cancelled_fetch_ends_quietly() -> None:
    """Cancelled (the consumer closing) while aiokafka sleeps out a failed fetch's backoff:
    the fetch ends as aiokafka ends any other cancelled one (False), and no answer is kept,
    instead of failing the consumer's stop."""

    async def main() -> None:
        clock = Clock(5.0)
        answers, fetcher, assignment = installed(clock)
        task = asyncio.ensure_future(fetcher._proc_fetch_request(assignment, 0, request()))
        await asyncio.sleep(0)  # (waiting for an answer that never comes)
        task.cancel()
        assert await task is False
        assert answers.caught_up_at(TP, 0) is None

    asyncio.run(main())


def test_settled_high_watermark_is_one_reported_long_enough_ago() -> None:
    """What streams/offset_gaps.py asks: the high watermark of an answer processed at least
    ``age_s`` ago (its offsets were given out by then), from a few answers kept apart."""

    async def main() -> None:
        clock = Clock(100.0)
        answers, fetcher, assignment = installed(clock)
        assert answers.settled_highwater(TP, 100.0, 0.25) == 0  # nothing reported yet
        for step, highwater in enumerate((10, 20, 30, 40, 50, 60)):
            clock.now = 100.0 + 0.1 * step
            await fetch(fetcher, assignment, highwater)
        # Kept: answers at least KEEP_EVERY_S apart (100.0, 100.2, 100.4), the last 4.
        assert answers.settled_highwater(TP, 100.45, 0.25) == 30  # processed at 100.2
        assert answers.settled_highwater(TP, 100.3, 0.25) == 10
        assert answers.settled_highwater(TP, 100.1, 0.25) == 0
        assert answers.settled_highwater(TP, 101.0, 0.25) == 50
        assert answers.asked_at(TP) == clock.now

    asyncio.run(main())
