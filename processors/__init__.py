"""Per-event logic binding learners to events, shared by the worker and offline replay.

Nothing here imports Kafka: a partition's state lives in a
:class:`banditflow.processors.store.PartitionStore` in memory, every effect comes back as return
values or calls on a :class:`banditflow.processors.sink.Sink`, and the caller makes the store's
changes durable (the worker's state log, streams/statelog.py).
"""

from banditflow.processors.processor import Emitted, Processor, StreamTimes
from banditflow.processors.records import Source
from banditflow.processors.sink import Sink
from banditflow.processors.store import PartitionStore

__all__ = ["Emitted", "PartitionStore", "Processor", "Sink", "Source", "StreamTimes"]
