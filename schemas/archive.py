"""The archive format: banditflow's topics (or an imported log) as one JSONL file.

The first line is an :class:`ArchiveHeader`; every other line is an :class:`ArchiveRecord`,
one Kafka record of the ``learners``, ``contexts``, ``decisions``, ``feedback``, ``truth`` or
``deadletter`` topic, with the event as it was published in ``value``. The format has its own
version (:data:`ARCHIVE_VERSION`; version 2 added the ``deadletter`` topic, and version 1
archives read as they are), independent of the events' ``schema_version`` that every value
carries. ``schemas/archive.schema.json`` is generated from these models
(``banditflow schemas --write``) and a test fails when the two drift apart.

>>> line = ArchiveRecord.model_validate_json(
...     '{"topic": "contexts", "partition": 0, "offset": 7, "timestamp": 1.5, "key": "shop",'
...     ' "value": {"learner_id": "shop", "event_id": "e1", "features": [0.5]}}')
>>> line.topic, line.value["event_id"]
('contexts', 'e1')
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

ARCHIVE_VERSION = 2
ARCHIVED_TOPICS = ("learners", "contexts", "decisions", "feedback", "truth", "deadletter")
SCHEMA_PATH = Path(__file__).resolve().parent / "archive.schema.json"

ArchivedTopic = Literal["learners", "contexts", "decisions", "feedback", "truth", "deadletter"]


class ArchiveHeader(BaseModel):
    """The first line of an archive: what it holds and where it came from."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["banditflow-archive"] = "banditflow-archive"
    version: int = Field(ARCHIVE_VERSION, ge=1, le=ARCHIVE_VERSION)
    source: str = Field(
        description="where the records came from: 'kafka' (banditflow archive), 'dsjson' "
        "(a Vowpal Wabbit / Personalizer log) or 'obp' (an Open Bandit Pipeline batch)"
    )
    prefix: str | None = Field(None, description="the topic prefix that was archived")
    created_at: float = Field(description="when the archive was written, seconds since the epoch")


class ArchiveRecord(BaseModel):
    """One record of a topic: where it was, its key, and the event as published."""

    model_config = ConfigDict(extra="forbid")

    topic: ArchivedTopic = Field(description="the topic without its prefix")
    partition: int = Field(ge=0)
    offset: int = Field(ge=0, description="the record's offset in its partition")
    timestamp: float | None = Field(
        None, description="the record's Kafka timestamp, seconds since the epoch"
    )
    key: str | None = Field(None, description="the record key (the learner id), UTF-8")
    value: dict[str, Any] | None = Field(
        description="the event as published, decoded from JSON; null for a tombstone or for "
        "a value that is not a JSON object (then see raw)"
    )
    raw: str | None = Field(
        None, description="a value that is not a JSON object, UTF-8 decoded with replacement"
    )


ARCHIVE_LINE = TypeAdapter(ArchiveHeader | ArchiveRecord)


def archive_schema_document() -> dict[str, Any]:
    document = ARCHIVE_LINE.json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["$id"] = f"https://banditflow.dev/schemas/archive/v{ARCHIVE_VERSION}/archive.schema.json"
    document["title"] = "ArchiveLine"
    document["description"] = (
        "One line of a banditflow archive (JSONL): the first line is an ArchiveHeader, "
        "every other line an ArchiveRecord."
    )
    return document


def render_archive_schema() -> str:
    return json.dumps(archive_schema_document(), indent=2, sort_keys=True) + "\n"


def write_archive_schema() -> Path:
    SCHEMA_PATH.write_text(render_archive_schema())
    return SCHEMA_PATH


def check_archive_schema() -> list[str]:
    """One line when the published archive schema is missing or differs from the models."""
    if not SCHEMA_PATH.exists():
        return [f"{SCHEMA_PATH} is missing: run `banditflow schemas --write`"]
    if SCHEMA_PATH.read_text() != render_archive_schema():
        return [f"{SCHEMA_PATH} differs from the model: run `banditflow schemas --write`"]
    return []
