"""The ``deferral`` family: defer a decision to a human under a hard budget, or keep the model's.

Algorithms: ``ucb`` (the paper's Algorithm 1, linCBwK with GLM links, budget-safe) and the
paper's baselines ``model_only``, ``arbitrary_human`` and ``best_reject``; ``neural_linear``
(UCB on the embeddings of three small retrained networks, needs torch: ``neural`` extra).
Offline tools: :mod:`banditflow.learners.deferral.opt` (OPT, BestReject's threshold in hindsight)
and
:mod:`banditflow.learners.deferral.scenarios` (the paper's synthetic settings).

>>> import numpy as np
>>> from banditflow.learners.registry import make_learner
>>> learner = make_learner("deferral", "ucb", {"dim": 2, "budget": 10.0, "horizon": 100})
>>> decided = learner.decide({"features": [0.6, 0.8]}, np.random.default_rng(0))
>>> sorted(decided.output)
['defer', 'dual_price', 'lcb_cost', 'reserved', 'ucb_human', 'ucb_model', 'warmup']
"""

from banditflow.learners.base import Learner
from banditflow.learners.deferral.baselines import ArbitraryHuman, BestReject, ModelOnly
from banditflow.learners.deferral.neural_linear import NeuralLinear
from banditflow.learners.deferral.ucb import UCB

ALGORITHMS: dict[str, type[Learner]] = {
    "ucb": UCB,
    "model_only": ModelOnly,
    "arbitrary_human": ArbitraryHuman,
    "best_reject": BestReject,
    "neural_linear": NeuralLinear,
}
