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
from typing import Any, ClassVar, Self

import numpy as np

from banditflow.learners.base import LearnerError, require
from banditflow.learners.deferral.base import Choice, DeferralLearner, Settings
from banditflow.learners.deferral.estimators import LINKS, link_mean


class ModelOnly(DeferralLearner):
    """Always plays the model (never spends budget)."""

    algorithm: ClassVar[str] = "model_only"

    @classmethod
    def build(cls, settings: Settings, params: Mapping[str, Any]) -> Self:
        return cls(settings)

    def choose(self, x: np.ndarray, context: Mapping[str, Any], can_defer: bool,
               rng: np.random.Generator) -> Choice:
        return Choice(defer=False)


class ArbitraryHuman(DeferralLearner):
    """Defers on arbitrary events (probability ``defer_probability``) until the budget is spent."""

    algorithm: ClassVar[str] = "arbitrary_human"
    PARAMS: ClassVar[set[str]] = {"defer_probability"}

    def __init__(self, settings: Settings, defer_probability: float) -> None:
        super().__init__(settings)
        self.defer_probability = defer_probability

    @classmethod
    def build(cls, settings: Settings, params: Mapping[str, Any]) -> Self:
        probability = require(params, "defer_probability", float, 1.0)
        if not 0.0 < probability <= 1.0:
            raise LearnerError(
                f"parameter 'defer_probability' must be in (0, 1], got {probability}"
            )
        return cls(settings, probability)

    def choose(self, x: np.ndarray, context: Mapping[str, Any], can_defer: bool,
               rng: np.random.Generator) -> Choice:
        return Choice(defer=can_defer and bool(rng.random() < self.defer_probability))


class BestReject(DeferralLearner):
    """Defers when the model's known expected reward is below ``threshold``."""

    algorithm: ClassVar[str] = "best_reject"
    PARAMS: ClassVar[set[str]] = {"threshold", "model_theta", "link"}

    def __init__(
        self, settings: Settings, threshold: float, model_theta: np.ndarray | None, link: str
    ) -> None:
        super().__init__(settings)
        self.threshold = threshold
        self.model_theta = model_theta
        self.link = link

    @classmethod
    def build(cls, settings: Settings, params: Mapping[str, Any]) -> Self:
        threshold = require(params, "threshold", float)
        link = str(params.get("link", "identity"))
        if link not in LINKS:
            raise LearnerError(f"parameter 'link' must be one of {LINKS}, got {link!r}")
        theta = params.get("model_theta")
        model_theta = None
        if theta is not None:
            try:
                model_theta = np.array(theta, dtype=float)
            except (TypeError, ValueError) as exc:
                raise LearnerError(
                    f"parameter 'model_theta' must be a list of floats: {exc}"
                ) from exc
            if model_theta.shape != (settings.dim,) or not np.all(np.isfinite(model_theta)):
                raise LearnerError(
                    f"parameter 'model_theta' must be {settings.dim} finite floats, got {theta!r}"
                )
        return cls(settings, threshold, model_theta, link)

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
