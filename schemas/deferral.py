"""The deferral family's events: a context's features, the model's and (if deferred) the
human's reward and cost (see :class:`banditflow.schemas.events.FamilyEvents`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from banditflow.schemas.events import (
    ContextRecord,
    FamilyEvents,
    Features,
    FeedbackRecord,
    TruthRecord,
)


class DeferralContext(ContextRecord):
    """A deferral context."""

    features: Features = Field(
        None, description="graph_cb / deferral: a feature vector, or one per action")

    SIZED: ClassVar = {"features": "max_features"}


class DeferralFeedback(FeedbackRecord):
    """The model's reward; the human's reward and cost when the decision deferred."""

    model_reward: float | None = None
    human_reward: float | None = None
    human_cost: float | None = Field(None, ge=0)

    QUALIFIERS: ClassVar = frozenset({"human_cost"})


class DeferralTruth(TruthRecord):
    """Both realised rewards and the human's cost (exact regret)."""

    model_reward: float | None = Field(None, description="deferral: the model's realised reward")
    human_reward: float | None = Field(None, description="deferral: the human's realised reward")
    human_cost: float | None = Field(
        None, ge=0, description="deferral: the human's realised cost")


EVENTS = FamilyEvents(DeferralContext, DeferralFeedback, DeferralTruth)
