"""Shared event handling of the ``prob_graph`` family: one of K arms, graph-revealed rewards.

Every algorithm only chooses the next arm (``select``); deciding, the warm-up, applying
(possibly partial, possibly repeated) feedback and the timeout rule live here once.

Event contract:

- context: no fields (one learner per segment key); a context carrying any is refused.
- decision ``output``: ``{"arm": i, "branch": name}``; ``pending``: ``{"decision": n, "arm": i}``
  where ``n`` numbers the learner's decisions.
- feedback: ``{"rewards": {"<arm>": reward, ...}, "complete": bool}`` with the rewards of the
  arms whose edges fired (the played arm only if it revealed itself). Partial feedback may
  arrive in several events; each arm's reward is applied once per decision. ``complete``
  defaults to True and closes the decision; complete feedback that lacks an arm the played
  arm always reveals (edge probability 1) is contradicting.
- timeout (``expire``): the decision closes with whatever was observed; nothing more is
  learned from it.

Statistics: ``N_i`` closed plays, the in-flight plays (decided, not yet closed), ``O_j``
observations and ``S_j`` their reward sums. The open decisions, with the arms already observed
for each, are kept in the state so that duplicated feedback is ignored; their number is bounded
by the feedback timeout.

>>> import numpy as np
>>> from banditflow.learners.prob_graph.baselines import UCBN
>>> learner = UCBN.from_params({"arms": 2, "edges": [[0, 1, 1.0], [1, 0, 1.0]]})
>>> decided = learner.decide({}, np.random.default_rng(0))
>>> decided.output
{'arm': 1, 'branch': 'warmup'}
>>> learner.learn(decided.pending, {"rewards": {"0": 0.3}, "complete": True}).done
True
>>> learner.summary()["arm_pulls"]
[0.0, 1.0]
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np

from banditflow.learners.base import (
    ContradictingFeedback,
    Decided,
    Learned,
    Learner,
    LearnerError,
    Stats,
    add_stat,
)
from banditflow.learners.declared import Array, Declared, Params, State, param
from banditflow.learners.prob_graph.graph import parse_setting


def parse_rewards(feedback: Mapping[str, Any], arms: int, bernoulli: bool) -> dict[int, float]:
    """The ``rewards`` mapping of a feedback event as ``{arm: reward}``; errors say why."""
    rewards = feedback.get("rewards", {})
    if not isinstance(rewards, Mapping):
        raise LearnerError(f"feedback 'rewards' must be an object {{arm: reward}}, got {rewards!r}")
    parsed: dict[int, float] = {}
    for key, value in rewards.items():
        try:
            arm = int(key)
        except (TypeError, ValueError) as exc:
            raise LearnerError(f"feedback reward key {key!r} is not an arm index") from exc
        if not 0 <= arm < arms:
            raise ContradictingFeedback(f"feedback reward for arm {arm}, outside 0..{arms - 1}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise LearnerError(f"feedback reward of arm {arm} must be a number, got {value!r}")
        reward = float(value)
        if not math.isfinite(reward):
            raise LearnerError(f"feedback reward of arm {arm} must be finite, got {value!r}")
        if bernoulli and not 0.0 <= reward <= 1.0:
            raise LearnerError(f"Bernoulli reward of arm {arm} must be in [0, 1], got {value!r}")
        parsed[arm] = reward
    return parsed


def decision_key(pending: Mapping[str, Any]) -> str:
    """The key of a pending decision in the learner's open decisions."""
    decision = pending.get("decision")
    if isinstance(decision, bool) or not isinstance(decision, int):
        raise LearnerError(f"pending record needs an integer 'decision', got {decision!r}")
    return str(decision)


@dataclass(frozen=True, kw_only=True)
class ProbGraphParams(Params):
    """The parameters every ``prob_graph`` learner takes (see :class:`ProbGraphLearner`);
    :func:`banditflow.learners.prob_graph.graph.parse_setting` checks the graph."""

    arms: Any  # K, an integer >= 2 (not converted: 2.5 arms is an error)
    edges: Any
    rewards: str = param("gaussian")
    case: str = param("one_step")
    warmup_observations: int = param(1, ge=1)


@dataclass(kw_only=True)
class ProbGraphState(State):
    decisions: int
    plays: Annotated[np.ndarray, Array(written_as=int)]
    observations: Annotated[np.ndarray, Array(written_as=int)]
    reward_sums: Annotated[np.ndarray, Array()]
    open: dict[str, tuple[int, list[int]]]
    """The open decisions: the arm played and the arms observed so far."""


class ProbGraphLearner(Declared, Learner):
    """Base of the ``prob_graph`` family.

    Shared parameters: ``arms`` (K), ``edges`` (``[[i, j, p], ...]``), ``rewards``
    (``"gaussian"``, unit variance, or ``"bernoulli"``), ``case`` (``"one_step"`` or
    ``"cascade"``) and ``warmup_observations`` ([R] play ``bestParent(j)`` until every arm has
    this many observations; default 1).
    """

    family: ClassVar[str] = "prob_graph"
    Params = ProbGraphParams
    State = ProbGraphState

    def __init__(self, params: ProbGraphParams) -> None:
        self.setting = parse_setting(params.arms, params.edges, params.case, params.rewards)
        self.warmup_observations = params.warmup_observations
        arms = self.setting.arms
        self.decisions = 0
        self.plays = np.zeros(arms)
        self.observations = np.zeros(arms)
        self.reward_sums = np.zeros(arms)
        self.open: dict[str, tuple[int, list[int]]] = {}
        self.in_flight = np.zeros(arms)

    @property
    def arms(self) -> int:
        return self.setting.arms

    def means(self) -> np.ndarray:
        """Empirical means ``S_j / O_j`` (callers ensure every ``O_j >= 1``)."""
        return self.reward_sums / self.observations

    def warmup_arm(self, matrix: np.ndarray) -> int | None:
        """``bestParent(j)`` for an under-observed arm ``j`` (fewest expected in-flight
        observations first), or None once every arm has ``warmup_observations``."""
        short = np.flatnonzero(self.observations < self.warmup_observations)
        if short.size == 0:
            return None
        expected = self.observations[short] + matrix.T[short] @ self.in_flight
        target = int(short[np.argmin(expected)])
        return int(np.argmax(matrix[:, target]))

    @abstractmethod
    def select(self, round_index: int, rng: np.random.Generator) -> tuple[int, str]:
        """The arm to play in round ``round_index`` (1-based) and the branch that chose it."""

    def decide(self, context: Mapping[str, Any], rng: np.random.Generator) -> Decided:
        arm, branch = self.select(self.decisions + 1, rng)
        self.decisions += 1
        self.open[str(self.decisions)] = (arm, [])
        self.in_flight[arm] += 1
        return Decided(
            output={"arm": arm, "branch": branch},
            pending={"decision": self.decisions, "arm": arm},
        )

    @classmethod
    def feedback_part(cls, feedback: Mapping[str, Any]) -> str:
        """Without ``part``, a partial feedback is told by the arms it reveals and whether it
        completes the decision."""
        if feedback.get("part"):
            return str(feedback["part"])
        rewards = feedback.get("rewards")
        arms = sorted(map(str, rewards)) if isinstance(rewards, Mapping) else []
        return f"arms {','.join(arms)}; complete {feedback.get('complete', True)}"

    def learn(self, pending: Mapping[str, Any], feedback: Mapping[str, Any]) -> Learned:
        rewards = parse_rewards(feedback, self.arms, self.setting.rewards == "bernoulli")
        complete = feedback.get("complete", True)
        if not isinstance(complete, bool):
            raise LearnerError(f"feedback 'complete' must be true or false, got {complete!r}")
        key = decision_key(pending)
        if key not in self.open:
            return Learned(done=True)  # already closed: duplicated or late feedback
        arm, observed = self.open[key]
        impossible = [j for j in rewards if not self.setting.revealable[arm, j]]
        if impossible:
            raise ContradictingFeedback(
                f"feedback reveals arm(s) {impossible}, which playing arm {arm} cannot reveal"
            )
        if complete:
            missing = [int(j) for j in np.flatnonzero(self.setting.certain[arm])
                       if j not in rewards and j not in observed]
            if missing:
                raise ContradictingFeedback(
                    f"complete feedback lacks the reward of arm(s) {missing}, which playing "
                    f"arm {arm} always reveals (edge probability 1)"
                )
        metrics: dict[str, float] = {}
        for j, reward in sorted(rewards.items()):
            if j in observed:
                continue
            observed.append(j)
            self.observations[j] += 1
            self.reward_sums[j] += reward
            if j == arm:
                metrics["reward"] = reward
        if complete:
            self._close(key)
        return Learned(done=complete, metrics=metrics)

    def expire(self, pending: Mapping[str, Any]) -> Learned:
        key = decision_key(pending)
        if key in self.open:
            self._close(key)
        return Learned(done=True, metrics={"timed_out": 1.0})

    def _close(self, key: str) -> None:
        arm, _ = self.open.pop(key)
        self.in_flight[arm] -= 1
        self.plays[arm] += 1

    @classmethod
    def stats_on_truth(
        cls,
        stats: Stats,
        output: Mapping[str, Any],
        truth: Mapping[str, Any],
        params: Mapping[str, Any],
    ) -> None:
        """Exact (pseudo-)regret of a decision from the arms' true means: the best mean minus
        the played arm's."""
        means = truth.get("arm_means")
        if means:
            add_stat(stats, "regret_exact", max(means) - float(means[int(output["arm"])]))

    @classmethod
    def stats_gauges(
        cls, stats: Stats, summary: Mapping[str, Any], values: dict[str, Any]
    ) -> None:
        if "regret_exact" in stats:
            values["regret_exact"] = stats["regret_exact"]

    def summary(self) -> dict[str, float | list[float]]:
        return {
            "arm_pulls": (self.plays + self.in_flight).tolist(),
            "in_flight": float(self.in_flight.sum()),
        }

    def restored(self) -> None:
        self.in_flight = np.zeros(self.arms)
        for arm, _ in self.open.values():
            self.in_flight[arm] += 1
