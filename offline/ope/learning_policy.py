"""A learner config as a target policy, evaluated progressively as it learns.

The SPEC is the path of a JSON learner config (``family``, ``algorithm``, ``params``,
``seed``, as produced to the learners topic; ``learner_id`` may be left out). The family's
decisions must carry their distribution ``p`` (its front door's ``action_distribution``:
graph_cb). Going through the logged rounds
in order, the learner first gives its distribution pi_t at round t's context (deciding with
the generator the worker would use for that event id), which is what the estimators weigh
round t with, and only then may learn from the round, the way Vowpal Wabbit's
``--explore_eval`` does: it learns from round t with probability
pi_t(a_t) / (M mu_t), M = 1 / min_t mu_t, as if it had played the logged action a_t itself
(its loss, -r_t, is what it sees). So the learner sees what it would have seen live on the
rounds accepted, and pi_t depends only on earlier rounds: each round's IPS, SNIPS and DR
terms are unbiased for the value of the policy the learner had then, and the estimates are of
the mean value of its successive policies over the log.

>>> import tempfile, json
>>> from banditflow.offline.archive import LoggedRound
>>> config = {"family": "graph_cb", "algorithm": "epsilon_greedy", "seed": 1,
...           "params": {"actions": 2, "feature_dim": 1, "graph_kind": "bandit",
...                      "epsilon": 1.0}}
>>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
...     json.dump(config, f)
>>> policy = LearningPolicy.load(f.name)
>>> rounds = [LoggedRound("l", str(i), action=i % 2, actions=2, propensity=0.5, p=None,
...                       reward=-1.0, features=[0.5]) for i in range(4)]
>>> [t.tolist() for t in policy.progressive_distributions(rounds, [0.5] * 4)]
[[0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]
>>> policy.learned_from  # each round accepted with probability 0.5 * 0.5 / 0.5
2
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from banditflow.learners.registry import families, family, make_learner
from banditflow.offline.archive import LoggedRound
from banditflow.processors.estimators import explore_eval_acceptance
from banditflow.processors.ope import as_played
from banditflow.processors.redo import event_seed
from banditflow.schemas import LearnerConfig


class LearningPolicyError(ValueError):
    pass


class LearningPolicy:
    """A learner built from a config file, and how many rounds it learned from."""

    def __init__(self, spec: str, config: LearnerConfig) -> None:
        self.spec = spec
        self.config = config
        self.learned_from = 0

    @classmethod
    def load(cls, path: str) -> LearningPolicy:
        try:
            document = json.loads(Path(path).read_text())
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            config = LearnerConfig.model_validate({"learner_id": "ope", **document})
        except ValueError as exc:
            raise LearningPolicyError(f"{path}: not a learner config: {exc}") from None
        if not family(config.family).action_distribution:
            able = [name for name, declared in families().items()
                    if declared.action_distribution]
            raise LearningPolicyError(
                f"{path}: {config.family} decisions carry no distribution over actions (a "
                f"learner policy must be of {', '.join(able)})")
        return cls(path, config)

    def progressive_distributions(self, rounds: Sequence[LoggedRound],
                                  propensities: Sequence[float]) -> list[np.ndarray]:
        """The learner's distribution at each round, learning explore_eval-style between
        rounds (see the module docstring); ``propensities`` are the (clipped) mu_t."""
        config = self.config
        declared = family(config.family)
        assert declared.played_action is not None and declared.revealed is not None  # (Family)
        learner = make_learner(config.family, config.algorithm, config.params)
        accept = np.random.default_rng([config.seed, 0x0E7E])
        bound = min(propensities, default=1.0)
        self.learned_from = 0
        distributions = []
        for round_, propensity in zip(rounds, propensities, strict=True):
            context: dict[str, object] = {"features": round_.features}
            if round_.candidates is not None:
                context["actions"] = round_.candidates
            decided = learner.decide(context, event_seed(config.seed, round_.event_id))
            p = decided.output["p"]
            if len(p) != round_.actions:
                raise LearningPolicyError(
                    f"{self.spec}: the learner plays {len(p)} actions, the log's round "
                    f"{round_.event_id} offers {round_.actions}")
            target = np.asarray(p, dtype=float)
            distributions.append(target)
            if accept.random() < explore_eval_acceptance(float(target[round_.action]), bound,
                                                         propensity):
                # The family's front door names where its feedback holds the action's loss
                # or reward.
                value = -float(round_.reward) if declared.revealed_are_losses else round_.reward
                # (a candidate's id: with ids that are digits, an index key would name another)
                key = (str(round_.action) if round_.candidates is None
                       else str(round_.candidates[round_.action]["id"]))
                learner.learn(as_played(declared, decided.pending, round_.action),
                              {declared.revealed: {key: value}})
                self.learned_from += 1
        return distributions
