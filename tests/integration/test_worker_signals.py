"""Small things an operator's bad day shows (issue 28, item 5): a SIGTERM while the worker
starts, HTTP clients that hang up, and what a worker paused past its session logs."""

from __future__ import annotations

import os
import signal
import socket
import struct
import time

import pytest
from conftest import run_prefix

from banditflow.streams.scrape import fetch

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("after_s", [0.0, 1.0, 2.5])
def test_a_sigterm_while_starting_stops_the_worker_cleanly(start_worker, after_s: float) -> None:
    """While it waits for the broker, creates topics, starts its clients, joins the group or
    recovers: exit status 0, not -15 (the handler was not yet installed). Timed from its
    first log line (``banditflow worker`` has begun; before that Python itself starts, some
    0.4 s with no banditflow code run, which nothing can guard)."""
    worker = start_worker(run_prefix(f"sigstart{int(after_s * 10)}"), wait=False)
    deadline = time.monotonic() + 60
    while not worker.log_path.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(after_s)
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(timeout=30) == 0, worker.log()[-2000:]
    assert "Traceback" not in worker.log()


def test_clients_that_hang_up_leave_no_traceback(start_worker) -> None:
    worker = start_worker(run_prefix("hangup"))
    for path in ("/metrics", "/ready") * 10:
        client = socket.create_connection(("127.0.0.1", worker.web_port))
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        # Closed at once, with a reset: the answer meets a connection that is gone.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
    time.sleep(1.0)
    assert fetch(f"http://127.0.0.1:{worker.web_port}/ready").startswith("ready")
    log = worker.log()
    assert "Traceback" not in log and "BrokenPipeError" not in log, log[-3000:]


def test_a_worker_paused_past_its_session_says_so_without_errors(start_worker) -> None:
    """aiokafka's "Heartbeat session expired" on resuming is expected after a pause: a
    warning saying why, no ERROR line."""
    worker = start_worker(run_prefix("pausenote"))
    os.kill(worker.process.pid, signal.SIGSTOP)
    try:
        time.sleep(5.0)  # (the embedded broker's session: 2 s)
    finally:
        os.kill(worker.process.pid, signal.SIGCONT)
    worker.wait_ready(60)
    time.sleep(1.0)
    log = worker.log()
    assert " ERROR " not in log, log[-3000:]
