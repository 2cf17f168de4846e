"""Live OPE: a learner's candidate policies scored on its own live stream, with the
estimators of :mod:`banditflow.processors.estimators` (which ``banditflow ope`` uses too).

**Live OPE** (:class:`LiveOPE`, a learner config's ``candidates``). When the live learner
decides, each candidate (a learner of the same family) gives its distribution on the same
context, with the generator the worker would use for that event id under the candidate's
seed; the decision record keeps what the estimators need (:class:`Round`) and, for the
rounds a candidate will learn from, its pending state. The scoring is graph-aware: playing a
reveals the loss of every action j with G[a][j] > 0 (bandit feedback: a alone), and j is
revealed with probability P(j) = sum_b mu(b) G[b][j] under the logging policy, so a round
gives each policy the weight w = sum over revealed j of pi(j|x) / P(j), the weighted reward
y = sum pi(j|x) r_j / P(j) and the DR term direct + sum pi(j|x) (r_j - q(x, j)) / P(j),
unbiased for the policy's value whatever the graph (with bandit feedback these are the
offline w, w r and DR term of :mod:`banditflow.processors.estimators`; a round that reveals
nothing counts with y = 0). When the feedback comes, every policy's sums take the round, and
the candidates learn explore_eval-style
(:func:`banditflow.processors.estimators.explore_eval_acceptance`, as
:mod:`banditflow.offline.ope.learning_policy` does offline, with a fixed bound per
candidate, ``explore_eval_bound``). The reward model is a per-action ridge regression on the
context's feature vector (for a learner of candidate sets, ``action_features``: one ridge
regression on each candidate's pair features), updated only when a round's feedback arrives,
so each round's direct and modelled terms come from earlier rounds (progressive validation:
the streaming form of cross-fitting). The logged policy itself is scored the same way
(``policy="logged"``, weight 1 with bandit feedback unless clipped) as the on-policy
reference.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from banditflow.learners.base import JSON, Learner, LearnerError, check_state_size
from banditflow.learners.family import Family, OffPolicyView
from banditflow.learners.registry import learner_class, make_learner
from banditflow.processors.estimators import (
    MIN_PROPENSITY,
    RIDGE,
    PolicyEstimates,
    Sums,
    explore_eval_acceptance,
)
from banditflow.processors.redo import LazyGenerator, call_logged
from banditflow.processors.throttle import Throttle

log = logging.getLogger(__name__)

# Live OPE's reward model regresses on the context's features up to this many; above, it is
# a mean reward per action (intercept only), so that its update stays cheap and its state
# small whatever the feature dimension.
MODEL_MAX_FEATURES = 64
# The logged policy's name among the policies of live OPE; no candidate may take it.
LOGGED = "logged"


def as_played(declared: Family, pending: Mapping[str, Any], action: int) -> dict[str, Any]:
    """A learner's ``pending`` state of a decision, made to have played the logged
    ``action``: the family's front door names where its pending state holds the played
    action."""
    assert declared.played_action is not None  # (an action_distribution family)
    return {**pending, declared.played_action: action}


class CandidateError(ValueError):
    """A learner config's candidates cannot be evaluated (an invalid_config dead letter)."""


def _unit_draw(seed: int, name: str, event_id: str) -> float:
    """A uniform draw in [0, 1), a function of the candidate and the event only (the same
    after a crash and redo, whatever order the events came in)."""
    digest = hashlib.blake2b(f"{seed}/{name}/{event_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def _view(declared: Family) -> OffPolicyView:
    assert declared.off_policy is not None  # (an action_distribution family: see Family)
    return declared.off_policy


def reward_model_shape(declared: Family, learner: Learner,
                       params: Mapping[str, Any]) -> tuple[int, int]:
    """The reward model's regressions and features for ``learner`` (built from ``params``),
    as its family says, its features up to :data:`MODEL_MAX_FEATURES` (else 0: intercept
    only)."""
    models, features = _view(declared).reward_model(learner, params)
    return models, features if features <= MODEL_MAX_FEATURES else 0


class RewardModel:
    """Per action, a ridge regression of the reward on the context's feature vector with an
    intercept (:mod:`banditflow.offline.ope.reward_model`'s shared layout), kept as the inverse of
    X^T X + RIDGE I and X^T r and updated as feedback arrives by Sherman-Morrison (O(d^2) a
    round, no solve); contexts without one flat feature vector of the model's size use the
    intercept alone (a mean reward per action). Predictions are clipped to the range of the
    rewards seen, and are 0 before any."""

    def __init__(self, actions: int, dim: int, inverses: np.ndarray | None = None,
                 moments: np.ndarray | None = None, low: float = math.inf,
                 high: float = -math.inf) -> None:
        self.actions = actions
        self.dim = dim
        size = dim + 1
        self.inverses = (np.tile(np.eye(size) / RIDGE, (actions, 1, 1)) if inverses is None
                         else inverses)
        self.moments = np.zeros((actions, size)) if moments is None else moments
        self.low, self.high = low, high
        self.coefficients = np.einsum("kij,kj->ki", self.inverses, self.moments)

    @staticmethod
    def numbers(actions: int, dim: int) -> int:
        """How many numbers the model keeps in the state log."""
        return actions * (dim + 1) * (dim + 2)

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
        x = np.asarray(inputs, dtype=float)
        inverse = self.inverses[action]
        v = inverse @ x
        inverse -= np.outer(v, v) / (1.0 + x @ v)
        self.moments[action] += reward * x
        self.coefficients[action] = inverse @ self.moments[action]
        self.low, self.high = min(self.low, reward), max(self.high, reward)

    def to_json(self) -> JSON:
        return {"actions": self.actions, "dim": self.dim, "inverses": self.inverses.tolist(),
                "moments": self.moments.tolist(),
                "range": None if self.low > self.high else [self.low, self.high]}

    @classmethod
    def from_json(cls, data: JSON) -> RewardModel:
        low, high = data["range"] or (math.inf, -math.inf)  # (None: no reward seen yet)
        if "inverses" in data:
            inverses = np.asarray(data["inverses"], dtype=float)
        else:  # the first live OPE logs kept X^T X itself
            grams = np.asarray(data["grams"], dtype=float)
            inverses = np.linalg.inv(grams + RIDGE * np.eye(grams.shape[-1]))
        return cls(data["actions"], data["dim"], inverses,
                   np.asarray(data["moments"], dtype=float), low, high)


@dataclass(slots=True)
class Candidate:
    """A candidate policy: its config, live learner, sums and the rounds it learned from.

    ``born`` is how many decisions its learner had made when the candidate joined: a decision
    made before (a lower decision index) carries no terms of this candidate, or those of a
    predecessor of the same name. Its learner is undone like the live learner's
    (:mod:`banditflow.processors.redo`): a call that raised is rolled back to the state just before
    it.
    """

    family: str
    config: JSON
    born: int
    learner: Learner
    sums: Sums = field(default_factory=Sums)
    paired: Sums = field(default_factory=Sums)  # its terms minus the logged policy's
    learned_from: int = 0  # rounds it learned from (explore_eval acceptance)
    skipped: int = 0  # rounds it could not decide on (not scored)
    clipped: int = 0  # rounds whose explore_eval acceptance was capped at 1
    checkpoint: JSON = field(default_factory=dict)
    redo: list[tuple[Any, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.checkpoint:
            self.mark_checkpoint(self.learner.to_state())

    @property
    def bound(self) -> float:
        return float(self.config.get("explore_eval_bound", MIN_PROPENSITY))

    def mark_checkpoint(self, state: JSON) -> None:
        self.checkpoint = state
        self.redo.clear()

    def rebuild(self, state: JSON) -> Learner:
        config = self.config
        return learner_class(self.family, config["algorithm"]).from_state(config["params"], state)

    def to_json(self) -> JSON:
        state = self.learner.to_state()
        self.mark_checkpoint(state)
        data = {"config": self.config, "born": self.born, "state": state,
                "sums": self.sums.to_json(), "paired": self.paired.to_json(),
                "learned": self.learned_from}
        if self.skipped:
            data["skipped"] = self.skipped
        if self.clipped:
            data["clipped"] = self.clipped
        return data


class Scored(NamedTuple):
    """A policy's part of a decision: for each action the round reveals, its coefficient
    pi(j|x) / P(j) (P(j) the logged chance that j is revealed, clipped), its DR direct term
    sum_a pi(a|x) q(x, a), and a candidate's pending state if it learns from the round (None
    if not)."""

    coefficients: list[float]
    direct: float
    pending: JSON | None = None


class Round(NamedTuple):
    """What a decision keeps for live OPE until its feedback (a list in the state log)."""

    index: int  # the learner's decision number (counted from 0)
    # the reward model's input; of a candidate set, one per revealed candidate
    inputs: list[float] | list[list[float]]
    action: int
    revealed: list[int]  # the actions whose loss the played one reveals (its graph row)
    modelled: list[float]  # q(x, j) of each
    logged: Scored  # the logged policy's part
    terms: dict[str, Scored]  # each candidate's
    revealed_ids: list[str] | None = None  # of a candidate set: the revealed candidates' ids

    def to_json(self) -> list[Any]:
        data = [self.index, self.inputs, self.action, self.revealed, self.modelled,
                list(self.logged), {name: list(scored) for name, scored in self.terms.items()}]
        return data if self.revealed_ids is None else [*data, self.revealed_ids]

    @classmethod
    def from_json(cls, data: list[Any]) -> Round:
        if len(data) in (7, 8) and isinstance(data[3], list):
            index, inputs, action, revealed, modelled, logged, terms, *ids = data
            return cls(index, inputs, action, revealed, modelled, Scored(*logged),
                       {name: Scored(*scored) for name, scored in terms.items()},
                       ids[0] if ids else None)
        # a decision of the first live OPE logs (bandit only: the played action's weight)
        index, inputs, action, weight, direct, modelled, terms = data
        return cls(index, inputs, action, [action], [modelled], Scored([weight], direct),
                   {name: Scored([w], d, pending) for name, (w, d, pending) in terms.items()})


def reveal_chances(p: np.ndarray, graph: np.ndarray) -> np.ndarray:
    """P(j) = sum_b p(b) G[b][j]: the chance that the logging policy's draw reveals action
    j's loss, clipped below at :data:`MIN_PROPENSITY` (graph-aware importance weighting: with
    bandit feedback, P(j) = p(j))."""
    return np.maximum(p @ graph, MIN_PROPENSITY)


def state_numbers(value: Any, seen: set[int] | None = None) -> int:
    """How many numbers a learner holds (its arrays' sizes, its scalars), walking its
    attributes: about what its state takes in the state log, without serialising it."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, bool | int | float):
        return 1
    if isinstance(value, np.ndarray):
        return int(value.size)
    numel = getattr(value, "numel", None)  # (a torch tensor)
    if callable(numel) and not isinstance(value, type):
        return int(numel())
    if isinstance(value, list | tuple):
        return sum(state_numbers(item, seen) for item in value)
    if isinstance(value, dict):
        return sum(state_numbers(item, seen) for item in value.values())
    attributes = getattr(value, "__dict__", None)
    if attributes is not None and not isinstance(value, type):
        return sum(state_numbers(item, seen) for item in attributes.values())
    return 0


# Unexpected failures of live OPE are logged at most this often (seconds): it runs on every
# record, and one broken candidate must not flood the log.
# Unexpected live OPE failures are logged at most once a minute (each decision could raise).
OPE_FAILURES = Throttle(every_s=60.0)


def log_failure(what: str, exc: BaseException) -> None:
    """Log an unexpected live OPE failure (throttled: :data:`OPE_FAILURES`)."""
    if OPE_FAILURES.allow(time.monotonic()):
        log.error("live OPE: %s failed (%s: %s); the round is not scored%s", what,
                  type(exc).__name__, exc, OPE_FAILURES.suppressed_note(), exc_info=exc)


@dataclass(slots=True)
class LiveOPE:
    """A learner's live OPE: its candidates, the logged policy's sums and the reward model.

    Persisted with the learner (``ope`` in its state log value); a decision's part is the
    :class:`Round` :meth:`decide` returns, kept in its
    :class:`banditflow.processors.records.DecisionRecord`.
    """

    family: str
    started: int  # the learner's decision count when its evaluation started
    candidates: dict[str, Candidate]
    logged: Sums = field(default_factory=Sums)
    model: RewardModel | None = None
    failures: int = 0  # rounds dropped by an unexpected failure (see processors.processor)

    @staticmethod
    def check(declared: Family, learner: Learner, params: Mapping[str, Any],
              candidates: Mapping[str, JSON]) -> dict[str, Learner]:
        """The candidates' learners, built; raises :class:`CandidateError` unless
        ``candidates`` can be evaluated beside ``learner`` (built from ``params``): the family
        carries distributions, each candidate is a valid learner with the same actions,
        features and graph, and the
        learner, candidates and reward model together fit in the state log's budget
        (:data:`banditflow.learners.base.MAX_STATE_NUMBERS`)."""
        if not declared.action_distribution:
            raise CandidateError(
                f"candidates: {declared.name} decisions carry no distribution p over actions, "
                "which live off-policy evaluation needs to weigh the logged rounds")
        if LOGGED in candidates:
            raise CandidateError(f"candidates: {LOGGED!r} names the logged policy itself")
        view = _view(declared)
        interface = view.interface(learner, params)
        built = {}
        numbers = state_numbers(learner)
        for name, candidate in candidates.items():
            try:
                built[name] = make_learner(declared.name, candidate["algorithm"],
                                           candidate["params"])
            except Exception as exc:  # whatever the learner refuses its params with
                raise CandidateError(f"candidate {name!r}: {type(exc).__name__}: {exc}") from None
            if view.interface(built[name], candidate["params"]) != interface:
                raise CandidateError(
                    f"candidate {name!r}: its actions, feature_dim, feature_layout and feedback "
                    "graph (or action_features) must be the learner's, for it is scored on the "
                    "learner's rounds")
            numbers += state_numbers(built[name])
        numbers += RewardModel.numbers(*reward_model_shape(declared, learner, params))
        try:
            check_state_size(numbers, "the learner with its candidates and reward model")
        except LearnerError as exc:
            raise CandidateError(f"candidates: {exc}") from None
        return built

    @classmethod
    def configure(cls, declared: Family, learner: Learner, params: Mapping[str, Any],
                  candidates: Mapping[str, JSON], learners: Mapping[str, Learner],
                  previous: LiveOPE | None, decisions: int) -> LiveOPE | None:
        """The OPE state for ``candidates`` (their ``learners`` built by :meth:`check`) of
        ``learner`` (built from ``params``), which has made ``decisions`` decisions: a
        candidate ``previous`` had with the same config keeps its learner and estimates, the
        others start afresh; None without candidates."""
        if not candidates:
            return None
        kept = {}
        for name, config in candidates.items():
            old = None if previous is None else previous.candidates.get(name)
            kept[name] = (old if old is not None and old.config == config
                          else Candidate(declared.name, config, decisions, learners[name]))
        if previous is None or previous.model is None:
            model = RewardModel(*reward_model_shape(declared, learner, params))
            if previous is None:
                return cls(declared.name, decisions, kept, model=model)
        else:
            model = previous.model
        return cls(declared.name, previous.started, kept, previous.logged, model,
                   previous.failures)

    # ---------------------------------------------------------------- per record
    def decide(self, declared: Family, learner: Learner, fields: Mapping[str, Any],
               event_id: str, output: Mapping[str, Any], index: int) -> Round | None:
        """``learner`` decided ``output`` on ``fields``, its decision number ``index``
        (counted from 0): what the estimators and the candidates' learning will need when its
        feedback comes (None: the round cannot be scored)."""
        assert declared.played_action is not None
        action = int(output[declared.played_action])
        p = np.asarray(output["p"], dtype=float)
        model = self.model
        view = _view(declared)
        per_action = view.action_inputs(learner, dict(fields))
        if model is None or model.actions != (1 if per_action is not None else len(p)):
            return None
        graph = view.feedback_graph(learner, dict(fields), len(p))
        chances = reveal_chances(p, graph)
        revealed = [int(j) for j in np.flatnonzero(graph[action] > 0)]
        revealed_ids = None
        if per_action is None:
            inputs: list[float] | list[list[float]] = model.inputs(fields.get("features"))
            q = model.predict(inputs)
        else:  # one input per action (a candidate: its pair features), one regression
            features, ids = per_action
            rows = [model.inputs(row) for row in features]
            q = np.array([model.predict(row)[0] for row in rows])
            inputs = [rows[j] for j in revealed]
            revealed_ids = [ids[j] for j in revealed]
        mu = max(float(p[action]), MIN_PROPENSITY)
        terms: dict[str, Scored] = {}
        for name, candidate in self.candidates.items():
            seed = candidate.config["seed"]
            try:
                # any failure: the candidate's learner is rolled back, the round skipped
                decided = call_logged(candidate, Exception, "decide", fields,
                                      LazyGenerator(seed, event_id))
                target = np.asarray(decided.output["p"], dtype=float)
                if len(target) != len(p):
                    raise ValueError(f"{len(target)} actions, the learner's {len(p)}")
            except Exception as exc:
                candidate.skipped += 1
                log_failure(f"candidate {name!r} deciding", exc)
                continue
            acceptance = explore_eval_acceptance(float(target[action]), candidate.bound, mu)
            if acceptance > 1.0:
                candidate.clipped += 1
            learns = _unit_draw(seed, name, event_id) < acceptance
            terms[name] = Scored([float(target[j] / chances[j]) for j in revealed],
                                 float(target @ q), decided.pending if learns else None)
        logged = Scored([float(p[j] / chances[j]) for j in revealed], float(p @ q))
        return Round(index, inputs, action, revealed, [float(q[j]) for j in revealed], logged,
                     terms, revealed_ids)

    def observe(self, declared: Family, recorded: Round, feedback: Mapping[str, Any]) -> None:
        """A decision's feedback (applied to the live learner): each policy's sums take the
        round, graph-aware (module docstring), and the candidates that accepted it learn. A
        round whose feedback omits a loss its graph reveals is not scored."""
        assert declared.revealed is not None
        if recorded.index < self.started or self.model is None:
            return  # decided under an evaluation since dropped (every candidate removed)
        # (keys as the learner parsed them: "01" is action 1, a candidate's id that candidate;
        # a key naming an unrevealed candidate was refused by the learner before)
        ids = recorded.revealed_ids or []
        values = {recorded.revealed[ids.index(key)] if key in ids else int(key): value
                  for key, value in (feedback.get(declared.revealed) or {}).items()}
        if any(j not in values for j in recorded.revealed):
            return
        sign = -1.0 if declared.revealed_are_losses else 1.0
        rewards = [sign * float(values[j]) for j in recorded.revealed]
        # (first: the round's terms are computed already, and a failure here leaves no sum
        # half-updated)
        for position, (j, reward) in enumerate(zip(recorded.revealed, rewards, strict=True)):
            if recorded.revealed_ids is None:
                self.model.update(recorded.inputs, j, reward)  # type: ignore[arg-type]
            else:  # (one model over pair features: candidate j's own input)
                self.model.update(recorded.inputs[position], 0, reward)  # type: ignore[arg-type]
        residuals = [r - q for r, q in zip(rewards, recorded.modelled, strict=True)]

        def add(sums: Sums, scored: Scored) -> tuple[float, float]:
            """The round's weighted reward and DR term for ``scored``, added to ``sums``."""
            c = scored.coefficients
            weighted = float(np.dot(c, rewards)) if c else 0.0
            term = scored.direct + (float(np.dot(c, residuals)) if c else 0.0)
            sums.add(sum(c), weighted, term)
            return weighted, term

        logged_weighted, logged_term = add(self.logged, recorded.logged)
        action = recorded.action
        for name, scored in recorded.terms.items():
            candidate = self.candidates.get(name)
            if candidate is None or candidate.born > recorded.index:
                continue  # removed, or replaced since this decision
            weighted, term = add(candidate.sums, scored)
            candidate.paired.add(1.0, weighted - logged_weighted, term - logged_term)
            if scored.pending is not None:
                try:  # a failure is rolled back to the state just before this learn
                    call_logged(candidate, Exception, "learn",
                                as_played(declared, scored.pending, action), feedback)
                except Exception as exc:
                    log_failure(f"candidate {name!r} learning", exc)
                else:
                    candidate.learned_from += 1

    def estimates(self) -> list[PolicyEstimates]:
        """The logged policy's estimates, then each candidate's."""
        estimates = [self.logged.estimates(LOGGED)]
        estimates[0].skipped = self.failures
        for name, candidate in self.candidates.items():
            found = candidate.sums.estimates(name, candidate.learned_from)
            found.skipped, found.clipped = candidate.skipped, candidate.clipped
            found.ips_difference = candidate.paired.ips()
            found.dr_difference = candidate.paired.dr()
            estimates.append(found)
        return estimates

    # ---------------------------------------------------------------- state log
    def to_json(self) -> JSON:
        data = {"format": 2, "started": self.started, "logged": self.logged.to_json(),
                "model": None if self.model is None else self.model.to_json(),
                "candidates": {name: c.to_json() for name, c in self.candidates.items()}}
        if self.failures:
            data["failures"] = self.failures
        return data

    @classmethod
    def from_json(cls, family_name: str, data: JSON) -> LiveOPE:
        """The state :meth:`to_json` wrote; a candidate that cannot be restored (its
        algorithm gone, its state unreadable) is dropped with an error in the log, not the
        partition's recovery."""
        sums = Sums.from_json if data.get("format") == 2 else Sums.from_raw
        candidates = {}
        for name, item in data["candidates"].items():
            try:
                config = item["config"]
                learner = learner_class(family_name, config["algorithm"]).from_state(
                    config["params"], item["state"])
                # (first logs: no paired sums, which start now)
                paired = Sums.from_json(item["paired"]) if "paired" in item else Sums()
                candidates[name] = Candidate(
                    family_name, config, item["born"], learner, sums(item["sums"]), paired,
                    item["learned"], item.get("skipped", 0), item.get("clipped", 0),
                    item["state"])
            except Exception:
                log.exception("live OPE: candidate %r cannot be restored; it is dropped "
                              "(configure it again to evaluate it afresh)", name)
        model = None if data["model"] is None else RewardModel.from_json(data["model"])
        return cls(family_name, data["started"], candidates, sums(data["logged"]), model,
                   data.get("failures", 0))
