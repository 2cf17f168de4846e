"""The order a faithful replay keeps (``banditflow replay --faithful``).

A learner's decision depends on the feedback it had absorbed when it decided. A worker reads
contexts and feedback from two topics, so a replay of both may interleave them differently
from the live run. Each decision carries ``learner_updates``, how many feedback (and
timeout) updates its learner had absorbed, and from that and the archive :func:`faithful_plan`
rebuilds each learner's live sequence of steps, the way the worker went through them:

- the worker read the feedback in its topic's order; a feedback whose decision was made
  became the next update, one whose decision was not made yet was held and applied right
  after it;
- a decision was made once as many updates as its ``learner_updates`` were in.

The replay sends each learner's steps in that order: a context as soon as the steps before
it are sent, with ``after_updates`` (the worker holds it until its learner has absorbed that
many: the feedback sent just before it may be read after it), a feedback once the replay's
workers have published the decisions made before it live.

Which feedback records were updates is read off the archive: not one dead-lettered live (the
archive's ``deadletter`` records name their source's partition and offset; such records are
not replayed), and, the way the processors decide it, not another feedback for a part
already applied (a copy is deduplicated). What cannot be rebuilt is refused up front with the
reason: decisions settled by their timeout (updates no archived feedback explains), a learner
reconfigured, deleted or re-created during the run, a decision whose context is not in the
archive, an archive older than version 2 (no dead letters).

>>> decision = {"family": "conformal", "algorithm": "sps", "learner_version": 1}
>>> records = [
...     {"topic": "contexts", "key": "s", "value": {"learner_id": "s", "event_id": "a"}},
...     {"topic": "decisions", "key": "s", "value": {**decision, "learner_id": "s",
...      "event_id": "a", "learner_updates": 0, "output": {"set": [0]}}},
...     {"topic": "contexts", "key": "s", "value": {"learner_id": "s", "event_id": "b"}},
...     {"topic": "feedback", "partition": 0, "offset": 0, "key": "s",
...      "value": {"learner_id": "s", "event_id": "a", "missed": False}},
...     {"topic": "decisions", "key": "s", "value": {**decision, "learner_id": "s",
...      "event_id": "b", "learner_updates": 1, "output": {"set": [1]}}},
... ]
>>> [(step.index, step.after) for step in faithful_plan(records).steps["s"]]
[(0, 0), (3, 1), (2, 1)]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from banditflow.learners.base import LearnerError
from banditflow.learners.registry import learner_class
from banditflow.processors.processor import ENVELOPE
from banditflow.schemas.archive import ARCHIVE_VERSION

Key = tuple[str, str]  # (learner id, event id)


class FaithfulError(ValueError):
    """An archive a faithful replay cannot keep the order of (the message says why)."""


@dataclass(frozen=True)
class Step:
    """One record of a learner's live sequence: ``index`` in the archive's records; for a
    context, the decision's ``learner_updates``; for a feedback, how many of the learner's
    decisions were made before it (the replay sends it once as many are out)."""

    index: int
    after: int


@dataclass
class FaithfulPlan:
    """Each learner's ``steps`` in their live order and its ``decisions`` (event ids, in the
    order made); the ``followers`` of an event (truth, a context sent again), sent once its
    decision is out; what is sent at once, as it is (``unplanned``: configs, and records of
    no decided event); the dead-lettered feedback not replayed (``skipped``); and each live
    decision's output (``live``), to compare with."""

    steps: dict[str, list[Step]] = field(default_factory=dict)
    decisions: dict[str, list[str]] = field(default_factory=dict)
    followers: dict[Key, list[int]] = field(default_factory=lambda: defaultdict(list))
    unplanned: list[int] = field(default_factory=list)
    skipped: int = 0
    live: dict[Key, Any] = field(default_factory=dict)


def _value(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    value = record.get("value")
    return value if isinstance(value, Mapping) else None


def _key(value: Mapping[str, Any]) -> Key:
    return str(value.get("learner_id")), str(value.get("event_id"))


@dataclass
class _Decision:
    event_id: str
    updates: int
    family: str
    algorithm: str
    context: int | None = None


def faithful_plan(records: Sequence[Mapping[str, Any]],
                  archive_version: int = ARCHIVE_VERSION) -> FaithfulPlan:
    """The plan of a faithful replay of an archive's ``records`` (see the module docstring);
    :class:`FaithfulError` when it cannot be made."""
    if archive_version < 2:
        raise FaithfulError(f"the archive is of version {archive_version}, which holds no dead "
                            "letters: archive the run again")
    plan = FaithfulPlan()
    made: dict[str, list[_Decision]] = defaultdict(list)
    by_key: dict[Key, _Decision] = {}
    versions: dict[str, set[Any]] = defaultdict(set)
    deleted: set[str] = set()
    rejected: set[tuple[Any, Any]] = set()
    for record in records:
        value, topic = _value(record), record.get("topic")
        if topic == "learners" and value is None and record.get("key") is not None:
            deleted.add(str(record["key"]))
        elif topic == "deadletter" and value is not None:
            if str(value.get("source_topic", "")).endswith(".feedback"):
                rejected.add((value.get("partition"), value.get("offset")))
        elif topic == "decisions" and value is not None and not value.get("redelivered"):
            key = _key(value)
            if key in by_key:
                continue  # decided again after a restart: the first one counts
            updates = value.get("learner_updates")
            if not isinstance(updates, int):
                raise FaithfulError(
                    f"the decision of {key[0]!r}/{key[1]!r} carries no learner_updates: the "
                    "archive comes from an import or from workers older than --faithful")
            by_key[key] = _Decision(key[1], updates, str(value.get("family")),
                                    str(value.get("algorithm")))
            made[key[0]].append(by_key[key])
            versions[key[0]].add(value.get("learner_version"))
            plan.live[key] = value.get("output")
    for lid in sorted(made):
        counts = [d.updates for d in made[lid]]
        if len(versions[lid]) > 1 or lid in deleted or counts != sorted(counts):
            raise FaithfulError(f"{lid!r} was reconfigured, deleted or re-created during the "
                                "archived run: replay it without --faithful")
    feedback: dict[str, list[tuple[int, str, bool]]] = defaultdict(list)
    applied_parts: set[tuple[str, str, str]] = set()
    for index, record in enumerate(records):
        value, topic = _value(record), record.get("topic")
        if topic in ("decisions", "deadletter"):
            continue
        known = value is not None and _key(value) in by_key
        if topic == "contexts" and known:
            decided = by_key[_key(value)]  # type: ignore[arg-type]
            if decided.context is None:
                decided.context = index
            else:
                plan.followers[_key(value)].append(index)  # (re-emits the decision)
        elif topic == "truth" and known:
            plan.followers[_key(value)].append(index)
        elif topic == "feedback" and known:
            if (record.get("partition"), record.get("offset")) in rejected:
                plan.skipped += 1
                continue
            lid, eid = _key(value)  # type: ignore[arg-type]
            decided = by_key[(lid, eid)]
            fields = {k: v for k, v in value.items() if k not in ENVELOPE and v is not None}
            try:
                part = learner_class(decided.family, decided.algorithm).feedback_part(fields)
            except LearnerError:
                part = str(fields.get("part") or "")
            # The first feedback for a part is an update; another is a copy (deduplicated).
            feedback[lid].append((index, eid, (lid, eid, part) not in applied_parts))
            applied_parts.add((lid, eid, part))
        elif topic == "feedback":
            plan.skipped += 1  # no decision to join: dead-lettered live
        else:
            plan.unplanned.append(index)  # configs; contexts and truth of no decision
    for lid, decisions in made.items():
        missing = [d.event_id for d in decisions if d.context is None]
        if missing:
            raise FaithfulError(
                f"{len(missing):,} decisions of {lid!r} have no context in the archive (the "
                f"first: {missing[0]!r}): archive the run with --from-beginning")
        plan.decisions[lid] = [d.event_id for d in decisions]
        plan.steps[lid] = _live_steps(lid, decisions, feedback[lid])
    return plan


def _live_steps(lid: str, decisions: list[_Decision],
                feedback: list[tuple[int, str, bool]]) -> list[Step]:
    """A learner's steps in the order its worker went through them (module docstring)."""
    steps: list[Step] = []
    held: dict[str, list[tuple[int, bool]]] = defaultdict(list)  # early feedback by event
    position = {d.event_id: i for i, d in enumerate(decisions)}
    updates = made = read = 0
    while made < len(decisions) or read < len(feedback):
        if made < len(decisions) and decisions[made].updates <= updates:
            decided = decisions[made]
            steps.append(Step(decided.context, decided.updates))  # type: ignore[arg-type]
            made += 1
            for index, counted in held.pop(decided.event_id, []):
                steps.append(Step(index, made))
                updates += counted
        elif read < len(feedback):
            index, eid, counted = feedback[read]
            read += 1
            if position[eid] >= made:
                held[eid].append((index, counted))
            else:
                steps.append(Step(index, made))
                updates += counted
        else:
            decided = decisions[made]
            raise FaithfulError(
                f"{lid!r} decided {decided.event_id!r} after {decided.updates} updates, but "
                f"the archive's feedback explains {updates}: decisions settled by their "
                "timeout (or feedback missing from the archive) leave no record to replay")
    return steps
