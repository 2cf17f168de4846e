"""Candidate sets with action features (Vowpal Wabbit's ADF, Personalizer's ranking form).

A graph_cb learner configured with ``action_features`` (d_a, the length of every candidate's
feature vector) takes, instead of a fixed K, the actions each context offers::

    {"features": [...D shared numbers...],            # optional when feature_dim is 0
     "actions": [{"id": "a17", "features": [...d_a numbers...]}, ...],
     "graph": [[...]]}                                 # optional: n x n over these actions

and learns **one** regressor on the features of each (context, action) pair,
:func:`pair_features`: the shared vector crossed with the action's (VW's ``-q`` of the shared
and the action namespaces), the action's own features, and the shared features (VW's ADF
adds the shared example's features to every action; they set the level of the loss, not the
ranking). So a candidate never seen before is scored from its features like any other.

Parameters of the form: ``action_features`` d_a >= 1 (required), ``feature_dim`` D >= 0
(default 0: no shared part), ``max_actions`` (default 100, at most ``MAX_ACTIONS``): how
many candidates an event may offer (declared in :mod:`banditflow.learners.graph_cb.params`).
``actions``, ``graph`` and ``feature_layout`` belong to the fixed-K form and are refused beside
``action_features``; ``graph_kind`` names the graph of every event's candidates.

Feedback ``losses`` are keyed by a candidate's id or by its 0-based index in the event's
``actions``; a key that is one of the event's ids means that candidate (so with ids that are
digits, the id wins).

>>> import numpy as np
>>> pair_features(np.array([1.0, 2.0]), np.array([[3.0], [5.0]])).tolist()
[[3.0, 6.0, 3.0, 1.0, 2.0], [5.0, 10.0, 5.0, 1.0, 2.0]]
>>> form = CandidateForm(feature_dim=2, action_features=1, max_actions=3)
>>> offered = form.offered([{"id": "x", "features": [3.0]}, {"id": "y", "features": [5.0]}])
>>> offered.ids, candidate_index(offered.ids, "y"), candidate_index(offered.ids, "0")
(['x', 'y'], 1, 0)
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any, NamedTuple

import numpy as np

from banditflow.learners.base import ContradictingFeedback, LearnerError
from banditflow.learners.graph_cb import kernels


def pair_features(shared: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """The n x (D d_a + d_a + D) features of the pairs (shared, action_i): the products
    shared_k * action_j (k-major), the action's features, then the shared ones."""
    n, item_dim = actions.shape
    crossed = shared.shape[0] * item_dim
    pairs = np.empty((n, crossed + item_dim + shared.shape[0]))
    pairs[:, :crossed] = (shared[None, :, None] * actions[:, None, :]).reshape(n, crossed)
    pairs[:, crossed:crossed + item_dim] = actions
    pairs[:, crossed + item_dim:] = shared
    return pairs


class Offered(NamedTuple):
    """The candidates of one event: their ids, their n x d_a features, and the same features
    as the context gave them (its lists, for the pending state: converting the array back
    would cost as much as scoring the set)."""

    ids: list[str]
    features: np.ndarray
    rows: list[Any]  # JSON: the context's lists (or the array's, where arrays were given)


def candidate_index(ids: list[str], key: str) -> int:
    """The position of the candidate a feedback key names: its id, else its index."""
    try:
        return ids.index(key)
    except ValueError:  # (not an id)
        pass
    try:
        index = int(key)
    except ValueError:
        raise ContradictingFeedback(
            f"revealed action {key!r} is neither an id nor an index of the event's "
            f"{len(ids)} candidates") from None
    if not 0 <= index < len(ids):
        raise ContradictingFeedback(
            f"revealed action {index} is not in [0, {len(ids)}) (the event's candidates)")
    return index


@dataclass(frozen=True)
class CandidateForm:
    """A learner's candidate-set form: D shared features, d_a per candidate, at most
    ``max_actions`` candidates an event."""

    feature_dim: int
    action_features: int
    max_actions: int

    @property
    def pair_dim(self) -> int:
        """The length of :func:`pair_features`' rows."""
        return self.feature_dim * self.action_features + self.action_features + self.feature_dim

    def shared(self, features: Any) -> np.ndarray:
        """The validated shared vector of a context (empty when D = 0)."""
        if self.feature_dim == 0:
            if features is not None and _rows([features], 0) is None:  # (not empty)
                raise LearnerError("'features' given, but the learner's 'feature_dim' is 0 "
                                   "(no shared features)")
            return np.zeros(0)
        if features is None:
            raise LearnerError(f"a context needs 'features': {self.feature_dim} shared numbers")
        return _vector(features, self.feature_dim, "'features'")

    def offered(self, actions: Any) -> Offered:
        """The validated candidates of a context's ``actions``."""
        if not isinstance(actions, Sequence) or isinstance(actions, str) or not actions:
            raise LearnerError("a context of this learner needs 'actions': a non-empty list of "
                               "{\"id\", \"features\"}")
        if len(actions) > self.max_actions:
            raise LearnerError(f"{len(actions)} candidate actions, more than the learner's "
                               f"max_actions {self.max_actions}")
        try:
            ids = [action["id"] for action in actions]
            rows = [action["features"] for action in actions]
        except (TypeError, KeyError, IndexError):
            raise LearnerError(self._first_fault(actions)) from None
        # The whole set in one conversion (per-candidate checks in Python cost more than the
        # rest of a decision); only a set that fails it is gone through candidate by
        # candidate, to name the first bad one.
        converted = _rows(rows, self.action_features)
        if converted is None or not all(map(isinstance, ids, repeat(str))):
            raise LearnerError(self._first_fault(actions))
        matrix, rows = converted
        if not kernels.all_finite(matrix):
            bad = int(np.argmin(np.isfinite(matrix).all(axis=1)))
            raise LearnerError(f"actions[{bad}].features must be finite")
        if len(set(ids)) != len(ids):
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            raise LearnerError(f"candidate ids must be unique within an event; repeated: "
                               f"{', '.join(repeated[:5])}")
        return Offered(ids, matrix, rows)

    def _first_fault(self, actions: Sequence[Any]) -> str:
        """What is wrong with the first candidate of ``actions`` that is not
        ``{"id": text, "features": d_a numbers}``."""
        for position, action in enumerate(actions):
            if not isinstance(action, Mapping) or not isinstance(action.get("id"), str):
                return f"actions[{position}] needs an 'id' (text) and 'features'"
            try:
                _vector(action.get("features"), self.action_features,
                        f"actions[{position}].features")
            except LearnerError as exc:
                return str(exc)
        return (f"'actions' must be candidates {{\"id\": text, \"features\": "
                f"{self.action_features} numbers}}")


def _vector(values: Any, size: int, name: str) -> np.ndarray:
    """``values``, ``size`` finite numbers, as an array (one row of :func:`_rows`)."""
    kind = type(values)
    if kind not in _SEQUENCES or (kind is np.ndarray and values.ndim != 1) or len(values) != size:
        raise LearnerError(f"{name} must be {size} numbers")
    vector = np.empty(size)
    try:
        struct.pack_into(f"{size}d", vector, 0, *values)
    except struct.error:
        raise LearnerError(f"{name} must be {size} numbers") from None
    if not kernels.all_finite(vector):
        raise LearnerError(f"{name} must be finite")
    return vector


# What a candidate's or the shared features may be: JSON's arrays, and in-process callers'
# tuples and 1-d arrays.
_SEQUENCES = frozenset((list, tuple, np.ndarray))


def _rows(rows: list[Any], width: int) -> tuple[np.ndarray, list[Any]] | None:
    """``rows``, sequences of ``width`` numbers each, as a len(rows) x ``width`` float array,
    and as JSON (``rows`` themselves, or the array's lists where arrays were given); None if
    they are not that. (struct packs the numbers into the array in one call, at a third of
    the cost of ``np.array``, which first inspects every element for the shape and type it
    already knows; a row of text is refused, not read as its characters.)"""
    kinds = set(map(type, rows))
    arrays = np.ndarray in kinds
    if (not kinds <= _SEQUENCES
            or (arrays and any(row.ndim != 1 for row in rows if type(row) is np.ndarray))
            or list(map(len, rows)).count(width) != len(rows)):
        return None
    matrix = np.empty((len(rows), width))
    try:
        struct.pack_into(f"{matrix.size}d", matrix, 0, *chain.from_iterable(rows))
    except struct.error:  # (not a real number: text, None, a list, an int beyond float)
        return None
    return matrix, matrix.tolist() if arrays else rows
