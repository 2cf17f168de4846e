"""What the rest of banditflow knows about a learner family: its front door.

A family declares once, next to its learners, everything the event schemas, the processors,
the metrics and the offline tools need from it: the fields its contexts, feedback and truth
events carry (with their validation), the gauges it exports, where its evaluation task and
log builders live. :mod:`banditflow.learners.registry` reads these declarations; nothing outside the
family package names a family's fields or gauges.

Field specs are ``(annotation, pydantic FieldInfo)`` pairs and validators pydantic validator
functions (``field_validator(...)(f)``, ``model_validator(mode="after")(f)``), as
:func:`pydantic.create_model` takes them; a validator's ``ValueError`` makes the event an
``invalid_schema`` dead letter. A field two families share (``features``) is one spec object
both use (:mod:`banditflow.learners.fields`).

>>> from banditflow.learners.registry import family
>>> sorted(family("conformal").feedback)
['label', 'missed']
>>> family("graph_cb").gauges["mean_loss"]
'Progressive-validation loss (graph_cb)'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic.fields import FieldInfo

FieldSpec = tuple[Any, FieldInfo]


@dataclass(frozen=True)
class Family:
    """A learner family's declaration (see the module docstring)."""

    name: str
    algorithms: str
    """Module exposing ``ALGORITHMS: dict[str, type[Learner]]``, imported when first used
    (so that, e.g., torch-based learners cost nothing until then)."""
    context: Mapping[str, FieldSpec] = field(default_factory=dict)
    feedback: Mapping[str, FieldSpec] = field(default_factory=dict)
    truth: Mapping[str, FieldSpec] = field(default_factory=dict)
    feedback_qualifiers: frozenset[str] = frozenset()
    """Feedback fields that qualify another and say nothing on their own (feedback carrying
    only these is refused as empty)."""
    sized: Mapping[str, str] = field(default_factory=dict)
    """Context fields bounded by a worker input limit, with the :class:`banditflow.schemas.Limits`
    attribute bounding them (``max_labels``: the list's length; ``max_features``: the numbers
    in it, nested lists included)."""
    context_validators: Mapping[str, Any] = field(default_factory=dict)
    feedback_validators: Mapping[str, Any] = field(default_factory=dict)
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
    (:mod:`banditflow.processors.ope`)."""
    evaluation: str | None = None
    """Module of the family's ``banditflow evaluate`` task (see
    :mod:`banditflow.offline.evaluation`)."""
    logs: tuple[str, ...] = ()
    """Modules defining the family's ``make-log`` builders, ``LOGS`` (see
    :mod:`banditflow.offline.logs`)."""

    def __post_init__(self) -> None:
        if self.action_distribution and (self.played_action is None or self.revealed is None):
            raise ValueError(
                f"family {self.name!r}: action_distribution needs played_action and revealed"
            )


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
