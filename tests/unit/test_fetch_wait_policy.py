"""The fetch wait adapts to a broker that answers short fetches with nothing."""

from __future__ import annotations

from banditflow.streams.fetch_wait import FetchWait


def test_the_wait_doubles_while_records_wait_unread_and_comes_back_once_they_flow() -> None:
    wait = FetchWait(20)
    now = wait.changed
    assert wait.fetched(now + 0.01, records=False, behind=True) is None  # not starved yet
    assert wait.fetched(now + 0.5, records=False, behind=False) is None  # nothing to read
    raised = []
    t = now + 0.07
    while (step := wait.fetched(t, records=False, behind=True)) is None or step < FetchWait.CAP_MS:
        if step is not None:
            raised.append(step)
        t += 0.05
    assert raised == [40, 80, 160, 320, 640, 1280] and wait.current_ms == FetchWait.CAP_MS
    assert wait.fetched(t + 1, records=True, behind=False) is None  # kept while it works
    # (1 ms past each probe: now - changed for times this far apart is not exact in floats)
    lowered = [wait.fetched(t + 1 + k * (FetchWait.PROBE_S + 0.001), records=True, behind=False)
               for k in range(1, 9)]
    assert lowered == [1000, 500, 250, 125, 62, 31, 20, None]

