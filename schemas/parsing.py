"""Turning raw bytes into validated records, with reasons a person can act on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from banditflow.schemas.events import (
    ContextRecord,
    any_family_fields,
    family_events,
    payload_fields,
)

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Limits:
    """Configurable input limits (the worker's ``--max-event-bytes`` etc.); which context
    fields ``max_labels`` and ``max_features`` bound, each family's context model declares
    (:attr:`banditflow.schemas.events.ContextRecord.SIZED`)."""

    max_event_bytes: int = 1_000_000
    max_labels: int = 10_000
    max_features: int = 100_000


class Rejected(Exception):
    """A record that cannot be used: ``reason`` is a stable code, ``detail`` explains."""

    def __init__(self, reason: str, detail: str, learner_id: str | None = None,
                 event_id: str | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        # Of a record that parsed as a JSON object, what it said it was (for the dead letter).
        self.learner_id = learner_id
        self.event_id = event_id


def said_identity(raw: bytes) -> tuple[str | None, str | None]:
    """The ``learner_id`` and ``event_id`` a record that failed validation carries, when it
    is a JSON object and they are strings: its dead letter names them.

    >>> said_identity(b'{"learner_id": "shop", "event_id": "q1", "scores": "high"}')
    ('shop', 'q1')
    >>> said_identity(b'{"learner_id": 7}'), said_identity(b'[1]')
    ((None, None), (None, None))
    """
    try:
        value = json.loads(raw)
    except ValueError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    lid, eid = value.get("learner_id"), value.get("event_id")
    return (lid if isinstance(lid, str) else None), (eid if isinstance(eid, str) else None)


def describe(error: ValidationError) -> str:
    """A compact, human explanation of every problem pydantic found."""
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "record"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _count_numbers(value: object) -> int:
    if isinstance(value, list):
        return sum(_count_numbers(v) for v in value)
    if isinstance(value, dict):  # (a graph_cb candidate: its id and its features)
        return sum(_count_numbers(v) for v in value.values())
    return 1


def parse_event(raw: bytes, model: type[T], limits: Limits) -> T:
    """Validate ``raw`` JSON as ``model`` in one parse; raise :class:`Rejected` otherwise."""
    if len(raw) > limits.max_event_bytes:
        raise Rejected(
            "oversize",
            f"{len(raw)} bytes exceeds the limit of {limits.max_event_bytes} (--max-event-bytes)",
        )
    try:
        record = model.model_validate_json(raw)
    except ValidationError as exc:
        reason, detail = _reason(exc)
        said = said_identity(raw) if reason != "malformed_json" else (None, None)
        raise Rejected(reason, detail, *said) from None
    sized = model.SIZED if issubclass(model, ContextRecord) else {}
    for name, limit in sized.items():
        value = getattr(record, name, None)
        if value is None:
            continue
        said = record.learner_id, getattr(record, "event_id", None)
        if limit == "max_labels" and len(value) > limits.max_labels:
            raise Rejected(
                "oversize", f"{len(value)} {name} exceeds the limit of {limits.max_labels}", *said
            )
        if limit == "max_features" and _count_numbers(value) > limits.max_features:
            raise Rejected(
                "oversize", f"'{name}' has more than {limits.max_features} numbers "
                "(--max-features)", *said
            )
    return record


FOREIGN_REASONS = {"context": "learner_rejected", "feedback": "contradicting_feedback",
                   "truth": "invalid_schema"}
"""The dead-letter reason of a record carrying another family's fields."""


def parse_family_event(raw: bytes, family_name: str, kind: str, limits: Limits) -> Any:
    """Validate ``raw`` as a ``kind`` record (``context``, ``feedback`` or ``truth``) of
    family ``family_name``, with its model (:func:`banditflow.schemas.events.family_events`);
    raise :class:`Rejected` otherwise. A record whose only fault is fields another family
    reads is refused with :data:`FOREIGN_REASONS`, saying which fields the family takes."""
    model = getattr(family_events(family_name), kind)
    try:
        return parse_event(raw, model, limits)
    except Rejected as rejected:
        foreign = _foreign_fields(raw, model, kind)
        if rejected.reason != "invalid_schema" or not foreign:
            raise
        takes = ", ".join(sorted(payload_fields(model))) or "no fields beyond the envelope"
        raise Rejected(
            FOREIGN_REASONS[kind],
            f"{', '.join(foreign)} is not {family_name} {kind} (it takes {takes})",
            rejected.learner_id, rejected.event_id,
        ) from None


def _foreign_fields(raw: bytes, model: type[BaseModel], kind: str) -> list[str]:
    """The fields of ``raw`` that ``model`` lacks, if every problem of ``raw`` is that and
    each is a field another family's ``kind`` records carry; else []."""
    try:
        model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors()
    else:
        return []
    names = [str(e["loc"][0]) for e in errors
             if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
    if len(names) != len(errors):
        return []
    return sorted(names) if set(names) <= any_family_fields(kind) else []


def _reason(error: ValidationError) -> tuple[str, str]:
    """The dead-letter reason and detail of a failed validation."""
    first = error.errors()[0]
    if first["type"] == "json_invalid":
        return "malformed_json", f"not valid UTF-8 JSON: {first['msg']}"
    if first["type"] == "model_type" and not first["loc"]:
        return "malformed_json", f"expected a JSON object, got {type(first['input']).__name__}"
    if any(e["type"] == "finite_number" for e in error.errors()):
        return "non_finite", describe(error)
    return "invalid_schema", describe(error)
