"""Families and algorithms by name: the one place that lists the learner families.

Each family declares its front door, a :class:`banditflow.learners.family.Family` (``FAMILY`` in its
``family`` module): the modules of its event models, evaluation task and log builders, its
gauges, simulated application and contract-test parameters, and the module of its
algorithms (``ALGORITHMS: dict[str, type[Learner]]``, imported when first used, so that, e.g.,
the torch-based learners cost nothing until then). Adding a family is one line in
:data:`FAMILIES`; a family defined elsewhere (a plug-in, a test) is added with
:func:`register` (see docs/adding_a_family.md).

>>> sorted(families())
['conformal', 'deferral', 'graph_cb', 'prob_graph']
>>> sorted(algorithms("prob_graph"))
['lp_policy', 'thompson', 'ucb_n']
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from banditflow.learners.base import Learner, LearnerError
from banditflow.learners.family import Family

# name -> module defining its FAMILY
FAMILIES: dict[str, str] = {
    "conformal": "banditflow.learners.conformal.family",
    "graph_cb": "banditflow.learners.graph_cb.family",
    "deferral": "banditflow.learners.deferral.family",
    "prob_graph": "banditflow.learners.prob_graph.family",
}
_registered: dict[str, Family] = {}
# The built-in families imported so far (the processor asks for a family at every event).
_imported: dict[str, Family] = {}
# Bumped whenever the set of families changes: what is derived from every family's
# declaration (e.g. the fields some family's records carry) is cached under it.
_generation = 0


def family(name: str) -> Family:
    """The front door of family ``name``; a clear error lists the known families."""
    if name in _registered:
        return _registered[name]
    if name in _imported:
        return _imported[name]
    if name not in FAMILIES:
        known = ", ".join([*FAMILIES, *_registered])
        raise LearnerError(f"unknown family {name!r}; known: {known}")
    declared: Family = importlib.import_module(FAMILIES[name]).FAMILY
    _imported[name] = declared
    return declared


def families() -> dict[str, Family]:
    """Every family, the built-in ones first, in :data:`FAMILIES` order."""
    return {name: family(name) for name in [*FAMILIES, *_registered]}


def register(declared: Family) -> None:
    """Adds a family defined outside this package (a plug-in, a test): its declaration names
    its own modules (algorithms, event models, ...), so nothing here changes."""
    global _generation
    if declared.name in FAMILIES or declared.name in _registered:
        raise LearnerError(f"family {declared.name!r} is already registered")
    _registered[declared.name] = declared
    _generation += 1


def unregister(name: str) -> None:
    """Removes a family added by :func:`register`."""
    global _generation
    if _registered.pop(name, None) is not None:
        _generation += 1


def generation() -> int:
    """How many times :func:`register` and :func:`unregister` changed the families: the key
    of caches derived from every family's declaration."""
    return _generation


def algorithms(family_name: str) -> dict[str, type[Learner]]:
    """The selectable algorithms of ``family_name``."""
    module_name = family(family_name).algorithms
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise LearnerError(
            f"family {family_name!r} is not available in this build: {exc}"
        ) from exc
    return dict(module.ALGORITHMS)


def learner_class(family_name: str, algorithm: str) -> type[Learner]:
    """The class for ``family_name``/``algorithm``; a clear error lists the valid names."""
    known = algorithms(family_name)
    if algorithm not in known:
        raise LearnerError(
            f"unknown algorithm {algorithm!r} for family {family_name!r}; "
            f"known: {', '.join(known)}"
        )
    return known[algorithm]


def make_learner(family_name: str, algorithm: str, params: Mapping[str, Any]) -> Learner:
    """A fresh learner; raises :class:`LearnerError` for unknown names or bad parameters."""
    return learner_class(family_name, algorithm).from_params(params)
