"""Off-policy evaluation from running sums: the estimator math of ``banditflow ope`` and of
live OPE, where a learner's candidate policies are scored on its own live stream.

**Estimators.** A target policy pi is scored on logged rounds (context x_i, logged action
a_i drawn with propensity mu_i, reward r_i) through per-round weights
w_i = pi(a_i | x_i) / mu_i. :class:`Sums` keeps the handful of sums the estimators need, so
that the batch estimators of :mod:`offline.ope.estimators` (which build it from arrays) and
the live ones (which add one round at a time) are the same formulas:

* IPS: the mean of w_i r_i, with a normal 95 % interval;
* SNIPS: sum w_i r_i / sum w_i, its interval from the delta method (the variance of the
  linearised terms w_i (r_i - value) / mean w);
* DR: the mean of direct_i + w_i (r_i - modelled_i), where direct_i = sum_a pi(a | x_i)
  q(x_i, a) and modelled_i = q(x_i, a_i) come from a reward model q that never saw round i;
* Kish's effective sample size (sum w)^2 / sum w^2.

Variances come from sums of squares ((sum t^2 - n mean^2) / (n - 1)); with the bounded
rewards and clipped weights of bandit logs this loses nothing that matters next to the
interval's width.

**Live OPE** (:class:`LiveOPE`, a learner config's ``candidates``). When the live learner
decides, each candidate (a learner of the same family) gives its distribution on the same
context, with the generator the worker would use for that event id under the candidate's
seed; the decision record keeps what the estimators need (each candidate's weight and
direct term, the model's value of the logged action) and, for the rounds a candidate will
learn from, its pending state. When the feedback reveals the logged action's reward, every
candidate's sums take the round, and the candidates learn explore_eval-style
(:func:`explore_eval_accepts`, as :mod:`offline.ope.learning_policy` does offline). The
reward model is a per-action ridge regression on the context's feature vector, updated only
when a round's feedback arrives, so each round's direct and modelled terms come from
earlier rounds (progressive validation: the streaming form of cross-fitting). The logged
policy itself is scored the same way (``policy="logged"``, weight p(a) / mu = 1 unless
clipped) as the on-policy reference.

>>> import numpy as np
>>> sums = Sums.of(np.array([2.0, 0.0, 2.0, 0.0]), np.array([1.0, 0.0, 0.5, 1.0]))
>>> sums.ips().value, sums.snips().value, sums.ess()
(0.75, 0.75, 2.0)
>>> live = Sums()
>>> for w, r in ((2.0, 1.0), (0.0, 0.0), (2.0, 0.5), (0.0, 1.0)):
...     live.add(w, r, w * r)
>>> live.ips() == sums.ips() and live.snips() == sums.snips()
True
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from learners.base import JSON, Learner
from learners.family import Family
from learners.registry import learner_class, make_learner

Z_95 = 1.959963984540054
# Propensities below this are raised to it in the weights pi / mu: no round weighs more than
# 1 / MIN_PROPENSITY (``banditflow ope --min-propensity``'s default; see offline.ope.evaluation).
MIN_PROPENSITY = 1e-3
RIDGE = 1.0  # the reward model's ridge penalty (offline and live)
# The logged policy's name among the policies of live OPE; no candidate may take it.
LOGGED = "logged"


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95 % confidence interval (NaN when undefined)."""

    value: float
    ci_low: float
    ci_high: float

    def as_dict(self) -> dict[str, float | None]:
        """JSON-ready: NaN (undefined) and infinite bounds (one round) become None."""
        return {name: (number if math.isfinite(number) else None)
                for name, number in (("value", self.value), ("ci_low", self.ci_low),
                                     ("ci_high", self.ci_high))}


UNDEFINED = Estimate(math.nan, math.nan, math.nan)


def mean_interval(n: int, total: float, squares: float) -> Estimate:
    """The mean of ``n`` independent terms (their sum and sum of squares) and its normal 95 %
    interval (infinite for one term)."""
    if n == 0:
        return UNDEFINED
    mean = total / n
    if n == 1:
        return Estimate(mean, -math.inf, math.inf)
    variance = max(0.0, (squares - n * mean * mean) / (n - 1))
    half = Z_95 * math.sqrt(variance / n)
    return Estimate(mean, mean - half, mean + half)


@dataclass(slots=True)
class Sums:
    """Running sums of scored rounds: weights w, rewards r and DR terms t (module docstring)."""

    n: int = 0
    w: float = 0.0
    w2: float = 0.0
    wr: float = 0.0
    w2r: float = 0.0
    w2r2: float = 0.0
    t: float = 0.0
    t2: float = 0.0

    @classmethod
    def of(cls, weights: np.ndarray, rewards: np.ndarray,
           terms: np.ndarray | None = None) -> Sums:
        """The sums of a batch of rounds (``terms``: their DR terms, when wanted)."""
        wr = weights * rewards
        t = np.zeros(0) if terms is None else terms
        return cls(len(weights), float(np.sum(weights)), float(np.sum(weights**2)),
                   float(np.sum(wr)), float(np.sum(weights * wr)), float(np.sum(wr**2)),
                   float(np.sum(t)), float(np.sum(t**2)))

    def add(self, weight: float, reward: float, term: float) -> None:
        """One more round: its weight, reward and DR term."""
        wr = weight * reward
        self.n += 1
        self.w += weight
        self.w2 += weight * weight
        self.wr += wr
        self.w2r += weight * wr
        self.w2r2 += wr * wr
        self.t += term
        self.t2 += term * term

    def ips(self) -> Estimate:
        """Inverse propensity scoring: mean of w_i r_i (unbiased when every mu_i > 0 where
        pi > 0)."""
        return mean_interval(self.n, self.wr, self.w2r2)

    def snips(self) -> Estimate:
        """Self-normalised IPS: sum w_i r_i / sum w_i (biased, consistent, often lower
        variance; undefined when the target never plays a logged action)."""
        n = self.n
        if n == 0 or self.w <= 0.0:
            return UNDEFINED
        value = self.wr / self.w
        if n == 1:
            return Estimate(value, -math.inf, math.inf)
        # sum of w_i^2 (r_i - value)^2; the linearised terms sum to zero
        squares = max(0.0, self.w2r2 - 2.0 * value * self.w2r + value * value * self.w2)
        half = Z_95 * math.sqrt(squares / (n - 1)) / (self.w / n) / math.sqrt(n)
        return Estimate(value, value - half, value + half)

    def dr(self) -> Estimate:
        """Doubly robust: mean of the DR terms; unbiased when the weights are right, whatever
        the reward model, provided the model never saw the round it corrects."""
        return mean_interval(self.n, self.t, self.t2)

    def ess(self) -> float:
        """Kish's effective sample size (sum w)^2 / sum w^2: how many rounds the estimate is
        worth (the number of rounds when every weight is equal, 0 when all are 0)."""
        return self.w * self.w / self.w2 if self.w2 > 0 else 0.0

    def estimates(self, policy: str, learned_from: int | None = None) -> PolicyEstimates:
        return PolicyEstimates(policy, self.ips(), self.snips(), self.dr(), self.ess(),
                               learned_from, self.n)

    def to_json(self) -> list[float]:
        return [self.n, self.w, self.w2, self.wr, self.w2r, self.w2r2, self.t, self.t2]

    @classmethod
    def from_json(cls, data: list[float]) -> Sums:
        return cls(int(data[0]), *data[1:])


@dataclass
class PolicyEstimates:
    """One target policy's estimates, effective sample size and scored rounds."""

    policy: str
    ips: Estimate
    snips: Estimate
    dr: Estimate
    ess: float
    learned_from: int | None = None  # a learning policy: the rounds it learned from
    rounds: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "ips": self.ips.as_dict(),
                "snips": self.snips.as_dict(), "dr": self.dr.as_dict(), "ess": self.ess}


def ridge_coefficients(gram: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """Ridge regression's coefficients from X^T X and X^T y (batched over leading axes)."""
    penalised = gram + RIDGE * np.eye(gram.shape[-1])
    return np.linalg.solve(penalised, moment[..., None])[..., 0]


def explore_eval_accepts(target: float, bound: float, propensity: float, draw: float) -> bool:
    """Whether a learning policy learns from a logged round, explore_eval-style: with
    probability pi(a) bound / mu(a), where ``bound`` is at most every clipped propensity the
    round's action could have had, so that the rounds accepted are distributed as if the
    policy had played them (its own distribution pi)."""
    return draw < target * bound / propensity


def learn_as_played(learner: Learner, declared: Family, pending: Mapping[str, Any],
                    action: int, feedback: Mapping[str, Any]) -> None:
    """``learner`` learns from a logged round as if it had played the logged ``action``: the
    family's front door names where its pending state holds the played action."""
    assert declared.played_action is not None  # (an action_distribution family)
    learner.learn({**pending, declared.played_action: action}, feedback)


class CandidateError(ValueError):
    """A learner config's candidates cannot be evaluated (an invalid_config dead letter)."""


def _unit_draw(seed: int, name: str, event_id: str) -> float:
    """A uniform draw in [0, 1), a function of the candidate and the event only (the same
    after a crash and redo, whatever order the events came in)."""
    digest = hashlib.blake2b(f"{seed}/{name}/{event_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


class RewardModel:
    """Per action, a ridge regression of the reward on the context's feature vector with an
    intercept (:mod:`offline.ope.reward_model`'s shared layout), kept as X^T X and X^T r and
    updated as feedback arrives; contexts without one flat feature vector of the model's size
    use the intercept alone (a mean reward per action). Predictions are clipped to the range
    of the rewards seen, and are 0 before any."""

    def __init__(self, actions: int, dim: int, grams: np.ndarray | None = None,
                 moments: np.ndarray | None = None, low: float = math.inf,
                 high: float = -math.inf) -> None:
        self.actions = actions
        self.dim = dim
        size = dim + 1
        self.grams = np.zeros((actions, size, size)) if grams is None else grams
        self.moments = np.zeros((actions, size)) if moments is None else moments
        self.low, self.high = low, high
        self.coefficients = ridge_coefficients(self.grams, self.moments)

    def inputs(self, features: Any) -> list[float]:
        """The model's input for a context's ``features`` (with the intercept)."""
        flat = (isinstance(features, list) and len(features) == self.dim
                and all(isinstance(x, int | float) for x in features))
        return [*features, 1.0] if flat else [0.0] * self.dim + [1.0]

    def predict(self, inputs: list[float]) -> np.ndarray:
        if self.low > self.high:
            return np.zeros(self.actions)
        return np.clip(self.coefficients @ np.asarray(inputs), self.low, self.high)

    def update(self, inputs: list[float], action: int, reward: float) -> None:
        x = np.asarray(inputs)
        self.grams[action] += np.outer(x, x)
        self.moments[action] += reward * x
        self.coefficients[action] = ridge_coefficients(self.grams[action], self.moments[action])
        self.low, self.high = min(self.low, reward), max(self.high, reward)

    def to_json(self) -> JSON:
        return {"actions": self.actions, "dim": self.dim, "grams": self.grams.tolist(),
                "moments": self.moments.tolist(),
                "range": None if self.low > self.high else [self.low, self.high]}

    @classmethod
    def from_json(cls, data: JSON) -> RewardModel:
        low, high = data["range"] or (math.inf, -math.inf)  # (None: no reward seen yet)
        return cls(data["actions"], data["dim"], np.asarray(data["grams"], dtype=float),
                   np.asarray(data["moments"], dtype=float), low, high)


@dataclass(slots=True)
class Candidate:
    """A candidate policy: its config, live learner, sums and the rounds it learned from.

    ``born`` is how many decisions its learner had made when the candidate joined: a decision
    made before (a lower decision index) carries no terms of this candidate, or those of a
    predecessor of the same name."""

    config: JSON
    born: int
    learner: Learner
    sums: Sums = field(default_factory=Sums)
    learned: int = 0
    checkpoint: JSON | None = None  # its state when last written (restored if it fails)

    def to_json(self) -> JSON:
        self.checkpoint = self.learner.to_state()
        return {"config": self.config, "born": self.born, "state": self.checkpoint,
                "sums": self.sums.to_json(), "learned": self.learned}


# Exceptions from a candidate learner that skip it for the round (processors.processor's
# LEARNER_FAILURES: bad input, not a broken worker).
CANDIDATE_FAILURES = (ValueError, TypeError, IndexError, KeyError, ArithmeticError)


@dataclass(slots=True)
class LiveOPE:
    """A learner's live OPE: its candidates, the logged policy's sums and the reward model.

    Persisted with the learner (``ope`` in its state log value); a decision's part is the
    list :meth:`decide` returns, kept in its :class:`processors.records.DecisionRecord`.
    """

    family: str
    started: int  # the learner's decision count when its evaluation started
    candidates: dict[str, Candidate]
    logged: Sums = field(default_factory=Sums)
    model: RewardModel | None = None

    @staticmethod
    def check(declared: Family, candidates: Mapping[str, JSON]) -> None:
        """Raises :class:`CandidateError` unless ``candidates`` can be evaluated."""
        if not declared.action_distribution:
            raise CandidateError(
                f"candidates: {declared.name} decisions carry no distribution p over actions, "
                "which live off-policy evaluation needs to weigh the logged rounds")
        if LOGGED in candidates:
            raise CandidateError(f"candidates: {LOGGED!r} names the logged policy itself")
        for name, candidate in candidates.items():
            try:
                make_learner(declared.name, candidate["algorithm"], candidate["params"])
            except Exception as exc:  # whatever the learner refuses its params with
                raise CandidateError(f"candidate {name!r}: {type(exc).__name__}: {exc}") from None

    @classmethod
    def configure(cls, declared: Family, candidates: Mapping[str, JSON],
                  previous: LiveOPE | None, decisions: int) -> LiveOPE | None:
        """The OPE state for ``candidates`` (checked) of a learner that has made
        ``decisions`` decisions: a candidate ``previous`` had with the same config keeps its
        learner and estimates, the others start afresh; None without candidates."""
        if not candidates:
            return None
        if previous is None:
            return cls(declared.name, decisions,
                       {name: cls._candidate(declared, config, decisions)
                        for name, config in candidates.items()})
        kept = {}
        for name, config in candidates.items():
            old = previous.candidates.get(name)
            kept[name] = (old if old is not None and old.config == config
                          else cls._candidate(declared, config, decisions))
        return cls(declared.name, previous.started, kept, previous.logged, previous.model)

    @staticmethod
    def _candidate(declared: Family, config: JSON, born: int) -> Candidate:
        learner = make_learner(declared.name, config["algorithm"], config["params"])
        return Candidate(config, born, learner)

    # ---------------------------------------------------------------- per record
    def decide(self, declared: Family, fields: Mapping[str, Any], event_id: str,
               output: Mapping[str, Any], index: int) -> list[Any] | None:
        """The live learner decided ``output`` on ``fields``, its decision number ``index``
        (counted from 0): what the estimators and the candidates' learning will need when its
        feedback comes (None: the round cannot be scored)."""
        # (imported here: processors.processor imports this module)
        from processors.processor import event_seed

        assert declared.played_action is not None
        action, p = output[declared.played_action], output["p"]
        actions = len(p)
        features = fields.get("features")
        model = self.model
        if model is None:
            flat = isinstance(features, list) and all(isinstance(x, int | float)
                                                      for x in features)
            model = self.model = RewardModel(actions, len(features) if flat else 0)
        if model.actions != actions:
            return None
        inputs = model.inputs(features)
        q = model.predict(inputs)
        mu = max(float(p[action]), MIN_PROPENSITY)
        bound = max(MIN_PROPENSITY, min(p))  # at most any action's clipped propensity
        terms: dict[str, list[Any]] = {}
        for name, candidate in self.candidates.items():
            seed = candidate.config["seed"]
            try:
                decided = candidate.learner.decide(fields, event_seed(seed, event_id))
            except CANDIDATE_FAILURES:
                continue
            target = np.asarray(decided.output["p"], dtype=float)
            if len(target) != actions:
                continue
            learns = explore_eval_accepts(float(target[action]), bound, mu,
                                          _unit_draw(seed, name, event_id))
            terms[name] = [float(target[action]) / mu, float(target @ q),
                           decided.pending if learns else None]
        return [index, inputs, action, p[action] / mu, float(np.dot(p, q)),
                float(q[action]), terms]

    def observe(self, declared: Family, recorded: list[Any], feedback: Mapping[str, Any]) -> None:
        """A decision's feedback (applied to the live learner): the round is scored if it
        reveals the logged action's reward, and the candidates that accepted it learn."""
        index, inputs, action, logged_weight, logged_direct, modelled, terms = recorded
        assert declared.revealed is not None
        if index < self.started or self.model is None:
            return  # decided under an evaluation since dropped (every candidate removed)
        value = (feedback.get(declared.revealed) or {}).get(str(action))
        if value is None:
            return
        reward = -float(value) if declared.revealed_are_losses else float(value)
        self.logged.add(logged_weight, reward,
                        logged_direct + logged_weight * (reward - modelled))
        for name, (weight, direct, pending) in terms.items():
            candidate = self.candidates.get(name)
            if candidate is None or candidate.born > index:
                continue  # removed, or replaced since this decision
            candidate.sums.add(weight, reward, direct + weight * (reward - modelled))
            if pending is not None:
                try:
                    learn_as_played(candidate.learner, declared, pending, action, feedback)
                except CANDIDATE_FAILURES:
                    # a half-applied update must not linger: back to its last written state
                    config = candidate.config
                    candidate.learner = (
                        learner_class(self.family, config["algorithm"]).from_state(
                            config["params"], candidate.checkpoint)
                        if candidate.checkpoint is not None
                        else make_learner(self.family, config["algorithm"], config["params"]))
                else:
                    candidate.learned += 1
        self.model.update(inputs, action, reward)

    def estimates(self) -> list[PolicyEstimates]:
        """The logged policy's estimates, then each candidate's."""
        return [self.logged.estimates(LOGGED),
                *(candidate.sums.estimates(name, candidate.learned)
                  for name, candidate in self.candidates.items())]

    # ---------------------------------------------------------------- state log
    def to_json(self) -> JSON:
        return {"started": self.started, "logged": self.logged.to_json(),
                "model": None if self.model is None else self.model.to_json(),
                "candidates": {name: c.to_json() for name, c in self.candidates.items()}}

    @classmethod
    def from_json(cls, family_name: str, data: JSON) -> LiveOPE:
        candidates = {}
        for name, item in data["candidates"].items():
            config = item["config"]
            learner = learner_class(family_name, config["algorithm"]).from_state(
                config["params"], item["state"])
            candidates[name] = Candidate(config, item["born"], learner,
                                         Sums.from_json(item["sums"]), item["learned"],
                                         item["state"])
        model = None if data["model"] is None else RewardModel.from_json(data["model"])
        return cls(family_name, data["started"], candidates, Sums.from_json(data["logged"]),
                   model)
