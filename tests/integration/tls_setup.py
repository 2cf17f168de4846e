"""Real TLS for the tests: certificates made with the openssl command line (a CA, a server
certificate for 127.0.0.1 / localhost, a client certificate, and the bad ones: another CA,
an expired server certificate, one for another host), and stunnel terminating TLS in front
of an embedded broker that advertises stunnel's address."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from conftest import poll_until

from banditflow.streams.broker import free_port, port_open


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN={name}",
             "-days", "2", cwd=directory)


def _leaf(directory: Path, name: str, ca: str, san: str, days: int,
          usage: str, password: str | None = None) -> None:
    """A certificate signed by ``ca`` (``days`` < 0: already expired)."""
    key_args = (["-passout", f"pass:{password}"] if password else ["-nodes"])
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", *key_args,
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
             cwd=directory)
    (directory / f"{name}.ext").write_text(f"subjectAltName={san}\nextendedKeyUsage={usage}\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", str(days),
             "-extfile", f"{name}.ext", cwd=directory)


@dataclass(frozen=True)
class Pki:
    directory: Path
    client_key_password: str = "client-key-secret"

    def path(self, name: str) -> str:
        return str(self.directory / name)

    def mutual_tls_client(self, bootstrap: str) -> dict[str, str]:
        """The client properties of a mutual-TLS client of ``bootstrap`` (its certificate and
        encrypted key, the CA that signed the server's)."""
        return {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": self.path("ca.pem"),
                "ssl.certificate.location": self.path("client.pem"),
                "ssl.key.location": self.path("client.key"),
                "ssl.key.password": self.client_key_password}


def make_pki(directory: Path) -> Pki:
    """ca, server (127.0.0.1 and localhost), client (its key under a password), other-ca,
    expired (a server certificate of ca that expired yesterday), wrong-host (of ca, for
    wrong.example only)."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    _leaf(directory, "server", "ca", "IP:127.0.0.1,DNS:localhost", 2, "serverAuth")
    _leaf(directory, "expired", "ca", "IP:127.0.0.1,DNS:localhost", -1, "serverAuth")
    _leaf(directory, "wrong-host", "ca", "DNS:wrong.example", 2, "serverAuth")
    _leaf(directory, "client", "ca", "DNS:banditflow-client", 2, "clientAuth",
          password=pki.client_key_password)
    _leaf(directory, "stranger", "other-ca", "DNS:stranger", 2, "clientAuth")
    return pki


class TlsTerminator:
    """stunnel on ``port`` (free by default): TLS with ``cert``, forwarded in plain to
    ``backend``; with ``client_ca``, a client certificate signed by it is required."""

    def __init__(self, directory: Path, backend_port: int, cert: str, key: str,
                 client_ca: str | None = None, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.backend_port = backend_port
        self.config = directory / f"stunnel-{self.port}.conf"
        lines = ["foreground = yes", "pid =", f"output = {directory / f'stunnel-{self.port}.log'}",
                 "debug = 4", "[kafka]", f"accept = 127.0.0.1:{self.port}",
                 f"connect = 127.0.0.1:{backend_port}", f"cert = {cert}", f"key = {key}"]
        if client_ca is not None:
            lines += [f"CAfile = {client_ca}", "verifyChain = yes", "requireCert = yes"]
        self.config.write_text("\n".join(lines) + "\n")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TlsTerminator:
        binary = shutil.which("stunnel4") or shutil.which("stunnel")
        assert binary, "stunnel is not installed (make system-deps installs it)"
        self.process = subprocess.Popen([binary, str(self.config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        poll_until(lambda: port_open("127.0.0.1", self.port), 10.0)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)


def write_properties(path: Path, values: dict[str, str]) -> Path:
    path.write_text("# made by the test\n" + "".join(f"{k}={v}\n" for k, v in values.items()))
    return path
