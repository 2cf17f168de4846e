"""The JSON Schema files published beside the models (events and the archive format), and
their drift check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from banditflow.schemas import MODELS, SCHEMA_VERSION
from banditflow.schemas.archive import check_archive_schema, write_archive_schema

DIRECTORY = Path(__file__).resolve().parent


def schema_document(name: str) -> dict[str, Any]:
    document = MODELS[name].model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["$id"] = f"https://banditflow.dev/schemas/v{SCHEMA_VERSION}/{name}.schema.json"
    return document


def path_of(name: str) -> Path:
    return DIRECTORY / f"{name}.schema.json"


def render(name: str) -> str:
    return json.dumps(schema_document(name), indent=2, sort_keys=True) + "\n"


def write_published() -> list[Path]:
    """Writes every event schema and the archive's."""
    paths = []
    for name in MODELS:
        path_of(name).write_text(render(name))
        paths.append(path_of(name))
    return [*paths, write_archive_schema()]


def check_published() -> list[str]:
    """One line per schema file that is missing or differs from its model."""
    problems = []
    for name in MODELS:
        path = path_of(name)
        if not path.exists():
            problems.append(f"{path} is missing: run `banditflow schemas --write`")
        elif path.read_text() != render(name):
            problems.append(f"{path} differs from the model: run `banditflow schemas --write`")
    return problems + check_archive_schema()
