"""The store's key scheme, read back through its typed keys: every key a store writes parses
to the learner (and event) it holds, the state log's format unchanged."""

from __future__ import annotations

import pytest

from banditflow.processors import PartitionStore, Processor, Source, StreamTimes
from banditflow.processors.store import KeyKind, StateKey, event_ids, event_key

CONFIG = (b'{"learner_id": "shop", "family": "conformal", "algorithm": "sps", '
          b'"params": {"target_coverage": 0.9, "horizon": 100}, "feedback_timeout_s": 5}')


def context(event_id: str, learner_id: str = "shop") -> bytes:
    return (f'{{"learner_id": "{learner_id}", "event_id": "{event_id}", '
            '"labels": ["a", "b"], "scores": [0.9, 0.1]}').encode()


def test_every_key_a_store_writes_parses_to_what_it_holds() -> None:
    processor = Processor(PartitionStore(retention_s=100.0))
    processor.on_config("shop", CONFIG, Source("learners"), 0.0)
    processor.on_context(context("open/with/slashes"), Source("contexts"), 1.0)
    processor.on_context(context("expired"), Source("contexts"), 1.0)
    processor.on_tick(StreamTimes(10.0, 10.0, 10.0))  # "expired" (and the other) settle
    processor.on_context(context("open"), Source("contexts"), 10.0)
    processor.on_context(context("e9", "unknown"), Source("contexts"), 10.0)  # held
    keys = processor.store.log_keys()
    assert sorted(keys) == [
        "c/shop", "d/shop/open", "h/unknown/e9", "l/shop", "s/shop/expired",
        "s/shop/open/with/slashes",
    ]
    assert {(k.kind, k.learner_id, k.event_id) for k in map(StateKey.parse, keys)} == {
        (KeyKind.CONFIG, "shop", None),
        (KeyKind.LEARNER, "shop", None),
        (KeyKind.OPEN, "shop", "open"),
        (KeyKind.SETTLED, "shop", "expired"),
        (KeyKind.SETTLED, "shop", "open/with/slashes"),
        (KeyKind.HOLD, "unknown", "e9"),
    }
    assert event_ids(event_key("shop", "a/b")) == ("shop", "a/b")


def test_the_changes_name_the_learners_that_learned() -> None:
    store = PartitionStore()
    processor = Processor(store)
    processor.on_config("shop", CONFIG, Source("learners"), 0.0)
    store.changes()
    processor.on_context(context("e1"), Source("contexts"), 1.0)
    changes = store.changes()
    assert changes.learners_learned() == ["shop"]
    processor.on_tick(StreamTimes(1.0, 1.0, 1.0))  # nothing due: nothing learned
    assert store.changes().learners_learned() == []


@pytest.mark.parametrize("key", ["x/shop", "", "l", "shop/e1"])
def test_a_key_the_store_never_writes_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="unknown state key"):
        StateKey.parse(key)
    with pytest.raises(ValueError, match="unknown state key"):
        PartitionStore.load([(key, b"{}")], retention_s=1.0)
