"""How every Kafka client banditflow runs connects: one client configuration.

The configuration is a properties file in the form managed-Kafka consoles hand out for
librdkafka clients (``bootstrap.servers``, ``security.protocol``, ``ssl.*``, ``sasl.*``), plus
the same keys as ``BANDITFLOW_KAFKA_*`` environment variables (``ssl.ca.location`` is
``BANDITFLOW_KAFKA_SSL_CA_LOCATION``). :meth:`KafkaConnection.resolve` reads both;
:meth:`~KafkaConnection.aiokafka_kwargs`, :meth:`~KafkaConnection.kafka_python_kwargs` and
:meth:`~KafkaConnection.librdkafka_properties` turn it into each client library's settings.

Secrets (``ssl.key.password``, ``sasl.password``, ``sasl.oauthbearer.client.secret``) never
appear in the repr, in errors or in :meth:`~KafkaConnection.describe`.

:func:`diagnose` says in one line why a connection fails (unreachable, a certificate the
client refuses, a client certificate the broker refuses, TLS against a plaintext listener or
the reverse), which the clients themselves only log, retrying.

>>> c = KafkaConnection.resolve(environ={"BANDITFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
...     "BANDITFLOW_KAFKA_SASL_MECHANISM": "PLAIN", "BANDITFLOW_KAFKA_SASL_USERNAME": "app",
...     "BANDITFLOW_KAFKA_SASL_PASSWORD": "hunter2"}, bootstrap="kafka.example:9093")
>>> c.describe()
'kafka.example:9093 (SASL_SSL, PLAIN as app)'
>>> "hunter2" in repr(c)
False
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "BANDITFLOW_KAFKA_"
# The environment variable naming the properties file (what --kafka-config defaults to).
CONFIG_FILE_ENV = "BANDITFLOW_KAFKA_CONFIG"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

# Property name -> field of KafkaConnection. librdkafka's names; Java clients use the same
# for these (except the ssl.* file locations, which Java reads from keystores).
PROPERTIES = {
    "bootstrap.servers": "bootstrap",
    "security.protocol": "security_protocol",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.password": "ssl_key_password",
    "ssl.endpoint.identification.algorithm": "ssl_endpoint_identification_algorithm",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "sasl.oauthbearer.method": "sasl_oauthbearer_method",
    "sasl.oauthbearer.token.endpoint.url": "sasl_oauthbearer_token_endpoint_url",
    "sasl.oauthbearer.client.id": "sasl_oauthbearer_client_id",
    "sasl.oauthbearer.client.secret": "sasl_oauthbearer_client_secret",
    "sasl.oauthbearer.scope": "sasl_oauthbearer_scope",
}
SECRETS = frozenset({"ssl.key.password", "sasl.password", "sasl.oauthbearer.client.secret"})
# Keys a console hands out for other clients, and what to write instead.
HINTS = {
    "sasl.jaas.config": "that is the Java form: write sasl.username and sasl.password",
    "sasl.mechanisms": "write sasl.mechanism",
    "ssl.truststore.location": "Java keystores are not read: write ssl.ca.location (PEM)",
    "ssl.keystore.location": "Java keystores are not read: write ssl.certificate.location "
    "and ssl.key.location (PEM)",
}


class KafkaConfigError(ValueError):
    """The client configuration is invalid (names the key, never a secret's value)."""


def as_connection(kafka: KafkaConnection | str) -> KafkaConnection:
    """``kafka`` itself, or for a bare bootstrap string a PLAINTEXT connection to it."""
    return kafka if isinstance(kafka, KafkaConnection) else KafkaConnection(kafka)


@dataclass(frozen=True)
class KafkaConnection:
    """Where the brokers are and how to talk to them; see the module docstring."""

    bootstrap: str = DEFAULT_BOOTSTRAP
    security_protocol: str = "PLAINTEXT"
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    # "https": the broker's certificate must name the host dialled; "none": not checked.
    ssl_endpoint_identification_algorithm: str = "https"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_oauthbearer_method: str | None = None
    sasl_oauthbearer_token_endpoint_url: str | None = None
    sasl_oauthbearer_client_id: str | None = None
    sasl_oauthbearer_client_secret: str | None = field(default=None, repr=False)
    sasl_oauthbearer_scope: str | None = None

    @classmethod
    def resolve(
        cls,
        bootstrap: str | None = None,
        config_file: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> KafkaConnection:
        """The connection from the properties file, then the ``BANDITFLOW_KAFKA_*``
        variables of ``environ`` (they win over the file), then ``bootstrap`` (an explicit
        ``--bootstrap`` wins over ``bootstrap.servers``). Raises KafkaConfigError."""
        values: dict[str, str] = {}
        if config_file is not None:
            values.update(read_properties(Path(config_file)))
        for name, value in (environ or {}).items():
            if name.startswith(ENV_PREFIX) and name != CONFIG_FILE_ENV:
                key = name.removeprefix(ENV_PREFIX).lower().replace("_", ".")
                _known(key, f"environment variable {name}")
                values[key] = value
        if bootstrap:
            values["bootstrap.servers"] = bootstrap
        return cls.from_properties(values)

    @classmethod
    def from_properties(cls, values: Mapping[str, str]) -> KafkaConnection:
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            _known(key)
            value = value.strip()
            if value:
                kwargs[PROPERTIES[key]] = value
        for name in ("security_protocol", "sasl_mechanism"):
            if name in kwargs:
                kwargs[name] = kwargs[name].upper()
        if "ssl_endpoint_identification_algorithm" in kwargs:
            kwargs["ssl_endpoint_identification_algorithm"] = kwargs[
                "ssl_endpoint_identification_algorithm"].lower()
        connection = cls(**kwargs)
        connection.validate()
        return connection

    def validate(self) -> None:
        """Refuse settings that cannot work, naming the key (files must be readable)."""
        if not self.bootstrap.strip():
            raise KafkaConfigError("bootstrap.servers is empty")
        for server in self.servers():
            if server[1] <= 0:
                raise KafkaConfigError(f"bootstrap.servers: {self.bootstrap!r} is not a list of "
                                       "host:port")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise KafkaConfigError(f"security.protocol {self.security_protocol!r} is not one of "
                                   f"{', '.join(SECURITY_PROTOCOLS)}")
        if self.ssl_endpoint_identification_algorithm not in ("https", "none"):
            raise KafkaConfigError("ssl.endpoint.identification.algorithm must be https or none, "
                                   f"not {self.ssl_endpoint_identification_algorithm!r}")
        tls_keys = [key for key in ("ssl.ca.location", "ssl.certificate.location",
                                    "ssl.key.location", "ssl.key.password") if self._get(key)]
        if tls_keys and not self.tls:
            raise KafkaConfigError(f"{tls_keys[0]} is set but security.protocol is "
                                   f"{self.security_protocol}: use SSL or SASL_SSL")
        for key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
            path = self._get(key)
            if path and not os.access(path, os.R_OK):
                raise KafkaConfigError(f"{key}: cannot read {path}")
        if self.ssl_key_location and not self.ssl_certificate_location:
            raise KafkaConfigError("ssl.key.location is set without ssl.certificate.location")
        sasl_keys = [key for key in PROPERTIES if key.startswith("sasl.") and self._get(key)]
        if not self.sasl:
            if sasl_keys:
                raise KafkaConfigError(f"{sasl_keys[0]} is set but security.protocol is "
                                       f"{self.security_protocol}: use SASL_SSL or SASL_PLAINTEXT")
            return
        if self.sasl_mechanism is None:
            raise KafkaConfigError(f"security.protocol {self.security_protocol} needs "
                                   f"sasl.mechanism ({', '.join(SASL_MECHANISMS)})")
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise KafkaConfigError(f"sasl.mechanism {self.sasl_mechanism!r} is not one of "
                                   f"{', '.join(SASL_MECHANISMS)}")
        if self.sasl_mechanism == "OAUTHBEARER":
            if (self.sasl_oauthbearer_method or "").lower() != "oidc":
                raise KafkaConfigError("sasl.mechanism OAUTHBEARER needs "
                                       "sasl.oauthbearer.method=oidc (client credentials)")
            for key in ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
                        "sasl.oauthbearer.client.secret"):
                if not self._get(key):
                    raise KafkaConfigError(f"sasl.mechanism OAUTHBEARER needs {key}")
        else:
            for key in ("sasl.username", "sasl.password"):
                if not self._get(key):
                    raise KafkaConfigError(f"sasl.mechanism {self.sasl_mechanism} needs {key}")

    # ------------------------------------------------------------------ properties
    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def servers(self) -> list[tuple[str, int]]:
        """``bootstrap.servers`` as (host, port) pairs."""
        out = []
        for server in self.bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise KafkaConfigError(f"bootstrap.servers: {server.strip()!r} is not host:port")
            out.append((host.strip("[]"), int(port)))
        return out

    def describe(self) -> str:
        """Where and how, for logs and errors: no secrets."""
        how = self.security_protocol
        if self.sasl:
            who = self.sasl_username or self.sasl_oauthbearer_client_id
            how += f", {self.sasl_mechanism} as {who}"
        if self.ssl_certificate_location:
            how += ", client certificate"
        return f"{self.bootstrap} ({how})"

    def _get(self, key: str) -> str | None:
        return getattr(self, PROPERTIES[key])

    # ------------------------------------------------------------------ clients
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context (None without TLS): the CA file, or the system's CAs; the client
        certificate and key when given."""
        if not self.tls:
            return None
        try:
            context = ssl.create_default_context(cafile=self.ssl_ca_location)
        except (OSError, ssl.SSLError) as exc:
            raise KafkaConfigError(f"ssl.ca.location: cannot load {self.ssl_ca_location}: "
                                   f"{_reason(exc)}") from None
        if self.ssl_endpoint_identification_algorithm == "none":
            context.check_hostname = False
        if self.ssl_certificate_location:
            try:
                context.load_cert_chain(self.ssl_certificate_location, self.ssl_key_location,
                                        password=self.ssl_key_password)
            except (OSError, ssl.SSLError) as exc:
                raise KafkaConfigError(
                    f"ssl.certificate.location / ssl.key.location: cannot load the client "
                    f"certificate {self.ssl_certificate_location}: {_reason(exc)} (a key that "
                    "does not match the certificate, or a wrong ssl.key.password?)") from None
        return context

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producer, consumer and admin client."""
        kwargs: dict[str, Any] = {"bootstrap_servers": self.bootstrap,
                                  "security_protocol": self.security_protocol}
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_mechanism == "OAUTHBEARER":
                kwargs["sasl_oauth_token_provider"] = _async_provider(self.token_source())
            else:
                kwargs["sasl_plain_username"] = self.sasl_username
                kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs

    def kafka_python_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's producer, consumer and admin client."""
        kwargs = self.aiokafka_kwargs()
        if self.tls:
            kwargs["ssl_check_hostname"] = self.ssl_endpoint_identification_algorithm == "https"
        if self.sasl_mechanism == "OAUTHBEARER" and self.sasl:
            kwargs["sasl_oauth_token_provider"] = _sync_provider(self.token_source())
        return kwargs

    def librdkafka_properties(self) -> dict[str, str]:
        """The configuration as librdkafka properties (kcat's ``-F`` file)."""
        out = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol}
        for key in PROPERTIES:
            value = self._get(key)
            if value is not None and key not in out:
                out[key] = value
        if self.tls:
            out["ssl.endpoint.identification.algorithm"] = (
                self.ssl_endpoint_identification_algorithm)
        return out

    def token_source(self) -> OidcTokenSource:
        assert self.sasl_oauthbearer_token_endpoint_url and self.sasl_oauthbearer_client_id
        return OidcTokenSource(self.sasl_oauthbearer_token_endpoint_url,
                               self.sasl_oauthbearer_client_id,
                               self.sasl_oauthbearer_client_secret or "",
                               self.sasl_oauthbearer_scope, self.ssl_context())


def _known(key: str, where: str | None = None) -> None:
    if key not in PROPERTIES:
        hint = f" ({HINTS[key]})" if key in HINTS else ""
        raise KafkaConfigError(f"{where + ': ' if where else ''}unknown Kafka client property "
                               f"{key!r}{hint}; known: {', '.join(PROPERTIES)}")


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style properties file: ``key=value`` or ``key: value`` lines, ``#`` and ``!``
    comments, a trailing backslash continues a line. Unknown keys are refused by name."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise KafkaConfigError(f"cannot read the Kafka client config {path}: "
                               f"{exc.strerror or exc}") from None
    values: dict[str, str] = {}
    logical = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        line, logical = logical + line, ""
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise KafkaConfigError(f"{path}:{number}: not a key=value line")
        key, value = line[:cut].strip(), line[cut + 1:].strip()
        _known(key, f"{path}:{number}")
        values[key] = value
    return values


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return exc.verify_message or str(exc)
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


# ---------------------------------------------------------------------- OAUTHBEARER
class OidcTokenSource:
    """OAuth 2 client-credentials tokens for SASL/OAUTHBEARER (librdkafka's
    ``sasl.oauthbearer.method=oidc``), fetched from the token endpoint and reused until a
    minute before they expire."""

    def __init__(self, url: str, client_id: str, client_secret: str, scope: str | None,
                 context: ssl.SSLContext | None) -> None:
        self.url, self.client_id, self._secret, self.scope = url, client_id, client_secret, scope
        self.context = context if url.startswith("https:") else None
        self._lock = threading.Lock()
        self._token, self._until = "", 0.0

    def __repr__(self) -> str:
        return f"OidcTokenSource({self.url!r}, client {self.client_id!r})"

    def token(self) -> str:
        with self._lock:
            if time.monotonic() < self._until:
                return self._token
            form = {"grant_type": "client_credentials", "client_id": self.client_id,
                    "client_secret": self._secret}
            if self.scope:
                form["scope"] = self.scope
            request = urllib.request.Request(
                self.url, data=urllib.parse.urlencode(form).encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"})
            try:
                with urllib.request.urlopen(request, timeout=10, context=self.context) as answer:
                    body = json.loads(answer.read())
                token, lifetime = str(body["access_token"]), float(body.get("expires_in", 300))
            except (OSError, ValueError, KeyError) as exc:
                raise KafkaConfigError(
                    f"sasl.oauthbearer.token.endpoint.url: no token from {self.url} for client "
                    f"{self.client_id!r}: {_reason(exc)}") from None
            self._token, self._until = token, time.monotonic() + max(0.0, lifetime - 60)
            return token


def _async_provider(source: OidcTokenSource) -> Any:
    from aiokafka.abc import AbstractTokenProvider

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        async def token(self) -> str:
            import asyncio

            return await asyncio.to_thread(source.token)

    return Provider()


def _sync_provider(source: OidcTokenSource) -> Any:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return source.token()

    return Provider()


# ---------------------------------------------------------------------- diagnosis
# ApiVersions v0 (api key 18), correlation id 1, client id "banditflow-probe": the smallest
# request every Kafka broker answers before any authentication.
_CLIENT_ID = b"banditflow-probe"
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, len(_CLIENT_ID)) + _CLIENT_ID
_API_VERSIONS = struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS
TLS_RECORD_TYPES = (0x15, 0x16)  # a TLS alert or handshake record starts with these bytes


@dataclass(frozen=True)
class Diagnosis:
    text: str  # one line naming the cause
    # Whether waiting may cure it (nobody listens yet: a broker starting or restarting); a
    # refused certificate or a protocol mismatch stays until the configuration changes.
    transient: bool


def diagnose(connection: KafkaConnection, timeout_s: float = 5.0) -> Diagnosis | None:
    """Why the first bootstrap server cannot be talked to at the transport level; None
    when it answers a Kafka request (then any failure is above TLS: SASL, or the broker
    itself)."""
    host, port = connection.servers()[0]
    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        return Diagnosis(f"cannot reach {where}: {_reason(exc)}", transient=True)
    try:
        found = (_diagnose_tls(connection, sock, host, where) if connection.tls
                 else _diagnose_plain(connection, sock, where))
    finally:
        sock.close()
    return None if found is None else Diagnosis(found, transient=False)


def _diagnose_plain(connection: KafkaConnection, sock: socket.socket, where: str) -> str | None:
    try:
        sock.sendall(_API_VERSIONS)
        head = sock.recv(5)
    except OSError as exc:
        return (f"{where} dropped a plaintext Kafka request ({_reason(exc)}): a TLS listener? "
                f"security.protocol is {connection.security_protocol}")
    if head and head[0] in TLS_RECORD_TYPES and head[1:2] == b"\x03":
        return (f"{where} speaks TLS but security.protocol is {connection.security_protocol}: "
                f"use {'SASL_SSL' if connection.sasl else 'SSL'}")
    if not head:
        return (f"{where} closed the connection on a plaintext Kafka request (a TLS listener? "
                f"security.protocol is {connection.security_protocol})")
    return None


def _diagnose_tls(connection: KafkaConnection, sock: socket.socket, host: str,
                  where: str) -> str | None:
    try:
        context = connection.ssl_context()
    except KafkaConfigError as exc:
        return str(exc)
    assert context is not None
    try:
        tls = context.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        return (f"TLS to {where}: the broker's certificate is not trusted: {_reason(exc)} "
                "(check ssl.ca.location and ssl.endpoint.identification.algorithm)")
    except ssl.SSLError as exc:
        if "WRONG_VERSION_NUMBER" in str(exc) or "wrong version number" in str(exc):
            return (f"{where} does not speak TLS but security.protocol is "
                    f"{connection.security_protocol}: use "
                    f"{'SASL_PLAINTEXT' if connection.sasl else 'PLAINTEXT'}")
        return f"TLS handshake with {where} failed: {_reason(exc)}"
    except TimeoutError:
        return (f"{where} did not answer the TLS handshake: a plaintext listener? "
                f"security.protocol is {connection.security_protocol}: use "
                f"{'SASL_PLAINTEXT' if connection.sasl else 'PLAINTEXT'} there")
    except OSError as exc:
        return f"TLS handshake with {where} failed: {_reason(exc)}"
    try:
        # With TLS 1.3 the broker judges the client certificate after the handshake: its
        # verdict arrives with the first answer.
        tls.sendall(_API_VERSIONS)
        head = tls.recv(4)
    except ssl.SSLError as exc:
        reason = _reason(exc)
        if any(word in reason.upper() for word in ("CERTIFICATE", "UNKNOWN_CA", "BAD_CERT")):
            given = ("the one in ssl.certificate.location"
                     if connection.ssl_certificate_location else "none was set")
            return (f"TLS to {where}: the broker refused the client certificate "
                    f"({reason}; {given}: mutual TLS needs ssl.certificate.location and "
                    "ssl.key.location signed by a CA the broker trusts)")
        return f"TLS to {where} failed: {reason}"
    except OSError as exc:
        return f"TLS to {where} failed: {_reason(exc)}"
    finally:
        tls.close()
    if not head:
        return f"{where} closed the TLS connection without answering a Kafka request"
    return None

