"""Pydantic models of every record on banditflow's topics.

The envelope (learner id, event id, time, version) is declared here; the fields each family's
contexts, feedback and truth carry are declared by the family (learners.family) and added
from the registry when this module is imported.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from banditflow.learners.base import LearnerError
from banditflow.learners.family import Family, FieldSpec
from banditflow.learners.registry import families

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


class _Context(Record):
    event_id: Id
    after_updates: int | None = Field(
        None, ge=0, le=2**53,
        description="decide only once the learner has absorbed this many feedback and timeout "
        "updates (its learner_updates): set by `banditflow replay --faithful` from the live "
        "decision, so that a replay keeps the live order of contexts and feedback",
    )


class _Feedback(Record):
    event_id: Id
    part: Annotated[str, Field(min_length=1, max_length=32)] | None = Field(
        None, description="which part of a multi-part feedback this is (deferral: model|human)"
    )

    @model_validator(mode="after")
    def _carries_something(self) -> _Feedback:
        if all(getattr(self, name) is None for name in FEEDBACK_PAYLOAD):
            raise ValueError(
                f"feedback carries nothing; expected one of {', '.join(FEEDBACK_PAYLOAD)}"
            )
        return self


class _Truth(Record):
    event_id: Id


def _fields(kind: str) -> dict[str, FieldSpec]:
    """The ``kind`` fields (context, feedback or truth) of every family, in registry order;
    a field two families declare must be the same spec."""
    merged: dict[str, FieldSpec] = {}
    for declared in families().values():
        for name, spec in getattr(declared, kind).items():
            if name in merged and repr(merged[name]) != repr(spec):
                raise RuntimeError(f"families declare {kind} field {name!r} differently")
            merged.setdefault(name, spec)
    return merged


def _validators(kind: str) -> dict[str, Any]:
    return {
        f"{name}{validator_name}": validator
        for name, declared in families().items()
        for validator_name, validator in getattr(declared, f"{kind}_validators").items()
    }


def check_declared(declared: Family) -> None:
    """Raises :class:`LearnerError` unless every event field of ``declared`` is one the
    models below already have, with the same spec (see learners.registry.register)."""
    for kind, model in (("context", Context), ("feedback", Feedback), ("truth", Truth)):
        have = _fields(kind)
        for name, spec in getattr(declared, kind).items():
            if name not in model.model_fields or repr(have.get(name)) != repr(spec):
                raise LearnerError(
                    f"family {declared.name!r}: {kind} field {name!r} is not in the event "
                    "schemas; add the family to learners.registry.FAMILIES instead"
                )
    for name, limit in declared.sized.items():
        if SIZED.get(name) != limit:
            raise LearnerError(
                f"family {declared.name!r}: context field {name!r} is not bounded by {limit} "
                "in the event schemas; add the family to learners.registry.FAMILIES instead"
            )


def _sized() -> dict[str, str]:
    """Context field -> the :class:`banditflow.schemas.Limits` attribute bounding it, of every
    family."""
    merged: dict[str, str] = {}
    for declared in families().values():
        for name, limit in declared.sized.items():
            if merged.setdefault(name, limit) != limit:
                raise RuntimeError(f"families bound context field {name!r} differently")
    return merged


SIZED = _sized()

# Feedback fields that say something on their own; the others qualify them (deferral's
# human_cost comes with human_reward).
FEEDBACK_PAYLOAD = tuple(
    name for declared in families().values() for name in declared.feedback
    if name not in declared.feedback_qualifiers
)

Context = create_model(  # type: ignore[call-overload]
    "Context",
    __base__=_Context,
    __module__=__name__,
    __doc__="A context event: the application asks for a decision.",
    __validators__=_validators("context"),
    **_fields("context"),
)
Feedback = create_model(  # type: ignore[call-overload]
    "Feedback",
    __base__=_Feedback,
    __module__=__name__,
    __doc__="Whatever the application observed for an earlier decision (same event_id).",
    __validators__=_validators("feedback"),
    **_fields("feedback"),
)
Truth = create_model(  # type: ignore[call-overload]
    "Truth",
    __base__=_Truth,
    __module__=__name__,
    __doc__="Full ground truth for an event, read only by the metrics side (simulation, audits).",
    **_fields("truth"),
)


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
