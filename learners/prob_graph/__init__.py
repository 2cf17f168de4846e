"""The ``prob_graph`` family: stochastic bandits with probabilistic feedback graphs.

Playing arm ``i`` reveals the reward of arm ``j`` when the edge ``(i, j)`` is live (probability
``p_ij``, one-step case) or when a live path ``i -> j`` exists (cascade case). Algorithms:
``lp_policy`` (the asymptotically optimal LP-based policy of Li, Chen, Wen & Leung, 2019) and
the baselines ``ucb_n`` and ``thompson``. :func:`lower_bound_constant` computes the regret
lower-bound constant ``C*(theta)``, :func:`reachability` estimates the cascade case's ``r_ij``.

>>> from banditflow.learners.prob_graph import ALGORITHMS, lower_bound_constant
>>> sorted(ALGORITHMS)
['lp_policy', 'thompson', 'ucb_n']
>>> lower_bound_constant([[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0])[0]  # a two-armed bandit: 2/Delta
2.0
"""

from banditflow.learners.family import lazy_package

__getattr__ = lazy_package(
    __name__,
    {
        "UCBN": "banditflow.learners.prob_graph.baselines",
        "ThompsonSampling": "banditflow.learners.prob_graph.baselines",
        "lower_bound_constant": "banditflow.learners.prob_graph.bound",
        "reachability": "banditflow.learners.prob_graph.graph",
        "LPPolicy": "banditflow.learners.prob_graph.lp_policy",
    },
    {"lp_policy": "LPPolicy", "ucb_n": "UCBN", "thompson": "ThompsonSampling"},
)

__all__ = [
    "ALGORITHMS",
    "UCBN",
    "LPPolicy",
    "ThompsonSampling",
    "lower_bound_constant",
    "reachability",
]
