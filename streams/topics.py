"""Topic names, creation with the right partition counts, and Kafka's key partitioner."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.partitioner.default import murmur2


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
    def ticks(self) -> str:
        return f"{self.prefix}.ticks"

    @property
    def decisions(self) -> str:
        return f"{self.prefix}.decisions"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}.deadletter"

    def inputs(self) -> list[str]:
        """The co-partitioned topics one worker agent consumes."""
        return [self.learners, self.contexts, self.feedback, self.truth, self.ticks]

    def all(self) -> list[str]:
        return [*self.inputs(), self.decisions, self.deadletter]


def partition_for(key: str, partitions: int) -> int:
    """Kafka's default partition for ``key`` (murmur2, as the Java, kafka-python and aiokafka
    clients compute it; librdkafka needs ``partitioner=murmur2_random`` to agree)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


class TopicError(RuntimeError):
    pass


def ensure_topics(bootstrap: str, topics: Topics, partitions: int) -> None:
    """Create missing topics; fail clearly if an input topic has another partition count,
    since co-partitioning is what lets one worker own a learner's contexts and feedback."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="banditflow-admin")
    try:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(
                name,
                num_partitions=partitions,
                replication_factor=1,
                topic_configs={"cleanup.policy": "compact"} if name == topics.learners else {},
            )
            for name in topics.all()
            if name not in existing
        ]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(wanted)
        described = admin.describe_topics(topics.inputs())
        for topic in described:
            count = len(topic["partitions"])
            if count != partitions:
                raise TopicError(
                    f"topic {topic['name']!r} has {count} partitions but the worker expects "
                    f"{partitions}: all of {', '.join(topics.inputs())} must have the same count "
                    "(pass --partitions to match, or recreate the topics)"
                )
    finally:
        admin.close()
