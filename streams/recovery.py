"""Taking a partition over: from its state log to a task that may serve, fencing former owners.

:func:`restore` is the broker-free core (unit-tested on a simulated log): the last commit's
outputs are published again (a crash may have kept them from going out: a crash redoes at
most one commit's, identical), then the new owner's claim is written, a new epoch that
every reader prefers to the records of older ones (a former owner's late writes).
"""

from __future__ import annotations

from collections.abc import Callable

from banditflow.streams.committer import Committer
from banditflow.streams.partition_task import PartitionTask
from banditflow.streams.statelog import LogReader


async def restore(
    reader: LogReader, task: PartitionTask, committer: Committer, current: Callable[[], bool]
) -> bool:
    """Make ``task``, built from ``reader``, its partition's owner: publish the last commit's
    outputs again unless it was a claim (which has none), then claim. Whether the claim
    landed where expected while ``current()`` still held (the assignment unchanged)."""
    last = reader.last
    if not current():
        return False
    if last is not None and not last.claim:
        await committer.republish(task.number, last)
    return current() and await committer.claim(task)
