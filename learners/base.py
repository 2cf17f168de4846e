"""The contract every banditflow learner implements.

A learner is a small, pure state machine driven by three verbs:

- ``decide(context, rng)`` turns a context into a decision. It returns the ``output`` that is
  published on the decision event and the ``pending`` record that learning needs later
  (scores in the set, features, propensities, reservations). ``decide`` may change the
  learner's state (a budget reservation, an in-flight count), never anything else.
- ``learn(pending, feedback)`` incorporates one piece of feedback for a pending decision and
  says whether the decision is now settled (``done``) or still expects more feedback.
- ``expire(pending)`` applies the family's timeout rule to a decision whose feedback never
  (fully) arrived.

State is a JSON-serialisable dict (``to_state`` / ``from_state``) that stays compact: the
worker writes it whole to its state log at every commit that follows an update. The built-in
families declare their parameters and state as records and inherit ``from_params``,
``to_state`` and ``load_state`` from :class:`banditflow.learners.declared.Declared`. All
randomness comes from the ``rng`` argument, which the processors derive from the learner
seed and the event id, so a replay reproduces every decision.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np

JSON = dict[str, Any]


class LearnerError(ValueError):
    """An event or a parameter that the learner cannot use; the message says why."""


class ContradictingFeedback(LearnerError):
    """Feedback that contradicts its decision or its family: a label the prediction set did
    not hold, a loss or reward the played action cannot reveal, another family's fields.
    Nothing it says may reach the learner; the processors dead-letter it as
    ``contradicting_feedback``."""


@dataclass(frozen=True)
class Decided:
    """What ``decide`` returns: the published output and the record kept until feedback."""

    output: JSON
    pending: JSON


@dataclass(frozen=True)
class Learned:
    """What ``learn`` / ``expire`` return.

    ``done`` is False when the decision still expects feedback (e.g. the human's answer after
    the model's reward). ``metrics`` are per-event observations for the metrics side, such as
    ``{"covered": 1.0}``.
    """

    done: bool = True
    metrics: Mapping[str, float] = field(default_factory=dict)


class Learner(ABC):
    """Base class of all learners. Subclasses set ``family`` and ``algorithm``."""

    family: ClassVar[str]
    algorithm: ClassVar[str]
    #: The parameters of a learner that reads them by hand (a declared learner's are its
    #: params record's fields: :class:`banditflow.learners.declared.Declared`).
    PARAMS: ClassVar[set[str]] = set()

    @classmethod
    def parameters(cls) -> frozenset[str]:
        """Every parameter ``from_params`` accepts."""
        return frozenset(cls.PARAMS)

    @abstractmethod
    def decide(self, context: Mapping[str, Any], rng: np.random.Generator) -> Decided:
        """Decide for one context event (family-specific fields, already schema-valid)."""

    @classmethod
    def feedback_part(cls, feedback: Mapping[str, Any]) -> str:
        """Which part of a decision's feedback ``feedback`` is: the processors apply each part
        once and tell a part sent again from a different feedback for it. Its ``part`` field;
        families whose feedback may come in several events without one say it from the
        payload."""
        return str(feedback.get("part") or "")

    @abstractmethod
    def learn(self, pending: Mapping[str, Any], feedback: Mapping[str, Any]) -> Learned:
        """Incorporate one feedback event for a decision made by ``decide``."""

    @abstractmethod
    def expire(self, pending: Mapping[str, Any]) -> Learned:
        """Apply the timeout rule to a decision whose feedback did not (fully) arrive."""

    @abstractmethod
    def to_state(self) -> JSON:
        """Compact JSON-serialisable state (parameters are stored separately)."""

    @classmethod
    @abstractmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        """A fresh learner; raises :class:`LearnerError` naming any bad parameter."""

    @classmethod
    def from_state(cls, params: Mapping[str, Any], state: Mapping[str, Any]) -> Self:
        """A learner restored from ``to_state`` output and its parameters."""
        learner = cls.from_params(params)
        learner.load_state(state)
        return learner

    @abstractmethod
    def load_state(self, state: Mapping[str, Any]) -> None:
        """Replace this learner's state with ``state`` (from ``to_state``)."""

    def summary(self) -> dict[str, float | list[float]]:
        """Live gauges for the metrics side, e.g. ``{"threshold": 0.3}``, ``{"dual_price": 1.2}``
        or ``{"arm_pulls": [3.0, 10.0]}`` (a list is exported with an index label)."""
        return {}

    # The family's part of the running statistics kept with each learner (processors.stats
    # keeps the generic ones: decisions, feedback, timeouts, observed means): declared here,
    # by the family, so the processors need no branch per family.
    @classmethod  # noqa: B027 (an optional hook: families without such statistics)
    def stats_on_decided(
        cls,
        stats: Stats,
        output: Mapping[str, Any],
        params: Mapping[str, Any],
        summary: Mapping[str, Any],
    ) -> None:
        """Count what a decision (``output``) tells, e.g. its set size."""

    @classmethod  # noqa: B027 (an optional hook: families without such statistics)
    def stats_on_truth(
        cls,
        stats: Stats,
        output: Mapping[str, Any],
        truth: Mapping[str, Any],
        params: Mapping[str, Any],
    ) -> None:
        """Count what the ground truth of a decision tells (exact regret)."""

    @classmethod  # noqa: B027 (an optional hook: families without such statistics)
    def stats_gauges(
        cls, stats: Stats, summary: Mapping[str, Any], values: dict[str, Any]
    ) -> None:
        """Add the family's live values computed from ``stats`` to ``values``."""

    @classmethod
    def warm_params(
        cls, params: Mapping[str, Any], logged: Iterable[LoggedExample]
    ) -> dict[str, Any]:
        """``params`` for a learner that starts from what ``logged`` rounds of another
        policy teach (``banditflow warm-start``); families that cannot learn off-policy from
        logs refuse."""
        raise LearnerError(f"{cls.family} learners cannot be warm-started from logs")


@dataclass(frozen=True)
class LoggedExample:
    """A logged round as warm start sees it: the context's features, the played action, its
    reward, every reward the feedback revealed, by action, and the candidates it offered."""

    features: list[float] | list[list[float]] | None
    action: int
    reward: float
    revealed: Mapping[int, float]
    candidates: list[Mapping[str, Any]] | None = None
    """The event's candidates (``{"id", "features"}``) when it offered its own."""


Stats = dict[str, float]
"""A learner's running statistics: named sums, kept with its state."""


def add_stat(stats: Stats, name: str, value: float = 1.0) -> None:
    stats[name] = stats.get(name, 0.0) + value


# The smallest ridge (lambda of lambda I) a learner takes: I / lambda must stay finite, or
# the state would hold infinities (which no JSON, and so no state log, can carry).
MIN_RIDGE = 1e-12
# The most numbers a learner's state may hold: it is snapshotted whole in the state log.
MAX_STATE_NUMBERS = 10_000_000


def check_state_size(numbers: int, what: str) -> None:
    """Raise :class:`LearnerError` if ``numbers`` exceeds :data:`MAX_STATE_NUMBERS`."""
    if numbers > MAX_STATE_NUMBERS:
        raise LearnerError(
            f"{what} would keep {numbers:,} numbers in the learner's state, over the limit of "
            f"{MAX_STATE_NUMBERS:,}"
        )
