"""NeuralLinear: the UCB learner (Algorithm 1) on learnt 50-dim embeddings instead of raw x.

Three small networks, one per unknown quantity (the model's reward, the human's reward, the
human's cost), each ``x -> Linear(d, H) -> ReLU -> Linear(H, 1) -> sigmoid`` with
``H = hidden_size`` (default 50). Their penultimate layers ``phi_m(x), phi_h(x), phi_c(x)``
(the H ReLU units) are the contexts of the linear UCB algorithm: per quantity a ridge
regression on its embedding, ``M = ridge I + sum phi phi^T`` over the stored observations, and
the bounds of :class:`banditflow.learners.deferral.ucb.UCB` with the confidence radius computed for
dimension H. Everything else is the UCB learner's, inherited unchanged: the dual price
(multiplicative weights), the warm-up and the budget machinery of
:class:`banditflow.learners.deferral.base.DeferralLearner` (a deferral reserves ``c_max``, settles
on the
human part, a timeout charges the reservation), so a period's spend never exceeds ``B``.

Training. Observations (the model's reward on every decision in ``full`` mode, the human's
reward and cost on every deferral) are kept in a bounded history: the last ``window`` model
observations and the last ``window`` human observations (default 500 each; older ones are
dropped, which also forgets them in M). Every ``retrain_every`` observations (default 15)
each network is retrained on its history from its current weights with a fresh Adam
optimiser: ``train_steps`` (default 25) steps of mean squared error between the sigmoid
output and the observed value, each on a batch of ``min(batch_size, n)`` stored observations
(default 500; drawn without replacement from ``numpy.random.default_rng([seed, retrain,
net])`` when the history is larger), learning rate ``learning_rate`` (default 5e-4; the paper
used 5e-4 or 1e-4). The embeddings of the stored contexts are then recomputed and M rebuilt.

State and determinism. M is not stored: it is a function of the history and the weights,
recomputed (float64, numpy) when either changed, so a restored learner decides exactly as the
original. The state holds the UCB dual state, the history and the weights as lists: at most
``2 window (d + 2) + 3 (H (d + 2) + 1)`` numbers besides the in-flight bookkeeping of every
deferral learner (with d = 20, H = 50, window = 500: about 25,000 numbers). The initial
weights come from ``torch.Generator().manual_seed(seed)`` (parameter ``seed``, default 0).
torch (the ``neural`` extra) is imported when the learner is built, never by this module.

Parameters: those of UCB except ``link`` / ``cost_link`` (identity only: the linear
algorithm runs on the embeddings), plus ``hidden_size``, ``window``, ``retrain_every``,
``train_steps``, ``batch_size``, ``learning_rate`` and ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from banditflow.learners.base import LearnerError, check_state_size
from banditflow.learners.declared import param
from banditflow.learners.deferral.estimators import Arm, Estimate
from banditflow.learners.deferral.ucb import UCB, DualState, UCBParams
from banditflow.learners.torch_support import import_torch, one_thread

NETWORKS = ("model", "human", "cost")  # what each network predicts
HISTORIES = {"model": "model", "human": "human", "cost": "human"}  # network -> its history
TARGET_COLUMN = {"model": -1, "human": -2, "cost": -1}  # network -> column of its history rows
MAX_HIDDEN_SIZE = 4_096


class Network:
    """``x -> Linear(d, H) -> ReLU -> Linear(H, 1) -> sigmoid``, weights as float64 numpy."""

    def __init__(self, layers: Sequence[np.ndarray]) -> None:
        self.hidden_weight, self.hidden_bias, self.out_weight, self.out_bias = (
            np.asarray(layer, dtype=float) for layer in layers
        )

    @classmethod
    def fresh(cls, torch: Any, dim: int, hidden: int, generator: Any) -> Network:
        """Uniform ``+-1/sqrt(fan_in)`` initialisation (torch's default) from ``generator``."""
        layers = []
        for fan_in, shape in ((dim, (hidden, dim)), (dim, (hidden,)), (hidden, (1, hidden)),
                              (hidden, (1,))):
            bound = 1.0 / math.sqrt(fan_in)
            draw = torch.rand(*shape, generator=generator, dtype=torch.float64)
            layers.append(((draw * 2.0 - 1.0) * bound).numpy())
        return cls(layers)

    def layers(self) -> list[np.ndarray]:
        return [self.hidden_weight, self.hidden_bias, self.out_weight, self.out_bias]

    def embed(self, x: np.ndarray) -> np.ndarray:
        """The penultimate layer ``relu(W x + b)`` of one context (d,) or of rows (n, d)."""
        return np.maximum(x @ self.hidden_weight.T + self.hidden_bias, 0.0)

    def train(self, torch: Any, inputs: np.ndarray, targets: np.ndarray, steps: int,
              batch_size: int, learning_rate: float, rng: np.random.Generator) -> None:
        """``steps`` Adam steps (fresh optimiser) of the mean squared error of the sigmoid."""
        params = [torch.tensor(layer, dtype=torch.float64, requires_grad=True)
                  for layer in self.layers()]
        optimiser = torch.optim.Adam(params, lr=learning_rate)
        x_all = torch.from_numpy(inputs)
        y_all = torch.from_numpy(targets)
        count = inputs.shape[0]
        for _ in range(steps):
            if count > batch_size:
                index = torch.from_numpy(rng.choice(count, size=batch_size, replace=False))
                x, y = x_all[index], y_all[index]
            else:
                x, y = x_all, y_all
            hidden = torch.relu(x @ params[0].T + params[1])
            output = torch.sigmoid(hidden @ params[2].T + params[3])[:, 0]
            loss = torch.mean((output - y) ** 2)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        self.hidden_weight, self.hidden_bias, self.out_weight, self.out_bias = (
            param.detach().numpy().copy() for param in params
        )

    def to_state(self) -> list[Any]:
        return [layer.tolist() for layer in self.layers()]

    def load_state(self, state: Sequence[Any]) -> None:
        """Restore :meth:`to_state` output (shapes are checked against this network's)."""
        layers = [np.asarray(layer, dtype=float) for layer in state]
        for layer, expected in zip(layers, self.layers(), strict=True):
            if layer.shape != expected.shape:
                raise LearnerError(f"neural_linear state has a layer {layer.shape}, expected "
                                   f"{expected.shape}")
        self.hidden_weight, self.hidden_bias, self.out_weight, self.out_bias = layers


@dataclass(frozen=True, kw_only=True)
class NeuralLinearParams(UCBParams):
    hidden_size: int = param(50, ge=1, cap=MAX_HIDDEN_SIZE)
    window: int = param(500, ge=1)
    retrain_every: int = param(15, ge=1)
    train_steps: int = param(25, ge=1)
    batch_size: int = param(500, ge=1)
    learning_rate: float = param(5e-4, gt=0)
    seed: int = param(0, ge=0)  # numpy's generators take no negative seed

    def validated(self) -> Self:
        for name in ("link", "cost_link"):
            if getattr(self, name) not in (None, "identity"):
                raise LearnerError(
                    f"parameter {name!r} must be 'identity' for neural_linear (the linear "
                    f"algorithm runs on the embeddings), got {getattr(self, name)!r}"
                )
        # three networks, and two histories of ``window`` rows
        check_state_size(
            len(NETWORKS) * (self.dim + 2) * (self.hidden_size + 1)
            + 2 * self.window * (self.dim + 2),
            "the neural_linear networks and histories",
        )
        return super().validated()


@dataclass(kw_only=True)
class NeuralLinearState(DualState):
    networks: dict[str, Network]
    history: dict[str, list[list[float]]]
    since_retrain: int
    retrains: int


class NeuralLinear(UCB):
    """UCB (Algorithm 1) on the penultimate layers of three retrained networks; budget-safe.

    See the module docstring for the parameters, the training schedule and the state bound.
    """

    algorithm: ClassVar[str] = "neural_linear"
    Params = NeuralLinearParams
    State = NeuralLinearState

    def __init__(self, params: NeuralLinearParams) -> None:
        torch = import_torch("the neural_linear deferral learner")
        super().__init__(params)
        self.torch = torch
        self.hidden_size = params.hidden_size
        self.window = params.window
        self.retrain_every = params.retrain_every
        self.train_steps = params.train_steps
        self.batch_size = params.batch_size
        self.learning_rate = params.learning_rate
        self.seed = params.seed
        generator = torch.Generator().manual_seed(params.seed)
        self.networks = {
            name: Network.fresh(torch, params.dim, params.hidden_size, generator)
            for name in NETWORKS
        }
        # Rows [*x, model_reward] and [*x, human_reward, human_cost], oldest first.
        self.history: dict[str, list[list[float]]] = {"model": [], "human": []}
        self.since_retrain = 0  # observations since the last retraining
        self.retrains = 0
        self.arms: dict[str, Arm] = {}  # cache: a function of history and weights
        self.model = self.human = None  # type: ignore[assignment]  # UCB's raw-x arms: unused

    def radius(self) -> float:
        """beta_t = beta * sqrt(2 H log((1 + 2 t H) / delta)), H the embedding dimension."""
        h = self.hidden_size
        t = max(self.rounds, 1)
        return self.beta * math.sqrt(2.0 * h * math.log((1.0 + 2.0 * t * h) / self.delta))

    def arm(self, name: str) -> Arm:
        """The ridge regression of network ``name``'s quantity on its embeddings (cached)."""
        if name not in self.arms:
            rows = np.array(self.history[HISTORIES[name]], dtype=float).reshape(
                -1, self.params.dim + (1 if name == "model" else 2))
            phi = self.networks[name].embed(rows[:, : self.params.dim])
            gram = self.ridge * np.eye(self.hidden_size) + phi.T @ phi
            vector = phi.T @ rows[:, TARGET_COLUMN[name]]
            quantity = "cost" if name == "cost" else "reward"
            self.arms[name] = Arm(np.linalg.inv(gram), rows.shape[0],
                                  {quantity: Estimate("identity", vector)})
        return self.arms[name]

    def bounds(self, x: np.ndarray) -> tuple[float, float, float]:
        """mu(UCB_model), mu(UCB_human) and mu(LCB_cost) (clipped at 0), on the embeddings."""
        radius = self.radius()
        values = []
        for name, sign in (("model", 1.0), ("human", 1.0), ("cost", -1.0)):
            arm = self.arm(name)
            phi = self.networks[name].embed(x)
            estimate = arm.estimates["cost" if name == "cost" else "reward"]
            values.append(estimate.mean(phi, arm.gram_inverse, sign * radius * arm.width(phi)))
        return values[0], values[1], max(values[2], 0.0)

    def observe_model(self, x: np.ndarray, reward: float) -> None:
        self.remember("model", [*x.tolist(), reward])

    def observe_human(self, x: np.ndarray, reward: float, cost: float) -> None:
        self.remember("human", [*x.tolist(), reward, cost])

    def remember(self, history: str, row: list[float]) -> None:
        """Store one observation (dropping the oldest beyond ``window``); retrain when due."""
        rows = self.history[history]
        rows.append(row)
        del rows[: max(len(rows) - self.window, 0)]
        for name in NETWORKS:
            if HISTORIES[name] == history:
                self.arms.pop(name, None)
        self.since_retrain += 1
        if self.since_retrain >= self.retrain_every:
            self.retrain()

    def retrain(self) -> None:
        """Train every network on its history, then rebuild the embeddings' regressions."""
        dim = self.params.dim
        with one_thread(self.torch):
            for index, name in enumerate(NETWORKS):
                rows = self.history[HISTORIES[name]]
                if not rows:
                    continue
                data = np.array(rows, dtype=float)
                self.networks[name].train(
                    self.torch, data[:, :dim], data[:, TARGET_COLUMN[name]], self.train_steps,
                    self.batch_size, self.learning_rate,
                    np.random.default_rng([self.seed, self.retrains, index]),
                )
        self.retrains += 1
        self.since_retrain = 0
        self.arms.clear()

    def restored(self) -> None:
        self.arms = {}

    def summary(self) -> dict[str, float | list[float]]:
        return {**super().summary(), "retrains": float(self.retrains)}
