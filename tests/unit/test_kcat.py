"""`banditflow kcat` in an environment that lacks what it needs: one line saying what to
install, exit status 1, no traceback (issue 29: it used to end in a KcatError traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

# Runs the CLI with confluent_kafka made unimportable (a None entry in sys.modules makes
# `import confluent_kafka` raise ImportError), as in an environment that lacks it.
WITHOUT_CONFLUENT = (
    "import sys; sys.modules['confluent_kafka'] = None; "
    "from banditflow.streams.cli import main; sys.exit(main(['kcat', '-L']))"
)


def test_missing_confluent_kafka_says_what_to_run() -> None:
    result = subprocess.run([sys.executable, "-c", WITHOUT_CONFLUENT], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("banditflow kcat: confluent-kafka")
    assert f"{sys.executable} -m pip install 'confluent-kafka" in result.stderr


def test_missing_kcat_binary_says_what_to_install(tmp_path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))  # a PATH without kcat
    result = subprocess.run([sys.executable, "-m", "banditflow.streams.cli", "kcat", "-L"],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "banditflow kcat: kcat is not installed: install it (Debian, Ubuntu: apt-get install kcat)")


def test_confluent_kafka_is_a_runtime_dependency() -> None:
    """`make demo` installs only the runtime dependencies, and the README's "Using it
    yourself" runs `banditflow kcat` right after it."""
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    runtime = [d.split(">")[0] for d in project["project"]["dependencies"]]
    assert "confluent-kafka" in runtime
