"""``banditflow demo`` end to end on the embedded broker: all four families, each learner
against its baseline on the same traffic, stopping by itself; the convergence figures are
read back from the report's summary.json (the worker's /metrics and the application's
recent figures), and the report's plots exist."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from banditflow.streams.broker import free_port

# The demo starts a broker of its own (given the suite's external broker configuration,
# BANDITFLOW_KAFKA_CONFIG, it would run on that broker instead, under fixed names).
pytestmark = [pytest.mark.integration, pytest.mark.embedded_broker]

WALL_LIMIT_S = 90.0


def test_demo_shows_convergence_for_every_family(tmp_path: Path) -> None:
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "banditflow.streams.cli", "demo", "--out", str(tmp_path),
         "--port", str(free_port()), "--web-port", str(free_port())],
        capture_output=True, text=True, timeout=WALL_LIMIT_S + 30,
    )
    elapsed = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert elapsed < WALL_LIMIT_S, f"the demo took {elapsed:.0f}s"
    report = Path(run.stdout.rsplit("report: ", 1)[1].strip())
    summary = json.loads((report.parent / "summary.json").read_text())
    rows = {(r["family"], r["role"]): r for r in summary["rows"]}
    assert {family for family, _ in rows} == {"conformal", "graph_cb", "deferral", "prob_graph"}

    # Every context decided and every decision's truth applied, for learners and baselines.
    for (family, _), row in rows.items():
        expected = 8000 if family == "conformal" else 2000
        assert row["decisions"] == expected, row
        assert row["regret"] is not None, row

    sps = rows["conformal", "learner"]
    assert abs(sps["recent_set_size"] - sps["oracle_set_size"]) <= 0.2 * sps["oracle_set_size"]
    assert sps["coverage"] >= sps["target_coverage"]
    assert sps["recent_coverage"] >= sps["target_coverage"] - 0.02
    for family in ("graph_cb", "prob_graph"):
        assert rows[family, "learner"]["regret"] < rows[family, "baseline"]["regret"], family
    ucb = rows["deferral", "learner"]
    assert 0.5 * ucb["budget"] <= ucb["budget_spent"] <= ucb["budget"]
    assert all(check["passed"] for check in summary["checks"]), summary["checks"]

    for image in ("regret.png", "conformal.png", "budget.png"):
        assert (report.parent / image).stat().st_size > 10_000, image
    assert "regret.png" in report.read_text()
