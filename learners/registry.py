"""Family and algorithm names -> learner classes.

Each family package exposes ``ALGORITHMS: dict[str, type[Learner]]``; families are imported
lazily so that, e.g., the torch-based learners cost nothing until used.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from learners.base import Learner, LearnerError

FAMILIES: dict[str, str] = {
    "conformal": "learners.conformal",
    "graph_cb": "learners.graph_cb",
    "deferral": "learners.deferral",
    "prob_graph": "learners.prob_graph",
}


def algorithms(family: str) -> dict[str, type[Learner]]:
    """The selectable algorithms of ``family``."""
    if family not in FAMILIES:
        raise LearnerError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    try:
        module = importlib.import_module(FAMILIES[family])
    except ModuleNotFoundError as exc:
        raise LearnerError(f"family {family!r} is not available in this build: {exc}") from exc
    return dict(module.ALGORITHMS)


def learner_class(family: str, algorithm: str) -> type[Learner]:
    """The class for ``family``/``algorithm``; a clear error lists the valid names."""
    known = algorithms(family)
    if algorithm not in known:
        raise LearnerError(
            f"unknown algorithm {algorithm!r} for family {family!r}; known: {', '.join(known)}"
        )
    return known[algorithm]


def make_learner(family: str, algorithm: str, params: Mapping[str, Any]) -> Learner:
    """A fresh learner; raises :class:`LearnerError` for unknown names or bad parameters."""
    return learner_class(family, algorithm).from_params(params)
