"""The event logic of banditflow: decide, pending store, feedback join, timeouts, dedupe.

One :class:`Processor` serves one set of partitions. It keeps two stores:

- ``learners[learner_id]`` - the learner entry: config, learner state, statistics, the next
  decision sequence number and the record of settled decisions (dedupe state);
- ``pending["learner_id/event_id"]`` - one record per decision: ``open`` until its feedback
  is complete, then ``settled`` (kept ``retention_s`` to re-emit the decision of a re-delivered
  context and to recognise duplicate feedback), or ``early`` for feedback that arrived before
  its decision (held ``early_feedback_grace_s``), or ``awaiting_learner`` for a context whose
  learner config has not been processed yet (held ``unknown_learner_grace_s``: a config and
  the first contexts produced right after it may be consumed in either order).

Writes are ordered so that a crash between any two of them is repaired by Kafka's
re-delivery, without Kafka transactions. The worker keeps both stores in one table, so one
changelog partition orders all the writes of a partition and a crash loses a suffix of
them, never one in the middle. Every event writes the learner entry first:

- context: the learner entry (state, sequence number, and a copy of the new pending record
  as ``last_decided``), then the pending record. If a crash loses the pending write, the
  re-delivered context finds its record in ``last_decided`` and re-emits that decision; a
  context is never decided twice, since re-delivery may interleave topics differently and
  the learner may have changed in between.
- feedback and timeouts: the learner entry (state, statistics, settled record), then the
  pending record. A re-delivered feedback that the learner entry already shows as applied
  only repairs the pending record.

Everything is deterministic given the stores, the event and ``now``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from learners.base import Learner, LearnerError
from learners.registry import learner_class, make_learner
from processors import settled as settled_record
from processors import stats
from processors.sink import Sink
from schemas import (
    Context,
    DeadLetter,
    Decision,
    Feedback,
    LearnerConfig,
    Limits,
    Rejected,
    Truth,
    parse_event,
)

Entry = dict[str, Any]
# Fields every event carries that learners do not see (a feedback's ``part`` they do see).
ENVELOPE = {"schema_version", "learner_id", "event_id", "ts"}


@dataclass(frozen=True)
class Source:
    """Where a record came from (for dead letters, routing checks and latency)."""

    topic: str
    partition: int = 0
    offset: int | None = None
    timestamp: float | None = None


@dataclass
class Emitted:
    """What handling one record produced: decisions to publish and records to dead-letter."""

    decisions: list[Decision] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)


def event_seed(seed: int, event_id: str) -> np.random.Generator:
    """The random generator of one decision: a function of the learner seed and event id."""
    digest = hashlib.blake2b(event_id.encode(), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little")])


class LazyGenerator:
    """Stands in for :func:`event_seed`'s generator and builds it on first use: seeding costs
    tens of microseconds, and deterministic learners (SPS) never draw."""

    __slots__ = ("_event_id", "_generator", "_seed")

    def __init__(self, seed: int, event_id: str) -> None:
        self._seed = seed
        self._event_id = event_id
        self._generator: np.random.Generator | None = None

    def __getattr__(self, name: str) -> Any:
        if self._generator is None:
            self._generator = event_seed(self._seed, self._event_id)
        return getattr(self._generator, name)


def pending_key(learner_id: str, event_id: str) -> str:
    return f"{learner_id}/{event_id}"


def _text(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode("utf-8", errors="replace")


class Processor:
    """Framework-free handler of config, context, feedback, truth and tick events."""

    def __init__(
        self,
        learners: MutableMapping[str, Entry],
        pending: MutableMapping[str, dict[str, Any]],
        *,
        limits: Limits | None = None,
        sink: Sink | None = None,
        retention_s: float = 600.0,
        unknown_learner_grace_s: float = 10.0,
        expected_partition: Callable[[str], int] | None = None,
        persist_state: bool = True,
    ) -> None:
        """``persist_state=False`` writes learner state only on :meth:`flush_state`: for
        single-process replay, where this processor's cached learners are authoritative and
        serialising the state on every event would dominate the cost."""
        self.learners = learners
        self.pending = pending
        self.limits = limits or Limits()
        self.sink: Sink = sink or Sink()
        self.retention_s = retention_s
        self.unknown_learner_grace_s = unknown_learner_grace_s
        self.expected_partition = expected_partition
        self.persist_state = persist_state
        self._report_gauges = self.sink.wants_gauges
        self._cache: dict[str, tuple[int, Learner]] = {}

    # ------------------------------------------------------------------ helpers
    def forget_cache(self) -> None:
        """Drop deserialised learners (call when partitions are revoked or reassigned)."""
        self._cache.clear()

    def flush_state(self) -> None:
        """Write every cached learner's state into its entry (see ``persist_state``)."""
        for learner_id, (revision, learner) in self._cache.items():
            entry = self.learners.get(learner_id)
            if entry is not None and entry["revision"] == revision:
                self.learners[learner_id] = {**entry, "state": learner.to_state()}

    def _dead(
        self,
        out: Emitted,
        reason: str,
        detail: str,
        raw: bytes | None,
        source: Source,
        now: float,
        learner_id: str | None = None,
        event_id: str | None = None,
    ) -> None:
        out.dead_letters.append(
            DeadLetter(
                reason=reason,
                detail=detail,
                source_topic=source.topic,
                partition=source.partition,
                offset=source.offset,
                learner_id=learner_id,
                event_id=event_id,
                raw=_text(raw),
                ts=now,
            )
        )
        self.sink.dead_lettered(reason)
        self.sink.processed(source.topic, "dead_lettered")

    def _parse(self, raw: bytes, model: type, source: Source, now: float, out: Emitted) -> Any:
        try:
            record = parse_event(raw, model, self.limits)
        except Rejected as rejected:
            self._dead(out, rejected.reason, rejected.detail, raw, source, now)
            return None
        if self.expected_partition is not None:
            expected = self.expected_partition(record.learner_id)
            if expected != source.partition:
                self._dead(
                    out,
                    "misrouted",
                    f"key {record.learner_id!r} belongs to partition {expected}, the record came "
                    f"on {source.partition}: produce with key = learner_id and the murmur2 "
                    "partitioner (kcat: -X topic.partitioner=murmur2_random)",
                    raw,
                    source,
                    now,
                    record.learner_id,
                    getattr(record, "event_id", None),
                )
                return None
        return record

    def _entry(
        self,
        learner_id: str,
        raw: bytes,
        source: Source,
        now: float,
        out: Emitted,
        event_id: str | None,
    ) -> Entry | None:
        """The learner's entry, or None after dead-lettering the record as unknown_learner."""
        entry = self.learners.get(learner_id)
        if entry is None:
            self._dead(
                out,
                "unknown_learner",
                f"no learner {learner_id!r}: produce a LearnerConfig with this learner_id to the "
                "learners topic first",
                raw,
                source,
                now,
                learner_id,
                event_id,
            )
        return entry

    def _hold(self, key: str, raw: bytes, source: Source, now: float) -> None:
        """Keep a context of a not-yet-known learner until its config arrives (or the grace
        ends), together with any feedback already held for the same event."""
        record = self.pending.get(key)
        if record is None or record["status"] == "early":
            self.pending[key] = {
                "status": "awaiting_learner",
                "raw": _text(raw),
                "source": source.__dict__,
                "held": record["held"] if record else [],
                "partition": source.partition,
                "deadline": now + self.unknown_learner_grace_s,
            }
        self.sink.processed(source.topic, "held")

    def _release(self, learner_id: str, now: float, out: Emitted) -> None:
        """Decide the held contexts of ``learner_id`` (its config has just arrived)."""
        prefix = f"{learner_id}/"
        for key, record in list(self.pending.items()):
            if key.startswith(prefix) and record["status"] == "awaiting_learner":
                del self.pending[key]
                if record["held"]:
                    self.pending[key] = {
                        "status": "early",
                        "held": record["held"],
                        "partition": record["partition"],
                        "deadline": record["deadline"],
                    }
                released = self.on_context(record["raw"].encode(), Source(**record["source"]), now)
                out.decisions.extend(released.decisions)
                out.dead_letters.extend(released.dead_letters)

    def _learner(self, learner_id: str, entry: Entry) -> Learner:
        cached = self._cache.get(learner_id)
        if cached is not None and cached[0] == entry["revision"]:
            return cached[1]
        config = entry["config"]
        cls = learner_class(config["family"], config["algorithm"])
        learner = cls.from_state(config["params"], entry["state"])
        self._cache[learner_id] = (entry["revision"], learner)
        return learner

    def _write(self, learner_id: str, entry: Entry, learner: Learner) -> None:
        """Persist the entry (a fresh object: tables must see every change as a set)."""
        if self.persist_state:
            entry["state"] = learner.to_state()
        entry["revision"] += 1
        self.learners[learner_id] = entry
        self._cache[learner_id] = (entry["revision"], learner)
        if not self._report_gauges:
            return
        config = entry["config"]
        self.sink.learner_state(
            learner_id,
            config["family"],
            config["algorithm"],
            stats.gauges(config["family"], entry["stats"], learner.summary()),
        )

    @staticmethod
    def _editable(entry: Entry) -> Entry:
        """A copy of ``entry`` whose mutable parts can change without touching the store."""
        fresh = dict(entry)
        fresh["stats"] = dict(entry["stats"])
        fresh["settled"] = {**entry["settled"], "above": list(entry["settled"]["above"])}
        fresh["parts"] = {seq: list(parts) for seq, parts in entry["parts"].items()}
        return fresh

    # ------------------------------------------------------------------ config
    def on_config(self, key: str | None, raw: bytes | None, source: Source, now: float) -> Emitted:
        """A LearnerConfig (create or reconfigure) or a tombstone (delete the learner)."""
        out = Emitted()
        if raw is None:
            if key and self.learners.pop(key, None) is not None:
                self._cache.pop(key, None)
                # A re-created learner restarts at version 1: its predecessor's decisions
                # must not match its feedback.
                prefix = f"{key}/"
                for pending in [k for k, _ in self.pending.items() if k.startswith(prefix)]:
                    del self.pending[pending]
                self.sink.forget(key)
                self.sink.processed(source.topic, "deleted")
            return out
        config = self._parse(raw, LearnerConfig, source, now, out)
        if config is None:
            return out
        if key is not None and key != config.learner_id:
            self._dead(
                out,
                "key_mismatch",
                f"record key {key!r} differs from learner_id {config.learner_id!r}",
                raw,
                source,
                now,
                config.learner_id,
            )
            return out
        try:
            learner = make_learner(config.family, config.algorithm, config.params)
        except LearnerError as exc:
            self._dead(out, "invalid_config", str(exc), raw, source, now, config.learner_id)
            return out
        lid = config.learner_id
        new_config = config.model_dump(mode="json")
        old = self.learners.get(lid)
        identity = ("family", "algorithm", "params", "seed")
        if old is not None and all(old["config"][k] == new_config[k] for k in identity):
            entry = self._editable(old)
            entry["config"] = new_config  # only timeouts changed: keep learning
            self._write(lid, entry, self._learner(lid, old))
            self.sink.processed(source.topic, "updated")
            return out
        entry = {
            "config": new_config,
            "version": (old["version"] + 1) if old else 1,
            "revision": old["revision"] if old else 0,
            "seq": old["seq"] if old else 0,
            "settled": copy.deepcopy(old["settled"]) if old else settled_record.new(),
            "parts": copy.deepcopy(old["parts"]) if old else {},
            "stats": {},
        }
        self._write(lid, entry, learner)
        self.sink.processed(source.topic, "created" if old is None else "reconfigured")
        if old is None:
            self._release(lid, now, out)
        return out

    # ------------------------------------------------------------------ context
    def on_context(self, raw: bytes, source: Source, now: float) -> Emitted:
        out = Emitted()
        context = self._parse(raw, Context, source, now, out)
        if context is None:
            return out
        lid, eid = context.learner_id, context.event_id
        key = pending_key(lid, eid)
        entry = self.learners.get(lid)
        if entry is None:
            self._hold(key, raw, source, now)
            return out
        record = self.pending.get(key)
        if record is not None and record["status"] in ("open", "settled"):
            out.decisions.append(self._decision(lid, eid, entry, record, redelivered=True))
            self.sink.processed(source.topic, "deduplicated")
            return out
        held: list[dict[str, Any]] = record["held"] if record is not None else []
        last = entry.get("last_decided")
        if last is not None and last["event_id"] == eid:
            # Decided right before a crash that lost the pending write: restore the record
            # (never decide again: re-delivery may have changed the learner since).
            record = last["record"]
            self.pending[key] = record
            out.decisions.append(self._decision(lid, eid, entry, record, redelivered=True))
            self.sink.processed(source.topic, "restored")
            self._release_held(held, now, out)
            return out
        config = entry["config"]
        learner = self._learner(lid, entry)
        fields = context.model_dump(exclude=ENVELOPE, exclude_none=True)
        try:
            rng = LazyGenerator(config["seed"], eid)
            decided = learner.decide(fields, rng)  # type: ignore[arg-type]
        except (LearnerError, ValueError, TypeError, IndexError, KeyError) as exc:
            self._cache.pop(lid, None)
            reason = "learner_rejected" if isinstance(exc, LearnerError) else "learner_error"
            self._dead(out, reason, str(exc), raw, source, now, lid, eid)
            return out
        context_ts = context.ts if context.ts is not None else source.timestamp
        record = {
            "status": "open",
            "seq": entry["seq"],
            "version": entry["version"],
            "partition": source.partition,
            "decided_at": now,
            "context_ts": context_ts,
            "deadline": now + config["feedback_timeout_s"],
            "output": decided.output,
            "pending": decided.pending,
            "parts": [],
        }
        entry = self._editable(entry)
        entry["seq"] += 1
        entry["last_decided"] = {"event_id": eid, "record": record}
        stats.on_decided(
            entry["stats"], config["family"], decided.output, config["params"], learner.summary()
        )
        self._write(lid, entry, learner)  # the learner entry first, then the pending record
        self.pending[key] = record
        out.decisions.append(self._decision(lid, eid, entry, record, redelivered=False))
        self.sink.processed(source.topic, "decided")
        self.sink.decided(lid, max(0.0, now - (context_ts if context_ts is not None else now)))
        self._release_held(held, now, out)
        return out

    def _release_held(self, held: list[dict[str, Any]], now: float, out: Emitted) -> None:
        """Apply the feedback that arrived before its decision."""
        for item in held:
            self.sink.processed(item["source"]["topic"], "released_early_feedback")
            released = self.on_feedback(
                item["raw"].encode(), Source(**item["source"]), now, hold_if_unknown=False
            )
            out.dead_letters.extend(released.dead_letters)

    @staticmethod
    def _decision(
        lid: str, eid: str, entry: Entry, record: Mapping[str, Any], redelivered: bool
    ) -> Decision:
        config = entry["config"]
        return Decision(
            learner_id=lid,
            event_id=eid,
            family=config["family"],
            algorithm=config["algorithm"],
            learner_version=record["version"],
            output=record["output"],
            ts=record["decided_at"],
            decided_at=record["decided_at"],
            context_ts=record["context_ts"],
            redelivered=redelivered,
        )

    # ------------------------------------------------------------------ feedback
    def on_feedback(
        self, raw: bytes, source: Source, now: float, *, hold_if_unknown: bool = True
    ) -> Emitted:
        out = Emitted()
        feedback = self._parse(raw, Feedback, source, now, out)
        if feedback is None:
            return out
        lid, eid = feedback.learner_id, feedback.event_id

        def dead(reason: str, detail: str) -> Emitted:
            self._dead(out, reason, detail, raw, source, now, lid, eid)
            return out

        entry = self.learners.get(lid)
        key = pending_key(lid, eid)
        part = feedback.part or ""
        record = self.pending.get(key)
        if record is None or record["status"] in ("early", "awaiting_learner"):
            if not hold_if_unknown:
                return dead("unknown_decision", "no decision for this event_id")
            held = list(record["held"]) if record else []
            if any(item["part"] == part for item in held):
                self.sink.processed(source.topic, "deduplicated")
                return out
            held.append({"part": part, "raw": _text(raw), "source": source.__dict__})
            if record is not None:
                self.pending[key] = {**record, "held": held}
            else:
                grace = (
                    entry["config"]["early_feedback_grace_s"]
                    if entry is not None
                    else self.unknown_learner_grace_s
                )
                self.pending[key] = {
                    "status": "early",
                    "held": held,
                    "partition": source.partition,
                    "deadline": now + grace,
                }
            self.sink.processed(source.topic, "held")
            return out
        if entry is None:
            self._entry(lid, raw, source, now, out, eid)  # dead-letters: the learner was deleted
            return out
        if record["status"] == "settled":
            if part in record["parts"]:
                self.sink.processed(source.topic, "deduplicated")
                return out
            if record["settled_by"] == "timeout":
                return dead(
                    "decision_expired",
                    "feedback arrived after the decision's feedback timeout; the timeout rule "
                    "was already applied",
                )
            return dead(
                "decision_settled", f"the decision was already settled ({record['settled_by']})"
            )
        seq = record["seq"]
        if record["version"] != entry["version"]:
            entry = self._editable(entry)
            settled_record.settle(entry["settled"], seq)
            self.learners[lid] = entry
            self._settle(key, record, part, "stale_version", now)
            return dead(
                "stale_version",
                f"decided by learner version {record['version']}, which has since been "
                f"reconfigured to version {entry['version']}",
            )
        if self._already_applied(entry, seq, part):
            self._repair(key, record, entry, part, now)
            self.sink.processed(source.topic, "deduplicated")
            return out
        learner = self._learner(lid, entry)
        fields = feedback.model_dump(exclude=ENVELOPE, exclude_none=True)
        try:
            learned = learner.learn(record["pending"], fields)
        except (LearnerError, ValueError, TypeError, IndexError, KeyError) as exc:
            self._cache.pop(lid, None)
            return dead(
                "learner_rejected" if isinstance(exc, LearnerError) else "learner_error", str(exc)
            )
        entry = self._editable(entry)
        stats.on_learned(entry["stats"], learned.metrics, settled=learned.done)
        self._mark_applied(entry, seq, part, learned.done)
        self._write(lid, entry, learner)
        if learned.done:
            self._settle(key, record, part, "feedback", now)
        else:
            self.pending[key] = {**record, "parts": [*record["parts"], part]}
        self.sink.processed(source.topic, "applied")
        self.sink.feedback_applied(lid, max(0.0, now - record["decided_at"]))
        return out

    @staticmethod
    def _already_applied(entry: Entry, seq: int, part: str) -> bool:
        return settled_record.is_settled(entry["settled"], seq) or part in entry["parts"].get(
            str(seq), []
        )

    @staticmethod
    def _mark_applied(entry: Entry, seq: int, part: str, done: bool) -> None:
        if done:
            entry["parts"].pop(str(seq), None)
            settled_record.settle(entry["settled"], seq)
        else:
            entry["parts"][str(seq)] = [*entry["parts"].get(str(seq), []), part]

    def _repair(
        self, key: str, record: dict[str, Any], entry: Entry, part: str, now: float
    ) -> None:
        """Bring a pending record up to date with a learner write that preceded a crash."""
        if settled_record.is_settled(entry["settled"], record["seq"]):
            self._settle(key, record, part, "feedback", now)
        elif part not in record["parts"]:
            self.pending[key] = {**record, "parts": [*record["parts"], part]}

    def _settle(
        self, key: str, record: Mapping[str, Any], part: str | None, by: str, now: float
    ) -> None:
        parts = list(record["parts"]) + ([part] if part is not None else [])
        settled = {k: v for k, v in record.items() if k != "pending"}
        settled.update(status="settled", settled_by=by, settled_at=now, parts=parts)
        self.pending[key] = settled

    # ------------------------------------------------------------------ truth
    def on_truth(self, raw: bytes, source: Source, now: float) -> Emitted:
        """Ground truth for a decided event: exact coverage and regret for the metrics."""
        out = Emitted()
        truth = self._parse(raw, Truth, source, now, out)
        if truth is None:
            return out
        lid, eid = truth.learner_id, truth.event_id
        entry = self._entry(lid, raw, source, now, out, eid)
        if entry is None:
            return out
        record = self.pending.get(pending_key(lid, eid))
        if record is None or record["status"] == "early" or record["version"] != entry["version"]:
            self._dead(
                out,
                "unknown_decision",
                "truth for an event with no current decision",
                raw,
                source,
                now,
                lid,
                eid,
            )
            return out
        if record.get("truth"):
            self.sink.processed(source.topic, "deduplicated")
            return out
        entry = self._editable(entry)
        config = entry["config"]
        stats.on_truth(
            entry["stats"],
            config["family"],
            record["output"],
            truth.model_dump(exclude=ENVELOPE),
            config["params"],
        )
        self._write(lid, entry, self._learner(lid, entry))
        self.pending[pending_key(lid, eid)] = {**record, "truth": True}
        self.sink.processed(source.topic, "applied")
        return out

    # ------------------------------------------------------------------ timers
    def on_tick(self, partition: int, now: float) -> Emitted:
        """Expire overdue decisions, dead-letter unclaimed early feedback, purge tombstones."""
        out = Emitted()
        open_decisions = 0
        for key, record in list(self.pending.items()):
            if record["partition"] != partition:
                continue
            status = record["status"]
            if status == "open":
                if now >= record["deadline"]:
                    self._expire(key, record, now)
                else:
                    open_decisions += 1
            elif status in ("early", "awaiting_learner") and now >= record["deadline"]:
                del self.pending[key]
                lid, eid = key.split("/", 1)
                held = [(item["raw"], item["source"]) for item in record["held"]]
                if status == "awaiting_learner":
                    held.insert(0, (record["raw"], record["source"]))
                for text, origin in held:
                    raw, source = text.encode(), Source(**origin)
                    if self._entry(lid, raw, source, now, out, eid) is not None:
                        self._dead(
                            out,
                            "feedback_without_decision",
                            "no decision with this event_id arrived within the "
                            "early-feedback grace period (unknown or long-expired "
                            "event_id)",
                            raw,
                            source,
                            now,
                            lid,
                            eid,
                        )
            elif status == "settled" and now >= record["settled_at"] + self.retention_s:
                del self.pending[key]
        self.sink.pending(partition, open_decisions)
        return out

    def _expire(self, key: str, record: dict[str, Any], now: float) -> None:
        lid = key.split("/", 1)[0]
        entry = self.learners.get(lid)
        seq = record["seq"]
        if entry is not None and record["version"] == entry["version"]:
            if not settled_record.is_settled(entry["settled"], seq):
                learner = self._learner(lid, entry)
                learned = learner.expire(record["pending"])
                entry = self._editable(entry)
                stats.on_learned(entry["stats"], {**learned.metrics}, settled=True)
                self._mark_applied(entry, seq, "", done=True)
                self._write(lid, entry, learner)
        elif entry is not None:
            entry = self._editable(entry)
            settled_record.settle(entry["settled"], seq)
            self.learners[lid] = entry
        self._settle(key, record, None, "timeout", now)
        self.sink.processed("timer", "expired")
