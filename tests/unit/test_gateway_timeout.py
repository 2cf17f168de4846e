"""The decision endpoint's ``?timeout=``: seconds in (0, 600], anything else refused with
the reason (a 422), never taken as no limit; empty, the default."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")  # the gateway extra

from banditflow.streams.client import Rejected
from banditflow.streams.gateway import _timeout


@pytest.mark.parametrize(("query", "seconds"), [
    (b"", None), (b"other=1", None), (b"timeout=", None), (b"timeout=1.5", 1.5),
    (b"timeout=600", 600.0),
    (b"x=1&timeout=0.001", 0.001), (b"timeout=2&timeout=3", 3.0),
])
def test_accepted(query: bytes, seconds: float | None) -> None:
    assert _timeout(query) == seconds


@pytest.mark.parametrize("query", [b"timeout=nan", b"timeout=0", b"timeout=-1", b"timeout=600.5",
                                   b"timeout=inf", b"timeout=soon"])
def test_refused(query: bytes) -> None:
    with pytest.raises(Rejected) as refused:
        _timeout(query)
    assert refused.value.reason == "invalid_request" and "timeout" in refused.value.detail
