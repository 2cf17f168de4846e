"""Importing other systems' bandit logs into the archive format (:mod:`banditflow.schemas.archive`).

* :mod:`banditflow.offline.formats.dsjson`: Vowpal Wabbit's / Azure Personalizer's decision-service
JSON;
* :mod:`banditflow.offline.formats.obp`: Open Bandit Pipeline's batch bandit feedback.

Each importer turns a log into archive records (a ``learners`` config, then per event a
``contexts``, a ``decisions`` and, when a reward was logged, a ``feedback`` record, all under
one learner id) and an :class:`ImportReport` of what it kept and skipped. The decisions carry
``family: "graph_cb"`` and ``algorithm: "imported:<format>"``, so
:func:`banditflow.offline.archive.joined_rounds` reads an imported log like an archived one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("dsjson", "obp")


@dataclass
class ImportReport:
    """How many events an import kept, and how many it skipped, by reason."""

    source: str
    events: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def render(self) -> str:
        text = f"{self.events:,} events imported from {self.source}"
        if self.skipped:
            reasons = ", ".join(f"{count:,} {reason}" for reason, count in
                                sorted(self.skipped.items()))
            text += f"; skipped: {reasons}"
        return text


def archive_record(topic: str, offset: int, key: str, value: dict[str, Any],
                   timestamp: float | None) -> dict[str, Any]:
    """An archive line of an imported event (partition 0; offsets count the topic's records)."""
    return {"topic": topic, "partition": 0, "offset": offset, "timestamp": timestamp,
            "key": key, "value": value}


class EventNumbers:
    """Offsets per archived topic, as a single-partition topic would have given them."""

    def __init__(self) -> None:
        self.next: Counter[str] = Counter()

    def record(self, topic: str, key: str, value: dict[str, Any],
               timestamp: float | None) -> dict[str, Any]:
        offset = self.next[topic]
        self.next[topic] += 1
        return archive_record(topic, offset, key, value, timestamp)


def imported_round(numbers: EventNumbers, learner_id: str, event_id: str, ts: float | None,
                   fields: dict[str, Any], output: dict[str, Any],
                   loss: float | None, source: str) -> list[dict[str, Any]]:
    """The context (its family ``fields``), decision and (with a loss) feedback records of one
    imported event; the loss is keyed by the played candidate's id when the context offered
    candidates (``action_id`` in ``output``), else by the action's index."""
    envelope = {"learner_id": learner_id, "event_id": event_id}
    if ts is not None:
        envelope["ts"] = ts
    records = [
        numbers.record("contexts", learner_id, {**envelope, **fields}, ts),
        numbers.record("decisions", learner_id, {
            **envelope, "family": "graph_cb", "algorithm": f"imported:{source}",
            "learner_version": 1, "output": output, "decided_at": ts or 0.0,
        }, ts),
    ]
    if loss is not None:
        played = str(output.get("action_id", output["action"]))
        records.append(numbers.record(
            "feedback", learner_id, {**envelope, "losses": {played: loss}}, ts))
    return records


def learner_record(numbers: EventNumbers, learner_id: str, actions: int, feature_dim: int,
                   layout: str) -> dict[str, Any]:
    """The config of the learner an imported log is filed under: graph_cb with bandit
    feedback over the log's actions and features (a learner a replay or warm start can build)."""
    return numbers.record("learners", learner_id, {
        "learner_id": learner_id, "family": "graph_cb", "algorithm": "squarecb_g",
        "params": {"actions": actions, "feature_dim": feature_dim, "feature_layout": layout,
                   "graph_kind": "bandit"},
    }, None)


def candidate_learner_record(numbers: EventNumbers, learner_id: str, feature_dim: int,
                             action_features: int, most: int) -> dict[str, Any]:
    """The config of the learner a log of candidate sets is filed under: graph_cb with bandit
    feedback over each event's candidates (at most ``most``), with their features."""
    return numbers.record("learners", learner_id, {
        "learner_id": learner_id, "family": "graph_cb", "algorithm": "squarecb_g",
        "params": {"feature_dim": feature_dim, "action_features": action_features,
                   "max_actions": most, "graph_kind": "bandit"},
    }, None)


def import_log(path: Path, source: str, learner_id: str = "imported",
               dims: int | None = None) -> tuple[list[dict[str, Any]], ImportReport]:
    """Archive records of the ``source`` log (``dsjson`` or ``obp``) at ``path``; ``dims`` is
    the hashed feature size of a DSJSON import."""
    # The importers import this module's helpers: they are loaded only when asked for.
    if source == "dsjson":
        from banditflow.offline.formats.dsjson import DEFAULT_DIMS, dsjson_records

        with open(path) as lines:
            return dsjson_records(lines, learner_id, dims or DEFAULT_DIMS)
    if source == "obp":
        from banditflow.offline.formats.obp import load_bandit_feedback, obp_records

        return obp_records(load_bandit_feedback(path), learner_id)
    raise ValueError(f"unknown log format {source!r}; known: {', '.join(FORMATS)}")
