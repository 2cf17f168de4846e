"""Greedy: the plug-in threshold of the paper's baseline section, with no confidence width.

Update rule (paper, eq. 3 and "Baselines"): after ``n`` incorporated feedbacks,

    tau_{n+1} = sup{tau : G_n(tau) <= 1 - c},
    G_n(tau) = (1/n) sum_j 1[max(tau_n, s_j) <= tau],

where a miss contributes the threshold it was decided with as its ``s_j`` (the same
substitution as SPS). This is SPS with ``eps_n = 0`` and therefore no burn-in: the first
covered feedback already moves ``tau`` to that score.

Monotone, like SPS. The paper's ``G_n`` is the empirical CDF of ``max(tau_n, s_j)``, which is
0 below ``tau_n``, so ``sup{tau : G_n(tau) <= 1 - c} >= tau_n``: read literally, the
paper's greedy never lowers ``tau`` (its "increasingly truncated" ``G_t`` in the regret
discussion is this effect). Without a confidence width the plug-in quantile overshoots
``tau*`` early (after one feedback it is that very score) and a monotone threshold never
comes back, so greedy undercovers for the rest of the stream, the failure the paper reports:
on U(0, 1) scores with c = 0.9 its coverage rate over 10^4 rounds is 0.37 to 0.73 on
seeds 0-2. (A non-monotone reading, recomputing the quantile of all substituted values
without the truncation at ``tau_n``, would need every value kept and is not what eq. 3
says.) Because ``tau`` only rises, every miss is at or below the current ``tau`` and is
simply counted in ``n_le``, even when its feedback is late.

In order statistics: with ``k = floor(n (1 - c))`` the new threshold is the ``k``-th
(0-indexed) smallest of the substituted values, raised to the old ``tau`` if smaller.

State and memory: ``n``, ``n_le`` (values at or below ``tau``) and the sorted scores above
``tau`` (``above``). The rank ``k`` never exceeds ``(1 - c) T`` before the horizon ``T``,
so at most ``ceil((1 - c) T) + 1`` values are kept (``memory_bound``); larger ones are
counted in ``dropped`` with their minimum in ``drop_floor``. Past the horizon a rank that
falls among the dropped values rounds ``tau`` down to ``drop_floor``.

Parameters: ``target_coverage`` c (default 0.9; former name
``alpha``); ``horizon`` T (required; it only bounds
the memory).

>>> import numpy as np
>>> from banditflow.learners.conformal.greedy import Greedy
>>> rng = np.random.default_rng(0)
>>> greedy = Greedy.from_params({"target_coverage": 0.9, "horizon": 2000})
>>> thresholds = []
>>> for t in range(2000):  # the true label "a" scores U(0, 1), so tau* = 0.1
...     thresholds.append(greedy.threshold)
...     decided = greedy.decide({"labels": ["a", "b"], "scores": [rng.uniform(), -1.0]}, rng)
...     covered = "a" in decided.output["labels"]
...     _ = greedy.learn(decided.pending, {"label": "a"} if covered else {"missed": True})
>>> thresholds == sorted(thresholds)  # monotone
True
>>> greedy.threshold > 0.1  # overshot tau* and stays there
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from banditflow.learners.conformal.base import ConformalParams
from banditflow.learners.conformal.sps import SPS, SPSParams
from banditflow.learners.declared import param


@dataclass(frozen=True, kw_only=True)
class GreedyParams(ConformalParams):
    horizon: int = param(ge=1, what="T; it bounds the memory")


class Greedy(SPS):
    """The plug-in (no confidence width) monotone threshold: SPS with ``eps_n = 0``."""

    algorithm: ClassVar[str] = "greedy"
    Params = GreedyParams

    def __init__(self, params: GreedyParams) -> None:  # type: ignore[override]
        super().__init__(SPSParams(target_coverage=params.target_coverage, schedule="fixed",
                                   horizon=params.horizon, delta=0.0))

    def epsilon(self, n: int) -> float:
        return 0.0  # no confidence width: the empirical quantile itself
