"""Reading and writing archives (:mod:`banditflow.schemas.archive`), and their joined view.

:func:`joined_rounds` is the one place that turns an archive's records into logged rounds
(context, decision with its propensities, feedback, reward): off-policy evaluation reads
nothing else. A round is a decision of a family whose front door names the output field of
the one action it plays (``played_action``; graph_cb's decisions also carry the full
distribution ``p``, prob_graph's no propensity), or an imported decision (filed under
graph_cb: ``action`` with ``p`` or only the played action's ``propensity``); each family
names the feedback field revealing rewards or losses by action (``revealed``). A graph_cb
context that offered its own candidates (``actions``) gives the round its candidates, and
feedback keyed by a candidate's id counts for that candidate. An imported decision may carry
``pdrop``, the share of events its logger dropped (DSJSON): each kept round then stands for
1 / (1 - pdrop) rounds in the estimators.

>>> records = [
...     {"topic": "contexts", "partition": 0, "offset": 0, "key": "r",
...      "value": {"learner_id": "r", "event_id": "e1", "features": [1.0, 0.0]}},
...     {"topic": "decisions", "partition": 0, "offset": 0, "key": "r",
...      "value": {"learner_id": "r", "event_id": "e1", "family": "graph_cb",
...                "algorithm": "squarecb_g", "learner_version": 1, "decided_at": 2.0,
...                "output": {"action": 1, "p": [0.25, 0.75], "gamma": 10.0, "dec": 0.1}}},
...     {"topic": "feedback", "partition": 0, "offset": 0, "key": "r",
...      "value": {"learner_id": "r", "event_id": "e1", "losses": {"1": 0.4, "0": 0.9}}},
... ]
>>> [(r.action, r.propensity, r.reward, r.actions) for r in joined_rounds(records)]
[(1, 0.75, -0.4, 2)]
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from banditflow.learners.base import LearnerError
from banditflow.learners.family import Family
from banditflow.learners.registry import family
from banditflow.schemas.archive import ArchiveHeader, ArchiveRecord


class ArchiveError(ValueError):
    """An archive that cannot be read (the message names the line)."""


class ArchiveWriter:
    """Writes an archive: the header first, then one record a line, flushed as it goes."""

    def __init__(self, out: IO[str], source: str, prefix: str | None = None) -> None:
        self.out = out
        self.records = 0
        header = ArchiveHeader(source=source, prefix=prefix, created_at=time.time())
        out.write(header.model_dump_json() + "\n")

    def write(self, record: Mapping[str, Any]) -> None:
        self.out.write(json.dumps(record, separators=(",", ":")) + "\n")
        self.records += 1


def write_archive(path: Path, records: Iterable[Mapping[str, Any]], source: str,
                  prefix: str | None = None) -> int:
    """Write ``records`` (dicts of :class:`ArchiveRecord`'s fields) to ``path``; their count."""
    with open(path, "w") as out:
        writer = ArchiveWriter(out, source, prefix)
        for record in records:
            writer.write(record)
        return writer.records


def read_archive(path: Path, validate: bool = True) -> tuple[ArchiveHeader, list[dict[str, Any]]]:
    """The header and the records of the archive at ``path``."""
    with open(path) as lines:
        first = lines.readline()
        try:
            header = ArchiveHeader.model_validate_json(first)
        except ValueError:
            raise ArchiveError(
                f"{path}: line 1 is not a banditflow archive header (made by `banditflow "
                "archive` or `banditflow import-log`)"
            ) from None
        records = []
        for number, line in enumerate(lines, start=2):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if validate:
                    ArchiveRecord.model_validate(record)
            except ValueError as exc:
                raise ArchiveError(f"{path}: line {number}: {exc}") from None
            records.append(record)
    return header, records


@dataclass
class LoggedRound:
    """One logged decision joined with its context and feedback.

    ``p`` is the logging distribution over the ``actions`` actions when the decision carries
    it, ``propensity`` the probability of the played ``action`` (None when unknown);
    ``reward`` is the played action's reward (graph_cb: minus its loss; None when its
    feedback never came or did not reveal it); ``revealed`` every reward the feedback
    revealed, by action.
    """

    learner_id: str
    event_id: str
    action: int
    actions: int | None
    propensity: float | None
    p: list[float] | None
    reward: float | None
    features: list[float] | list[list[float]] | None
    revealed: dict[int, float] = field(default_factory=dict)
    ts: float | None = None
    candidates: list[dict[str, Any]] | None = None  # the context's own actions, if it had any
    pdrop: float = 0.0  # the logger's drop probability: the round counts 1 / (1 - pdrop) times


def _family(name: Any) -> Family | None:
    try:
        return family(str(name))
    except LearnerError:  # a family this build does not know: its decisions are no rounds
        return None


def _played(declared: Family, output: Mapping[str, Any]) -> int | None:
    action = output.get(declared.played_action) if declared.played_action else None
    return action if isinstance(action, int) else None


def _revealed_rewards(declared: Family, feedback: Mapping[str, Any],
                      ids: list[str]) -> dict[int, float]:
    """Rewards by action of one feedback (the family's ``revealed`` field, negated when it
    holds losses); a key among the context's candidate ``ids`` is that candidate's, as the
    learner reads it."""
    revealed: dict[int, float] = {}
    if declared.revealed is None:
        return revealed
    sign = -1.0 if declared.revealed_are_losses else 1.0
    for key, value in (feedback.get(declared.revealed) or {}).items():
        try:
            action = ids.index(key) if key in ids else int(key)
            revealed[action] = sign * float(value)
        except (TypeError, ValueError):
            continue
    return revealed


def _config_actions(declared: Family, config: Mapping[str, Any] | None) -> int | None:
    params = (config or {}).get("params") or {}
    for name in declared.action_count_params:
        value = params.get(name)
        if isinstance(value, int):
            return value
        if isinstance(value, list):
            return len(value)
    return None


def joined_rounds(records: Iterable[Mapping[str, Any]]) -> list[LoggedRound]:
    """The logged rounds of an archive's records, in the order of their decisions.

    A decision published twice (a re-delivered context, a commit redone after a crash)
    counts once; of several feedbacks for one decision, each action's first reward counts
    (as the worker applies them). The number of actions comes from the distribution ``p``,
    else from the learner's config on the learners topic.
    """
    contexts: dict[tuple[str, str], Mapping[str, Any]] = {}
    decisions: dict[tuple[str, str], Mapping[str, Any]] = {}
    # Read once the decision says the family (the feedback topic may come first).
    feedback: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    configs: dict[str, Mapping[str, Any]] = {}
    for record in records:
        value = record.get("value")
        if not isinstance(value, Mapping):
            continue
        topic = record.get("topic")
        if topic == "learners":
            configs[str(value.get("learner_id"))] = value
            continue
        key = (str(value.get("learner_id")), str(value.get("event_id")))
        if topic == "contexts":
            contexts.setdefault(key, value)
        elif topic == "decisions":
            decisions.setdefault(key, value)
        elif topic == "feedback":
            feedback.setdefault(key, []).append(value)
    rounds = []
    for key, decision in decisions.items():
        declared = _family(decision.get("family"))
        output = decision.get("output") or {}
        action = None if declared is None else _played(declared, output)
        if declared is None or action is None:
            continue
        context = contexts.get(key) or {}
        candidates = context.get("actions")
        if not isinstance(candidates, list):
            candidates = None
        ids = [str(c.get("id")) for c in candidates or [] if isinstance(c, Mapping)]
        p = output.get("p")
        if isinstance(p, list) and 0 <= action < len(p):
            propensity: float | None = float(p[action])
            actions: int | None = len(p)
        else:
            p = None
            given = output.get("propensity")
            propensity = float(given) if isinstance(given, int | float) else None
            actions = (len(candidates) if candidates is not None
                       else _config_actions(declared, configs.get(key[0])))
        revealed: dict[int, float] = {}
        for value in feedback.get(key, []):
            for revealed_action, reward in _revealed_rewards(declared, value, ids).items():
                revealed.setdefault(revealed_action, reward)
        pdrop = output.get("pdrop")
        rounds.append(LoggedRound(
            learner_id=key[0],
            event_id=key[1],
            action=action,
            actions=actions,
            propensity=propensity,
            p=[float(v) for v in p] if p is not None else None,
            reward=revealed.get(action),
            features=context.get("features"),
            revealed=revealed,
            ts=context.get("ts", decision.get("context_ts")),
            candidates=candidates,
            pdrop=float(pdrop) if isinstance(pdrop, int | float) and 0.0 <= pdrop < 1.0 else 0.0,
        ))
    return rounds



def record_learner(record: Mapping[str, Any]) -> str | None:
    """The learner id of an archived record (its value's, else its key)."""
    value = record.get("value")
    if isinstance(value, Mapping) and value.get("learner_id") is not None:
        return str(value["learner_id"])
    return record.get("key")


def _config_signature(config: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes a new learner version (the worker keeps the version when only timeouts or
    candidates change)."""
    return tuple(json.dumps(config.get(k), sort_keys=True)
                 for k in ("family", "algorithm", "params", "seed"))


@dataclass
class VersionSelection:
    """The records of one version of one learner, and what was left out."""

    records: list[dict[str, Any]]
    learner_id: str
    version: int | None  # None: the archive holds no decision of the learner
    decisions: dict[int, int]  # decisions per version (all versions found)

    def note(self) -> str:
        """One line saying which version was chosen and which were left out."""
        if self.version is None:
            return f"learner {self.learner_id!r}: no decisions in the log"
        others = [f"version {v} ({n:,} decision{'s' * (n != 1)})"
                  for v, n in sorted(self.decisions.items()) if v != self.version]
        chosen = self.decisions[self.version]
        text = (f"learner {self.learner_id!r}: version {self.version} "
                f"({chosen:,} decision{'s' * (chosen != 1)})")
        if others:
            text += f"; left out {', '.join(others)} (--learner-version chooses)"
        return text


def select_version(records: Iterable[dict[str, Any]], learner_id: str,
                   version: int | None = None) -> VersionSelection:
    """The records of ``learner_id``'s learner ``version`` (default: the latest with a
    decision): its decisions, the contexts, feedback, truth and dead letters of their event
    ids, and the configs that made or kept that version. A reconfigured learner (same id, a
    new family, algorithm, params or seed) starts a new version; its decisions carry
    ``learner_version``, the other records are told by their event id.

    >>> records = [
    ...     {"topic": "learners", "key": "r", "value": {"learner_id": "r", "algorithm": "a"}},
    ...     {"topic": "contexts", "key": "r", "value": {"learner_id": "r", "event_id": "e1"}},
    ...     {"topic": "decisions", "key": "r",
    ...      "value": {"learner_id": "r", "event_id": "e1", "learner_version": 1}},
    ...     {"topic": "learners", "key": "r", "value": {"learner_id": "r", "algorithm": "b"}},
    ...     {"topic": "contexts", "key": "r", "value": {"learner_id": "r", "event_id": "e2"}},
    ...     {"topic": "decisions", "key": "r",
    ...      "value": {"learner_id": "r", "event_id": "e2", "learner_version": 2}},
    ... ]
    >>> chosen = select_version(records, "r")
    >>> [(r["topic"], r["value"].get("event_id")) for r in chosen.records]
    [('learners', None), ('contexts', 'e2'), ('decisions', 'e2')]
    >>> for part in chosen.note().split("; "):
    ...     print(part)
    learner 'r': version 2 (1 decision)
    left out version 1 (1 decision) (--learner-version chooses)
    """
    mine = [r for r in records if record_learner(r) == learner_id]
    events: dict[int, set[str]] = {}
    for record in mine:
        value = record.get("value")
        if record.get("topic") == "decisions" and isinstance(value, Mapping):
            given = value.get("learner_version")
            if isinstance(given, int):
                events.setdefault(given, set()).add(str(value.get("event_id")))
    decisions = {v: len(e) for v, e in events.items()}
    if not events:
        if version is not None:
            raise ArchiveError(f"learner {learner_id!r} has no decisions in the log")
        return VersionSelection(mine, learner_id, None, decisions)
    chosen = max(events) if version is None else version
    if chosen not in events:
        raise ArchiveError(
            f"learner {learner_id!r} has no version {chosen} in the log (versions with "
            f"decisions: {', '.join(map(str, sorted(events)))})")
    # Number the configs as the worker does; an archive that starts mid-history (without
    # --from-beginning) is aligned on its last config making the latest version.
    configs = [r for r in mine if r.get("topic") == "learners"]
    numbers: list[int] = []
    count, previous = 0, None
    for record in configs:
        value = record.get("value")
        signature = _config_signature(value) if isinstance(value, Mapping) else None
        if signature is not None and signature != previous:
            count += 1
        previous = signature
        numbers.append(count)
    shift = max(events) - count
    config_ids = {id(r) for r, n in zip(configs, numbers, strict=True) if n + shift == chosen}
    wanted = events[chosen]
    kept = []
    for record in mine:
        value = record.get("value")
        if record.get("topic") == "learners":
            keep = id(record) in config_ids
        elif record.get("topic") == "decisions":
            keep = isinstance(value, Mapping) and value.get("learner_version") == chosen
        else:
            keep = isinstance(value, Mapping) and str(value.get("event_id")) in wanted
        if keep:
            kept.append(record)
    return VersionSelection(kept, learner_id, chosen, decisions)
