"""The one log throttle and the filters on the Kafka clients' lines (streams/logfilters.py)."""

from __future__ import annotations

import logging

from banditflow.streams.logfilters import RejoinNote, RepeatFilter, Throttle


def record(name: str, msg: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_a_throttle_lets_one_line_through_per_interval_and_counts_the_rest() -> None:
    throttle = Throttle(every_s=10.0)
    assert throttle.allow(100.0)
    assert not throttle.allow(105.0) and not throttle.allow(109.9)
    assert throttle.allow(110.0)
    assert throttle.suppressed_note() == " (2 more since the last report)"
    assert throttle.suppressed_note() == ""  # (counted afresh after each report)


def test_the_kafka_clients_repeated_lines_are_throttled_per_template() -> None:
    repeat = RepeatFilter(every_s=3600.0)
    assert repeat.filter(record("aiokafka.conn", "cannot connect to %s"))
    assert not repeat.filter(record("aiokafka.conn", "cannot connect to %s"))
    assert repeat.filter(record("aiokafka.conn", "another template"))
    assert repeat.filter(record("banditflow.worker", "cannot connect to %s"))  # not a client's
    assert repeat.filter(record("banditflow.worker", "cannot connect to %s"))


def test_an_expected_rejoin_is_a_warning_that_says_why() -> None:
    line = record("aiokafka.consumer.group_coordinator",
                  "Heartbeat session expired - marking coordinator dead")
    assert RejoinNote().filter(line)
    assert line.levelno == logging.WARNING and "it rejoins the group" in line.getMessage()
    other = record("aiokafka", "something else")
    assert RejoinNote().filter(other) and other.levelno == logging.ERROR
