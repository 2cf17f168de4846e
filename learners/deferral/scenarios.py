"""The paper's synthetic deferral settings as arrays, and a plain loop that plays a learner on them.

Contexts (paper Sec. 5.1): ``x_bar`` is drawn from the binary vectors of ``{0,1}^d`` with at
most ``max_ones`` ones, with ``p(x_bar) ~ weight^|x_bar|``, and normalised,
``x = x_bar / ||x_bar||``. The zero vector is left out: it cannot be normalised (and under a
linear model it has reward and cost 0 for both arms). Sampling is exact: the number of ones
``k`` is drawn with probability ``~ C(d, k) weight^k``, then ``k`` distinct positions.

Parameters (``kind``):

- ``"uniform"``: ``theta_h ~ U[0,1]^d``, ``theta_m ~ U[0,0.5]^d`` (the human is better).
- ``"complementary"``: ``theta_h`` uniform over binary vectors with ``d/2`` ones and
  ``theta_m = 1 - theta_h`` (same average reward, complementary specialties).

In both, the cost parameter is ``w ~ U[0,1]^d``. The means are ``mu(x . theta)``. With the
identity link the parameters are divided by ``sqrt(max_ones)`` so that every mean lies in
``[0, 1]`` (``x . theta <= sqrt(|x_bar|)`` otherwise; the paper does not say how it keeps
linear rewards in range). Realised rewards and costs are Bernoulli draws of the means
(``noise="bernoulli"``) or the means themselves (``noise="none"``). The default budget is the
paper's ratio ``B / T = 8000 / 50000``.

>>> import numpy as np
>>> from banditflow.learners.deferral import ALGORITHMS
>>> from banditflow.learners.deferral.opt import fractional_knapsack_opt
>>> from banditflow.learners.deferral.scenarios import play, synthetic
>>> scenario = synthetic("uniform", horizon=500, seed=1)
>>> scenario.features.shape, bool(np.allclose(np.linalg.norm(scenario.features, axis=1), 1.0))
((500, 20), True)
>>> opt = fractional_knapsack_opt(scenario.model_mean, scenario.human_mean, scenario.cost_mean,
...                               scenario.budget)
>>> learner = ALGORITHMS["model_only"].from_params(
...     {"dim": 20, "budget": scenario.budget, "horizon": 500})
>>> result = play(learner, scenario, seed=0)
>>> 0.0 < result.expected_reward < opt.value
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from banditflow.learners.deferral.base import DeferralLearner
from banditflow.learners.deferral.estimators import LINKS

KINDS = ("uniform", "complementary")
PAPER_BUDGET_RATE = 8000 / 50000


@dataclass(frozen=True)
class Scenario:
    """One synthetic stream: contexts, expected and realised rewards / costs, parameters."""

    features: np.ndarray  # (T, d), unit norm
    model_mean: np.ndarray  # (T,) E[r_m | x]
    human_mean: np.ndarray  # (T,) E[r_h | x]
    cost_mean: np.ndarray  # (T,) E[c | x]
    model_reward: np.ndarray  # (T,) realised
    human_reward: np.ndarray  # (T,) realised
    human_cost: np.ndarray  # (T,) realised
    theta_model: np.ndarray  # (d,)
    theta_human: np.ndarray  # (d,)
    w_cost: np.ndarray  # (d,)
    budget: float
    link: str


@dataclass(frozen=True)
class PlayResult:
    """What a learner did on a scenario: deferrals and its expected / realised totals."""

    deferred: np.ndarray  # (T,) bool
    expected_reward: float  # sum of the chosen arm's mean reward
    realised_reward: float  # sum of the chosen arm's realised reward
    spent: float  # realised human cost


def sample_contexts(
    rng: np.random.Generator, horizon: int, dim: int = 20, max_ones: int = 8, weight: float = 0.3
) -> np.ndarray:
    """``horizon`` normalised binary contexts, ``p(x_bar) ~ weight^|x_bar|``, 1..max_ones ones."""
    ones = np.arange(1, max_ones + 1)
    mass = np.array([math.comb(dim, int(k)) * weight**k for k in ones])
    counts = rng.choice(ones, size=horizon, p=mass / mass.sum())
    ranks = np.argsort(rng.random((horizon, dim)), axis=1)  # a random permutation per row
    binary = (ranks < counts[:, None]).astype(float)
    return binary / np.sqrt(counts)[:, None]


def synthetic(
    kind: str = "uniform",
    horizon: int = 50_000,
    budget: float | None = None,
    seed: int = 0,
    dim: int = 20,
    max_ones: int = 8,
    weight: float = 0.3,
    link: str = "identity",
    noise: str = "bernoulli",
) -> Scenario:
    """A synthetic scenario of the paper (``kind`` ``uniform`` or ``complementary``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if link not in LINKS:
        raise ValueError(f"link must be one of {LINKS}, got {link!r}")
    if noise not in ("bernoulli", "none"):
        raise ValueError(f"noise must be 'bernoulli' or 'none', got {noise!r}")
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        theta_human = rng.uniform(0.0, 1.0, dim)
        theta_model = rng.uniform(0.0, 0.5, dim)
    else:
        theta_human = np.zeros(dim)
        theta_human[rng.choice(dim, size=dim // 2, replace=False)] = 1.0
        theta_model = 1.0 - theta_human
    w_cost = rng.uniform(0.0, 1.0, dim)
    if link == "identity":
        scale = 1.0 / math.sqrt(max_ones)
        theta_human, theta_model, w_cost = theta_human * scale, theta_model * scale, w_cost * scale
    features = sample_contexts(rng, horizon, dim, max_ones, weight)

    def mean(theta: np.ndarray) -> np.ndarray:
        z = features @ theta
        return z if link == "identity" else 1.0 / (1.0 + np.exp(-z))

    model_mean, human_mean, cost_mean = mean(theta_model), mean(theta_human), mean(w_cost)
    if noise == "bernoulli":
        means = (model_mean, human_mean, cost_mean)
        realised = [(rng.random(horizon) < m).astype(float) for m in means]
    else:
        realised = [model_mean.copy(), human_mean.copy(), cost_mean.copy()]
    return Scenario(
        features=features,
        model_mean=model_mean,
        human_mean=human_mean,
        cost_mean=cost_mean,
        model_reward=realised[0],
        human_reward=realised[1],
        human_cost=realised[2],
        theta_model=theta_model,
        theta_human=theta_human,
        w_cost=w_cost,
        budget=PAPER_BUDGET_RATE * horizon if budget is None else budget,
        link=link,
    )


def play(learner: DeferralLearner, scenario: Scenario, seed: int = 0) -> PlayResult:
    """Run ``learner`` over the scenario with immediate feedback (per-event rng from seed, t).

    In ``full`` mode the model's reward is sent for every event and the human's for every
    deferral; in ``bandit`` mode only the chosen arm's.
    """
    horizon = scenario.features.shape[0]
    deferred = np.zeros(horizon, dtype=bool)
    full = learner.params.feedback == "full"
    for t in range(horizon):
        decided = learner.decide({"features": scenario.features[t].tolist()},
                                 np.random.default_rng([seed, t]))
        deferred[t] = decided.output["defer"]
        if full or not deferred[t]:
            learner.learn(decided.pending,
                          {"part": "model", "model_reward": float(scenario.model_reward[t])})
        if deferred[t]:
            learner.learn(decided.pending, {
                "part": "human",
                "human_reward": float(scenario.human_reward[t]),
                "human_cost": float(scenario.human_cost[t]),
            })
    expected = np.where(deferred, scenario.human_mean, scenario.model_mean)
    realised = np.where(deferred, scenario.human_reward, scenario.model_reward)
    return PlayResult(
        deferred=deferred,
        expected_reward=float(expected.sum()),
        realised_reward=float(realised.sum()),
        spent=float(scenario.human_cost[deferred].sum()),
    )
