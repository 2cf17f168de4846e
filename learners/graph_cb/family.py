"""The graph_cb family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

from pydantic import Field

from banditflow.learners.family import Family
from banditflow.learners.fields import FEATURES

FAMILY = Family(
    name="graph_cb",
    algorithms="banditflow.learners.graph_cb",
    context={
        "features": FEATURES,
        "graph": (
            list[list[float]] | None,
            Field(None, description="graph_cb: per-event feedback graph, G[a][j] = P(a reveals j)"),
        ),
    },
    sized={"features": "max_features", "graph": "max_features"},
    feedback={
        "losses": (
            dict[str, float] | None, Field(None, description="graph_cb: revealed action -> loss")
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
