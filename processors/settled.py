"""A compact record of which decisions (by sequence number) are settled.

Decisions get consecutive sequence numbers per learner. Settled ones are remembered as a
floor (every seq below it is settled) plus the sorted settled seqs above it, so the record
grows only with the number of decisions settled out of order, not with history.

>>> s = new()
>>> settle(s, 1); settle(s, 0); is_settled(s, 1), s
(True, {'floor': 2, 'above': []})
"""

from __future__ import annotations

import bisect
from typing import Any

Settled = dict[str, Any]


def new() -> Settled:
    return {"floor": 0, "above": []}


def is_settled(settled: Settled, seq: int) -> bool:
    if seq < settled["floor"]:
        return True
    above = settled["above"]
    i = bisect.bisect_left(above, seq)
    return i < len(above) and above[i] == seq


def settle(settled: Settled, seq: int) -> None:
    if is_settled(settled, seq):
        return
    above = settled["above"]
    bisect.insort(above, seq)
    floor = settled["floor"]
    consumed = 0
    while consumed < len(above) and above[consumed] == floor:
        floor += 1
        consumed += 1
    if consumed:
        del above[:consumed]
        settled["floor"] = floor
