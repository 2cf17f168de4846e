"""The graph_cb family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from banditflow.learners.base import Learner
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


class GraphCBView:
    """What live off-policy evaluation reads of a graph_cb learner
    (:class:`banditflow.learners.family.OffPolicyView`): its actions, features and feedback
    graph; a learner of candidate sets (``action_features``) scores each candidate by its
    pair features with one shared regression."""

    def interface(self, learner: Learner, params: Mapping[str, Any]) -> tuple[Any, ...]:
        graph = getattr(learner, "graph", None)
        return (getattr(learner, "actions", None), params.get("feature_dim"),
                params.get("feature_layout"), params.get("action_features"),
                None if graph is None else np.asarray(graph).tolist())

    def reward_model(self, learner: Learner, params: Mapping[str, Any]) -> tuple[int, int]:
        dim = params.get("feature_dim")
        action_features = params.get("action_features")
        if isinstance(action_features, int):  # (a candidate's pair features)
            shared = dim if isinstance(dim, int) else 0
            dim = shared * action_features + action_features + shared
        features = dim if isinstance(dim, int) and dim > 0 else 0
        return (1 if _form(learner) is not None else int(getattr(learner, "actions", 0) or 0),
                features)

    def feedback_graph(self, learner: Learner, context: JSON, actions: int) -> np.ndarray:
        graph = context.get("graph")
        form = _form(learner)
        if form is not None and graph is None:  # (its graph_kind, over the set)
            return learner.event_graph(None, actions)  # type: ignore[attr-defined, no-any-return]
        if graph is None:
            graph = getattr(learner, "graph", None)
        return np.eye(actions) if graph is None else np.asarray(graph, dtype=float)

    def action_inputs(self, learner: Learner,
                      context: JSON) -> tuple[list[list[float]], list[str]] | None:
        from banditflow.learners.graph_cb.candidates import pair_features

        form = _form(learner)
        if form is None:
            return None
        offered = form.offered(context.get("actions"))
        rows = pair_features(form.shared(context.get("features")), offered.features).tolist()
        return rows, offered.ids


def _form(learner: Learner) -> Any:
    """The learner's candidate-set form (``action_features``), if it has one."""
    from banditflow.learners.graph_cb.candidates import CandidateForm

    form = getattr(learner, "form", None)
    return form if isinstance(form, CandidateForm) else None


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
    off_policy=GraphCBView(),
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
