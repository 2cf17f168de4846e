"""Hostile records on the real broker: every one dead-lettered with its reason, none costs a
valid record, none reaches a learner, the worker never stops or wedges.

Among them the records that used to escape: raw bytes whose dead letter, once decoded and
escaped, outgrew the producer's 1 MB limit (the dead letter now keeps the first 64 KiB and
the size), JSON nested 10,000 deep, a 5,000-digit number, an encoded surrogate and a record
with a null value (one parse, by pydantic, reports all of them as malformed JSON); and
feedback that contradicts its decision.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka import AIOKafkaProducer
from conftest import run_prefix

from banditflow.streams.scrape import samples, value

pytestmark = pytest.mark.integration

LID = "hostile"

HOSTILE: list[tuple[str, bytes | None, str]] = [
    ("contexts", b"\xff" * 400_000, "malformed_json"),
    ("feedback", b"\x01" * 200_000, "malformed_json"),
    ("contexts", b"[" * 10_000 + b"]" * 10_000, "malformed_json"),
    ("contexts", b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "malformed_json"),
    ("contexts", b'{"learner_id": "hostile", "event_id": "n", "labels": ["a"], "scores": ['
     + b"1" * 5_000 + b"]}", "malformed_json"),
    ("contexts", b'{"learner_id": "hostile", "event_id": "\xed\xa0\x80", "labels": ["a"],'
     b' "scores": [1.0]}', "malformed_json"),
    ("contexts", None, "malformed_json"),
    ("feedback", None, "malformed_json"),
    ("contexts", b'{"learner_id": "hostile", "event_id": "x", "labels": ["a"], '
     b'"scores": [NaN]}', "non_finite"),
]

# Feedback for decision ok0 (labels a, b, both in SPS's burn-in set) that cannot be true of it.
CONTRADICTING: list[dict[str, object]] = [
    {"label": "never-offered"},
    {"missed": True},  # the set held every label
    {"losses": {"0": 0.5}},  # graph_cb's field
    {"rewards": {"0": 1.0}},  # prob_graph's field
]


def test_hostile_records_each_get_one_dead_letter(
    broker, start_worker, read_topic, wait_until
) -> None:
    worker = start_worker(run_prefix("hostile"), partitions=2)
    topics = worker.topics

    async def produce() -> None:
        producer = AIOKafkaProducer(**broker.connection.aiokafka_kwargs(),
                                    max_request_size=4 << 20)
        await producer.start()
        await producer.send_and_wait(topics.learners, json.dumps(
            {"learner_id": LID, "family": "conformal", "algorithm": "sps",
             "params": {"alpha": 0.8, "horizon": 1000}}
        ).encode(), LID.encode())
        for i, (stream, raw, _) in enumerate(HOSTILE):
            await producer.send_and_wait(getattr(topics, stream), raw, LID.encode())
            valid = {"learner_id": LID, "event_id": f"ok{i}", "labels": ["a", "b"],
                     "scores": [1.0, 0.0]}
            await producer.send_and_wait(topics.contexts, json.dumps(valid).encode(),
                                         LID.encode())
        await producer.stop()

    async def answer() -> None:
        producer = AIOKafkaProducer(**broker.connection.aiokafka_kwargs())
        await producer.start()
        for body in [*CONTRADICTING, {"label": "a"}]:  # the true answer comes last
            await producer.send_and_wait(topics.feedback, json.dumps(
                {"learner_id": LID, "event_id": "ok0", **body}).encode(), LID.encode())
        await producer.stop()

    asyncio.run(produce())
    decisions = read_topic(topics.decisions)
    decisions.wait_for(lambda rs: len({r["event_id"] for r in rs}) >= len(HOSTILE), 60)
    asyncio.run(answer())
    expected = [reason for _, _, reason in HOSTILE] + ["contradicting_feedback"] * len(
        CONTRADICTING
    )
    dead = read_topic(topics.deadletter).wait_for(lambda rs: len(rs) >= len(expected), 60)
    assert sorted(d["reason"] for d in dead) == sorted(expected)
    # Nothing the contradicting feedback said reached the learner; the true answer did.
    wait_until(lambda: value(worker.metrics(), "banditflow_learner_feedback",
                             learner_id=LID) == 1)
    assert value(worker.metrics(), "banditflow_learner_coverage", learner_id=LID) == 1.0
    assert all(len(d["raw"]) <= 64 * 1024 for d in dead)
    assert sorted(d["raw_size"] for d in dead if d["raw_size"]) == [200_000, 400_000]
    text = worker.metrics()
    reasons = {dict(labels)["reason"] for (name, labels), _ in samples(text).items()
               if name == "banditflow_dead_letters_total"}
    assert "internal_error" not in reasons
    wait_until(lambda: worker.process.poll() is None and worker.ready() is not None)
    assert "Traceback" not in worker.log()
