"""Target policies of off-policy evaluation, named by a SPEC on the command line.

* ``logged``: the logging policy itself (its distribution ``p`` when the decisions carry it;
  otherwise the logged action, weight 1);
* ``uniform``: every action of the round with probability 1 / K;
* ``constant:J``: always the action at 0-based index J of the round's action list (graph_cb:
  action J; DSJSON: ``_multi[J]``);
* the path of a learner config file: that learner, learning as it goes
  (:mod:`banditflow.offline.ope.learning_policy`).

>>> policy = parse_policy("constant:2")
>>> policy.probabilities(actions=4, logged_p=None).tolist()
[0.0, 0.0, 1.0, 0.0]
>>> parse_policy("uniform").probabilities(actions=4, logged_p=None).tolist()
[0.25, 0.25, 0.25, 0.25]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from banditflow.offline.ope.learning_policy import LearningPolicy


class PolicyError(ValueError):
    pass


@dataclass(frozen=True)
class TargetPolicy:
    """A fixed policy: its SPEC and, per round, its distribution over the round's actions."""

    spec: str
    kind: str
    action: int | None = None

    def probabilities(self, actions: int, logged_p: list[float] | None) -> np.ndarray | None:
        """The distribution over ``actions`` actions; None for ``logged`` when the round's
        decision did not carry its distribution (then only the logged action is known)."""
        if self.kind == "logged":
            return None if logged_p is None else np.asarray(logged_p, dtype=float)
        if self.kind == "uniform":
            return np.full(actions, 1.0 / actions)
        if self.action is None or self.action >= actions:
            raise PolicyError(f"{self.spec}: a round offers only {actions} actions")
        distribution = np.zeros(actions)
        distribution[self.action] = 1.0
        return distribution


def parse_policy(spec: str) -> TargetPolicy | LearningPolicy:
    if spec in ("logged", "uniform"):
        return TargetPolicy(spec, spec)
    name, _, argument = spec.partition(":")
    if name == "constant":
        try:
            action = int(argument)
        except ValueError:
            action = -1
        if action < 0:
            raise PolicyError(f"{spec!r}: constant:J needs a 0-based action index J")
        return TargetPolicy(spec, "constant", action)
    if Path(spec).is_file():
        return LearningPolicy.load(spec)
    raise PolicyError(f"unknown policy {spec!r}: use logged, uniform, constant:J or the path "
                      "of a learner config file")
