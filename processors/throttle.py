"""The one log throttle: a line that can repeat many times a second (an internal error per
record, a commit retried while the broker is gone, a live OPE candidate failing on every
decision) is logged at most once per interval, with a count of what it left out."""

from __future__ import annotations


class Throttle:
    """At most one log line every ``every_s`` seconds; says how many were left out."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.last = float("-inf")
        self.suppressed = 0

    def allow(self, now: float) -> bool:
        if now - self.last < self.every_s:
            self.suppressed += 1
            return False
        self.last = now
        return True

    def suppressed_note(self) -> str:
        note = f" ({self.suppressed} more since the last report)" if self.suppressed else ""
        self.suppressed = 0
        return note
