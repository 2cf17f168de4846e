"""Run Debian's kcat with the librdkafka bundled in the ``confluent-kafka`` wheel.

Debian bookworm's kcat links librdkafka 2.0.2, which cannot parse the ApiVersions v3 reply of
the embedded Tansu broker ("Read underflow"). The confluent-kafka wheel ships a current
librdkafka (2.x) with the same soname, so pointing the loader at it makes the stock kcat
binary work unchanged. ``-X topic.partitioner=murmur2_random`` is added for producers unless
given: banditflow relies on Kafka's default (murmur2) key partitioning to co-partition
contexts and feedback, and librdkafka's default partitioner differs. ``--kafka-config FILE``
(and the ``BANDITFLOW_KAFKA_*`` variables) give kcat the client configuration every other
command uses.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from banditflow.streams.connection import KafkaConnection

PARTITIONER = "topic.partitioner=murmur2_random"


class KcatError(RuntimeError):
    pass


def bundled_librdkafka_dir() -> Path:
    """A directory holding ``librdkafka.so.1`` from the confluent-kafka wheel."""
    try:
        import confluent_kafka
    except ImportError as exc:
        raise KcatError(
            "confluent-kafka, a dependency of banditflow, is not installed in this Python "
            f"({sys.executable}): run {sys.executable} -m pip install 'confluent-kafka>=2.3'"
        ) from exc
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    candidates = sorted(libs.glob("librdkafka*.so*"))
    if not candidates:
        raise KcatError(f"no librdkafka in {libs}")
    target = (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "banditflow" / "rdkafka"
    )
    target.mkdir(parents=True, exist_ok=True)
    link = target / "librdkafka.so.1"
    if not link.exists() or link.resolve() != candidates[0]:
        link.unlink(missing_ok=True)
        link.symlink_to(candidates[0])
    return target


def kcat_command(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The kcat command line and environment for ``args``."""
    binary = shutil.which("kcat")
    if binary is None:
        raise KcatError("kcat is not installed: install it (Debian, Ubuntu: apt-get install kcat)")
    args = [a for a in args if a != "--"]
    if "-P" in args and not any(PARTITIONER.split("=")[0] in a for a in args):
        args = [*args, "-X", PARTITIONER]
    env = dict(os.environ)
    libdir = str(bundled_librdkafka_dir())
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libdir, env.get("LD_LIBRARY_PATH")]))
    return [binary, *args], env


def split_kafka_config(args: list[str]) -> tuple[str | None, list[str]]:
    """``--kafka-config FILE`` (or ``--kafka-config=FILE``) taken out of kcat's arguments."""
    rest: list[str] = []
    config: str | None = None
    items = iter(args)
    for arg in items:
        if arg == "--kafka-config":
            config = next(items, None)
            if config is None:
                raise KcatError("--kafka-config needs a FILE")
        elif arg.startswith("--kafka-config="):
            config = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return config, rest


def pass_config(command: list[str], connection: KafkaConnection) -> list[str]:
    """``command`` reading the connection's librdkafka properties with ``-F`` from an
    inherited pipe: secrets reach kcat neither on its command line (which ``ps`` shows) nor
    on disk. kcat reads the file before its other options, so ``-b`` still wins."""
    text = "".join(f"{k}={v}\n" for k, v in connection.librdkafka_properties().items())
    read, write = os.pipe()
    os.write(write, text.encode())  # (a few hundred bytes: far below a pipe's buffer)
    os.close(write)
    os.set_inheritable(read, True)
    return [command[0], "-F", f"/dev/fd/{read}", *command[1:]]
