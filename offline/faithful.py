"""The order a faithful replay keeps (``banditflow replay --faithful``).

A learner's decision depends on the feedback it had absorbed when it decided. A worker reads
contexts and feedback from two topics, so a replay of both may interleave them differently
from the live run. Each decision carries ``learner_updates``, how many feedback (and timeout)
updates its learner had absorbed, and that fixes the live order:

- the context of the i-th decision waits, in the worker, until its learner has absorbed
  ``learner_updates`` updates (the replay sets its ``after_updates``);
- the j-th applied feedback record is produced only once the replay's worker has published
  the decisions that came before it live: the m_j first decisions, m_j being how many
  decisions carry ``learner_updates < j``.

Which feedback records were applied live is read off the archive: not one dead-lettered
live (the archive's ``deadletter`` records name their source's partition and offset), and,
the way the processors decide it, feedback for a decision the archive holds, and not another
feedback for a part already applied (a copy is deduplicated, a different one is
contradicting). A decision settled by its timeout, or a learner reconfigured during the run,
shifts the count: the replay then reports the decisions that differ.

>>> records = [
...     {"topic": "contexts", "key": "s", "value": {"learner_id": "s", "event_id": "a"}},
...     {"topic": "decisions", "key": "s", "value": {"learner_id": "s", "event_id": "a",
...      "family": "conformal", "algorithm": "sps", "learner_version": 1,
...      "learner_updates": 0, "output": {"set": [0]}}},
...     {"topic": "contexts", "key": "s", "value": {"learner_id": "s", "event_id": "b"}},
...     {"topic": "feedback", "key": "s", "value": {"learner_id": "s", "event_id": "a",
...      "missed": False}},
...     {"topic": "decisions", "key": "s", "value": {"learner_id": "s", "event_id": "b",
...      "family": "conformal", "algorithm": "sps", "learner_version": 1,
...      "learner_updates": 1, "output": {"set": [1]}}},
... ]
>>> plan = faithful_plan(records)
>>> plan.after_updates[("s", "b")], plan.feedback_gates[3]
(1, ('s', 1))
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from learners.base import LearnerError
from learners.registry import learner_class
from processors.processor import ENVELOPE

Key = tuple[str, str]  # (learner id, event id)


class FaithfulError(ValueError):
    """An archive a faithful replay cannot keep the order of (the message says why)."""


@dataclass
class FaithfulPlan:
    """What a faithful replay of an archive's records needs.

    ``order`` lists each learner's live decisions (event ids, in the order they were made),
    ``after_updates`` each decided context's ``after_updates``, ``feedback_gates`` the
    feedback records (by index in the records) to hold until the learner's first m decisions
    of the replay are out, and ``live`` each live decision's output, to compare with.
    """

    order: dict[str, list[str]] = field(default_factory=dict)
    after_updates: dict[Key, int] = field(default_factory=dict)
    feedback_gates: dict[int, tuple[str, int]] = field(default_factory=dict)
    live: dict[Key, Any] = field(default_factory=dict)


def _value(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    value = record.get("value")
    return value if isinstance(value, Mapping) else None


def faithful_plan(records: Sequence[Mapping[str, Any]]) -> FaithfulPlan:
    """The plan of a faithful replay of ``records`` (an archive's, in its order)."""
    plan = FaithfulPlan()
    updates: dict[str, list[int]] = {}
    versions: dict[str, set[int]] = {}
    algorithms: dict[str, tuple[str, str]] = {}
    for record in records:
        value = _value(record)
        if record.get("topic") != "decisions" or value is None or value.get("redelivered"):
            continue
        lid, eid = str(value.get("learner_id")), str(value.get("event_id"))
        if (lid, eid) in plan.live:
            continue  # decided again after a restart: the first one counts
        if not isinstance(value.get("learner_updates"), int):
            raise FaithfulError(
                f"the decision of {lid!r}/{eid!r} carries no learner_updates: the archive "
                "comes from an import or from workers older than --faithful (replay it "
                "without --faithful)")
        plan.live[(lid, eid)] = value.get("output")
        plan.order.setdefault(lid, []).append(eid)
        updates.setdefault(lid, []).append(value["learner_updates"])
        versions.setdefault(lid, set()).add(value.get("learner_version"))
        algorithms[lid] = (str(value.get("family")), str(value.get("algorithm")))
    changed = sorted(lid for lid, seen in versions.items() if len(seen) > 1)
    if changed:
        raise FaithfulError(
            f"{', '.join(map(repr, changed))} changed config during the archived run (versions "
            "restart the update count): replay them without --faithful")
    for lid, eids in plan.order.items():
        for eid, count in zip(eids, updates[lid], strict=True):
            plan.after_updates[(lid, eid)] = count
    position = {(lid, eid): i for lid, eids in plan.order.items() for i, eid in enumerate(eids)}
    applied: dict[str, int] = {}
    gate: dict[str, int] = {}
    applied_parts: set[tuple[str, str, str]] = set()
    rejected = {(value.get("partition"), value.get("offset")) for record in records
                if record.get("topic") == "deadletter" and (value := _value(record)) is not None
                and str(value.get("source_topic", "")).endswith(".feedback")}
    for index, record in enumerate(records):
        value = _value(record)
        if record.get("topic") != "feedback" or value is None:
            continue
        key = (str(value.get("learner_id")), str(value.get("event_id")))
        lid = key[0]
        if key not in position:
            continue  # no decision to join: dead-lettered live, and again in the replay
        dead = (record.get("partition"), record.get("offset")) in rejected
        fields = {name: v for name, v in value.items() if name not in ENVELOPE and v is not None}
        try:
            part = learner_class(*algorithms[lid]).feedback_part(fields)
        except LearnerError:
            part = str(fields.get("part") or "")
        # The first feedback for a part is applied; another for it is a copy (deduplicated)
        # or contradicts it (dead-lettered): either way no update.
        counted = not dead and (*key, part) not in applied_parts
        if not dead:
            applied_parts.add((*key, part))
        # Not before its own decision, and in the order of the learner's feedback.
        least = max(gate.get(lid, 0), position[key] + 1)
        if counted:
            applied[lid] = applied.get(lid, 0) + 1
            least = max(least, bisect_left(updates[lid], applied[lid]))
        gate[lid] = least
        plan.feedback_gates[index] = (lid, least)
    return plan

