"""Scenarios and a simulated environment for the ``prob_graph`` family.

A scenario is a dict ``{"arms": K, "means": [...], "edges": [[i, j, p], ...], "case":
"one_step" | "cascade", "rewards": "gaussian" | "bernoulli"}``. The :class:`Environment`
answers a played arm by sampling the live edges and the rewards of the revealed arms (the
learner never samples edges). Generators build the graphs of the spec: Erdos-Renyi with a
uniform ``p``, the loopless clique, the revealing-action graph and random ``p_ij``.
:func:`simulate` runs a learner against an environment, optionally with delayed feedback.

>>> import numpy as np
>>> from banditflow.learners.prob_graph.scenarios import Environment, parse_scenario
>>> scenario = parse_scenario(
...     {"arms": 2, "means": [1.0, 0.0], "edges": [[0, 1, 0.5], [1, 0, 1.0]]}
... )
>>> Environment(scenario).feedback(1, np.random.default_rng(0))["rewards"].keys()
dict_keys(['0'])
>>> round(scenario.lower_bound()[0], 6)
2.0
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from banditflow.learners.base import JSON, LearnerError
from banditflow.learners.prob_graph.base import ProbGraphLearner
from banditflow.learners.prob_graph.bound import lower_bound_constant
from banditflow.learners.prob_graph.graph import Setting, parse_setting, reachability

SCENARIO_KEYS = {"arms", "means", "edges", "case", "rewards"}


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: the true means plus the known :class:`Setting`."""

    means: np.ndarray
    edges: list[list[Any]]
    setting: Setting

    @property
    def arms(self) -> int:
        return self.setting.arms

    def learner_params(self) -> JSON:
        """The shared learner parameters (graph, case, reward family) of this scenario."""
        return {
            "arms": self.arms,
            "edges": [list(edge) for edge in self.edges],
            "case": self.setting.case,
            "rewards": self.setting.rewards,
        }

    def to_dict(self) -> JSON:
        return {**self.learner_params(), "means": self.means.tolist()}

    def lower_bound(
        self, rng: np.random.Generator | None = None, samples: int = 20_000
    ) -> tuple[float, np.ndarray]:
        """``(C*(theta), c)``; the cascade case estimates ``r`` from ``samples`` realisations."""
        matrix = self.setting.probabilities
        if self.setting.case == "cascade":
            matrix = reachability(matrix, samples, rng or np.random.default_rng(0))
        return lower_bound_constant(matrix, self.means, rewards=self.setting.rewards)


def parse_scenario(spec: Mapping[str, Any]) -> Scenario:
    """Validate a scenario dict; :class:`LearnerError` names the bad field."""
    if not isinstance(spec, Mapping):
        raise LearnerError(f"a scenario must be an object, got {spec!r}")
    unknown = sorted(set(spec) - SCENARIO_KEYS)
    if unknown:
        raise LearnerError(f"unknown scenario field(s) {unknown}; known: {sorted(SCENARIO_KEYS)}")
    missing = sorted({"arms", "means", "edges"} - set(spec))
    if missing:
        raise LearnerError(f"scenario field(s) {missing} are required")
    setting = parse_setting(
        spec["arms"], spec["edges"], spec.get("case", "one_step"), spec.get("rewards", "gaussian")
    )
    raw_means = spec["means"]
    if isinstance(raw_means, str | bytes) or not isinstance(raw_means, Sequence):
        raise LearnerError(f"scenario 'means' must be a list of numbers, got {raw_means!r}")
    try:
        means = np.array([float(mean) for mean in raw_means])
    except (TypeError, ValueError) as exc:
        raise LearnerError(f"scenario 'means' must be numbers, got {raw_means!r}") from exc
    if means.shape != (setting.arms,):
        raise LearnerError(f"scenario has {setting.arms} arms but {len(means)} means")
    if not np.all(np.isfinite(means)):
        raise LearnerError("scenario 'means' must be finite")
    if setting.rewards == "bernoulli" and not np.all((means >= 0.0) & (means <= 1.0)):
        raise LearnerError("Bernoulli scenario 'means' must lie in [0, 1]")
    edges = [[int(i), int(j), float(p)] for i, j, p in spec["edges"]]
    return Scenario(means, edges, setting)


class Environment:
    """Answers a played arm with the rewards of the arms its live edges reveal."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.gaps = scenario.means.max() - scenario.means

    def revealed_arms(self, arm: int, rng: np.random.Generator) -> np.ndarray:
        """The arms revealed by playing ``arm`` in one sampled realisation of the graph."""
        matrix = self.scenario.setting.probabilities
        if self.scenario.setting.case == "one_step":
            return np.flatnonzero(rng.random(self.scenario.arms) < matrix[arm])
        live = rng.random(matrix.shape) < matrix
        reached = np.zeros(self.scenario.arms, dtype=bool)
        frontier = live[arm].copy()
        while frontier.any():
            reached |= frontier
            frontier = live[frontier].any(axis=0) & ~reached
        return np.flatnonzero(reached)

    def reveal(self, arm: int, rng: np.random.Generator) -> dict[int, float]:
        """``{arm: reward}`` of the revealed arms (unit-variance Gaussian or Bernoulli)."""
        arms = self.revealed_arms(arm, rng)
        means = self.scenario.means[arms]
        if self.scenario.setting.rewards == "gaussian":
            rewards = rng.normal(means, 1.0)
        else:
            rewards = (rng.random(arms.size) < means).astype(float)
        return dict(zip(arms.tolist(), rewards.tolist(), strict=True))

    def feedback(self, arm: int, rng: np.random.Generator) -> JSON:
        """A complete feedback event for a decision that played ``arm``."""
        rewards = self.reveal(arm, rng)
        return {"rewards": {str(j): r for j, r in rewards.items()}, "complete": True}


def simulate(
    learner: ProbGraphLearner, environment: Environment, horizon: int, seed: int, delay: int = 0
) -> np.ndarray:
    """Per-round pseudo-regret ``Delta_{I_t}`` of ``learner`` over ``horizon`` rounds.

    The learner and the environment draw from independent streams of ``seed``. With ``delay``
    the feedback of a decision arrives ``delay`` decisions later (``delay`` decisions in flight).
    """
    learner_rng, environment_rng = (
        np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(2)
    )
    regret = np.empty(horizon)
    waiting: deque[tuple[Mapping[str, Any], JSON]] = deque()
    for t in range(horizon):
        decided = learner.decide({}, learner_rng)
        arm = decided.output["arm"]
        regret[t] = environment.gaps[arm]
        waiting.append((decided.pending, environment.feedback(arm, environment_rng)))
        while len(waiting) > delay:
            learner.learn(*waiting.popleft())
    while waiting:
        learner.learn(*waiting.popleft())
    return regret


def _scenario(means: Sequence[float], edges: list[list[Any]], case: str, rewards: str) -> Scenario:
    return parse_scenario(
        {"arms": len(means), "means": list(means), "edges": edges, "case": case, "rewards": rewards}
    )


def erdos_renyi(
    means: Sequence[float],
    edge_prob: float,
    p: float,
    rng: np.random.Generator,
    *,
    case: str = "one_step",
    rewards: str = "gaussian",
) -> Scenario:
    """Each ordered pair ``i != j`` is an edge with probability ``edge_prob``, live with ``p``.

    An arm left without an in-edge gets one from a uniformly drawn other arm.
    """
    arms = len(means)
    present = rng.random((arms, arms)) < edge_prob
    np.fill_diagonal(present, False)
    for j in np.flatnonzero(~present.any(axis=0)):
        others = [i for i in range(arms) if i != j]
        present[others[int(rng.integers(len(others)))], j] = True
    edges = [[int(i), int(j), p] for i, j in zip(*np.nonzero(present), strict=True)]
    return _scenario(means, edges, case, rewards)


def loopless_clique(
    means: Sequence[float], p: float, *, case: str = "one_step", rewards: str = "gaussian"
) -> Scenario:
    """Every ordered pair ``i != j`` is an edge live with probability ``p``; no self-loops."""
    arms = len(means)
    edges = [[i, j, p] for i in range(arms) for j in range(arms) if i != j]
    return _scenario(means, edges, case, rewards)


def revealing_action(
    means: Sequence[float],
    revealer: int,
    *,
    reveal_p: float = 0.9,
    self_p: float = 1.0,
    case: str = "one_step",
    rewards: str = "gaussian",
) -> Scenario:
    """Every arm observes itself with ``self_p``; ``revealer`` (meant to have a low mean)
    also reveals every other arm with ``reveal_p``."""
    arms = len(means)
    if not 0 <= revealer < arms:
        raise LearnerError(f"revealer {revealer} is outside 0..{arms - 1}")
    edges: list[list[Any]] = [[i, i, self_p] for i in range(arms)]
    edges += [[revealer, j, reveal_p] for j in range(arms) if j != revealer]
    return _scenario(means, edges, case, rewards)


def random_probabilities(
    means: Sequence[float],
    rng: np.random.Generator,
    *,
    low: float = 0.1,
    high: float = 1.0,
    case: str = "one_step",
    rewards: str = "gaussian",
) -> Scenario:
    """The loopless clique with independent ``p_ij ~ Uniform(low, high)``."""
    if not 0.0 < low <= high <= 1.0:
        raise LearnerError(f"need 0 < low <= high <= 1, got low={low}, high={high}")
    arms = len(means)
    edges = [
        [i, j, float(rng.uniform(low, high))] for i in range(arms) for j in range(arms) if i != j
    ]
    return _scenario(means, edges, case, rewards)
