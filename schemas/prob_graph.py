"""The prob_graph family's events: a context carries nothing beyond the envelope, the
feedback the rewards of the arms whose edges fired (see
:class:`banditflow.schemas.events.FamilyEvents`)."""

from __future__ import annotations

from pydantic import Field

from banditflow.schemas.events import ContextRecord, FamilyEvents, FeedbackRecord, TruthRecord


class ProbGraphContext(ContextRecord):
    """A prob_graph context: the envelope alone."""


class ProbGraphFeedback(FeedbackRecord):
    """The revealed arms' rewards."""

    rewards: dict[str, float] | None = Field(
        None, description="prob_graph: revealed arm -> reward")
    complete: bool | None = Field(
        None, description="prob_graph: no more feedback will follow")


class ProbGraphTruth(TruthRecord):
    """Every arm's true mean reward (exact regret)."""

    arm_means: list[float] | None = Field(
        None, description="prob_graph: every arm's true mean reward (exact regret)")


EVENTS = FamilyEvents(ProbGraphContext, ProbGraphFeedback, ProbGraphTruth)
