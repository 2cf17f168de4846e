"""What the rest of banditflow knows about a learner family: its front door.

A family declares once, next to its learners, everything the schemas, the processors, the
metrics, the offline tools and the tests need from it: the module of its event models (the
fields its contexts, feedback and truth carry, with their validation: pydantic models in
``schemas/``, which this package does not import), the gauges it exports, how its
decisions read as logged rounds and what live off-policy evaluation reads of its learners,
where its evaluation task and log builders live, the application ``banditflow simulate``
and the demo play, and what the learner contract suite drives each algorithm with.
:mod:`banditflow.learners.registry` reads these declarations; nothing outside the family
names a family's fields or gauges. This module is pure data (the dependency rule:
``learners/`` imports neither pydantic nor the offline tools, only names their modules).

>>> from banditflow.learners.registry import family
>>> family("conformal").events
'banditflow.schemas.conformal'
>>> family("graph_cb").gauges["mean_loss"]
'Progressive-validation loss (graph_cb)'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from banditflow.learners.base import Learner

JSON = dict[str, Any]


class OffPolicyView(Protocol):
    """What live off-policy evaluation (:mod:`banditflow.processors.ope`) reads of the
    learners of a family whose decisions carry a distribution ``p`` over actions: the
    family's answer, so that the evaluation names no family's parameters or attributes."""

    def interface(self, learner: Learner, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """What a candidate must share with the live learner to be scored on its rounds
        (its actions, the features it reads, its feedback graph, ...)."""
        ...

    def reward_model(self, learner: Learner, params: Mapping[str, Any]) -> tuple[int, int]:
        """The shape of the ridge reward model: how many regressions (one per action, or one
        over every action's own inputs, see :meth:`action_inputs`) and of how many features
        (0: an intercept only)."""
        ...

    def feedback_graph(self, learner: Learner, context: JSON, actions: int) -> np.ndarray:
        """The decision's feedback graph over its ``actions`` (G[a][j] > 0: playing a
        reveals j); the identity for bandit feedback."""
        ...

    def action_inputs(self, learner: Learner,
                      context: JSON) -> tuple[list[list[float]], list[str]] | None:
        """Of a learner that scores each action by its own features (candidate sets): one
        feature row per action of ``context`` and the ids its feedback may name them by. None:
        the reward model reads the context's one ``features`` vector."""
        ...


@dataclass(frozen=True)
class Application:
    """The family's simulated application (``banditflow simulate --family F``, the demo): a
    ``banditflow make-log`` log (bundled data or a paper scenario) answered by the family's
    evaluation task, the learner and the baseline it compares on the same traffic."""

    log: str
    """The ``make-log`` name of its traffic."""
    learner: str
    baseline: str
    events: int
    """The demo's default number of contexts ..."""
    rate: float
    """... and contexts per second."""
    options: tuple[str, ...] = ()
    """``banditflow evaluate`` options of its task."""
    learner_params: Mapping[str, Any] = field(default_factory=dict)
    """Parameters of the learner only (beyond what the task gives every algorithm)."""
    log_option: str = "--log"
    """The ``banditflow evaluate`` option that reads the log."""


@dataclass(frozen=True)
class Contract:
    """What the learner contract suite (``tests/unit/test_learner_contract.py``) drives the
    family's algorithms with (river's ``_unit_test_params`` is the model): small synthetic
    contexts, the feedback an application would send for a decision, a check of a decision's
    output, and small configurations."""

    context: Callable[[np.random.Generator], JSON]
    feedback: Callable[[JSON, np.random.Generator], list[JSON]]
    valid: Callable[[JSON], bool]
    """Whether a decision's output is a valid one of the family's (for the contexts above)."""
    params: JSON
    """Parameters every algorithm of the family is built with ..."""
    algorithm_params: Mapping[str, JSON] = field(default_factory=dict)
    """... and each algorithm's own (required ones, and bounds on what its state keeps)."""
    bad_context: JSON | None = None
    """A context the family's schema accepts and its learners refuse (None: none can be)."""
    events: Mapping[str, int] = field(default_factory=dict)
    """Events of the bounded-state check of a slow algorithm (10^4 for the others) ..."""
    rounds: Mapping[str, int] = field(default_factory=dict)
    """... and of its state round trip (300 for the others)."""


@dataclass(frozen=True)
class Family:
    """A learner family's declaration (see the module docstring)."""

    name: str
    algorithms: str
    """Module exposing ``ALGORITHMS: dict[str, type[Learner]]``, imported when first used
    (so that, e.g., torch-based learners cost nothing until then)."""
    events: str
    """Module of the family's event models, ``EVENTS =``
    :class:`banditflow.schemas.events.FamilyEvents` ``(Context, Feedback, Truth)``: the
    fields its records carry beyond the envelope, their validation (a validator's
    ``ValueError`` makes the event an ``invalid_schema`` dead letter), the context fields
    bounded by ``--max-labels`` / ``--max-features`` (``SIZED``) and the feedback fields that
    only qualify another (``QUALIFIERS``)."""
    gauges: Mapping[str, str] = field(default_factory=dict)
    """``banditflow_learner_<name>`` gauges, with their help text."""
    arm_gauges: Mapping[str, str] = field(default_factory=dict)
    """``banditflow_<name>{arm=...}`` gauges: one series per arm of a list-valued gauge."""
    played_action: str | None = None
    """Field of a decision's output holding the index of the one action it played: its
    decisions are logged rounds for off-policy evaluation
    (:func:`banditflow.offline.archive.joined_rounds`).
    None: they play no single action."""
    revealed: str | None = None
    """Feedback field mapping each revealed action's index (as text) to its value."""
    revealed_are_losses: bool = False
    """The revealed values are losses (a round's reward is minus the loss), not rewards."""
    action_count_params: tuple[str, ...] = ()
    """Config parameters giving the number of actions, tried in order: an integer, or a list
    with one entry per action (when the decisions carry no distribution ``p``)."""
    action_distribution: bool = False
    """Decisions carry the played action (``played_action``) and the distribution ``p`` it was
    drawn from, so off-policy evaluation (``banditflow ope --policy CONFIG``) can score the
    learners: they then learn from logged rounds as if they had played the logged action, put
    in their pending state under the ``played_action`` key, with its ``revealed`` feedback.
    Its learner configs may also name ``candidates``, scored live the same way
    (:mod:`banditflow.processors.ope`), which reads its learners through ``off_policy``."""
    off_policy: OffPolicyView | None = None
    """What live off-policy evaluation reads of its learners (needed with
    ``action_distribution``)."""
    evaluation: str | None = None
    """Module of the family's ``banditflow evaluate`` task (see
    :mod:`banditflow.offline.evaluation`)."""
    logs: tuple[str, ...] = ()
    """Modules defining the family's ``make-log`` builders, ``LOGS`` (see
    :mod:`banditflow.offline.logs`)."""
    application: Application | None = None
    """Its simulated application (None: ``banditflow simulate`` and the demo do not play it;
    it needs ``evaluation`` and the builder of its log)."""
    contract: Contract | None = None
    """What the learner contract suite drives its algorithms with (a family without one fails
    the suite)."""

    def __post_init__(self) -> None:
        if self.action_distribution and (self.played_action is None or self.revealed is None
                                         or self.off_policy is None):
            raise ValueError(f"family {self.name!r}: action_distribution needs played_action, "
                             "revealed and off_policy")
        if self.application is not None and self.evaluation is None:
            raise ValueError(f"family {self.name!r}: a simulated application needs evaluation")


def lazy_package(
    package: str, attributes: Mapping[str, str], algorithms: Mapping[str, str]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for a family package whose learners are costly to import
    (numba, scipy's optimiser): ``attributes`` maps each public name to its module,
    ``algorithms`` each algorithm name to its class's public name (``ALGORITHMS``). Reading
    the front door (``<package>.family``), as the event schemas do, then costs nothing."""

    def attribute(name: str) -> Any:
        if name == "ALGORITHMS":
            return {algorithm: attribute(cls) for algorithm, cls in algorithms.items()}
        if name in attributes:
            return getattr(importlib.import_module(attributes[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return attribute
