"""Per-event logic binding learners to events, shared by the Faust worker and offline replay.

Nothing here imports Kafka or Faust: state lives in two ``MutableMapping`` stores (Faust
tables in the worker, dicts offline) and every effect comes back as return values or calls
on a :class:`processors.sink.Sink`.
"""

from processors.engine import Processor, Source
from processors.sink import Sink

__all__ = ["Processor", "Sink", "Source"]
