"""How long a fetch may wait for records, adapted to a broker that needs longer.

Shared by the worker's input consumer and the state log's recovery reader.
"""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer


class FetchWait:
    """How long a fetch may wait for records: the configured wait, doubled (up to ``CAP_MS``)
    while no records come although the partitions have unread ones, and halved back towards
    the configured wait every ``PROBE_S`` once records flow again.

    A broker that needs longer than the wait to read a partition answers every fetch with
    nothing, and a worker that keeps asking the same way never reads again: the embedded
    broker (Tansu 0.6.0) does so once a partition holds some 40,000 record batches with a
    20 ms wait (found by the soak test; tests/fault/test_fetch_wait.py names it).
    """

    CAP_MS = 2000
    PROBE_S = 30.0

    def __init__(self, configured_ms: int) -> None:
        self.configured_ms = configured_ms
        self.current_ms = configured_ms
        self.last_records = time.monotonic()
        self.changed = time.monotonic()

    def fetched(self, now: float, records: bool, behind: bool) -> int | None:
        """After a poll: the new wait in ms if it changes, else None."""
        if records:
            self.last_records = now
            if self.current_ms > self.configured_ms and now - self.changed >= self.PROBE_S:
                return self._set(max(self.configured_ms, self.current_ms // 2), now)
            return None
        starved = now - max(self.last_records, self.changed) > 3 * self.current_ms / 1000
        if behind and starved and self.current_ms < self.CAP_MS:
            return self._set(min(self.CAP_MS, 2 * self.current_ms), now)
        return None

    def _set(self, wait_ms: int, now: float) -> int:
        self.current_ms, self.changed = wait_ms, now
        return wait_ms


def set_fetch_wait(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """Changes ``consumer``'s fetch wait in place: aiokafka reads it from its fetcher for every
    request it builds (a private attribute; tests/integration/test_state_layer.py checks the
    wait that goes on the wire)."""
    consumer._fetcher._fetch_max_wait_ms = wait_ms
