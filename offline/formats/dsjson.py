"""Vowpal Wabbit / Azure Personalizer decision-service JSON (DSJSON) into the archive format.

One JSON object a line, a contextual-bandit event with action-dependent features:

- ``c``: the context; its fields are the shared features (objects are namespaces), and
  ``c._multi`` holds one feature object per action: the event's candidates. The action index
  is the 0-based position in ``_multi`` (``constant:J`` of ``banditflow ope`` plays
  ``_multi[J]``), a candidate's id its 1-based position as text (VW's action ids in ``a``);
- ``a``: the action ids (1-based positions in ``_multi``) as ranked, ``a[0]`` the one played;
  ``p``: the probabilities of those actions, in the order of ``a``;
- ``_labelIndex`` (0-based) / ``_label_Action`` (1-based): the played action, with
  ``_label_probability`` its probability and ``_label_cost`` its cost (a reward is
  ``-_label_cost``; Personalizer writes the negated reward there);
- ``o``: the outcomes joined to the event (``{"v": value, "EventId": ...}`` for a reward,
  ``{"ActionTaken": true, ...}`` for an activation); the cost already aggregates them;
- ``_skipLearn: true``: an event Personalizer's joiner marks as not learnable (its deferred
  activation never came); VW's DSJSON reader leaves such events out, and so does this import
  (counted as ``not activated (_skipLearn)``);
- ``pdrop``: the probability that the logger dropped an event like this one; as VW does, the
  event then stands for 1 / (1 - pdrop) events in every estimator of ``banditflow ope``
  (kept in the decision's output; a ``pdrop`` outside [0, 1) skips the event);
- ``EventId``, ``Timestamp`` (ISO 8601), ``VWState``.

Lines that are not such an event are skipped with a reason: not JSON, conditional contextual
bandit or slates events (``_outcomes`` / ``_slots``), and lines without the chosen action or
``_multi`` (reward-only "dangling" lines). An event without ``_label_cost`` keeps its context
and decision but has no feedback (VW does not learn from an unlabeled example).

Each event becomes a graph_cb context with candidates (``features``: the shared vector,
``actions``: ``{"id", "features"}`` per ``_multi`` entry), filed under a learner with
``action_features``, whose pair features cross the shared vector with each candidate's (VW's
``-q`` of the shared and action namespaces). Feature objects are flattened VW-style (a number
is its value, a string ``s`` of field ``f`` the feature ``f`` + ``s`` with value 1, ``true``
value 1, an array of numbers one feature per element, nested objects join their names with
``^``), and each flattened name is hashed into one of ``dims`` slots, the same for the shared
vector and for every candidate's: slot = CRC-32 of the name (UTF-8) modulo ``dims``, values of
names sharing a slot added. A name means the same slot in every event, so a candidate first
seen late is scored from the features it shares with earlier ones.

>>> line = ('{"_label_cost": -1.0, "_label_probability": 0.7, "_label_Action": 2, '
...         '"_labelIndex": 1, "o": [{"v": 1.0, "EventId": "ev"}], '
...         '"Timestamp": "2021-07-29T10:00:00.000Z", "Version": "1", "EventId": "ev", '
...         '"a": [2, 1], "c": {"User": {"id": "u1"}, "_multi": [{"I": {"id": "x"}}, '
...         '{"I": {"id": "y"}}]}, "p": [0.7, 0.3], "VWState": {"m": "N/A"}}')
>>> records, report = dsjson_records([line], learner_id="vw", dims=8)
>>> [r["topic"] for r in records]
['learners', 'contexts', 'decisions', 'feedback']
>>> [a["id"] for a in records[1]["value"]["actions"]], records[1]["value"]["features"]
(['1', '2'], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
>>> records[2]["value"]["output"], records[3]["value"]["losses"]
({'action': 1, 'action_id': '2', 'p': [0.3, 0.7]}, {'2': -1.0})
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from banditflow.offline.formats import (
    EventNumbers,
    ImportReport,
    candidate_learner_record,
    imported_round,
)

# Hashed slots of the shared vector and of each candidate's: the pair features a learner
# and DR's reward model read are dims^2 + 2 dims long.
DEFAULT_DIMS = 16
PROBABILITY_TOLERANCE = 1e-4

Feature = tuple[str, float]


def flatten(fields: Mapping[str, Any], namespace: str = "") -> list[Feature]:
    """The features of a DSJSON feature object (fields starting with ``_`` are not features)."""
    features: list[Feature] = []
    for name, value in fields.items():
        if name.startswith("_"):
            continue
        full = f"{namespace}^{name}" if namespace else name
        if isinstance(value, Mapping):
            features.extend(flatten(value, full))
        elif isinstance(value, bool):
            if value:
                features.append((full, 1.0))
        elif isinstance(value, int | float):
            if math.isfinite(value):
                features.append((full, float(value)))
        elif isinstance(value, str):
            features.append((full + value, 1.0))
        elif isinstance(value, list):
            features.extend((f"{full}[{i}]", float(v)) for i, v in enumerate(value)
                            if isinstance(v, int | float) and not isinstance(v, bool)
                            and math.isfinite(v))
    return features


def hashed(features: list[Feature], dims: int) -> list[float]:
    """Flattened features hashed into ``dims`` slots (CRC-32 of the name modulo dims)."""
    vector = [0.0] * dims
    for name, value in features:
        vector[zlib.crc32(name.encode()) % dims] += value
    return [round(v, 9) for v in vector]


def _timestamp(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _played(event: Mapping[str, Any]) -> int | None:
    """The 0-based index of the played action: ``_labelIndex``, else ``_label_Action`` - 1,
    else ``a[0]`` - 1."""
    if isinstance(event.get("_labelIndex"), int):
        return int(event["_labelIndex"])
    if isinstance(event.get("_label_Action"), int):
        return int(event["_label_Action"]) - 1
    ranked = event.get("a")
    if isinstance(ranked, list) and ranked and isinstance(ranked[0], int):
        return int(ranked[0]) - 1
    return None


def _distribution(event: Mapping[str, Any], actions: int) -> list[float] | None:
    """The logging distribution by action index, from ``a`` and ``p``, when they are whole."""
    ranked, probabilities = event.get("a"), event.get("p")
    if not (isinstance(ranked, list) and isinstance(probabilities, list)
            and len(ranked) == len(probabilities) == actions):
        return None
    p = [0.0] * actions
    for action_id, probability in zip(ranked, probabilities, strict=True):
        if not (isinstance(action_id, int) and 1 <= action_id <= actions
                and isinstance(probability, int | float)):
            return None
        p[action_id - 1] = float(probability)
    return p if abs(sum(p) - 1.0) <= PROBABILITY_TOLERANCE else None


def _skip_reason(event: Any) -> str | None:
    if not isinstance(event, Mapping):
        return "not a JSON object"
    if "_outcomes" in event or "_slots" in (event.get("c") or {}):
        return "CCB / slates event"
    if event.get("_skipLearn") is True:
        return "not activated (_skipLearn)"
    context = event.get("c")
    if not isinstance(context, Mapping) or not isinstance(context.get("_multi"), list):
        return "no c._multi (not a CB event)"
    played = _played(event)
    if played is None or not 0 <= played < len(context["_multi"]):
        return "no chosen action"
    pdrop = event.get("pdrop", 0.0)
    if isinstance(pdrop, bool) or not isinstance(pdrop, int | float) or not 0.0 <= pdrop < 1.0:
        return "pdrop not in [0, 1)"
    return None


def dsjson_records(lines: Iterable[str], learner_id: str = "imported",
                   dims: int = DEFAULT_DIMS) -> tuple[list[dict[str, Any]], ImportReport]:
    """Archive records of DSJSON ``lines`` (see the module docstring) and what was skipped."""
    report = ImportReport("dsjson")
    numbers = EventNumbers()
    rounds: list[dict[str, Any]] = []
    most = 1
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            report.skipped["not JSON"] += 1
            continue
        reason = _skip_reason(event)
        if reason is not None:
            report.skipped[reason] += 1
            continue
        event_id = str(event.get("EventId") or f"line-{number}")
        if event_id in seen:
            report.skipped["repeated EventId"] += 1
            continue
        seen.add(event_id)
        context = event["c"]
        candidates = [{"id": str(position),
                       "features": hashed(flatten(a) if isinstance(a, Mapping) else [], dims)}
                      for position, a in enumerate(context["_multi"], start=1)]
        actions = len(candidates)
        most = max(most, actions)
        action = _played(event)
        assert action is not None  # (_skip_reason)
        p = _distribution(event, actions)
        propensity = event.get("_label_probability")
        output: dict[str, Any] = {"action": action, "action_id": candidates[action]["id"]}
        if p is not None and (not isinstance(propensity, int | float)
                              or abs(p[action] - propensity) <= PROBABILITY_TOLERANCE):
            output["p"] = p
        elif isinstance(propensity, int | float):
            output["propensity"] = float(propensity)
        if event.get("pdrop"):
            output["pdrop"] = float(event["pdrop"])
        cost = event.get("_label_cost")
        loss = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
        fields = {"features": hashed(flatten(context), dims), "actions": candidates}
        rounds.extend(imported_round(numbers, learner_id, event_id,
                                     _timestamp(event.get("Timestamp")), fields, output,
                                     loss, "dsjson"))
        report.events += 1
    head = [candidate_learner_record(EventNumbers(), learner_id, dims, dims, most)]
    return head + rounds, report
