"""The prob_graph family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

from pydantic import Field

from banditflow.learners.family import Family

FAMILY = Family(
    name="prob_graph",
    algorithms="banditflow.learners.prob_graph",
    feedback={
        "rewards": (
            dict[str, float] | None,
            Field(None, description="prob_graph: revealed arm -> reward"),
        ),
        "complete": (
            bool | None, Field(None, description="prob_graph: no more feedback will follow")
        ),
    },
    truth={
        "arm_means": (
            list[float] | None,
            Field(None, description="prob_graph: every arm's true mean reward (exact regret)"),
        ),
    },
    played_action="arm",
    revealed="rewards",
    action_count_params=("arms",),
    arm_gauges={"arm_pulls": "Pulls per arm (prob_graph)"},
    evaluation="banditflow.offline.evaluation.prob_graph",
    logs=("banditflow.offline.logs.prob_graph",),
)
