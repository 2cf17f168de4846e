"""DLR: online conformal prediction with decaying step sizes (Angelopoulos et al. 2024).

DLR is ACI with the identity as quantile function: gradient steps on the threshold itself,
driven only by the miss indicator, so semi-bandit feedback costs it nothing.

Sign convention. Angelopoulos et al. use nonconformity scores (lower = more conforming), sets
``{y : s(y) <= q}`` and ``q_{t+1} = q_t + eta_t (err_t - a)``. Here higher score = more
likely and sets are ``{y : score(y) >= tau}``, so ``tau`` plays ``-q``:

    tau_{t+1} = tau_t - eta_t (err_t - (1 - c)),   eta_t = lr * t^(-0.6),

with ``err_t = 1[miss]`` and ``t`` the number of incorporated feedbacks (1 for the first).
A miss lowers ``tau`` by ``eta_t c`` (a bigger set); a covered round raises it by
``eta_t (1 - c)``. The exponent 0.6 is the paper's ``t^(-1/2 - 0.1)``. Over a stream
the miss rate is driven to ``1 - c``; how fast ``tau`` reaches ``tau*`` depends on
``lr`` relative to the score scale, which is the sensitivity the paper reports (logits).
On U(0, 1) scores (c = 0.9, 10^4 rounds, start 0) ``lr = 1`` keeps the coverage rate at
c but oscillates around ``tau*`` (above it in about 40% of rounds), while ``lr = 0.03``
climbs from below and never crosses it.

Start: the gradient rule needs a finite start, ``initial_threshold`` (default 0.0); pick a
value at or below the expected ``tau*`` ("start from a conservative tau") in the score's
units, e.g. 0 for probabilities or cosine similarities. The first set is then large and the
threshold climbs from below.

Parameters: ``target_coverage`` c (default 0.9; former name
``alpha``); ``lr`` (default 1.0);
``initial_threshold`` (default 0.0). State: ``tau`` and ``t``.

>>> import numpy as np
>>> from banditflow.learners.conformal.dlr import DLR
>>> rng = np.random.default_rng(0)
>>> dlr = DLR.from_params({"target_coverage": 0.9, "lr": 0.1})
>>> covered_rounds = 0
>>> for t in range(2000):  # the true label "a" scores U(0, 1), so tau* = 0.1
...     decided = dlr.decide({"labels": ["a", "b"], "scores": [rng.uniform(), -1.0]}, rng)
...     covered = "a" in decided.output["labels"]
...     covered_rounds += covered
...     _ = dlr.learn(decided.pending, {"label": "a"} if covered else {"missed": True})
>>> covered_rounds / 2000 >= 0.9
True
>>> abs(dlr.threshold - 0.1) < 0.05
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from banditflow.learners.conformal.base import ConformalLearner, ConformalParams
from banditflow.learners.declared import State, param

STEP_DECAY = 0.6  # eta_t = lr * t^(-STEP_DECAY): the paper's t^(-1/2 - eps) with eps = 0.1


@dataclass(frozen=True, kw_only=True)
class DLRParams(ConformalParams):
    lr: float = param(1.0, gt=0, what="learning rate")
    initial_threshold: float = param(0.0)


@dataclass(kw_only=True)
class DLRState(State):
    tau: float
    t: int


class DLR(ConformalLearner):
    """Decaying-learning-rate gradient steps on the threshold; see the module docstring."""

    algorithm: ClassVar[str] = "dlr"
    Params = DLRParams
    State = DLRState

    def __init__(self, params: DLRParams) -> None:
        super().__init__(params)
        self.lr = params.lr
        self.tau = params.initial_threshold
        self.t = 0  # incorporated feedbacks

    @property
    def threshold(self) -> float:
        return self.tau

    def observe(self, score: float | None) -> None:
        """One gradient step on the miss indicator (the score value itself is not used)."""
        self.t += 1
        err = 1.0 if score is None else 0.0
        step = self.lr * self.t ** (-STEP_DECAY)
        self.tau -= step * (err - (1.0 - self.target_coverage))
