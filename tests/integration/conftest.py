"""Fixtures for tests against the real embedded Kafka-protocol broker (Tansu) and real
worker processes. Every process started here is stopped in teardown, failures included.

With ``BANDITFLOW_TEST_BOOTSTRAP`` set, the tests use that broker instead, one they did not
start (``make test-external``), with the client configuration of ``BANDITFLOW_KAFKA_CONFIG``
and the ``BANDITFLOW_KAFKA_*`` variables: the clients the tests build take it from
``broker.connection``, the banditflow processes they start inherit the variables. Every
prefix, app id and consumer group a test picks goes through :func:`run_prefix`, which tags
it with this session's :data:`RUN_TAG` there, so that runs sharing the broker do not meet;
every test deletes the topics and consumer groups of this run it created, and tests marked
``embedded_broker`` (they start, stop or empty a broker of their own, or show an
embedded-broker quirk) are skipped."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AsyncTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from banditflow.streams.broker import EmbeddedBroker, free_port, wait_for_broker
from banditflow.streams.connection import KafkaConnection, as_connection
from banditflow.streams.demo import stop, wait_until_ready
from banditflow.streams.scrape import fetch
from banditflow.streams.statelog import Commit
from banditflow.streams.statelog_kafka import read_commits
from banditflow.streams.topics import Topics, ensure_topics, state_topic

EXTERNAL_BOOTSTRAP = os.environ.get("BANDITFLOW_TEST_BOOTSTRAP")
# This session's tag (hex: valid in topic names and group ids). Kept in the environment
# because this module is loaded more than once per session (as tests/integration's conftest,
# by tests/fault/conftest.py, and by tests importing it by path), and every copy must tag
# alike; the banditflow processes the tests start inherit it unused.
RUN_TAG = os.environ.setdefault("BANDITFLOW_TEST_RUN_TAG", secrets.token_hex(3))


def run_prefix(name: str) -> str:
    """The topic prefix (app id, consumer group) a test calls ``name``: ``name`` itself on
    the broker the suite started; on an external broker ``name-<RUN_TAG>``, so that two runs
    sharing that broker, or what a killed run left on it, never share a topic or a group.
    Tests call it once per name and refer to the name through what it returned."""
    return f"{name}-{RUN_TAG}" if EXTERNAL_BOOTSTRAP else name


def of_this_run(name: str) -> bool:
    """Whether a topic or group on the external broker is one of this session's."""
    return f"-{RUN_TAG}" in name


@dataclass(frozen=True)
class ExternalBroker:
    """A broker the suite did not start."""

    connection: KafkaConnection

    @property
    def bootstrap(self) -> str:
        return self.connection.bootstrap


def pytest_report_header(config: pytest.Config) -> list[str]:
    # The tag names what a killed run leaves on the external broker.
    return [f"external broker {EXTERNAL_BOOTSTRAP}: this run's topics and groups carry the tag "
            f"-{RUN_TAG}"] if EXTERNAL_BOOTSTRAP else []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if EXTERNAL_BOOTSTRAP:
        skip = pytest.mark.skip(reason="needs the embedded broker itself, and the tests run "
                                f"against {EXTERNAL_BOOTSTRAP} (BANDITFLOW_TEST_BOOTSTRAP)")
        for item in items:
            if "embedded_broker" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker | ExternalBroker]:
    if EXTERNAL_BOOTSTRAP:
        external = ExternalBroker(KafkaConnection.resolve(
            EXTERNAL_BOOTSTRAP, os.environ.get("BANDITFLOW_KAFKA_CONFIG"), os.environ))
        wait_for_broker(external.connection)
        yield external
        return
    log = tmp_path_factory.mktemp("broker") / "broker.log"
    with EmbeddedBroker(port=free_port(), log_path=log) as running:
        yield running


@pytest.fixture(autouse=True)
def external_cleanup(request: pytest.FixtureRequest) -> Iterator[None]:
    """On an external broker, the topics and consumer groups a test created are deleted
    after it: the next run starts clean. Only this run's (:func:`run_prefix`): another run
    on the same broker creates its own meanwhile, and the broker may create internal ones."""
    if not EXTERNAL_BOOTSTRAP or "embedded_broker" in request.keywords:
        yield
        return
    from kafka import KafkaAdminClient

    connection = request.getfixturevalue("broker").connection
    admin = KafkaAdminClient(**connection.kafka_python_kwargs())
    try:
        topics = set(admin.list_topics())
        yield
        new_topics = sorted(name for name in set(admin.list_topics()) - topics
                            if of_this_run(name))
        # Every group of this run: their workers are stopped by now. Workers' groups are
        # named as their state topics too (some brokers list no groups).
        new_groups = {group["group_id"] for group in admin.list_groups()
                      if of_this_run(group["group_id"])} | {
            name.removesuffix(".state") for name in new_topics if name.endswith(".state")}
        with contextlib.suppress(KafkaError):  # (a group still closing is deleted next time)
            if new_groups:
                admin.delete_groups(sorted(new_groups))
        if new_topics:
            admin.delete_topics(new_topics)
    finally:
        admin.close()


@dataclass
class Worker:
    """A ``banditflow worker`` subprocess."""

    process: subprocess.Popen[bytes]
    prefix: str
    web_port: int
    log_path: Path
    partitions: int

    @property
    def topics(self) -> Topics:
        return Topics(self.prefix)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}/metrics"

    def metrics(self) -> str:
        return fetch(self.metrics_url)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ready(self) -> str | None:
        """The /ready text when the worker is ready, else None."""
        try:
            return fetch(f"http://127.0.0.1:{self.web_port}/ready", timeout_s=1.0)
        except OSError:  # (urllib's HTTPError for a 503 is an OSError too)
            return None

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        try:
            wait_until_ready(self.process, self.web_port, timeout_s)
        except RuntimeError as exc:
            raise AssertionError(f"{exc}:\n{self.log()[-3000:]}") from None

    def stop(self, kill: bool = False) -> None:
        if kill and self.process.poll() is None:
            self.process.kill()
        stop(self.process)


def poll_until(condition: Callable[[], object], timeout_s: float = 60.0) -> None:
    """Wait until ``condition()`` is true, polling every 0.3 s; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"condition not met within {timeout_s}s")


@pytest.fixture
def wait_until() -> Callable[..., None]:
    """:func:`poll_until`, for the tests."""
    return poll_until


@pytest.fixture
def start_worker(broker: EmbeddedBroker, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Factory: ``start_worker(prefix, partitions=2, extra_args=[...])`` -> a ready Worker."""
    started: list[Worker] = []

    def start(
        prefix: str,
        partitions: int = 2,
        extra_args: list[str] | None = None,
        web_port: int | None = None,
        wait: bool = True,
    ) -> Worker:
        ensure_topics(broker.connection, Topics(prefix), partitions, prefix)
        port = web_port or free_port()
        log_path = tmp_path / f"worker-{prefix}-{len(started)}.log"
        command = [
            sys.executable,
            "-m",
            "banditflow.streams.cli",
            "worker",
            "--bootstrap",
            broker.bootstrap,
            "--prefix",
            prefix,
            "--app-id",
            prefix,
            "--partitions",
            str(partitions),
            "--web-port",
            str(port),
            "--loglevel",
            "info",
            *(extra_args or []),
        ]
        with open(log_path, "ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        worker = Worker(process, prefix, port, log_path, partitions)
        started.append(worker)
        if wait:
            worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def producer(broker: EmbeddedBroker) -> Iterator[KafkaProducer]:
    """kafka-python producer (default murmur2 partitioner, as Java clients)."""
    client = KafkaProducer(**broker.connection.kafka_python_kwargs(), acks="all")
    yield client
    client.close()


def send_json(producer: KafkaProducer, topic: str, key: str, value: dict[str, Any] | None) -> None:
    producer.send(
        topic, key=key.encode(), value=None if value is None else json.dumps(value).encode()
    )
    producer.flush()


async def is_ready(port: int) -> bool:
    """Whether the worker serving ``port`` answers 200 on /ready (from an event loop)."""
    try:
        await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/ready", 1.0)
        return True
    except (urllib.error.URLError, OSError):
        return False


async def decisions_consumer(kafka: KafkaConnection | str, topic: str) -> AIOKafkaConsumer:
    """A started consumer of every partition of ``topic`` from its beginning, polling fast:
    the application side of the crash tests, which answers decisions as they come."""
    consumer = AIOKafkaConsumer(**as_connection(kafka).aiokafka_kwargs(), fetch_max_wait_ms=10,
                                enable_auto_commit=False)
    await consumer.start()
    await consumer.topics()
    tps = [AsyncTopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return consumer


class TopicReader:
    """Reads every record of a topic from the beginning, accumulating what it saw."""

    def __init__(self, kafka: KafkaConnection, topic: str) -> None:
        self.consumer = KafkaConsumer(
            **kafka.kafka_python_kwargs(),
            enable_auto_commit=False,
            group_id=None,
            consumer_timeout_ms=500,
        )
        partitions = self.consumer.partitions_for_topic(topic) or set()
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        self.consumer.assign(assigned)
        self.consumer.seek_to_beginning(*assigned)
        self.records: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any] | None]:
        for batch in self.consumer.poll(timeout_ms=300).values():
            # Tombstones (deleted table keys) read as None.
            self.records.extend(None if r.value is None else json.loads(r.value) for r in batch)
        return self.records

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 60.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self.poll()):
                return self.records
        raise AssertionError(f"timed out; saw {len(self.records)} records: {self.records[-5:]}")

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def learner_entries(broker: EmbeddedBroker) -> Callable[[str, str], list[dict[str, Any]]]:
    """``learner_entries(app_id, learner_id)``: every value of the learner's entry written
    to the worker's state log, in order."""

    def entries(app_id: str, learner_id: str) -> list[dict[str, Any]]:
        commits = asyncio.run(read_commits(broker.connection, state_topic(app_id)))
        return [
            commit.values()[f"l/{learner_id}"]
            for partition in commits.values()
            for _, commit in partition
            if f"l/{learner_id}" in commit.values()
        ]

    return entries


def final_state(commits: dict[int, list[tuple[int, Commit]]]) -> dict[str, Any]:
    """The state the commits of a state log add up to (every key's latest value)."""
    values: dict[str, Any] = {}
    for partition in commits.values():
        for _, commit in partition:
            values.update(commit.values())
            for key in commit.deletes:
                values.pop(key, None)
    return values


@pytest.fixture
def state_of(broker: EmbeddedBroker) -> Callable[[str], dict[str, Any]]:
    """``state_of(app_id)``: the workers' state as their state log holds it now."""
    return lambda app_id: final_state(
        asyncio.run(read_commits(broker.connection, state_topic(app_id)))
    )


@pytest.fixture
def read_topic(broker: EmbeddedBroker) -> Iterator[Callable[[str], TopicReader]]:
    readers: list[TopicReader] = []

    def open_reader(topic: str) -> TopicReader:
        reader = TopicReader(broker.connection, topic)
        readers.append(reader)
        return reader

    yield open_reader
    for reader in readers:
        reader.close()


class Gateway:
    """A ``banditflow gateway`` subprocess."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, metrics_port: int,
                 log_path: Path) -> None:
        self.process, self.url, self.metrics_port, self.log_path = (process, url, metrics_port,
                                                                    log_path)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def gateway_command(bootstrap: str, prefix: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "banditflow.streams.cli", "gateway", "--bootstrap", bootstrap,
            "--prefix", prefix, *args]


@pytest.fixture
def start_gateway(broker, tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    """Factory: ``start_gateway(prefix, *options)`` -> a ready Gateway (its API on a free port,
    its /metrics on another)."""
    started: list[Gateway] = []

    def start(prefix: str, *args: str, scheme: str = "http", verify: Any = True) -> Gateway:
        port, metrics_port = free_port(), free_port()
        log_path = tmp_path / f"gateway-{len(started)}.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                gateway_command(broker.bootstrap, prefix, "--port", str(port),
                                "--metrics-port", str(metrics_port), *args),
                stdout=log, stderr=subprocess.STDOUT)
        gateway = Gateway(process, f"{scheme}://127.0.0.1:{port}", metrics_port, log_path)
        started.append(gateway)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, gateway.log()
            try:
                if httpx.get(f"{gateway.url}/ready", verify=verify).status_code == 200:
                    return gateway
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the gateway did not get ready:\n{gateway.log()}")

    yield start
    for gateway in started:
        stop(gateway.process)
