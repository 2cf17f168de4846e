"""kill -9 at 20 random moments under full load, on the embedded broker.

An application (this test) produces contexts for four conformal learners at a steady rate and
answers every decision with its semi-bandit feedback the moment it reads it. Meanwhile the
worker is killed with SIGKILL twenty times and restarted at once: mostly at a random moment
after it became ready, sometimes while it is still starting or recovering. Checked at the end:

- every context was decided, and every copy of a decision (one published again after a
  restart) is identical to the first;
- every feedback was applied exactly once: each learner's statistics count each decision
  once, its SPS state holds exactly as many observations, and it saw exactly the covered
  labels the application sent (nothing lost, nothing doubled);
- no decision was settled by its timeout although its feedback had been produced before the
  deadline (with a 60 s timeout and prompt answers, none times out at all);
- coverage and regret are those of a fault-free run of the same stream (the same contexts
  through the processors with every feedback applied at once), within noise;
- nothing was dead-lettered, and each restart resumed where the last commit left off.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer
from conftest import decisions_consumer, is_ready, run_prefix

from banditflow.offline.environments import GaussianScores
from banditflow.processors import Processor, Source
from banditflow.processors.records import DecisionRecord, Settled
from banditflow.streams.scrape import samples, value
from banditflow.streams.statelog_kafka import read_commits
from banditflow.streams.topics import state_topic

pytestmark = pytest.mark.integration

PREFIX = run_prefix("loadcrash")
LEARNERS = ["lc-a", "lc-b", "lc-c", "lc-d"]
RATE = 250.0  # contexts per second
KILLS = 20
TIMEOUT = 60.0  # longer than any restart here: no timeout is expected
SEED = 20261123
ENV = GaussianScores(labels=10, alpha=0.9)


def config(lid: str) -> dict[str, Any]:
    return {"learner_id": lid, "family": "conformal", "algorithm": "sps",
            "params": {"alpha": 0.9, "horizon": 40_000}, "feedback_timeout_s": TIMEOUT}


@dataclass
class Application:
    """What the application sent and saw."""

    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)  # event id -> body
    truth: dict[str, str] = field(default_factory=dict)
    sent_at: dict[str, float] = field(default_factory=dict)
    first: dict[str, dict[str, Any]] = field(default_factory=dict)  # first decision
    copies: int = 0
    differing: list[str] = field(default_factory=list)
    feedback_at: dict[str, float] = field(default_factory=dict)
    covered: dict[str, int] = field(default_factory=dict)  # learner -> covered labels sent
    order: list[tuple[str, str]] = field(default_factory=list)  # ("c"|"f", event id)


def test_kill_minus_nine_under_load(broker, start_worker, wait_until, state_of) -> None:
    rng = np.random.default_rng(SEED)
    app = Application(covered={lid: 0 for lid in LEARNERS})
    workers = [start_worker(PREFIX, partitions=2)]
    topics = workers[0].topics
    kills_during_startup = 0
    killed_at: list[float] = []

    async def drive() -> None:
        nonlocal kills_during_startup
        producer = AIOKafkaProducer(**broker.connection.aiokafka_kwargs(), linger_ms=5)
        await producer.start()
        consumer = await decisions_consumer(broker.connection, topics.decisions)
        for lid in LEARNERS:
            await producer.send(topics.learners, json.dumps(config(lid)).encode(), lid.encode())
        done = asyncio.Event()

        async def send_contexts() -> None:
            started, i = time.monotonic(), 0
            while not done.is_set():
                lid = LEARNERS[i % len(LEARNERS)]
                round_ = ENV.draw(rng)
                eid = f"e{i}"
                body = {"learner_id": lid, "event_id": eid, "ts": time.time(), **round_.context}
                app.contexts[eid], app.truth[eid] = body, round_.true_label
                app.sent_at[eid] = body["ts"]
                app.order.append(("c", eid))
                await producer.send(topics.contexts, json.dumps(body).encode(), lid.encode())
                i += 1
                await asyncio.sleep(max(0.0, started + i / RATE - time.monotonic()))

        async def answer() -> None:
            while True:
                fetched = await consumer.getmany(timeout_ms=100)
                for records in fetched.values():
                    for record in records:
                        decision = json.loads(record.value)
                        eid = decision["event_id"]
                        if eid in app.first:
                            app.copies += 1
                            first = app.first[eid]
                            if (decision["output"], decision["learner_version"]) != (
                                first["output"], first["learner_version"]
                            ):
                                app.differing.append(eid)
                            continue
                        app.first[eid] = decision
                        lid = decision["learner_id"]
                        label = app.truth[eid]
                        body = {"learner_id": lid, "event_id": eid}
                        if label in decision["output"]["labels"]:
                            body["label"] = label
                            app.covered[lid] += 1
                        else:
                            body["missed"] = True
                        app.feedback_at[eid] = time.time()
                        app.order.append(("f", eid))
                        await producer.send(topics.feedback, json.dumps(body).encode(),
                                            lid.encode())

        async def kill_and_restart() -> None:
            nonlocal kills_during_startup
            for kill in range(KILLS):
                worker = workers[-1]
                if kill % 4 == 3:  # while it is still starting or recovering
                    await asyncio.sleep(float(rng.uniform(0.0, 1.5)))
                    kills_during_startup += not await is_ready(worker.web_port)
                else:
                    deadline = time.monotonic() + 60
                    while not await is_ready(worker.web_port):
                        assert time.monotonic() < deadline, worker.log()[-3000:]
                        await asyncio.sleep(0.1)
                    await asyncio.sleep(float(rng.uniform(0.0, 2.0)))
                worker.process.kill()
                killed_at.append(time.time())
                await asyncio.to_thread(worker.process.wait)
                # Restarted as a supervisor would: same identity (web port), so it evicts
                # its dead predecessor from the group instead of waiting out its session.
                workers.append(
                    start_worker(PREFIX, partitions=2, wait=False, web_port=worker.web_port)
                )

        tasks = [asyncio.create_task(send_contexts()), asyncio.create_task(answer())]
        await kill_and_restart()
        done.set()
        await tasks[0]
        deadline = time.monotonic() + 120
        while len(app.first) < len(app.contexts):
            assert time.monotonic() < deadline, (len(app.first), len(app.contexts))
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # copies still in flight
        tasks[1].cancel()
        await asyncio.gather(tasks[1], return_exceptions=True)
        await producer.stop()
        await consumer.stop()

    asyncio.run(drive())
    worker = workers[-1]
    worker.wait_ready()
    events = len(app.contexts)
    per_learner = {lid: sum(1 for b in app.contexts.values() if b["learner_id"] == lid)
                   for lid in LEARNERS}

    def applied() -> float:
        text = worker.metrics()
        return sum(value(text, "banditflow_learner_feedback", learner_id=lid) or 0.0
                   for lid in LEARNERS)

    wait_until(lambda: applied() >= events, timeout_s=120)
    time.sleep(1.0)
    text = worker.metrics()
    dead = {dict(labels)["reason"]: v for (name, labels), v in samples(text).items()
            if name == "banditflow_dead_letters_total"}
    assert dead == {}

    # Every context decided; every copy of a decision identical to the first.
    assert set(app.first) == set(app.contexts)
    assert app.differing == []

    # The state log: the final entries, and the commits' marks never going back.
    commits = asyncio.run(read_commits(broker.connection, state_topic(PREFIX)))
    assert all(commits.values()), "the state log reads back empty"
    for partition in commits.values():
        for (_, before), (_, after) in itertools.pairwise(partition):
            assert all(after.marks.get(s, 0) >= m for s, m in before.marks.items())
    final = state_of(PREFIX)
    timeouts_unjustified: list[tuple[str, float, float, float]] = []
    for lid in LEARNERS:
        entry = final[f"l/{lid}"]
        stats, state = entry["stats"], entry["state"]
        count = per_learner[lid]
        assert stats["decisions"] == count, (lid, stats, count)
        assert stats["feedback"] == count, (lid, stats, count)
        assert state["n"] == count, (lid, state["n"], count)  # each observation once
        for eid, body in app.contexts.items():
            if body["learner_id"] != lid:
                continue
            assert f"d/{lid}/{eid}" not in final  # nothing left open
            record = DecisionRecord.from_json(final[f"s/{lid}/{eid}"])
            if record.settled_by is Settled.TIMEOUT and app.feedback_at[eid] < record.deadline:
                timeouts_unjustified.append(
                    (eid, app.sent_at[eid], app.feedback_at[eid], record.deadline)
                )
            assert record.settled_by is not None and record.pending is None
    assert timeouts_unjustified == []
    assert sum(final[f"l/{lid}"]["stats"].get("timed_out", 0.0) for lid in LEARNERS) == 0
    for lid in LEARNERS:  # what the learner saw is what the application sent
        assert final[f"l/{lid}"]["stats"].get("covered", 0.0) == app.covered[lid], lid

    # Fault-free reference: the same contexts, each feedback applied right after the
    # decision it answers (in the order the application sent them).
    reference = Processor()
    for lid in LEARNERS:
        reference.on_config(lid, json.dumps(config(lid)).encode(), Source("learners"), 0.0)
    t = 0.0
    for eid, body in app.contexts.items():
        t += 1.0
        decision = reference.on_context(json.dumps(body).encode(), Source("contexts"), t)
        labels = decision.decisions[0].output["labels"]
        answer = {"learner_id": body["learner_id"], "event_id": eid}
        answer.update({"label": app.truth[eid]} if app.truth[eid] in labels else {"missed": True})
        reference.on_feedback(json.dumps(answer).encode(), Source("feedback"), t)
    for lid in LEARNERS:
        crashed = final[f"l/{lid}"]["stats"]
        fault_free = reference.store.learners[lid].stats
        coverage = crashed["covered"] / crashed["feedback"]
        coverage_ref = fault_free["covered"] / fault_free["feedback"]
        assert coverage == pytest.approx(coverage_ref, abs=0.02), lid
        regret, regret_ref = crashed["regret_estimate"], fault_free["regret_estimate"]
        assert regret == pytest.approx(regret_ref, rel=0.3, abs=5.0), lid

    claims = sum(1 for partition in commits.values() for _, c in partition if c.claim)
    print(
        f"\nkill -9 under load: {KILLS} kills ({kills_during_startup} before ready), "
        f"{events} contexts at {RATE:.0f}/s + as many feedback, {app.copies} decisions "
        f"published twice (identical), {claims} claims; coverage "
        + ", ".join(
            f"{lid} {final[f'l/{lid}']['stats']['covered'] / per_learner[lid]:.3f} "
            f"(ref {reference.store.learners[lid].stats['covered'] / per_learner[lid]:.3f})"
            for lid in LEARNERS
        )
    )
