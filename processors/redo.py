"""Deterministic learner calls: the per-event generator, and undo by checkpoint and redo log.

A learner's calls are deterministic given its state and their arguments (the generator of a
decision is a function of the seed and the event id, :func:`event_seed`), so a call that
raised is undone by rebuilding the learner from its last checkpoint and replaying the calls
since (:func:`call_logged`, :func:`rollback`). The processor's live learners
(:class:`banditflow.processors.records.LearnerEntry`) and live OPE's candidates
(:class:`banditflow.processors.ope.Candidate`) share this: both import it, neither the other.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from banditflow.learners.base import JSON, Learner

# Learner calls between two checkpoints of a learner's state (bounds the redo log offline,
# where no commit checkpoints it).
REDO_LIMIT = 256


def event_seed(seed: int, event_id: str) -> np.random.Generator:
    """The random generator of one decision: a function of the learner seed and event id,
    ``np.random.default_rng([seed, blake2b-64 of the id])``, seeded by a compiled kernel
    (:mod:`banditflow.processors.event_rng`)."""
    digest = hashlib.blake2b(event_id.encode(), digest_size=8).digest()
    return _seeded_generator()(seed, int.from_bytes(digest, "little"))


@functools.cache
def _seeded_generator() -> Callable[[int, int], np.random.Generator]:
    """:func:`banditflow.processors.event_rng.seeded_generator`, imported at the first draw,
    so that only a learner that draws loads numba (an import statement in
    :func:`event_seed` would cost a quarter of its time on every call)."""
    from banditflow.processors.event_rng import seeded_generator

    return seeded_generator


class LazyGenerator:
    """Stands in for :func:`event_seed`'s generator and builds it on first use: deterministic
    learners (SPS) never draw, and never pay for seeding (nor load numba for it)."""

    __slots__ = ("_event_id", "_generator", "_seed")

    def __init__(self, seed: int, event_id: str) -> None:
        self._seed = seed
        self._event_id = event_id
        self._generator: np.random.Generator | None = None

    def __getattr__(self, name: str) -> Any:
        if self._generator is None:
            self._generator = event_seed(self._seed, self._event_id)
        return getattr(self._generator, name)


class Redoable(Protocol):
    """A live learner with its checkpoint (serialised state) and the calls made since."""

    learner: Learner
    checkpoint: JSON
    redo: list[tuple[Any, ...]]

    def mark_checkpoint(self, state: JSON) -> None: ...

    def rebuild(self, state: JSON) -> Learner:
        """A learner of this holder's config in ``state``."""
        ...


def call_logged(holder: Redoable, failures: type[BaseException] | tuple[type[BaseException], ...],
                method: str, *args: Any) -> Any:
    """``holder.learner.<method>(*args)``; if it raises one of ``failures``, the learner is
    restored to its state before the call (:func:`rollback`) and the exception re-raised."""
    learner = holder.learner
    if len(holder.redo) >= REDO_LIMIT:  # (before the call: its undo needs it in the log)
        holder.mark_checkpoint(learner.to_state())
    try:
        result = getattr(learner, method)(*args)
    except failures:
        rollback(holder)
        raise
    holder.redo.append((method, *args))
    return result


def rollback(holder: Redoable) -> None:
    """Rebuild ``holder``'s learner from its checkpoint and the calls logged since."""
    learner = holder.rebuild(holder.checkpoint)
    for method, *args in holder.redo:
        if method == "decide":  # a fresh generator: it may have been drawn from
            fields, rng = args
            args = [fields, LazyGenerator(rng._seed, rng._event_id)]
        getattr(learner, method)(*args)
    holder.learner = learner
    # A new checkpoint here: a stream of rejected calls then costs each the calls since
    # the last rejection, not the whole redo log again (up to REDO_LIMIT calls each).
    holder.mark_checkpoint(learner.to_state())
