"""Warm start: a graph_cb learner's regression oracle trained on logged rounds.

graph_cb's algorithms (SquareCB.G and its baselines) learn through a regression oracle
trained on every revealed loss without importance weights (the square loss of a revealed
action is an unbiased target whatever policy chose the action), so training on a log of
another policy's rounds is the family's own update: for each round with an observed reward,
the learner learns the played action's loss (minus the reward) as if it had played it, and
the losses of the other actions the feedback revealed when the learner's graph lets the
played action reveal them. The trained oracle's state becomes the ``initial_oracle``
parameter of the config ``banditflow warm-start`` publishes, so the worker's learner starts
from it (its exploration schedule starts afresh).

>>> from offline.archive import LoggedRound
>>> from schemas import LearnerConfig
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

from learners.base import LearnerError
from learners.registry import make_learner
from offline.archive import LoggedRound
from schemas import LearnerConfig


class WarmStartError(ValueError):
    pass


def warm_config(config: LearnerConfig, rounds: Sequence[LoggedRound]
                ) -> tuple[LearnerConfig, int]:
    """``config`` with ``initial_oracle`` trained on ``rounds`` (see the module docstring),
    and the number of rounds it was trained on."""
    if config.family != "graph_cb":
        raise WarmStartError(f"warm start trains graph_cb learners, not {config.family}")
    params = {k: v for k, v in config.params.items() if k != "initial_oracle"}
    try:
        learner = make_learner(config.family, config.algorithm, params)
    except LearnerError as exc:
        raise WarmStartError(f"the config's learner cannot be built: {exc}") from None
    graph = learner.graph
    trained = 0
    for round_ in rounds:
        if round_.reward is None or round_.features is None:
            continue
        losses = {str(round_.action): -round_.reward}
        if graph is not None:
            losses |= {str(a): -reward for a, reward in round_.revealed.items()
                       if a < learner.actions and graph[round_.action, a] > 0}
        try:
            learner.learn({"features": round_.features, "action": round_.action},
                          {"losses": losses})
        except LearnerError as exc:
            raise WarmStartError(f"logged round {round_.event_id}: {exc}") from None
        trained += 1
    warmed = config.model_copy(update={
        "params": {**params, "initial_oracle": learner.to_state()["oracle"]}})
    return warmed, trained
