"""Log lines kept readable under load: one throttle, and the filters on the Kafka clients' lines.

:class:`Throttle` (in processors, which use it too) is the one way to limit a log line that
can repeat many times a second (an internal error per record, a commit retried while the
broker is gone);
:class:`RepeatFilter` applies it per message template to the Kafka client libraries' own
lines, and :class:`RejoinNote` rewords what aiokafka logs as an error on a rejoin that is
expected.
"""

from __future__ import annotations

import logging
import time

from banditflow.processors.throttle import Throttle


class RepeatFilter(logging.Filter):
    """Lets the Kafka clients' log lines through once per ``every_s`` per message template:
    a broker outage makes aiokafka log the same errors over a hundred times a second."""

    def __init__(self, every_s: float = 10.0, prefixes: tuple[str, ...] = ("aiokafka", "kafka")):
        super().__init__()
        self.every_s = every_s
        self.prefixes = prefixes
        self.throttles: dict[tuple[str, int, str], Throttle] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefixes) or len(self.throttles) > 10_000:
            return True
        key = (record.name, record.levelno, str(record.msg))
        throttle = self.throttles.setdefault(key, Throttle(self.every_s))
        if not throttle.allow(time.monotonic()):
            return False
        note = throttle.suppressed_note()
        if note:
            record.msg = f"{record.msg}{note.replace('%', '%%')}"
        return True


class RejoinNote(logging.Filter):
    """aiokafka logs as errors what a worker paused longer than its session (a long GC, a VM
    migration, SIGSTOP) or cut off from the broker meets on resuming: its session expired,
    the group no longer knows it. It rejoins; its partitions may have moved, and anything it
    wrote meanwhile is fenced. Expected, so a warning, saying so (an operator reads ERROR as
    a failure)."""

    TEMPLATES = (
        "Heartbeat session expired - marking coordinator dead",
        "OffsetCommit failed for group %s due to group error (%s), will rejoin",
    )
    NOTE = (" (this worker was paused or cut off from the broker for longer than its session: "
            "it rejoins the group, and whatever it wrote since its partitions moved is fenced)")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and record.msg in self.TEMPLATES:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = f"{record.msg}{self.NOTE}"
        return True

