"""What the torch-based learners share: a lazy import with a helpful error, one thread.

torch is an optional dependency (the ``neural`` extra); nothing else in ``learners`` imports
it, so the package works without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from banditflow.learners.base import LearnerError


def import_torch(what: str) -> Any:
    """``torch``, imported on first use; a :class:`LearnerError` naming ``what`` needs it."""
    try:
        import torch
    except ImportError as exc:
        raise LearnerError(f"{what} needs torch: install banditflow[neural]") from exc
    return torch


@contextmanager
def one_thread(torch: Any) -> Iterator[None]:
    """Run torch on one intra-op thread (restored after): these networks are tiny, and on a
    shared machine thread hand-offs cost far more than the arithmetic (and one thread keeps
    the float reductions in one order)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
