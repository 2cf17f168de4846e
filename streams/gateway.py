"""``banditflow gateway``: banditflow over HTTP, for applications in any language.

A FastAPI application (served by uvicorn) in front of one :class:`AsyncClient`: every request
is the client's call of the same name, so the gateway validates, matches decisions and maps
dead letters exactly as the Python client does, and holds no state but the client's consumer
(several gateways may run side by side). The event endpoints (decisions, feedback, truth),
which carry the traffic, are answered by the pure ASGI front before FastAPI (its routing,
middleware and parameter models cost half the CPU of a request); FastAPI serves the rest and
the OpenAPI document, which describes them all.

- ``POST /v1/learners/{id}/decisions``: the context fields as JSON -> 200 and the decision as
  published on the decisions topic; 422 with the reason for a context the schema refuses or
  the worker dead-letters; 404 for an unknown learner; 504 when no decision came in time.
- ``POST /v1/learners/{id}/feedback`` and ``/truth`` -> 202 once the broker has the record.
- ``GET /v1/learners``, ``GET|PUT|DELETE /v1/learners/{id}``: learner configs.
- ``GET /openapi.json``; ``GET /healthz`` and ``GET /ready``, the only endpoints open without
  a key.

Keys (``--api-keys FILE``, one ``ROLE:TOKEN`` a line): ``decide`` may decide, report feedback
and truth and read configs, ``admin`` everything; ``Authorization: Bearer TOKEN``. Without
keys the gateway serves loopback only. Bodies are read up to the worker's
``--max-event-bytes`` (413 beyond), parsed by orjson (its nesting limit: 400 on deeper input)
and validated by the worker's models; a broker that does not answer gives 503.

Prometheus metrics (``banditflow_gateway_*``) are served on a port of their own
(``--metrics-port``), as the worker's are, not on the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import ipaddress
import logging
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import orjson
from aiokafka.errors import KafkaError
from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry, Counter, Histogram

from banditflow.learners.registry import families
from banditflow.schemas import Decision, LearnerConfig, Limits, family_events
from banditflow.streams.client import AsyncClient, DecisionTimeout, Rejected
from banditflow.streams.connection import KafkaConnection

log = logging.getLogger("banditflow.gateway")

ROLES = ("decide", "admin")
OPEN_PATHS = frozenset({"/healthz", "/ready"})
# What only the admin role may do: change learner configs (PUT, DELETE /v1/learners/{id};
# every other endpoint reads or is a POST of events).
ADMIN_METHODS = frozenset({"PUT", "DELETE"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class GatewayError(ValueError):
    """Settings the gateway cannot run with: an API keys file it cannot use (the message never
    quotes a token), TLS half given, keys missing beyond loopback, no broker or topics."""


@dataclass(frozen=True)
class ApiKeys:
    """Bearer tokens and their roles."""

    roles: dict[str, str]  # token -> role

    @classmethod
    def read(cls, path: Path) -> ApiKeys:
        """``path``: one ``ROLE:TOKEN`` a line (blank lines and ``#`` comments skipped)."""
        roles: dict[str, str] = {}
        for number, line in enumerate(path.read_text().splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            role, sep, token = line.partition(":")
            if not sep or role not in ROLES:
                raise GatewayError(f"{path}:{number}: expected ROLE:TOKEN with ROLE one of "
                                f"{', '.join(ROLES)}")
            if len(token) < 16 or any(c.isspace() for c in token):
                raise GatewayError(f"{path}:{number}: a token must have at least 16 characters "
                                "and no spaces")
            roles[token] = role
        if not roles:
            raise GatewayError(f"{path}: no keys")
        return cls(roles)

    def role_of(self, token: str) -> str | None:
        found = None
        for known, role in self.roles.items():  # every key compared, in constant time
            if hmac.compare_digest(known.encode(), token.encode()):
                found = role
        return found


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def _problem(status: int, reason: str, detail: str) -> Response:
    return _json(status, {"reason": reason, "detail": detail})


def _failure(exc: Exception) -> tuple[int, str, str] | None:
    """The status, reason and detail answering ``exc``; None for an exception that is a bug
    (a 500)."""
    if isinstance(exc, Rejected):
        return ({"unknown_learner": 404, "malformed_json": 400}.get(exc.reason, 422),
                exc.reason, exc.detail)
    if isinstance(exc, DecisionTimeout):
        return 504, "timeout", str(exc)
    if isinstance(exc, KafkaError):
        log.warning("broker: %s", exc)
        return 503, "broker_unavailable", type(exc).__name__
    if isinstance(exc, _Oversize):
        return 413, "oversize", "the body exceeds the limit (--max-event-bytes)"
    return None


HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})


class GatewayMetrics:
    """``banditflow_gateway_requests_total{route,method,status}`` and
    ``banditflow_gateway_request_seconds{route}`` (route: the path template)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "banditflow_gateway_requests", "HTTP requests answered by the gateway",
            ["route", "method", "status"], registry=self.registry,
        )
        self.seconds = Histogram(
            "banditflow_gateway_request_seconds", "time to answer a request",
            ["route"], registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        # The labelled series by (route, method, status): prometheus_client's labels() checks
        # and joins its arguments on every call, a few percent of a request's CPU.
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """One answered request (a method outside HTTP's usual ones counts as ``other``: a
        client chooses it, and must not be able to make series without end)."""
        if method not in HTTP_METHODS:
            method = "other"
        key = (route, method, status)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = (self.requests.labels(route, method, str(status)),
                                          self.seconds.labels(route))
        series[0].inc()
        series[1].observe(seconds)


# The event endpoints: a decision, feedback, truth. They carry the traffic, so _Front answers
# them itself, without FastAPI's routing, middleware and parameter models (measured: they
# took half the gateway's CPU per request); document() describes them.
EVENT_PATH = re.compile(r"/v1/learners/(?P<learner_id>[^/]+)/(?P<kind>decisions|feedback|truth)")
EVENT_TEMPLATE = "/v1/learners/{learner_id}/"
JSON_HEADERS = [(b"content-type", b"application/json")]
MAX_TIMEOUT_S = 600.0


class _Front:
    """Pure ASGI in front of FastAPI: authentication (401 for every path but /healthz and
    /ready without a valid key), the body limit, the request metrics, and the event
    endpoints."""

    def __init__(self, app: ASGIApp, client: AsyncClient, keys: ApiKeys | None,
                 metrics: GatewayMetrics, max_body: int) -> None:
        self.app, self.client, self.keys = app, client, keys
        self.metrics, self.max_body = metrics, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        event = EVENT_PATH.fullmatch(scope["path"]) if scope["method"] == "POST" else None

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, sending)
            elif event is not None:  # (its status known before it is sent: no wrapper)
                status, body = await self._event(event["kind"], event["learner_id"], scope,
                                                 self._limited(receive))
                await send({"type": "http.response.start", "status": status, "headers": [
                    *JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
            else:
                await self.app(scope, self._limited(receive), sending)
        finally:
            if event is not None:
                template = EVENT_TEMPLATE + event["kind"]
            else:
                route = scope.get("route")
                template = route.path if isinstance(route, APIRoute) else "other"
            self.metrics.observe(template, scope["method"], status, time.perf_counter() - started)

    async def _event(self, kind: str, learner_id: str, scope: Scope, receive: Receive
                     ) -> tuple[int, bytes]:
        """The status and JSON body answering an event request."""
        try:
            timeout = _timeout(scope["query_string"]) if kind == "decisions" else None
            record = _record(await _read_body(receive), learner_id)
            if kind == "decisions":
                record.setdefault("event_id", uuid.uuid4().hex)
                decision = await self.client.decide_record(record, timeout=timeout)
                status, body = 200, orjson.dumps(decision.record)
            else:
                if kind == "feedback":
                    await self.client.feedback_record(record)
                else:
                    await self.client.truth_record(record)
                status, body = 202, b'{"accepted":true}'
        except Exception as exc:
            failure = _failure(exc)
            if failure is None:
                raise
            status, reason, detail = failure
            body = orjson.dumps({"reason": reason, "detail": detail})
        return status, body

    def _refusal(self, scope: Scope) -> Response | None:
        headers = dict(scope["headers"])
        if self.keys is not None and scope["path"] not in OPEN_PATHS:
            refusal = self._unauthorized(scope, headers)
            if refusal is not None:
                return refusal
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return _problem(413, "oversize", f"the body exceeds {self.max_body} bytes "
                                             "(the worker's --max-event-bytes)")
        return None

    def _unauthorized(self, scope: Scope, headers: dict[bytes, bytes]) -> Response | None:
        assert self.keys is not None
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        role = self.keys.role_of(token.strip()) if scheme.lower() == "bearer" else None
        if role is None:
            return _json(401, {"reason": "unauthorized",
                               "detail": "a valid key is required: Authorization: Bearer TOKEN"},
                         {"WWW-Authenticate": "Bearer"})
        if role != "admin" and scope["method"] in ADMIN_METHODS:
            return _problem(403, "forbidden", "this key's role (decide) may not change learners")
        return None

    def _limited(self, receive: Receive) -> Receive:
        received = 0
        limit = self.max_body

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _Oversize()
            return message

        return limited


class _Oversize(Exception):
    """A body (sent without a Content-Length, or longer than it said) over the limit."""


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _timeout(query: bytes) -> float | None:
    """The ``timeout`` query parameter: seconds in (0, 600], else :class:`Rejected`."""
    given = [v for k, v in parse_qsl(query.decode("latin-1")) if k == "timeout"] if query else []
    if not given:
        return None
    try:
        seconds = float(given[-1])
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_TIMEOUT_S:  # (NaN included)
        raise Rejected("invalid_request", f"query.timeout: expected seconds in (0, "
                                          f"{MAX_TIMEOUT_S:g}], got {given[-1][:40]!r}")
    return seconds


def _record(raw: bytes, learner_id: str) -> dict[str, Any]:
    """The request's JSON object, with the path's learner id."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Rejected("malformed_json", f"not valid UTF-8 JSON: {exc}") from None
    if not isinstance(value, dict):
        raise Rejected("malformed_json", f"expected a JSON object, got {type(value).__name__}")
    if value.setdefault("learner_id", learner_id) != learner_id:
        raise Rejected("invalid_schema",
                       f"learner_id {value['learner_id']!r} differs from the path's")
    return value


def _body_schema(model: type, optional: tuple[str, ...], components: dict[str, Any]
                 ) -> dict[str, Any]:
    """``model``'s JSON Schema with ``optional`` fields not required; the models it nests
    (its ``$defs``: a config's candidates, a context's candidate actions) go to
    ``components``, where its references point."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(schema.pop("$defs", {}))
    schema["required"] = [n for n in schema.get("required", []) if n not in optional]
    return schema


def _family_body(kind: str, optional: tuple[str, ...], components: dict[str, Any]
                 ) -> dict[str, Any]:
    """A ``kind`` record of any family (``anyOf``: its learner's config says which), each
    family's as :func:`_body_schema` gives it."""
    return {"anyOf": [_body_schema(getattr(family_events(name), kind), optional, components)
                      for name in families()]}


def _request_body(name: str) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}}


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    described = {400: "malformed JSON", 401: "no valid key", 403: "the key's role may not",
                 404: "unknown learner", 413: "body over the limit",
                 422: "refused: the reason (a dead-letter reason) and detail",
                 503: "the broker did not answer", 504: "no decision in time"}
    return {s: {"description": described[s],
                "content": {"application/json": {"schema": {
                    "$ref": "#/components/schemas/Problem"}}}} for s in statuses}


def _event_paths() -> dict[str, Any]:
    """The OpenAPI path items of the event endpoints (served by _Front, not by FastAPI)."""
    learner_id = {"name": "learner_id", "in": "path", "required": True,
                  "schema": {"type": "string"}}
    errors = (400, 401, 403, 404, 413, 422, 503)
    accepted = {202: {"description": "the broker has the record", "content": {
        "application/json": {"schema": {"type": "object", "properties": {
            "accepted": {"type": "boolean"}}}}}}}

    def post(operation: str, summary: str, body: str, responses: dict[int | str, Any],
             *parameters: dict[str, Any]) -> dict[str, Any]:
        return {"post": {"summary": summary, "operationId": operation,
                         "parameters": [learner_id, *parameters], **_request_body(body),
                         "responses": {str(s): r for s, r in responses.items()}}}

    timeout = {"name": "timeout", "in": "query", "required": False,
               "description": "seconds to wait for the decision (default: the gateway's "
                              "--timeout)",
               "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S}}
    return {
        EVENT_TEMPLATE + "decisions": post(
            "decide", "Decide on a context", "ContextBody",
            {200: {"description": "the decision, as on the decisions topic", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/Decision"}}}},
             **_problems(*errors, 504)}, timeout),
        EVENT_TEMPLATE + "feedback": post("feedback", "Report feedback", "FeedbackBody",
                                          {**accepted, **_problems(*errors)}),
        EVENT_TEMPLATE + "truth": post("truth", "Report ground truth", "TruthBody",
                                       {**accepted, **_problems(*errors)}),
    }


def build_app(client: AsyncClient, keys: ApiKeys | None, metrics: GatewayMetrics) -> ASGIApp:
    """The gateway's ASGI application around ``client`` (started and closed with it)."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await client.start()
        # What lives at this point (modules, models, the started client) is left out of every
        # later collection: a full collection over it stopped the gateway for 36 ms (measured
        # under load), every answer in flight with it; 1-3 ms once frozen.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await client.close()

    app = FastAPI(title="banditflow gateway", version="1", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)

    async def refused(_: Request, exc: Exception) -> Response:
        failure = _failure(exc)
        assert failure is not None  # (registered for the exceptions _failure answers)
        return _problem(*failure)

    for answered in (Rejected, DecisionTimeout, KafkaError, _Oversize):
        app.add_exception_handler(answered, refused)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return Response("ok", media_type="text/plain")

    @app.get("/ready", include_in_schema=False)
    async def ready() -> Response:
        reason = client.not_ready()
        return Response("ready" if reason is None else f"not ready: {reason}",
                        200 if reason is None else 503, media_type="text/plain")

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi() -> Response:
        return _json(200, app.openapi())

    @app.get("/v1/learners", summary="List learner configs",
             responses={200: {"description": "every learner's config", "content": {
                 "application/json": {"schema": {"type": "array", "items": {
                     "$ref": "#/components/schemas/LearnerConfig"}}}}},
                 **_problems(401, 503)})
    async def list_learners() -> Response:
        return _json(200, [c.model_dump(mode="json") for c in await client.learners.list()])

    @app.get("/v1/learners/{learner_id}", summary="A learner's config",
             responses={200: {"description": "the config", "content": {"application/json": {
                 "schema": {"$ref": "#/components/schemas/LearnerConfig"}}}},
                 **_problems(401, 404, 503)})
    async def get_learner(learner_id: str) -> Response:
        config = await client.learners.get(learner_id)
        if config is None:
            return _problem(404, "unknown_learner", f"no learner {learner_id!r}")
        return _json(200, config.model_dump(mode="json"))

    @app.put("/v1/learners/{learner_id}",
             summary="Create or reconfigure a learner",
             openapi_extra=_request_body("LearnerConfigBody"),
             responses={200: {"description": "the config as stored", "content": {
                 "application/json": {"schema": {
                     "$ref": "#/components/schemas/LearnerConfig"}}}},
                 **_problems(400, 401, 403, 413, 422, 503)})
    async def put_learner(learner_id: str, request: Request) -> Response:
        config = await client.learners.put(_record(await request.body(), learner_id))
        return _json(200, config.model_dump(mode="json"))

    @app.delete("/v1/learners/{learner_id}", status_code=204,
                summary="Delete a learner", responses=_problems(401, 403, 404, 503))
    async def delete_learner(learner_id: str) -> Response:
        await client.learners.delete(learner_id)
        return Response(status_code=204)

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                                 description="banditflow over HTTP: decisions, feedback, "
                                             "truth and learner configs")
            schema["paths"].update(_event_paths())
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update({
                "ContextBody": _family_body("context", ("learner_id", "event_id"), components),
                "FeedbackBody": _family_body("feedback", ("learner_id",), components),
                "TruthBody": _family_body("truth", ("learner_id",), components),
                "LearnerConfigBody": _body_schema(LearnerConfig, ("learner_id",), components),
                "LearnerConfig": _body_schema(LearnerConfig, (), components),
                "Decision": _body_schema(Decision, (), components),
                "Problem": {"type": "object", "required": ["reason", "detail"], "properties": {
                    "reason": {"type": "string"}, "detail": {"type": "string"}}},
            })
            schema["components"]["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"}}
            schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]

    return _Front(app, client, keys, metrics, client.limits.max_event_bytes)


@dataclass(frozen=True)
class GatewaySettings:
    """Everything ``banditflow gateway`` can be told (see ``banditflow gateway --help``)."""

    connection: KafkaConnection
    prefix: str = "banditflow"
    host: str = "127.0.0.1"
    port: int = 8080
    api_keys: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    timeout_s: float = 10.0
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 6067
    limits: Limits = field(default_factory=Limits)


def run_gateway(settings: GatewaySettings) -> int:
    """Serve until SIGINT/SIGTERM."""
    import uvicorn
    from prometheus_client import start_http_server

    keys = ApiKeys.read(settings.api_keys) if settings.api_keys is not None else None
    if keys is None and not is_loopback(settings.host):
        raise GatewayError(f"refusing to serve {settings.host} without --api-keys: anyone who "
                           "can reach it could decide and change learners (loopback only "
                           "without keys)")
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise GatewayError("--tls-cert and --tls-key go together")
    client = AsyncClient(settings.connection, prefix=settings.prefix, limits=settings.limits,
                         timeout=settings.timeout_s)

    async def reachable() -> None:
        # Said here in one line, rather than by uvicorn as a failed startup's traceback.
        async with AsyncClient(settings.connection, prefix=settings.prefix):
            pass

    try:
        asyncio.run(reachable())
    except (KafkaError, RuntimeError) as exc:
        raise GatewayError(f"cannot read the topics of prefix {settings.prefix!r} on "
                           f"{settings.connection.bootstrap}: {exc}") from None
    metrics = GatewayMetrics()
    start_http_server(settings.metrics_port, settings.metrics_host, metrics.registry)
    config = uvicorn.Config(
        build_app(client, keys, metrics), host=settings.host, port=settings.port,
        ssl_certfile=settings.tls_cert, ssl_keyfile=settings.tls_key, access_log=False,
        log_level="warning", lifespan="on", timeout_graceful_shutdown=5, server_header=False,
        # Nothing here reads the client's address (no access log, keys are bearer tokens),
        # so uvicorn's X-Forwarded-For/-Proto middleware would be a layer per request for
        # little: behind a TLS proxy, only the Location of Starlette's trailing-slash
        # redirect would say http:// where the client used https://.
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else 1
