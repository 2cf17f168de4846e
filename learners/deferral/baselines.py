"""The paper's baselines: ModelOnly, ArbitraryHuman and BestReject (all budget-safe).

- :class:`ModelOnly` never defers.
- :class:`ArbitraryHuman` defers on arbitrary events, each with probability
  ``defer_probability`` (default 1.0: the first events of each period), while the budget
  covers ``c_max``; ``budget / horizon`` spreads the deferrals over the period.
- :class:`BestReject` defers when the model's known expected reward on the context is below
  ``threshold`` (and the budget allows). The expected reward is the context field
  ``model_reward_estimate``, or ``mu(x . model_theta)`` when the parameter ``model_theta``
  (with ``link``) is given. The paper plots the *best threshold in hindsight*, which needs the
  whole stream and is not feasible online; compute it offline with
  :func:`banditflow.learners.deferral.opt.best_reject_threshold` and pass it as ``threshold``.

>>> import numpy as np
>>> from banditflow.learners.deferral.baselines import BestReject
>>> learner = BestReject.from_params({"dim": 2, "budget": 5.0, "horizon": 10, "threshold": 0.4,
...                                   "model_theta": [0.9, 0.1]})
>>> rng = np.random.default_rng(0)
>>> learner.decide({"features": [0.0, 1.0]}, rng).output
{'defer': True, 'reserved': 1.0, 'model_reward_estimate': 0.1, 'threshold': 0.4}
>>> learner.decide({"features": [1.0, 0.0]}, rng).output["defer"]
False
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from banditflow.learners.base import LearnerError
from banditflow.learners.declared import param
from banditflow.learners.deferral.base import Choice, DeferralLearner, DeferralParams
from banditflow.learners.deferral.estimators import LINKS, link_mean


class ModelOnly(DeferralLearner):
    """Always plays the model (never spends budget)."""

    algorithm: ClassVar[str] = "model_only"

    def choose(self, x: np.ndarray, context: Mapping[str, Any], can_defer: bool,
               rng: np.random.Generator) -> Choice:
        return Choice(defer=False)


@dataclass(frozen=True, kw_only=True)
class ArbitraryHumanParams(DeferralParams):
    defer_probability: float = param(1.0, gt=0, le=1)


class ArbitraryHuman(DeferralLearner):
    """Defers on arbitrary events (probability ``defer_probability``) until the budget is spent."""

    algorithm: ClassVar[str] = "arbitrary_human"
    Params = ArbitraryHumanParams

    def __init__(self, params: ArbitraryHumanParams) -> None:
        super().__init__(params)
        self.defer_probability = params.defer_probability

    def choose(self, x: np.ndarray, context: Mapping[str, Any], can_defer: bool,
               rng: np.random.Generator) -> Choice:
        return Choice(defer=can_defer and bool(rng.random() < self.defer_probability))


@dataclass(frozen=True, kw_only=True)
class BestRejectParams(DeferralParams):
    threshold: float
    model_theta: list[float] | None = None
    """The model's coefficients: its expected reward is ``mu(x . model_theta)``; None: the
    context's ``model_reward_estimate``."""
    link: str = param("identity", choices=LINKS)

    def validated(self) -> Self:
        super().validated()
        if self.model_theta is not None:
            try:
                theta = np.array(self.model_theta, dtype=float)
            except (TypeError, ValueError) as exc:
                raise LearnerError(
                    f"parameter 'model_theta' must be a list of floats: {exc}"
                ) from exc
            if theta.shape != (self.dim,) or not np.all(np.isfinite(theta)):
                raise LearnerError(f"parameter 'model_theta' must be {self.dim} finite floats, "
                                   f"got {self.model_theta!r}")
        return self


class BestReject(DeferralLearner):
    """Defers when the model's known expected reward is below ``threshold``."""

    algorithm: ClassVar[str] = "best_reject"
    Params = BestRejectParams

    def __init__(self, params: BestRejectParams) -> None:
        super().__init__(params)
        self.threshold = params.threshold
        self.model_theta = (None if params.model_theta is None
                            else np.array(params.model_theta, dtype=float))
        self.link = params.link

    def check_context(self, context: Mapping[str, Any]) -> None:
        if self.model_theta is not None:
            return
        estimate = context.get("model_reward_estimate")
        if (
            isinstance(estimate, bool)
            or not isinstance(estimate, int | float)
            or not math.isfinite(estimate)
        ):
            raise LearnerError(
                "best_reject needs the context field 'model_reward_estimate' (a finite number) "
                "when the parameter 'model_theta' is not set"
            )

    def model_reward_estimate(self, x: np.ndarray, context: Mapping[str, Any]) -> float:
        """The known expected model reward: from ``model_theta`` or the context field."""
        if self.model_theta is not None:
            return link_mean(self.link, float(x @ self.model_theta))
        return float(context["model_reward_estimate"])

    def choose(self, x: np.ndarray, context: Mapping[str, Any], can_defer: bool,
               rng: np.random.Generator) -> Choice:
        estimate = self.model_reward_estimate(x, context)
        output = {"model_reward_estimate": estimate, "threshold": self.threshold}
        return Choice(defer=can_defer and estimate < self.threshold, output=output)
