"""End to end on the real embedded broker: a LearnerConfig from kafka-python, contexts from
the third-party client kcat, decisions consumed, feedback produced, /metrics scraped."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.offline.environments import GaussianScores
from banditflow.streams.scrape import value
from banditflow.streams.topics import partition_for

pytestmark = pytest.mark.integration

LID = "shop"


def kcat_produce(bootstrap: str, topic: str, lines: list[tuple[str, str]]) -> None:
    """Produce ``key<TAB>value`` lines with Debian's kcat, through ``banditflow kcat``: on
    an external broker it hands kcat the client configuration of the suite's environment
    (BANDITFLOW_KAFKA_CONFIG, BANDITFLOW_KAFKA_*), as to every banditflow process."""
    payload = "".join(f"{key}\t{value}\n" for key, value in lines)
    subprocess.run([sys.executable, "-m", "banditflow.streams.cli", "kcat", "-P", "-b", bootstrap,
                    "-t", topic, "-K", "\t"], input=payload.encode(), check=True, timeout=60)


@pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat not installed (apt-get install kcat)"
)
def test_contexts_decisions_feedback_metrics_and_dead_letters(
    broker, start_worker, producer: KafkaProducer, read_topic, wait_until
) -> None:
    worker = start_worker(run_prefix("pipe"), partitions=3,
                          extra_args=["--max-event-bytes", "3000"])
    topics = worker.topics
    producer.send(
        topics.learners,
        key=LID.encode(),
        value=json.dumps(
            {
                "learner_id": LID,
                "family": "conformal",
                "algorithm": "sps",
                "params": {"alpha": 0.8, "horizon": 400},
                "feedback_timeout_s": 120,
                "early_feedback_grace_s": 1.0,
            }
        ).encode(),
    )
    producer.flush()

    env = GaussianScores(labels=8, alpha=0.8)
    rng = np.random.default_rng(7)
    truth: dict[str, str] = {}

    def contexts(start: int, count: int) -> list[tuple[str, str]]:
        lines = []
        for i in range(start, start + count):
            round_ = env.draw(rng)
            truth[f"e{i}"] = round_.true_label
            lines.append(
                (LID, json.dumps({"learner_id": LID, "event_id": f"e{i}", **round_.context}))
            )
        return lines

    bad = {
        "malformed_json": "{not json",
        "non_finite": json.dumps(
            {"learner_id": LID, "event_id": "b1", "labels": ["a"], "scores": [float("nan")]}
        ),
        "invalid_schema": json.dumps(
            {"learner_id": LID, "event_id": "b2", "labels": ["a", "a"], "scores": [1, 2]}
        ),
        "oversize": json.dumps(
            {
                "learner_id": LID,
                "event_id": "b3",
                "labels": [f"l{i}" for i in range(300)],
                "scores": [0.5] * 300,
            }
        ),
    }
    first = contexts(0, 200)
    # Malformed records interleaved with valid ones: each goes to deadletter, the rest decide.
    lines = [
        *first[:10],
        (LID, bad["malformed_json"]),
        *first[10:50],
        (LID, bad["non_finite"]),
        *first[50:80],
        (LID, bad["invalid_schema"]),
        (LID, bad["oversize"]),
        *first[80:],
    ]
    kcat_produce(broker.bootstrap, topics.contexts, lines)
    # A record on the wrong partition (a producer with another partitioner) is dead-lettered.
    wrong = (partition_for(LID, 3) + 1) % 3
    producer.send(
        topics.contexts,
        key=LID.encode(),
        partition=wrong,
        value=json.dumps(
            {"learner_id": LID, "event_id": "b4", "labels": ["a"], "scores": [1]}
        ).encode(),
    )
    producer.flush()

    decisions = read_topic(topics.decisions)
    dead = read_topic(topics.deadletter)

    def decided(records: list[dict]) -> dict[str, dict]:
        return {r["event_id"]: r for r in records if r["learner_id"] == LID}

    def send_feedback(ids: list[str]) -> None:
        seen = decided(decisions.records)
        for event_id in ids:
            label = truth[event_id]
            body = {"learner_id": LID, "event_id": event_id}
            body.update(
                {"label": label}
                if label in seen[event_id]["output"]["labels"]
                else {"missed": True}
            )
            producer.send(topics.feedback, key=LID.encode(), value=json.dumps(body).encode())
        producer.flush()

    decisions.wait_for(lambda rs: len(decided(rs)) >= 200)
    send_feedback([f"e{i}" for i in range(200)])
    # Feedback re-delivered (duplicate) and feedback for an event that never existed.
    send_feedback(["e3", "e4"])
    producer.send(
        topics.feedback,
        key=LID.encode(),
        value=json.dumps({"learner_id": LID, "event_id": "ghost", "missed": True}).encode(),
    )
    producer.flush()

    # Wait until the worker has applied them, then a second wave decided with what it learned.
    def metric(name: str, **labels: str) -> float | None:
        return value(worker.metrics(), name, **labels)

    # (200 feedbacks leave SPS's burn-in: eps_n <= 1 - alpha from n = 143 for T = 400.)
    wait_until(lambda: metric("banditflow_learner_feedback", learner_id=LID) == 200)
    kcat_produce(broker.bootstrap, topics.contexts, contexts(200, 100))
    decisions.wait_for(lambda rs: len(decided(rs)) >= 300)
    send_feedback([f"e{i}" for i in range(200, 300)])
    wait_until(lambda: metric("banditflow_learner_feedback", learner_id=LID) == 300)

    by_id = decided(decisions.records)
    assert set(by_id) == {f"e{i}" for i in range(300)}  # every valid context, none of the bad
    assert all(not r["redelivered"] for r in by_id.values())
    later = [by_id[f"e{i}"]["output"] for i in range(200, 300)]
    assert all(o["threshold"] is not None for o in later), "the learner left burn-in"
    assert np.mean([o["set_size"] for o in later]) < 8, "sets shrink once tau rises"
    # No feedback arrived during the second wave: one threshold, the learner's current one.
    assert len({o["threshold"] for o in later}) == 1

    reasons = {}
    dead.wait_for(
        lambda rs: (
            {
                "malformed_json",
                "non_finite",
                "invalid_schema",
                "oversize",
                "misrouted",
                "feedback_without_decision",
            }
            <= {r["reason"] for r in rs}
        ),
        timeout_s=30,
    )
    for record in dead.records:
        reasons.setdefault(record["reason"], []).append(record)
    assert reasons["malformed_json"][0]["raw"] == bad["malformed_json"]
    assert reasons["malformed_json"][0]["source_topic"] == topics.contexts
    assert reasons["malformed_json"][0]["offset"] is not None
    assert "finite number" in reasons["non_finite"][0]["detail"]
    assert "duplicate label" in reasons["invalid_schema"][0]["detail"]
    assert "3000" in reasons["oversize"][0]["detail"]
    assert "murmur2" in reasons["misrouted"][0]["detail"]
    assert reasons["feedback_without_decision"][0]["event_id"] == "ghost"

    covered = sum(truth[e] in by_id[e]["output"]["labels"] for e in by_id)
    text = worker.metrics()
    assert value(text, "banditflow_learner_decisions", learner_id=LID) == 300
    assert value(text, "banditflow_learner_coverage", learner_id=LID) == pytest.approx(
        covered / 300
    )
    sizes = [r["output"]["set_size"] for r in by_id.values()]
    assert value(text, "banditflow_learner_mean_set_size", learner_id=LID) == pytest.approx(
        np.mean(sizes)
    )
    assert value(text, "banditflow_learner_threshold", learner_id=LID) >= later[0]["threshold"]
    assert value(text, "banditflow_regret", learner_id=LID, kind="estimate") > 0
    assert (
        value(text, "banditflow_records_total", topic=topics.feedback, outcome="deduplicated") == 2
    )
    for reason in (
        "malformed_json",
        "non_finite",
        "invalid_schema",
        "oversize",
        "misrouted",
        "feedback_without_decision",
    ):
        assert value(text, "banditflow_dead_letters_total", reason=reason) == 1, reason
    assert value(text, "banditflow_decision_latency_seconds_count") == 300
    assert value(text, "banditflow_feedback_delay_seconds_count") == 300
    # Where a decision's time inside the worker went: queued for its commit, then the commit's
    # stages, each taking time (a stage stamped at the wrong step, or never, reads 0 here, and
    # the one after it then takes the whole commit).
    assert value(text, "banditflow_decision_queued_seconds_count") == 300
    queued = value(text, "banditflow_decision_queued_seconds_sum")
    assert 0 < queued < value(text, "banditflow_decision_in_worker_seconds_sum")
    commit = value(text, "banditflow_commit_seconds_sum")
    stages = {stage: value(text, "banditflow_commit_stage_seconds_sum", stage=stage)
              for stage in ("cut", "state", "outputs")}
    assert all(0 < seconds < commit for seconds in stages.values()), (stages, commit)
    if shutil.which("promtool"):
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
        )
        assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()

