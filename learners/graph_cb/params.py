"""The parameters every graph_cb learner takes (see :mod:`banditflow.learners.graph_cb.base`).

>>> params = GraphCBParams.read({"actions": 3, "feature_dim": 2, "gamma_schedule": "vw"})
>>> params.update, params.schedule_settings()
('sgd', {'gamma_scale': 1.0, 'gamma_exponent': 0.5})
>>> try:
...     GraphCBParams.read({"action_features": 2, "actions": 3})
... except ValueError as error:
...     print(str(error)[:47])
parameter 'actions' belongs to the fixed-K form
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Self

from banditflow.learners.base import MAX_STATE_NUMBERS, LearnerError
from banditflow.learners.declared import Params, param, short
from banditflow.learners.graph_cb.oracles import LAYOUTS, ORACLES, UPDATES
from banditflow.learners.graph_cb.schedules import SCHEDULES

# The most actions a learner may have: every decision solves for a distribution over them,
# at a cost that grows with the square of their number (the K x K feedback graph).
MAX_ACTIONS = 1_000
DEFAULT_MAX_ACTIONS = 100  # candidates an event may offer (candidate-set form)
# Parameters of the fixed-K form that have no meaning for a candidate set.
FIXED_K_PARAMS = ("actions", "graph", "feature_layout")
NEURAL_PARAMS = ("hidden_size", "oracle_seed")
# The settings each gamma schedule reads (schedules.py), and which of them may be <= 0.
SCHEDULE_SETTINGS = {
    "sqrt_alpha": ("gamma_c",),
    "vw": ("gamma_scale", "gamma_exponent"),
    "doubling": ("gamma_initial", "reg_sq"),
    "constant": ("gamma",),
}
SIGNED_SETTINGS = ("gamma_exponent",)


@dataclass(frozen=True, kw_only=True)
class GraphCBParams(Params):
    """Defaults that depend on the oracle (``learning_rate``: 0.1 linear, 0.5 neural;
    ``ridge``, ``hidden_size``, ``oracle_seed``) are None here and set by the oracle built."""

    actions: int | None = param(None, ge=1, cap=MAX_ACTIONS)
    """K; None: the size of ``graph`` (fixed-K form)."""
    graph: list[list[float]] | None = None
    graph_kind: str | None = None
    feature_dim: int | None = param(None, cap=MAX_STATE_NUMBERS)
    """D: required by the fixed-K form, 0 by default in the candidate-set form."""
    feature_layout: str | None = param(None, choices=LAYOUTS)
    """None: ``shared`` (fixed-K form)."""
    update: str = param("sgd", choices=UPDATES)
    learning_rate: float | None = None
    ridge: float | None = None
    bias: bool = param(True, convert=bool)
    oracle: str = param("linear", choices=ORACLES)
    hidden_size: int | None = None
    oracle_seed: int | None = None
    initial_oracle: dict[str, Any] | None = None
    action_features: int | None = param(None, ge=1, cap=MAX_ACTIONS * MAX_ACTIONS)
    max_actions: int = param(DEFAULT_MAX_ACTIONS, ge=1, cap=MAX_ACTIONS)
    gamma_schedule: str = param("sqrt_alpha", choices=SCHEDULES)
    gamma_c: float = 16.0
    gamma_scale: float = 1.0
    gamma_exponent: float = 0.5
    gamma: float | None = None
    gamma_initial: float = 4.0
    reg_sq: float = 1.0

    def validated(self) -> Self:
        checked = self
        if self.action_features is not None:
            given = [name for name in FIXED_K_PARAMS if getattr(self, name) is not None]
            if given:
                raise LearnerError(
                    f"parameter {given[0]!r} belongs to the fixed-K form; a learner with "
                    "'action_features' decides over each event's 'actions'")
            feature_dim = 0 if self.feature_dim is None else self.feature_dim
            if not 0 <= feature_dim <= MAX_ACTIONS * MAX_ACTIONS:
                raise LearnerError(f"parameter 'feature_dim' must be in [0, "
                                   f"{MAX_ACTIONS * MAX_ACTIONS}], got {short(feature_dim)}")
            checked = replace(self, feature_dim=feature_dim)
        else:
            if self.graph is not None and self.graph_kind is not None:
                raise LearnerError("give either parameter 'graph' or 'graph_kind', not both")
            if self.feature_dim is None:
                raise LearnerError("parameter 'feature_dim' is required")
        if self.oracle == "linear":
            given = [name for name in NEURAL_PARAMS if getattr(self, name) is not None]
            if given:
                raise LearnerError(f"parameter {given[0]!r} needs \"oracle\": \"neural\"")
        else:
            if self.update != "sgd":
                raise LearnerError("the neural oracle learns by online gradient descent: "
                                   "parameter 'update' must be 'sgd'")
            if self.ridge is not None:
                raise LearnerError("parameter 'ridge' applies to the linear oracle only")
        self.schedule_settings()
        return checked

    def schedule_settings(self) -> dict[str, float]:
        """The chosen gamma schedule's settings, checked."""
        names = SCHEDULE_SETTINGS[self.gamma_schedule]
        if self.gamma_schedule == "constant" and self.gamma is None:
            raise LearnerError("parameter 'gamma' is required")
        settings = {name: float(getattr(self, name)) for name in names}
        if any(value <= 0.0 for name, value in settings.items() if name not in SIGNED_SETTINGS):
            raise LearnerError(f"gamma schedule settings must be positive, got {settings}")
        return settings
