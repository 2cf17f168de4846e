"""Event and learner-config models of banditflow, with their published JSON Schemas.

Every event carries ``schema_version``; this build reads versions up to
:data:`SCHEMA_VERSION`. The JSON Schema files beside this module are generated from these
models (``banditflow schemas --write``) and a test fails when the two drift apart.

>>> from banditflow.schemas import Context, parse_event, Limits
>>> ctx = parse_event(b'{"learner_id": "shop", "event_id": "e1", "labels": ["a", "b"],'
...                   b' "scores": [0.9, 0.2]}', Context, Limits())
>>> ctx.labels
['a', 'b']
"""

from __future__ import annotations

from banditflow.schemas.events import (
    SCHEMA_VERSION,
    Context,
    DeadLetter,
    Decision,
    Feedback,
    LearnerConfig,
    Truth,
)
from banditflow.schemas.parsing import Limits, Rejected, parse_event

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
    "DeadLetter",
    "Decision",
    "Feedback",
    "LearnerConfig",
    "Limits",
    "Rejected",
    "Truth",
    "parse_event",
]
