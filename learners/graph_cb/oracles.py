"""Online regression oracles: predict every action's loss, learn from (x, action, loss).

:class:`LinearOracle` covers both feature layouts of a graph_cb context:

* ``shared``: one feature vector x for the event, one weight vector per action,
  ``fhat_a = <w_a, x>``;
* ``per_action``: one feature vector x_a per action, one shared weight vector,
  ``fhat_a = <w, x_a>``;
* ``pairs`` (not a parameter: a learner with ``action_features`` builds it, see
  :mod:`banditflow.learners.graph_cb.candidates`): as ``per_action``, on the features of each
  (context, candidate) pair, for 1 to ``actions`` candidates an event; ``predict_pairs`` and
  ``update_pair`` take the shared and the candidates' features and never build the pair
  features of a whole set (:mod:`banditflow.learners.graph_cb.kernels`).

Updates are unweighted square-loss steps, either online gradient descent (``sgd``, constant
learning rate) or recursive least squares (``rls``, online ridge regression; keeps a D x D
inverse Gram matrix per weight vector).

Predictions are clipped to the range of the losses seen so far ([-1, 1] until two different
losses have been seen), and every update is a step on the square loss **of the clipped
prediction**: an example already predicted beyond the observed range on its own side (e.g.
below 0 for a loss of 0) costs nothing and does not move the weights (``rls`` still counts
it in its Gram matrix). With 0/1 losses this keeps confidently right examples from dragging
the fit, as a plain least-squares fit does (measured on the apple-tasting stream under full
information: docs/results/graph_cb.md, "How it is measured").

:class:`NeuralOracle` (parameter ``oracle: "neural"``, needs torch from the ``neural`` extra,
imported only when it is built) is the paper's ``sigmoid((M x)_a)`` or a one-hidden-layer
network, trained by online gradient descent; the learner's parameter ``oracle`` chooses
(:meth:`banditflow.learners.graph_cb.base.GraphCBLearner._oracle`).

>>> import numpy as np
>>> from banditflow.learners.graph_cb.oracles import LinearOracle
>>> oracle = LinearOracle(actions=2, feature_dim=1, layout="shared", update="rls")
>>> for x in np.linspace(-1, 1, 500):
...     oracle.update([x], 0, 0.5 * x)
...     oracle.update([x], 1, -0.5 * x)
>>> oracle.predict([0.8]).round(2).tolist()
[0.4, -0.4]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from banditflow.learners.base import (
    JSON,
    MIN_RIDGE,
    LearnerError,
    check_state_size,
)
from banditflow.learners.graph_cb import kernels
from banditflow.learners.graph_cb.candidates import pair_features
from banditflow.learners.torch_support import import_torch, one_thread

LAYOUTS = ("shared", "per_action")
ORACLE_LAYOUTS = (*LAYOUTS, "pairs")  # pairs: built for candidate sets, never named by params
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
        if layout not in ORACLE_LAYOUTS:
            raise LearnerError(
                f"parameter 'feature_layout' must be one of {LAYOUTS}, got {layout!r}"
            )
        if update not in UPDATES:
            raise LearnerError(f"parameter 'update' must be one of {UPDATES}, got {update!r}")
        if feature_dim < 1:
            raise LearnerError(f"parameter 'feature_dim' must be >= 1, got {feature_dim}")
        if learning_rate <= 0.0 or ridge < MIN_RIDGE:
            raise LearnerError(
                f"parameter 'learning_rate' must be positive and 'ridge' at least {MIN_RIDGE}"
            )
        self.actions = actions
        self.feature_dim = feature_dim
        self.layout = layout
        self.update_rule = update
        self.learning_rate = learning_rate
        self.ridge = ridge
        self.bias = bias
        size = feature_dim + int(bias)
        rows = actions if layout == "shared" else 1
        check_state_size(
            rows * size * (size if update == "rls" else 1), f"the linear oracle ({update})"
        )
        self.weights = np.zeros((rows, size))
        self.inverse_gram = (
            np.repeat(np.eye(size)[None] / ridge, rows, axis=0) if update == "rls" else None
        )
        self.loss_range: tuple[float, float] | None = None  # smallest and largest loss seen
        self.updates = 0

    def features(self, x: Sequence[Any] | np.ndarray) -> np.ndarray:
        """The validated feature array of one context (D or K x D), bias column appended."""
        array = checked_features(x, self.actions, self.feature_dim, self.layout)
        if self.bias:
            array = np.concatenate([array, np.ones((*array.shape[:-1], 1))], axis=-1)
        return array

    def predict(self, x: Sequence[Any] | np.ndarray) -> np.ndarray:
        """Predicted losses of the K actions, clipped to the range of the losses seen."""
        array = self.features(x)
        raw = self.weights @ array if self.layout == "shared" else array @ self.weights[0]
        return np.clip(raw, *self.clip_range())

    def clip_range(self) -> tuple[float, float]:
        """The losses seen, once they span an interval; the loss range [-1, 1] before."""
        if self.loss_range is None or self.loss_range[0] == self.loss_range[1]:
            return -1.0, 1.0
        return self.loss_range

    def update(self, x: Sequence[Any] | np.ndarray, action: int, loss: float) -> None:
        """One unweighted square-loss example: action ``action`` had loss ``loss`` at ``x``
        (the loss of the clipped prediction: see the module docstring)."""
        array = self.features(x)
        if self.layout == "shared":
            self._step(action, array, loss)
        else:
            self._step(0, array[action], loss)

    def predict_pairs(self, shared: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """:meth:`predict` of the pair features of ``shared`` (D) with each row of
        ``candidates`` (n x d_a), validated arrays, without building them
        (:func:`~banditflow.learners.graph_cb.kernels.pair_scores`)."""
        self._check_pairs(shared.shape[0], candidates.shape[1])
        return kernels.pair_scores(self.weights[0], _dense(shared), _dense(candidates),
                                   self.bias, *self.clip_range())

    def update_pair(self, shared: np.ndarray, candidate: np.ndarray, loss: float) -> None:
        """:meth:`update` on the pair features of ``shared`` with one candidate's (validated
        arrays)."""
        self._check_pairs(shared.shape[0], candidate.shape[0])
        if self.inverse_gram is None:
            self._step(0, kernels.pair_vector(_dense(shared), _dense(candidate), self.bias),
                       loss)
        else:  # (one compiled call: the pair vector is never boxed)
            kernels.rls_pair_step(self.weights[0], self.inverse_gram[0], _dense(shared),
                                  _dense(candidate), self.bias, loss, *self._seen(loss))
            self.updates += 1

    def _check_pairs(self, shared_dim: int, item_dim: int) -> None:
        """Refuse pair features of sizes this oracle was not built for (the compiled
        kernels do not check indices)."""
        if self.layout != "pairs" or self.feature_dim != (shared_dim + 1) * item_dim + shared_dim:
            raise LearnerError(f"pair features of {shared_dim} shared and {item_dim} candidate "
                               f"features do not fit this oracle ({self.layout} layout, "
                               f"{self.feature_dim} features)")

    def _step(self, row: int, vector: np.ndarray, loss: float) -> None:
        """The update of weight vector ``row`` on one example (``vector`` with its bias)."""
        low, high = self._seen(loss)
        if self.inverse_gram is None:
            residual = min(max(float(self.weights[row] @ vector), low), high) - loss
            self.weights[row] -= self.learning_rate * residual * vector
        else:
            kernels.rls_step(self.weights[row], self.inverse_gram[row], _dense(vector), loss,
                             low, high)
        self.updates += 1

    def _seen(self, loss: float) -> tuple[float, float]:
        """Count ``loss`` in the range of the losses seen; the clip range after it."""
        low, high = self.loss_range or (loss, loss)
        self.loss_range = min(low, loss), max(high, loss)
        return self.clip_range()

    def to_state(self) -> JSON:
        """Weights (and inverse Gram matrices) and the loss range seen, as nested lists."""
        return {
            "weights": self.weights.tolist(),
            "inverse_gram": None if self.inverse_gram is None else self.inverse_gram.tolist(),
            "loss_range": None if self.loss_range is None else list(self.loss_range),
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
        if state.get("loss_range") is not None:
            low, high = state["loss_range"]
            self.loss_range = float(low), float(high)
        self.updates = int(state["updates"])


def _dense(array: np.ndarray) -> np.ndarray:
    """``array`` as the compiled kernels take it: C-contiguous float64 (no copy if it is)."""
    return np.ascontiguousarray(array, dtype=float)


NEURAL_LEARNING_RATE = 0.5  # default online-gradient step of the neural oracle
NEURAL_HIDDEN_SIZE = 32  # default hidden width; 0 is the paper's sigmoid((M x)_a)
ORACLES = ("linear", "neural")


class Oracle(Protocol):
    """What the graph_cb learners need from a regression oracle."""

    actions: int

    def predict(self, x: Sequence[Any] | np.ndarray) -> np.ndarray: ...

    def update(self, x: Sequence[Any] | np.ndarray, action: int, loss: float) -> None: ...

    def predict_pairs(self, shared: np.ndarray, candidates: np.ndarray) -> np.ndarray: ...

    def update_pair(self, shared: np.ndarray, candidate: np.ndarray, loss: float) -> None: ...

    def to_state(self) -> JSON: ...

    def load_state(self, state: Mapping[str, Any]) -> None: ...


def checked_features(
    x: Sequence[Any] | np.ndarray, actions: int, feature_dim: int, layout: str
) -> np.ndarray:
    """The validated feature array of one context: D (shared), K x D (per_action) or n x D
    with 1 <= n <= K (pairs)."""
    try:
        array = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise LearnerError(f"'features' must be numbers: {exc}") from exc
    expected = (feature_dim,) if layout == "shared" else (actions, feature_dim)
    if layout == "pairs" and array.ndim == 2 and 1 <= array.shape[0] <= actions:
        expected = (array.shape[0], feature_dim)
    if array.shape != expected:
        raise LearnerError(
            f"'features' must have shape {expected} ({layout} layout), got {array.shape}"
        )
    if not np.all(np.isfinite(array)):
        raise LearnerError("'features' must be finite")
    return array


class NeuralOracle:
    """A small torch network trained by online gradient descent, as in the SquareCB.G paper.

    The network maps features to a probability ``s in (0, 1)`` per action: ``shared`` layout
    ``s = sigmoid(net(x))`` with K outputs, ``per_action`` layout ``s_a = sigmoid(net(x_a))``
    with one output shared by the actions. ``net`` is ``x -> Linear(D, K)`` when
    ``hidden_size`` is 0 (exactly the paper's ``sigmoid((M x)_a)``, M starting at 0) and
    ``x -> Linear(D, H) -> ReLU -> Linear(H, K)`` otherwise (seeded uniform initialisation,
    ``+-1/sqrt(fan_in)`` as torch's default, from ``torch.Generator().manual_seed(seed)``).

    Losses: the paper's sigmoid output lies in [0, 1], banditflow's losses in [-1, 1], so a
    loss ``l`` is learnt as the target ``y = (l + 1) / 2`` and predicted as
    ``fhat = 2 s - 1`` (an affine map: the argmin and the gaps used by the action distribution
    only scale by 2). Every :meth:`update` is one gradient step of ``(s_a - y)^2`` with the
    constant ``learning_rate`` (no importance weights). Computations are float64 and the
    weights are serialised as nested lists (``(D + 1) H + (H + 1) K`` numbers, or
    ``(D + 1) K`` without a hidden layer; ``per_action`` has K = 1), so a restored oracle
    predicts exactly as the original.

    >>> import numpy as np
    >>> from banditflow.learners.graph_cb.oracles import NeuralOracle
    >>> oracle = NeuralOracle(actions=2, feature_dim=1, hidden_size=0, learning_rate=1.0)
    >>> for x in np.linspace(-1, 1, 400):
    ...     oracle.update([x], 0, 0.5 * x)
    ...     oracle.update([x], 1, -0.5 * x)
    >>> oracle.predict([0.8]).round(1).tolist()
    [0.4, -0.4]
    """

    def __init__(
        self,
        actions: int,
        feature_dim: int,
        layout: str = "shared",
        hidden_size: int = NEURAL_HIDDEN_SIZE,
        learning_rate: float = NEURAL_LEARNING_RATE,
        bias: bool = True,
        seed: int = 0,
    ) -> None:
        torch = import_torch("the neural oracle")
        if layout not in ORACLE_LAYOUTS:
            raise LearnerError(
                f"parameter 'feature_layout' must be one of {LAYOUTS}, got {layout!r}"
            )
        if feature_dim < 1:
            raise LearnerError(f"parameter 'feature_dim' must be >= 1, got {feature_dim}")
        if hidden_size < 0:
            raise LearnerError(f"parameter 'hidden_size' must be >= 0, got {hidden_size}")
        inputs, outputs = feature_dim + int(bias), actions if layout == "shared" else 1
        check_state_size(
            (inputs + 1) * hidden_size + (hidden_size + 1) * outputs
            if hidden_size else (inputs + 1) * outputs,
            "the neural oracle",
        )
        if learning_rate <= 0.0:
            raise LearnerError("parameter 'learning_rate' must be positive")
        if seed < 0:
            raise LearnerError(f"parameter 'oracle_seed' must be >= 0, got {seed}")
        self.torch = torch
        self.actions = actions
        self.feature_dim = feature_dim
        self.layout = layout
        self.hidden_size = hidden_size
        self.learning_rate = learning_rate
        self.bias = bias
        self.seed = seed
        outputs = actions if layout == "shared" else 1
        sizes = [feature_dim, outputs] if hidden_size == 0 else [feature_dim, hidden_size, outputs]
        generator = torch.Generator().manual_seed(seed)
        self.layers: list[tuple[Any, Any]] = []  # (weight out x in, bias out) per layer
        for fan_in, fan_out in itertools.pairwise(sizes):
            if hidden_size == 0:
                weight = torch.zeros(fan_out, fan_in, dtype=torch.float64)
                offset = torch.zeros(fan_out, dtype=torch.float64)
            else:
                bound = 1.0 / math.sqrt(fan_in)
                weight = (torch.rand(fan_out, fan_in, generator=generator,
                                     dtype=torch.float64) * 2.0 - 1.0) * bound
                offset = (torch.rand(fan_out, generator=generator,
                                     dtype=torch.float64) * 2.0 - 1.0) * bound
                if not bias:
                    offset.zero_()
            self.layers.append((weight, offset))
        self.updates = 0

    def _logits(self, inputs: Any) -> Any:
        """Pre-sigmoid outputs: K values (shared) or one per row of ``inputs`` (per_action)."""
        hidden = inputs
        for index, (weight, offset) in enumerate(self.layers):
            hidden = hidden @ weight.T
            if self.bias:
                hidden = hidden + offset
            if index < len(self.layers) - 1:
                hidden = self.torch.relu(hidden)
        return hidden if self.layout == "shared" else hidden[:, 0]

    def predict(self, x: Sequence[Any] | np.ndarray) -> np.ndarray:
        """Predicted losses ``2 sigmoid(logit) - 1`` of the K actions, in (-1, 1)."""
        inputs = self.torch.from_numpy(
            checked_features(x, self.actions, self.feature_dim, self.layout)
        )
        with one_thread(self.torch), self.torch.no_grad():
            probability = self.torch.sigmoid(self._logits(inputs))
        return 2.0 * probability.numpy() - 1.0

    def update(self, x: Sequence[Any] | np.ndarray, action: int, loss: float) -> None:
        """One gradient step of ``(sigmoid(logit_action) - (loss + 1) / 2)^2``."""
        torch = self.torch
        inputs = torch.from_numpy(checked_features(x, self.actions, self.feature_dim, self.layout))
        tensors = [tensor for layer in self.layers for tensor in layer]
        with one_thread(torch):
            for tensor in tensors:
                tensor.requires_grad_(True)
            try:
                target = (float(loss) + 1.0) / 2.0
                error = (torch.sigmoid(self._logits(inputs)[action]) - target) ** 2
                gradients = torch.autograd.grad(error, tensors)
            finally:
                for tensor in tensors:
                    tensor.requires_grad_(False)
        with torch.no_grad():
            for tensor, gradient in zip(tensors, gradients, strict=True):
                tensor -= self.learning_rate * gradient
            if not self.bias:
                for _, offset in self.layers:
                    offset.zero_()
        self.updates += 1

    def predict_pairs(self, shared: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """:meth:`predict` on the pair features of ``shared`` with each of ``candidates``."""
        return self.predict(pair_features(shared, candidates))

    def update_pair(self, shared: np.ndarray, candidate: np.ndarray, loss: float) -> None:
        """:meth:`update` on the pair features of ``shared`` with one candidate's."""
        self.update(pair_features(shared, candidate[None, :]), 0, loss)

    def to_state(self) -> JSON:
        """The weights as nested lists (see the class docstring for the count)."""
        return {
            "layers": [[weight.tolist(), offset.tolist()] for weight, offset in self.layers],
            "updates": self.updates,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`to_state` output (shapes are checked against the parameters)."""
        layers = state["layers"]
        if len(layers) != len(self.layers):
            raise LearnerError(
                f"oracle state has {len(layers)} layers, expected {len(self.layers)}"
            )
        restored = []
        for (weight, offset), (old_weight, old_offset) in zip(layers, self.layers, strict=True):
            new_weight = self.torch.tensor(weight, dtype=self.torch.float64)
            new_offset = self.torch.tensor(offset, dtype=self.torch.float64)
            if new_weight.shape != old_weight.shape or new_offset.shape != old_offset.shape:
                raise LearnerError(
                    f"oracle state has a layer {tuple(new_weight.shape)}, expected "
                    f"{tuple(old_weight.shape)}"
                )
            restored.append((new_weight, new_offset))
        self.layers = restored
        self.updates = int(state["updates"])
