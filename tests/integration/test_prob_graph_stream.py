"""prob_graph end to end on the real embedded broker: a context-free learner per segment key,
partial feedback in parts, the explicit complete marker, a timeout, re-delivered feedback and
the per-arm pulls in /metrics."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.learners.prob_graph.scenarios import Environment, parse_scenario
from banditflow.streams.scrape import samples, value

pytestmark = pytest.mark.integration

SEGMENT = "segment-eu"  # one learner per segment key
TIMEOUT_S = 6.0
DECISIONS = 20
# Arm 0 is best; 1 reveals 0; 2 (poor) reveals every arm, itself included.
SCENARIO = parse_scenario(
    {
        "arms": 3,
        "means": [1.0, 0.7, 0.2],
        "edges": [[0, 1, 0.5], [1, 0, 1.0], [2, 0, 0.9], [2, 1, 0.9], [2, 2, 1.0]],
    }
)



def test_partial_feedback_complete_marker_timeout_dedupe_and_arm_pulls(
    broker, start_worker, producer: KafkaProducer, read_topic, wait_until
) -> None:
    worker = start_worker(run_prefix("pgraph"), partitions=2)
    topics = worker.topics

    def send(topic: str, body: dict) -> None:
        producer.send(topic, key=SEGMENT.encode(), value=json.dumps(body).encode())

    def feedback(event_id: str, **fields: object) -> dict:
        return {"learner_id": SEGMENT, "event_id": event_id, **fields}

    send(
        topics.learners,
        {
            "learner_id": SEGMENT,
            "family": "prob_graph",
            "algorithm": "lp_policy",
            "params": SCENARIO.learner_params(),
            "seed": 5,
            "feedback_timeout_s": TIMEOUT_S,
            "early_feedback_grace_s": 2.0,
        },
    )
    for i in range(DECISIONS):  # contexts carry only the envelope
        send(topics.contexts, {"learner_id": SEGMENT, "event_id": f"c{i}"})
    producer.flush()

    decisions = read_topic(topics.decisions)
    dead = read_topic(topics.deadletter)
    decided = {
        r["event_id"]: r
        for r in decisions.wait_for(lambda rs: len(rs) >= DECISIONS, timeout_s=40)
    }
    assert set(decided) == {f"c{i}" for i in range(DECISIONS)}
    arms = {eid: r["output"]["arm"] for eid, r in decided.items()}
    assert set(arms.values()) <= {0, 1, 2}
    assert all(r["output"]["branch"] for r in decided.values())

    # Every decision but the last: the revealed rewards in two partial events (distinct parts),
    # then the explicit complete marker. The last one gets one part and never completes.
    environment = Environment(SCENARIO)
    rng = np.random.default_rng(0)
    for i in range(DECISIONS):
        eid = f"c{i}"
        rewards = sorted(environment.reveal(arms[eid], rng).items())
        halves = [dict(rewards[: len(rewards) // 2]), dict(rewards[len(rewards) // 2 :])]
        for k, half in enumerate(halves):
            send(
                topics.feedback,
                feedback(
                    eid, part=f"p{k}", complete=False,
                    rewards={str(j): r for j, r in half.items()},
                ),
            )
            if i == DECISIONS - 1:
                break
        else:
            send(topics.feedback, feedback(eid, part="end", complete=True))
    # Re-delivered feedback: a partial part and the complete marker of c0 again (the same
    # records: a part sent again with other rewards would be contradicting_feedback).
    c0 = sorted(Environment(SCENARIO).reveal(arms["c0"], np.random.default_rng(0)).items())
    send(topics.feedback, feedback("c0", part="p0", complete=False,
                                   rewards={str(j): r for j, r in c0[: len(c0) // 2]}))
    send(topics.feedback, feedback("c0", part="end", complete=True))
    producer.flush()

    def metric(metric_name: str, **labels: str) -> float | None:
        return value(worker.metrics(), metric_name, learner_id=SEGMENT, **labels)

    # 19 decisions complete; the open one closes by its timeout (no observation learned).
    wait_until(
        lambda: metric("banditflow_learner_feedback") == DECISIONS, timeout_s=TIMEOUT_S + 20
    )
    assert metric("banditflow_learner_timeouts") == 1
    assert metric("banditflow_learner_decisions") == DECISIONS
    other = {
        dict(pairs)["name"]: sample
        for (sample_name, pairs), sample in samples(worker.metrics()).items()
        if sample_name == "banditflow_learner_value" and dict(pairs)["learner_id"] == SEGMENT
    }
    assert other["in_flight"] == 0

    # Feedback for the expired decision is dead-lettered, not applied.
    send(topics.feedback, feedback(f"c{DECISIONS - 1}", part="p1", complete=True, rewards={}))
    producer.flush()
    records = dead.wait_for(lambda rs: any(r["reason"] == "decision_expired" for r in rs))
    expired = [r for r in records if r["reason"] == "decision_expired"]
    assert expired[0]["event_id"] == f"c{DECISIONS - 1}"

    text = worker.metrics()
    pulls = Counter(arms.values())
    for arm in range(SCENARIO.arms):
        assert value(
            text, "banditflow_arm_pulls", learner_id=SEGMENT, arm=str(arm)
        ) == pulls.get(arm, 0), f"arm {arm}"
    assert (
        value(text, "banditflow_records_total", topic=topics.feedback, outcome="deduplicated")
        == 2
    )
    assert value(text, "banditflow_records_total", topic=topics.feedback, outcome="applied") == (
        3 * (DECISIONS - 1) + 1
    )
    assert value(text, "banditflow_dead_letters_total", reason="decision_expired") == 1
