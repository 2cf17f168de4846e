"""The graph_cb family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

import numpy as np

from banditflow.learners.family import JSON, Application, Contract, Family

_ACTIONS, _DIM = 3, 2


def features_context(rng: np.random.Generator, dim: int = _DIM) -> JSON:
    """A small random feature vector inside the unit ball (the contract's contexts; deferral's
    too)."""
    x = rng.normal(size=dim)
    return {"features": (0.9 * x / max(1.0, float(np.linalg.norm(x)))).round(6).tolist()}


def _feedback(output: JSON, rng: np.random.Generator) -> list[JSON]:
    return [{"losses": {str(output["action"]): round(float(rng.random()), 6)}}]


def _valid(output: JSON) -> bool:
    p = np.asarray(output["p"])
    return bool(p.shape == (_ACTIONS,) and np.all(p >= 0) and abs(p.sum() - 1) < 1e-9
                and 0 <= output["action"] < _ACTIONS and p[output["action"]] > 0)


FAMILY = Family(
    name="graph_cb",
    algorithms="banditflow.learners.graph_cb",
    events="banditflow.schemas.graph_cb",
    gauges={"mean_loss": "Progressive-validation loss (graph_cb)"},
    played_action="action",
    revealed="losses",
    revealed_are_losses=True,
    action_count_params=("actions", "graph"),
    action_distribution=True,
    evaluation="banditflow.offline.evaluation.graph_cb",
    logs=("banditflow.offline.logs.graph_cb",),
    application=Application("graph_cb-digits-random", "squarecb_g", "epsilon_greedy", 2000,
                            100.0),
    contract=Contract(
        features_context, _feedback, _valid,
        {"actions": _ACTIONS, "feature_dim": _DIM, "graph_kind": "full"},
        bad_context={"features": [0.1] * (_DIM + 1)},
    ),
)
