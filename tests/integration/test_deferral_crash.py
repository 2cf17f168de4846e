"""Budget safety of the deferral family through kill -9 of the worker, on the real broker.

Two deferral learners with a tight budget (B = 12, c_max = 1) get contexts in batches and, a
few batches later and in shuffled order, both feedback parts of each decision (full mode:
the model's reward always, the human's reward and cost when deferred), plus some duplicate
parts sent on purpose. Between batches the worker is killed with SIGKILL at random moments
(usually with records in flight) and restarted with the same app id, so it reads its state
back from the state log and resumes its inputs where the last commit left them.

Checked at the end:

- every learner entry ever committed to the state log (``l/<id>`` in ``<app_id>.state``) has
  ``spent + reserved <= B``;
- the final state applied every distinct feedback part exactly once: the statistics count
  every decision once, the deferrals and their costs once, the UCB arms were observed once
  per part, no reservation is left, nothing is partially settled;
- a decision published more than once (re-emitted after a restart) is identical every time;
- nothing was dead-lettered;
- every restart resumed from the latest commit (the input marks never go back, and each
  restart claimed its partitions). A dump of everything read goes to
  ``$TMPDIR/deferral-crash-dump.json``.

What makes this hold without Kafka transactions (see streams/statelog.py): a commit writes a
partition's state changes and the input offsets they cover in one record, decisions are
published only once that record is acknowledged, and a restart resumes at those offsets.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.streams.statelog_kafka import read_commits
from banditflow.streams.topics import state_topic

pytestmark = pytest.mark.integration

PREFIX = run_prefix("defcrash")
BUDGET = 12.0
EVENTS = 160  # per learner
BATCH = 20
LAG = 2  # feedback for a batch is sent this many batches later
KILLS_AT = (2, 4, 6)  # batches after which the worker is killed (at a random moment)
SEED = 20240611
DIM = 3
COMMON = {"dim": DIM, "budget": BUDGET, "horizon": 100_000, "feedback": "full", "c_max": 1.0}
LEARNERS: dict[str, tuple[str, dict[str, Any]]] = {
    "crash-arbitrary": ("arbitrary_human", {**COMMON, "defer_probability": 0.5}),
    # warm-up over the whole stream: UCB defers at random (seeded by event id) and learns
    "crash-ucb": ("ucb", {**COMMON, "warmup": 10_000}),
}


def test_budget_and_exactly_once_through_kill_minus_nine(
    broker, start_worker, producer: KafkaProducer, read_topic, wait_until, learner_entries
) -> None:
    started = time.monotonic()
    rng = np.random.default_rng(SEED)
    worker = start_worker(PREFIX, partitions=2)
    topics = worker.topics

    def send(topic: str, key: str, value: dict[str, Any]) -> None:
        producer.send(topic, key=key.encode(), value=json.dumps(value).encode())

    for lid, (algorithm, params) in LEARNERS.items():
        send(topics.learners, lid, {
            "learner_id": lid, "family": "deferral", "algorithm": algorithm, "params": params,
            "seed": 7, "feedback_timeout_s": 3600, "early_feedback_grace_s": 600,
        })
    producer.flush()

    decisions = read_topic(topics.decisions)
    deadletter = read_topic(topics.deadletter)
    # Outcomes the application will observe: decided by the driver's seed, not the worker.
    outcomes = {
        (lid, f"e{i}"): {
            "model_reward": float(rng.integers(2)),
            "human_reward": float(rng.integers(2)),
            "human_cost": round(float(rng.uniform(0.2, 1.0)), 3),
        }
        for lid in LEARNERS for i in range(EVENTS)
    }
    sent_parts: set[tuple[str, str, str]] = set()
    kills = restarts = duplicates_sent = 0

    def latest() -> dict[tuple[str, str], dict[str, Any]]:
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for record in decisions.poll():
            seen.setdefault((record["learner_id"], record["event_id"]), record)
        return seen

    def send_feedback(upto: int) -> None:
        """Every part not sent yet for decided events below ``upto``, shuffled, + duplicates."""
        decided = latest()
        parts = []
        for (lid, eid), record in decided.items():
            if int(eid[1:]) >= upto:
                continue
            names = ["model", "human"] if record["output"]["defer"] else ["model"]
            for part in names:
                if (lid, eid, part) not in sent_parts:
                    parts.append((lid, eid, part))
        rng.shuffle(parts)
        nonlocal duplicates_sent
        duplicates = [parts[i] for i in range(0, len(parts), 9)]  # application re-sends
        duplicates_sent += len(duplicates)
        for lid, eid, part in [*parts, *duplicates]:
            truth = outcomes[(lid, eid)]
            body = {"learner_id": lid, "event_id": eid, "part": part}
            if part == "model":
                body["model_reward"] = truth["model_reward"]
            else:
                body.update(human_reward=truth["human_reward"], human_cost=truth["human_cost"])
            send(topics.feedback, lid, body)
            sent_parts.add((lid, eid, part))
        producer.flush()

    batches = EVENTS // BATCH
    for batch in range(batches):
        for i in range(batch * BATCH, (batch + 1) * BATCH):
            for lid in LEARNERS:
                x = rng.uniform(-1.0, 1.0, DIM)
                x *= rng.uniform(0.2, 1.0) / np.linalg.norm(x)
                send(topics.contexts, lid,
                     {"learner_id": lid, "event_id": f"e{i}", "features": x.round(6).tolist()})
        producer.flush()
        if batch >= LAG:
            send_feedback((batch - LAG + 1) * BATCH)
        if batch in KILLS_AT:
            time.sleep(float(rng.uniform(0.0, 0.6)))  # kill mid-processing, at a random moment
            worker.stop(kill=True)
            kills += 1
            worker = start_worker(PREFIX, partitions=2, web_port=worker.web_port)
            restarts += 1
        else:
            wanted = len(LEARNERS) * (batch - LAG + 1) * BATCH
            decisions.wait_for(lambda _, wanted=wanted: len(latest()) >= wanted, 60)
    total = len(LEARNERS) * EVENTS
    decisions.wait_for(lambda _: len(latest()) >= total, 90)
    send_feedback(EVENTS)
    expected_parts = len(sent_parts)

    def settled_everything() -> bool:
        return all(
            (entries := learner_entries(PREFIX, lid))
            and entries[-1]["stats"].get("feedback", 0.0) >= EVENTS
            for lid in LEARNERS
        )

    try:
        wait_until(settled_everything, 60)
        time.sleep(1.0)  # anything still in flight (it must not change the counts below)
    except AssertionError:
        pass  # the checks below say what is missing
    commits = asyncio.run(read_commits(broker.connection, state_topic(PREFIX)))
    values = {lid: [commit.values()[f"l/{lid}"] for partition in commits.values()
                    for _, commit in partition if f"l/{lid}" in commit.values()]
              for lid in LEARNERS}
    dump = {"decisions": decisions.poll(), "dead": deadletter.poll(),
            "commits": {p: [(o, c.header(), c.values()) for o, c in cs]
                        for p, cs in commits.items()},
            "sent": sorted(sent_parts)}
    (Path(tempfile.gettempdir()) / "deferral-crash-dump.json").write_text(json.dumps(dump))
    # A restarted worker resumes where the last commit left: the input marks of the commits
    # a reader applies never go back (a stale recovery would redo events from older marks).
    for partition in commits.values():
        for (before_offset, before), (after_offset, after) in itertools.pairwise(partition):
            for stream, mark in before.marks.items():
                assert after.marks.get(stream, 0) >= mark, (
                    f"commit at offset {after_offset} resumes {stream} at "
                    f"{after.marks.get(stream)} after {mark} at offset {before_offset}"
                )
    claims = [c.epoch >> 32 for p in commits.values() for _, c in p if c.claim]
    assert len(claims) >= (restarts + 1) * 2  # every restart claimed both partitions

    # 1. The budget was never exceeded, not even transiently in a written state.
    max_committed = {}
    for lid in LEARNERS:
        entries = values[lid]
        committed = [e["state"]["spent"] + e["state"]["reserved"] for e in entries]
        max_committed[lid] = max(committed)
        assert max(committed) <= BUDGET + 1e-9, (lid, max(committed))

    # 2. and 3. Exactly once; re-emitted decisions identical; nothing dead-lettered.
    first = latest()
    emissions = Counter((r["learner_id"], r["event_id"]) for r in decisions.records)
    check_exactly_once(decisions.records, first, values, outcomes, expected_parts)
    assert deadletter.poll() == []
    print(
        f"\ncrash test: {kills} kills, {restarts} restarts, {total} decisions, "
        f"{sum(emissions.values()) - len(emissions)} re-emitted, {expected_parts} distinct "
        f"feedback parts (+{duplicates_sent} duplicates sent), "
        f"{sum(len(v) for v in values.values())} learner-state "
        f"values in the state log, max spent+reserved {max_committed} (B = {BUDGET}), "
        f"{time.monotonic() - started:.0f}s"
    )


def check_exactly_once(
    emitted: list[dict[str, Any]],
    first: dict[tuple[str, str], dict[str, Any]],
    values: dict[str, list[dict[str, Any]]],
    outcomes: dict[tuple[str, str], dict[str, float]],
    expected_parts: int,
) -> None:
    """Re-emitted decisions identical; every distinct feedback part applied exactly once."""
    # Re-emitted decisions are identical to the first emission.
    differing = sorted({
        (r["learner_id"], r["event_id"]) for r in emitted
        if r["output"] != first[(r["learner_id"], r["event_id"])]["output"]
        or r["learner_version"] != first[(r["learner_id"], r["event_id"])]["learner_version"]
    })
    assert not differing, [
        [r for r in emitted if (r["learner_id"], r["event_id"]) == key]
        for key in differing
    ]

    # Every distinct feedback part was applied exactly once.
    for lid in LEARNERS:
        final = values[lid][-1]
        stats, state = final["stats"], final["state"]
        ours = {eid: r for (owner, eid), r in first.items() if owner == lid}
        deferred = [eid for eid, r in ours.items() if r["output"]["defer"]]
        cost = sum(outcomes[(lid, eid)]["human_cost"] for eid in deferred)
        reward = sum(
            outcomes[(lid, eid)]["human_reward" if r["output"]["defer"] else "model_reward"]
            for eid, r in ours.items()
        )
        assert stats["decisions"] == EVENTS, (lid, stats)
        assert stats["feedback"] == EVENTS, (lid, stats)
        assert stats["deferred"] == len(deferred), (lid, stats, len(deferred))
        assert math.isclose(stats["cost"], cost, abs_tol=1e-6), (lid, stats, cost)
        assert math.isclose(stats["reward"], reward, abs_tol=1e-6), (lid, stats, reward)
        assert math.isclose(state["spent"], cost, abs_tol=1e-6), (lid, state["spent"], cost)
        assert state["reserved"] == pytest.approx(0.0, abs=1e-9)
        assert state["partial"] == {} and state["rounds"] == EVENTS
        assert len(deferred) > 0 and cost <= BUDGET
        if "model" in state:  # UCB: one observation per part
            assert state["model"]["count"] == EVENTS
            assert state["human"]["count"] == len(deferred)
    assert expected_parts == sum(
        1 + bool(r["output"]["defer"]) for r in first.values()
    )
