"""Per-event logic binding learners to events, shared by the worker and offline replay.

Nothing here imports Kafka: a partition's state lives in a
:class:`processors.store.PartitionStore` in memory, every effect comes back as return
values or calls on a :class:`processors.sink.Sink`, and the caller makes the store's
changes durable (the worker's state log, streams/statelog.py).
"""

from processors.processor import Emitted, Processor, StreamTimes
from processors.records import Source
from processors.sink import Sink
from processors.store import PartitionStore

__all__ = ["Emitted", "PartitionStore", "Processor", "Sink", "Source", "StreamTimes"]
