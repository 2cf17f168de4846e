"""The prob_graph family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

import numpy as np

from banditflow.learners.family import JSON, Application, Contract, Family

_ARMS = 3


def _feedback(output: JSON, rng: np.random.Generator) -> list[JSON]:
    rewards = {str(arm): round(float(rng.random()), 6) for arm in range(_ARMS)}
    return [{"rewards": rewards, "complete": True}]


def _valid(output: JSON) -> bool:
    return 0 <= output["arm"] < _ARMS


FAMILY = Family(
    name="prob_graph",
    algorithms="banditflow.learners.prob_graph",
    events="banditflow.schemas.prob_graph",
    played_action="arm",
    revealed="rewards",
    action_count_params=("arms",),
    arm_gauges={"arm_pulls": "Pulls per arm (prob_graph)"},
    evaluation="banditflow.offline.evaluation.prob_graph",
    logs=("banditflow.offline.logs.prob_graph",),
    application=Application("prob-graph-revealing", "lp_policy", "ucb_n", 2000, 100.0,
                            log_option="--scenario"),
    # a prob_graph context has no fields: one with any is refused before its learner
    contract=Contract(
        lambda rng: {}, _feedback, _valid,
        {"arms": _ARMS, "edges": [[i, j, 1.0] for i in range(_ARMS) for j in range(_ARMS)]},
    ),
)
