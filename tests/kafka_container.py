"""``make test-kafka``: Apache Kafka in a container (testcontainers' Kafka module, KRaft), then
the integration suite against it as against any broker it did not start
(``BANDITFLOW_TEST_BOOTSTRAP``; see tests/integration/conftest.py). Without a Docker engine
it says why and skips (exit status 0): the embedded broker runs the suite everywhere else."""

from __future__ import annotations

import os
import subprocess
import sys

IMAGE = "confluentinc/cp-kafka:7.6.0"  # testcontainers' default, KRaft-capable


def docker_unavailable() -> str | None:
    """Why no Docker engine can be used here, or None."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'banditflow[dev]')"
    try:
        docker.from_env().ping()
    except Exception as exc:  # the SDK raises several kinds: any means no engine
        return f"no Docker engine answers ({type(exc).__name__}: {exc})"
    return None


def main(pytest_args: list[str]) -> int:
    reason = docker_unavailable()
    if reason is not None:
        print(f"make test-kafka: skipped: {reason}")
        return 0
    from testcontainers.kafka import KafkaContainer

    with KafkaContainer(IMAGE).with_kraft() as kafka:
        bootstrap = kafka.get_bootstrap_server()
        print(f"make test-kafka: Apache Kafka ({IMAGE}) at {bootstrap}", flush=True)
        env = {**os.environ, "BANDITFLOW_TEST_BOOTSTRAP": bootstrap}
        return subprocess.call([sys.executable, "-m", "pytest",
                                *(pytest_args or ["tests/integration"])], env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
