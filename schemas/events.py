"""Pydantic models of every record on banditflow's topics."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = 1
FAMILIES = ("conformal", "graph_cb", "deferral", "prob_graph")

Id = Annotated[str, Field(min_length=1, max_length=256)]
LearnerId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")]
# An integer label is a 64-bit integer: decisions and the state log encode it as one.
Label = str | Annotated[int, Field(ge=-(2**63), lt=2**63)]


class Record(BaseModel):
    """Common envelope: strict types, finite numbers, no unknown fields."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")

    schema_version: int = Field(SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)
    learner_id: LearnerId
    ts: float | None = Field(None, description="event time, seconds since the epoch")


class LearnerConfig(Record):
    """Creates or reconfigures a learner (compacted ``learners`` topic, key = learner_id)."""

    family: Literal["conformal", "graph_cb", "deferral", "prob_graph"]
    algorithm: Annotated[str, Field(min_length=1, max_length=64)]
    params: dict[str, Any] = Field(default_factory=dict)
    seed: int = Field(0, ge=0, lt=2**63)
    feedback_timeout_s: float = Field(300.0, gt=0)
    early_feedback_grace_s: float = Field(30.0, ge=0)

    @field_validator("params")
    @classmethod
    def _encodable_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        # The config is stored in the state log with the learner; one that cannot be encoded
        # there would fail every commit of its partition.
        try:
            orjson.dumps(params)
        except orjson.JSONEncodeError as exc:
            raise ValueError(
                f"params cannot be stored: {exc} (integers must fit in 64 bits)"
            ) from None
        return params


class Context(Record):
    """A context event: the application asks for a decision."""

    event_id: Id
    labels: list[Label] | None = Field(None, description="conformal: candidate labels")
    scores: list[float] | None = Field(None, description="conformal: one score per label")
    features: list[float] | list[list[float]] | None = Field(
        None, description="graph_cb / deferral: a feature vector, or one per action"
    )
    graph: list[list[float]] | None = Field(
        None, description="graph_cb: per-event feedback graph, G[a][j] = P(a reveals j)"
    )

    @field_validator("labels")
    @classmethod
    def _unique_labels(cls, labels: list[Label] | None) -> list[Label] | None:
        if labels is not None:
            seen: set[Label] = set()
            for label in labels:
                if label in seen:
                    raise ValueError(f"duplicate label {label!r}: labels must be unique")
                seen.add(label)
        return labels

    @model_validator(mode="after")
    def _scores_match_labels(self) -> Context:
        if (self.labels is None) != (self.scores is None):
            raise ValueError("'labels' and 'scores' go together")
        if self.labels is not None and len(self.labels) != len(self.scores or []):
            raise ValueError(
                f"'labels' and 'scores' must have equal length, "
                f"got {len(self.labels)} and {len(self.scores or [])}"
            )
        return self


class Feedback(Record):
    """Whatever the application observed for an earlier decision (same event_id)."""

    event_id: Id
    part: Annotated[str, Field(min_length=1, max_length=32)] | None = Field(
        None, description="which part of a multi-part feedback this is (deferral: model|human)"
    )
    label: Label | None = Field(None, description="conformal: the true label, if it was in the set")
    missed: bool | None = Field(
        None, description="conformal: true when the label was not in the set"
    )
    losses: dict[str, float] | None = Field(None, description="graph_cb: revealed action -> loss")
    model_reward: float | None = None
    human_reward: float | None = None
    human_cost: float | None = Field(None, ge=0)
    rewards: dict[str, float] | None = Field(None, description="prob_graph: revealed arm -> reward")
    complete: bool | None = Field(None, description="prob_graph: no more feedback will follow")

    @model_validator(mode="after")
    def _consistent(self) -> Feedback:
        if self.label is not None and self.missed:
            raise ValueError("give either 'label' (covered) or 'missed': true, not both")
        payload = (
            "label",
            "missed",
            "losses",
            "model_reward",
            "human_reward",
            "rewards",
            "complete",
        )
        if all(getattr(self, name) is None for name in payload):
            raise ValueError(f"feedback carries nothing; expected one of {', '.join(payload)}")
        return self


class Truth(Record):
    """Full ground truth for an event, read only by the metrics side (simulation, audits)."""

    event_id: Id
    label: Label | None = None
    miscoverage: float | None = Field(
        None, ge=0, le=1, description="conformal: G*(threshold used) of the environment"
    )
    target_miscoverage: float | None = Field(None, ge=0, le=1)
    model_reward: float | None = Field(None, description="deferral: the model's realised reward")
    human_reward: float | None = Field(None, description="deferral: the human's realised reward")
    human_cost: float | None = Field(None, ge=0, description="deferral: the human's realised cost")


class Decision(Record):
    """Published for every decided context (and re-published for a re-delivered one)."""

    event_id: Id
    family: str
    algorithm: str
    learner_version: int
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
