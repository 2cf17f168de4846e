"""The embedded broker's launcher: its Tansu child never outlives it."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from banditflow.streams.broker import free_port, port_open

# (it starts a broker of its own: nothing to run against an external one)
pytestmark = [pytest.mark.integration, pytest.mark.embedded_broker]


def test_killing_banditflow_broker_stops_its_tansu_child(tmp_path) -> None:
    """kill -9 of ``banditflow broker`` takes the Tansu process with it: a new broker can
    take the port at once (it used to fail, an orphan holding it)."""
    port = free_port()
    log = open(tmp_path / "broker.log", "wb")  # noqa: SIM115 (the process writes it)
    process = subprocess.Popen(
        [sys.executable, "-m", "banditflow.streams.cli", "broker", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", port):
            assert time.monotonic() < deadline and process.poll() is None, "no broker"
            time.sleep(0.1)
        process.kill()
        process.wait()
        deadline = time.monotonic() + 5
        while port_open("127.0.0.1", port):
            assert time.monotonic() < deadline, "the broker's child still holds the port"
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
