"""The worker's HTTP side (``/metrics``, ``/ready``, ``/healthz``) over TLS and with basic
auth, configured as Prometheus' exporters are: a ``web.config`` YAML file
(``--web-config FILE``), the keys of the Prometheus exporter toolkit::

    tls_server_config:
      cert_file: server.pem
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional: mutual TLS
      client_ca_file: ca.pem
      min_version: TLS12                             # optional (default TLS12)
    basic_auth_users:
      prometheus: $2b$12$...                         # bcrypt hashes, as htpasswd -B makes

Unknown keys are refused by name; a password is checked against its bcrypt hash once and
then remembered (by its SHA-256) for as long as the worker runs, so a scrape every few
seconds does not cost a bcrypt round each.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

CLIENT_AUTH_TYPES = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version")


class WebConfigError(ValueError):
    pass


@dataclass(frozen=True)
class WebConfig:
    cert_file: Path | None = None
    key_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    # user -> bcrypt hash (never a password)
    users: dict[str, bytes] = field(default_factory=dict, repr=False)
    _verified: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def load(cls, path: Path) -> WebConfig:
        import yaml

        try:
            data = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise WebConfigError(f"cannot read the web config {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise WebConfigError(f"{path}: not YAML: {exc}") from None
        if not isinstance(data, dict):
            raise WebConfigError(f"{path}: expected a mapping at the top")
        for key in data:
            if key not in ("tls_server_config", "basic_auth_users"):
                raise WebConfigError(f"{path}: unknown key {key!r} (known: tls_server_config, "
                                     "basic_auth_users)")
        tls = data.get("tls_server_config") or {}
        users = data.get("basic_auth_users") or {}
        if not isinstance(tls, dict) or not isinstance(users, dict):
            raise WebConfigError(f"{path}: tls_server_config and basic_auth_users are mappings")
        for key in tls:
            if key not in TLS_KEYS:
                raise WebConfigError(f"{path}: unknown key tls_server_config.{key} (known: "
                                     f"{', '.join(TLS_KEYS)})")
        base = path.parent

        def file(key: str) -> Path | None:
            value = tls.get(key)
            if value is None:
                return None
            found = base / str(value)  # relative to the config file, as Prometheus does
            if not found.is_file():
                raise WebConfigError(f"{path}: tls_server_config.{key}: no file {found}")
            return found

        config = cls(
            cert_file=file("cert_file"), key_file=file("key_file"),
            client_auth_type=str(tls.get("client_auth_type", "NoClientCert")),
            client_ca_file=file("client_ca_file"),
            min_version=str(tls.get("min_version", "TLS12")),
            users={str(user): str(hashed).encode() for user, hashed in users.items()},
        )
        if tls and (config.cert_file is None or config.key_file is None):
            raise WebConfigError(f"{path}: tls_server_config needs cert_file and key_file")
        if config.client_auth_type not in CLIENT_AUTH_TYPES:
            raise WebConfigError(f"{path}: tls_server_config.client_auth_type must be one of "
                                 f"{', '.join(CLIENT_AUTH_TYPES)}")
        if config.client_auth_type != "NoClientCert" and config.client_ca_file is None:
            raise WebConfigError(f"{path}: client_auth_type {config.client_auth_type} needs "
                                 "client_ca_file")
        if config.min_version not in TLS_VERSIONS:
            raise WebConfigError(f"{path}: tls_server_config.min_version must be one of "
                                 f"{', '.join(TLS_VERSIONS)}")
        for user, hashed in config.users.items():
            if not hashed.startswith((b"$2a$", b"$2b$", b"$2y$")):
                raise WebConfigError(f"{path}: basic_auth_users.{user} is not a bcrypt hash")
        config.ssl_context()  # a certificate that does not load fails now, not at a scrape
        return config

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = TLS_VERSIONS[self.min_version]
        try:
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
            if self.client_ca_file is not None:
                context.load_verify_locations(str(self.client_ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"tls_server_config: cannot load {self.cert_file} / "
                                 f"{self.key_file}: {exc}") from None
        context.verify_mode = CLIENT_AUTH_TYPES[self.client_auth_type]
        return context

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header passes (always, without users)."""
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        digest = hashlib.sha256(password.encode()).digest()
        with self._lock:
            known = self._verified.get(user)
        if known is not None and hmac.compare_digest(known, digest):
            return True
        import bcrypt

        if not bcrypt.checkpw(password.encode(), hashed):
            return False
        with self._lock:
            self._verified[user] = digest
        return True

