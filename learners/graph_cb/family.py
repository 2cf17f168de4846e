"""The graph_cb family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field
from typing_extensions import TypedDict  # (pydantic reads a TypedDict from here before 3.12)

from banditflow.learners.family import Family
from banditflow.learners.fields import FEATURES


class Candidate(TypedDict):
    """One action a graph_cb context offers (learners configured with ``action_features``)."""

    __pydantic_config__ = ConfigDict(  # type: ignore[misc]
        strict=True, allow_inf_nan=False, extra="forbid")

    id: Annotated[str, Field(min_length=1, max_length=256)]
    features: list[float]


FAMILY = Family(
    name="graph_cb",
    algorithms="banditflow.learners.graph_cb",
    context={
        "features": FEATURES,
        "graph": (
            list[list[float]] | None,
            Field(None, description="graph_cb: per-event feedback graph, G[a][j] = P(a reveals j)"),
        ),
        "actions": (
            list[Candidate] | None,
            Field(None, min_length=1, description=(
                "graph_cb learners with action_features: this event's candidate actions, each "
                "an id (unique within the event) and its features; the decision's action is "
                "an index into this list (with its action_id), and feedback may key losses "
                "by id")),
        ),
    },
    sized={"features": "max_features", "graph": "max_features", "actions": "max_features"},
    feedback={
        "losses": (
            dict[str, float] | None,
            Field(None, description="graph_cb: revealed action (index or candidate id) -> loss")
        ),
    },
    truth={
        "all_losses": (
            dict[str, float] | None,
            Field(None, description="graph_cb: every action's loss (exact regret)"),
        ),
    },
    gauges={"mean_loss": "Progressive-validation loss (graph_cb)"},
    played_action="action",
    revealed="losses",
    revealed_are_losses=True,
    action_count_params=("actions", "graph"),
    action_distribution=True,
    evaluation="banditflow.offline.evaluation.graph_cb",
    logs=("banditflow.offline.logs.graph_cb",),
)
