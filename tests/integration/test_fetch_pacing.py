"""Feedback is fetched at its own pace once caught up (--feedback-fetch-interval-ms): the
contexts' fetches carry the contexts alone, and every feedback record is still applied.
Counted where an operator sees it, on the worker's /metrics (banditflow_input_fetches_total).
(A backlog of feedback is read with every fetch: tests/benchmarks/bench_state_layer.py's
throughput, feedback included.)"""

from __future__ import annotations

import time

from conftest import run_prefix, send_json
from kafka import KafkaProducer

from banditflow.streams.scrape import value

CONTEXTS = 40
SPACING_S = 0.1  # 4 s of contexts, each answered with feedback as its decision comes


def run_with_feedback(start_worker, producer: KafkaProducer, read_topic, wait_until,
                      interval_ms: float) -> tuple[dict[str, float], float]:
    """A worker at ``interval_ms``, given CONTEXTS contexts and the feedback of each decision
    as it is read; its fetch answers per stream once every feedback is applied, and the
    seconds from the first context to then."""
    worker = start_worker(run_prefix(f"pacing{interval_ms:g}"), partitions=1,
                          extra_args=["--feedback-fetch-interval-ms", str(interval_ms)])
    topics, lid = worker.topics, "pace"
    send_json(producer, topics.learners, lid, {
        "learner_id": lid, "family": "conformal", "algorithm": "sps",
        "params": {"alpha": 0.9, "horizon": 1000},
    })
    producer.flush()
    decisions = read_topic(topics.decisions)
    started = time.monotonic()
    answered = 0
    for i in range(CONTEXTS):
        send_json(producer, topics.contexts, lid, {
            "learner_id": lid, "event_id": f"e{i}", "labels": ["a", "b"], "scores": [0.9, 0.1],
        })
        producer.flush()
        time.sleep(SPACING_S)
        for decision in decisions.poll()[answered:]:
            assert decision is not None
            send_json(producer, topics.feedback, lid,
                      {"learner_id": lid, "event_id": decision["event_id"], "label": "a"})
            answered += 1
        producer.flush()
    for decision in decisions.wait_for(lambda rs: len(rs) == CONTEXTS, 20)[answered:]:
        assert decision is not None
        send_json(producer, topics.feedback, lid,
                  {"learner_id": lid, "event_id": decision["event_id"], "label": "a"})
    producer.flush()

    def applied() -> float:
        return value(worker.metrics(), "banditflow_records_total", topic=topics.feedback,
                     outcome="applied") or 0.0

    wait_until(lambda: applied() == CONTEXTS, 30)
    elapsed = time.monotonic() - started
    text = worker.metrics()
    fetches = {stream: value(text, "banditflow_input_fetches_total", stream=stream) or 0.0
               for stream in ("contexts", "feedback", "truth")}
    worker.stop()
    return fetches, elapsed


def test_caught_up_feedback_is_fetched_every_interval_not_with_every_fetch(
    start_worker, producer: KafkaProducer, read_topic, wait_until
) -> None:
    paced, elapsed = run_with_feedback(start_worker, producer, read_topic, wait_until, 500)
    # The contexts are fetched every fetch wait (10 ms on the embedded broker) or sooner.
    assert paced["contexts"] > 100, paced
    # Feedback and truth: about once per 500 ms once caught up, and once more for each time
    # they are resumed with records unread (a record arrives while paused: it is read, and
    # the partition paused again after the next answer).
    for stream in ("feedback", "truth"):
        assert paced[stream] <= 3 * elapsed / 0.5 + 10, (stream, paced, elapsed)
        assert paced[stream] >= 1, paced


def test_at_interval_0_feedback_is_fetched_with_every_fetch(
    start_worker, producer: KafkaProducer, read_topic, wait_until
) -> None:
    every, _ = run_with_feedback(start_worker, producer, read_topic, wait_until, 0)
    assert every["feedback"] >= 0.9 * every["contexts"] > 90, every
