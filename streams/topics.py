"""Topic names, creation with the right partition counts, and Kafka's key partitioner."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.partitioner.default import murmur2

from banditflow.streams.connection import KafkaConnection, as_connection


@dataclass(frozen=True)
class Topics:
    """Names of banditflow's topics under a common prefix."""

    prefix: str = "banditflow"

    @property
    def learners(self) -> str:
        return f"{self.prefix}.learners"

    @property
    def contexts(self) -> str:
        return f"{self.prefix}.contexts"

    @property
    def feedback(self) -> str:
        return f"{self.prefix}.feedback"

    @property
    def truth(self) -> str:
        return f"{self.prefix}.truth"

    @property
    def decisions(self) -> str:
        return f"{self.prefix}.decisions"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}.deadletter"

    def inputs(self) -> list[str]:
        """The co-partitioned topics a worker consumes."""
        return [self.learners, self.contexts, self.feedback, self.truth]

    def kinds(self) -> dict[str, str]:
        """Input topic name -> the stream it carries (``learners``, ``contexts``, ...)."""
        return {name: name.removeprefix(f"{self.prefix}.") for name in self.inputs()}

    def all(self) -> list[str]:
        return [*self.inputs(), self.decisions, self.deadletter]


def state_topic(app_id: str) -> str:
    """The state log of the workers of ``app_id`` (one consumer group, one state)."""
    return f"{app_id}.state"


# The state log needs no compaction (snapshots bound what a recovery reads); retention only
# removes what is older than the latest snapshot, which is rewritten at least hourly.
STATE_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3600 * 1000)}


# (the worker checks every record's key against its partition: murmur2 in Python costs
# 4 us, a cached answer 0.1; a flood of distinct keys only cycles the cache)
@functools.lru_cache(maxsize=4096)
def partition_for(key: str, partitions: int) -> int:
    """Kafka's default partition for ``key`` (murmur2, as the Java, kafka-python and aiokafka
    clients compute it; librdkafka needs ``partitioner=murmur2_random`` to agree)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


class TopicError(RuntimeError):
    pass


def ensure_topics(
    kafka: KafkaConnection | str, topics: Topics, partitions: int, app_id: str | None = None
) -> None:
    """Create missing topics (with ``app_id``, its state log too); fail clearly if an input
    topic or the state log has another partition count, since co-partitioning is what lets
    one worker own a learner's contexts, feedback and state."""
    admin = KafkaAdminClient(**as_connection(kafka).kafka_python_kwargs(),
                             client_id="banditflow-admin")
    configs = {topics.learners: {"cleanup.policy": "compact"}}
    names = topics.all()
    checked = topics.inputs()
    if app_id is not None:
        configs[state_topic(app_id)] = STATE_TOPIC_CONFIG
        names.append(state_topic(app_id))
        checked.append(state_topic(app_id))
    try:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(
                name,
                num_partitions=partitions,
                replication_factor=1,
                topic_configs=configs.get(name, {}),
            )
            for name in names
            if name not in existing
        ]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(wanted)
        described = admin.describe_topics(checked)
        for topic in described:
            count = len(topic["partitions"])
            if count != partitions:
                raise TopicError(
                    f"topic {topic['name']!r} has {count} partitions but the worker expects "
                    f"{partitions}: all of {', '.join(checked)} must have the same count "
                    "(pass --partitions to match, or recreate the topics)"
                )
    finally:
        admin.close()
