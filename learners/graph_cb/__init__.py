"""The ``graph_cb`` family: contextual bandits with feedback graphs (SquareCB.G and baselines).

Solver API: :func:`min_dec_distribution` (p minimising the decision estimation coefficient:
the exact closed form on the bandit graph, a certified compiled primal-dual interior-point
method on every other graph, optionally warm-started through a :class:`WarmStart`; the
constant-factor closed forms of the other named graphs only on request) and
:func:`decision_estimation_coefficient` (dec of any p).

>>> import numpy as np
>>> from banditflow.learners.graph_cb import min_dec_distribution, decision_estimation_coefficient
>>> p, dec = min_dec_distribution([0.0, 0.5, 0.9], np.eye(3), gamma=10.0)
>>> p.round(3).tolist(), round(dec, 4)
([0.746, 0.158, 0.097], 0.2)
>>> round(decision_estimation_coefficient(p, [0.0, 0.5, 0.9], np.eye(3), gamma=10.0), 4)
0.2
"""

from banditflow.learners.family import lazy_package

__getattr__ = lazy_package(
    __name__,
    {
        "EpsilonGreedy": "banditflow.learners.graph_cb.algorithms",
        "SquareCB": "banditflow.learners.graph_cb.algorithms",
        "SquareCBG": "banditflow.learners.graph_cb.algorithms",
        "SOLVERS": "banditflow.learners.graph_cb.solver",
        "WarmStart": "banditflow.learners.graph_cb.solver",
        "decision_estimation_coefficient": "banditflow.learners.graph_cb.solver",
        "min_dec_distribution": "banditflow.learners.graph_cb.solver",
    },
    {"squarecb_g": "SquareCBG", "squarecb": "SquareCB", "epsilon_greedy": "EpsilonGreedy"},
)

__all__ = [
    "ALGORITHMS",
    "SOLVERS",
    "EpsilonGreedy",
    "SquareCB",
    "SquareCBG",
    "WarmStart",
    "decision_estimation_coefficient",
    "min_dec_distribution",
]
