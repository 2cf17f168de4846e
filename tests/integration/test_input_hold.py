"""A caught-up worker fetches nothing while the commit of what it fetched is in flight: from
its state record's request to its decision's acknowledgement, no fetch of the inputs is out
(streams/worker.py, HOLD_INPUT_S). Seen on the wire, through a proxy between the worker and
an embedded broker of the test's own (kafka_wire.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import run_prefix, send_json
from kafka import KafkaProducer
from kafka_wire import FETCH, PRODUCE, Exchange, WireLog

from banditflow.streams.broker import EmbeddedBroker, free_port
from banditflow.streams.connection import KafkaConnection
from banditflow.streams.topics import state_topic

pytestmark = pytest.mark.embedded_broker  # (a broker of its own, behind the proxy)

LID = "held"
CONTEXTS = 40
GAP_S = 0.05  # between contexts: the worker is caught up when each comes


@pytest.fixture(scope="module")
def wire() -> Iterator[WireLog]:
    with WireLog(("127.0.0.1", free_port())) as log:
        yield log


@pytest.fixture(scope="module")
def broker(wire: WireLog, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """This module's own, advertising the proxy: the suite's fixtures (start_worker,
    producer, read_topic) reach it through the proxy."""
    log = tmp_path_factory.mktemp("wire") / "broker.log"
    with EmbeddedBroker(port=wire.upstream[1], log_path=log,
                        advertised=KafkaConnection(wire.bootstrap)) as running:
        yield running


def commit_windows(exchanges: list[Exchange], state: str, decisions: str
                   ) -> list[tuple[float, float]]:
    """Per request that publishes decisions: from the request of the state record before it
    to the decisions' acknowledgement."""
    windows = []
    state_sent: float | None = None
    for exchange in sorted((e for e in exchanges if e.api_key == PRODUCE),
                           key=lambda e: e.sent):
        if exchange.names(state):
            state_sent = exchange.sent
        if exchange.names(decisions) and state_sent is not None:
            assert exchange.answered is not None, "a decision never acknowledged"
            windows.append((state_sent, exchange.answered))
    return windows


def test_no_input_fetch_is_out_while_a_caught_up_commit_is(
    wire: WireLog, start_worker, producer: KafkaProducer, read_topic
) -> None:
    prefix = run_prefix("hold")
    worker = start_worker(prefix, partitions=1)
    topics = worker.topics
    send_json(producer, topics.learners, LID, {
        "learner_id": LID, "family": "conformal", "algorithm": "sps",
        "params": {"alpha": 0.9, "horizon": 10_000},
    })
    decisions = read_topic(topics.decisions)
    send_json(producer, topics.contexts, LID, {"learner_id": LID, "event_id": "warm",
                                               "labels": ["a", "b"], "scores": [0.9, 0.1]})
    decisions.wait_for(lambda rs: len(rs) == 1, 60)
    start = time.monotonic()
    for i in range(CONTEXTS):
        send_json(producer, topics.contexts, LID, {"learner_id": LID, "event_id": f"e{i}",
                                                   "labels": ["a", "b"], "scores": [0.9, 0.1]})
        time.sleep(GAP_S)
    decisions.wait_for(lambda rs: len(rs) == 1 + CONTEXTS, 60)
    time.sleep(0.5)  # (the last acknowledgements reach the proxy)

    exchanges = wire.since(start)
    windows = commit_windows(exchanges, state_topic(prefix), topics.decisions)
    fetches = [e for e in exchanges if e.api_key == FETCH and e.names(topics.contexts)]
    overlapping = [
        (begin, end) for begin, end in windows
        if any(f.sent < end and (f.answered is None or f.answered > begin) for f in fetches)
    ]
    assert len(windows) >= CONTEXTS // 2 and len(fetches) >= CONTEXTS, (windows, fetches)
    # Each window is a millisecond or two; a fetch that ignored them would be out during
    # nearly all (one goes out as each poll's records are handled, and waits 10 ms). A
    # commit that outlasts HOLD_INPUT_S (a stalled machine) may meet one.
    assert len(overlapping) <= len(windows) // 10, (
        f"{len(overlapping)} of {len(windows)} commits had an input fetch out")
