"""Event and learner-config models of banditflow, with their published JSON Schemas.

Every event carries ``schema_version``; this build reads versions up to
:data:`SCHEMA_VERSION`. The JSON Schema files beside this module are generated from these
models (``banditflow schemas --write``) and a test fails when the two drift apart.

A record of a learner the worker does not know yet has its envelope read first (the record
does not name its family), the rest with its learner's family's model once the learner is
known; a known learner's record is read with that model alone
(:func:`banditflow.schemas.events.refuses_what_its_envelope_refuses`):

>>> from banditflow.schemas import ContextEnvelope, Limits, parse_event, parse_family_event
>>> raw = b'{"learner_id": "shop", "event_id": "e1", "labels": ["a", "b"], "scores": [0.9, 0.2]}'
>>> parse_event(raw, ContextEnvelope, Limits()).event_id
'e1'
>>> parse_family_event(raw, "conformal", "context", Limits()).labels
['a', 'b']
"""

from __future__ import annotations

from banditflow.schemas.events import (
    SCHEMA_VERSION,
    Context,
    ContextEnvelope,
    DeadLetter,
    Decision,
    FamilyEvents,
    Feedback,
    FeedbackEnvelope,
    LearnerConfig,
    Truth,
    TruthEnvelope,
    family_events,
)
from banditflow.schemas.parsing import Limits, Rejected, parse_event, parse_family_event

MODELS = {
    "learner_config": LearnerConfig,
    "context": Context,
    "decision": Decision,
    "feedback": Feedback,
    "truth": Truth,
    "dead_letter": DeadLetter,
}

__all__ = [
    "MODELS",
    "SCHEMA_VERSION",
    "Context",
    "ContextEnvelope",
    "DeadLetter",
    "Decision",
    "FamilyEvents",
    "Feedback",
    "FeedbackEnvelope",
    "LearnerConfig",
    "Limits",
    "Rejected",
    "Truth",
    "TruthEnvelope",
    "family_events",
    "parse_event",
    "parse_family_event",
]
