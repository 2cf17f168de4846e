"""Shared event handling of the deferral family: budget periods, reservations, feedback parts.

Every deferral learner chooses per context between the model (cost 0) and the human (an
unknown cost in ``[0, c_max]``) under a hard budget ``B`` per period of ``horizon`` rounds.
The algorithms differ only in :meth:`DeferralLearner.choose` and in what they learn; the
budget-safety machinery lives here once:

- **Reservation.** The human's cost is unknown at decision time, so a deferral reserves
  ``c_max`` in the learner state (persisted with it, before the decision is published) and
  is allowed only if ``spent + reserved + c_max <= budget``. The human part of the feedback
  settles it (the reservation is replaced by the actual cost, which must lie in
  ``[0, c_max]``); a timeout (:meth:`expire`) charges the full reservation. So the spend of a
  period never exceeds ``B``, whatever the delays, order or loss of feedback.
- **Periods.** Round ``t`` (counted by ``decide``) belongs to period ``t // horizon``. A new
  period starts with ``spent = reserved = 0``. A decision settled after its period ended
  only teaches the estimates: its period's spend was already bounded by its reservation.
- **Feedback parts.** ``full`` feedback: the model's reward always arrives
  (``{"part": "model", "model_reward": r}``) and, for a deferral, the human's too
  (``{"part": "human", "human_reward": r, "human_cost": c}``), in either order (or together
  in one event). ``bandit`` feedback: only the chosen arm's part. The part is read from the
  payload when ``part`` is absent (the processors strip it). ``learn`` returns
  ``done=False`` while a part is still expected; the parts already applied to a decision
  are kept in the learner state (``partial``, bounded by the in-flight decisions) so a part
  is never applied twice and the timeout knows what is missing.

>>> import numpy as np
>>> from banditflow.learners.deferral import ALGORITHMS
>>> learner = ALGORITHMS["arbitrary_human"].from_params(
...     {"dim": 2, "budget": 1.5, "horizon": 10, "feedback": "full"})
>>> rng = np.random.default_rng(0)
>>> first = learner.decide({"features": [0.6, 0.8]}, rng)
>>> first.output["defer"], learner.summary()["budget_reserved"]
(True, 1.0)
>>> learner.decide({"features": [0.6, 0.8]}, rng).output["defer"]  # 1.0 + 1.0 > 1.5
False
>>> learner.learn(first.pending, {"part": "human", "human_reward": 1.0, "human_cost": 0.25})
Learned(done=False, metrics={'reward': 1.0, 'cost': 0.25, 'deferred': 1.0})
>>> learner.learn(first.pending, {"part": "model", "model_reward": 0.0}).done
True
>>> learner.summary()["budget_spent"], learner.summary()["budget_remaining"]
(0.25, 1.25)
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np

from banditflow.learners.base import (
    JSON,
    ContradictingFeedback,
    Decided,
    Learned,
    Learner,
    LearnerError,
    Stats,
    check_state_size,
)
from banditflow.learners.declared import Declared, Params, State, param
from banditflow.learners.deferral.regret import opt_reward, record_truth

FEEDBACK_MODES = ("full", "bandit")
NORM_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Choice:
    """What an algorithm decides: defer or not, extra output fields, extra pending fields."""

    defer: bool
    output: JSON = field(default_factory=dict)
    pending: JSON = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DeferralParams(Params):
    """Parameters common to every deferral learner."""

    dim: int = param(ge=1)
    budget: float = param(gt=0, what="B per period")
    horizon: int = param(ge=3, what="rounds per period")
    feedback: str = param("full", choices=FEEDBACK_MODES)
    c_max: float = param(1.0)

    def validated(self) -> Self:
        # up to five estimates (model, human, cost; a logistic link keeps its own), each a
        # dim x dim matrix and a vector
        check_state_size(5 * self.dim * (self.dim + 1), f"parameter 'dim' = {self.dim}")
        if not 0.0 < self.c_max <= self.budget:
            raise LearnerError(
                f"parameter 'c_max' (largest human cost) must be in (0, budget={self.budget}], "
                f"got {self.c_max}"
            )
        return self


@dataclass(kw_only=True)
class DeferralState(State):
    rounds: int
    period: int
    spent: float
    reserved: float
    period_deferrals: int
    partial: dict[str, list[str]]


def validate_features(context: Mapping[str, Any], dim: int) -> np.ndarray:
    """The context's feature vector, checked: ``dim`` finite floats with ``||x|| <= 1``."""
    features = context.get("features")
    if not isinstance(features, list | tuple):
        raise LearnerError("a deferral context needs 'features', a list of floats")
    if len(features) != dim:
        raise LearnerError(f"'features' must have length dim={dim}, got {len(features)}")
    try:
        x = np.array(features, dtype=float)
    except (TypeError, ValueError) as exc:
        raise LearnerError(f"'features' must be numbers: {exc}") from exc
    if not np.all(np.isfinite(x)):
        raise LearnerError("'features' must be finite")
    norm = float(np.linalg.norm(x))
    if norm > 1.0 + NORM_TOLERANCE:
        raise LearnerError(f"'features' must have Euclidean norm <= 1, got {norm:.6g}")
    return x


def unit_value(feedback: Mapping[str, Any], name: str, upper: float = 1.0) -> float:
    """A finite feedback value in ``[0, upper]``."""
    value = feedback.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LearnerError(f"feedback needs {name!r}, a finite number, got {value!r}")
    if not 0.0 <= value <= upper:
        raise LearnerError(f"feedback {name!r} must be in [0, {upper}], got {value}")
    return float(value)


class DeferralLearner(Declared, Learner):
    """Base of the deferral family: subclasses implement ``choose`` (and may learn)."""

    family: ClassVar[str] = "deferral"
    Params = DeferralParams
    State = DeferralState

    @classmethod
    def stats_on_truth(
        cls,
        stats: Stats,
        output: Mapping[str, Any],
        truth: Mapping[str, Any],
        params: Mapping[str, Any],
    ) -> None:
        if truth.get("model_reward") is not None:
            record_truth(stats, bool(output.get("defer")), truth)

    @classmethod
    def stats_gauges(
        cls, stats: Stats, summary: Mapping[str, Any], values: dict[str, Any]
    ) -> None:
        if stats.get("truth_rounds") and "budget" in summary:
            horizon = float(summary.get("horizon") or stats["truth_rounds"])
            budget = float(summary["budget"]) * stats["truth_rounds"] / horizon  # pro-rated
            values["opt_reward"] = opt_reward(stats, budget)
            values["regret_exact"] = values["opt_reward"] - stats.get("truth_reward", 0.0)

    def __init__(self, params: DeferralParams) -> None:
        self.params = params
        self.rounds = 0  # decisions made over the learner's life
        self.period = 0
        self.spent = 0.0  # settled human cost in the current period
        self.reserved = 0.0  # outstanding reservations of the current period
        self.period_deferrals = 0
        self.partial: dict[str, list[str]] = {}  # decision -> parts applied, while incomplete

    @abstractmethod
    def choose(self, x: np.ndarray, context: Mapping[str, Any], can_defer: bool,
               rng: np.random.Generator) -> Choice:
        """Defer or not; ``can_defer`` is False when the budget cannot cover ``c_max``."""

    def check_context(self, context: Mapping[str, Any]) -> None:
        """Raise :class:`LearnerError` for algorithm-specific context fields that are unusable
        (called before any state changes; the features are checked already)."""

    def observe_model(self, x: np.ndarray, reward: float) -> None:
        """Learn from the model's reward on ``x`` (default: nothing to learn)."""

    def observe_human(self, x: np.ndarray, reward: float, cost: float) -> None:
        """Learn from the human's reward and cost on ``x`` (default: nothing to learn)."""

    def account(self, pending: Mapping[str, Any], cost: float) -> None:
        """Called once per decision when its cost is known (0 at once for the model)."""

    def start_period(self) -> None:
        """Hook for state that a new budget period resets (default: none beyond the budget)."""

    @property
    def budget_remaining(self) -> float:
        """What new deferrals may still use in this period: ``B - spent - reserved``."""
        return self.params.budget - self.spent - self.reserved

    def decide(self, context: Mapping[str, Any], rng: np.random.Generator) -> Decided:
        x = validate_features(context, self.params.dim)
        self.check_context(context)
        period = self.rounds // self.params.horizon
        if period != self.period:
            self.period = period
            self.spent = self.reserved = 0.0
            self.period_deferrals = 0
            self.start_period()
        can_defer = self.spent + self.reserved + self.params.c_max <= self.params.budget
        choice = self.choose(x, context, can_defer, rng)
        if choice.defer and not can_defer:
            raise AssertionError("an algorithm deferred without budget")  # a bug, never input
        reserved = self.params.c_max if choice.defer else 0.0
        pending = {
            "decision": self.rounds,
            "period": self.period,
            "features": x.tolist(),
            "defer": choice.defer,
            "reserved": reserved,
            "parts": self.feedback_parts(choice.defer),
            **choice.pending,
        }
        self.rounds += 1
        if choice.defer:
            self.reserved += reserved
            self.period_deferrals += 1
        else:
            self.account(pending, 0.0)
        output = {"defer": choice.defer, "reserved": reserved, **choice.output}
        return Decided(output=output, pending=pending)

    def feedback_parts(self, defer: bool) -> list[str]:
        """The feedback parts a decision gets: the chosen arm's, plus the model's in full mode.

        They are recorded in the pending record, so a reconfiguration of ``feedback`` does not
        change what decisions in flight expect."""
        if not defer:
            return ["model"]
        return ["model", "human"] if self.params.feedback == "full" else ["human"]

    @staticmethod
    def feedback_parts_of(feedback: Mapping[str, Any]) -> list[str]:
        """The parts a feedback event carries: its ``part`` field when present, else what its
        payload holds (the processors strip ``part``, an envelope field used for dedupe, before
        the learner sees the event): ``model_reward`` is the model part, ``human_reward`` /
        ``human_cost`` the human part; an event may carry both."""
        part = feedback.get("part")
        if part:
            return [str(part)]
        parts = []
        if "model_reward" in feedback:
            parts.append("model")
        if "human_reward" in feedback or "human_cost" in feedback:
            parts.append("human")
        if not parts:
            raise LearnerError(
                "deferral feedback needs 'model_reward' (the model part) and/or "
                "'human_reward' with 'human_cost' (the human part)"
            )
        return parts

    @classmethod
    def feedback_part(cls, feedback: Mapping[str, Any]) -> str:
        """``model``, ``human`` or ``human+model`` (an event carrying both), read from the
        payload when ``part`` is absent."""
        try:
            return "+".join(sorted(cls.feedback_parts_of(feedback)))
        except LearnerError:  # no part at all: ``learn`` refuses it
            return ""

    def learn(self, pending: Mapping[str, Any], feedback: Mapping[str, Any]) -> Learned:
        parts = self.feedback_parts_of(feedback)
        expected = pending["parts"]
        unexpected = [part for part in parts if part not in expected]
        if unexpected:
            raise ContradictingFeedback(
                f"feedback part {unexpected[0]!r} is not expected for this decision "
                f"(deferred={pending['defer']}); expected one of {expected}"
            )
        key = str(pending["decision"])
        applied = self.partial.get(key, [])
        fresh = [part for part in parts if part not in applied]
        if not fresh:
            return Learned(done=False, metrics={"duplicate": 1.0})
        x = np.array(pending["features"], dtype=float)
        # Validate every value before any state changes (a rejected event changes nothing).
        model_reward = unit_value(feedback, "model_reward") if "model" in fresh else 0.0
        human_reward = cost = 0.0
        if "human" in fresh:
            human_reward = unit_value(feedback, "human_reward")
            cost = unit_value(feedback, "human_cost", upper=float(pending["reserved"]))
        metrics: dict[str, float] = {}
        if "model" in fresh:
            self.observe_model(x, model_reward)
            if not pending["defer"]:
                metrics = {"reward": model_reward, "cost": 0.0, "deferred": 0.0}
        if "human" in fresh:
            self.settle(pending, cost)
            self.observe_human(x, human_reward, cost)
            metrics = {"reward": human_reward, "cost": cost, "deferred": 1.0}
        done_parts = [*applied, *fresh]
        missing = [name for name in expected if name not in done_parts]
        if missing:
            self.partial[key] = done_parts
        else:
            self.partial.pop(key, None)
        return Learned(done=not missing, metrics=metrics)

    def expire(self, pending: Mapping[str, Any]) -> Learned:
        applied = self.partial.pop(str(pending["decision"]), [])
        if not pending["defer"] or "human" in applied:
            return Learned(done=True, metrics={"timed_out": 1.0})
        charged = float(pending["reserved"])
        self.settle(pending, charged)
        return Learned(done=True, metrics={"timed_out": 1.0, "cost": charged, "deferred": 1.0})

    def settle(self, pending: Mapping[str, Any], cost: float) -> None:
        """Replace a deferral's reservation by its cost (only within its own period)."""
        if pending["period"] == self.period:
            self.reserved = max(self.reserved - float(pending["reserved"]), 0.0)
            self.spent += cost
        self.account(pending, cost)

    def summary(self) -> dict[str, float | list[float]]:
        """Live values, named as the family's gauges (``banditflow.learners.deferral.family``):
        ``budget`` (B per period of ``horizon`` rounds), ``budget_spent`` (settled cost),
        ``budget_reserved`` (outstanding reservations), ``budget_remaining``
        (``B - spent - reserved``), and the current period's ``deferral_rate``; all of the
        current period."""
        period_rounds = self.rounds - self.period * self.params.horizon
        rate = self.period_deferrals / period_rounds if period_rounds else 0.0
        return {
            "budget": self.params.budget,
            "horizon": float(self.params.horizon),
            "budget_spent": self.spent,
            "budget_reserved": self.reserved,
            "budget_remaining": self.budget_remaining,
            "deferral_rate": rate,
            "period": float(self.period),
        }
