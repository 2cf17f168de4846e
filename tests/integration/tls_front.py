"""The external suite over real TLS (``make test-external-tls``): an embedded broker behind
stunnel that requires a client certificate, with certificates made for the run (tls_setup.py,
as the TLS tests make them), and a client properties file naming them; then the command
given (``make test-external``) runs with ``BANDITFLOW_TEST_BOOTSTRAP`` and
``BANDITFLOW_KAFKA_CONFIG`` set to them, so that every client of the suite has to take its
configuration from there: one that dials the bare bootstrap address in PLAINTEXT fails.
Broker and stunnel stop when the command ends; its exit status is this script's.

    python tests/integration/tls_front.py make test-external EXTERNAL_TESTS=...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tls_setup import TlsTerminator, make_pki, write_properties

from banditflow.streams.broker import EmbeddedBroker, free_port
from banditflow.streams.connection import KafkaConnection


def run_behind_tls(command: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="banditflow-tls-") as name:
        directory = Path(name)
        pki = make_pki(directory / "pki")
        port = free_port()
        # stunnel first: the broker checks that it answers through the address it advertises.
        with TlsTerminator(directory, port, pki.path("server.pem"), pki.path("server.key"),
                           client_ca=pki.path("ca.pem")) as front:
            config = write_properties(directory / "client.properties",
                                      pki.mutual_tls_client(front.bootstrap))
            connection = KafkaConnection.resolve(config_file=config)
            with EmbeddedBroker(port=port, log_path=directory / "broker.log",
                                advertised=connection):
                print(f"tls_front: embedded broker on 127.0.0.1:{port} behind stunnel at "
                      f"{connection.describe()}; client config {config}", flush=True)
                env = {**os.environ, "BANDITFLOW_TEST_BOOTSTRAP": front.bootstrap,
                       "BANDITFLOW_KAFKA_CONFIG": str(config)}
                # Importing tls_setup loaded the suite's conftest, which put its run tag in
                # this process's environment: the command's pytest sessions pick their own.
                env.pop("BANDITFLOW_TEST_RUN_TAG", None)
                return subprocess.run(command, env=env).returncode


def main() -> int:
    command = sys.argv[1:]
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    # A SIGTERM unwinds like Ctrl-C: subprocess.run kills the command, the context managers
    # stop the broker and stunnel (stunnel would outlive this process otherwise).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    return run_behind_tls(command)


if __name__ == "__main__":
    sys.exit(main())
