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
from types import ModuleType
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
    return _event_rng().seeded_generator(seed, _digest(event_id))


def _digest(event_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(event_id.encode(), digest_size=8).digest(), "little")


@functools.cache
def _event_rng() -> ModuleType:
    """:mod:`banditflow.processors.event_rng`, imported at the first draw, so that only a
    learner that draws loads numba (an import statement in :func:`event_seed` would cost a
    quarter of its time on every call)."""
    from banditflow.processors import event_rng

    return event_rng


class LazyGenerator:
    """Stands in for :func:`event_seed`'s generator and builds it on first use: deterministic
    learners (SPS) never draw, and never pay for seeding (nor load numba for it).

    Most decisions that draw take a single uniform (graph_cb's draw of an action): the first
    ``random()`` is computed without building the generator
    (:func:`~banditflow.processors.event_rng.first_uniform`, a third of the generator's
    cost); anything after it builds the generator and moves it past that draw, so every
    value is the generator's own."""

    __slots__ = ("_event_id", "_first_drawn", "_generator", "_seed")

    def __init__(self, seed: int, event_id: str) -> None:
        self._seed = seed
        self._event_id = event_id
        self._generator: np.random.Generator | None = None
        self._first_drawn = False

    def random(self, *args: Any, **kwargs: Any) -> Any:
        """``Generator.random``."""
        if self._generator is None and not self._first_drawn and not args and not kwargs:
            self._first_drawn = True
            return _event_rng().first_uniform(self._seed, _digest(self._event_id))
        return self._built().random(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # (a slot not set yet, e.g. on a copy: not the generator's)
            raise AttributeError(name)
        return getattr(self._built(), name)

    def _built(self) -> np.random.Generator:
        if self._generator is None:
            self._generator = event_seed(self._seed, self._event_id)
            if self._first_drawn:
                self._generator.random()  # (the draw first_uniform gave)
        return self._generator


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
