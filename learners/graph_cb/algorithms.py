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

from dataclasses import dataclass
from typing import ClassVar, Self

import numpy as np

from banditflow.learners.base import LearnerError
from banditflow.learners.declared import State, param
from banditflow.learners.graph_cb import kernels
from banditflow.learners.graph_cb.base import GraphCBLearner, GraphCBState
from banditflow.learners.graph_cb.params import GraphCBParams
from banditflow.learners.graph_cb.solver import (
    SOLVERS,
    WarmStart,
    decision_estimation_coefficient,
    min_dec_distribution,
)


@dataclass(frozen=True, kw_only=True)
class SquareCBGParams(GraphCBParams):
    solver: str = param("auto", choices=tuple(SOLVERS))
    warm_start: bool = True


@dataclass(kw_only=True)
class WarmStartedState(GraphCBState):
    warm_start: WarmStart | None = None  # (absent from checkpoints before warm starts)


@dataclass(frozen=True, kw_only=True)
class BaselineParams(GraphCBParams):
    """The baselines' parameters: those of every graph_cb learner, without the doubling
    schedule (it accumulates min dec, which only SquareCB.G computes)."""

    def validated(self) -> Self:
        if self.gamma_schedule == "doubling":
            raise LearnerError("gamma_schedule 'doubling' needs the minimal dec; use it with "
                               "squarecb_g")
        return super().validated()


@dataclass(frozen=True, kw_only=True)
class EpsilonGreedyParams(BaselineParams):
    epsilon: float = param(0.05, ge=0, le=1)


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
    Params = SquareCBGParams

    def __init__(self, params: SquareCBGParams) -> None:
        super().__init__(params)
        self.solver = params.solver
        self.warm_start = WarmStart() if params.warm_start else None

    def distribution(
        self, fhat: np.ndarray, graph: np.ndarray, gamma: float
    ) -> tuple[np.ndarray, float]:
        return min_dec_distribution(fhat, graph, gamma, solver=self.solver,
                                    warm_start=self.warm_start)

    def state_record(self) -> type[State]:
        return GraphCBState if self.warm_start is None else WarmStartedState

    def restored(self) -> None:
        if self.params.warm_start and self.warm_start is None:  # a checkpoint from before
            # warm starts: start cold
            self.warm_start = WarmStart()


class SquareCB(GraphCBLearner):
    """SquareCB (inverse-gap weighting): ``p_a = 1 / (K + gamma (f_a - f_b))`` for a != b =
    argmin f, the rest on b, K the event's number of actions. Ignores the graph when choosing
    p (its sqrt_alpha schedule uses alpha = K, the bandit graph's), but learns from every
    revealed loss."""

    algorithm: ClassVar[str] = "squarecb"
    Params = BaselineParams

    def exploration_alpha(self, graph: np.ndarray, per_event: bool) -> int:
        return int(graph.shape[0])

    def distribution(
        self, fhat: np.ndarray, graph: np.ndarray, gamma: float
    ) -> tuple[np.ndarray, float]:
        p = kernels.inverse_gap_weighting(np.ascontiguousarray(fhat, dtype=float), gamma)
        return p, decision_estimation_coefficient(p, fhat, graph, gamma)

    def decision(self, fhat: np.ndarray, graph: np.ndarray, gamma: float,
                 rng: np.random.Generator) -> tuple[np.ndarray, float, int]:
        return kernels.inverse_gap_decision(np.ascontiguousarray(fhat, dtype=float),
                                            np.ascontiguousarray(graph, dtype=float),
                                            float(gamma), rng.random())


class EpsilonGreedy(GraphCBLearner):
    """epsilon-greedy: ``epsilon`` (default 0.05) uniform, the rest on argmin fhat. gamma is
    only used to report dec(p)."""

    algorithm: ClassVar[str] = "epsilon_greedy"
    Params = EpsilonGreedyParams

    def __init__(self, params: EpsilonGreedyParams) -> None:
        super().__init__(params)
        self.epsilon = params.epsilon

    def distribution(
        self, fhat: np.ndarray, graph: np.ndarray, gamma: float
    ) -> tuple[np.ndarray, float]:
        p = np.full(len(fhat), self.epsilon / len(fhat))
        p[int(np.argmin(fhat))] += 1.0 - self.epsilon
        return p, decision_estimation_coefficient(p, fhat, graph, gamma)
