"""Two workers share the partitions; one is killed, the other is stopped with SIGTERM.

The survivor takes the partitions over from the state log (the dead worker's last commit,
the claim fences it) and the work goes on: every context decided, every feedback applied
exactly once, decisions seen twice identical. A SIGTERM'd worker commits, leaves the group
and hands its partitions over at once (the failover times are in the state-layer benchmark).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from conftest import decisions_consumer, run_prefix

pytestmark = pytest.mark.integration

PREFIX = run_prefix("failover")
LEARNERS = [f"fo-{i}" for i in range(8)]  # spread over the four partitions


def test_failover_after_kill_and_handover_after_sigterm(
    broker, start_worker, wait_until, state_of
) -> None:
    first = start_worker(PREFIX, partitions=4)
    second = start_worker(PREFIX, partitions=4)
    topics = first.topics
    # Both serve two partitions each (the first rebalanced when the second joined).
    wait_until(lambda: all((w.ready() or "").count(",") == 1 for w in (first, second)),
               timeout_s=30)
    decided: dict[str, dict[str, Any]] = {}
    differing: list[str] = []
    sent: list[str] = []

    async def drive() -> None:
        producer = AIOKafkaProducer(**broker.connection.aiokafka_kwargs(), linger_ms=5)
        await producer.start()
        consumer = await decisions_consumer(broker.connection, topics.decisions)
        for lid in LEARNERS:
            await producer.send(topics.learners, json.dumps(
                {"learner_id": lid, "family": "conformal", "algorithm": "sps",
                 "params": {"alpha": 0.8, "horizon": 10_000}, "feedback_timeout_s": 60}
            ).encode(), lid.encode())

        async def contexts(count: int) -> None:
            for _ in range(count):
                i = len(sent)
                lid = LEARNERS[i % len(LEARNERS)]
                body = {"learner_id": lid, "event_id": f"e{i}", "labels": ["a", "b", "c"],
                        "scores": [0.9, 0.5, 0.1 * (i % 10)]}
                sent.append(f"e{i}")
                await producer.send(topics.contexts, json.dumps(body).encode(), lid.encode())
                await asyncio.sleep(0.01)

        async def answer() -> None:
            while True:
                for records in (await consumer.getmany(timeout_ms=100)).values():
                    for record in records:
                        decision = json.loads(record.value)
                        eid, lid = decision["event_id"], decision["learner_id"]
                        if eid in decided:
                            if decided[eid]["output"] != decision["output"]:
                                differing.append(eid)
                            continue
                        decided[eid] = decision
                        await producer.send(topics.feedback, json.dumps(
                            {"learner_id": lid, "event_id": eid, "label": "a"}
                        ).encode(), lid.encode())

        answering = asyncio.create_task(answer())
        await contexts(300)
        first.process.kill()  # the survivor takes its partitions over
        await contexts(300)
        second.process.send_signal(signal.SIGTERM)  # leaves the group: a third takes over
        third = start_worker(PREFIX, partitions=4, wait=False)
        await contexts(300)
        deadline = time.monotonic() + 90
        while len(decided) < len(sent):
            assert time.monotonic() < deadline, (len(decided), len(sent), "\n".join(
                f"--- {w.log_path.name}\n" + "\n".join(
                    line for line in w.log().splitlines()
                    if "group_coordinator" in line or "banditflow" in line
                )[-3000:] for w in (first, second, third)
            ))
            await asyncio.sleep(0.2)
        answering.cancel()
        await asyncio.gather(answering, return_exceptions=True)
        await producer.stop()
        await consumer.stop()

    asyncio.run(drive())
    assert second.process.wait(timeout=30) == 0  # a clean exit on SIGTERM
    assert differing == []
    assert set(decided) == set(sent)
    per_learner = {lid: sum(1 for i in range(len(sent)) if i % len(LEARNERS) == n)
                   for n, lid in enumerate(LEARNERS)}

    def all_applied() -> bool:
        state = state_of(PREFIX)
        return all(state[f"l/{lid}"]["stats"].get("feedback") == count
                   for lid, count in per_learner.items())

    wait_until(all_applied, timeout_s=60)
    state = state_of(PREFIX)
    for lid, count in per_learner.items():
        stats, learner = state[f"l/{lid}"]["stats"], state[f"l/{lid}"]["state"]
        assert stats["decisions"] == count and stats["feedback"] == count, (lid, stats)
        assert learner["n"] == count, (lid, learner)  # each feedback applied once
    assert "Traceback" not in second.log()
