"""Shared event handling of the graph_cb family.

Every algorithm predicts the K losses with a regression oracle, picks a gamma from its
schedule, turns ``(fhat, G, gamma)`` into a distribution p (the only part subclasses must
implement: :meth:`GraphCBLearner.distribution`; :meth:`GraphCBLearner.decision`, p with its
dec and the action drawn from ``rng``, may be overridden to compute the three in one
compiled call, as SquareCB does), and later trains the oracle once on every revealed loss
(unweighted square loss, no importance weights).

Parameters common to all algorithms (declared in :mod:`banditflow.learners.graph_cb.params`):

* ``actions`` K (optional when ``graph`` is given); ``graph`` (K x K list, ``G[a][j]`` = P(a
  reveals j)) or ``graph_kind`` (bandit, full, cops_and_robbers, apple_tasting, inventory);
  without either, every context must carry its own ``graph``;
* oracle: ``feature_dim`` D (required), ``feature_layout`` (``shared``: one vector per event,
  ``per_action``: one vector per action), ``update`` (``sgd`` or ``rls``), ``learning_rate``
  (sgd, default 0.1), ``ridge`` (rls prior, default 1), ``bias`` (default true); ``oracle``
  (``linear``, default, or ``neural``: a torch network, with ``hidden_size``,
  ``learning_rate`` and ``oracle_seed``, see :meth:`GraphCBLearner._oracle`);
* schedule: ``gamma_schedule`` and its settings (:mod:`banditflow.learners.graph_cb.schedules`);
* ``initial_oracle``: an oracle state (its ``to_state``, e.g. trained on logged rounds by
  ``banditflow warm-start``) the learner starts from instead of an untrained oracle; its
  schedule starts afresh.

Events: context ``{"features": [...] or [[...] per action], "graph": optional K x K}``;
feedback ``{"losses": {"<action index>": loss in [-1, 1], ...}}`` with the losses the graph
revealed; a timeout is no observation. The decision output carries ``action``, ``p``,
``gamma`` and ``dec`` (dec of p under the event's graph; None when infinite).

**Candidate sets.** With ``action_features`` the learner takes the other form: each context
offers its own candidates, ``"actions": [{"id", "features"}, ...]``, scored by one regressor
on (context, candidate) pair features; the output adds ``action_id`` and ``p`` is over the
event's candidates; feedback may key losses by id (:mod:`banditflow.learners.graph_cb.candidates`).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from banditflow.learners.base import (
    JSON,
    ContradictingFeedback,
    Decided,
    Learned,
    Learner,
    LearnerError,
    LoggedExample,
    Stats,
    add_stat,
)
from banditflow.learners.declared import Declared, State
from banditflow.learners.graph_cb import kernels
from banditflow.learners.graph_cb.candidates import CandidateForm, candidate_index
from banditflow.learners.graph_cb.graphs import as_graph, independence_number, named_graph
from banditflow.learners.graph_cb.oracles import (
    NEURAL_HIDDEN_SIZE,
    NEURAL_LEARNING_RATE,
    LinearOracle,
    NeuralOracle,
    Oracle,
)
from banditflow.learners.graph_cb.params import MAX_ACTIONS, GraphCBParams
from banditflow.learners.graph_cb.schedules import GammaSchedule


@dataclass(kw_only=True)
class GraphCBState(State):
    oracle: Oracle
    schedule: GammaSchedule


class GraphCBLearner(Declared, Learner):
    """Base of the graph_cb family; subclasses choose p from (fhat, G, gamma)."""

    family: ClassVar[str] = "graph_cb"
    Params = GraphCBParams
    State = GraphCBState

    def __init__(self, params: GraphCBParams) -> None:
        self.params = params
        self.graph: np.ndarray | None = None
        self.form: CandidateForm | None = None  # None: the fixed-K form
        if params.action_features is not None:
            self.form = CandidateForm(feature_dim=params.feature_dim or 0,
                                      action_features=params.action_features,
                                      max_actions=params.max_actions)
            oracle = self._oracle(params, self.form.max_actions, "pairs", self.form.pair_dim)
            if params.graph_kind is not None:
                named_graph(params.graph_kind, 1)  # (a bad name: refused now)
        else:
            if params.graph is not None:
                self.graph = as_graph(params.graph)
            actions = params.actions
            if actions is None:
                if self.graph is None:
                    raise LearnerError("parameter 'actions' is required")
                actions = self.graph.shape[0]
                if actions > MAX_ACTIONS:
                    raise LearnerError(
                        f"parameter 'actions' must be at most {MAX_ACTIONS}, got {actions}")
            if self.graph is not None and self.graph.shape[0] != actions:
                raise LearnerError(
                    f"'graph' has {self.graph.shape[0]} actions but 'actions' is {actions}")
            if params.graph_kind is not None:
                self.graph = named_graph(params.graph_kind, actions)
            assert params.feature_dim is not None  # (required in this form: GraphCBParams)
            oracle = self._oracle(params, actions, params.feature_layout or "shared",
                                  params.feature_dim)
        if params.initial_oracle is not None:
            try:
                oracle.load_state(params.initial_oracle)
            except (KeyError, TypeError, ValueError) as exc:  # (LearnerError is a ValueError)
                raise LearnerError(f"parameter 'initial_oracle' is not a state of this "
                                   f"oracle: {exc}") from None
        self.oracle = oracle
        self.actions = oracle.actions
        self.graph_alpha = None if self.graph is None else independence_number(self.graph)
        self.schedule = GammaSchedule(params.gamma_schedule, params.schedule_settings())

    @staticmethod
    def _oracle(params: GraphCBParams, actions: int, layout: str, feature_dim: int) -> Oracle:
        """The regression oracle parameter ``oracle`` chooses, on ``feature_dim`` features in
        ``layout`` (``pairs``: one regressor on pair features, for up to ``actions``
        candidates).

        ``linear``: ``update`` (sgd | rls), ``learning_rate`` (0.1), ``ridge`` (1), ``bias``.
        ``neural`` (needs torch, the ``neural`` extra): ``hidden_size`` (default 32; 0 is the
        paper's ``sigmoid((M x)_a)``), ``learning_rate`` (default 0.5), ``bias``,
        ``oracle_seed`` (seed of the initial weights, default 0).
        """
        if params.oracle == "linear":
            return LinearOracle(
                actions=actions, feature_dim=feature_dim, layout=layout, update=params.update,
                learning_rate=0.1 if params.learning_rate is None else params.learning_rate,
                ridge=1.0 if params.ridge is None else params.ridge, bias=params.bias,
            )
        return NeuralOracle(
            actions=actions, feature_dim=feature_dim, layout=layout,
            hidden_size=(NEURAL_HIDDEN_SIZE if params.hidden_size is None
                         else params.hidden_size),
            learning_rate=(NEURAL_LEARNING_RATE if params.learning_rate is None
                           else params.learning_rate),
            bias=params.bias, seed=0 if params.oracle_seed is None else params.oracle_seed,
        )

    @abstractmethod
    def distribution(
        self, fhat: np.ndarray, graph: np.ndarray, gamma: float
    ) -> tuple[np.ndarray, float]:
        """The action distribution p and dec(p) for predicted losses ``fhat``."""

    def decision(self, fhat: np.ndarray, graph: np.ndarray, gamma: float,
                 rng: np.random.Generator) -> tuple[np.ndarray, float, int]:
        """p (:meth:`distribution`), dec(p) and the action drawn from p with ``rng``; an
        algorithm may compute the three in one compiled call."""
        p, dec = self.distribution(fhat, graph, gamma)
        return p, dec, sample(p, rng)

    def exploration_alpha(self, graph: np.ndarray, per_event: bool) -> int:
        """The independence number the sqrt_alpha schedule scales with."""
        if per_event or self.graph_alpha is None:
            return independence_number(graph)
        return self.graph_alpha

    def decide(self, context: Mapping[str, Any], rng: np.random.Generator) -> Decided:
        if self.form is not None:
            return self._decide_among(context, rng)
        features = context.get("features")
        if features is None:
            raise LearnerError("a graph_cb context needs 'features'")
        if context.get("actions") is not None:
            raise LearnerError("'actions' (candidates) given, but the learner has a fixed K "
                               "(configure 'action_features' for candidate sets)")
        per_event = context.get("graph") is not None
        if per_event:
            graph = as_graph(context["graph"], self.actions)
        elif self.graph is None:
            raise LearnerError("no feedback graph: set parameter 'graph'/'graph_kind' or send "
                               "'graph' with every context")
        else:
            graph = self.graph
        output, pending = self._decided(self.oracle.predict(features), graph, per_event, rng)
        pending["features"] = features
        if per_event:
            pending["graph"] = graph.tolist()
        return Decided(output=output, pending=pending)

    def _decide_among(self, context: Mapping[str, Any], rng: np.random.Generator) -> Decided:
        """A decision over the context's own candidates (the candidate-set form)."""
        assert self.form is not None
        features = context.get("features")
        shared = self.form.shared(features)
        offered = self.form.offered(context.get("actions"))
        graph = self.event_graph(context.get("graph"), len(offered.ids))
        fhat = self.oracle.predict_pairs(shared, offered.features)
        output, pending = self._decided(fhat, graph, True, rng)
        output["action_id"] = offered.ids[output["action"]]
        # The candidates' and the shared features as the context gave them (JSON lists),
        # validated above: learn converts the rows it needs.
        pending |= {"features": features if type(features) in (list, tuple) else shared.tolist(),
                    "ids": offered.ids, "candidates": offered.rows}
        if context.get("graph") is not None:
            pending["graph"] = graph.tolist()
        return Decided(output=output, pending=pending)

    def event_graph(self, given: Any, candidates: int) -> np.ndarray:
        """A candidate set's graph: the context's, else the ``graph_kind`` over its size."""
        if given is not None:
            return as_graph(given, candidates)
        if self.params.graph_kind is None:
            raise LearnerError("no feedback graph: set parameter 'graph_kind' or send 'graph' "
                               "with every context")
        return named_graph(self.params.graph_kind, candidates)

    def _decided(self, fhat: np.ndarray, graph: np.ndarray, per_event: bool,
                 rng: np.random.Generator) -> tuple[JSON, JSON]:
        """The output and pending state of a decision on predicted losses ``fhat``."""
        gamma = self.schedule.gamma(self.exploration_alpha(graph, per_event))
        p, dec, action = self.decision(fhat, graph, gamma, rng)
        self.schedule.record_decision(dec)
        output = {
            "action": action,
            "p": p.tolist(),
            "gamma": gamma,
            "dec": dec if math.isfinite(dec) else None,
        }
        return output, {"action": action, "p": output["p"], "gamma": gamma}

    def learn(self, pending: Mapping[str, Any], feedback: Mapping[str, Any]) -> Learned:
        revealed = self._revealed_losses(pending, feedback)
        if self.form is None:
            for action, loss in revealed.items():
                self.oracle.update(pending["features"], action, loss)
        else:  # only the revealed candidates' pair features
            shared = np.asarray(pending["features"], dtype=float)
            for action, loss in revealed.items():
                self.oracle.update_pair(
                    shared, np.asarray(pending["candidates"][action], dtype=float), loss)
        self.schedule.record_learn()
        metrics = {"revealed": float(len(revealed))}
        played = int(pending["action"])
        if played in revealed:
            metrics["loss"] = revealed[played]  # its mean is the family's mean_loss gauge
        return Learned(done=True, metrics=metrics)

    def _revealed_losses(
        self, pending: Mapping[str, Any], feedback: Mapping[str, Any]
    ) -> dict[int, float]:
        """The feedback's losses by action, all validated before any is used."""
        losses = feedback.get("losses")
        if not isinstance(losses, Mapping):
            raise LearnerError("graph_cb feedback needs 'losses': {action index: loss}")
        graph = self.graph if pending.get("graph") is None else np.asarray(pending["graph"])
        ids = None
        if self.form is not None:
            ids = pending["ids"]
            if pending.get("graph") is None:
                graph = self.event_graph(None, len(ids))
        played = int(pending["action"])
        revealed: dict[int, float] = {}
        for key, value in losses.items():
            if ids is not None:
                action = candidate_index(ids, str(key))
            try:
                loss = float(value)
                if ids is None:
                    action = int(key)
            except (TypeError, ValueError) as exc:
                raise LearnerError(f"bad revealed loss {key!r}: {value!r}") from exc
            if ids is None and not 0 <= action < self.actions:
                raise ContradictingFeedback(
                    f"revealed action {action} is not in [0, {self.actions})"
                )
            if not -1.0 <= loss <= 1.0:
                raise LearnerError(f"loss of action {action} must lie in [-1, 1], got {loss}")
            if graph is not None and graph[played, action] <= 0.0:
                raise ContradictingFeedback(
                    f"playing {played} cannot reveal action {action}"
                    f"{'' if ids is None else f' ({ids[action]!r})'} (G = 0)"
                )
            if ids is not None and action in revealed:
                raise LearnerError(f"two losses for action {action} (by id and by index)")
            revealed[action] = loss
        return revealed

    def expire(self, pending: Mapping[str, Any]) -> Learned:
        return Learned(done=True, metrics={"timed_out": 1.0})

    @classmethod
    def warm_params(
        cls, params: Mapping[str, Any], logged: Iterable[LoggedExample]
    ) -> dict[str, Any]:
        """``params`` with ``initial_oracle``: the regression oracle trained on ``logged``.

        The oracle learns every revealed loss without importance weights (the square loss
        of a revealed action is an unbiased target whatever policy chose it), so training on
        another policy's rounds is the family's own update: the played action's loss (minus
        its reward), and the losses of the other actions the feedback revealed when this
        learner's graph lets the played action reveal them. The exploration schedule starts
        afresh.
        """
        fresh = {k: v for k, v in params.items() if k != "initial_oracle"}
        learner = cls.from_params(fresh)
        if learner.form is not None:
            for example in logged:
                learner.learn(*learner._as_learned(example))
            return {**fresh, "initial_oracle": learner.to_state()["oracle"]}
        graph = learner.graph
        for example in logged:
            losses = {str(example.action): -example.reward}
            if graph is not None:
                losses |= {str(a): -reward for a, reward in example.revealed.items()
                           if a < learner.actions and graph[example.action, a] > 0}
            learner.learn({"features": example.features, "action": example.action},
                          {"losses": losses})
        return {**fresh, "initial_oracle": learner.to_state()["oracle"]}

    def _as_learned(self, example: LoggedExample) -> tuple[JSON, JSON]:
        """The pending state and feedback of a logged candidate-set round: the played
        candidate's loss, and those of the others it revealed when the learner's
        ``graph_kind`` lets the played one reveal them (a logged per-event graph is not kept)."""
        candidates = example.candidates or []
        ids = [str(c["id"]) for c in candidates]
        kind = self.params.graph_kind
        graph = np.eye(len(ids)) if kind is None else named_graph(kind, len(ids))
        losses = {ids[example.action]: -example.reward}
        losses |= {ids[a]: -reward for a, reward in example.revealed.items()
                   if a < len(ids) and graph[example.action, a] > 0}
        pending = {"features": example.features or [], "ids": ids,
                   "candidates": [c["features"] for c in candidates], "action": example.action,
                   "graph": graph.tolist()}
        return pending, {"losses": losses}

    @classmethod
    def stats_on_truth(
        cls,
        stats: Stats,
        output: Mapping[str, Any],
        truth: Mapping[str, Any],
        params: Mapping[str, Any],
    ) -> None:
        """Exact regret of a decision from every action's loss: the expected loss of the
        played distribution p minus the best action's (p, not the sampled action, so the
        exploration the learner chose counts and the sampling noise does not)."""
        losses = truth.get("all_losses")
        if not losses:
            return
        p = output["p"]
        expected = sum(p[int(a)] * float(loss) for a, loss in losses.items() if int(a) < len(p))
        add_stat(stats, "regret_exact", expected - min(float(v) for v in losses.values()))

    @classmethod
    def stats_gauges(
        cls, stats: Stats, summary: Mapping[str, Any], values: dict[str, Any]
    ) -> None:
        if "regret_exact" in stats:
            values["regret_exact"] = stats["regret_exact"]

    def summary(self) -> dict[str, float | list[float]]:
        """Decisions made; the progressive-validation loss (``mean_loss``) is averaged by
        the processors' statistics from each ``learn``'s ``loss`` metric."""
        return {"decisions": float(self.schedule.decisions)}


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """An index drawn from distribution ``p``: exactly ``rng.choice(len(p), p=p)`` (the same
    uniform draw and inverse-CDF search, :func:`~banditflow.learners.graph_cb.kernels.draw`),
    without its argument checks, which cost more than the rest of a small decision (``p`` is
    a distribution by construction)."""
    return int(kernels.draw(np.ascontiguousarray(p, dtype=float), rng.random()))
