"""How banditflow's Kafka clients reach the broker.

Every command builds its producers, consumers and admin clients from one
:class:`KafkaConnection`, so that connection and security settings are given once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


@dataclass(frozen=True)
class KafkaConnection:
    """The broker's address (and, with a client config, its security settings)."""

    bootstrap: str = DEFAULT_BOOTSTRAP

    @classmethod
    def resolve(
        cls,
        bootstrap: str | None = None,
        config_file: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> KafkaConnection:
        """The connection from ``bootstrap``, else ``BANDITFLOW_BOOTSTRAP``, else the
        default. ``config_file`` is not read by this build: it is refused rather than
        ignored."""
        if config_file is not None:
            raise ValueError("a Kafka client config file is not supported by this build")
        env = environ if environ is not None else {}
        return cls(bootstrap or env.get("BANDITFLOW_BOOTSTRAP") or DEFAULT_BOOTSTRAP)

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of AIOKafkaProducer / AIOKafkaConsumer / AIOKafkaAdminClient."""
        return {"bootstrap_servers": self.bootstrap}

    def kafka_python_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of kafka-python's KafkaProducer / KafkaConsumer / admin client."""
        return {"bootstrap_servers": self.bootstrap}
