"""The one Kafka client configuration: properties file + BANDITFLOW_KAFKA_* variables,
precedence, refusals naming the key, no secret in repr or errors, each client library's
settings, kcat's -F pipe, and the OAUTHBEARER token source against a real HTTP server."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from banditflow.streams.connection import KafkaConfigError, KafkaConnection, read_properties
from banditflow.streams.kcat import pass_config, split_kafka_config

SECRET = "s3cr3t-never-shown"


def props(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def pem(tmp_path: Path) -> str:
    """A real CA certificate file (made by openssl)."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                    "-subj", "/CN=ca", "-days", "1"], cwd=tmp_path, check=True,
                   capture_output=True)
    return str(tmp_path / "ca.pem")


def test_a_console_properties_file_resolves(tmp_path: Path) -> None:
    ca = pem(tmp_path)
    path = props(tmp_path, f"""# from the console
bootstrap.servers=pkc-1.example.cloud:9092,pkc-2.example.cloud:9092
security.protocol=sasl_ssl
sasl.mechanism = SCRAM-SHA-512
sasl.username: app
sasl.password={SECRET}
ssl.ca.location={ca}
! another comment
""")
    c = KafkaConnection.resolve(config_file=path, environ={})
    assert c.servers() == [("pkc-1.example.cloud", 9092), ("pkc-2.example.cloud", 9092)]
    assert (c.security_protocol, c.sasl_mechanism, c.sasl_username) == (
        "SASL_SSL", "SCRAM-SHA-512", "app")
    kwargs = c.aiokafka_kwargs()
    assert kwargs["sasl_plain_password"] == SECRET
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["ssl_context"].check_hostname
    assert c.kafka_python_kwargs()["ssl_check_hostname"] is True
    assert SECRET not in repr(c) and SECRET not in c.describe()


def test_environment_overrides_the_file_and_explicit_bootstrap_wins(tmp_path: Path) -> None:
    path = props(tmp_path, "bootstrap.servers=file:9092\nsecurity.protocol=SASL_PLAINTEXT\n"
                           "sasl.mechanism=PLAIN\nsasl.username=file-user\nsasl.password=x\n")
    env = {"BANDITFLOW_KAFKA_SASL_USERNAME": "env-user",
           "BANDITFLOW_KAFKA_BOOTSTRAP_SERVERS": "env:9092", "UNRELATED": "1",
           "BANDITFLOW_KAFKA_CONFIG": str(path)}
    c = KafkaConnection.resolve(config_file=path, environ=env)
    assert (c.bootstrap, c.sasl_username) == ("env:9092", "env-user")
    assert KafkaConnection.resolve("flag:9092", path, env).bootstrap == "flag:9092"
    assert KafkaConnection.resolve(environ={}).bootstrap == "127.0.0.1:9092"


@pytest.mark.parametrize(("text", "env", "named"), [
    ("bootstrap.servers=a:1\nacks=all\n", {}, "'acks'"),
    ("sasl.jaas.config=org.apache...;\n", {}, "sasl.username and sasl.password"),
    ("", {"BANDITFLOW_KAFKA_SASL_PASSWD": "x"}, "BANDITFLOW_KAFKA_SASL_PASSWD"),
    ("security.protocol=TLS\n", {}, "security.protocol 'TLS'"),
    ("security.protocol=SASL_SSL\nsasl.username=u\nsasl.password=p\n", {}, "sasl.mechanism"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", {}, "'GSSAPI'"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=u\n", {}, "sasl.password"),
    ("ssl.ca.location=/nonexistent/ca.pem\nsecurity.protocol=SSL\n", {}, "/nonexistent/ca.pem"),
    ("ssl.ca.location=/etc/hostname\n", {}, "security.protocol is PLAINTEXT"),
    (f"sasl.password={SECRET}\n", {}, "sasl.password is set"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n", {}, "sasl.oauthbearer.method"),
    ("bootstrap.servers=nohost\n", {}, "'nohost'"),
    ("ssl.endpoint.identification.algorithm=maybe\nsecurity.protocol=SSL\n", {}, "https or none"),
    ("just words\n", {}, ":1: not a key=value line"),
])
def test_bad_settings_are_refused_naming_the_key(tmp_path: Path, text: str,
                                                 env: dict[str, str], named: str) -> None:
    with pytest.raises(KafkaConfigError) as refused:
        KafkaConnection.resolve(config_file=props(tmp_path, text), environ=env)
    assert named in str(refused.value)
    assert SECRET not in str(refused.value)


def test_a_wrong_key_password_is_named_without_the_password(tmp_path: Path) -> None:
    ca = pem(tmp_path)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-passout", "pass:right", "-keyout", "c.key",
                    "-out", "c.pem", "-subj", "/CN=c", "-days", "1"], cwd=tmp_path, check=True,
                   capture_output=True)
    c = KafkaConnection(
        "h:1", "SSL", ssl_ca_location=ca, ssl_certificate_location=str(tmp_path / "c.pem"),
        ssl_key_location=str(tmp_path / "c.key"), ssl_key_password=SECRET)
    with pytest.raises(KafkaConfigError) as refused:
        c.aiokafka_kwargs()
    assert "ssl.key.password" in str(refused.value) and SECRET not in str(refused.value)
    good = KafkaConnection(
        "h:1", "SSL", ssl_ca_location=ca, ssl_certificate_location=str(tmp_path / "c.pem"),
        ssl_key_location=str(tmp_path / "c.key"), ssl_key_password="right",
        ssl_endpoint_identification_algorithm="none")
    assert good.kafka_python_kwargs()["ssl_context"].check_hostname is False
    assert good.describe() == "h:1 (SSL, client certificate)"


def test_properties_continue_lines_and_keep_colons_in_values(tmp_path: Path) -> None:
    path = props(tmp_path, "bootstrap.servers=a:9092,\\\n    b:9092\nsasl.username=x:y\n")
    assert read_properties(path) == {"bootstrap.servers": "a:9092,b:9092",
                                     "sasl.username": "x:y"}


def test_kcat_gets_the_settings_through_a_pipe_not_its_command_line() -> None:
    config, rest = split_kafka_config(["-C", "--kafka-config", "f.properties", "-t", "x"])
    assert (config, rest) == ("f.properties", ["-C", "-t", "x"])
    c = KafkaConnection("k:9093", "SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u",
                        sasl_password=SECRET)
    command = pass_config(["/usr/bin/kcat", "-C"], c)
    assert SECRET not in " ".join(command)
    assert command[1] == "-F"
    fd = int(command[2].removeprefix("/dev/fd/"))
    # What kcat will read (a child process, as after exec: the descriptor is inherited).
    text = subprocess.run([sys.executable, "-c", f"import os; print(os.read({fd}, 4096).decode())"],
                          pass_fds=(fd,), capture_output=True, text=True, check=True).stdout
    os.close(fd)
    assert f"sasl.password={SECRET}" in text and "sasl.mechanism=PLAIN" in text
    assert "bootstrap.servers=k:9093" in text


def test_oauthbearer_fetches_a_client_credentials_token_and_reuses_it() -> None:
    asked: list[dict[str, list[str]]] = []

    class TokenEndpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            from urllib.parse import parse_qs

            length = int(self.headers["Content-Length"])
            asked.append(parse_qs(self.rfile.read(length).decode()))
            body = json.dumps({"access_token": f"token-{len(asked)}", "expires_in": 3600})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = KafkaConnection.resolve("k:9093", environ={
            "BANDITFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "BANDITFLOW_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "BANDITFLOW_KAFKA_SASL_OAUTHBEARER_METHOD": "oidc",
            "BANDITFLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL":
                f"http://127.0.0.1:{server.server_port}/token",
            "BANDITFLOW_KAFKA_SASL_OAUTHBEARER_CLIENT_ID": "worker",
            "BANDITFLOW_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET": SECRET,
            "BANDITFLOW_KAFKA_SASL_OAUTHBEARER_SCOPE": "kafka"})
        provider = c.kafka_python_kwargs()["sasl_oauth_token_provider"]
        assert provider.token() == "token-1"
        assert provider.token() == "token-1"  # reused, not fetched again
        assert asked == [{"grant_type": ["client_credentials"], "client_id": ["worker"],
                          "client_secret": [SECRET], "scope": ["kafka"]}]
        assert SECRET not in repr(c) and SECRET not in c.describe()
    finally:
        server.shutdown()


def test_the_readme_example_is_a_valid_client_configuration(tmp_path: Path) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    example = readme.split("```properties\n", 1)[1].split("```", 1)[0]
    for name in ("ca.pem", "client.pem", "client.key"):  # (the files must be readable)
        (tmp_path / name).write_text("")
        example = example.replace(f"/etc/banditflow/{name}", str(tmp_path / name))
    c = KafkaConnection.resolve(config_file=props(tmp_path, example), environ={})
    assert (c.security_protocol, c.sasl_mechanism, c.ssl_endpoint_identification_algorithm) == (
        "SASL_SSL", "SCRAM-SHA-512", "https")
    assert c.ssl_key_location == str(tmp_path / "client.key")
