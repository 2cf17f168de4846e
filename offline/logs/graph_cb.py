"""graph_cb logs: bandit problems with feedback graphs built from bundled data or simulated.

Every line is ``{"event_id", "features": [...], "losses": [K losses in [-1, 1]]}``, plus
``"graph": K x K`` on logs whose graph changes per round (or is part of the problem, as apple
tasting's); ``banditflow evaluate --family graph_cb`` reads them (without a line graph it needs
``--graph``/``--graph-kind``). Nothing is downloaded: the data sets ship with scikit-learn.

* ``graph_cb-digits``: scikit-learn's handwritten digits (1,797 images, 8 x 8 pixels scaled to
  [0, 1], K = 10 classes, the largest K of a multiclass data set bundled with scikit-learn)
  as a bandit problem: loss 0 for the right class, 1 otherwise (the paper's RCV1 loss). Rounds
  go through the images in seeded permutations, one epoch after the other, so rounds beyond
  1,797 revisit images (progressive validation is then slightly optimistic).
* ``graph_cb-digits-random``: the same with a random directed self-aware graph per round
  (diagonal 1, each off-diagonal entry 1 with probability 3/4), the paper's Section 5.2.
* ``graph_cb-multilabel``: a K = 50 multi-label text-like problem standing in for the
  paper's RCV1 (K = 50): scikit-learn's ``make_multilabel_classification`` (bag-of-words
  counts over 100 "words", 50 topics, 3 topics per document on average, a fresh document
  per round), features L2-normalised as tf vectors are; loss 0 if the chosen topic is one of
  the document's, 1 otherwise (the paper's RCV1 loss).
* ``graph_cb-spam``: an apple-tasting spam filter. scikit-learn's breast-cancer data (569
  cases, 30 standardised features) stands in for a spam corpus: malignant = "spam" (37 %),
  benign = "ham". Action 0 = *inspect* (quarantine the message for a human, who labels it:
  both losses are revealed), action 1 = *let through* (delivered, nobody reports back: nothing
  is revealed). Loss: inspecting ham 1, letting spam through 1, else 0 (0/1 classification
  loss). Graph ``[[1, 1], [0, 0]]`` on every line.
* ``graph_cb-inventory-K`` (K = 101, 301, 501): the paper's synthetic inventory problem,
  x ~ N(0, 0.1^2 I_100), demand d = x.theta + eps with eps ~ N(0.3, 0.1^2) and theta ~
  N(0, I/100) (fixed per seed; the context then explains about half of the demand variance),
  min-max normalised over the log; level i of K stocks a_i = i / (K - 1) and loses
  ``h max(a - d, 0) + b max(d - a, 0)`` with h = 0.25, b = 1. Use ``--graph-kind inventory``
  (level i reveals every level j <= i).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np

INVENTORY_DIM = 100
INVENTORY_HOLDING = 0.25
INVENTORY_BACKORDER = 1.0
RANDOM_GRAPH_EDGE = 0.75
APPLE_TASTING = [[1.0, 1.0], [0.0, 0.0]]
MULTILABEL_WORDS = 100
MULTILABEL_TOPICS = 50


def _epochs(size: int, rounds: int, rng: np.random.Generator) -> Iterator[int]:
    """``rounds`` indices into a data set of ``size`` rows: seeded permutations, back to back."""
    produced = 0
    while produced < rounds:
        for index in rng.permutation(size)[: rounds - produced]:
            yield int(index)
            produced += 1


def _write(out: Path, lines: Iterator[dict]) -> int:
    count = 0
    with open(out, "w") as log:
        for line in lines:
            log.write(json.dumps(line, separators=(",", ":")) + "\n")
            count += 1
    return count


def random_self_aware_graph(actions: int, rng: np.random.Generator,
                            edge: float = RANDOM_GRAPH_EDGE) -> np.ndarray:
    """A random directed self-aware graph: diagonal 1, off-diagonal entries Bernoulli(edge)."""
    graph = (rng.random((actions, actions)) < edge).astype(float)
    np.fill_diagonal(graph, 1.0)
    return graph


def digits(out: Path, rounds: int, seed: int, random_graphs: bool = False) -> str:
    """Digits as a K = 10 bandit problem (see the module docstring)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    features = data.data / 16.0
    classes = int(data.target.max()) + 1
    rng = np.random.default_rng(seed)

    def lines() -> Iterator[dict]:
        for t, i in enumerate(_epochs(len(features), rounds, rng)):
            losses = np.ones(classes)
            losses[int(data.target[i])] = 0.0
            line = {"event_id": f"d{t}", "features": features[i].round(4).tolist(),
                    "losses": losses.tolist()}
            if random_graphs:
                line["graph"] = random_self_aware_graph(classes, rng).tolist()
            yield line

    written = _write(out, lines())
    graphs = ("a random self-aware graph per line (off-diagonal Bernoulli(3/4))"
              if random_graphs else "no graph (pass --graph-kind)")
    return (f"{written} rounds of sklearn digits ({len(features)} images, 64 features, "
            f"K = {classes}), loss 0 for the right class else 1; {graphs}")


def spam(out: Path, rounds: int, seed: int) -> str:
    """Apple tasting on breast cancer as the spam stand-in (see the module docstring)."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    features = (data.data - data.data.mean(axis=0)) / data.data.std(axis=0)
    is_spam = data.target == 0  # malignant plays spam
    rng = np.random.default_rng(seed)

    def lines() -> Iterator[dict]:
        for t, i in enumerate(_epochs(len(features), rounds, rng)):
            losses = [0.0, 1.0] if is_spam[i] else [1.0, 0.0]  # (inspect, let through)
            yield {"event_id": f"s{t}", "features": features[i].round(4).tolist(),
                   "losses": losses, "graph": APPLE_TASTING}

    written = _write(out, lines())
    return (f"{written} rounds of apple tasting on sklearn breast_cancer ({is_spam.mean():.0%} "
            "'spam'), actions (inspect: reveals both, let through: reveals nothing), 0/1 loss")


def inventory_losses(demand: np.ndarray, levels: int, holding: float = INVENTORY_HOLDING,
                     backorder: float = INVENTORY_BACKORDER) -> np.ndarray:
    """rounds x levels losses ``h max(a - d, 0) + b max(d - a, 0)``, a = i / (levels - 1)."""
    stock = np.linspace(0.0, 1.0, levels)[None, :]
    d = np.asarray(demand, dtype=float)[:, None]
    return holding * np.maximum(stock - d, 0.0) + backorder * np.maximum(d - stock, 0.0)


def inventory(out: Path, rounds: int, seed: int, levels: int = 101) -> str:
    """The paper's synthetic inventory problem with ``levels`` actions (module docstring)."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=INVENTORY_DIM) / np.sqrt(INVENTORY_DIM)
    contexts = rng.normal(0.0, 0.1, size=(rounds, INVENTORY_DIM))
    demand = contexts @ theta + rng.normal(0.3, 0.1, size=rounds)
    demand = (demand - demand.min()) / max(demand.max() - demand.min(), 1e-12)
    losses = inventory_losses(demand, levels)

    def lines() -> Iterator[dict]:
        for t in range(rounds):
            yield {"event_id": f"i{t}", "features": contexts[t].round(5).tolist(),
                   "losses": losses[t].round(5).tolist()}

    written = _write(out, lines())
    return (f"{written} rounds of synthetic inventory, K = {levels} levels, 100 features, "
            f"h = {INVENTORY_HOLDING}, b = {INVENTORY_BACKORDER}; use --graph-kind inventory")


def multilabel(out: Path, rounds: int, seed: int) -> str:
    """A K = 50 multi-label problem (see the module docstring)."""
    from sklearn.datasets import make_multilabel_classification

    counts, topics = make_multilabel_classification(
        n_samples=rounds, n_features=MULTILABEL_WORDS, n_classes=MULTILABEL_TOPICS, n_labels=3,
        allow_unlabeled=False, random_state=seed,
    )
    features = counts / np.maximum(np.linalg.norm(counts, axis=1, keepdims=True), 1e-12)

    def lines() -> Iterator[dict]:
        for t in range(rounds):
            yield {"event_id": f"m{t}", "features": features[t].round(4).tolist(),
                   "losses": (1.0 - topics[t]).tolist()}

    written = _write(out, lines())
    return (f"{written} rounds of a synthetic multi-label problem ({MULTILABEL_WORDS} word "
            f"counts, K = {MULTILABEL_TOPICS} topics, {topics.sum(axis=1).mean():.1f} per "
            "document), loss 0 for any of the document's topics else 1; no graph "
            "(pass --graph-kind)")


LOGS: dict[str, Callable[[Path, int, int], str]] = {
    "graph_cb-multilabel": multilabel,
    "graph_cb-digits": digits,
    "graph_cb-digits-random": partial(digits, random_graphs=True),
    "graph_cb-spam": spam,
    **{f"graph_cb-inventory-{k}": partial(inventory, levels=k) for k in (101, 301, 501)},
}
