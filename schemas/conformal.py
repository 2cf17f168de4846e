"""The conformal family's events: a context offers scored labels, the feedback says whether
the true label was in the set (see :class:`banditflow.schemas.events.FamilyEvents`)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, field_validator, model_validator

from banditflow.schemas.events import ContextRecord, FamilyEvents, FeedbackRecord, TruthRecord

# An integer label is a 64-bit integer: decisions and the state log encode it as one.
Label = str | Annotated[int, Field(ge=-(2**63), lt=2**63)]


class ConformalContext(ContextRecord):
    """A conformal context: candidate labels and one score each."""

    labels: list[Label] | None = Field(None, description="conformal: candidate labels")
    scores: list[float] | None = Field(None, description="conformal: one score per label")

    SIZED: ClassVar = {"labels": "max_labels"}

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
    def _scores_match_labels(self) -> ConformalContext:
        if (self.labels is None) != (self.scores is None):
            raise ValueError("'labels' and 'scores' go together")
        if self.labels is not None and len(self.labels) != len(self.scores or []):
            raise ValueError(
                f"'labels' and 'scores' must have equal length, "
                f"got {len(self.labels)} and {len(self.scores or [])}"
            )
        return self


class ConformalFeedback(FeedbackRecord):
    """The true label if the set covered it, else ``missed``."""

    label: Label | None = Field(
        None, description="conformal: the true label, if it was in the set")
    missed: bool | None = Field(
        None, description="conformal: true when the label was not in the set")

    @model_validator(mode="after")
    def _label_or_missed(self) -> ConformalFeedback:
        if self.label is not None and self.missed:
            raise ValueError("give either 'label' (covered) or 'missed': true, not both")
        return self


class ConformalTruth(TruthRecord):
    """The true label and the environment's miscoverage (exact regret)."""

    label: Label | None = None
    miscoverage: float | None = Field(
        None, ge=0, le=1, description="conformal: G*(threshold used) of the environment")
    target_miscoverage: float | None = Field(None, ge=0, le=1)


EVENTS = FamilyEvents(ConformalContext, ConformalFeedback, ConformalTruth)
