"""banditflow.Client and AsyncClient on the real embedded broker and a real worker: learner
administration, concurrent decisions over the four families each matched to its own event,
local validation, the worker's dead letters raised as Rejected at once, timeouts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from conftest import run_prefix

from banditflow import AsyncClient, Client, Decision, DecisionTimeout, Rejected
from banditflow.schemas import Limits
from banditflow.streams.topics import partition_for

pytestmark = pytest.mark.integration

PARTITIONS = 4
GRAPH = [[1, 1, 0], [0, 1, 0], [0, 0, 1]]


def family_configs(suffix: str = "") -> dict[str, dict[str, Any]]:
    """One learner per family (the README's examples)."""
    return {
        "conformal": {"learner_id": f"shop{suffix}", "family": "conformal", "algorithm": "sps",
                      "params": {"target_coverage": 0.9, "horizon": 10000}},
        "graph_cb": {"learner_id": f"router{suffix}", "family": "graph_cb",
                     "algorithm": "squarecb_g", "params": {"actions": 3, "feature_dim": 2}},
        "deferral": {"learner_id": f"triage{suffix}", "family": "deferral", "algorithm": "ucb",
                     "params": {"dim": 2, "budget": 50, "horizon": 1000}},
        "prob_graph": {"learner_id": f"arms{suffix}", "family": "prob_graph",
                       "algorithm": "lp_policy",
                       "params": {"arms": 3, "edges": [[0, 1, 0.5], [1, 0, 1.0], [2, 0, 0.9],
                                                       [2, 1, 0.9], [2, 2, 1.0]]}},
    }


CONTEXTS: dict[str, dict[str, Any]] = {
    "conformal": {"labels": ["cat", "dog", "fox"], "scores": [2.1, 0.3, -1.0]},
    "graph_cb": {"features": [0.2, 0.7], "graph": GRAPH},
    "deferral": {"features": [0.6, 0.8]},
    "prob_graph": {},
}


def spread_suffix() -> str:
    """A suffix that puts the four families' learners on four different partitions."""
    for n in range(1000):
        ids = [c["learner_id"] for c in family_configs(f"-{n}").values()]
        if len({partition_for(i, PARTITIONS) for i in ids}) == 4:
            return f"-{n}"
    raise AssertionError("no suffix spreads the learners")


def test_concurrent_decisions_each_get_their_own(broker, start_worker) -> None:
    worker = start_worker(run_prefix("client"), partitions=PARTITIONS)
    configs = family_configs(spread_suffix())
    calls = 2000

    async def run() -> tuple[list[tuple[str, str, Decision]], float]:
        async with AsyncClient(broker.connection, prefix=worker.prefix) as bf:
            for config in configs.values():
                await bf.learners.create(config)
            assert [c.learner_id for c in await bf.learners.list()] == sorted(
                c["learner_id"] for c in configs.values()
            )
            names = list(configs)

            async def one(i: int) -> tuple[str, str, Decision]:
                name = names[i % 4]
                lid, eid = configs[name]["learner_id"], f"c{i}"
                return lid, eid, await bf.decide(lid, event_id=eid, timeout=120,
                                                 **CONTEXTS[name])

            started = time.monotonic()
            results = await asyncio.gather(*(one(i) for i in range(calls)))
            return results, time.monotonic() - started

    results, took = asyncio.run(run())
    assert len(results) == calls
    for lid, eid, decision in results:
        assert (decision.learner_id, decision.event_id) == (lid, eid)
        assert decision.record["event_id"] == eid and decision.learner_version == 1
    by_family = {d.family: d.output for _, _, d in results}
    assert set(by_family) == set(configs)
    assert set(by_family["conformal"]) == {"labels", "threshold", "set_size"}
    assert by_family["graph_cb"]["action"] in range(3)
    assert "defer" in by_family["deferral"]
    assert by_family["prob_graph"]["arm"] in range(3)
    print(f"{calls} concurrent decide calls in {took:.1f}s")


def test_sync_client_administration_validation_and_rejections(broker, start_worker) -> None:
    # The worker reads at most 5 labels, the client allows more: its "oversize" dead letter
    # (of a record it could not read, so without an event id) must reach the call.
    worker = start_worker(run_prefix("clientsync"), partitions=2, extra_args=["--max-labels", "5"])
    conformal = family_configs()["conformal"]
    graph_cb = family_configs()["graph_cb"]
    with Client(broker.connection, prefix=worker.prefix, timeout=30) as bf:
        with pytest.raises(Rejected) as refused:
            bf.learners.create({**graph_cb, "params": {"actions": 0, "feature_dim": 2}})
        assert refused.value.reason == "invalid_config"
        with pytest.raises(Rejected) as refused:
            bf.learners.create({**conformal, "colour": "red"})
        assert refused.value.reason == "invalid_schema" and "colour" in refused.value.detail
        created = bf.learners.create(conformal)
        assert created.learner_id == "shop"
        bf.learners.create(graph_cb)
        with pytest.raises(Rejected) as refused:
            bf.learners.create(conformal)
        assert refused.value.reason == "learner_exists"

        d = bf.decide("shop", labels=["cat", "dog"], scores=[2.1, 0.3])
        assert len(d.event_id) == 32 and d.output["set_size"] == 2
        bf.feedback("shop", d.event_id, label="cat")
        with pytest.raises(ValueError, match="carries nothing"):
            bf.feedback("shop", d.event_id)
        with pytest.raises(Rejected) as refused:
            bf.feedback("shop", d.event_id, losses={"0": 0.5})
        assert refused.value.reason == "contradicting_feedback"
        with pytest.raises(Rejected) as refused:
            bf.decide("shop", labels=["cat"], scores=[float("nan")])
        assert refused.value.reason == "non_finite"

        # A malformed context, refused before it is produced.
        started = time.monotonic()
        with pytest.raises(Rejected) as refused:
            bf.decide("shop", labels="cat", scores=[1.0])
        assert refused.value.reason == "invalid_schema"
        assert time.monotonic() - started < 1.0
        # An unknown learner, refused at once (the worker would hold it ten seconds).
        started = time.monotonic()
        with pytest.raises(Rejected) as refused:
            bf.decide("nobody", labels=["a"], scores=[1.0])
        assert refused.value.reason == "unknown_learner"
        assert time.monotonic() - started < 1.0

        # The worker's own dead letters, raised as soon as they are published.
        started = time.monotonic()
        with pytest.raises(Rejected) as refused:
            bf.decide("router", features=[0.1, 0.2, 0.3], graph=GRAPH)  # feature_dim is 2
        assert refused.value.reason == "learner_rejected"
        assert time.monotonic() - started < 5.0
        started = time.monotonic()
        with pytest.raises(Rejected) as refused:
            bf.decide("shop", labels=list("abcdefg"), scores=[1.0] * 7)
        assert refused.value.reason == "oversize" and "7 labels" in refused.value.detail
        assert time.monotonic() - started < 5.0

        # A learner created elsewhere is found; a deleted one is unknown.
        with Client(broker.connection, prefix=worker.prefix) as other:
            assert other.learners.get("shop") == created
            other.learners.delete("router")
        assert bf.learners.get("router") is None
        with pytest.raises(Rejected) as refused:
            bf.decide("router", features=[0.1, 0.2], graph=GRAPH)
        assert refused.value.reason == "unknown_learner"
        assert [c.learner_id for c in bf.learners.list()] == ["shop"]


def test_decision_timeout(broker, start_worker) -> None:
    worker = start_worker(run_prefix("clienttimeout"), partitions=1)
    with Client(broker.connection, prefix=worker.prefix) as bf:
        bf.learners.create(family_configs()["deferral"])
        bf.decide("triage", features=[0.6, 0.8], timeout=60)
        worker.stop()
        started = time.monotonic()
        with pytest.raises(DecisionTimeout):
            bf.decide("triage", features=[0.6, 0.8], timeout=1.0)
        assert 1.0 <= time.monotonic() - started < 3.0


def test_client_limits_are_the_workers() -> None:
    assert Limits() == AsyncClient().limits
