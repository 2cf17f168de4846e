"""When the worker may take an input partition as caught up: from what the broker said, and
when it was asked.

A stream's time advances with its records, and, once nothing is unread, with the wall clock
(see ``PartitionTask.times``); a decision whose feedback stream time passes its deadline
expires. "Nothing is unread" must hold *at the time it is dated*: a fetch answer says that the
partition ended at its high watermark at some moment between sending the request and
reading the answer. aiokafka dates the answer when it *processes* it; an answer the broker
gave before a pause of the worker (a long GC, a VM migration, SIGSTOP) is processed after it,
so it was dated seconds after the moment it speaks of, and the stream time jumped over
deadlines whose feedback came during the pause, still unread.

So an answer is dated when it was **asked for** (the wall clock before the request went
out): the broker answered after that, so every record it held then is below the high
watermark it reported. After a pause, nothing can be caught up past the pause's start until
a fetch sent after it is answered: the worker reads again before it expires anything.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition


@dataclass(frozen=True)
class FetchAnswer:
    """A partition's high watermark as the broker reported it, and the wall time at which
    the fetch was sent (the broker's answer is no older)."""

    highwater: int
    asked_at: float


def caught_up_at(answer: FetchAnswer | None, position: int) -> float | None:
    """The wall time up to which a reader at ``position`` has read everything, or None while
    the broker reported records beyond it (or has not answered yet)."""
    if answer is None or position < answer.highwater:
        return None
    return answer.asked_at


class FetchAnswers:
    """The latest fetch answer per partition of one consumer, dated when it was asked for.

    Installed around aiokafka's private ``Fetcher._proc_fetch_request(assignment, node_id,
    request)``, which sends one fetch request, processes its answer and sets each answered
    partition's high watermark and (processing-time) timestamp;
    tests/unit/test_stream_time.py checks that it is still there and shaped so.
    """

    # How far apart the answers kept for :meth:`settled_highwater` are (it looks back
    # ``age_s``, streams/offset_gaps.py's SETTLE_S: at most 4 answers per partition).
    KEEP_EVERY_S = 0.125

    def __init__(
        self, clock: Callable[[], float] = time.time,
        on_answer: Callable[[TopicPartition], None] | None = None,
        on_empty: Callable[[float], None] | None = None,
    ) -> None:
        self.clock = clock
        self.on_answer = on_answer  # called for each partition an answer brought
        # called with the asking time of an answer that brought no record of any partition
        self.on_empty = on_empty
        self.answers: dict[TopicPartition, FetchAnswer] = {}
        # Per partition, a few (processed at, high watermark) of past answers, oldest first.
        self.kept: dict[TopicPartition, list[tuple[float, int]]] = {}

    def install(self, consumer: AIOKafkaConsumer) -> FetchAnswers:
        fetcher = consumer._fetcher
        proc = fetcher._proc_fetch_request

        async def proc_fetch_request(assignment: Any, node_id: int, request: Any) -> Any:
            asked_at = self.clock()
            try:
                result = await proc(assignment, node_id, request)
            except asyncio.CancelledError:
                # Cancelled by the consumer's close or an assignment change: aiokafka returns
                # False then, except while it sleeps out a failed fetch's backoff, where the
                # cancellation escaped and failed the consumer's stop (a worker whose broker
                # died exited with a traceback instead of its status).
                return False
            # (aiokafka's result: whether it buffered records, or an error, for the consumer)
            if self.answered(assignment, request, asked_at) and not result and self.on_empty:
                self.on_empty(asked_at)
            return result

        fetcher._proc_fetch_request = proc_fetch_request
        return self

    def answered(self, assignment: Any, request: Any, asked_at: float) -> bool:
        """Take the high watermarks that the answer to ``request`` (asked at ``asked_at``)
        left in ``assignment``: only those it set (aiokafka stamps them when it processes
        the answer, after ``asked_at``; a partition it discarded or failed keeps an older
        stamp). Whether it set any (a failed fetch sets none)."""
        if not assignment.active:
            return False
        stamped = False
        asked_ms = int(asked_at * 1000)
        processed_at = self.clock()
        for topic, partitions in request.topics:
            for partition, *_ in partitions:
                tp = TopicPartition(topic, partition)
                state = assignment.state_value(tp)
                if state is None or state.highwater is None or state.timestamp is None:
                    continue
                if state.timestamp >= asked_ms:
                    stamped = True
                    self.answers[tp] = FetchAnswer(state.highwater, asked_at)
                    if self.on_answer is not None:
                        self.on_answer(tp)
                    kept = self.kept.setdefault(tp, [])
                    if not kept or processed_at - kept[-1][0] >= self.KEEP_EVERY_S:
                        kept.append((processed_at, state.highwater))
                        del kept[:-4]
        return stamped

    def unread(self, tp: TopicPartition, position: int) -> int:
        """How many records the broker last reported beyond ``position`` (0 before any
        answer)."""
        answer = self.answers.get(tp)
        return 0 if answer is None else max(0, answer.highwater - position)

    def asked_at(self, tp: TopicPartition) -> float | None:
        """When the fetch of ``tp``'s latest answer was asked (None before any answer)."""
        answer = self.answers.get(tp)
        return None if answer is None else answer.asked_at

    def settled_highwater(self, tp: TopicPartition, now: float, age_s: float) -> int:
        """The high watermark of ``tp`` in an answer processed at least ``age_s`` before
        ``now`` (0 if none is kept): every offset below it was given out by then."""
        return max((highwater for at, highwater in self.kept.get(tp, ()) if at <= now - age_s),
                   default=0)

    def caught_up_at(self, tp: TopicPartition, position: int) -> float | None:
        """See :func:`caught_up_at`, for ``tp``'s latest answer."""
        return caught_up_at(self.answers.get(tp), position)
