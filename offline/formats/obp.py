"""Open Bandit Pipeline's batch bandit feedback into the archive format.

OBP hands logged data around as one dictionary of arrays (``obtain_batch_bandit_feedback``):
``n_rounds``, ``n_actions``, ``action`` (the played action of each round), ``reward``,
``pscore`` (its propensity under the logging policy), ``context`` (n_rounds x d),
optionally ``action_context`` (n_actions x d_a) and ``position`` (the slot of a
recommendation list the action was shown in, 0-based). Save it with
``numpy.savez(path, **bandit_feedback)`` (read back without pickles) or as one JSON object of
lists; keys this import does not use (``action_dist``, ``expected_reward``...) are ignored.

Rounds become events ``0``, ``1``, ... of one learner. The context's features are
``context`` plus, when rounds have several positions, a one-hot of the position (the slot is
part of the situation a policy decides in). With ``action_context`` (the items' features),
every round offers the ``n_actions`` items as candidates, ``{"id": "<j>", "features":
action_context[j]}``, filed under a learner with ``action_features`` that scores (context,
item) pairs; without, the context is one shared vector over a fixed K. The decision carries
the played action and ``propensity`` (OBP logs hold the played action's probability only),
the feedback the loss ``-reward``.

>>> records, report = obp_records({"n_rounds": 2, "n_actions": 3, "action": [2, 0],
...     "reward": [1, 0], "pscore": [0.5, 0.25], "context": [[0.1], [0.2]]})
>>> [r["value"].get("output") for r in records if r["topic"] == "decisions"]
[{'action': 2, 'propensity': 0.5}, {'action': 0, 'propensity': 0.25}]
>>> records[0]["value"]["params"]["feature_layout"], report.render()
('shared', '2 events imported from obp')
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from banditflow.offline.formats import (
    EventNumbers,
    ImportReport,
    candidate_learner_record,
    imported_round,
    learner_record,
)


class OBPFormatError(ValueError):
    pass


def load_bandit_feedback(path: Path) -> dict[str, Any]:
    """The bandit-feedback dictionary saved at ``path`` (``.npz`` or JSON)."""
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as arrays:
            return {name: arrays[name] for name in arrays.files}
    with open(path) as source:
        loaded = json.load(source)
    if not isinstance(loaded, dict):
        raise OBPFormatError(f"{path}: expected one JSON object of OBP's bandit feedback")
    return loaded


def _array(feedback: Mapping[str, Any], name: str, rounds: int, ndim: int) -> np.ndarray | None:
    if feedback.get(name) is None:
        return None
    array = np.asarray(feedback[name], dtype=float)
    if ndim == 2 and array.ndim == 1:
        array = array[:, None]
    if array.ndim != ndim or (rounds >= 0 and array.shape[0] != rounds):
        raise OBPFormatError(f"'{name}' has shape {array.shape}; expected {ndim} dimensions"
                             + (f" and {rounds} rows" if rounds >= 0 else ""))
    if not np.all(np.isfinite(array)):
        raise OBPFormatError(f"'{name}' holds NaN or infinite values")
    return array


def obp_records(feedback: Mapping[str, Any], learner_id: str = "imported"
                ) -> tuple[list[dict[str, Any]], ImportReport]:
    """Archive records of OBP bandit ``feedback`` (see the module docstring)."""
    missing = [name for name in ("action", "reward") if feedback.get(name) is None]
    if missing:
        raise OBPFormatError(f"bandit feedback without {' and '.join(missing)}")
    action = np.asarray(feedback["action"])
    rounds = len(action)
    if not np.issubdtype(action.dtype, np.integer):
        raise OBPFormatError("'action' must hold integers")
    reward = np.asarray(_array(feedback, "reward", rounds, 1))
    pscore = _array(feedback, "pscore", rounds, 1)
    context = _array(feedback, "context", rounds, 2)
    if context is None:
        context = np.zeros((rounds, 0))
    actions = int(feedback.get("n_actions") or (action.max() + 1 if rounds else 0))
    if rounds and not (action.min() >= 0 and action.max() < actions):
        raise OBPFormatError(f"'action' must lie in [0, {actions})")
    position = feedback.get("position")
    if position is not None and len(np.unique(position)) > 1:
        position = np.asarray(position, dtype=int)
        slots = int(feedback.get("len_list") or position.max() + 1)
        context = np.hstack([context, np.eye(slots)[position]])
    action_context = _array(feedback, "action_context", actions, 2)
    numbers = EventNumbers()
    if action_context is None:
        records = [learner_record(numbers, learner_id, actions, context.shape[1], "shared")]
        items = None
    else:
        records = [candidate_learner_record(numbers, learner_id, context.shape[1],
                                            action_context.shape[1], actions)]
        items = [{"id": str(j), "features": row}
                 for j, row in enumerate(action_context.tolist())]
    report = ImportReport("obp")
    for t in range(rounds):
        fields: dict[str, Any] = {"features": context[t].tolist()}
        output: dict[str, Any] = {"action": int(action[t])}
        if items is not None:
            fields["actions"] = items
            output["action_id"] = items[int(action[t])]["id"]
        if pscore is not None:
            output["propensity"] = float(pscore[t])
        records.extend(imported_round(numbers, learner_id, str(t), None, fields, output,
                                      -float(reward[t]), "obp"))
        report.events += 1
    return records, report
