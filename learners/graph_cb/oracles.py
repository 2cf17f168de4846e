"""Online regression oracles: predict every action's loss, learn from (x, action, loss).

:class:`LinearOracle` covers both feature layouts of a graph_cb context:

* ``shared``: one feature vector x for the event, one weight vector per action,
  ``fhat_a = <w_a, x>``;
* ``per_action``: one feature vector x_a per action, one shared weight vector,
  ``fhat_a = <w, x_a>``.

Updates are unweighted square-loss steps, either online gradient descent (``sgd``, constant
learning rate) or recursive least squares (``rls``, exact online ridge regression; keeps a
D x D inverse Gram matrix per weight vector). Predictions are clipped to the loss range
[-1, 1].

>>> import numpy as np
>>> from learners.graph_cb.oracles import LinearOracle
>>> oracle = LinearOracle(actions=2, feature_dim=1, layout="shared", update="rls")
>>> for x in np.linspace(-1, 1, 500):
...     oracle.update([x], 0, 0.5 * x)
...     oracle.update([x], 1, -0.5 * x)
>>> oracle.predict([0.8]).round(2).tolist()
[0.4, -0.4]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from learners.base import JSON, LearnerError

LAYOUTS = ("shared", "per_action")
UPDATES = ("sgd", "rls")


class LinearOracle:
    """Linear loss regression for K actions on D features (+ a bias feature if ``bias``)."""

    def __init__(
        self,
        actions: int,
        feature_dim: int,
        layout: str = "shared",
        update: str = "sgd",
        learning_rate: float = 0.1,
        ridge: float = 1.0,
        bias: bool = True,
    ) -> None:
        if layout not in LAYOUTS:
            raise LearnerError(
                f"parameter 'feature_layout' must be one of {LAYOUTS}, got {layout!r}"
            )
        if update not in UPDATES:
            raise LearnerError(f"parameter 'update' must be one of {UPDATES}, got {update!r}")
        if feature_dim < 1:
            raise LearnerError(f"parameter 'feature_dim' must be >= 1, got {feature_dim}")
        if learning_rate <= 0.0 or ridge <= 0.0:
            raise LearnerError("parameters 'learning_rate' and 'ridge' must be positive")
        self.actions = actions
        self.feature_dim = feature_dim
        self.layout = layout
        self.update_rule = update
        self.learning_rate = learning_rate
        self.ridge = ridge
        self.bias = bias
        size = feature_dim + int(bias)
        rows = actions if layout == "shared" else 1
        self.weights = np.zeros((rows, size))
        self.inverse_gram = (
            np.repeat(np.eye(size)[None] / ridge, rows, axis=0) if update == "rls" else None
        )
        self.updates = 0

    def features(self, x: Sequence[Any] | np.ndarray) -> np.ndarray:
        """The validated feature array of one context (D or K x D), bias column appended."""
        try:
            array = np.asarray(x, dtype=float)
        except (TypeError, ValueError) as exc:
            raise LearnerError(f"'features' must be numbers: {exc}") from exc
        expected: tuple[int, ...] = (self.feature_dim,)
        if self.layout == "per_action":
            expected = (self.actions, self.feature_dim)
        if array.shape != expected:
            raise LearnerError(
                f"'features' must have shape {expected} ({self.layout} layout), got {array.shape}"
            )
        if not np.all(np.isfinite(array)):
            raise LearnerError("'features' must be finite")
        if self.bias:
            array = np.concatenate([array, np.ones((*array.shape[:-1], 1))], axis=-1)
        return array

    def predict(self, x: Sequence[Any] | np.ndarray) -> np.ndarray:
        """Predicted losses of the K actions, clipped to [-1, 1]."""
        array = self.features(x)
        raw = self.weights @ array if self.layout == "shared" else array @ self.weights[0]
        return np.clip(raw, -1.0, 1.0)

    def update(self, x: Sequence[Any] | np.ndarray, action: int, loss: float) -> None:
        """One unweighted square-loss example: action ``action`` had loss ``loss`` at ``x``."""
        array = self.features(x)
        row, vector = (action, array) if self.layout == "shared" else (0, array[action])
        residual = float(self.weights[row] @ vector) - loss
        if self.inverse_gram is None:
            self.weights[row] -= self.learning_rate * residual * vector
        else:
            inverse = self.inverse_gram[row]
            direction = inverse @ vector
            gain = direction / (1.0 + vector @ direction)
            self.weights[row] -= residual * gain
            inverse -= np.outer(gain, direction)
        self.updates += 1

    def to_state(self) -> JSON:
        """Weights (and inverse Gram matrices) as nested lists."""
        return {
            "weights": self.weights.tolist(),
            "inverse_gram": None if self.inverse_gram is None else self.inverse_gram.tolist(),
            "updates": self.updates,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`to_state` output (shapes are checked against the parameters)."""
        weights = np.array(state["weights"], dtype=float)
        if weights.shape != self.weights.shape:
            raise LearnerError(
                f"oracle state has weights {weights.shape}, expected {self.weights.shape}"
            )
        self.weights = weights
        if self.inverse_gram is not None:
            self.inverse_gram = np.array(state["inverse_gram"], dtype=float)
        self.updates = int(state["updates"])
