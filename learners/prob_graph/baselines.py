"""Baselines of the ``prob_graph`` family: UCB-N and Thompson sampling with side observations.

Both use every observation of an arm, whichever arm's play revealed it, but choose the arm to
play by its own reward only: neither values what a play reveals. On graphs where an arm cannot
observe itself they can keep playing an arm whose estimate never improves; the revealing-action
graph (every arm observes itself, one poor arm reveals all others) is where that information
blindness costs them against ``lp_policy``.

>>> import numpy as np
>>> from banditflow.learners.prob_graph.baselines import ThompsonSampling
>>> from banditflow.learners.prob_graph.scenarios import Environment, loopless_clique, simulate
>>> scenario = loopless_clique([0.9, 0.5, 0.2], p=0.8, rewards="bernoulli")
>>> learner = ThompsonSampling.from_params(scenario.learner_params())
>>> regret = simulate(learner, Environment(scenario), horizon=500, seed=1)
>>> bool(regret.sum() < 0.2 * 500)
True
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from banditflow.learners.prob_graph.base import ProbGraphLearner


class UCBN(ProbGraphLearner):
    """UCB-N (Caron et al., 2012): play ``argmax_j thetahat_j + sqrt(2 sigma^2 log t / O_j)``.

    ``sigma^2`` is 1 for unit-variance Gaussian rewards and 1/4 for Bernoulli rewards
    (sub-Gaussian constant of [0, 1]). Warm-up (``bestParent``) until every arm is observed.
    """

    algorithm: ClassVar[str] = "ucb_n"

    def select(self, round_index: int, rng: np.random.Generator) -> tuple[int, str]:
        arm = self.warmup_arm(self.setting.probabilities)
        if arm is not None:
            return arm, "warmup"
        variance = 1.0 if self.setting.rewards == "gaussian" else 0.25
        bonus = np.sqrt(2.0 * variance * math.log(round_index) / self.observations)
        return int(np.argmax(self.means() + bonus)), "ucb"


class ThompsonSampling(ProbGraphLearner):
    """Thompson sampling with side observations (Tossou et al., 2017).

    Gaussian rewards: posterior ``N(S_j / (O_j + 1), 1 / (O_j + 1))`` (prior ``N(0, 1)``);
    Bernoulli rewards: ``Beta(1 + S_j, 1 + O_j - S_j)``. Plays the arm with the largest sample,
    after the warm-up.
    """

    algorithm: ClassVar[str] = "thompson"

    def select(self, round_index: int, rng: np.random.Generator) -> tuple[int, str]:
        arm = self.warmup_arm(self.setting.probabilities)
        if arm is not None:
            return arm, "warmup"
        if self.setting.rewards == "gaussian":
            precision = self.observations + 1.0
            samples = rng.normal(self.reward_sums / precision, 1.0 / np.sqrt(precision))
        else:
            samples = rng.beta(1.0 + self.reward_sums, 1.0 + self.observations - self.reward_sums)
        return int(np.argmax(samples)), "thompson"
