"""The graph_cb family's events: a context's features (and feedback graph, or candidate
actions), the losses the played action revealed (see
:class:`banditflow.schemas.events.FamilyEvents`)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field
from typing_extensions import TypedDict  # (pydantic reads a TypedDict from here before 3.12)

from banditflow.schemas.events import (
    ContextRecord,
    FamilyEvents,
    Features,
    FeedbackRecord,
    TruthRecord,
)


class Candidate(TypedDict):
    """One action a graph_cb context offers (learners configured with ``action_features``)."""

    __pydantic_config__ = ConfigDict(  # type: ignore[misc]
        strict=True, allow_inf_nan=False, extra="forbid")

    id: Annotated[str, Field(min_length=1, max_length=256)]
    features: list[float]


class GraphCBContext(ContextRecord):
    """A graph_cb context."""

    features: Features = Field(
        None, description="graph_cb / deferral: a feature vector, or one per action")
    graph: list[list[float]] | None = Field(
        None, description="graph_cb: per-event feedback graph, G[a][j] = P(a reveals j)")
    actions: list[Candidate] | None = Field(
        None, min_length=1, description=(
            "graph_cb learners with action_features: this event's candidate actions, each "
            "an id (unique within the event) and its features; the decision's action is "
            "an index into this list (with its action_id), and feedback may key losses "
            "by id"))

    SIZED: ClassVar = {"features": "max_features", "graph": "max_features",
                       "actions": "max_features"}


class GraphCBFeedback(FeedbackRecord):
    """The losses of the actions the played one revealed."""

    losses: dict[str, float] | None = Field(
        None, description="graph_cb: revealed action (index or candidate id) -> loss")


class GraphCBTruth(TruthRecord):
    """Every action's loss (exact regret)."""

    all_losses: dict[str, float] | None = Field(
        None, description="graph_cb: every action's loss (exact regret)")


EVENTS = FamilyEvents(GraphCBContext, GraphCBFeedback, GraphCBTruth)
