"""``banditflow gateway`` without the gateway extra says what to install, without a
traceback."""

from __future__ import annotations

import subprocess
import sys


def test_gateway_without_its_extra_says_what_to_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['fastapi'] = None; "
         "from banditflow.streams.cli import main; sys.exit(main(['gateway']))"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert "pip install 'banditflow[gateway]'" in done.stderr
    assert "Traceback" not in done.stderr
