"""``banditflow make-log``: build evaluation logs from data that ships with packages.

Every module in this package, and every module a family's front door lists in ``logs``,
defines ``LOGS: dict[str, LogBuilder]``; a builder writes a JSONL log (the format
``banditflow evaluate --family F`` reads; ``dsjson-synthetic`` writes a Vowpal Wabbit DSJSON
log for ``banditflow ope``) and returns a short description of what it wrote. Builders never
download anything.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

from banditflow.learners.registry import families

LogBuilder = Callable[[Path, int, int], str]  # (out, rounds, seed) -> description


def builders() -> dict[str, LogBuilder]:
    found: dict[str, LogBuilder] = {}
    modules = [f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__)]
    for declared in families().values():
        modules += [name for name in declared.logs if name not in modules]
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name, builder in getattr(module, "LOGS", {}).items():
            if name in found:
                raise RuntimeError(f"log {name!r} is defined twice")
            found[name] = builder
    return found
