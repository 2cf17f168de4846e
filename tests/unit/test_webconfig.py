"""--web-config: Prometheus' web.config file, refused by key name when wrong; basic auth
checks bcrypt hashes (the HTTPS side runs in tests/integration/test_kafka_tls.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import bcrypt
import pytest

from banditflow.streams.webconfig import WebConfig, WebConfigError


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_checks_the_bcrypt_hash(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
    config = WebConfig.load(path)
    assert not config.tls
    assert config.authorized(header("prom", "right"))
    assert config.authorized(header("prom", "right"))  # (remembered)
    assert not config.authorized(header("prom", "wrong"))
    assert not config.authorized(header("other", "right"))
    assert not config.authorized(None)
    assert not config.authorized("Basic !!!not-base64")
    assert "right" not in repr(config) and hashed not in repr(config)
    assert WebConfig().authorized(None)  # no users: open


@pytest.mark.parametrize(("text", "named"), [
    ("tls_server_config:\n  cert: x\n", "tls_server_config.cert"),
    ("basic_auth: {}\n", "unknown key 'basic_auth'"),
    ("basic_auth_users:\n  prom: plaintext\n", "basic_auth_users.prom is not a bcrypt hash"),
    ("tls_server_config:\n  cert_file: missing.pem\n  key_file: missing.key\n",
     "tls_server_config.cert_file: no file"),
    ("- a list\n", "expected a mapping"),
])
def test_a_wrong_web_config_is_refused_by_name(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError) as refused:
        WebConfig.load(path)
    assert named in str(refused.value)
