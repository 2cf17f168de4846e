"""How long a fetch may wait for records, adapted to a broker that needs longer (shared by
the worker's input consumer and the state log's recovery reader); how often the worker
fetches the inputs no decision waits for (FetchPacing); and whether it fetches while a
commit is out (InputHold).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections import deque

from aiokafka import AIOKafkaConsumer, TopicPartition

log = logging.getLogger(__name__)


class FetchWait:
    """How long a fetch may wait for records: the configured wait, doubled (up to ``CAP_MS``)
    while records wait unread and polls bring none (for three waits) or one record at a time
    (``THIN_POLLS`` polls in a row), and halved back towards the configured wait, probing. A
    probe (a halving) comes ``probe_s`` after the wait last changed, at a poll that leaves no
    record unread, whether it brought records or none, or after ``PROBE_MAX_S`` of flow in a
    backlog; ``probe_s`` starts at ``PROBE_MIN_S``, doubles (up to ``PROBE_MAX_S``) each time
    a probe fails (the wait had to be doubled again within the probe's interval) and comes
    back to ``PROBE_MIN_S`` when a probe holds (the next probe, or the next raise, comes
    after its interval).

    A broker that needs longer than the wait to read a partition answers its fetches with
    nothing, or a batch at a time, and a worker that keeps asking the same way reads next to
    nothing: the embedded broker (Tansu 0.6.0) lists a partition's batches until the fetch's
    wait runs out. On a partition of 45,000 one-record batches (tests/fault/test_fetch_wait.py
    names it) a 10 ms wait read no record in 12 s, a 20 ms wait one per fetch (27 a second),
    and 40 ms a full poll of 500 (all 45,000 in 1.3 s; measured 2026-11-28). So a backlog is
    read at the raised wait, and there probes fail and space out to one every
    ``PROBE_MAX_S``. The same broker also leaves records unread for a few fetches when the
    machine's cores are busy (a load generator, the broker and a worker sharing 2 cores). A
    caught-up worker's raised wait is latency (Tansu looks again at a fetch that found
    nothing only after half its wait), so it must come back soon: with a fixed 30 s probe, 10
    of 40 workers of ``bench_latency.py``'s measurement (15-25 s each, at 500/s and 2,000/s,
    2026-11-28) met a doubling to 20 or 40 ms, and most kept it to their end. (At 500/s,
    polls that bring at most one record and leave some unread never came twice in a row in
    two such runs: ``THIN_POLLS`` is well above. A poll is thin by the records it brought
    from all partitions: a partition read a batch at a time beside others that flow is not
    seen, and is read at the pace of the others' waits.) An idle worker probes too: when
    probes needed records, a wait raised just before the stream went quiet stayed raised
    until records came again, and they waited it out (in a paired run of that measurement,
    2026-11-29, one of four workers had its wait raised to 40 ms at its start, before any
    load, by polls that brought nothing while a record waited unread, and kept it for the
    11 s until the load came). On a partition the broker cannot list at the configured
    wait, an idle probe costs the next records a raise again (three waits), and probes
    that fail space themselves out as in a backlog (tests/fault/test_fetch_wait.py).
    """

    CAP_MS = 2000
    THIN_POLLS = 8
    PROBE_MIN_S = 1.0
    PROBE_MAX_S = 30.0

    def __init__(self, configured_ms: int) -> None:
        self.configured_ms = configured_ms
        self.current_ms = configured_ms
        self.probe_s = self.PROBE_MIN_S  # how long records flow at a raised wait before a probe
        self.probing = False  # the last change was a probe (a halving) that may still fail
        self.thin_polls = 0  # polls in a row that brought one record and left some unread
        self.last_records = time.monotonic()
        self.changed = time.monotonic()

    def fetched(self, now: float, records: int, behind: bool) -> int | None:
        """After a poll that brought ``records`` (and their handling): the new wait in ms if
        it changes, else None. ``behind``: records wait unread."""
        if behind and records == 1:
            self.thin_polls += 1
        elif records or not behind:  # (an empty poll while behind: the starvation rule's)
            self.thin_polls = 0
        if records:
            self.last_records = now
        starved = not records and now - max(self.last_records, self.changed) > (
            3 * self.current_ms / 1000
        )
        if behind and (starved or self.thin_polls >= self.THIN_POLLS) and (
            self.current_ms < self.CAP_MS
        ):
            if self.probing:  # the last probe failed, or held for its interval
                failed = now - self.changed < self.probe_s
                self.probe_s = min(self.PROBE_MAX_S, 2 * self.probe_s) if failed else (
                    self.PROBE_MIN_S
                )
            self.probing, self.thin_polls = False, 0
            return self._set(min(self.CAP_MS, 2 * self.current_ms), now)
        since_change = now - self.changed
        if self.current_ms > self.configured_ms and (
            (records and since_change >= self.PROBE_MAX_S)
            or (since_change >= self.probe_s and not behind)
        ):
            if self.probing:  # the last probe held: probe again as soon
                self.probe_s = self.PROBE_MIN_S
            self.probing = True
            return self._set(max(self.configured_ms, self.current_ms // 2), now)
        return None

    def _set(self, wait_ms: int, now: float) -> int:
        self.current_ms, self.changed = wait_ms, now
        return wait_ms


def set_fetch_wait(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """Changes ``consumer``'s fetch wait in place: aiokafka reads it from its fetcher for every
    request it builds (a private attribute; tests/integration/test_state_layer.py checks the
    wait that goes on the wire)."""
    consumer._fetcher._fetch_max_wait_ms = wait_ms


def adapt_fetch_wait(consumer: AIOKafkaConsumer, waits: FetchWait, records: int, behind: bool,
                     reader: str) -> None:
    """After a poll of ``consumer`` and the handling of its ``records``: ``waits``' rule
    applied to the consumer's fetch wait, and a change logged with the ``reader``'s name."""
    was_ms = waits.current_ms
    wait_ms = waits.fetched(time.monotonic(), records, behind)
    if wait_ms is not None:
        set_fetch_wait(consumer, wait_ms)
        log.warning("%s: fetch wait now %d ms (%s)", reader, wait_ms,
                    "raised: records wait unread" if wait_ms > was_ms else "lowered: probing")


# The inputs no decision waits for: a context is decided on what was applied before it,
# whenever its feedback (or its true label) comes.
PACED_STREAMS = ("feedback", "truth")


class FetchPacing:
    """How often the partitions of ``PACED_STREAMS`` are fetched once caught up: a partition is
    paused as soon as an answer asked since it was last resumed shows nothing unread in it,
    so most fetches carry the contexts alone. A partition with records unread is fetched
    with every fetch (a backlog is read at full speed); ``interval_s`` 0 fetches every
    partition every time. The worker ends the pauses early once a fetch brings nothing
    (streams/worker.py, ``_resume_paced``): the pause is for while contexts flow.

    Why: every partition a fetch names costs the broker, and each answer that brings a
    record costs the worker one more fetch. The embedded broker (Tansu 0.6.0) lists every
    batch of every partition it is asked for, and answers at once when any of them has
    records, so feedback fetched with the contexts makes a worker's fetches both more
    frequent and slower.

    The pause is ``interval_s`` at most, and shorter where records come fast: what brings
    about ``BURST_RECORDS`` records at their recent rate (averaged over about ``interval_s``),
    since the records that came meanwhile are handled in one go once it is resumed, before
    the contexts fetched with them (they are older). Where that is under ``MIN_PAUSE_S``, the
    partition is not paused at all: at 2,000 records/s, pauses of 12-50 ms took the
    application's latency at p99 from 49.5-52.5 to 91.9-108.3 ms, and the contexts' wait for
    their commit from 5.7-6.0 to 14.9-17.5 ms (paired rounds on the embedded broker,
    2026-11-29); at 500/s, pauses of 200 ms took it from 38.2 to 33.1 ms (p50 16.5 to 14.7;
    in 9 later pairs, with pauses ended by empty fetches, p50 better in 7, p99 unchanged).
    (One-off runs of bench_latency.py's measurements with the option on and off: no command
    in the repository regenerates the pairing; README, Performance.)
    """

    # About one poll's records (streams/worker.py's POLL_RECORDS).
    BURST_RECORDS = 100
    MIN_PAUSE_S = 0.1

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        # Per partition: when it was last resumed (or first seen); an answer asked before then
        # does not show what it holds now.
        self._fetchable_since: dict[TopicPartition, float] = {}
        # Per partition: the last check's time and reader position, and the records' rate.
        self._rate: dict[TopicPartition, tuple[float, int, float]] = {}

    def pause_for(self, tp: TopicPartition, now: float, asked_at: float | None, unread: int,
                  position: int) -> float | None:
        """How long to pause ``tp`` now (wall times), None for not now: only once an answer
        asked since it became fetchable left nothing unread (``unread``: records beyond the
        reader's ``position`` in the latest answer, asked at ``asked_at``)."""
        if self.interval_s <= 0:
            return None
        since = self._fetchable_since.setdefault(tp, now)
        checked_at, checked_position, rate = self._rate.get(tp, (now, position, 0.0))
        elapsed = now - checked_at
        if elapsed > 0:  # (a moving average over about interval_s of time)
            recent = max(0, position - checked_position) / elapsed
            rate += min(1.0, elapsed / self.interval_s) * (recent - rate)
        self._rate[tp] = (now, position, rate)
        if asked_at is None or asked_at < since or unread:
            return None
        pause = min(self.interval_s, self.BURST_RECORDS / rate) if rate > 0 else self.interval_s
        return pause if pause >= self.MIN_PAUSE_S else None

    def resumed(self, tp: TopicPartition, now: float) -> None:
        """``tp`` is fetched again from ``now`` (wall time)."""
        self._fetchable_since[tp] = now


class InputHold:
    """Whether the worker stops fetching while a commit is out (Worker._hold_input): only
    while few contexts are expected to come meanwhile, ``MAX_ARRIVALS`` at most (their rate
    times a hold's time).

    A hold keeps a fetch's listing on the embedded broker from delaying the commit's writes
    (streams/worker.py, HOLD_INPUT_S), but what comes during it waits for the hold's end and
    a fetch after it, where it would have been fetched and handled while the commit was out.
    With few arrivals the first wins; at a high rate, commits come back to back and holding
    serialises them with the fetches. Measured with bench_latency.py's measurement
    (alternating 20-s rounds, one-off pairs, 2026-11-30), always holding against never:

    - 500 contexts/s (holds of 2-4 ms, 1-2 contexts in one): the worker's own p99 7.2
      against 19.2 ms, lower in 4 of 4 pairs; the application's p50/p99 19.6/49.4 against
      25.0/56.9 ms.
    - 1,000/s (3.5-4.5 contexts in a hold): the worker's p99 14.8 against 33.6 ms (3 of 3);
      the application's p50/p99 32.9/85.4 against 36.1/87.6.
    - 1,500/s (6-7.5 in a hold): the worker's p99 17.3 against 30.8 ms (4 of 4); the
      application's p99 104.1 against 110.1, lower in 2 of 4: a toss-up.
    - 2,000/s (7-12 in a hold): the application's p95/p99 135.7/201.0 against 81.7/127.5
      (lower without in 3 of 3).

    This policy against always holding at 2,000/s, where it holds about once a second (the
    probes): the application's p50/p95/p99 34.5/70.3/104.9 against 36.6/97.5/165.0 ms (3
    pairs, p95 lower in 3 of 3, p99 in 2; a first version, with a mean of the holds and no
    probes, 39.8/79.2/108.5 against 44.9/138.5/262.8 in 4 pairs); the worker's own p99 34.3
    against 21.4. At 500/s it held for every commit (4 logged rounds, 3 of them of the
    first version).
    """

    # Above 1,000/s's 3.5-4.5 (holding better), below 2,000/s's 7-12 (holding worse).
    MAX_ARRIVALS = 6.0
    WINDOW_S = 1.0  # (the context rate's span)
    # A hold's time is the median of the last HOLDS (one stalled hold does not stop holding),
    # and learnt only by holding: while not holding, one hold every PROBE_S learns it anew.
    HOLDS = 9
    PROBE_S = 1.0

    def __init__(self) -> None:
        self.context_rate = 0.0  # contexts a second
        self.hold_s: float | None = None  # (None before the first hold)
        self._holds: deque[float] = deque(maxlen=self.HOLDS)
        self._held_at = -math.inf
        self._polled_at: float | None = None

    def polled(self, contexts: int, now: float) -> None:
        """A poll brought ``contexts`` contexts at ``now`` (monotonic seconds)."""
        if self._polled_at is not None and (elapsed := now - self._polled_at) > 0:
            weight = min(1.0, elapsed / self.WINDOW_S)
            self.context_rate += weight * (contexts / elapsed - self.context_rate)
        self._polled_at = now

    def held(self, seconds: float, now: float) -> None:
        """A hold that ended at ``now`` (monotonic seconds) took ``seconds``."""
        self._holds.append(seconds)
        self.hold_s = statistics.median(self._holds)
        self._held_at = now

    def wanted(self, now: float) -> bool:
        """Whether to hold the input during the commit about to go out, at ``now``."""
        return (self.hold_s is None or self.context_rate * self.hold_s <= self.MAX_ARRIVALS
                or now - self._held_at >= self.PROBE_S)
