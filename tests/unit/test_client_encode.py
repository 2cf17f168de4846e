"""The client writes a record as json would (orjson when its text cannot differ): the same
JSON value, NaN and infinities written out (so the schema refuses them as non_finite), and
the same refusals."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from banditflow.streams.client import Rejected, _encode


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("record", [
    {"learner_id": "shop", "event_id": "q1", "labels": ["cat", "dög"], "scores": [2.1, -0.3]},
    {"scores": [float("nan"), 1.0]},
    {"scores": [float("inf")], "x": None},
    {"after_updates": None},
    {"losses": {0: 0.5, 2: 0.25}},
    {"rewards": {"0": np.float64(0.4)}, "complete": True},
    {"n": 2**70, "pair": (1, 2), "text": "null"},
    {"nested": [[{"a": [1, 2.5e-300]}]]},
])
def test_the_same_json_value_as_json_writes(record: dict[str, Any]) -> None:
    raw = _encode(record)
    assert same(json.loads(raw), json.loads(json.dumps(record)))


def test_nan_and_infinities_are_written_out() -> None:
    assert b"NaN" in _encode({"scores": [float("nan")]})
    assert b"-Infinity" in _encode({"scores": [-math.inf], "labels": ["a"]})


def test_what_json_cannot_write_is_refused() -> None:
    with pytest.raises(Rejected) as refused:
        _encode({"scores": [np.float32(0.5)]})
    assert refused.value.reason == "invalid_schema"
    with pytest.raises(Rejected):
        _encode({"x": object()})
