"""A simulated candidate-set task: per request, a user and 5 to 50 items of a catalogue.

The graph_cb learners configured with ``action_features`` rank the candidates each request
offers (:mod:`banditflow.learners.graph_cb.candidates`); this task is their test bed, shared by
the unit tests, ``banditflow simulate --family graph_cb --candidates`` and the head-to-head
with Vowpal Wabbit (``tests/benchmarks/bench_graph_cb_vw.py``), so all three see the same
stream for a seed.

* A catalogue of ``items`` items (default 1,000), each a feature vector a ~ N(0, I / d_a);
  the last ``late_share`` of them (default 20 %) are released only ``late_from`` of the way
  into the stream (default 3/4): items first offered late, never seen by the learner before.
* A request: a user x ~ N(0, I_D) and ``min_candidates`` to ``max_candidates`` distinct
  released items drawn uniformly.
* A hidden preference: the score s(x, a) = x^T W a / sqrt(D) + v^T a (W, v standard normal),
  and the loss of item a is a Bernoulli draw of mean mu = 1 / (1 + exp(2 s)) (a click is loss
  0): the best item of a request is only recognisable from its features and the user's.
* ``graph_edge`` > 0 adds a random self-aware feedback graph over the request's candidates
  (playing i always reveals i, and each other j with that probability).

>>> task = CandidateTask(seed=3, rounds=100)
>>> request = task.request(0)
>>> 5 <= len(request.context["actions"]) <= 50, len(request.context["features"])
(True, 5)
>>> request.context["actions"][0]["id"].startswith("item-")
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Request:
    """One request: the context the application sends and what only it knows."""

    context: dict[str, Any]
    items: np.ndarray  # catalogue indices of the candidates, in the context's order
    means: np.ndarray  # each candidate's mean loss
    losses: np.ndarray  # each candidate's drawn loss (0 or 1)
    late: np.ndarray  # which candidates are late items (released late in the stream)
    graph: np.ndarray | None = None

    @property
    def best(self) -> int:
        return int(np.argmin(self.means))


@dataclass
class CandidateTask:
    """The task (module docstring); :meth:`request` ``t`` is a function of (seed, t)."""

    seed: int = 0
    rounds: int = 10_000
    items: int = 1_000
    user_dim: int = 5
    item_dim: int = 5
    min_candidates: int = 5
    max_candidates: int = 50
    late_share: float = 0.2
    late_from: float = 0.75
    graph_edge: float = 0.0
    catalogue: np.ndarray = field(init=False, repr=False)
    preference: np.ndarray = field(init=False, repr=False)
    popularity: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, 0xCA7])
        self.catalogue = rng.normal(size=(self.items, self.item_dim)) / np.sqrt(self.item_dim)
        self.preference = rng.normal(size=(self.user_dim, self.item_dim))
        self.popularity = rng.normal(size=self.item_dim)

    @property
    def params(self) -> dict[str, Any]:
        """The candidate-set form of a learner for this task."""
        params: dict[str, Any] = {"feature_dim": self.user_dim, "action_features": self.item_dim,
                                  "max_actions": self.max_candidates}
        if self.graph_edge <= 0.0:
            params["graph_kind"] = "bandit"
        return params

    @property
    def early_items(self) -> int:
        """Items 0 to early_items - 1 are offered from the start, the others late."""
        return self.items - round(self.late_share * self.items)

    def released(self, t: int) -> int:
        """How many catalogue items may be offered at round ``t``."""
        return self.items if t >= self.late_from * self.rounds else self.early_items

    def request(self, t: int) -> Request:
        rng = np.random.default_rng([self.seed, t])
        user = rng.normal(size=self.user_dim)
        count = int(rng.integers(self.min_candidates, self.max_candidates + 1))
        items = rng.choice(self.released(t), size=count, replace=False)
        features = self.catalogue[items]
        score = features @ (self.preference.T @ user) / np.sqrt(self.user_dim)
        score += features @ self.popularity
        means = 1.0 / (1.0 + np.exp(2.0 * score))
        losses = (rng.random(count) < means).astype(float)
        context: dict[str, Any] = {
            "features": [round(float(v), 6) for v in user],
            "actions": [{"id": f"item-{i}", "features": [round(float(v), 6) for v in row]}
                        for i, row in zip(items.tolist(), features, strict=True)],
        }
        graph = None
        if self.graph_edge > 0.0:
            graph = (rng.random((count, count)) < self.graph_edge).astype(float)
            np.fill_diagonal(graph, 1.0)
            context["graph"] = graph.tolist()
        return Request(context, items, means, losses, items >= self.early_items, graph)

    def feedback(self, request: Request, action: int) -> dict[str, float]:
        """The losses playing candidate ``action`` reveals, keyed by item id."""
        revealed = ([action] if request.graph is None
                    else np.flatnonzero(request.graph[action] > 0).tolist())
        actions = request.context["actions"]
        return {actions[j]["id"]: float(request.losses[j]) for j in revealed}


@dataclass
class CandidateAnswers:
    """The task as a simulated application answers it (``banditflow simulate --family
    graph_cb --candidates``): the revealed losses keyed by item id, and as ground truth every
    candidate's mean loss (the worker's exact regret: the expected loss of the decision's p
    minus the best candidate's)."""

    task: CandidateTask

    def feedback(self, request: Request, output: dict[str, Any],
                 rng: np.random.Generator) -> list[dict[str, Any]]:
        return [{"losses": self.task.feedback(request, int(output["action"]))}]

    def truth(self, request: Request, output: dict[str, Any]) -> dict[str, Any]:
        return {"all_losses": {str(j): float(m) for j, m in enumerate(request.means)}}


def candidate_traffic(events: int, seed: int) -> Any:
    """``events`` requests of the task as a family's traffic
    (:class:`banditflow.offline.environments.Traffic`), for ``banditflow simulate``."""
    from banditflow.offline.environments import Traffic

    task = CandidateTask(seed=seed, rounds=events)
    return Traffic(CandidateAnswers(task),
                   lambda algorithm: {**task.params, "update": "rls"},
                   [task.request(t) for t in range(events)])
