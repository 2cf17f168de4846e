"""Event fields more than one family reads: one spec each, shared by their front doors."""

from __future__ import annotations

from pydantic import Field

from banditflow.learners.family import FieldSpec

FEATURES: FieldSpec = (
    list[float] | list[list[float]] | None,
    Field(None, description="graph_cb / deferral: a feature vector, or one per action"),
)
