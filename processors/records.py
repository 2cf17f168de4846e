"""Typed records of a partition's state, and their JSON form in the state log.

- :class:`LearnerEntry` - one per learner id: its config (a
  :class:`banditflow.schemas.LearnerConfig`), version,
  statistics and the live learner object (serialised with ``to_state`` only when the state
  log is written);
- :class:`DecisionRecord` - one per decided context, open until its feedback is complete,
  then settled (kept ``retention_s`` to re-emit the decision of a re-delivered context and
  to recognise duplicate feedback);
- :class:`Hold` - a record waiting for something else to arrive: feedback whose decision has
  not been made yet (``kind = "early"``) or a context of a learner whose config has not been
  processed yet (``kind = "awaiting_learner"``, with any feedback already held for it).

Times named ``deadline`` and ``settled_at`` are **stream time** (see
:mod:`banditflow.processors.processor`);
``decided_at`` is the worker's wall clock, published with the decision.

>>> record = DecisionRecord(1, 10.0, None, 40.0, {"labels": ["a"]}, {"scores": [0.5]})
>>> restored = DecisionRecord.from_json(record.to_json())
>>> restored.output, restored.output_value() == record.output
('{"labels":["a"]}', True)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, make_dataclass
from enum import StrEnum
from typing import Any

import orjson

from banditflow.learners.base import JSON, Learner
from banditflow.learners.registry import learner_class
from banditflow.processors.ope import LiveOPE, Round
from banditflow.schemas import DeadLetter, Decision, LearnerConfig


class Settled(StrEnum):
    """Why a decision stopped waiting for feedback."""

    FEEDBACK = "feedback"
    TIMEOUT = "timeout"
    STALE_VERSION = "stale_version"


SETTLED = {reason.value: reason for reason in Settled}


class Outcome(StrEnum):
    """What handling one record did: the ``outcome`` label of ``banditflow_records_total``."""

    CREATED = "created"  # a config made a new learner
    RECONFIGURED = "reconfigured"  # ... replaced one (a new version)
    UPDATED = "updated"  # ... changed only timeouts or candidates
    DELETED = "deleted"  # a tombstone removed one
    DECIDED = "decided"
    APPLIED = "applied"  # feedback reached its learner
    HELD = "held"  # waits for its decision or its learner's config
    RELEASED_EARLY_FEEDBACK = "released_early_feedback"  # held feedback met its decision
    DEDUPLICATED = "deduplicated"  # the same record again: nothing to do
    DEAD_LETTERED = "dead_lettered"
    EXPIRED = "expired"  # (timer) a decision settled by its timeout rule
    EXPIRE_FAILED = "expire_failed"  # (timer) ... settled, but its learner refused the rule


class HoldKind(StrEnum):
    EARLY = "early"  # feedback waiting for its decision
    AWAITING_LEARNER = "awaiting_learner"  # a context waiting for its learner's config
    AWAITING_UPDATES = "awaiting_updates"  # a context waiting for its after_updates (replay)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a record came from (for dead letters, routing checks and latency)."""

    topic: str
    partition: int = 0
    offset: int | None = None
    timestamp: float | None = None


def dead_letter(
    reason: str,
    detail: str,
    raw: bytes | None,
    source: Source,
    ts: float,
    learner_id: str | None = None,
    event_id: str | None = None,
    *,
    raw_kept: int | None = None,
) -> DeadLetter:
    """The dead letter of a record from ``source`` (every dead letter is made here): its
    detail cut to 4 KiB and its bytes to their first 64 KiB, or ``raw_kept`` bytes (the
    size is then given when they were cut)."""
    if raw_kept is None or raw is None or len(raw) <= raw_kept:
        kept = DeadLetter.raw_fields(raw)
    else:
        kept = {"raw": raw[:raw_kept].decode("utf-8", "replace"), "raw_size": len(raw)}
    return DeadLetter(
        reason=reason,
        detail=DeadLetter.detail_text(detail),
        source_topic=source.topic,
        partition=source.partition,
        offset=source.offset,
        learner_id=learner_id,
        event_id=event_id,
        **kept,
        ts=ts,
    )


@dataclass(slots=True)
class LearnerEntry:
    """A learner id's config, version and statistics, with its live learner.

    ``checkpoint`` is the learner's serialised state at the last checkpoint and ``redo`` the
    learner calls since: after a failed call the learner is rebuilt from both (learners are
    deterministic), so an event that raised changes nothing. ``updates`` counts the feedback
    and timeout updates this version absorbed; each decision carries the count it was made at
    (``learner_updates``), which is what a faithful replay reproduces.
    """

    config: LearnerConfig
    version: int
    stats: dict[str, float]
    learner: Learner
    updates: int = 0
    checkpoint: JSON = field(default_factory=dict)
    redo: list[tuple[Any, ...]] = field(default_factory=list)
    ope: LiveOPE | None = None  # its candidates' live evaluation (config ``candidates``)

    def __post_init__(self) -> None:
        if not self.checkpoint:
            self.mark_checkpoint(self.learner.to_state())

    def mark_checkpoint(self, state: JSON) -> None:
        self.checkpoint = state
        self.redo.clear()

    def same_learner(self, config: LearnerConfig) -> bool:
        """Whether ``config`` configures this learner (it may change only timeouts and
        candidates: candidates are evaluated beside the learner, never change it)."""
        old = self.config
        return (old.family, old.algorithm, old.params, old.seed) == (
            config.family, config.algorithm, config.params, config.seed
        )

    def rebuild(self, state: JSON) -> Learner:
        config = self.config
        return learner_class(config.family, config.algorithm).from_state(config.params, state)

    def config_json(self) -> JSON:
        """The config part (key ``c/<id>`` in the state log; written when it changes): the
        config as published, without ``candidates`` when there are none (the value logs
        written before candidates existed hold)."""
        config = self.config
        data = config.model_dump(mode="json", exclude=None if config.candidates else {"candidates"})
        return {"config": data, "version": self.version}

    def to_json(self) -> JSON:
        """The learning part (key ``l/<id>``; written whenever the learner changed), with
        its live OPE state when it has candidates (``ope``; older logs have none)."""
        state = self.learner.to_state()
        self.mark_checkpoint(state)
        data = {"stats": self.stats, "state": state, "updates": self.updates}
        if self.ope is not None:
            data["ope"] = self.ope.to_json()
        return data

    @classmethod
    def from_json(cls, config: JSON, learning: JSON) -> LearnerEntry:
        # (a field missing from an older log takes the config's default)
        settings = LearnerConfig.model_validate(config["config"])
        cls_ = learner_class(settings.family, settings.algorithm)
        learner = cls_.from_state(settings.params, learning["state"])
        ope = learning.get("ope")
        return cls(
            settings, config["version"], dict(learning["stats"]), learner,
            learning.get("updates", 0), learning["state"],  # (logs before updates: 0)
            ope=None if ope is None else LiveOPE.from_json(settings.family, ope),
        )


@dataclass(slots=True)
class DecisionRecord:
    """One decision: what was published and what learning needs when feedback comes.

    ``output`` is the published decision's output; a record read back from the state log
    holds it as JSON text until it is needed (a re-emission, ground truth), so that
    recovering many settled decisions costs little. In the log a record is a list, in the
    order of the fields.
    """

    version: int
    decided_at: float
    context_ts: float | None
    deadline: float
    output: JSON | str
    pending: JSON | None
    parts: list[str] = field(default_factory=list)
    settled_by: Settled | None = None
    settled_at: float | None = None
    truth: bool = False
    # part -> what its feedback said (feedback_digest), to tell the same feedback sent again
    # from a different one for the same part (records of older logs have none: a duplicate)
    digests: dict[str, str] = field(default_factory=dict)
    updates: int = 0  # the learner's updates when it decided (records of older logs: 0)
    # what live OPE needs when the feedback comes (processors.ope.LiveOPE.decide), until then
    ope: Round | None = None

    @property
    def open(self) -> bool:
        return self.settled_by is None

    def applied(self, part: str, digest: str) -> bool | None:
        """Whether feedback for ``part`` was applied: True if it said the same (``digest``),
        False if it said something else, None if none was."""
        if part not in self.parts:
            return None
        return self.digests.get(part, digest) == digest

    def output_value(self) -> JSON:
        """The output as a mapping (parsed from the log's text on first use)."""
        if isinstance(self.output, str):
            self.output = orjson.loads(self.output)
        return self.output  # type: ignore[return-value]

    def to_json(self) -> list[Any]:
        output = self.output if isinstance(self.output, str) else orjson.dumps(self.output)
        fields = [
            self.version, self.decided_at, self.context_ts, self.deadline,
            output if isinstance(output, str) else output.decode(), self.pending, self.parts,
            self.settled_by, self.settled_at, self.truth, self.digests, self.updates,
        ]
        # Only a learner with candidates has this: the others' records stay as they were.
        if self.ope is not None:
            fields.append(self.ope.to_json())
        return fields

    @classmethod
    def from_json(cls, data: list[Any]) -> DecisionRecord:
        record = cls(*data)
        if record.ope is not None:
            record.ope = Round.from_json(record.ope)  # type: ignore[arg-type]
        if record.settled_by is not None:
            record.settled_by = SETTLED[record.settled_by]  # (Settled(x) is 10x slower)
        return record


def _to_json(self: Any) -> bytes:
    if self._json is None:
        self._json = orjson.dumps(self)  # (fields in order; orjson leaves out _json)
    return self._json


# A decision as published on the decisions topic: a plain record with exactly the fields of
# banditflow.schemas.Decision, in its order (so that its JSON, written by orjson, is the
# schema's), made from the model here rather than declared again. Not the model itself: it
# is built for every decision, and building and writing the model costs four times as much.
Published = make_dataclass(
    "Published",
    [
        *(
            (name, info.annotation,
             field() if info.is_required() else field(default=info.default))
            for name, info in Decision.model_fields.items()
        ),
        ("_json", bytes | None, field(default=None, repr=False, compare=False)),
    ],
    kw_only=True,
    slots=True,
    namespace={"to_json": _to_json, "__module__": __name__},
)


@dataclass(slots=True)
class HeldRecord:
    """A raw record kept for later, with where it came from."""

    raw: str
    source: Source


@dataclass(slots=True)
class Hold:
    """Feedback waiting for its decision, or a context waiting for its learner (or, with
    ``after``, for its learner to have absorbed that many updates)."""

    kind: HoldKind
    deadline: float
    feedback: list[HeldRecord] = field(default_factory=list)
    context: HeldRecord | None = None
    after: int | None = None
    copies: int = 0  # the same context again while it waited for updates

    def to_json(self) -> JSON:
        data = {
            "kind": self.kind.value,
            "deadline": self.deadline,
            "feedback": [asdict(item) for item in self.feedback],
            "context": None if self.context is None else asdict(self.context),
        }
        if self.after is not None:
            data["after"] = self.after
        if self.copies:
            data["copies"] = self.copies
        return data

    @classmethod
    def from_json(cls, data: JSON) -> Hold:
        def held(item: JSON) -> HeldRecord:
            return HeldRecord(item["raw"], Source(**item["source"]))

        return cls(
            HoldKind(data["kind"]),
            data["deadline"],
            [held(item) for item in data["feedback"]],
            None if data["context"] is None else held(data["context"]),
            data.get("after"),
            data.get("copies", 0),
        )
