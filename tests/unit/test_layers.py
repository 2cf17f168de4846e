"""Dependencies point one way, as the README's Layout says: streams -> offline -> processors
-> schemas -> learners; the learners are pure (numpy/scipy, no pydantic: a family's event
models live in schemas/, its front door only names their module)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ORDER = ("learners", "schemas", "processors", "offline", "streams")
FORBIDDEN = {"learners": {"pydantic"}}


def imported(paths: list[Path]) -> list[tuple[str, int, str]]:
    """Every module the files at ``paths`` import (at the top or inside a function), as
    (path relative to the checkout, line, module)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [(str(path.relative_to(ROOT)), node.lineno, name) for name in names]
    return found


def imports(layer: str) -> list[tuple[str, int, str]]:
    """Every module a layer's files import."""
    return imported(sorted((ROOT / layer).rglob("*.py")))


@pytest.mark.parametrize("layer", ORDER)
def test_a_layer_imports_only_the_layers_below_it(layer: str) -> None:
    above = set(ORDER[ORDER.index(layer) + 1:])
    offenders = [f"{path}:{line} imports {name}" for path, line, name in imports(layer)
                 if name.split(".")[0] in FORBIDDEN.get(layer, set())
                 or (name.startswith("banditflow.") and name.split(".")[1] in above)]
    assert offenders == []
