"""The fetch wait adapts to a broker that answers short fetches with nothing; the inputs no
decision waits for are fetched at their own pace once caught up; the input is held during a
commit only while few contexts would come meanwhile."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from banditflow.streams.fetch_wait import FetchPacing, FetchWait, InputHold

# (1 ms past each interval: now - changed for times this far apart is not exact in floats)
EPS = 0.001


def starve(wait: FetchWait, t: float, until_ms: int) -> tuple[list[int], float]:
    """Empty fetches while records wait unread, every 50 ms from ``t``, until the wait is
    ``until_ms``: the waits set, and the time reached."""
    raised = []
    for _ in range(2000):  # (100 s: a wait that never rises fails, not hangs)
        if wait.current_ms >= until_ms:
            return raised, t
        t += 0.05
        step = wait.fetched(t, records=0, behind=True)
        if step is not None:
            raised.append(step)
    raise AssertionError(f"the wait stayed at {wait.current_ms} ms, not {until_ms}")


def flow_until_probe(wait: FetchWait, t: float) -> tuple[int, float]:
    """Polls that bring records and leave none unread, every 50 ms from ``t``, until the wait
    changes: the new wait and the time reached."""
    for _ in range(2000):
        t += 0.05
        step = wait.fetched(t, records=5, behind=False)
        if step is not None:
            return step, t
    raise AssertionError(f"no probe in 100 s of flow at {wait.current_ms} ms")


def failed_probes(wait: FetchWait, needed_ms: int, count: int) -> float:
    """Raise ``wait`` to ``needed_ms``, then ``count`` probes below it, each failing: the
    time reached."""
    _, t = starve(wait, wait.changed, needed_ms)
    for _ in range(count):
        _, t = flow_until_probe(wait, t)
        _, t = starve(wait, t, needed_ms)
    return t


def test_the_wait_doubles_while_records_wait_unread_and_comes_back_once_they_flow() -> None:
    wait = FetchWait(20)
    now = wait.changed
    assert wait.fetched(now + 0.01, records=0, behind=True) is None  # not starved yet
    assert wait.fetched(now + 0.5, records=0, behind=False) is None  # nothing to read
    raised, t = starve(wait, now + 0.02, FetchWait.CAP_MS)
    assert raised == [40, 80, 160, 320, 640, 1280, 2000] and wait.current_ms == FetchWait.CAP_MS
    assert wait.fetched(t + 10, records=0, behind=True) is None  # capped
    assert wait.fetched(t + 0.5, records=5, behind=False) is None  # kept while it works
    # every probe holds (records keep flowing, the worker caught up): one halving per
    # PROBE_MIN_S
    t += 0.5
    lowered = [wait.fetched(t + k * (FetchWait.PROBE_MIN_S + EPS), records=5, behind=False)
               for k in range(1, 9)]
    assert lowered == [1000, 500, 250, 125, 62, 31, 20, None]


def test_in_a_backlog_the_raised_wait_is_probed_only_every_probe_max_s() -> None:
    """Records flow but more wait unread (a backlog read at the raised wait, which costs it
    nothing): a probe comes after PROBE_MAX_S, not PROBE_MIN_S."""
    wait = FetchWait(10)
    _, t = starve(wait, wait.changed, 40)
    changed = wait.changed
    for k in range(1, 29):
        assert wait.fetched(changed + k, records=5, behind=True) is None
    assert wait.fetched(changed + FetchWait.PROBE_MAX_S + EPS, records=5, behind=True) == 20
    # caught up: the next probe after PROBE_MIN_S
    t = changed + FetchWait.PROBE_MAX_S + EPS
    assert wait.fetched(t + FetchWait.PROBE_MIN_S / 2, records=5, behind=False) is None
    assert wait.fetched(t + FetchWait.PROBE_MIN_S + EPS, records=5, behind=False) == 10


def test_a_probe_that_fails_spaces_the_next_out_up_to_probe_max_s() -> None:
    """A broker that needs 160 ms (Tansu on a partition of many batches): each probe to 80 ms
    starves again, and the next probe comes twice as late, up to PROBE_MAX_S; records flow
    at 160 ms meanwhile."""
    wait = FetchWait(20)
    raised, t = starve(wait, wait.changed, 160)
    assert raised == [40, 80, 160]
    intervals = []
    flowing_since = t
    for _ in range(8):
        step, t = flow_until_probe(wait, t)
        assert step == 80  # a probe
        intervals.append(round(t - flowing_since))
        assert starve(wait, t, 160)[0] == [160]  # it fails: empty fetches for 3 waits
        t += 0.3
        flowing_since = wait.changed
    assert intervals == [1, 2, 4, 8, 16, 30, 30, 30]
    assert wait.probe_s == FetchWait.PROBE_MAX_S


def test_a_probe_that_holds_makes_the_next_come_soon_again() -> None:
    """After failed probes spaced the next one out, a probe that holds (the broker got faster)
    brings the wait down at one halving per PROBE_MIN_S again."""
    wait = FetchWait(20)
    t = failed_probes(wait, 160, 3)
    assert wait.probe_s == 8 * FetchWait.PROBE_MIN_S
    assert wait.fetched(t + 4, records=5, behind=False) is None  # not yet
    assert wait.fetched(t + 8 + EPS, records=5, behind=False) == 80  # the probe
    t += 8 + EPS
    # it holds: records flow for its whole interval, then one halving per PROBE_MIN_S
    assert wait.fetched(t + 4, records=5, behind=False) is None
    assert wait.fetched(t + 8 + EPS, records=5, behind=False) == 40
    assert wait.fetched(t + 9 + 2 * EPS, records=5, behind=False) == 20
    assert wait.probe_s == FetchWait.PROBE_MIN_S


def test_a_starvation_long_after_the_last_probe_is_not_a_failed_probe() -> None:
    """The wait came back to the configured one and held past the probe interval: a later
    starvation raises it again without spacing the probes out."""
    wait = FetchWait(10)
    _, t = starve(wait, wait.changed, 20)
    assert wait.fetched(t + 1 + EPS, records=5, behind=False) == 10  # probe
    t += 1 + EPS
    assert wait.fetched(t + 5, records=5, behind=False) is None
    raised, _ = starve(wait, t + 5, 20)
    assert raised == [20] and wait.probe_s == FetchWait.PROBE_MIN_S


def test_an_idle_worker_probes_its_raised_wait_back_without_records() -> None:
    """A wait raised just before the stream went quiet comes back while nothing comes: one
    halving per PROBE_MIN_S of polls that bring nothing and leave nothing unread."""
    wait = FetchWait(10)
    _, t = starve(wait, wait.changed, 40)
    quiet = [t + 0.1 * k for k in range(1, 10)]  # 0.9 s of empty, caught-up polls
    assert all(wait.fetched(p, records=0, behind=False) is None for p in quiet)
    assert wait.fetched(t + 1 + EPS, records=0, behind=False) == 20
    assert wait.fetched(t + 2 + 2 * EPS, records=0, behind=False) == 10
    assert wait.fetched(t + 60, records=0, behind=False) is None  # the configured wait


def test_an_idle_probe_that_the_next_records_undo_spaces_the_next_out() -> None:
    """A partition the broker cannot list at the configured wait: the records after an idle
    probe wait unread, the wait rises again within the probe's interval, and the next probe
    comes later, as in a backlog."""
    wait = FetchWait(10)
    _, t = starve(wait, wait.changed, 20)
    assert wait.fetched(t + 1 + EPS, records=0, behind=False) == 10  # the idle probe
    raised, t = starve(wait, t + 1 + EPS, 20)
    assert raised == [20] and wait.probe_s == 2 * FetchWait.PROBE_MIN_S
    assert wait.fetched(t + 1 + EPS, records=0, behind=False) is None  # not after 1 s
    assert wait.fetched(t + 2 + EPS, records=0, behind=False) == 10


def test_a_record_at_a_time_while_records_wait_unread_doubles_the_wait() -> None:
    """Tansu with a wait too short to list a partition's batches answers a batch per fetch:
    THIN_POLLS such polls in a row (records left unread after each) double the wait; a
    fuller poll, or one that leaves nothing unread, starts the count again."""
    wait = FetchWait(20)
    t = wait.changed
    for _ in range(FetchWait.THIN_POLLS - 1):
        t += 0.02
        assert wait.fetched(t, records=1, behind=True) is None
    assert wait.fetched(t + 0.02, records=1, behind=False) is None  # caught up: not thin
    for _ in range(FetchWait.THIN_POLLS - 1):
        t += 0.02
        assert wait.fetched(t, records=1, behind=True) is None
    assert wait.fetched(t + 0.02, records=500, behind=True) is None  # a full poll
    for _ in range(FetchWait.THIN_POLLS - 1):
        t += 0.02
        assert wait.fetched(t, records=1, behind=True) is None
    assert wait.fetched(t + 0.02, records=1, behind=True) == 40
    t += 0.02
    assert wait.fetched(t + 0.04, records=500, behind=True) is None  # read at 40 ms


def test_empty_polls_raise_the_wait_after_three_waits_not_as_thin_polls() -> None:
    """Polls that bring nothing while records wait unread raise the wait once they have for
    three waits (a poll may end before a fetch at a long wait is answered), however many
    polls that takes; one-record polls around them keep their own count."""
    wait = FetchWait(20)
    _, t = starve(wait, wait.changed, 320)
    changed = wait.changed
    polls = [changed + 0.05 * k for k in range(1, 20)]  # 0.95 s of empty polls: < 3 x 320 ms
    assert all(wait.fetched(p, records=0, behind=True) is None for p in polls)
    assert wait.fetched(changed + 0.97, records=0, behind=True) == 640
    t = wait.changed
    for k in range(2 * (FetchWait.THIN_POLLS - 1)):  # empty and one-record polls in turn
        assert wait.fetched(t + 0.01 * k, records=k % 2, behind=True) is None
    # the empty ones neither counted nor reset the count: one more one-record poll raises it
    assert wait.fetched(t + 0.2, records=1, behind=True) == 1280


def test_a_probe_that_held_down_to_the_configured_wait_leaves_probes_soon() -> None:
    """Failed probes spaced the next one out; the last one, down to the configured wait,
    held: a raise long after it probes back after PROBE_MIN_S again."""
    wait = FetchWait(20)
    t = failed_probes(wait, 40, 3)
    assert wait.probe_s == 8 * FetchWait.PROBE_MIN_S
    assert wait.fetched(t + 8 + EPS, records=5, behind=False) == 20  # it holds
    t += 60
    assert starve(wait, t, 40)[0] == [40]  # a busy machine, a minute later
    assert wait.probe_s == FetchWait.PROBE_MIN_S
    t = wait.changed
    assert wait.fetched(t + FetchWait.PROBE_MIN_S + EPS, records=5, behind=False) == 20


def test_pacing_pauses_a_partition_once_an_answer_since_its_resumption_shows_it_caught_up(
) -> None:
    pacing, tp = FetchPacing(0.2), TopicPartition("p.feedback", 0)
    # first seen at 10.0: an answer asked before then says nothing about it now
    assert pacing.pause_for(tp, 10.0, asked_at=9.9, unread=0, position=0) is None
    assert pacing.pause_for(tp, 10.1, asked_at=10.05, unread=3, position=0) is None
    assert pacing.pause_for(tp, 10.2, asked_at=10.15, unread=0, position=3) == 0.2
    pacing.resumed(tp, 10.4)
    assert pacing.pause_for(tp, 10.41, asked_at=10.15, unread=0, position=3) is None
    assert pacing.pause_for(tp, 10.45, asked_at=10.42, unread=0, position=5) == 0.2


def test_pacing_pauses_shorter_where_records_come_fast_and_not_at_all_when_too_fast() -> None:
    pacing, tp = FetchPacing(0.2), TopicPartition("p.feedback", 0)
    burst = FetchPacing.BURST_RECORDS
    pacing.pause_for(tp, 1.0, None, 0, position=0)
    # 750 records/s over a pause of 200 ms: what brings BURST_RECORDS at that rate
    assert pacing.pause_for(tp, 1.2, asked_at=1.1, unread=0, position=150) == (
        pytest.approx(burst / 750)
    )
    pacing.resumed(tp, 1.4)
    # 2,000/s since (800 in 400 ms): a pause would be 50 ms, under MIN_PAUSE_S: none
    assert pacing.pause_for(tp, 1.6, asked_at=1.5, unread=0, position=950) is None
    # ... and a few slow polls do not change that at once (a moving average)
    assert pacing.pause_for(tp, 1.605, asked_at=1.601, unread=0, position=951) is None
    # records stop: the pause grows back to interval_s
    assert pacing.pause_for(tp, 2.6, asked_at=2.5, unread=0, position=951) == 0.2


def test_pacing_is_per_partition_and_off_at_interval_0() -> None:
    pacing = FetchPacing(0.2)
    a, b = TopicPartition("p.feedback", 0), TopicPartition("p.feedback", 1)
    pacing.pause_for(a, 1.0, None, 0, 0)
    pacing.pause_for(b, 5.0, None, 0, 0)
    assert pacing.pause_for(a, 2.0, asked_at=2.0, unread=0, position=0) == 0.2
    assert pacing.pause_for(b, 2.0, asked_at=2.0, unread=0, position=0) is None  # since 5.0
    off = FetchPacing(0.0)
    assert off.pause_for(a, 1.0, None, 0, 0) is None
    assert off.pause_for(a, 2.0, asked_at=2.0, unread=0, position=0) is None


def flow(hold: InputHold, t: float, rate: float, seconds: float, hold_s: float | None
         ) -> tuple[list[bool], float]:
    """Polls every 20 ms from ``t`` bringing ``rate`` contexts a second, each followed by a
    commit held for ``hold_s`` when the policy wants it (None: never asked): what it wanted
    at each, and the time reached."""
    wanted = []
    for _ in range(round(seconds / 0.02)):
        t += 0.02
        hold.polled(round(rate * 0.02), t)
        if hold_s is not None:
            wanted.append(hold.wanted(t))
            if wanted[-1]:
                hold.held(hold_s, t)
    return wanted, t


def test_the_input_is_held_while_few_contexts_would_come_during_a_hold() -> None:
    hold = InputHold()
    assert hold.wanted(0.0)  # (nothing known yet: hold, as a caught-up worker should)
    wanted, _ = flow(hold, 0.0, rate=500, seconds=3.0, hold_s=0.004)  # 2 in a hold
    assert all(wanted)
    assert hold.context_rate == pytest.approx(500, rel=0.05)
    assert hold.hold_s == pytest.approx(0.004)


def test_a_high_rate_stops_the_holds_but_a_probe_a_second_and_a_lower_one_brings_them_back(
) -> None:
    hold = InputHold()
    t = flow(hold, 0.0, rate=500, seconds=2.0, hold_s=0.005)[1]
    wanted, t = flow(hold, t, rate=2000, seconds=3.0, hold_s=0.005)  # 10 in a hold
    assert sum(wanted[-100:]) == 2  # (the last 2 s: a probe a second)
    wanted, t = flow(hold, t, rate=800, seconds=3.0, hold_s=0.005)  # 4 in a hold
    assert all(wanted[-50:])  # (the last second)


def test_probes_learn_that_holds_got_short_and_holding_resumes() -> None:
    hold = InputHold()
    wanted, t = flow(hold, 0.0, rate=2000, seconds=3.0, hold_s=0.005)
    assert sum(wanted[-50:]) == 1  # (a probe)
    wanted, t = flow(hold, t, rate=2000, seconds=8.0, hold_s=0.002)  # 4 in a hold
    assert all(wanted[-50:])  # (5 probes of 2 ms: the median of the last 9 holds)


def test_one_stalled_hold_does_not_stop_holding() -> None:
    hold = InputHold()
    t = flow(hold, 0.0, rate=500, seconds=2.0, hold_s=0.004)[1]
    hold.held(0.1, t)  # (HOLD_INPUT_S: a stalled commit)
    wanted, _ = flow(hold, t, rate=500, seconds=1.0, hold_s=0.004)
    assert all(wanted)


def test_longer_holds_alone_stop_them_at_the_same_rate() -> None:
    hold = InputHold()
    wanted, t = flow(hold, 0.0, rate=1000, seconds=2.0, hold_s=0.004)  # 4 in a hold
    assert all(wanted)
    wanted, _ = flow(hold, t, rate=1000, seconds=1.0, hold_s=0.010)  # 10 in a hold
    assert sum(wanted) <= 6  # (until the median of the last 9 holds is 10 ms, and a probe)


def test_polls_that_bring_nothing_bring_the_rate_down() -> None:
    hold = InputHold()
    t = flow(hold, 0.0, rate=3000, seconds=2.0, hold_s=None)[1]
    hold.held(0.005, t)
    assert not hold.wanted(t + 0.5)  # (15 in a hold)
    t = flow(hold, t, rate=0, seconds=2.0, hold_s=None)[1]
    assert hold.context_rate < 3000 * 0.2  # (a span of 1 s: e^-2 left)
    hold.held(0.005, t)  # (no probe due: wanted for the rate alone)
    assert hold.wanted(t)
