"""UCB: the paper's Algorithm 1 (linCBwK for two arms with GLM links), with the spec's fixes.

Per arm, ridge (``link="identity"``) or online-GLM (``link="logistic"``) estimates with
``ridge * I`` regularisation (:mod:`banditflow.learners.deferral.estimators`); the human's cost has
its
own link (``cost_link``, default ``link``: the paper mixes a logistic reward with a linear
cost). With the confidence radius
``beta_t = beta * sqrt(2 d log((1 + 2 t d) / delta))`` (``beta`` plays sigma / kappa and is a
tunable scale), a round after the warm-up defers iff the budget covers ``c_max`` and

    mu(UCB_h) - mu(UCB_m) > lambda_t * mu(LCB_cost),   UCB_a = x.theta_a + beta_t ||x||_{M_a^-1}

where the model's cost is exactly 0 and the cost lower bound is clipped at 0. The dual price
``lambda_t = (T / B) gamma_t`` comes from multiplicative weights: ``gamma`` and ``alpha``
start at 0.5 (as printed in the paper). Once a round's cost ``c`` is known (at once for the
model, at settlement or timeout for the human), ``alpha`` moves by ``g = c - B/T`` (times the
round's ``gamma_t`` with ``gamma_weighted_gradient``, the paper's printed variant) with step
``eps = sqrt(2 / T)``, and ``gamma = alpha / (1 + alpha)``; ``log(alpha)`` is stored. Rounds
in which deferring was impossible (warm-up, budget exhausted or fully reserved) leave the
price alone: the paper's price after exhaustion is never used within its single period, and
here it would only bias the next period.

The first ``warmup`` rounds of the learner's life defer with probability 1/2 when the budget
allows (they count against the budget). Estimates carry over budget periods; the dual price
does too unless ``reset_dual`` is set (then every period restarts at ``alpha = gamma = 0.5``).

>>> import numpy as np
>>> from banditflow.learners.deferral.ucb import UCB
>>> learner = UCB.from_params({"dim": 2, "budget": 20.0, "horizon": 100})
>>> rng = np.random.default_rng(0)
>>> for t in range(100):  # the human is right on the second feature, the model on the first
...     x = [1.0, 0.0] if t % 2 else [0.0, 1.0]
...     decided = learner.decide({"features": x}, rng)
...     _ = learner.learn(decided.pending, {"part": "model", "model_reward": x[0]})
...     if decided.output["defer"]:
...         _ = learner.learn(decided.pending,
...                           {"part": "human", "human_reward": x[1], "human_cost": 0.5})
>>> learner.spent <= 20.0
True
>>> learner.decide({"features": [0.0, 1.0]}, rng).output["ucb_human"] > 0.5
True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from banditflow.learners.base import MIN_RIDGE
from banditflow.learners.declared import param
from banditflow.learners.deferral.base import (
    Choice,
    DeferralLearner,
    DeferralParams,
    DeferralState,
)
from banditflow.learners.deferral.estimators import LINKS, Arm, link_mean

INITIAL_LOG_ALPHA = math.log(0.5)
INITIAL_GAMMA = 0.5


@dataclass(frozen=True, kw_only=True)
class UCBParams(DeferralParams):
    link: str = param("identity", choices=LINKS)
    cost_link: str | None = param(None, choices=LINKS)
    """None: ``link``."""
    ridge: float = param(1.0, ge=MIN_RIDGE, what="lambda of lambda I")
    beta: float = param(0.02, ge=0)
    delta: float = param(0.05, gt=0, lt=1)
    warmup: int = param(0, ge=0)
    gamma_weighted_gradient: bool = param(False)
    reset_dual: bool = param(False)

    def validated(self) -> Self:
        return dataclasses.replace(super().validated(), cost_link=self.cost_link or self.link)


@dataclass(kw_only=True)
class DualState(DeferralState):
    """The dual price's multiplicative-weights state, with the budget's."""

    log_alpha: float
    gamma: float


@dataclass(kw_only=True)
class UCBState(DualState):
    model: Arm
    human: Arm


class UCB(DeferralLearner):
    """Algorithm 1 of Reid et al. (linCBwK specialised to deferral), budget-safe.

    Parameters (besides ``dim``, ``budget``, ``horizon``, ``feedback``, ``c_max``): ``link``
    (``identity`` | ``logistic``, default ``identity``), ``cost_link`` (default ``link``),
    ``ridge`` (default 1.0), ``beta`` (confidence scale, default 0.02), ``delta`` (default 0.05),
    ``warmup`` (rounds, default 0), ``gamma_weighted_gradient`` (default False), ``reset_dual``
    (default False).
    """

    algorithm: ClassVar[str] = "ucb"
    Params = UCBParams
    State = UCBState

    def __init__(self, params: UCBParams) -> None:
        super().__init__(params)
        self.link = params.link
        self.cost_link = cost_link = params.cost_link or params.link
        self.ridge = params.ridge
        self.beta = params.beta
        self.delta = params.delta
        self.warmup = params.warmup
        self.gamma_weighted_gradient = params.gamma_weighted_gradient
        self.reset_dual = params.reset_dual
        self.step = math.sqrt(2.0 / params.horizon)  # eps of multiplicative weights
        self.target_rate = params.budget / params.horizon  # B / T
        self.log_alpha = INITIAL_LOG_ALPHA
        self.gamma = INITIAL_GAMMA
        self.model = Arm.fresh(params.dim, params.ridge, {"reward": params.link})
        self.human = Arm.fresh(params.dim, params.ridge,
                               {"reward": params.link, "cost": cost_link})

    @property
    def dual_price(self) -> float:
        """lambda_t = (T / B) gamma_t."""
        return self.gamma / self.target_rate

    def radius(self) -> float:
        """beta_t = beta * sqrt(2 d log((1 + 2 t d) / delta)), t the rounds so far (>= 1)."""
        d = self.params.dim
        t = max(self.rounds, 1)
        return self.beta * math.sqrt(2.0 * d * math.log((1.0 + 2.0 * t * d) / self.delta))

    def bounds(self, x: np.ndarray) -> tuple[float, float, float]:
        """mu(UCB_model), mu(UCB_human) and mu(LCB_cost) (clipped at 0) on ``x``."""
        radius = self.radius()
        model_bonus = radius * self.model.width(x)
        human_bonus = radius * self.human.width(x)
        ucb_model = self.model.estimates["reward"].mean(x, self.model.gram_inverse, model_bonus)
        ucb_human = self.human.estimates["reward"].mean(x, self.human.gram_inverse, human_bonus)
        lcb_cost = self.human.estimates["cost"].mean(x, self.human.gram_inverse, -human_bonus)
        return ucb_model, ucb_human, max(lcb_cost, 0.0)

    def choose(self, x: np.ndarray, context: Mapping[str, Any], can_defer: bool,
               rng: np.random.Generator) -> Choice:
        ucb_model, ucb_human, lcb_cost = self.bounds(x)
        dual_price = self.dual_price
        warming_up = self.rounds < self.warmup
        if not can_defer:
            defer = False
        elif warming_up:
            defer = bool(rng.random() < 0.5)
        else:
            defer = ucb_human - ucb_model > dual_price * lcb_cost
        output = {
            "dual_price": dual_price,
            "ucb_model": ucb_model,
            "ucb_human": ucb_human,
            "lcb_cost": lcb_cost,
            "warmup": warming_up,
        }
        # gamma is recorded so that the gamma-weighted gradient uses the decision's gamma_t.
        pending = {"prices": can_defer and not warming_up, "gamma": self.gamma}
        return Choice(defer=defer, output=output, pending=pending)

    def account(self, pending: Mapping[str, Any], cost: float) -> None:
        """The multiplicative-weights step of the dual price for a round whose cost is known."""
        if not pending["prices"] or (self.reset_dual and pending["period"] != self.period):
            return
        gradient = cost - self.target_rate
        if self.gamma_weighted_gradient:
            gradient *= float(pending["gamma"])
        if gradient >= 0.0:
            self.log_alpha += gradient * math.log1p(self.step)
        else:
            self.log_alpha -= gradient * math.log1p(-self.step)
        self.gamma = link_mean("logistic", self.log_alpha)  # alpha / (1 + alpha), overflow-safe

    def start_period(self) -> None:
        if self.reset_dual:
            self.log_alpha = INITIAL_LOG_ALPHA
            self.gamma = INITIAL_GAMMA

    def observe_model(self, x: np.ndarray, reward: float) -> None:
        self.model.update(x, {"reward": reward})

    def observe_human(self, x: np.ndarray, reward: float, cost: float) -> None:
        self.human.update(x, {"reward": reward, "cost": cost})

    def summary(self) -> dict[str, float | list[float]]:
        return {**super().summary(), "dual_price": self.dual_price}
