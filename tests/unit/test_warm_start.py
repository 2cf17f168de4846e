"""Warm start: the oracle trained on logged rounds is the one a fresh learner of the warmed
config starts from (restarts from the state log included), and bad inputs are refused."""

from __future__ import annotations

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.registry import make_learner
from banditflow.offline.archive import LoggedRound
from banditflow.offline.warm_start import WarmStartError, warm_config
from banditflow.schemas import LearnerConfig

PARAMS = {"actions": 3, "feature_dim": 2, "graph_kind": "full", "update": "rls"}


def logged(rounds: int) -> list[LoggedRound]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(rounds):
        x = rng.normal(size=2)
        x = np.clip(x, -1.5, 1.5)
        losses = [0.5 + 0.3 * x[0], 0.5 - 0.3 * x[0], 0.5]
        action = int(rng.integers(3))
        out.append(LoggedRound("l", str(i), action=action, actions=3, propensity=1 / 3, p=None,
                               reward=-losses[action], features=x.tolist(),
                               revealed={a: -loss for a, loss in enumerate(losses)}))
    return out


def test_the_warm_oracle_predicts_the_logged_losses_and_survives_a_restart() -> None:
    config = LearnerConfig(learner_id="w", family="graph_cb", algorithm="squarecb_g",
                           params=PARAMS)
    warmed, trained = warm_config(config, logged(1000))
    # Full feedback: every round taught all three actions.
    assert trained == 1000 and warmed.params["initial_oracle"]["updates"] == 3000
    learner = make_learner("graph_cb", "squarecb_g", warmed.params)
    assert learner.oracle.predict([1.0, 0.0]) == pytest.approx([0.8, 0.2, 0.5], abs=0.03)
    # After more learning, a restart restores the learner from its state with the same
    # parameters: the state wins over the initial oracle.
    before = learner.oracle.predict([1.0, 0.0])[0]
    learner.learn({"features": [1.0, 0.0], "action": 0}, {"losses": {"0": 1.0}})
    restored = type(learner).from_state(warmed.params, learner.to_state())
    assert restored.oracle.predict([1.0, 0.0]) == pytest.approx(learner.oracle.predict([1.0, 0.0]))
    assert restored.oracle.predict([1.0, 0.0])[0] > before


def test_bad_warm_starts_are_refused() -> None:
    with pytest.raises(LearnerError, match="initial_oracle"):
        make_learner("graph_cb", "squarecb_g", {**PARAMS, "initial_oracle": {"weights": [1]}})
    other = LearnerConfig(learner_id="w", family="prob_graph", algorithm="ucb_n",
                          params={"arms": 2})
    with pytest.raises(WarmStartError, match="prob_graph learners cannot be warm-started"):
        warm_config(other, logged(3))
    small = LearnerConfig(learner_id="w", family="graph_cb", algorithm="squarecb",
                          params={**PARAMS, "actions": 2, "graph_kind": "bandit"})
    with pytest.raises(WarmStartError, match="revealed action 2 is not in"):
        warm_config(small, [LoggedRound("l", "x", 2, 3, 0.3, None, -1.0, [0.0, 0.0])])
