"""``banditflow gateway`` as a real process on a real socket, in front of the embedded broker
and a real worker: a conversation per family (the README's curl requests, sent with curl), the
401/403/404/413/422/504 paths, the OpenAPI document validated, HTTPS with a certificate the
test makes, the refusal to serve beyond loopback without keys, the learners command, and a
hostile corpus (the fault suite's records, sent as HTTP bodies) that gets 4xx answers with
reasons, never a 500, and loses no record the gateway accepted."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from openapi_spec_validator import validate

from banditflow.streams.broker import free_port
from banditflow.streams.scrape import fetch
from tests.fault import corpus as hostile
from tests.integration.conftest import gateway_command, run_prefix
from tests.integration.test_client import CONTEXTS, GRAPH, family_configs

pytestmark = pytest.mark.integration

DECIDE = "decide-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys"
    path.write_text(f"# roles\ndecide:{DECIDE}\nadmin:{ADMIN}\n")
    return path


def curl(*args: str) -> tuple[int, Any]:
    """curl, as the README shows it: the status and the JSON body (None if empty)."""
    done = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", *args], capture_output=True,
                          text=True, check=True)
    body, _, status = done.stdout.rpartition("\n")
    return int(status), json.loads(body) if body.strip() else None


def test_a_conversation_per_family_and_the_error_paths(
    broker, start_worker, start_gateway, keys_file: Path, tmp_path: Path
) -> None:
    worker = start_worker(run_prefix("gw"), partitions=4)
    gateway = start_gateway(worker.prefix, "--api-keys", str(keys_file))
    url = gateway.url
    admin = ("-H", f"Authorization: Bearer {ADMIN}")
    decide = ("-H", f"Authorization: Bearer {DECIDE}")
    post = ("-H", "Content-Type: application/json")

    for name, config in family_configs().items():
        lid = config["learner_id"]
        status, body = curl("-X", "PUT", f"{url}/v1/learners/{lid}", *admin, *post, "-d",
                            json.dumps({k: v for k, v in config.items() if k != "learner_id"}))
        assert status == 200 and body["family"] == name, body
        status, body = curl(f"{url}/v1/learners/{lid}", *decide)
        assert status == 200 and body["algorithm"] == config["algorithm"]
        status, decision = curl(f"{url}/v1/learners/{lid}/decisions", *decide, *post, "-d",
                                json.dumps({"event_id": f"{name}-1", **CONTEXTS[name]}))
        assert status == 200, decision
        assert decision["event_id"] == f"{name}-1" and decision["family"] == name
        assert decision["learner_version"] == 1 and "decided_at" in decision
        output = decision["output"]
        feedback = {
            "conformal": {"label": "cat"},
            "graph_cb": {"losses": {str(j): 0.5 for j in range(3) if GRAPH[output.get(
                "action", 0)][j]}},
            "deferral": {"part": "model", "model_reward": 1.0},
            "prob_graph": {"rewards": {str(output.get("arm", 0)): 0.4}, "complete": False},
        }[name]
        status, body = curl(f"{url}/v1/learners/{lid}/feedback", *decide, *post, "-d",
                            json.dumps({"event_id": f"{name}-1", **feedback}))
        assert status == 202, body
        # An event id is generated when not given.
        status, decision = curl(f"{url}/v1/learners/{lid}/decisions", *decide, *post, "-d",
                                json.dumps(CONTEXTS[name]))
        assert status == 200 and len(decision["event_id"]) == 32
    status, body = curl(f"{url}/v1/learners/router/truth", *decide, *post, "-d",
                        json.dumps({"event_id": "graph_cb-1",
                                    "all_losses": {"0": 0.5, "1": 0.2, "2": 0.9}}))
    assert status == 202, body
    status, body = curl(f"{url}/v1/learners", *decide)
    assert status == 200 and [c["learner_id"] for c in body] == ["arms", "router", "shop",
                                                                  "triage"]

    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {DECIDE}"}) as http:
        # 404: unknown learner (at once, not after the worker's ten-second hold).
        started = time.monotonic()
        answer = http.post("/v1/learners/nobody/decisions", json={"labels": ["a"],
                                                                  "scores": [1.0]})
        assert answer.status_code == 404 and answer.json()["reason"] == "unknown_learner"
        assert time.monotonic() - started < 2.0
        assert http.get("/v1/learners/nobody").status_code == 404
        # 422: the schema refuses, the worker dead-letters.
        answer = http.post("/v1/learners/shop/decisions", json={"labels": "cat",
                                                                "scores": [1.0]})
        assert answer.status_code == 422 and answer.json()["reason"] == "invalid_schema"
        answer = http.post("/v1/learners/router/decisions",
                           json={"features": [0.1, 0.2, 0.3], "graph": GRAPH})
        assert answer.status_code == 422 and answer.json()["reason"] == "learner_rejected"
        answer = http.post("/v1/learners/shop/feedback", json={"event_id": "x"})
        assert answer.status_code == 422 and "carries nothing" in answer.json()["detail"]
        answer = http.post("/v1/learners/shop/decisions",
                           content=b'{"labels": ["a"], "scores": [NaN]}')
        assert answer.status_code == 400 and answer.json()["reason"] == "malformed_json"
        answer = http.post("/v1/learners/shop/decisions",
                           json={"learner_id": "router", "labels": ["a"], "scores": [1.0]})
        assert answer.status_code == 422
        answer = http.post("/v1/learners/shop/decisions?timeout=nan",
                           json={"labels": ["a"], "scores": [1.0]})
        assert answer.status_code == 422 and answer.json()["reason"] == "invalid_request"
        # 413: over the worker's --max-event-bytes, said or not said in Content-Length.
        big = b'{"labels": ["a"], "scores": [1.0], "x": "' + b"y" * 1_000_001 + b'"}'
        answer = http.post("/v1/learners/shop/decisions", content=big)
        assert answer.status_code == 413
        answer = http.post("/v1/learners/shop/decisions", content=iter([big]))  # chunked
        assert answer.status_code == 413
        # 504: a context the worker holds (until its learner has absorbed 5 updates).
        started = time.monotonic()
        answer = http.post("/v1/learners/shop/decisions?timeout=1",
                           json={"labels": ["a"], "scores": [1.0], "after_updates": 5})
        assert answer.status_code == 504 and answer.json()["reason"] == "timeout"
        assert 1.0 <= time.monotonic() - started < 5.0
        # 403: the decide role may read configs, not change them.
        answer = http.put("/v1/learners/shop", json=family_configs()["conformal"])
        assert answer.status_code == 403 and answer.json()["reason"] == "forbidden"
        assert http.delete("/v1/learners/shop").status_code == 403
        # The OpenAPI document (behind a key too) is valid OpenAPI 3.
        document = http.get("/openapi.json").json()
        validate(document)
        assert document["openapi"].startswith("3.")
        assert {"/v1/learners/{learner_id}/decisions", "/v1/learners/{learner_id}/feedback",
                "/v1/learners/{learner_id}/truth", "/v1/learners",
                "/v1/learners/{learner_id}"} <= set(document["paths"])

    # 401: every endpoint but /healthz and /ready wants a valid key.
    for method, path in [("GET", "/openapi.json"), ("GET", "/v1/learners"),
                         ("GET", "/v1/learners/shop"), ("PUT", "/v1/learners/shop"),
                         ("DELETE", "/v1/learners/shop"), ("POST", "/v1/learners/shop/decisions"),
                         ("POST", "/v1/learners/shop/feedback"),
                         ("POST", "/v1/learners/shop/truth"), ("GET", "/docs"),
                         ("GET", "/metrics"), ("GET", "/nothing")]:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"},
                        {"Authorization": DECIDE}):
            answer = httpx.request(method, f"{url}{path}", headers=headers, json={})
            assert answer.status_code == 401, (method, path, headers, answer.text)
            assert answer.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{url}/healthz").status_code == 200
    assert httpx.get(f"{url}/ready").text == "ready"

    # The admin deletes; the learners command sees it.
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as http:
        assert http.delete("/v1/learners/arms").status_code == 204
        assert http.delete("/v1/learners/arms").status_code == 404
    cli = [sys.executable, "-m", "banditflow.streams.cli", "learners", "--bootstrap",
           broker.bootstrap, "--prefix", worker.prefix]
    listed = subprocess.run([*cli, "list"], capture_output=True, text=True, check=True)
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["router", "shop",
                                                                            "triage"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**family_configs()["graph_cb"], "learner_id": "bad",
                               "params": {"actions": 3}}))
    refused = subprocess.run([*cli, "create", str(bad)], capture_output=True, text=True)
    assert refused.returncode == 2 and "invalid_config" in refused.stderr, refused.stderr
    good = tmp_path / "good.json"
    good.write_text(json.dumps({**family_configs()["conformal"], "learner_id": "shop2"}))
    subprocess.run([*cli, "create", str(good)], check=True, capture_output=True)
    shown = subprocess.run([*cli, "show", "shop2"], capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout)["learner_id"] == "shop2"
    subprocess.run([*cli, "delete", "shop2"], check=True, capture_output=True)
    assert subprocess.run([*cli, "show", "shop2"], capture_output=True).returncode == 1

    # The gateway's metrics, on their own port.
    metrics = fetch(f"http://127.0.0.1:{gateway.metrics_port}/metrics")
    assert ('banditflow_gateway_requests_total{method="POST",'
            'route="/v1/learners/{learner_id}/decisions",status="200"}') in metrics
    assert 'status="401"' in metrics and 'status="504"' in metrics
    assert "Traceback" not in gateway.log()


def test_tls_and_loopback_only_without_keys(
    broker, start_worker, start_gateway, keys_file: Path, tmp_path: Path
) -> None:
    worker = start_worker(run_prefix("gwtls"), partitions=1)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    trusted = ssl.create_default_context(cafile=str(cert))
    gateway = start_gateway(worker.prefix, "--api-keys", str(keys_file), "--tls-cert", str(cert),
                            "--tls-key", str(key), scheme="https", verify=trusted)
    assert gateway.url.startswith("https://")
    answer = httpx.get(f"{gateway.url}/v1/learners", verify=trusted,
                       headers={"Authorization": f"Bearer {DECIDE}"})
    assert answer.status_code == 200 and answer.json() == []
    with pytest.raises(httpx.ConnectError):  # an unknown certificate is refused
        httpx.get(f"{gateway.url}/healthz")
    with pytest.raises(httpx.HTTPError):  # no plain HTTP on the HTTPS port
        httpx.get(gateway.url.replace("https", "http") + "/healthz")

    refused = subprocess.run(
        gateway_command(broker.bootstrap, worker.prefix, "--host", "0.0.0.0", "--port",
                        str(free_port())), capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "refusing to serve 0.0.0.0 without --api-keys" in refused.stderr
    assert "Traceback" not in refused.stderr
    keys_file.write_text("root:short\n")
    refused = subprocess.run(
        gateway_command(broker.bootstrap, worker.prefix, "--api-keys", str(keys_file)),
        capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "ROLE:TOKEN" in refused.stderr
    assert "short" not in refused.stderr  # a token never reaches a message


def test_hostile_corpus_gets_reasons_never_a_500(
    broker, start_worker, start_gateway, keys_file: Path
) -> None:
    """The fault suite's records as HTTP bodies (its configs as PUTs, its contexts as
    decision requests, ...), with the fault suite's worker limits, plus bodies no record can
    be: every answer is 2xx or a 4xx with a reason, none a 500, and every feedback accepted
    (202) is on the feedback topic."""
    partitions = 2
    worker = start_worker(run_prefix("gwhostile"), partitions=partitions,
                          extra_args=hostile.WORKER_ARGS)
    gateway = start_gateway(worker.prefix, "--api-keys", str(keys_file), "--timeout", "20",
                            "--max-event-bytes", str(hostile.MAX_EVENT_BYTES),
                            "--max-labels", str(hostile.MAX_LABELS),
                            "--max-features", str(hostile.MAX_FEATURES))
    records = [r for r in hostile.corpus(11, 600, partitions=partitions) if r.phase <= 0]
    rng = np.random.default_rng(3)
    extra = [b"", b"null", b"[]", b"{", b"\xff\xfe", b"[" * 100_000, b"{\"a\":" * 5000,
             b'{"labels": ["a"], "scores": [1e999]}', b'{"scores": [Infinity]}',
             b'{"event_id": 12, "labels": ["a"], "scores": [1]}',
             *(hostile.encode_json(rng, hostile.arbitrary_json(rng, top=True))
               for _ in range(200))]
    paths = {"contexts": "decisions", "feedback": "feedback", "truth": "truth"}
    accepted_feedback: list[bytes] = []
    statuses: Counter[tuple[str, int]] = Counter()

    async def run() -> None:
        limits = httpx.Limits(max_connections=16)
        async with httpx.AsyncClient(base_url=gateway.url, limits=limits, timeout=60,
                                     headers={"Authorization": f"Bearer {ADMIN}"}) as http:
            semaphore = asyncio.Semaphore(16)

            async def send(method: str, path: str, body: bytes | None) -> int:
                async with semaphore:
                    answer = await http.request(method, path, content=body)
                if answer.status_code >= 300:
                    assert answer.status_code < 500, (path, body[:200] if body else body,
                                                      answer.text)
                    reason = answer.json()["reason"]
                    assert reason and answer.json()["detail"] is not None
                return answer.status_code

            async def one(record: hostile.Record) -> None:
                key = (record.key or b"conf0").decode("utf-8", "replace")
                lid = key if key.isascii() and key.replace("-", "").isalnum() else "conf0"
                if record.stream == "learners":
                    status = await send("PUT", f"/v1/learners/{lid}", record.value)
                else:
                    status = await send("POST", f"/v1/learners/{lid}/{paths[record.stream]}",
                                        record.value)
                    if record.stream == "feedback" and status == 202:
                        accepted_feedback.append(record.value or b"")
                if record.expect == hostile.VALID:  # valid traffic goes through
                    assert status == {"learners": 200, "contexts": 200, "feedback": 202,
                                      "truth": 202}[record.stream], (record, status)
                statuses[record.stream, status] += 1

            for record in records:
                if record.phase < 0:  # the valid learners first
                    await one(record)
            await asyncio.gather(*(one(r) for r in records if r.phase == 0))
            for body in extra:
                statuses["extra", await send("POST", "/v1/learners/conf0/decisions", body)] += 1

    asyncio.run(run())
    print(sorted(statuses.items()))
    assert statuses["contexts", 200] > 100 and statuses["feedback", 202] > 50
    assert sum(n for (stream, status), n in statuses.items() if stream == "extra"
               and 400 <= status < 500) == len(extra)
    # Nothing the gateway accepted is lost: every accepted feedback is on the topic.
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**broker.connection.kafka_python_kwargs(),
                             enable_auto_commit=False, consumer_timeout_ms=2000)
    tps = [TopicPartition(worker.topics.feedback, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    on_topic = [json.loads(r.value) for r in consumer]
    consumer.close()
    for value in accepted_feedback:
        sent = json.loads(value)
        assert any(all(got.get(k) == v for k, v in sent.items()) for got in on_topic), sent
    assert "Traceback" not in gateway.log()


def test_gateways_side_by_side(broker, start_worker, start_gateway, keys_file: Path) -> None:
    """Two gateways on one prefix: a learner created through one is served by both, and
    concurrent decisions through each get their own (each gateway holds only its consumer)."""
    worker = start_worker(run_prefix("gwpair"), partitions=2)
    first = start_gateway(worker.prefix, "--api-keys", str(keys_file))
    second = start_gateway(worker.prefix, "--api-keys", str(keys_file))
    config = family_configs()["conformal"]
    answer = httpx.put(f"{first.url}/v1/learners/shop", json=config,
                       headers={"Authorization": f"Bearer {ADMIN}"})
    assert answer.status_code == 200, answer.text

    async def run() -> list[tuple[str, dict[str, Any]]]:
        headers = {"Authorization": f"Bearer {DECIDE}"}
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:

            async def one(i: int) -> tuple[str, dict[str, Any]]:
                url = (first if i % 2 else second).url
                answer = await http.post(f"{url}/v1/learners/shop/decisions",
                                         json={"event_id": f"p{i}", **CONTEXTS["conformal"]})
                assert answer.status_code == 200, answer.text
                return f"p{i}", answer.json()

            return await asyncio.gather(*(one(i) for i in range(200)))

    for event_id, decision in asyncio.run(run()):
        assert decision["event_id"] == event_id and decision["learner_id"] == "shop"


@pytest.mark.embedded_broker
def test_ready_says_when_the_broker_is_lost(tmp_path: Path) -> None:
    """A broker lost after the gateway started: /ready turns 503 with the reason (its client
    has not heard from the broker), /healthz stays 200 (the process is alive)."""
    from banditflow.streams.broker import EmbeddedBroker
    from banditflow.streams.demo import stop
    from banditflow.streams.topics import Topics, ensure_topics

    prefix = run_prefix("gwlost")
    with EmbeddedBroker(port=free_port(), log_path=tmp_path / "broker.log") as lost:
        ensure_topics(lost.connection, Topics(prefix), 1)
        port = free_port()
        with open(tmp_path / "gateway.log", "ab") as log:
            process = subprocess.Popen(
                gateway_command(lost.bootstrap, prefix, "--port", str(port),
                                "--metrics-port", str(free_port())),
                stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"

            def ready() -> httpx.Response | None:
                try:
                    return httpx.get(f"{url}/ready")
                except httpx.HTTPError:
                    return None

            deadline = time.monotonic() + 60
            while (answer := ready()) is None or answer.status_code != 200:
                assert time.monotonic() < deadline and process.poll() is None, (
                    (tmp_path / "gateway.log").read_text())
                time.sleep(0.2)
            time.sleep(6)  # longer than the silence /ready tolerates: a healthy broker answers
            assert httpx.get(f"{url}/ready").text == "ready"

            lost.stop()
            stopped = time.monotonic()
            while (answer := httpx.get(f"{url}/ready")).status_code == 200:
                assert time.monotonic() - stopped < 20, "/ready did not notice the lost broker"
                time.sleep(0.2)
            assert answer.status_code == 503
            assert answer.text.startswith(f"not ready: no answer from the broker "
                                          f"({lost.bootstrap}) for "), answer.text
            assert httpx.get(f"{url}/healthz").status_code == 200
        finally:
            stop(process)


def test_the_compose_gateway_is_the_cli_s() -> None:
    """deploy/docker-compose.yml (not run here: no Docker engine) parses as YAML, every
    banditflow service's command is one the CLI accepts, and the gateway service mounts the
    keys file its command names, publishes its API port and checks its /ready."""
    import yaml

    from banditflow.streams.cli import build_parser

    deploy = Path(__file__).resolve().parents[2] / "deploy"
    compose = yaml.safe_load((deploy / "docker-compose.yml").read_text())
    ours = {name: service for name, service in compose["services"].items()
            if service.get("build", {}).get("dockerfile") == "deploy/Dockerfile"}
    assert {"worker", "simulate", "gateway"} <= set(ours)
    for service in ours.values():
        command = service["command"]
        build_parser(command[0]).parse_args(command)  # (argparse exits on an unknown flag)
    gateway = ours["gateway"]
    args = build_parser("gateway").parse_args(gateway["command"])
    assert args.host == "0.0.0.0" and args.api_keys is not None  # beyond loopback: keys
    (secret,) = gateway["secrets"]
    assert str(args.api_keys) == f"/run/secrets/{secret}"
    assert compose["secrets"][secret]["file"] == "./gateway-api-keys"
    assert (deploy / "gateway-api-keys.example").exists()
    assert gateway["ports"] == [f"{args.port}:{args.port}"]
    assert gateway["expose"] == [str(args.metrics_port)] and args.metrics_host == "0.0.0.0"
    assert f"http://127.0.0.1:{args.port}/ready" in " ".join(gateway["healthcheck"]["test"])
    assert "'/src[gateway]'" in (deploy / "Dockerfile").read_text()
