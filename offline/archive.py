"""Reading and writing archives (:mod:`schemas.archive`), and their joined view.

:func:`joined_rounds` is the one place that turns an archive's records into logged rounds
(context, decision with its propensities, feedback, reward): off-policy evaluation reads
nothing else. A round is a decision of a family that plays one action (``graph_cb``:
``action`` with the full distribution ``p``; ``prob_graph``: ``arm``, no propensity) or an
imported decision (``action`` with ``p`` or only the played action's ``propensity``).

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

from schemas.archive import ArchiveHeader, ArchiveRecord


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


def _played(output: Mapping[str, Any]) -> int | None:
    for name in ("action", "arm"):
        if isinstance(output.get(name), int):
            return int(output[name])
    return None


def _revealed_rewards(feedback: Mapping[str, Any]) -> dict[int, float]:
    """Rewards by action of one feedback: graph_cb ``losses`` (negated), prob_graph ``rewards``."""
    revealed: dict[int, float] = {}
    for name, sign in (("losses", -1.0), ("rewards", 1.0)):
        for key, value in (feedback.get(name) or {}).items():
            try:
                revealed[int(key)] = sign * float(value)
            except (TypeError, ValueError):
                continue
    return revealed


def _config_actions(config: Mapping[str, Any] | None) -> int | None:
    params = (config or {}).get("params") or {}
    for name in ("actions", "arms"):
        if isinstance(params.get(name), int):
            return int(params[name])
    graph = params.get("graph")
    return len(graph) if isinstance(graph, list) else None


def joined_rounds(records: Iterable[Mapping[str, Any]]) -> list[LoggedRound]:
    """The logged rounds of an archive's records, in the order of their decisions.

    A decision published twice (a re-delivered context, a commit redone after a crash)
    counts once; of several feedbacks for one decision, each action's first reward counts
    (as the worker applies them). The number of actions comes from the distribution ``p``,
    else from the learner's config on the learners topic.
    """
    contexts: dict[tuple[str, str], Mapping[str, Any]] = {}
    decisions: dict[tuple[str, str], Mapping[str, Any]] = {}
    feedback: dict[tuple[str, str], dict[int, float]] = {}
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
            seen = feedback.setdefault(key, {})
            for action, reward in _revealed_rewards(value).items():
                seen.setdefault(action, reward)
    rounds = []
    for key, decision in decisions.items():
        output = decision.get("output") or {}
        action = _played(output)
        if action is None:
            continue
        p = output.get("p")
        if isinstance(p, list) and 0 <= action < len(p):
            propensity: float | None = float(p[action])
            actions: int | None = len(p)
        else:
            p = None
            given = output.get("propensity")
            propensity = float(given) if isinstance(given, int | float) else None
            actions = _config_actions(configs.get(key[0]))
        revealed = feedback.get(key, {})
        context = contexts.get(key) or {}
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
        ))
    return rounds

