"""The reward model of the DR estimator: ridge regression, cross-fitted.

The rounds are split into ``folds`` random folds; the predictions for a round come from a
model fit on the other folds only, so a round's own reward never enters the model that
corrects it (the DR estimate stays unbiased, and its interval honest).

Each (round, action) pair gets a feature vector from the round's context features:

* a feature vector per action (``feature_layout: per_action``, DSJSON imports): the action's
  vector, a constant, and with a fixed number of actions a one-hot of the action;
* one shared vector (graph_cb's default layout, OBP without action features): that vector and
  a constant in the action's own block (one linear model per action);
* no features (prob_graph, logs without contexts): a one-hot of the action (a mean per action).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(400, 2))
>>> actions = rng.integers(0, 2, size=400)
>>> rewards = np.where(actions == 1, x[:, 0], -x[:, 1])
>>> design = ActionFeatures.of([row.tolist() for row in x], [2] * 400)
>>> q = cross_fitted_predictions(design, actions, rewards, folds=5, seed=0)
>>> errors = np.abs(q - np.column_stack([-x[:, 1], x[:, 0]]))  # (outside [min r, max r]:
>>> float(np.median(errors)) < 0.01                               #  clipped)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RIDGE = 1.0


class FeatureError(ValueError):
    pass


@dataclass
class ActionFeatures:
    """The design of every (round, action) pair: ``rows[i]`` is round i's K_i x D matrix."""

    rows: list[np.ndarray]

    @classmethod
    def of(cls, features: Sequence[object], actions: Sequence[int]) -> ActionFeatures:
        """Designs from the rounds' context features (see the module docstring)."""
        fixed = len(set(actions)) == 1
        shared = [f for f in features if isinstance(f, list) and f
                  and not isinstance(f[0], list)]
        per_action = [f for f in features if isinstance(f, list) and f and isinstance(f[0], list)]
        if per_action and len(per_action) == len(features):
            dims = {len(vector) for f in per_action for vector in f}
            if len(dims) != 1:
                raise FeatureError(f"per-action feature vectors of several sizes: {sorted(dims)}")
            return cls([cls._per_action(np.asarray(f, dtype=float), k, fixed)
                        for f, k in zip(features, actions, strict=True)])
        if shared and len(shared) == len(features) and fixed:
            dims = {len(f) for f in shared}
            if len(dims) != 1:
                raise FeatureError(f"feature vectors of several sizes: {sorted(dims)}")
            return cls([np.kron(np.eye(k), np.append(np.asarray(f, dtype=float), 1.0))
                        for f, k in zip(features, actions, strict=True)])
        if fixed:
            return cls([np.eye(k) for k in actions])
        return cls([np.ones((k, 1)) for k in actions])

    @staticmethod
    def _per_action(matrix: np.ndarray, actions: int, fixed: bool) -> np.ndarray:
        if matrix.shape[0] != actions:
            raise FeatureError(f"{matrix.shape[0]} feature vectors for {actions} actions")
        parts = [matrix, np.ones((actions, 1))]
        if fixed:
            parts.append(np.eye(actions))
        return np.hstack(parts)


def _fit(design: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    gram = design.T @ design + RIDGE * np.eye(design.shape[1])
    return np.linalg.solve(gram, design.T @ rewards)


def cross_fitted_predictions(design: ActionFeatures, actions: np.ndarray, rewards: np.ndarray,
                             folds: int = 5, seed: int = 0) -> np.ndarray:
    """Predicted rewards of every action of every round, each round's from a ridge model fit
    on the other folds; an (n, K_max) array, NaN past a round's own K_i actions.

    Predictions are clipped to the range of the logged rewards. With fewer than two rounds
    there is nothing to fit on: every prediction is 0 (DR then equals IPS).
    """
    n = len(design.rows)
    widest = max((m.shape[0] for m in design.rows), default=0)
    predictions = np.full((n, widest), np.nan)
    folds = min(folds, n)
    if folds < 2:
        for i, matrix in enumerate(design.rows):
            predictions[i, : matrix.shape[0]] = 0.0
        return predictions
    assignment = np.random.default_rng(seed).permutation(n) % folds
    logged = np.vstack([m[a] for m, a in zip(design.rows, actions, strict=True)])
    low, high = float(np.min(rewards)), float(np.max(rewards))
    for fold in range(folds):
        held_out = assignment == fold
        theta = _fit(logged[~held_out], rewards[~held_out])
        for i in np.flatnonzero(held_out):
            matrix = design.rows[i]
            predictions[i, : matrix.shape[0]] = np.clip(matrix @ theta, low, high)
    return predictions
