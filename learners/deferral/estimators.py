"""Online per-arm estimates of the deferral family, with compact, exactly round-tripping state.

An :class:`Arm` keeps the regularised Gram inverse ``(ridge I + sum x x^T)^{-1}`` of the
contexts it was observed on (Sherman-Morrison updates) for the confidence width
``||x||_{M^{-1}}``, and one :class:`Estimate` per quantity observed on it (the model: its
reward; the human: reward and cost):

- ``identity`` link: ridge regression, ``theta = M^{-1} b`` with ``b = sum y x`` (exact least
  squares, additive sufficient statistics).
- ``logistic`` link: the GLM maximum-likelihood estimate, approximated online by one Newton
  (Laplace) step per observation with its own precision ``ridge I + sum mu'(x.theta) x x^T``;
  a stream cannot keep the history that the exact MLE needs.

>>> import numpy as np
>>> from banditflow.learners.deferral.estimators import Arm
>>> arm = Arm.fresh(dim=2, ridge=1.0, links={"reward": "identity"})
>>> for x, y in [([1.0, 0.0], 1.0), ([0.0, 1.0], 0.0), ([1.0, 0.0], 1.0)]:
...     arm.update(np.array(x), {"reward": y})
>>> round(arm.estimates["reward"].mean(np.array([1.0, 0.0]), arm.gram_inverse), 4)
0.6667
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

LINKS = ("identity", "logistic")
MIN_CURVATURE = 1e-6  # floor of mu'(z) in the logistic Newton step (keeps the precision finite)


def link_mean(link: str, z: float) -> float:
    """mu(z): the identity or the logistic function (overflow-safe)."""
    if link == "identity":
        return z
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    exp_z = math.exp(z)
    return exp_z / (1.0 + exp_z)


def sherman_morrison(inverse: np.ndarray, x: np.ndarray, weight: float = 1.0) -> np.ndarray:
    """(A + weight x x^T)^{-1} from A^{-1}; symmetric by construction."""
    projected = inverse @ x
    return inverse - np.outer(projected, projected) * (weight / (1.0 + weight * (x @ projected)))


class Estimate:
    """One quantity's estimate on one arm: ridge (identity link) or online-Newton GLM."""

    def __init__(
        self,
        link: str,
        vector: np.ndarray,
        precision_inverse: np.ndarray | None = None,
    ) -> None:
        self.link = link
        # identity: vector is b = sum y x; logistic: vector is theta itself.
        self.vector = vector
        self.precision_inverse = precision_inverse

    @classmethod
    def fresh(cls, link: str, dim: int, ridge: float) -> Estimate:
        if link == "identity":
            return cls(link, np.zeros(dim))
        return cls(link, np.zeros(dim), np.eye(dim) / ridge)

    def theta(self, gram_inverse: np.ndarray) -> np.ndarray:
        """The point estimate (``gram_inverse`` is the arm's, used by the ridge estimate)."""
        return gram_inverse @ self.vector if self.link == "identity" else self.vector

    def mean(self, x: np.ndarray, gram_inverse: np.ndarray, shift: float = 0.0) -> float:
        """mu(x.theta_hat + shift): ``shift`` is the optimistic or pessimistic bonus."""
        return link_mean(self.link, float(x @ self.theta(gram_inverse)) + shift)

    def update(self, x: np.ndarray, y: float) -> None:
        if self.link == "identity":
            self.vector = self.vector + y * x
            return
        assert self.precision_inverse is not None
        predicted = link_mean("logistic", float(x @ self.vector))
        curvature = max(predicted * (1.0 - predicted), MIN_CURVATURE)
        self.precision_inverse = sherman_morrison(self.precision_inverse, x, curvature)
        self.vector = self.vector + self.precision_inverse @ x * (y - predicted)

    def to_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"link": self.link, "vector": self.vector.tolist()}
        if self.precision_inverse is not None:
            state["precision_inverse"] = self.precision_inverse.tolist()
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Estimate:
        precision = state.get("precision_inverse")
        return cls(
            str(state["link"]),
            np.array(state["vector"], dtype=float),
            None if precision is None else np.array(precision, dtype=float),
        )


class Arm:
    """One arm's Gram inverse, observation count and estimates (keyed by quantity name)."""

    def __init__(self, gram_inverse: np.ndarray, count: int, estimates: dict[str, Estimate]):
        self.gram_inverse = gram_inverse
        self.count = count
        self.estimates = estimates

    @classmethod
    def fresh(cls, dim: int, ridge: float, links: Mapping[str, str]) -> Arm:
        estimates = {name: Estimate.fresh(link, dim, ridge) for name, link in links.items()}
        return cls(np.eye(dim) / ridge, 0, estimates)

    def width(self, x: np.ndarray) -> float:
        """||x||_{M^{-1}}."""
        return math.sqrt(max(float(x @ self.gram_inverse @ x), 0.0))

    def update(self, x: np.ndarray, targets: Mapping[str, float]) -> None:
        """One observation of every quantity of this arm on context ``x``."""
        self.gram_inverse = sherman_morrison(self.gram_inverse, x)
        self.count += 1
        for name, y in targets.items():
            self.estimates[name].update(x, y)

    def to_state(self) -> dict[str, Any]:
        return {
            "gram_inverse": self.gram_inverse.tolist(),
            "count": self.count,
            "estimates": {name: est.to_state() for name, est in self.estimates.items()},
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`to_state` output."""
        self.gram_inverse = np.array(state["gram_inverse"], dtype=float)
        self.count = int(state["count"])
        self.estimates = {name: Estimate.from_state(est)
                          for name, est in state["estimates"].items()}
