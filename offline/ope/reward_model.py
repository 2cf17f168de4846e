"""The reward model of the DR estimator: ridge regression, cross-fitted.

The rounds are split into ``folds`` random folds; the predictions for a round come from a
model fit on the other folds only, so a round's own reward never enters the model that
corrects it (the DR estimate stays unbiased, and its interval honest).

Live OPE fits the same model (the shared layout) online, from earlier rounds only:
:class:`banditflow.processors.ope.RewardModel`.

The model follows the rounds' context features:

* one shared vector per round (graph_cb's default layout, OBP without action features): one
  linear model with an intercept per action, fit on the rounds that played it;
* a feature vector per action (``feature_layout: per_action``, DSJSON and OBP with action
  features): one linear model of the action's vector, with an intercept per action when every
  round offers the same actions;
* no features (prob_graph, logs without contexts): a mean reward per action.

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

from banditflow.processors.estimators import RIDGE, ridge_coefficients


class FeatureError(ValueError):
    pass


def _ridge(design: np.ndarray, targets: np.ndarray) -> np.ndarray:
    return ridge_coefficients(design.T @ design, design.T @ targets)


def _with_intercept(features: np.ndarray) -> np.ndarray:
    return np.hstack([features, np.ones((features.shape[0], 1))])


@dataclass
class ActionFeatures:
    """The rounds' context features, in one of the three layouts of the module docstring,
    with each round's number of actions."""

    counts: np.ndarray
    shared: np.ndarray | None = None
    per_action: list[np.ndarray] | None = None

    @classmethod
    def of(cls, features: Sequence[object], counts: Sequence[int]) -> ActionFeatures:
        """The layout of the rounds' ``features`` (each a vector, a vector per action, or
        None); a layout the rounds do not all share falls back to no features."""
        count_array = np.asarray(counts, dtype=int)
        fixed = len(set(counts)) == 1
        if features and all(isinstance(f, list) and f and isinstance(f[0], list)
                            for f in features):
            matrices = [np.asarray(f, dtype=float) for f in features]
            sizes = {m.shape[1] if m.ndim == 2 else -1 for m in matrices}
            if len(sizes) != 1 or -1 in sizes:
                raise FeatureError(f"per-action feature vectors of several sizes: {sorted(sizes)}")
            for m, k in zip(matrices, counts, strict=True):
                if m.shape[0] != k:
                    raise FeatureError(f"{m.shape[0]} feature vectors for {k} actions")
            return cls(count_array, per_action=matrices)
        if fixed and features and all(isinstance(f, list) and f and not isinstance(f[0], list)
                                      for f in features):
            sizes = {len(f) for f in features if isinstance(f, list)}
            if len(sizes) != 1:
                raise FeatureError(f"feature vectors of several sizes: {sorted(sizes)}")
            return cls(count_array, shared=np.asarray(features, dtype=float))
        return cls(count_array)

    def fit_predict(self, train: np.ndarray, test: np.ndarray, actions: np.ndarray,
                    rewards: np.ndarray) -> np.ndarray:
        """Predictions for every action of the ``test`` rounds (an array of shape
        (len(test), max K), NaN past a round's own K), from a model fit on the ``train``
        rounds' logged actions and rewards."""
        widest = int(self.counts.max())
        fixed = bool(np.all(self.counts == widest))
        out = np.full((len(test), widest), np.nan)
        if self.shared is not None:
            inputs = _with_intercept(self.shared)
            for action in range(widest):
                rows = train[actions[train] == action]
                theta = _ridge(inputs[rows], rewards[rows])
                out[:, action] = inputs[test] @ theta
        elif self.per_action is not None:
            logged = np.vstack([self.per_action[i][actions[i]] for i in train])
            design = [_with_intercept(logged)]
            if fixed:
                design.append(np.eye(widest)[actions[train]])
            theta = _ridge(np.hstack(design), rewards[train])
            dim = logged.shape[1] + 1
            for row, i in enumerate(test):
                matrix = self.per_action[i]
                predicted = _with_intercept(matrix) @ theta[:dim]
                out[row, : matrix.shape[0]] = predicted + (theta[dim:] if fixed else 0.0)
        elif fixed:
            for action in range(widest):
                played = rewards[train][actions[train] == action]
                out[:, action] = played.sum() / (len(played) + RIDGE)
        else:
            mean = rewards[train].sum() / (len(train) + RIDGE)
            for row, i in enumerate(test):
                out[row, : self.counts[i]] = mean
        return out


def cross_fitted_predictions(design: ActionFeatures, actions: np.ndarray, rewards: np.ndarray,
                             folds: int = 5, seed: int = 0) -> np.ndarray:
    """Predicted rewards of every action of every round, each round's from a model fit on
    the other folds; an (n, max K) array, NaN past a round's own K actions.

    Predictions are clipped to the range of the logged rewards. With fewer than two rounds
    there is nothing to fit on: every prediction is 0 (DR then equals IPS).
    """
    n = len(actions)
    widest = int(design.counts.max()) if n else 0
    predictions = np.full((n, widest), np.nan)
    folds = min(folds, n)
    if folds < 2:
        for i in range(n):
            predictions[i, : design.counts[i]] = 0.0
        return predictions
    assignment = np.random.default_rng(seed).permutation(n) % folds
    for fold in range(folds):
        test = np.flatnonzero(assignment == fold)
        train = np.flatnonzero(assignment != fold)
        predictions[test] = design.fit_predict(train, test, actions, rewards)
    return np.clip(predictions, float(np.min(rewards)), float(np.max(rewards)))
