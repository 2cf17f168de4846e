"""``banditflow make-log``: build evaluation logs from data that ships with packages.

Every module in this package defines ``LOGS: dict[str, LogBuilder]``; a builder writes a
JSONL log (the format ``banditflow evaluate --family F`` reads; ``dsjson-synthetic`` writes a
Vowpal Wabbit DSJSON log for ``banditflow ope``) and returns a short description of what it
wrote. Builders never download anything.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

LogBuilder = Callable[[Path, int, int], str]  # (out, rounds, seed) -> description


def builders() -> dict[str, LogBuilder]:
    found: dict[str, LogBuilder] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, builder in getattr(module, "LOGS", {}).items():
            if name in found:
                raise RuntimeError(f"log {name!r} is defined twice")
            found[name] = builder
    return found
