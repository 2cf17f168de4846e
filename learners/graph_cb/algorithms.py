"""The graph_cb algorithms: SquareCB.G and its baselines SquareCB and epsilon-greedy.

>>> import numpy as np
>>> from banditflow.learners.graph_cb.algorithms import SquareCBG
>>> learner = SquareCBG.from_params({"graph_kind": "cops_and_robbers", "actions": 3,
...                                  "feature_dim": 2, "gamma_schedule": "constant",
...                                  "gamma": 10.0})
>>> decided = learner.decide({"features": [0.5, -1.0]}, np.random.default_rng(0))
>>> sorted(decided.output), round(sum(decided.output["p"]), 12)
(['action', 'dec', 'gamma', 'p'], 1.0)
>>> revealed = {str(j): 0.2 for j in range(3) if j != decided.output["action"]}
>>> learner.learn(decided.pending, {"losses": revealed}).metrics
{'revealed': 2.0}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from banditflow.learners.base import JSON, LearnerError, require
from banditflow.learners.graph_cb import kernels
from banditflow.learners.graph_cb.base import GraphCBLearner
from banditflow.learners.graph_cb.solver import (
    SOLVERS,
    WarmStart,
    decision_estimation_coefficient,
    min_dec_distribution,
)


class SquareCBG(GraphCBLearner):
    """SquareCB.G: play ``argmin_p dec_gamma(p; fhat, G)`` (parameter ``solver``, default
    ``auto``: the optimum, from the exact closed form on the bandit graph and the certified
    numeric solver on every other graph; naming a closed form such as ``inventory`` trades a
    constant factor of dec for O(K) time, which only pays at K in the hundreds).
    The only algorithm that may use the ``doubling`` gamma schedule (it needs min dec).

    The numeric solver is warm-started from the previous round's solution (parameter
    ``warm_start``, default true); that state is part of the checkpoint, so a restored learner
    decides exactly as the original would have."""

    algorithm: ClassVar[str] = "squarecb_g"
    EXTRA_PARAMS: ClassVar[set[str]] = {"solver", "warm_start"}

    def check_params(self) -> None:
        if self.params.get("solver", "auto") not in SOLVERS:
            raise LearnerError(f"parameter 'solver' must be one of {', '.join(SOLVERS)}")
        warm = self.params.get("warm_start", True)
        if not isinstance(warm, bool):
            raise LearnerError(f"parameter 'warm_start' must be true or false, got {warm!r}")
        self.warm_start = WarmStart() if warm else None

    def distribution(
        self, fhat: np.ndarray, graph: np.ndarray, gamma: float
    ) -> tuple[np.ndarray, float]:
        return min_dec_distribution(fhat, graph, gamma, solver=self.params.get("solver", "auto"),
                                    warm_start=self.warm_start)

    def to_state(self) -> JSON:
        state = super().to_state()
        if self.warm_start is not None:
            state["warm_start"] = self.warm_start.to_state()
        return state

    def load_state(self, state: Mapping[str, Any]) -> None:
        super().load_state(state)
        if self.warm_start is not None:  # checkpoints from before warm starts have none
            self.warm_start.load_state(state.get("warm_start") or {})


class SquareCB(GraphCBLearner):
    """SquareCB (inverse-gap weighting): ``p_a = 1 / (K + gamma (f_a - f_b))`` for a != b =
    argmin f, the rest on b, K the event's number of actions. Ignores the graph when choosing
    p (its sqrt_alpha schedule uses alpha = K, the bandit graph's), but learns from every
    revealed loss."""

    algorithm: ClassVar[str] = "squarecb"

    def check_params(self) -> None:
        _reject_doubling(self)

    def exploration_alpha(self, graph: np.ndarray, per_event: bool) -> int:
        return int(graph.shape[0])

    def distribution(
        self, fhat: np.ndarray, graph: np.ndarray, gamma: float
    ) -> tuple[np.ndarray, float]:
        p = kernels.inverse_gap_weighting(np.ascontiguousarray(fhat, dtype=float), gamma)
        return p, decision_estimation_coefficient(p, fhat, graph, gamma)


class EpsilonGreedy(GraphCBLearner):
    """epsilon-greedy: ``epsilon`` (default 0.05) uniform, the rest on argmin fhat. gamma is
    only used to report dec(p)."""

    algorithm: ClassVar[str] = "epsilon_greedy"
    EXTRA_PARAMS: ClassVar[set[str]] = {"epsilon"}

    def check_params(self) -> None:
        _reject_doubling(self)
        self.epsilon = require(self.params, "epsilon", float, 0.05)
        if not 0.0 <= self.epsilon <= 1.0:
            raise LearnerError(f"parameter 'epsilon' must be in [0, 1], got {self.epsilon}")

    def distribution(
        self, fhat: np.ndarray, graph: np.ndarray, gamma: float
    ) -> tuple[np.ndarray, float]:
        p = np.full(len(fhat), self.epsilon / len(fhat))
        p[int(np.argmin(fhat))] += 1.0 - self.epsilon
        return p, decision_estimation_coefficient(p, fhat, graph, gamma)


def _reject_doubling(learner: GraphCBLearner) -> None:
    """The doubling schedule accumulates min dec, which only SquareCB.G computes."""
    if learner.schedule.kind == "doubling":
        raise LearnerError(
            f"gamma_schedule 'doubling' needs the minimal dec; use it with squarecb_g, "
            f"not {learner.algorithm}"
        )
