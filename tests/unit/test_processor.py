"""The processors on dict stores: idempotency, early/late feedback, timeouts, crash repair."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest

from banditflow.processors import Emitted, PartitionStore, Processor, Source, StreamTimes
from banditflow.processors.records import DecisionRecord, Settled
from banditflow.schemas import Limits

LID = "shop"


def encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode()


def config(**overrides: Any) -> bytes:
    record = {
        "learner_id": LID,
        "family": "conformal",
        "algorithm": "sps",
        "params": {"alpha": 0.8, "horizon": 200},
        "feedback_timeout_s": 10.0,
        "early_feedback_grace_s": 5.0,
    }
    record.update(overrides)
    return encode(record)


def context(event_id: str, scores: list[float] | None = None) -> bytes:
    scores = scores if scores is not None else [0.9, 0.5, 0.1]
    return encode(
        {
            "learner_id": LID,
            "event_id": event_id,
            "labels": [f"y{i}" for i in range(len(scores))],
            "scores": scores,
        }
    )


def feedback(event_id: str, label: str | None = "y0") -> bytes:
    body: dict[str, Any] = {"learner_id": LID, "event_id": event_id}
    body.update({"label": label} if label is not None else {"missed": True})
    return encode(body)


CONFIGS, CONTEXTS, FEEDBACK = Source("learners"), Source("contexts"), Source("feedback")


@pytest.fixture
def processor() -> Processor:
    p = Processor(PartitionStore(retention_s=100.0), unknown_learner_grace_s=3.0)
    p.on_config(LID, config(), CONFIGS, 0.0)
    return p


def sps_n(p: Processor) -> int:
    return p.store.learners[LID].learner.to_state()["n"]


def tick(p: Processor, time: float) -> Emitted:
    return p.on_tick(StreamTimes.at(time))


def reasons(emitted: Emitted) -> list[str]:
    return [d.reason for d in emitted.dead_letters]


def test_redelivered_context_re_emits_the_stored_decision(processor: Processor) -> None:
    first = processor.on_context(context("e1"), CONTEXTS, 1.0).decisions[0]
    again = processor.on_context(context("e1"), CONTEXTS, 2.0).decisions[0]
    assert again.redelivered and not first.redelivered
    assert again.output == first.output and again.decided_at == first.decided_at
    assert processor.store.learners[LID].stats["decisions"] == 1


def test_redelivered_feedback_is_applied_once(processor: Processor) -> None:
    processor.on_context(context("e1"), CONTEXTS, 1.0)
    for _ in range(3):
        assert processor.on_feedback(feedback("e1"), FEEDBACK, 2.0).dead_letters == []
    assert sps_n(processor) == 1
    assert processor.store.learners[LID].stats["feedback"] == 1


def test_different_feedback_after_the_applied_one_is_dead_lettered(processor: Processor) -> None:
    """The same feedback again is a duplicate, whatever its serialisation or ``ts``; feedback
    that says something else for the same decision (and part) is not silently dropped."""
    processor.on_context(context("e1"), CONTEXTS, 1.0)
    processor.on_context(context("e2"), CONTEXTS, 1.0)
    processor.on_feedback(feedback("e1"), FEEDBACK, 2.0)
    again = b'{"ts": 5.0, "label": "y0", "event_id": "e1", "learner_id": "shop"}'
    assert processor.on_feedback(again, FEEDBACK, 2.5).dead_letters == []
    for other in (feedback("e1", "y1"), feedback("e1", None)):
        (dead,) = processor.on_feedback(other, FEEDBACK, 3.0).dead_letters
        assert dead.reason == "contradicting_feedback" and "applied first" in dead.detail
    tick(processor, 50.0)  # e2 times out: a miss
    (dead,) = processor.on_feedback(feedback("e2"), FEEDBACK, 51.0).dead_letters
    assert dead.reason == "decision_expired"
    stats = processor.store.learners[LID].stats
    assert sps_n(processor) == 2 and (stats["feedback"], stats["covered"]) == (2, 1), stats


def test_early_feedback_is_held_then_applied(processor: Processor) -> None:
    assert processor.on_feedback(feedback("e1"), FEEDBACK, 1.0).dead_letters == []
    assert sps_n(processor) == 0
    processor.on_context(context("e1"), CONTEXTS, 2.0)
    assert sps_n(processor) == 1
    assert processor.store.decisions[f"{LID}/e1"].settled_by is Settled.FEEDBACK


def test_early_feedback_without_decision_is_dead_lettered_after_grace(processor: Processor) -> None:
    processor.on_feedback(feedback("ghost"), FEEDBACK, 1.0)
    assert tick(processor, 5.9).dead_letters == []  # grace is 5 s
    emitted = tick(processor, 6.1)
    assert reasons(emitted) == ["feedback_without_decision"]
    assert emitted.dead_letters[0].event_id == "ghost"
    assert f"{LID}/ghost" not in processor.store.holds


def test_timeout_counts_as_a_miss_and_late_feedback_is_dead_lettered(processor: Processor) -> None:
    processor.on_context(context("e1"), CONTEXTS, 1.0)
    tick(processor, 10.5)
    assert sps_n(processor) == 0  # deadline is 11
    tick(processor, 11.0)
    state = processor.store.learners[LID].learner.to_state()
    assert (state["n"], state["n_le"]) == (1, 1)  # a miss
    assert processor.store.learners[LID].stats["timed_out"] == 1
    late = processor.on_feedback(feedback("e1"), FEEDBACK, 12.0)
    assert reasons(late) == ["decision_expired"]
    assert sps_n(processor) == 1


def test_settled_records_are_purged_after_retention(processor: Processor) -> None:
    processor.on_context(context("e1"), CONTEXTS, 1.0)
    processor.on_feedback(feedback("e1"), FEEDBACK, 2.0)
    tick(processor, 101.0)
    assert f"{LID}/e1" in processor.store.decisions
    tick(processor, 102.5)
    assert f"{LID}/e1" not in processor.store.decisions


def test_a_recreated_learners_decision_keeps_its_whole_retention(processor: Processor) -> None:
    """A settled decision is kept as text once written, which does not say when it was
    settled: the purge of a deleted learner's decision must not take the decision of the same
    id that a learner re-created under the same id settles later."""
    processor.on_context(context("e1"), CONTEXTS, 1.0)
    processor.on_feedback(feedback("e1"), FEEDBACK, 2.0)  # retained until 102
    processor.on_config(LID, None, CONFIGS, 3.0)
    processor.on_config(LID, config(), CONFIGS, 4.0)
    processor.on_context(context("e1"), CONTEXTS, 50.0)
    processor.on_feedback(feedback("e1"), FEEDBACK, 51.0)  # retained until 151
    processor.store.changes()  # (written: kept as text from now on)
    assert isinstance(processor.store.decisions[f"{LID}/e1"], bytes)
    tick(processor, 120.0)
    assert f"{LID}/e1" in processor.store.decisions
    assert reasons(processor.on_feedback(feedback("e1"), FEEDBACK, 121.0)) == []  # a duplicate
    tick(processor, 151.5)
    assert f"{LID}/e1" not in processor.store.decisions


def test_a_snapshots_keys_are_those_of_its_start_as_they_are_when_sliced(
    processor: Processor,
) -> None:
    """A snapshot lists the keys when it starts and writes them a slice per commit: a
    decision open then and settled since is written settled, one purged since not at all."""
    for i, at in enumerate((1.0, 2.0, 99.0)):  # (e2's feedback timeout ends at 109)
        processor.on_context(context(f"e{i}"), CONTEXTS, at)
    processor.on_feedback(feedback("e0"), FEEDBACK, 5.0)  # settled before the listing
    store = processor.store
    store.changes()
    listing = store.key_listing()
    processor.on_feedback(feedback("e1"), FEEDBACK, 6.0)  # settled after it
    tick(processor, 105.5)  # e0's retention ends: purged
    processor.on_context(context("e3"), CONTEXTS, 106.0)  # new since: not listed
    assert len(listing) == 5  # the config, the learner and 3 decisions
    assert store.listed_keys(listing, 0, 2) == [f"c/{LID}", f"l/{LID}"]
    assert store.listed_keys(listing, 2, len(listing)) == [f"s/{LID}/e1", f"d/{LID}/e2"]
    assert store.listed_keys(listing, 3, 4) == [f"s/{LID}/e1"]
    assert sorted(store.log_keys()) == sorted(
        [f"c/{LID}", f"l/{LID}", f"s/{LID}/e1", f"d/{LID}/e2", f"d/{LID}/e3"])


def test_a_decision_expires_on_the_feedback_stream_not_the_context_stream(
    processor: Processor,
) -> None:
    """A worker reading a backlog sees contexts far ahead of feedback: only the feedback
    stream passing the deadline means no feedback produced before it is still unread."""
    processor.on_context(context("e1"), CONTEXTS, 1.0)  # deadline 11
    processor.on_tick(StreamTimes(learners=500.0, contexts=500.0, feedback=10.9))
    assert processor.store.decisions[f"{LID}/e1"].open
    assert processor.on_feedback(feedback("e1"), FEEDBACK, 10.9).dead_letters == []
    assert sps_n(processor) == 1 and processor.store.learners[LID].stats["feedback"] == 1


def test_early_feedback_waits_on_the_context_stream(processor: Processor) -> None:
    processor.on_feedback(feedback("e1"), FEEDBACK, 1.0)  # grace 5 s: until 6
    assert processor.on_tick(StreamTimes(1000.0, 5.0, 1000.0)).dead_letters == []
    assert processor.on_context(context("e1"), CONTEXTS, 5.0).decisions  # ... and is applied
    assert sps_n(processor) == 1


def test_tick_costs_what_expires(processor: Processor) -> None:
    """The deadline index: a tick pops only due entries; settled decisions leave theirs
    behind, which are skipped when they come due."""
    for i in range(50):
        processor.on_context(context(f"e{i}"), CONTEXTS, float(i))  # deadlines 10 .. 59
    for i in range(0, 50, 2):
        processor.on_feedback(feedback(f"e{i}"), FEEDBACK, float(i) + 0.5)
    assert processor.store.open_decisions == 25
    tick(processor, 29.5)  # e1, e3, ..., e19 are due
    assert processor.store.learners[LID].stats["timed_out"] == 10
    assert processor.store.open_decisions == 15
    tick(processor, 100.0)
    assert processor.store.learners[LID].stats["timed_out"] == 25
    assert processor.store.open_decisions == 0


def test_a_failing_learner_call_changes_nothing(processor: Processor, monkeypatch) -> None:
    """The learner is rebuilt from its checkpoint and redo log, so an event that raises
    halfway through a learner's update leaves no trace of it."""
    for i in range(5):
        processor.on_context(context(f"e{i}"), CONTEXTS, float(i))
        processor.on_feedback(feedback(f"e{i}", f"y{i % 3}"), FEEDBACK, i + 0.5)
    processor.on_context(context("e5"), CONTEXTS, 6.0)
    before = processor.store.learners[LID].learner.to_state()
    learner = processor.store.learners[LID].learner

    def half_learn(pending, fields):  # mutates, then fails
        learner.n += 100
        raise ValueError("boom")

    monkeypatch.setattr(learner, "learn", half_learn)
    emitted = processor.on_feedback(feedback("e5"), FEEDBACK, 7.0)
    assert reasons(emitted) == ["learner_error"] and "boom" in emitted.dead_letters[0].detail
    assert processor.store.learners[LID].learner.to_state() == before
    assert processor.store.learners[LID].learner is not learner
    assert processor.store.decisions[f"{LID}/e5"].open  # and the feedback may come again
    assert processor.on_feedback(feedback("e5"), FEEDBACK, 8.0).dead_letters == []
    assert sps_n(processor) == 6


def test_a_rejected_call_costs_the_calls_since_the_last_rejection(processor: Processor) -> None:
    """Undoing a rejected call rebuilds the learner and replays the calls since its last
    checkpoint; the rebuilt learner is the new checkpoint, so a stream of hostile records
    does not replay the same (up to REDO_LIMIT) calls again for each of them."""
    entry = processor.store.learners[LID]
    for i in range(50):
        processor.on_context(context(f"e{i}"), CONTEXTS, 1.0)
    assert len(entry.redo) == 50
    bad = encode({"learner_id": LID, "event_id": "bad", "labels": [], "scores": []})
    assert reasons(processor.on_context(bad, CONTEXTS, 1.0)) == ["learner_rejected"]
    assert entry.redo == [] and entry.checkpoint == entry.learner.to_state()
    processor.on_context(context("next"), CONTEXTS, 1.0)
    assert len(entry.redo) == 1


def test_changes_hold_the_latest_value_of_each_key_once(processor: Processor) -> None:
    processor.store.changes()
    for i in range(20):
        processor.on_context(context(f"e{i}"), CONTEXTS, float(i))
        processor.on_feedback(feedback(f"e{i}"), FEEDBACK, i + 0.5)
    processor.on_context(context("open"), CONTEXTS, 30.0)
    changes = processor.store.changes()
    keys = [key for key, _ in changes.puts]
    assert len(keys) == len(set(keys)) == 22  # one learner, 21 decisions
    values = dict(changes.puts)
    assert values[f"l/{LID}"]["state"]["n"] == 20  # the learner once, as of now
    # (never written open; written as text, which the store keeps for it from now on)
    settled = DecisionRecord.from_json(orjson.loads(values[f"s/{LID}/e3"]))
    assert processor.store.decisions[f"{LID}/e3"] is values[f"s/{LID}/e3"]
    assert settled.settled_by is Settled.FEEDBACK and settled.pending is None
    assert f"d/{LID}/e3" not in values and not changes.deletes
    assert DecisionRecord.from_json(values[f"d/{LID}/open"]).pending is not None
    assert not processor.store.changes()  # nothing since
    tick(processor, 1000.0)  # the open one times out, the settled ones are purged
    changes = processor.store.changes()
    assert sorted(changes.deletes) == sorted(
        [f"s/{LID}/e{i}" for i in range(20)] + [f"d/{LID}/open"]
    )
    assert sorted(k for k, _ in changes.puts) == [f"l/{LID}", f"s/{LID}/open"]


def test_contexts_of_a_learner_created_later_are_held_and_released() -> None:
    p = Processor(unknown_learner_grace_s=3.0)
    assert p.on_context(context("e1"), CONTEXTS, 0.0).decisions == []
    p.on_feedback(feedback("e1"), FEEDBACK, 0.1)
    released = p.on_config(LID, config(), CONFIGS, 0.5)
    assert [d.event_id for d in released.decisions] == ["e1"]
    assert sps_n(p) == 1  # the feedback held with it was applied too


def test_contexts_of_a_learner_that_never_comes_are_dead_lettered() -> None:
    p = Processor(unknown_learner_grace_s=3.0)
    p.on_context(context("e1"), CONTEXTS, 0.0)
    p.on_feedback(feedback("e1"), FEEDBACK, 0.1)
    emitted = tick(p, 3.5)
    assert reasons(emitted) == ["unknown_learner", "unknown_learner"]
    assert "produce a LearnerConfig" in emitted.dead_letters[0].detail
    assert p.store.holds == {} and p.store.decisions == {}


@pytest.mark.parametrize(
    ("raw", "reason", "detail"),
    [
        (b"{not json", "malformed_json", "not valid UTF-8 JSON"),
        (b"[1, 2]", "malformed_json", "expected a JSON object"),
        (
            b'{"learner_id": "shop", "event_id": "e", "labels": ["a"], "scores": [NaN]}',
            "non_finite",
            "finite number",
        ),
        (
            b'{"learner_id": "shop", "event_id": "e", "labels": ["a"], "scores": [1e999]}',
            "non_finite",
            "finite number",
        ),
        (
            b'{"learner_id": "shop", "event_id": "e", "labels": ["a", "a"], "scores": [1, 2]}',
            "invalid_schema",
            "duplicate label",
        ),
        (
            b'{"learner_id": "shop", "event_id": "e", "labels": ["a"], "scores": ["1"]}',
            "invalid_schema",
            "scores.0",
        ),
        (
            b'{"learner_id": "shop", "event_id": "e", "labels": ["a"], "scores": [1], "x": 1}',
            "invalid_schema",
            "Extra inputs",
        ),
        (
            b'{"learner_id": "shop", "event_id": "e", "labels": ["a", "b"], "scores": [1]}',
            "invalid_schema",
            "equal length",
        ),
        (
            b'{"learner_id": "shop", "event_id": "e", "labels": ["a"], "scores": [1],'
            b' "schema_version": 9}',
            "invalid_schema",
            "schema_version",
        ),
        (b'{"learner_id": "shop", "event_id": "e"}', "learner_rejected", "non-empty 'labels'"),
        (b'{"learner_id": "nobody", "event_id": "e", "labels": ["a"], "scores": [1]}', None, None),
    ],
)
def test_bad_contexts_are_dead_lettered_with_a_reason(
    processor: Processor, raw: bytes, reason: str | None, detail: str | None
) -> None:
    before = processor.store.value(f"l/{LID}")
    emitted = processor.on_context(raw, Source("contexts", 0, 42), 1.0)
    assert emitted.decisions == []
    if reason is None:  # unknown learner: held first (its config may still come)
        assert emitted.dead_letters == []
        assert reasons(tick(processor, 100.0)) == ["unknown_learner"]
    else:
        (dead,) = emitted.dead_letters
        assert dead.reason == reason and detail in dead.detail
        assert (dead.source_topic, dead.partition, dead.offset) == ("contexts", 0, 42)
        assert dead.raw == raw.decode()
    assert processor.store.value(f"l/{LID}") == before  # state untouched
    assert processor.on_context(context("ok"), CONTEXTS, 2.0).decisions  # and still working


def test_integers_beyond_64_bits_are_refused_by_the_schema(processor: Processor) -> None:
    """A label the decision (and the state log) could not encode is the record's fault."""
    big = {"learner_id": LID, "event_id": "big", "labels": [2**64, "b"], "scores": [1.0, 0.5]}
    (dead,) = processor.on_context(encode(big), CONTEXTS, 1.0).dead_letters
    assert dead.reason == "invalid_schema" and "labels.0" in dead.detail
    small = {**big, "event_id": "ok", "labels": [2**63 - 1, -(2**63)]}
    assert processor.on_context(encode(small), CONTEXTS, 1.0).decisions
    nested = config(params={"alpha": 0.8, "horizon": 200, "extra": [[2**64]]})
    (dead,) = processor.on_config(LID, nested, CONFIGS, 1.0).dead_letters
    assert dead.reason == "invalid_schema" and "64 bits" in dead.detail


@pytest.mark.parametrize(
    ("family", "algorithm", "params", "detail"),
    [
        ("conformal", "sps", {"alpha": 0.9, "horizon": 2**64 - 1}, "at most 9007199254740992"),
        ("conformal", "sps", {"alpha": 0.9, "horizon": "9" * 400}, "at most 9007199254740992"),
        ("conformal", "aci", {"alpha": 0.9, "window": -(2**60)}, "at most"),
        ("conformal", "sps", {"alpha": 0.9, "horizon": 100, "delta": "1e999"}, "finite"),
        ("graph_cb", "squarecb_g", {"actions": 3, "feature_dim": 2**61, "graph_kind": "full"},
         "at most 10000000"),
        ("graph_cb", "squarecb_g", {"actions": 5000, "feature_dim": 2, "graph_kind": "full"},
         "at most 1000"),
        ("graph_cb", "squarecb_g",
         {"actions": 100, "feature_dim": 40_000, "update": "rls", "graph_kind": "full"},
         "numbers in the learner's state"),
        ("deferral", "ucb", {"dim": 40_000, "budget": 0.3, "horizon": 100}, "numbers"),
        ("deferral", "ucb", {"dim": 2, "budget": 0.3, "c_max": 0.3, "horizon": 100,
                             "ridge": 1e-320}, "ridge"),
        ("graph_cb", "squarecb_g",
         {"actions": 3, "feature_dim": 2, "update": "rls", "ridge": 1e-320, "graph_kind": "full"},
         "ridge"),
        ("deferral", "ucb", {"dim": 2, "budget": 0.3, "horizon": 10**19}, "at most"),
        ("prob_graph", "lp_policy", {"arms": 30_000, "edges": [[0, 1, 1.0]]}, "numbers"),
        ("prob_graph", "lp_policy",
         {"arms": 200, "edges": [[i, (i + 1) % 200, 0.5] for i in range(200)],
          "case": "cascade"}, "steps per reachability refresh"),
        ("deferral", "neural_linear", {"dim": 2, "budget": 0.3, "c_max": 0.3, "horizon": 100,
                                       "seed": -1}, "'seed' must be >= 0"),
        ("graph_cb", "squarecb_g", {"actions": 3, "feature_dim": 2, "graph_kind": "full",
                                    "oracle": "neural", "oracle_seed": -1}, "'oracle_seed'"),
        ("prob_graph", "lp_policy",
         {"arms": 2, "edges": [[0, 1, 1.0], [1, 0, 1.0]], "warmup_observations": 10**18},
         "at most"),
    ],
)
def test_parameters_a_learner_cannot_work_with_are_invalid_configs(
    processor: Processor, family: str, algorithm: str, params: dict[str, Any], detail: str
) -> None:
    """Sizes that would not fit in memory or in the state log, and numbers too large for a
    float, are refused by name when the config arrives, never at the first context."""
    emitted = processor.on_config(
        LID, config(family=family, algorithm=algorithm, params=params), CONFIGS, 1.0
    )
    (dead,) = emitted.dead_letters
    assert dead.reason == "invalid_config" and detail in dead.detail, dead.detail
    assert processor.store.learners[LID].version == 1  # the old learner stays


def test_a_held_context_that_fails_does_not_cost_the_others_their_decisions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Contexts that waited for their learner's config are decided one by one when it comes:
    an unexpected failure on one is its own dead letter, the others are decided."""
    p = Processor(unknown_learner_grace_s=3.0)
    for eid in ("e1", "bad", "e3"):
        p.on_context(context(eid), CONTEXTS, 0.0)
    p.on_feedback(feedback("e3"), FEEDBACK, 0.1)
    decide = Processor.on_context

    def on_context(
        self: Processor, raw: bytes, source: Source, now: float, **options: bool
    ) -> Emitted:
        if b'"bad"' in raw:
            raise RuntimeError("a bug")
        return decide(self, raw, source, now, **options)

    monkeypatch.setattr(Processor, "on_context", on_context)
    released = p.on_config(LID, config(), CONFIGS, 0.5)
    assert sorted(d.event_id for d in released.decisions) == ["e1", "e3"]
    assert [(d.reason, d.detail) for d in released.dead_letters] == [
        ("internal_error", "RuntimeError: a bug")
    ]
    assert sps_n(p) == 1  # e3's feedback, held with it, was applied



def test_held_contexts_failing_alike_log_one_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug that fails every held context of a learner logs one traceback and a count, not
    a traceback per context (thousands may be held)."""
    p = Processor(unknown_learner_grace_s=3.0)
    for i in range(50):
        p.on_context(context(f"e{i}"), CONTEXTS, 0.0)

    def on_context(
        self: Processor, raw: bytes, source: Source, now: float, **options: bool
    ) -> Emitted:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Processor, "on_context", on_context)
    with caplog.at_level("ERROR"):
        released = p.on_config(LID, config(), CONFIGS, 0.5)
    assert len(released.dead_letters) == 50
    assert [r.exc_info is not None for r in caplog.records] == [True, False]
    assert "50 held contexts" in caplog.records[1].getMessage()

def test_oversize_payloads_are_rejected_by_configurable_limits() -> None:
    p = Processor(limits=Limits(max_event_bytes=300, max_labels=3))
    p.on_config(LID, config(), CONFIGS, 0.0)
    assert reasons(p.on_context(context("e1", [0.1] * 50), CONTEXTS, 1.0)) == ["oversize"]
    assert reasons(p.on_context(context("e2", [0.1] * 4), CONTEXTS, 1.0)) == ["oversize"]
    assert p.on_context(context("e3", [0.1] * 3), CONTEXTS, 1.0).decisions


def test_misrouted_records_are_dead_lettered() -> None:
    p = Processor(expected_partition=lambda key: 2)
    p.on_config(LID, config(), Source("learners", 2), 0.0)
    emitted = p.on_context(context("e1"), Source("contexts", 1), 1.0)
    assert reasons(emitted) == ["misrouted"] and "murmur2" in emitted.dead_letters[0].detail
    assert p.on_context(context("e1"), Source("contexts", 2), 1.0).decisions


def test_invalid_config_is_dead_lettered_and_keeps_the_old_learner(processor: Processor) -> None:
    bad = processor.on_config(LID, config(params={"alpha": 2.0, "horizon": 10}), CONFIGS, 1.0)
    assert reasons(bad) == ["invalid_config"] and "target coverage" in bad.dead_letters[0].detail
    unknown = processor.on_config(LID, config(algorithm="magic"), CONFIGS, 1.0)
    assert "known: sps" in unknown.dead_letters[0].detail
    assert processor.store.learners[LID].version == 1


def test_conformal_target_coverage_and_its_former_name_alpha(processor: Processor) -> None:
    renamed = config(params={"target_coverage": 0.8, "horizon": 200})
    assert processor.on_config(LID, renamed, CONFIGS, 1.0).dead_letters == []
    assert processor.store.learners[LID].learner.summary()["coverage_target"] == 0.8
    both = config(params={"target_coverage": 0.8, "alpha": 0.8, "horizon": 200})
    (dead,) = processor.on_config(LID, both, CONFIGS, 1.0).dead_letters
    assert dead.reason == "invalid_config" and "not both" in dead.detail


def test_reconfiguring_starts_afresh_and_stale_feedback_is_dead_lettered(
    processor: Processor,
) -> None:
    processor.on_context(context("e1"), CONTEXTS, 1.0)
    processor.on_config(LID, config(feedback_timeout_s=20.0), CONFIGS, 1.5)
    assert processor.store.learners[LID].version == 1  # only a timeout changed
    processor.on_config(LID, config(params={"alpha": 0.7, "horizon": 200}), CONFIGS, 2.0)
    assert processor.store.learners[LID].version == 2
    assert reasons(processor.on_feedback(feedback("e1"), FEEDBACK, 3.0)) == ["stale_version"]
    assert sps_n(processor) == 0


def test_tombstone_deletes_the_learner_and_its_decisions(processor: Processor) -> None:
    processor.on_context(context("e1"), CONTEXTS, 1.0)
    processor.on_config(LID, None, CONFIGS, 1.0)
    assert LID not in processor.store.learners and processor.store.decisions == {}
    processor.on_config(LID, config(), CONFIGS, 2.0)  # re-created: version 1 again
    assert reasons(processor.on_feedback(feedback("e1"), FEEDBACK, 3.0)) == []  # held, not applied
    assert sps_n(processor) == 0


def test_same_events_give_the_same_decisions_and_state() -> None:
    rng = np.random.default_rng(3)
    events = []
    for i in range(400):
        scores = rng.normal(size=5).round(4).tolist()
        events.append(("c", context(f"e{i}", scores)))
        if i >= 3:
            events.append(("f", feedback(f"e{i - 3}", "y0" if rng.random() < 0.97 else None)))
    runs = []
    for _ in range(2):
        p = Processor()
        p.on_config(LID, config(), CONFIGS, 0.0)
        decisions = []
        for t, (kind, raw) in enumerate(events):
            handler = p.on_context if kind == "c" else p.on_feedback
            decisions += [d.output for d in handler(raw, Source(kind), float(t)).decisions]
        runs.append((decisions, p.store.learners[LID].learner.to_state()))
    assert runs[0] == runs[1]
    assert runs[0][1]["tau"] is not None  # the run left burn-in


def test_multi_part_feedback_reaches_the_learner_with_its_part() -> None:
    """Deferral in full mode: the model part, then the human part, each applied once."""
    p = Processor()
    p.on_config("d", encode({"learner_id": "d", "family": "deferral", "algorithm": "ucb",
                             "params": {"dim": 2, "budget": 5.0, "horizon": 100, "warmup": 20}}),
                 CONFIGS, 0.0)
    decided = []
    for i in range(30):
        body = {"learner_id": "d", "event_id": f"e{i}", "features": [0.6, 0.8]}
        decided += p.on_context(encode(body), CONTEXTS, float(i)).decisions
    deferred = [d.event_id for d in decided if d.output["defer"]]
    assert deferred, "the learner defers some events while the budget lasts"
    eid = deferred[0]
    model = encode({"learner_id": "d", "event_id": eid, "part": "model", "model_reward": 0.4})
    human = encode({"learner_id": "d", "event_id": eid, "part": "human", "human_reward": 0.9,
                    "human_cost": 0.5})
    assert p.on_feedback(model, FEEDBACK, 40.0).dead_letters == []
    assert p.store.decisions[f"d/{eid}"].open  # still waiting for the human
    assert p.on_feedback(model, FEEDBACK, 41.0).dead_letters == []  # duplicate: ignored
    assert p.on_feedback(human, FEEDBACK, 42.0).dead_letters == []
    assert p.store.decisions[f"d/{eid}"].settled_by is Settled.FEEDBACK
    assert p.store.decisions[f"d/{eid}"].parts == ["model", "human"]
    assert p.store.learners["d"].stats["feedback"] == 1


@pytest.mark.parametrize("with_part", [True, False])
def test_deferral_parts_with_or_without_part_field(with_part: bool) -> None:
    """Without ``part`` the family reads it from the payload: the model part and the human
    part are two parts, each applied once; a different model reward after the first is
    contradicting. A decision read from an older state log (no digests) keeps deduplicating."""
    p = Processor()
    p.on_config("d", encode({"learner_id": "d", "family": "deferral", "algorithm": "ucb",
                             "params": {"dim": 2, "budget": 5.0, "horizon": 100, "warmup": 20}}),
                 CONFIGS, 0.0)
    decided = []
    for i in range(30):
        body = {"learner_id": "d", "event_id": f"e{i}", "features": [0.6, 0.8]}
        decided += p.on_context(encode(body), CONTEXTS, float(i)).decisions
    eid = next(d.event_id for d in decided if d.output["defer"])

    def send(part: str, **payload: float) -> list[str]:
        body: dict[str, Any] = {"learner_id": "d", "event_id": eid, **payload}
        if with_part:
            body["part"] = part
        return reasons(p.on_feedback(encode(body), FEEDBACK, 40.0))

    assert send("model", model_reward=0.4) == []
    key = f"d/{eid}"
    old = DecisionRecord.from_json(p.store.decisions[key].to_json()[:10])  # an older log's
    p.store.decisions[key] = old
    assert old.digests == {} and send("model", model_reward=0.4) == []  # a duplicate
    assert send("human", human_reward=0.9, human_cost=0.5) == []
    assert p.store.decisions[key].settled_by is Settled.FEEDBACK
    assert send("model", model_reward=0.4) == [] and send("human", human_reward=0.9,
                                                          human_cost=0.5) == []
    assert send("human", human_reward=0.1, human_cost=0.5) == ["contradicting_feedback"]


def test_prob_graph_partial_feedback_without_part() -> None:
    """prob_graph feedback may come in several events: without ``part`` each is told by the
    arms it reveals and whether it completes the decision."""
    p = Processor()
    edges = [[i, j, 1.0] for i in range(3) for j in range(3)]
    p.on_config("g", encode({"learner_id": "g", "family": "prob_graph", "algorithm": "ucb_n",
                             "params": {"arms": 3, "edges": edges}}), CONFIGS, 0.0)
    p.on_context(encode({"learner_id": "g", "event_id": "e"}), CONTEXTS, 1.0)

    def send(rewards: dict[str, float], complete: bool) -> list[str]:
        body = {"learner_id": "g", "event_id": "e", "rewards": rewards, "complete": complete}
        return reasons(p.on_feedback(encode(body), FEEDBACK, 2.0))

    assert send({"0": 0.5}, False) == [] and send({"0": 0.5}, False) == []
    assert send({"0": 0.9}, False) == ["contradicting_feedback"]
    assert p.store.decisions["g/e"].open
    assert send({"1": 0.2, "2": 0.3}, True) == []
    assert not p.store.decisions["g/e"].open
    assert p.store.learners["g"].learner.to_state()["observations"] == [1, 1, 1]


def test_deferral_regret_against_opt_from_truth() -> None:
    """Truth with the realised rewards and cost gives the live regret against OPT."""
    from banditflow.learners.deferral.opt import fractional_knapsack_opt
    from banditflow.processors import stats as learner_stats

    rng = np.random.default_rng(4)
    p = Processor()
    p.on_config("d", encode({"learner_id": "d", "family": "deferral", "algorithm": "ucb",
                             "params": {"dim": 2, "budget": 20.0, "horizon": 400,
                                        "warmup": 400}}), CONFIGS, 0.0)
    rows = []
    for i in range(400):
        decision = p.on_context(encode({"learner_id": "d", "event_id": f"e{i}",
                                        "features": [0.6, 0.8]}), CONTEXTS, float(i)).decisions[0]
        model, human, cost = rng.random(), rng.random(), 0.05 + 0.95 * rng.random()
        rows.append((model, human, cost, decision.output["defer"]))
        truth = {"learner_id": "d", "event_id": f"e{i}", "model_reward": model,
                 "human_reward": human, "human_cost": cost}
        assert p.on_truth(encode(truth), Source("truth"), float(i)).dead_letters == []
    entry = p.store.learners["d"]
    summary = {"budget": 20.0, "horizon": 400}
    values = learner_stats.gauges(type(entry.learner), entry.stats, summary)
    model, human, cost, deferred = (np.array(c) for c in zip(*rows, strict=True))
    exact = fractional_knapsack_opt(model, human, cost, 20.0).value
    reward = float(np.where(deferred, human, model).sum())
    assert values["opt_reward"] == pytest.approx(exact, rel=0.02)  # ratio-histogram OPT
    assert values["regret_exact"] == pytest.approx(values["opt_reward"] - reward)
    assert values["regret_exact"] > 0


def test_published_decisions_follow_the_decision_schema(processor: Processor) -> None:
    """Decisions are written with orjson, not the pydantic model: they must still be
    exactly what the published schema describes."""
    from banditflow.schemas import Decision

    first = processor.on_context(context("e1"), Source("contexts", timestamp=0.5), 1.0)
    again = processor.on_context(context("e1"), Source("contexts", timestamp=0.5), 2.0)
    for published in (first.decisions[0], again.decisions[0]):
        parsed = Decision.model_validate_json(published.to_json())
        assert parsed.model_dump() == {
            "schema_version": 1, "learner_id": LID, "ts": 1.0, "event_id": "e1",
            "family": "conformal", "algorithm": "sps", "learner_version": 1,
            "learner_updates": 0, "output": published.output, "decided_at": 1.0, "context_ts": 0.5,
            "redelivered": published is again.decisions[0],
        }


def test_a_decision_too_large_to_publish_is_undone_and_dead_lettered() -> None:
    """A context within --max-event-bytes whose decision would not be: the decision is
    never made (the learner is as before), the context is dead-lettered as oversize."""
    p = Processor(limits=Limits(max_event_bytes=1265))
    p.on_config(LID, config(), CONFIGS, 0.0)
    before = p.store.value(f"l/{LID}")
    labels = [f"a-rather-long-label-{i:03d}" for i in range(40)]  # all in the set at first
    body = json.dumps({"learner_id": LID, "event_id": "big", "labels": labels,
                       "scores": [0.5] * len(labels)}, separators=(",", ":")).encode()
    assert len(body) < 1265  # (the decision: these labels, and its own fields: 1,273)
    emitted = p.on_context(body, CONTEXTS, 1.0)
    assert emitted.decisions == [] and reasons(emitted) == ["oversize"]
    assert "decision would take" in emitted.dead_letters[0].detail
    assert p.store.value(f"l/{LID}") == before and p.store.decisions == {}
    assert p.on_context(context("small"), CONTEXTS, 2.0).decisions  # and still working


def test_a_dead_letter_keeps_the_first_64_kib_of_a_huge_record(processor: Processor) -> None:
    raw = b"\xff" * 200_000  # escaped, the decoded text would be far over 1 MB
    (dead,) = processor.on_context(raw, CONTEXTS, 1.0).dead_letters
    assert dead.reason == "malformed_json" and dead.raw_size == 200_000
    assert len(dead.raw) == 64 * 1024 and len(dead.model_dump_json()) < 1_000_000
    (small,) = processor.on_context(b"{", CONTEXTS, 1.0).dead_letters
    assert small.raw == "{" and small.raw_size is None


def test_an_undone_decision_leaves_no_trace_in_a_learner_that_decides_with_state() -> None:
    """Deferral counts rounds and reserves budget when it decides: all of it is undone."""
    p = Processor(limits=Limits(max_event_bytes=200))
    p.on_config("d", encode({"learner_id": "d", "family": "deferral", "algorithm": "ucb",
                             "params": {"dim": 2, "budget": 5.0, "horizon": 100, "warmup": 50}}),
                CONFIGS, 0.0)
    before = p.store.learners["d"].learner.to_state()
    for i in range(20):
        body = encode({"learner_id": "d", "event_id": f"e{i}", "features": [0.6, 0.8]})
        assert reasons(p.on_context(body, CONTEXTS, float(i))) == ["oversize"]
    assert p.store.learners["d"].learner.to_state() == before  # no round, no reservation


@pytest.mark.parametrize("hostile", ["param", "field", "key"])
def test_a_dead_letter_stays_small_whatever_its_detail_quotes(hostile: str) -> None:
    """Details quote what they reject (a parameter's value, a field's name, a record key):
    cut to 4 KiB, so that every dead letter can be published (found by review: a 1 MB
    detail made the dead letter unpublishable, and every later commit with it)."""
    p = Processor()
    huge = "x" * 990_000
    if hostile == "param":
        emitted = p.on_config(LID, config(params={"alpha": huge, "horizon": 10}), CONFIGS, 0.0)
    elif hostile == "field":
        emitted = p.on_context(encode({"learner_id": LID, "event_id": "e", huge: 1}),
                               CONTEXTS, 0.0)
    else:
        emitted = p.on_config(huge, config(), CONFIGS, 0.0)
    (dead,) = emitted.dead_letters
    assert len(dead.detail) < 4200 and "characters in all" in dead.detail
    assert len(dead.model_dump_json()) < 100_000


def test_held_feedback_is_dead_lettered_once_when_its_context_is_rejected() -> None:
    """Feedback and its context for a learner not created yet, at the same stream time;
    then the config, then the context proves unusable: the feedback is dead-lettered once
    (found by review: the hold had two index entries and went out twice)."""
    p = Processor(unknown_learner_grace_s=3.0)
    p.on_feedback(feedback("e1"), FEEDBACK, 1.0)
    p.on_context(encode({"learner_id": LID, "event_id": "e1"}), CONTEXTS, 1.0)  # no labels
    released = p.on_config(LID, config(early_feedback_grace_s=3.0), CONFIGS, 1.0)
    assert reasons(released) == ["learner_rejected"]
    assert reasons(tick(p, 10.0)) == ["feedback_without_decision"]


def learner_state(p: Processor, lid: str = LID) -> dict[str, Any]:
    return json.loads(json.dumps(p.store.learners[lid].learner.to_state()))


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"label": "never-offered"}, "was not in the prediction set"),
        ({"missed": True}, "held all 3 offered labels"),  # SPS's burn-in set is full
        ({"missed": False}, "needs the covered 'label'"),
        ({"losses": {"0": 0.5}}, "losses is not conformal feedback"),
        ({"label": "y0", "rewards": {"0": 1.0}}, "rewards is not conformal feedback"),
    ],
)
def test_contradicting_feedback_is_dead_lettered_and_never_reaches_the_learner(
    processor: Processor, body: dict[str, Any], says: str
) -> None:
    decision = processor.on_context(context("e1"), CONTEXTS, 1.0).decisions[0]
    assert decision.output["labels"] == ["y0", "y1", "y2"]
    before = learner_state(processor)
    out = processor.on_feedback(
        encode({"learner_id": LID, "event_id": "e1", **body}), FEEDBACK, 2.0
    )
    assert reasons(out) == ["contradicting_feedback"]
    assert says in out.dead_letters[0].detail
    assert learner_state(processor) == before
    assert processor.store.decisions[f"{LID}/e1"].open  # the true feedback may still come
    assert processor.on_feedback(feedback("e1", "y1"), FEEDBACK, 3.0).dead_letters == []
    assert sps_n(processor) == 1


def test_a_label_outside_a_partial_set_contradicts_it() -> None:
    from banditflow.learners.base import ContradictingFeedback
    from banditflow.learners.conformal.base import ConformalLearner

    pending = {"threshold": 0.4, "labels": ["b"], "scores": [0.7], "offered": 3}
    assert ConformalLearner.covered_score(pending, {"label": "b"}) == 0.7
    assert ConformalLearner.covered_score(pending, {"missed": True}) is None
    with pytest.raises(ContradictingFeedback, match="'a' was not in the prediction set"):
        ConformalLearner.covered_score(pending, {"label": "a"})


@pytest.mark.parametrize(
    ("family", "params", "context_fields", "body", "says"),
    [
        (
            "graph_cb", "squarecb_g",
            {"features": [0.5, -1.0]},
            lambda out: {"losses": {str(out["action"]): 0.2}},  # loopless: cannot see itself
            "cannot reveal action",
        ),
        (
            "graph_cb", "squarecb_g",
            {"features": [0.5, -1.0]},
            lambda out: {"losses": {"7": 0.2}},
            "revealed action 7 is not in [0, 3)",
        ),
        (
            "graph_cb", "squarecb_g",
            {"features": [0.5, -1.0]},
            lambda out: {"label": "y0"},
            "label is not graph_cb feedback",
        ),
        (
            "prob_graph", "ucb_n",
            {},
            lambda out: {"rewards": {str(out["arm"]): 0.3}},  # no self-loops
            "cannot reveal",
        ),
        (
            "deferral", "ucb",
            {"features": [0.6, 0.8]},
            lambda out: {"part": "human", "human_reward": 1.0, "human_cost": 0.1},
            "is not expected for this decision",
        ),
    ],
)
def test_contradicting_feedback_of_every_family_is_dead_lettered(
    family: str, params: str, context_fields: dict[str, Any], body: Any, says: str
) -> None:
    configs = {
        "graph_cb": {"graph_kind": "cops_and_robbers", "actions": 3, "feature_dim": 2,
                     "gamma_schedule": "constant", "gamma": 10.0},
        "prob_graph": {"arms": 2, "edges": [[0, 1, 1.0], [1, 0, 1.0]]},
        "deferral": {"dim": 2, "budget": 5.0, "horizon": 100, "warmup": 0},
    }
    p = Processor()
    p.on_config("x", encode({"learner_id": "x", "family": family, "algorithm": params,
                             "params": configs[family]}), CONFIGS, 0.0)
    decided = p.on_context(encode({"learner_id": "x", "event_id": "e", **context_fields}),
                           CONTEXTS, 1.0)
    output = decided.decisions[0].output
    if family == "deferral":
        assert not output["defer"], "warmup 0 with this budget: the model decides first"
    before = learner_state(p, "x")
    out = p.on_feedback(encode({"learner_id": "x", "event_id": "e", **body(output)}),
                        FEEDBACK, 2.0)
    assert reasons(out) == ["contradicting_feedback"]
    assert says in out.dead_letters[0].detail
    assert learner_state(p, "x") == before
    assert p.store.decisions["x/e"].open


def test_true_feedback_held_after_a_contradicting_one_is_applied(processor: Processor) -> None:
    """Both arrive before their decision (found by the fault corpus: the true one was dropped
    as a duplicate of the contradicting one, same part, and the decision could only time
    out). Once decided, the contradicting one is dead-lettered and the true one applied; the
    same record sent twice is still held once."""
    for body in ({"label": "never-offered"}, {"label": "y0"}, {"label": "y0"}):
        held = processor.on_feedback(
            encode({"learner_id": LID, "event_id": "e1", **body}), FEEDBACK, 1.0
        )
        assert held.dead_letters == []
    out = processor.on_context(context("e1"), CONTEXTS, 2.0)
    assert reasons(out) == ["contradicting_feedback"]
    record = processor.store.decisions[f"{LID}/e1"]
    assert record.settled_by is Settled.FEEDBACK
    assert sps_n(processor) == 1


@pytest.mark.parametrize(
    ("raw", "reason", "said"),
    [
        (b'{"learner_id": "shop", "event_id": "e", "labels": ["a"], "scores": "x"}',
         "invalid_schema", ("shop", "e")),
        (b'{"learner_id": "shop", "event_id": "e", "labels": ["a"], "scores": [NaN]}',
         "non_finite", ("shop", "e")),
        (b'{"learner_id": 5, "event_id": "e", "labels": ["a"], "scores": [1]}',
         "invalid_schema", (None, "e")),
        (b'{"learner_id": "shop", "event_id": ', "malformed_json", (None, None)),
    ],
)
def test_a_dead_letter_names_the_learner_and_event_the_record_said(
    processor: Processor, raw: bytes, reason: str, said: tuple[str | None, str | None]
) -> None:
    """Issue 29: an invalid_schema dead letter carried learner_id null although the record
    named its learner; whoever reads the dead letters by learner missed it."""
    (dead,) = processor.on_context(raw, Source("contexts", 0, 7), 1.0).dead_letters
    assert dead.reason == reason
    assert (dead.learner_id, dead.event_id) == said
