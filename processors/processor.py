"""The event logic of banditflow: decide, pending store, feedback join, timeouts, dedupe.

One :class:`Processor` serves one partition. Its :class:`banditflow.processors.store.PartitionStore`
holds the learner entries, the decision records (open until their feedback is complete,
then settled and kept the store's ``retention_s`` to re-emit the decision of a re-delivered
context and to recognise duplicate feedback) and the holds (feedback that arrived before its
decision, held ``early_feedback_grace_s``; a context whose learner config has not been
processed yet, held ``unknown_learner_grace_s``: a config and the first contexts produced
right after it may be consumed in either order).

**Time is stream time.** Every handler gets ``now``, how far the partition's input has
advanced in event time, and the timers judge each deadline against the stream it waits on
(:class:`StreamTimes`): a decision expires when the *feedback* stream has moved past its
deadline, early feedback when the *contexts* stream has, a held context when the *learners*
stream has. A worker still reading its backlog therefore never expires a decision whose
feedback is in that backlog. ``decided_at`` on a published decision is the worker's wall
clock (``wall_clock``), an observation that changes nothing.

**Durability is the caller's.** The processor changes the store in memory; the worker writes
the store's changes once per commit, atomically with the input offsets they cover (see
streams/statelog.py), so a crash loses the whole uncommitted batch or nothing, and the
redone batch gives the same decisions: everything here is deterministic given the store,
the events and ``now``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from banditflow.learners.base import ContradictingFeedback, Learned, Learner, LearnerError
from banditflow.learners.registry import family, make_learner
from banditflow.processors import stats
from banditflow.processors.estimators import PolicyEstimates
from banditflow.processors.ope import CandidateError, LiveOPE, log_failure
from banditflow.processors.records import (
    DecisionRecord,
    HeldRecord,
    Hold,
    HoldKind,
    LearnerEntry,
    Outcome,
    Published,
    Settled,
    Source,
    dead_letter,
)
from banditflow.processors.redo import LazyGenerator, call_logged, rollback
from banditflow.processors.sink import Sink
from banditflow.processors.store import EventKey, PartitionStore, event_ids, event_key, learner_of
from banditflow.schemas import (
    ContextEnvelope,
    DeadLetter,
    FeedbackEnvelope,
    LearnerConfig,
    Limits,
    Rejected,
    TruthEnvelope,
    family_events,
    parse_event,
    parse_family_event,
)
from banditflow.schemas.events import refuses_what_its_envelope_refuses

log = logging.getLogger(__name__)

# Fields every event carries that learners do not see (a feedback's ``part`` they do see).
ENVELOPE = {"schema_version", "learner_id", "event_id", "ts"}
# ... and a context's instruction to the worker, not to the learner
CONTEXT_ENVELOPE = ENVELOPE | {"after_updates"}
# The model of a record (by kind) read while its learner, and so its family, is unknown.
ENVELOPE_MODELS = {
    "context": ContextEnvelope, "feedback": FeedbackEnvelope, "truth": TruthEnvelope,
}
# Exceptions from a learner that mean "this event is unusable", not "the worker is broken"
# (a learner built from parameters it cannot work with is an invalid config).
LEARNER_FAILURES = (LearnerError, ValueError, TypeError, IndexError, KeyError, ArithmeticError)


def failure_reason(exc: Exception) -> str:
    """The dead-letter reason of an exception from a learner call."""
    if isinstance(exc, ContradictingFeedback):
        return "contradicting_feedback"
    return "learner_rejected" if isinstance(exc, LearnerError) else "learner_error"


@dataclass(frozen=True)
class StreamTimes:
    """How far a partition's input streams have advanced, in event time (seconds)."""

    learners: float
    contexts: float
    feedback: float

    @classmethod
    def at(cls, time: float) -> StreamTimes:
        """Every stream at ``time`` (offline replay, where rounds are the only clock)."""
        return cls(time, time, time)


@dataclass
class Emitted:
    """What handling one record produced: decisions to publish and records to dead-letter."""

    decisions: list[Published] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)

    def extend(self, other: Emitted) -> None:
        self.decisions.extend(other.decisions)
        self.dead_letters.extend(other.dead_letters)


def feedback_digest(fields: dict[str, Any]) -> str:
    """What a feedback's ``fields`` (its payload and part) say, as a short digest: equal for
    the same feedback sent again (also re-serialised, or with another ``ts``), different for a
    feedback that says otherwise."""
    text = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(text, digest_size=8).hexdigest()


def _text(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode("utf-8", errors="replace")


class Processor:
    """Framework-free handler of config, context, feedback, truth and tick events."""

    def __init__(
        self,
        store: PartitionStore | None = None,
        *,
        partition: int = 0,
        limits: Limits | None = None,
        sink: Sink | None = None,
        unknown_learner_grace_s: float = 10.0,
        expected_partition: Callable[[str], int] | None = None,
        wall_clock: Callable[[], float] | None = None,
        live_ope: bool = True,
    ) -> None:
        """``wall_clock`` stamps ``decided_at`` and dead letters; without it they carry the
        stream time (offline replay, where rounds are the only clock). ``live_ope``: evaluate
        the learners' candidates (:mod:`banditflow.processors.ope`); off, they are left as they
        are."""
        self.store = store if store is not None else PartitionStore()
        self.partition = partition
        self.limits = limits or Limits()
        self.sink: Sink = sink or Sink()
        self.unknown_learner_grace_s = unknown_learner_grace_s
        self.expected_partition = expected_partition
        self.wall_clock = wall_clock
        self._releasing = False  # deciding contexts that waited for updates (_updated)
        self.live_ope = live_ope

    def _wall(self, now: float) -> float:
        return now if self.wall_clock is None else self.wall_clock()

    # ------------------------------------------------------------------ helpers
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
            dead_letter(reason, detail, raw, source, self._wall(now), learner_id, event_id)
        )
        self.sink.processed(source.topic, Outcome.DEAD_LETTERED)

    def _parse(
        self, raw: bytes | None, model: type, source: Source, now: float, out: Emitted
    ) -> Any:
        if raw is None:
            self._dead(out, "malformed_json", "the record has no value (null)", raw, source, now)
            return None
        try:
            record = parse_event(raw, model, self.limits)
        except Rejected as rejected:
            self._refused(rejected, raw, source, now, out)
            return None
        return record if self._routed(record, raw, source, now, out) else None

    def _refused(
        self, rejected: Rejected, raw: bytes, source: Source, now: float, out: Emitted
    ) -> None:
        self._dead(out, rejected.reason, rejected.detail, raw, source, now,
                   rejected.learner_id, rejected.event_id)

    def _routed(self, record: Any, raw: bytes, source: Source, now: float, out: Emitted) -> bool:
        """Whether ``record`` came on its learner's partition (else it is dead-lettered)."""
        if self.expected_partition is None:
            return True
        expected = self.expected_partition(record.learner_id)
        if expected == source.partition:
            return True
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
        return False

    def _read(
        self, raw: bytes | None, kind: str, source: Source, now: float, out: Emitted
    ) -> tuple[Any, LearnerEntry | None] | None:
        """A ``kind`` record (context, feedback, truth) with its learner's entry: checked by
        the learner's family's model, or only by its envelope while the learner is unknown
        (entry None); None when it was dead-lettered.

        A record of a known learner is checked in one parse, by its family's model, when that
        model refuses all the envelope refuses (the built-in families' do:
        :func:`~banditflow.schemas.events.refuses_what_its_envelope_refuses`), so that a
        record it accepts passes both steps below. A record it refuses goes through them,
        envelope first, which say why as for any record (a refused record costs more
        parses than before; a valid one, half)."""
        model = self._one_parse_model(raw, kind)
        if model is not None:
            lid, entry, family_model = model
            try:
                record = parse_event(raw, family_model, self.limits)
            except Rejected:
                pass
            else:
                if record.learner_id == lid:  # (defensive: both parsers read the same JSON)
                    return (record, entry) if self._routed(record, raw, source, now, out) else None
        envelope = self._parse(raw, ENVELOPE_MODELS[kind], source, now, out)
        if envelope is None:
            return None
        entry = self.store.learners.get(envelope.learner_id)
        if entry is None:
            return envelope, None
        try:
            record = parse_family_event(raw, entry.config.family, kind, self.limits)
        except Rejected as rejected:
            self._refused(rejected, raw, source, now, out)
            return None
        return record, entry

    def _one_parse_model(
        self, raw: bytes | None, kind: str
    ) -> tuple[str, LearnerEntry, type] | None:
        """The learner id ``raw`` names, its entry and its family's ``kind`` model, if the
        learner is known and the model may read the record alone (a glance, no check:
        :meth:`_read` checks the record). orjson refuses NaN, Infinity and numbers beyond
        a double or 64 bits: such a record is read in the two steps, as before."""
        if raw is None or len(raw) > self.limits.max_event_bytes:
            return None
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        lid = value.get("learner_id") if isinstance(value, dict) else None
        entry = self.store.learners.get(lid) if isinstance(lid, str) else None
        if entry is None:
            return None
        try:
            model = getattr(family_events(entry.config.family), kind)
        except LearnerError:  # (its family is gone: the two steps say so as before)
            return None
        return (lid, entry, model) if refuses_what_its_envelope_refuses(model) else None

    def _unknown_learner(
        self, out: Emitted, raw: bytes, source: Source, now: float, lid: str, eid: str | None
    ) -> None:
        self._dead(
            out,
            "unknown_learner",
            f"no learner {lid!r}: produce a LearnerConfig with this learner_id to the learners "
            "topic first",
            raw,
            source,
            now,
            lid,
            eid,
        )

    # ------------------------------------------------------------------ config
    def on_config(self, key: str | None, raw: bytes | None, source: Source, now: float) -> Emitted:
        """A LearnerConfig (create or reconfigure) or a tombstone (delete the learner)."""
        out = Emitted()
        store = self.store
        if raw is None:
            if key and key in store.learners:
                # A re-created learner restarts at version 1: its predecessor's decisions
                # must not match its feedback, so they go with it; the contexts it held
                # for updates are dead-lettered.
                for held_key in store.held(key, HoldKind.AWAITING_UPDATES):
                    context = store.holds[held_key].context
                    assert context is not None
                    self._unknown_learner(out, context.raw.encode(), context.source, now, key,
                                          event_ids(held_key)[1])
                store.drop_learner(key)
                self.sink.forget(key)
                self.sink.processed(source.topic, Outcome.DELETED)
            return out
        config = self._parse(raw, LearnerConfig, source, now, out)
        if config is None:
            return out
        lid = config.learner_id
        if key is not None and key != lid:
            self._dead(
                out,
                "key_mismatch",
                f"record key {key!r} differs from learner_id {lid!r}",
                raw,
                source,
                now,
                lid,
            )
            return out
        try:
            learner = make_learner(config.family, config.algorithm, config.params)
        except LEARNER_FAILURES as exc:
            detail = str(exc) if isinstance(exc, LearnerError) else f"{type(exc).__name__}: {exc}"
            self._dead(out, "invalid_config", detail, raw, source, now, lid)
            return out
        declared = family(config.family)
        # (as live OPE keeps them: JSON)
        candidates = {name: candidate.model_dump(mode="json")
                      for name, candidate in config.candidates.items()}
        built: dict[str, Learner] = {}
        if candidates:
            try:
                built = LiveOPE.check(declared, learner, config.params, candidates)
            except CandidateError as exc:
                self._dead(out, "invalid_config", str(exc), raw, source, now, lid)
                return out
        old = store.learners.get(lid)
        if old is not None and old.same_learner(config):
            # Only timeouts or candidates changed: keep learning (and the estimates of the
            # candidates that stayed the same).
            if old.config.candidates != config.candidates:
                old.ope = LiveOPE.configure(declared, old.learner, config.params, candidates,
                                            built, old.ope, int(old.stats.get("decisions", 0)))
                store.touch_learner(lid)
            old.config = config
            store.touch_config(lid)
            self.sink.processed(source.topic, Outcome.UPDATED)
            return out
        version = old.version + 1 if old is not None else 1
        # A new learner version is a new logged policy: its evaluation starts afresh.
        ope = LiveOPE.configure(declared, learner, config.params, candidates, built, None, 0)
        store.put_learner(lid, LearnerEntry(config, version, {}, learner, ope=ope))
        self.sink.processed(source.topic, Outcome.CREATED if old is None else Outcome.RECONFIGURED)
        # The contexts held for the config are decided (and may now wait for updates); a
        # new version counts updates from 0, so those held for updates are decided as they
        # are: theirs will not come.
        kind = HoldKind.AWAITING_LEARNER if old is None else HoldKind.AWAITING_UPDATES
        self._decide_held(store.held(lid, kind), kind, now, out)
        return out

    # ------------------------------------------------------------------ context
    def on_context(
        self, raw: bytes, source: Source, now: float, *, hold_for_updates: bool = True
    ) -> Emitted:
        """Decide a context (unless its ``after_updates`` says to hold it, and
        ``hold_for_updates``)."""
        out = Emitted()
        read = self._read(raw, "context", source, now, out)
        if read is None:
            return out
        context, entry = read
        lid, eid = context.learner_id, context.event_id
        key = event_key(lid, eid)
        store = self.store
        if entry is None:  # (checked by its family's model once its learner is known)
            self._hold_context(key, raw, source, now)
            return out
        config = entry.config
        record = store.decision(key)
        if record is not None:
            out.decisions.append(self._decision(lid, eid, entry, record, redelivered=True))
            self.sink.processed(source.topic, Outcome.DEDUPLICATED)
            return out
        fields = context.model_dump(exclude=CONTEXT_ENVELOPE, exclude_none=True)
        declared = family(config.family)
        after = context.after_updates
        if hold_for_updates and after is not None and entry.updates < after:
            self._await_updates(key, raw, source, now, after, config.feedback_timeout_s)
            return out
        try:
            decided = call_logged(entry, LEARNER_FAILURES, "decide", fields,
                                  LazyGenerator(config.seed, eid))
        except LEARNER_FAILURES as exc:
            self._dead(out, failure_reason(exc), str(exc), raw, source, now, lid, eid)
            return out
        context_ts = context.ts if context.ts is not None else source.timestamp
        decided_at = self._wall(now)
        record = DecisionRecord(
            version=entry.version,
            decided_at=decided_at,
            context_ts=context_ts,
            deadline=now + config.feedback_timeout_s,
            output=decided.output,
            pending=decided.pending,
            updates=entry.updates,
        )
        decision = self._decision(lid, eid, entry, record, redelivered=False)
        size = len(decision.to_json())
        if size > self.limits.max_event_bytes:  # it could not be published: undo it
            entry.redo.pop()
            rollback(entry)
            self._dead(
                out, "oversize",
                f"its decision would take {size} bytes, over the limit of "
                f"{self.limits.max_event_bytes} (--max-event-bytes)",
                raw, source, now, lid, eid,
            )
            return out
        if entry.ope is not None and self.live_ope:
            # (the decision's index: stats.on_decided below counts it)
            try:
                record.ope = entry.ope.decide(declared, entry.learner, fields, eid,
                                              decided.output, int(entry.stats.get("decisions", 0)))
            except Exception as exc:  # the evaluation must never cost the live decision
                entry.ope.failures += 1
                log_failure("scoring a decision", exc)
        stats.on_decided(
            entry.stats, type(entry.learner), decided.output, config.params,
            entry.learner.summary(),
        )
        store.touch_learner(lid)
        store.put_decision(key, record)
        out.decisions.append(decision)
        self.sink.processed(source.topic, Outcome.DECIDED)
        early = store.drop_hold(key)
        if early is not None:
            for item in early.feedback:
                self.sink.processed(item.source.topic, Outcome.RELEASED_EARLY_FEEDBACK)
                out.extend(self.on_feedback(
                    item.raw.encode(), item.source, now, hold_if_unknown=False
                ))
        return out

    def _await_updates(
        self, key: EventKey, raw: bytes, source: Source, now: float, after: int, timeout_s: float
    ) -> None:
        """Keep a context until its learner has absorbed ``after`` updates (a faithful replay:
        the feedback sent before it may be read after it), at most the learner's feedback
        timeout of feedback stream time; then it is decided as it is."""
        store = self.store
        hold = store.holds.get(key)
        if hold is not None and hold.kind is HoldKind.AWAITING_UPDATES:
            hold.copies += 1  # the same event again: its decision is re-emitted with the first
            store.touch_hold(key)
        else:
            feedback = hold.feedback if hold is not None else []
            store.put_hold(key, Hold(HoldKind.AWAITING_UPDATES, now + timeout_s, feedback,
                                     HeldRecord(_text(raw), source), after))
        self.sink.processed(source.topic, Outcome.HELD)

    def _updated(self, learner_id: str, entry: LearnerEntry, now: float, out: Emitted) -> None:
        """Count an update of ``learner_id`` and decide the contexts that waited for it."""
        entry.updates += 1
        # (_releasing: a context released below applied its early feedback)
        if self._releasing or not self.store.awaits_updates(learner_id):
            return
        self._releasing = True
        store = self.store

        def reached() -> Iterator[EventKey]:  # (lazily: each decision may reach the next)
            while (current := store.learners.get(learner_id)) is not None and (
                key := store.next_awaiting(learner_id, current.updates)
            ) is not None:
                yield key

        try:
            self._decide_held(reached(), HoldKind.AWAITING_UPDATES, now, out)
        finally:
            self._releasing = False

    def _decide_held(
        self, keys: Iterable[EventKey], kind: HoldKind, now: float, out: Emitted
    ) -> None:
        """Decide the contexts held under ``keys`` for ``kind`` (those no longer held so were
        decided meanwhile): one held for its learner may now wait for updates, one held for
        updates is decided as it is, its copies re-emitting the decision. Feedback held with
        a context is applied once it is decided."""
        store = self.store
        waits = kind is HoldKind.AWAITING_LEARNER  # (may it wait for updates now)
        failed = 0
        for key in keys:
            hold = store.holds.get(key)
            if hold is None or hold.kind is not kind:
                continue
            store.drop_hold(key)
            if hold.feedback:
                store.put_hold(key, Hold(HoldKind.EARLY, hold.deadline, hold.feedback))
            context = hold.context
            assert context is not None
            raw = context.raw.encode()
            try:
                for _ in range(1 + hold.copies):
                    out.extend(self.on_context(raw, context.source, now, hold_for_updates=waits))
            except Exception as exc:  # one held context must not cost the others theirs
                if not failed:  # one traceback, not one per held context
                    log.exception("internal error deciding the held context %r", key)
                failed += 1
                self._dead(out, "internal_error", f"{type(exc).__name__}: {exc}", raw,
                           context.source, now, *event_ids(key))
        if failed > 1:
            log.error("%d held contexts failed to be decided (dead-lettered as internal_error); "
                      "the first one's traceback is above", failed)

    def _hold_context(self, key: EventKey, raw: bytes, source: Source, now: float) -> None:
        """Keep a context of a not-yet-known learner until its config arrives (or the grace
        ends), together with any feedback already held for the same event."""
        store = self.store
        hold = store.holds.get(key)
        if hold is None or hold.kind is HoldKind.EARLY:
            store.put_hold(
                key,
                Hold(
                    HoldKind.AWAITING_LEARNER,
                    now + self.unknown_learner_grace_s,
                    hold.feedback if hold is not None else [],
                    HeldRecord(_text(raw), source),
                ),
            )
        self.sink.processed(source.topic, Outcome.HELD)

    @staticmethod
    def _decision(
        lid: str, eid: str, entry: LearnerEntry, record: DecisionRecord, redelivered: bool
    ) -> Published:
        config = entry.config
        return Published(
            learner_id=lid, ts=record.decided_at, event_id=eid, family=config.family,
            algorithm=config.algorithm, learner_version=record.version,
            learner_updates=record.updates, output=record.output_value(),
            decided_at=record.decided_at, context_ts=record.context_ts, redelivered=redelivered,
        )

    # ------------------------------------------------------------------ feedback
    def on_feedback(
        self, raw: bytes, source: Source, now: float, *, hold_if_unknown: bool = True
    ) -> Emitted:
        out = Emitted()
        read = self._read(raw, "feedback", source, now, out)
        if read is None:
            return out
        feedback, entry = read  # (an unknown learner's: its family's model checks it once released)
        lid, eid = feedback.learner_id, feedback.event_id
        store = self.store

        def dead(reason: str, detail: str) -> Emitted:
            self._dead(out, reason, detail, raw, source, now, lid, eid)
            return out

        key = event_key(lid, eid)
        record = store.decision(key)
        if record is None:
            if not hold_if_unknown:
                return dead("unknown_decision", "no decision for this event_id")
            self._hold_feedback(key, lid, raw, source, now)
            return out
        if entry is None:  # unreachable while deleting a learner drops its decisions
            self._unknown_learner(out, raw, source, now, lid, eid)
            return out
        fields = feedback.model_dump(exclude=ENVELOPE, exclude_none=True)
        part = type(entry.learner).feedback_part(fields)
        digest = feedback_digest(fields)
        applied = record.applied(part, digest)
        if applied is False:
            return dead(
                "contradicting_feedback",
                "different feedback for this decision" + (f" (part {part!r})" if part else "")
                + " was applied first; this one is not",
            )
        if applied:
            self.sink.processed(source.topic, Outcome.DEDUPLICATED)
            return out
        if not record.open:
            if record.settled_by is Settled.TIMEOUT:
                return dead(
                    "decision_expired",
                    "feedback arrived after the decision's feedback timeout; the timeout rule "
                    "was already applied",
                )
            return dead(
                "decision_settled", f"the decision was already settled ({record.settled_by})"
            )
        if record.version != entry.version:
            store.settle(key, record, Settled.STALE_VERSION, now)
            return dead(
                "stale_version",
                f"decided by learner version {record.version}, which has since been "
                f"reconfigured to version {entry.version}",
            )
        declared = family(entry.config.family)
        try:
            learned: Learned = call_logged(entry, LEARNER_FAILURES, "learn", record.pending,
                                           fields)
        except LEARNER_FAILURES as exc:
            return dead(failure_reason(exc), str(exc))
        stats.on_learned(entry.stats, learned.metrics, settled=learned.done)
        store.touch_learner(lid)
        record.parts.append(part)
        record.digests[part] = digest
        if record.ope is not None:  # scored once, by the feedback that follows the decision
            scored, record.ope = record.ope, None
            if entry.ope is not None and self.live_ope:
                try:
                    entry.ope.observe(declared, scored, fields)
                except Exception as exc:  # the evaluation must never cost the live feedback
                    entry.ope.failures += 1
                    log_failure("scoring a feedback", exc)
        if learned.done:
            store.settle(key, record, Settled.FEEDBACK, now)
        else:
            store.touch_decision(key)
        self.sink.processed(source.topic, Outcome.APPLIED)
        self.sink.feedback_applied(lid, max(0.0, self._wall(now) - record.decided_at))
        self._updated(lid, entry, now, out)
        return out

    def _hold_feedback(
        self, key: EventKey, lid: str, raw: bytes, source: Source, now: float
    ) -> None:
        """Keep feedback that arrived before its decision (the grace of its learner, or of an
        unknown learner when the config has not arrived either)."""
        store = self.store
        hold = store.holds.get(key)
        text = _text(raw)
        # Only the same record again is a duplicate: another with the same part may be the
        # true feedback after a contradicting one (each is judged once the decision exists).
        if hold is not None and any(item.raw == text for item in hold.feedback):
            self.sink.processed(source.topic, Outcome.DEDUPLICATED)
            return
        held = HeldRecord(text, source)
        if hold is not None:
            hold.feedback.append(held)
            store.touch_hold(key)
        else:
            entry = store.learners.get(lid)
            grace = (
                entry.config.early_feedback_grace_s
                if entry is not None
                else self.unknown_learner_grace_s
            )
            store.put_hold(key, Hold(HoldKind.EARLY, now + grace, [held]))
        self.sink.processed(source.topic, Outcome.HELD)

    # ------------------------------------------------------------------ truth
    def on_truth(self, raw: bytes, source: Source, now: float) -> Emitted:
        """Ground truth for a decided event: exact coverage and regret for the metrics."""
        out = Emitted()
        read = self._read(raw, "truth", source, now, out)
        if read is None:
            return out
        truth, entry = read
        lid, eid = truth.learner_id, truth.event_id
        store = self.store
        if entry is None:
            self._unknown_learner(out, raw, source, now, lid, eid)
            return out
        key = event_key(lid, eid)
        record = store.decision(key)
        if record is None or record.version != entry.version:
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
        if record.truth:
            self.sink.processed(source.topic, Outcome.DEDUPLICATED)
            return out
        config = entry.config
        stats.on_truth(
            entry.stats,
            type(entry.learner),
            record.output_value(),
            truth.model_dump(exclude=ENVELOPE),
            config.params,
        )
        record.truth = True
        store.touch_learner(lid)
        store.touch_decision(key)
        self.sink.processed(source.topic, Outcome.APPLIED)
        return out

    # ------------------------------------------------------------------ timers
    def on_tick(self, times: StreamTimes) -> Emitted:
        """Expire overdue decisions, dead-letter unclaimed holds, purge settled decisions.

        Each deadline is judged on the stream it waits for (see :class:`StreamTimes`).
        """
        out = Emitted()
        store = self.store
        # Purge first: a decision that expires now is kept at least until the next tick.
        for key in list(store.due_purges(min(times.contexts, times.feedback))):
            store.drop_decision(key)
        for key, record in list(store.due_decisions(times.feedback)):
            self._expire(key, record, times.feedback, out)
        waited = [key for key, _ in store.due_holds(HoldKind.AWAITING_UPDATES, times.feedback)]
        # (their updates did not come: decided as they are)
        self._decide_held(waited, HoldKind.AWAITING_UPDATES, times.feedback, out)
        if waited:
            log.warning("%d contexts were decided without the updates they waited for "
                        "(after_updates): the feedback stream moved past their deadline",
                        len(waited))
        for kind, time in (
            (HoldKind.EARLY, times.contexts),
            (HoldKind.AWAITING_LEARNER, times.learners),
        ):
            for key, hold in list(store.due_holds(kind, time)):
                store.drop_hold(key)
                self._dead_hold(key, hold, time, out)
        self.sink.pending(self.partition, store.open_decisions)
        return out

    def _dead_hold(self, key: EventKey, hold: Hold, now: float, out: Emitted) -> None:
        lid, eid = event_ids(key)
        held = ([hold.context] if hold.context is not None else []) + hold.feedback
        known = lid in self.store.learners
        for item in held:
            raw = item.raw.encode()
            if not known:
                self._unknown_learner(out, raw, item.source, now, lid, eid)
            else:
                self._dead(
                    out,
                    "feedback_without_decision",
                    "no decision with this event_id arrived within the early-feedback grace "
                    "period (unknown or long-expired event_id)",
                    raw,
                    item.source,
                    now,
                    lid,
                    eid,
                )

    def _expire(self, key: EventKey, record: DecisionRecord, now: float, out: Emitted) -> None:
        lid = learner_of(key)
        entry = self.store.learners.get(lid)
        outcome = Outcome.EXPIRED
        updated = None  # the learner the timeout rule updated
        if entry is not None and record.version == entry.version:
            try:
                learned: Learned = call_logged(entry, LEARNER_FAILURES, "expire",
                                               record.pending)
            except LEARNER_FAILURES:  # the learner is unchanged (see call_logged); still settle
                outcome = Outcome.EXPIRE_FAILED
            else:
                stats.on_learned(entry.stats, learned.metrics, settled=True)
                self.store.touch_learner(lid)
                updated = entry
        self.store.settle(key, record, Settled.TIMEOUT, now)
        self.sink.processed("timer", outcome)
        if updated is not None:
            self._updated(lid, updated, now, out)

    # ------------------------------------------------------------------ metrics
    def gauges(self, learner_id: str) -> dict[str, Any] | None:
        """A learner's live gauges (coverage, threshold, regret, ...), None if unknown."""
        entry = self.store.learners.get(learner_id)
        if entry is None:
            return None
        return stats.gauges(type(entry.learner), entry.stats, entry.learner.summary())

    def ope_estimates(self, learner_id: str) -> list[PolicyEstimates] | None:
        """A learner's live OPE estimates (the logged policy's, then each candidate's), None
        if it has no candidates."""
        entry = self.store.learners.get(learner_id)
        if entry is None or entry.ope is None:
            return None
        return entry.ope.estimates()
