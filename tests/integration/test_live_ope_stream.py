"""Live OPE end to end on the embedded broker: a graph_cb learner whose config names two
candidate policies, contexts and the played actions' losses through a real worker, and the
``banditflow_ope_*`` gauges on its /metrics endpoint: the logged policy's IPS is the mean
logged reward, the uniform candidate's IPS and SNIPS are what ``banditflow ope`` computes
from the published decisions, and a restarted worker serves the same estimates (they live in
the state log with the learner)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.processors.estimators import MIN_PROPENSITY, Sums
from banditflow.streams.scrape import value

pytestmark = pytest.mark.integration

PREFIX = run_prefix("liveope")
LID = "ranker"
ACTIONS = 3
EVENTS = 120
PARAMS = {"actions": ACTIONS, "feature_dim": 2, "graph_kind": "bandit"}


def test_live_ope_gauges_on_a_real_worker(
    broker, start_worker, producer: KafkaProducer, read_topic, wait_until
) -> None:
    worker = start_worker(PREFIX, partitions=2)
    topics = worker.topics

    def send(topic: str, body: dict[str, Any]) -> None:
        producer.send(topic, key=LID.encode(), value=json.dumps(body).encode())

    send(topics.learners, {
        "learner_id": LID, "family": "graph_cb", "algorithm": "epsilon_greedy", "seed": 2,
        "params": {**PARAMS, "epsilon": 0.3}, "feedback_timeout_s": 600,
        "candidates": {
            "uniform": {"algorithm": "epsilon_greedy", "params": {**PARAMS, "epsilon": 1.0}},
            "greedy": {"algorithm": "epsilon_greedy", "params": {**PARAMS, "epsilon": 0.05},
                       "seed": 5, "explore_eval_bound": 0.1},
        },
    })
    rng = np.random.default_rng(3)
    contexts = {f"e{i}": rng.uniform(-1, 1, size=2).round(4).tolist() for i in range(EVENTS)}
    for event_id, x in contexts.items():
        send(topics.contexts, {"learner_id": LID, "event_id": event_id, "features": x})
    producer.flush()
    decisions = {r["event_id"]: r["output"] for r in read_topic(topics.decisions).wait_for(
        lambda rs: len({r["event_id"] for r in rs}) >= EVENTS, 45)}
    rewards, weights = [], []
    for event_id, x in contexts.items():
        action, p = decisions[event_id]["action"], decisions[event_id]["p"]
        loss = round(0.2 + 0.3 * action + 0.1 * x[0], 4)
        rewards.append(-loss)
        weights.append((1.0 / ACTIONS) / max(p[action], MIN_PROPENSITY))
        send(topics.feedback, {"learner_id": LID, "event_id": event_id,
                               "losses": {str(action): loss}})
    producer.flush()

    def gauge(text: str, name: str, **labels: str) -> float | None:
        return value(text, name, learner_id=LID, **labels)

    wait_until(lambda: gauge(worker.metrics(), "banditflow_ope_rounds", policy="uniform")
               == EVENTS)
    text = worker.metrics()
    for policy in ("logged", "uniform", "greedy"):
        assert gauge(text, "banditflow_ope_rounds", policy=policy) == EVENTS
        for estimator in ("ips", "snips", "dr"):
            low, estimate, high = (
                gauge(text, "banditflow_ope_estimate", policy=policy, estimator=estimator,
                      bound=bound) for bound in ("ci_low", "value", "ci_high"))
            assert low is not None and estimate is not None and high is not None
            assert low <= estimate <= high, (policy, estimator)
        assert 0 < gauge(text, "banditflow_ope_effective_sample_size", policy=policy) <= EVENTS
    assert gauge(text, "banditflow_ope_estimate", policy="logged", estimator="ips",
                 bound="value") == pytest.approx(np.mean(rewards))
    w, r = np.array(weights), np.array(rewards)
    batch = Sums.of(w, r)
    for estimator, expected in (("ips", batch.ips()), ("snips", batch.snips())):
        for bound in ("value", "ci_low", "ci_high"):
            assert gauge(text, "banditflow_ope_estimate", policy="uniform", estimator=estimator,
                         bound=bound) == pytest.approx(getattr(expected, bound), rel=1e-9)
    for estimator in ("ips", "dr"):  # the paired difference from the logged policy
        difference = gauge(text, "banditflow_ope_difference", policy="uniform",
                           estimator=estimator, bound="value")
        assert difference == pytest.approx(
            gauge(text, "banditflow_ope_estimate", policy="uniform", estimator=estimator,
                  bound="value")
            - gauge(text, "banditflow_ope_estimate", policy="logged", estimator=estimator,
                    bound="value"))
    learned = gauge(text, "banditflow_ope_learned_rounds", policy="greedy")
    assert learned is not None and 0 < learned < EVENTS

    # A restarted worker recovers the estimates from the state log.
    worker.stop()
    restarted = start_worker(PREFIX, partitions=2)
    send(topics.contexts, {"learner_id": LID, "event_id": "after", "features": [0.0, 0.0]})
    producer.flush()  # (a new decision makes the worker export the learner's gauges)
    wait_until(lambda: gauge(restarted.metrics(), "banditflow_ope_rounds", policy="uniform")
               == EVENTS)
    again = restarted.metrics()
    for policy in ("logged", "uniform", "greedy"):
        for estimator in ("ips", "snips", "dr"):
            labels = {"policy": policy, "estimator": estimator, "bound": "value"}
            assert (gauge(again, "banditflow_ope_estimate", **labels)
                    == gauge(text, "banditflow_ope_estimate", **labels))
    for policy in ("logged", "uniform", "greedy"):
        assert gauge(again, "banditflow_ope_skipped_rounds", policy=policy) == 0
    assert gauge(again, "banditflow_ope_clipped_rounds", policy="greedy") == 0

    # Removing every candidate removes the learner's live OPE series (none left stale).
    send(topics.learners, {
        "learner_id": LID, "family": "graph_cb", "algorithm": "epsilon_greedy", "seed": 2,
        "params": {**PARAMS, "epsilon": 0.3}, "feedback_timeout_s": 600})
    producer.flush()

    def ope_series(text: str) -> list[str]:
        return [line for line in text.splitlines()
                if line.startswith("banditflow_ope_") and f'learner_id="{LID}"' in line]

    wait_until(lambda: not ope_series(restarted.metrics()))
