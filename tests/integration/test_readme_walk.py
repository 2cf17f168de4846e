"""A newcomer's walk through the README (issue 29): the blocks it marks run in order, as
written, against a fresh broker and worker, and their outputs are the ones it shows.

Which blocks: a fenced block right after a line ``<!-- walk -->`` runs (```sh with bash,
```python with this interpreter), in the README's order, each after the previous one ended.
Unmarked blocks are not run, so a section added without markers cannot break the walk; to
walk it, mark its blocks. A block right after ``<!-- walk: output -->`` is what the walked
block before it prints: each of its lines must be a line of that output (spaces collapsed);
with ``tolerance=X`` its numbers may differ by X times their size (at least X), for outputs
that vary from run to run (a live learner's: its OPE estimates differ by up to about 0.05
between runs, their standard error; 0.2 keeps the check from flaking). Inside a walked sh
block, a whole line starting with ``# `` shows output: split at ``...``, each piece must
appear in what the block printed. Every walked block must exit with status 0 and print no
traceback and no warning.

What the test substitutes, as a newcomer with other ports would: the README's broker
``127.0.0.1:9092`` becomes the fresh broker's address and the worker's ``6066`` its free web
port (the README's "three terminals": the test starts that broker and worker itself, prefix
and app id ``banditflow`` as in the README); ``runs/`` becomes a temporary directory; the
blocks run from the repository root with this virtualenv's ``bin`` first on PATH
(``banditflow``, ``python``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from banditflow.streams.broker import EmbeddedBroker, free_port
from banditflow.streams.demo import wait_until_ready
from banditflow.streams.topics import Topics, ensure_topics

# It starts a broker of its own, which the README's commands reach as PLAINTEXT (they would
# inherit the suite's external broker configuration otherwise).
pytestmark = [pytest.mark.integration, pytest.mark.embedded_broker]

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(
    r"^<!-- walk(?::\s*(?P<options>[^>]*?))?\s*-->\n```(?P<lang>\w*)\n(?P<body>.*?)^```",
    re.S | re.M,
)
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass
class Block:
    lang: str
    body: str
    options: str
    line: int  # in README.md, for messages

    @property
    def is_output(self) -> bool:
        return self.options.split()[:1] == ["output"]

    @property
    def tolerance(self) -> float:
        found = re.search(r"tolerance=([\d.]+)", self.options)
        return float(found.group(1)) if found else 0.0


def walked_blocks(readme: str) -> list[Block]:
    return [Block(m["lang"], m["body"], m["options"] or "", readme.count("\n", 0, m.start()) + 1)
            for m in BLOCK.finditer(readme)]


def collapse(text: str) -> str:
    return " ".join(text.split())


def shown_fragments(body: str) -> list[str]:
    """The pieces of output a walked sh block shows in its ``# `` lines."""
    lines = [line[2:] for line in body.splitlines() if line.startswith("# ")]
    return [collapse(piece) for line in lines for piece in line.split("...") if piece.strip()]


def numbers(line: str) -> list[float]:
    return [float(n.replace(",", "")) for n in NUMBER.findall(line)]


def line_shown(expected: str, printed: list[str], tolerance: float) -> bool:
    skeleton = NUMBER.sub("#", collapse(expected))
    for line in printed:
        if NUMBER.sub("#", collapse(line)) != skeleton:
            continue
        if all(abs(a - e) <= tolerance * max(1.0, abs(e))
               for a, e in zip(numbers(line), numbers(expected), strict=True)):
            return True
    return False


def substitute(text: str, bootstrap: str, web_port: int, runs: Path) -> str:
    return (text.replace("127.0.0.1:9092", bootstrap)
            .replace("localhost:6066", f"127.0.0.1:{web_port}")
            .replace("127.0.0.1:6066", f"127.0.0.1:{web_port}")
            .replace("runs/", f"{runs}/"))


@pytest.fixture
def fresh_broker(tmp_path: Path):
    with EmbeddedBroker(port=free_port(), log_path=tmp_path / "broker.log") as running:
        yield running


def test_every_marked_block_runs_and_prints_what_the_readme_shows(
    fresh_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    blocks = walked_blocks((ROOT / "README.md").read_text())
    assert sum(not b.is_output for b in blocks) >= 8, "the README lost its walk markers"
    bootstrap, web_port, runs = fresh_broker.bootstrap, free_port(), tmp_path / "runs"
    runs.mkdir()
    ensure_topics(bootstrap, Topics("banditflow"), 4, "banditflow")
    worker_log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 (closed below)
    worker = subprocess.Popen(
        [sys.executable, "-m", "banditflow.streams.cli", "worker", "--bootstrap", bootstrap,
         "--web-port", str(web_port)], stdout=worker_log, stderr=subprocess.STDOUT)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTHONWARNINGS", None)
    try:
        wait_until_ready(worker, web_port, 60)
        printed = ""
        for block in blocks:
            where = f"README.md line {block.line}"
            if block.is_output:
                lines = printed.splitlines()
                missing = [line for line in block.body.splitlines() if line.strip()
                           and not line_shown(line, lines, block.tolerance)]
                assert missing == [], f"{where}: not printed:\n" + "\n".join(missing) + \
                    f"\n--- printed:\n{printed}"
                continue
            code = substitute(block.body, bootstrap, web_port, runs)
            if block.lang == "python":
                script = tmp_path / f"block{block.line}.py"
                script.write_text(code)
                command = [sys.executable, str(script)]
            else:
                assert block.lang == "sh", f"{where}: a walked block is sh or python"
                command = ["bash", "-e", "-o", "pipefail", "-c", code]
            result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                    timeout=180)
            printed = result.stdout + result.stderr
            assert result.returncode == 0, f"{where}: exit status {result.returncode}\n{printed}"
            assert "Traceback" not in printed and "Warning" not in printed, f"{where}:\n{printed}"
            if block.lang == "sh":
                missing = [f for f in shown_fragments(block.body) if f not in collapse(printed)]
                assert missing == [], f"{where}: not printed: {missing}\n--- printed:\n{printed}"
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        worker_log.close()
