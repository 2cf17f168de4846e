"""banditflow over real TLS: the embedded broker behind stunnel (it advertises stunnel's
address), certificates made by the test (tls_setup.py). A worker and a simulated
application decide and learn over mutual TLS; the worker's /metrics is served over HTTPS
with basic auth (--web-config); archive and kcat read over the same client config; /ready
names the cause when the broker goes away; each misconfiguration fails in one line within
30 s; SASL credentials reach the embedded broker's SCRAM handshake."""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
from conftest import poll_until, run_prefix
from tls_setup import Pki, TlsTerminator, make_pki, write_properties

from banditflow.streams.broker import EmbeddedBroker, broker_binary, free_port, port_open
from banditflow.streams.connection import KafkaConnection
from banditflow.streams.demo import stop
from banditflow.streams.scrape import value

pytestmark = [pytest.mark.integration, pytest.mark.embedded_broker]

CLI = [sys.executable, "-m", "banditflow.streams.cli"]
PREFIX = run_prefix("mtls")
WEB_PASSWORD = "scrape-password-never-logged"


@dataclass
class TlsBroker:
    pki: Pki
    broker: EmbeddedBroker
    tls: TlsTerminator  # one-way TLS in front of the broker
    mtls: TlsTerminator  # TLS requiring a client certificate signed by the CA
    mtls_config: Path  # the client properties of the application and the worker
    directory: Path


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    directory = tmp_path_factory.mktemp("tls")
    pki = make_pki(directory / "pki")
    port = free_port()
    server = (pki.path("server.pem"), pki.path("server.key"))
    with TlsTerminator(directory, port, *server) as tls, \
            TlsTerminator(directory, port, *server, client_ca=pki.path("ca.pem")) as mtls:
        config = write_properties(directory / "mtls.properties",
                                  pki.mutual_tls_client(mtls.bootstrap))
        connection = KafkaConnection.resolve(config_file=config)
        with EmbeddedBroker(port=port, log_path=directory / "broker.log",
                            advertised=connection) as broker:
            yield TlsBroker(pki, broker, tls, mtls, config, directory)


def web_config(directory: Path, pki: Pki) -> Path:
    hashed = bcrypt.hashpw(WEB_PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    path = directory / "web.yml"
    path.write_text(f"""tls_server_config:
  cert_file: {pki.path("server.pem")}
  key_file: {pki.path("server.key")}
basic_auth_users:
  prometheus: '{hashed}'
""")
    return path


def scrape(port: int, path: str, ca: str, password: str | None) -> tuple[int, str]:
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    if password is not None:
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=ca)
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_worker_and_application_learn_over_mutual_tls(tls_broker: TlsBroker) -> None:
    t = tls_broker
    ca = t.pki.path("ca.pem")
    web_port = free_port()
    log_path = t.directory / "worker.log"
    with open(log_path, "ab") as log:
        worker = subprocess.Popen(
            [*CLI, "worker", "--kafka-config", str(t.mtls_config), "--prefix", PREFIX,
             "--app-id", PREFIX, "--partitions", "2", "--web-port", str(web_port),
             "--web-config", str(web_config(t.directory, t.pki)), "--loglevel", "info"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        poll_until(lambda: port_open("127.0.0.1", web_port), 60)
        poll_until(lambda: worker.poll() is not None
                   or scrape(web_port, "/ready", ca, WEB_PASSWORD)[0] == 200, 90)
        assert worker.poll() is None, log_path.read_text()[-3000:]
        # The HTTP side: basic auth required, over TLS only.
        assert scrape(web_port, "/metrics", ca, None)[0] == 401
        assert scrape(web_port, "/metrics", ca, "wrong")[0] == 401
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{web_port}/healthz", timeout=5).read()

        simulated = subprocess.run(
            [*CLI, "simulate", "--kafka-config", str(t.mtls_config), "--prefix", PREFIX,
             "--family", "conformal", "--events", "300", "--rate", "0", "--delay-mean", "0.05",
             "--workdir", str(t.directory / "sim"), "--timeout", "120"],
            capture_output=True, text=True, timeout=180)
        assert simulated.returncode == 0, simulated.stdout + simulated.stderr
        status, metrics = scrape(web_port, "/metrics", ca, WEB_PASSWORD)
        assert status == 200
        decided = value(metrics, "banditflow_decision_latency_seconds_count")
        assert decided is not None and decided >= 300, decided
        assert "banditflow_learner_coverage{" in metrics  # it learned from the feedback

        # archive and kcat read the same topics with the same client configuration.
        archive = t.directory / "mtls.archive.jsonl"
        archived = subprocess.run(
            [*CLI, "archive", "--kafka-config", str(t.mtls_config), "--prefix", PREFIX,
             "--from-beginning", "--until-idle", "2", "--out", str(archive)],
            capture_output=True, text=True, timeout=120)
        assert archived.returncode == 0, archived.stderr
        assert archive.read_text().count('{"topic":"decisions"') >= 300
        kcat = subprocess.run(
            [*CLI, "kcat", "--kafka-config", str(t.mtls_config), "-C", "-t", f"{PREFIX}.decisions",
             "-o", "beginning", "-c", "3", "-e", "-q"],
            capture_output=True, text=True, timeout=60)
        assert kcat.returncode == 0, kcat.stderr
        assert kcat.stdout.count('"learner_id"') == 3

        # The broker goes away after the worker had connected: /ready says why.
        t.mtls.__exit__(None, None, None)
        poll_until(lambda: scrape(web_port, "/ready", ca, WEB_PASSWORD)[0] == 503, 30)
        status, text = scrape(web_port, "/ready", ca, WEB_PASSWORD)
        assert status == 503 and "cannot reach" in text and t.mtls.bootstrap in text, text
        t.mtls.__enter__()
        poll_until(lambda: scrape(web_port, "/ready", ca, WEB_PASSWORD)[0] == 200, 60)
    finally:
        stop(worker)
    secrets = (t.pki.client_key_password, WEB_PASSWORD)
    for text in (log_path.read_text(), archive.read_text()):
        assert not any(secret in text for secret in secrets)


def failure_cases(t: TlsBroker, running: contextlib.ExitStack
                  ) -> dict[str, tuple[dict[str, str], str]]:
    ca, other = t.pki.path("ca.pem"), t.pki.path("other-ca.pem")
    d = t.directory
    expired = running.enter_context(TlsTerminator(
        d, t.broker.port, t.pki.path("expired.pem"), t.pki.path("expired.key")))
    wrong_host = running.enter_context(TlsTerminator(
        d, t.broker.port, t.pki.path("wrong-host.pem"), t.pki.path("wrong-host.key")))
    tls = {"security.protocol": "SSL", "ssl.ca.location": ca}
    return {
        "wrong CA": ({"bootstrap.servers": t.tls.bootstrap, **tls, "ssl.ca.location": other},
                     "certificate is not trusted: unable to get local issuer certificate"),
        "expired": ({"bootstrap.servers": expired.bootstrap, **tls},
                    "certificate has expired"),
        "mismatched": ({"bootstrap.servers": wrong_host.bootstrap, **tls},
                       "not valid for '127.0.0.1'"),
        "plaintext to TLS": ({"bootstrap.servers": t.tls.bootstrap},
                             "a TLS listener? security.protocol is PLAINTEXT"),
        "TLS to plaintext": ({"bootstrap.servers": f"127.0.0.1:{t.broker.port}", **tls},
                             "a plaintext listener? security.protocol is SSL"),
        "no client certificate": ({"bootstrap.servers": t.mtls.bootstrap, **tls},
                                  "the broker refused the client certificate"),
        "foreign client certificate": (
            {"bootstrap.servers": t.mtls.bootstrap, **tls,
             "ssl.certificate.location": t.pki.path("stranger.pem"),
             "ssl.key.location": t.pki.path("stranger.key")},
            "the broker refused the client certificate"),
        "unknown key": ({"bootstrap.servers": t.tls.bootstrap, **tls, "ssl.keystore.location":
                         "x.jks"}, "unknown Kafka client property 'ssl.keystore.location'"),
    }


def test_each_misconfiguration_fails_in_one_line_within_30s(tls_broker: TlsBroker) -> None:
    running = contextlib.ExitStack()
    with running:
        check_failures(tls_broker, failure_cases(tls_broker, running))


def check_failures(tls_broker: TlsBroker, cases: dict[str, tuple[dict[str, str], str]]) -> None:
    for name, (values, expected) in cases.items():
        config = write_properties(tls_broker.directory / "bad.properties", values)
        started = time.monotonic()
        done = subprocess.run(
            [*CLI, "archive", "--kafka-config", str(config), "--prefix", run_prefix("none"),
             "--until-idle", "1", "--out", str(tls_broker.directory / "never.jsonl")],
            capture_output=True, text=True, timeout=60)
        elapsed = time.monotonic() - started
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0, name
        assert elapsed < 30, (name, elapsed)
        assert len(lines) == 1 and expected in lines[0], (name, done.stderr)
        assert lines[0].startswith("banditflow archive: "), (name, lines)


def test_sasl_credentials_reach_the_embedded_brokers_scram_handshake(tmp_path: Path) -> None:
    """Tansu's --authentication speaks SASL SCRAM; with memory storage no user can be
    created (README: Connecting to your Kafka), so the right outcome here is the broker
    refusing these credentials in the SCRAM exchange, named in one line; PLAIN it does not
    offer at all."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with open(tmp_path / "tansu.log", "wb") as log:
        broker = subprocess.Popen(
            [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--authentication"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        poll_until(lambda: port_open("127.0.0.1", port), 10)
        for mechanism, expected in (("SCRAM-SHA-256", "refused the SASL credentials"),
                                    ("PLAIN", "refused the SASL credentials")):
            env = {**os.environ, "BANDITFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                   "BANDITFLOW_KAFKA_SASL_MECHANISM": mechanism,
                   "BANDITFLOW_KAFKA_SASL_USERNAME": "alice",
                   "BANDITFLOW_KAFKA_SASL_PASSWORD": "alice-password-never-shown"}
            started = time.monotonic()
            done = subprocess.run(
                [*CLI, "archive", "--bootstrap", f"127.0.0.1:{port}", "--prefix",
                 run_prefix("none"), "--until-idle", "1", "--out", str(tmp_path / "never.jsonl")],
                capture_output=True, text=True, timeout=60, env=env)
            lines = done.stderr.strip().splitlines()
            assert done.returncode != 0 and time.monotonic() - started < 30, mechanism
            assert len(lines) == 1 and expected in lines[0], (mechanism, done.stderr)
            assert f"SASL_PLAINTEXT, {mechanism} as alice" in lines[0]
            assert "alice-password-never-shown" not in done.stderr
    finally:
        stop(broker)
