"""Pydantic models of every record on banditflow's topics.

The envelope (learner id, event id, time, version) is declared here; each family's contexts,
feedback and truth are models of its own on these bases (:class:`FamilyEvents`), in the module
its front door names (``Family.events``; the built-in families' are beside this one). The
worker reads a record of a known learner with its family's model, and any other record's
envelope first (:class:`ContextEnvelope`, ...), the rest with its learner's family's model
once the learner is known (:func:`refuses_what_its_envelope_refuses` says why both ways
agree).
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, ClassVar, NamedTuple, Union

import orjson
from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator, model_validator
from pydantic_core import PydanticCustomError

from banditflow.learners.base import LearnerError
from banditflow.learners.family import Family
from banditflow.learners.registry import families, family, generation

SCHEMA_VERSION = 1

Id = Annotated[str, Field(min_length=1, max_length=256)]
LearnerId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")]


class Record(BaseModel):
    """Common envelope: strict types, finite numbers, no unknown fields."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")

    schema_version: int = Field(SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)
    learner_id: LearnerId
    ts: float | None = Field(None, description="event time, seconds since the epoch")


def _storable(params: dict[str, Any]) -> dict[str, Any]:
    # The config is stored in the state log with the learner; one that cannot be encoded
    # there would fail every commit of its partition.
    try:
        orjson.dumps(params)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"params cannot be stored: {exc} (integers must fit in 64 bits)") from None
    return params


MAX_CANDIDATES = 8
CandidateName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")]


class CandidateConfig(BaseModel):
    """A candidate policy evaluated live beside a learner: a learner of the same family."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")

    algorithm: Annotated[str, Field(min_length=1, max_length=64)]
    params: dict[str, Any] = Field(default_factory=dict)
    seed: int = Field(0, ge=0, lt=2**63)
    # processors.ope.MIN_PROPENSITY: every clipped logged propensity is at least this
    explore_eval_bound: float = Field(
        1e-3, gt=0, le=1,
        description="explore_eval: the candidate learns from a logged round with probability "
        "pi(a) * bound / mu(a); rounds whose logged propensity mu is below the bound are "
        "accepted with probability capped at 1 (counted: banditflow_ope_clipped_rounds). "
        "The default, the propensity clipping floor, is never below mu; a larger bound "
        "learns from more rounds")

    _encodable_params = field_validator("params")(_storable)


def _candidate_names(schema: dict[str, Any]) -> None:
    """JSON Schema of ``candidates``: pydantic puts the name pattern in patternProperties,
    which only says what a matching name's value is (a name that does not match would pass);
    propertyNames enforces it."""
    (pattern, value), = schema.pop("patternProperties").items()
    schema["additionalProperties"] = value
    schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}


class LearnerConfig(Record):
    """Creates or reconfigures a learner (compacted ``learners`` topic, key = learner_id)."""

    family: str = Field(json_schema_extra={"enum": list(families())})
    algorithm: Annotated[str, Field(min_length=1, max_length=64)]
    params: dict[str, Any] = Field(default_factory=dict)
    seed: int = Field(0, ge=0, lt=2**63)
    feedback_timeout_s: float = Field(300.0, gt=0)
    early_feedback_grace_s: float = Field(30.0, ge=0)
    candidates: dict[CandidateName, CandidateConfig] = Field(
        default_factory=dict,
        max_length=MAX_CANDIDATES,
        description="candidate policies (name -> a learner config of the same family) "
        "evaluated off-policy on this learner's live decisions and feedback (families whose "
        "decisions carry a distribution p: graph_cb); changing only them keeps the learner",
        json_schema_extra=_candidate_names,
    )

    @field_validator("family")
    @classmethod
    def _known_family(cls, name: str) -> str:
        # Checked against the registry when the config is read, so that a family registered
        # later (learners.registry.register) is accepted too.
        known = list(families())
        if name not in known:
            expected = ", ".join(repr(n) for n in known[:-1]) + f" or {known[-1]!r}"
            raise PydanticCustomError(
                "literal_error", "Input should be {expected}", {"expected": expected}
            )
        return name

    _encodable_params = field_validator("params")(_storable)


class ContextRecord(Record):
    """A context event: the application asks for a decision. The base of every family's
    context model (:func:`family_events`), which adds the fields its learners read."""

    event_id: Id
    after_updates: int | None = Field(
        None, ge=0, le=2**53,
        description="decide only once the learner has absorbed this many feedback and timeout "
        "updates (its learner_updates): set by `banditflow replay --faithful` from the live "
        "decision, so that a replay keeps the live order of contexts and feedback",
    )

    SIZED: ClassVar[Mapping[str, str]] = {}
    """Fields bounded by a worker input limit, with the :class:`banditflow.schemas.Limits`
    attribute bounding them (``max_labels``: the list's length; ``max_features``: the numbers
    in it, nested lists included)."""


class FeedbackRecord(Record):
    """Whatever the application observed for an earlier decision (same event_id). The base
    of every family's feedback model, which adds the fields its learners read."""

    event_id: Id
    part: Annotated[str, Field(min_length=1, max_length=32)] | None = Field(
        None, description="which part of a multi-part feedback this is (deferral: model|human)"
    )

    QUALIFIERS: ClassVar[frozenset[str]] = frozenset()
    """Fields that qualify another and say nothing on their own (feedback carrying only
    these is refused as empty)."""

    @model_validator(mode="after")
    def _carries_something(self) -> FeedbackRecord:
        payload = [name for name in payload_fields(type(self)) if name not in self.QUALIFIERS]
        if all(getattr(self, name) is None for name in payload):
            raise ValueError(
                f"feedback carries nothing; expected one of {', '.join(payload)}"
            )
        return self


class TruthRecord(Record):
    """Full ground truth for an event, read only by the metrics side (simulation, audits).
    The base of every family's truth model."""

    event_id: Id


# What the worker reads of a record before it knows the learner's family: the envelope,
# checked, and fields some family's records carry; the family's model checks them once it is
# known.
_ENVELOPE = ConfigDict(extra="allow")


def _known_fields(record: BaseModel, kind: str) -> None:
    extra = record.model_extra or {}
    known = any_family_fields(kind)
    unknown = sorted(name for name in extra if name not in known)
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: Extra inputs are not permitted (no family's "
                         f"{kind} has such a field)")
    for name, value in extra.items():  # (no family's field takes NaN or Infinity)
        where = _non_finite(value, name)
        if where is not None:
            raise PydanticCustomError("finite_number", "{where}: Input should be a finite number",
                                      {"where": where})


def _non_finite(value: Any, where: str) -> str | None:
    """Where ``value`` (at ``where``) holds a NaN or an infinity, as pydantic names a place
    (``actions.0.features.1``); None if nowhere."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    if isinstance(value, list):
        try:  # (numbers only: a NaN or an infinity among them makes their sum one)
            if math.isfinite(sum(value)):
                return None
        except (TypeError, OverflowError, ValueError):  # (not numbers only; a huge int)
            pass
        items: Iterable[tuple[Any, Any]] = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    else:
        return None
    for key, item in items:
        if isinstance(item, float | list | dict):
            found = _non_finite(item, f"{where}.{key}")
            if found is not None:
                return found
    return None


class ContextEnvelope(ContextRecord):
    """A context's envelope (its other fields are its family's to check)."""

    model_config = _ENVELOPE

    @model_validator(mode="after")
    def _fields_of_a_family(self) -> ContextEnvelope:
        _known_fields(self, "context")
        return self


class FeedbackEnvelope(Record):
    """A feedback's envelope (its other fields are its family's to check)."""

    model_config = _ENVELOPE

    event_id: Id
    part: Any = None

    @model_validator(mode="after")
    def _fields_of_a_family(self) -> FeedbackEnvelope:
        _known_fields(self, "feedback")
        return self


class TruthEnvelope(TruthRecord):
    """A truth's envelope (its other fields are its family's to check)."""

    model_config = _ENVELOPE

    @model_validator(mode="after")
    def _fields_of_a_family(self) -> TruthEnvelope:
        _known_fields(self, "truth")
        return self


Features = list[float] | list[list[float]] | None
"""A feature vector, or one per action (graph_cb and deferral contexts)."""


class FamilyEvents(NamedTuple):
    """A family's event models: what its contexts, feedback and truth carry, with their
    validation (a validator's ``ValueError`` makes the event an ``invalid_schema`` dead
    letter). A family's front door names the module defining them (``Family.events``:
    ``EVENTS = FamilyEvents(...)``)."""

    context: type[ContextRecord]
    feedback: type[FeedbackRecord]
    truth: type[TruthRecord] = TruthRecord


LIMITS = ("max_labels", "max_features")


# family name -> (its declaration, its checked event models): read for every record
_EVENTS: dict[str, tuple[Family, FamilyEvents]] = {}


def family_events(name: str) -> FamilyEvents:
    """The event models of family ``name``, from the module its front door names; raises
    :class:`LearnerError` for an unknown family or a module that is not a family's models."""
    declared = family(name)
    known = _EVENTS.get(name)
    if known is not None and known[0] is declared:  # (a family registered again: checked anew)
        return known[1]
    events = _checked_events(name, declared)
    _EVENTS[name] = (declared, events)
    return events


def _checked_events(name: str, declared: Family) -> FamilyEvents:
    events = getattr(importlib.import_module(declared.events), "EVENTS", None)
    if not isinstance(events, FamilyEvents):
        raise LearnerError(
            f"family {name!r}: {declared.events} defines no EVENTS = FamilyEvents(...)")
    for kind, base in zip(FamilyEvents._fields, (ContextRecord, FeedbackRecord, TruthRecord),
                          strict=True):
        if not issubclass(getattr(events, kind), base):
            raise LearnerError(f"family {name!r}: its {kind} model is not a {base.__name__}")
    unknown = set(events.context.SIZED.values()) - set(LIMITS)
    if unknown:
        raise LearnerError(f"family {name!r}: its context fields are bounded by unknown limits "
                           f"{sorted(unknown)}; the limits are {', '.join(LIMITS)}")
    return events


@functools.cache  # (asked for every record: a model never changes)
def refuses_what_its_envelope_refuses(model: type[Record]) -> bool:
    """Whether a family's event ``model`` alone refuses every record its envelope model
    (:class:`ContextEnvelope`, ...) refuses, so that the worker may read a known learner's
    record in one parse (``Processor._read`` in processors/processor.py). It does if it keeps
    :class:`Record`'s config (strict types, finite numbers, no field beyond its own), its
    base's envelope fields as they are, and no alias, and no validator that sees the input
    before its fields are checked: then each field it takes is some family's and checked
    at least as strictly. The built-in families' models all do (tests/unit/test_schemas.py);
    a plug-in's that does not is read envelope first, as any record of an unknown learner."""
    config, strict = model.model_config, Record.model_config
    if any(config.get(key) != strict.get(key) for key in ("strict", "allow_inf_nan", "extra")):
        return False
    if config.get("alias_generator") is not None or any(
        info.alias is not None or info.validation_alias is not None
        for info in model.model_fields.values()
    ):
        return False
    base = next(b for b in (ContextRecord, FeedbackRecord, TruthRecord) if issubclass(model, b))
    if any(repr(model.model_fields.get(name)) != repr(info)
           for name, info in base.model_fields.items()):
        return False
    decorators = model.__pydantic_decorators__
    if any(v.info.mode != "after" for v in decorators.model_validators.values()):
        return False
    return not any(v.info.mode != "after" and set(v.info.fields) & set(base.model_fields)
                   for v in decorators.field_validators.values())


@functools.cache  # (read for every record: a model's fields never change)
def payload_fields(model: type[Record]) -> tuple[str, ...]:
    """The fields of a family's event model beyond the envelope its base declares."""
    base = next(b for b in (ContextRecord, FeedbackRecord, TruthRecord) if issubclass(model, b))
    return tuple(name for name in model.model_fields if name not in base.model_fields)


def any_family_fields(kind: str) -> frozenset[str]:
    """The fields some family's ``kind`` records (context, feedback, truth) carry beyond
    their envelope."""
    return _any_family_fields(kind, generation())


@functools.cache  # (one entry per kind and set of families)
def _any_family_fields(kind: str, _generation: int) -> frozenset[str]:
    return frozenset(name for other in families()
                     for name in payload_fields(getattr(family_events(other), kind)))


def _topic_model(kind: str, doc: str) -> Any:
    """One model per topic for its published JSON Schema and the gateway's OpenAPI document:
    any family's record (``anyOf``: a record does not name its family, its learner's config
    does, and one may fit several families, e.g. a ``features``-only context), of the
    families known when this module is first imported (the built-in ones; the worker checks
    a record with its family's model, :func:`family_events`, whenever that was registered)."""
    members = tuple(getattr(family_events(name), kind) for name in families())
    model = RootModel[Union[members]]  # type: ignore[valid-type]  # noqa: UP007
    return type(kind.capitalize(), (model,), {"__doc__": doc, "__module__": __name__})


Context = _topic_model("context", "A context event, of any family (its learner's config says "
                       "which).")
Feedback = _topic_model("feedback", "A feedback event, of any family (its learner's config "
                        "says which).")
Truth = _topic_model("truth", "A truth event, of any family (its learner's config says which).")


class Decision(Record):
    """Published for every decided context (and re-published for a re-delivered one)."""

    event_id: Id
    family: str
    algorithm: str
    learner_version: int
    learner_updates: int = Field(
        0, ge=0,
        description="how many feedback and timeout updates the learner (this learner_version) "
        "had absorbed when it decided: the decision's place among them",
    )
    output: dict[str, Any]
    decided_at: float
    context_ts: float | None = None
    redelivered: bool = False


class DeadLetter(BaseModel):
    """A rejected record: why, where it came from, and its raw bytes."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    reason: str
    detail: str
    source_topic: str
    partition: int | None = None
    offset: int | None = None
    learner_id: str | None = None
    event_id: str | None = None
    raw: str = Field(
        description="the original bytes, UTF-8 decoded with replacement (at most their first "
        "64 KiB: see raw_size)"
    )
    raw_size: int | None = Field(
        None, description="the original's size in bytes, when raw holds only its beginning"
    )
    ts: float

    @classmethod
    def detail_text(cls, detail: str) -> str:
        """A detail of at most 4 KiB: it may quote the record (a key, a value, a name)."""
        if len(detail) <= DETAIL_KEPT:
            return detail
        return detail[:DETAIL_KEPT] + f"... ({len(detail)} characters in all)"

    @classmethod
    def raw_fields(cls, raw: bytes | None) -> dict[str, str | int | None]:
        """``raw`` and ``raw_size`` for the bytes of a rejected record: its first 64 KiB,
        so that a dead letter always fits in a Kafka record (escaping can grow text six
        times, and Kafka's default limit is 1 MB)."""
        data = raw or b""
        if len(data) <= RAW_KEPT:
            return {"raw": data.decode("utf-8", "replace"), "raw_size": None}
        return {"raw": data[:RAW_KEPT].decode("utf-8", "replace"), "raw_size": len(data)}


RAW_KEPT = 64 * 1024
DETAIL_KEPT = 4 * 1024
