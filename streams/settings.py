"""Everything ``banditflow worker`` can be told: :class:`WorkerSettings` (no Kafka client
imported here, so the CLI and the partition tasks read them without aiokafka)."""

from __future__ import annotations

from dataclasses import dataclass, field

from banditflow.schemas import Limits
from banditflow.streams.connection import KafkaConnection
from banditflow.streams.webconfig import WebConfig

# The worker's event loops (WorkerSettings.event_loop, --event-loop).
EVENT_LOOPS = ("uvloop", "asyncio")


@dataclass(frozen=True)
class WorkerSettings:
    """Everything ``banditflow worker`` can be told (see ``banditflow worker --help``)."""

    kafka: KafkaConnection = field(default_factory=KafkaConnection)
    app_id: str = "banditflow"
    prefix: str = "banditflow"
    partitions: int = 4
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    # How often a partition whose events produced nothing to publish (feedback only, timers)
    # commits its state and marks; events that produced a decision or a dead letter are
    # committed at once (group commit: commits follow each other as fast as the broker
    # acknowledges them, each taking what arrived while the previous one was in flight).
    commit_interval_s: float = 0.03
    # A commit starts early once this many events wait; the input pauses at twice as many.
    max_batch_events: int = 2000
    retention_s: float = 600.0
    max_exported_learners: int = 100
    limits: Limits = field(default_factory=Limits)
    session_timeout_s: float = 10.0
    # Who this worker is across restarts (the consumer's client id): a restarted worker
    # removes its dead predecessor from the group at once instead of waiting for its
    # session to time out. Default: the host name and web port.
    instance_id: str = ""
    # How long a fetch may wait for records: the embedded broker looks again at an empty
    # fetch only after half of it, then half of what is left, so it adds to the latency
    # (the CLI's default is per broker: streams/cli.py, EMBEDDED_FETCH_WAIT_MS).
    fetch_wait_ms: int = 500
    # How long, at most, the feedback and truth partitions are paused once caught up (no
    # decision waits for them; streams/fetch_wait.py: FetchPacing); 0: fetched every time,
    # the default. Paced at 200 ms, the application's p50 at 500/s was better in 10 of 12
    # one-off pairs on the embedded broker before the worker held its input during a commit
    # (streams/worker.py, HOLD_INPUT_S); since, the worker's own p99 was longer paced, at
    # 500/s in 7 of 10 pairs and at 2,000/s in 3 of 4 (medians 20.0 against 10.7 ms), and
    # the application's latency no better (README, Performance, "What the last millisecond
    # inside the worker is made of").
    feedback_fetch_interval_s: float = 0.0
    # A caught-up stream's clock follows the wall clock, this far behind (records a
    # producer has stamped but not yet delivered must not be overtaken).
    idle_lag_s: float = 1.0
    # Record timestamps further ahead of the wall clock than this are taken as the wall
    # clock: one mis-stamped record must not expire every pending decision.
    max_future_s: float = 5.0
    # When the broker no longer holds the state log (emptied, replaced, topics recreated):
    # "exit" with EXIT_STATE_LOST, or start the lost partitions "fresh" with empty state.
    on_state_loss: str = "exit"
    # Evaluate the candidate policies named in learner configs on the live stream (off: they
    # are ignored, their estimates kept as they were).
    live_ope: bool = True
    # The event loop, one of EVENT_LOOPS: uvloop's (asyncio's where uvloop is not installed,
    # as on Windows) or asyncio's (see streams/worker.py: event_loop_factory).
    event_loop: str = "uvloop"
    # /metrics, /ready and /healthz over TLS and with basic auth (--web-config).
    web_config: WebConfig | None = None
