"""Feedback is fetched at its own pace while contexts flow (--feedback-fetch-interval-ms): the
contexts' fetches carry the contexts alone, and every feedback record is still applied; a
fetch that brings nothing ends the pause, so feedback after a quiet spell is read at once.
Counted where an operator sees it, on the worker's /metrics (banditflow_input_fetches_total,
banditflow_records_total). (A backlog of feedback is read with every fetch:
tests/benchmarks/bench_state_layer.py's throughput, feedback included.)"""

from __future__ import annotations

import threading
import time

from conftest import run_prefix, send_json
from kafka import KafkaProducer

from banditflow.streams.scrape import value

FLOW_S = 4.0  # contexts back to back (one send acknowledged, then the next) for so long
LID = "pace"
STREAMS = ("contexts", "feedback", "truth")


def paced_worker(start_worker, producer: KafkaProducer, name: str, interval_ms: float):
    worker = start_worker(run_prefix(name), partitions=1,
                          extra_args=["--feedback-fetch-interval-ms", str(interval_ms)])
    send_json(producer, worker.topics.learners, LID, {
        "learner_id": LID, "family": "conformal", "algorithm": "sps",
        "params": {"alpha": 0.9, "horizon": 10_000},
    })
    return worker


def context(i: int) -> dict[str, object]:
    return {"learner_id": LID, "event_id": f"e{i}", "labels": ["a", "b"], "scores": [0.9, 0.1]}


def feedback(decision: dict[str, object] | None) -> dict[str, object]:
    assert decision is not None
    return {"learner_id": LID, "event_id": decision["event_id"], "label": "a"}


def applied(worker) -> float:
    return value(worker.metrics(), "banditflow_records_total", topic=worker.topics.feedback,
                 outcome="applied") or 0.0


def fetches(worker) -> dict[str, float]:
    text = worker.metrics()
    return {stream: value(text, "banditflow_input_fetches_total", stream=stream) or 0.0
            for stream in STREAMS}


def flow(start_worker, producer: KafkaProducer, read_topic, wait_until,
         interval_ms: float) -> dict[str, float]:
    """A worker at ``interval_ms`` given contexts back to back for FLOW_S, each decision
    answered with feedback as it is read (on this thread, the contexts on another); its
    fetch answers per stream while the contexts flowed, once every feedback is applied."""
    worker = paced_worker(start_worker, producer, f"pacing{interval_ms:g}", interval_ms)
    decisions = read_topic(worker.topics.decisions)
    send_json(producer, worker.topics.contexts, LID, context(0))
    decisions.wait_for(lambda rs: len(rs) == 1, 30)
    sent, answered = [1], 0

    def send_contexts() -> None:
        until = time.monotonic() + FLOW_S
        while time.monotonic() < until:
            send_json(producer, worker.topics.contexts, LID, context(sent[0]))
            sent[0] += 1

    before = fetches(worker)
    sender = threading.Thread(target=send_contexts)
    sender.start()
    while sender.is_alive() or answered < len(decisions.records):
        for decision in decisions.poll()[answered:]:
            send_json(producer, worker.topics.feedback, LID, feedback(decision))
            answered += 1
    sender.join()
    during = fetches(worker)
    for decision in decisions.wait_for(lambda rs: len(rs) == sent[0], 30)[answered:]:
        send_json(producer, worker.topics.feedback, LID, feedback(decision))
    wait_until(lambda: applied(worker) == sent[0], 30)
    assert sent[0] > 100, sent  # contexts did flow
    return {stream: during[stream] - before[stream] for stream in STREAMS}


def test_while_contexts_flow_caught_up_feedback_is_not_fetched_with_them(
    start_worker, producer: KafkaProducer, read_topic, wait_until
) -> None:
    paced = flow(start_worker, producer, read_topic, wait_until, 500)
    # Feedback and truth: about once per pause (up to 500 ms, shorter as feedback comes
    # faster: 100 records' worth) and once more for each fetch that brought nothing (the
    # contexts paused), against every fetch of the contexts at interval 0 (below).
    assert paced["contexts"] > 100, paced
    for stream in ("feedback", "truth"):
        assert 1 <= paced[stream] <= 0.5 * paced["contexts"], paced


def test_at_interval_0_feedback_is_fetched_with_every_fetch(
    start_worker, producer: KafkaProducer, read_topic, wait_until
) -> None:
    every = flow(start_worker, producer, read_topic, wait_until, 0)
    assert every["feedback"] >= 0.9 * every["contexts"] > 100, every


def test_feedback_after_a_quiet_spell_does_not_wait_out_the_pause(
    start_worker, producer: KafkaProducer, read_topic, wait_until
) -> None:
    """Paced at 20 s: with no feedback coming, its partition is paused for the whole 20 s
    (what 100 records take at their rate, capped at the interval) each time it is caught up.
    A fetch that brings nothing (no context waits) resumes it: feedback sent after a quiet
    spell is applied within seconds, each of three times (waiting out the pause, each would
    be applied within 3 s with a chance of about 3 in 20)."""
    worker = paced_worker(start_worker, producer, "pacing-quiet", 20_000)
    decisions = read_topic(worker.topics.decisions)
    for i in range(3):
        send_json(producer, worker.topics.contexts, LID, context(i))
        decision = decisions.wait_for(lambda rs, n=i + 1: len(rs) == n, 30)[i]
        time.sleep(1.0)  # quiet: the feedback partition is caught up, and paused
        send_json(producer, worker.topics.feedback, LID, feedback(decision))
        wait_until(lambda n=i + 1: applied(worker) == n, 3)
