"""Warm start: a learner's parameters trained on logged rounds of another policy.

The family decides how (``Learner.warm_params``): graph_cb trains its regression oracle on
every revealed loss, the family's own update, and publishes it as ``initial_oracle``; the
config ``banditflow warm-start`` publishes then starts the worker's learner from it. Only
the rounds with an observed reward and features teach anything.

>>> from banditflow.learners.registry import make_learner
>>> from banditflow.offline.archive import LoggedRound
>>> from banditflow.schemas import LearnerConfig
>>> config = LearnerConfig(learner_id="w", family="graph_cb", algorithm="squarecb",
...     params={"actions": 2, "feature_dim": 1, "graph_kind": "bandit", "update": "rls"})
>>> rounds = [LoggedRound("l", str(i), action=i % 2, actions=2, propensity=0.5, p=None,
...                       reward=-0.9 if i % 2 else -0.1, features=[1.0]) for i in range(200)]
>>> warmed, trained = warm_config(config, rounds)
>>> trained, warmed.params["initial_oracle"]["updates"]
(200, 200)
>>> learner = make_learner("graph_cb", "squarecb", warmed.params)
>>> [round(float(v), 1) for v in learner.oracle.predict([1.0])]  # the logged losses, learned
[0.1, 0.9]
"""

from __future__ import annotations

from collections.abc import Sequence

from banditflow.learners.base import LoggedExample
from banditflow.learners.registry import learner_class
from banditflow.offline.archive import LoggedRound
from banditflow.processors.processor import LEARNER_FAILURES
from banditflow.schemas import LearnerConfig


class WarmStartError(ValueError):
    pass


def warm_config(config: LearnerConfig, rounds: Sequence[LoggedRound]
                ) -> tuple[LearnerConfig, int]:
    """``config`` with parameters trained on ``rounds`` (see the module docstring), and the
    number of rounds it was trained on."""
    examples = [
        LoggedExample(round_.features, round_.action, round_.reward, round_.revealed,
                      round_.candidates)
        for round_ in rounds
        if round_.reward is not None
        and (round_.features is not None or round_.candidates is not None)
    ]
    try:
        params = learner_class(config.family, config.algorithm).warm_params(
            config.params, examples
        )
    except LEARNER_FAILURES as exc:
        raise WarmStartError(f"{config.family}/{config.algorithm}: {exc}") from None
    return config.model_copy(update={"params": params}), len(examples)
