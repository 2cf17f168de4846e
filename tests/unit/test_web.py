"""The worker's HTTP endpoints (streams/web.py), served on a real socket, without a broker:
``/metrics``, ``/ready`` (200 or 503 with the reason), ``/healthz``, 404, and basic auth."""

from __future__ import annotations

import base64
import http.client
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from banditflow.streams.broker import free_port
from banditflow.streams.web import serve_http
from banditflow.streams.webconfig import WebConfig


def get(port: int, path: str, auth: str | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path, headers={"Authorization": auth} if auth else {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.fixture
def state() -> dict[str, tuple[bool, str]]:
    return {"ready": (False, "recovering partitions [1]")}


@pytest.fixture
def port(state: dict[str, tuple[bool, str]]) -> Iterator[int]:
    port = free_port()
    server = serve_http("127.0.0.1", port, None, lambda: b"banditflow_up 1\n",
                        lambda: state["ready"])
    yield port
    server.shutdown()
    server.server_close()


def test_metrics_ready_and_health(port: int, state: dict[str, tuple[bool, str]]) -> None:
    status, headers, body = get(port, "/metrics")
    assert status == 200 and body == b"banditflow_up 1\n"
    assert headers["Content-Type"].startswith("text/plain; version=")  # Prometheus' format
    assert get(port, "/ready")[::2] == (503, b"recovering partitions [1]")
    state["ready"] = (True, "ready: partitions [0, 1]")
    assert get(port, "/ready")[::2] == (200, b"ready: partitions [0, 1]")
    assert get(port, "/healthz")[::2] == (200, b"ok")
    status, _, body = get(port, "/nothing")
    assert status == 404 and b"/metrics, /ready, /healthz" in body


def test_with_basic_auth_every_path_needs_the_credentials(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
    config_path = tmp_path / "web.yml"
    config_path.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
    port = free_port()
    server = serve_http("127.0.0.1", port, WebConfig.load(config_path), lambda: b"m\n",
                        lambda: (True, "ready"))
    try:
        good = "Basic " + base64.b64encode(b"prom:secret").decode()
        bad = "Basic " + base64.b64encode(b"prom:wrong").decode()
        for path in ("/metrics", "/ready", "/healthz"):
            status, headers, _ = get(port, path)
            assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="banditflow"'
            assert get(port, path, bad)[0] == 401
            assert get(port, path, good)[0] == 200
    finally:
        server.shutdown()
        server.server_close()
