"""`banditflow evaluate`'s command line as a user reads it (issue 29): the target coverage is
called target coverage everywhere (``--alpha`` still works and says it is deprecated),
progress reports the whole run, and the comparison table prints counts as counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from banditflow.streams.cli import main
from tests.unit.test_evaluate import write_log


def evaluate(log: Path, out: Path, *options: str) -> None:
    assert main(["evaluate", "--family", "conformal", "--log", str(log), "--out", str(out),
                 *options]) == 0


@pytest.mark.parametrize("option", ["--target-coverage", "--alpha"])
def test_target_coverage_names_the_figure(tmp_path: Path, option: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path / "log.jsonl", 1200)
    evaluate(log, tmp_path / "out", "--learner", "sps", option, "0.8", "--quiet")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["target_coverage"] == 0.8
    assert summary["params"] == {"target_coverage": 0.8, "horizon": 1200}
    assert "alpha" not in summary
    deprecated = "--alpha is deprecated, use --target-coverage" in capsys.readouterr().err
    assert deprecated == (option == "--alpha")


def test_progress_ends_with_the_rounds_replayed(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Without --horizon the replay's length is unknown up front: the last line still says
    how many rounds ran (it used to stop at ``1 rounds``)."""
    log = write_log(tmp_path / "log.jsonl", 2500)
    evaluate(log, tmp_path / "out", "--learner", "sps")
    lines = [line for line in capsys.readouterr().err.splitlines() if "sps seed 0:" in line]
    assert lines[-1].startswith("  sps seed 0: 2,500 rounds in ")
    assert all(" 1 rounds" not in line for line in lines)


def test_comparison_table_prints_counts_without_exponents(tmp_path: Path) -> None:
    log = write_log(tmp_path / "log.jsonl", 10_000)
    out = tmp_path / "cmp"
    evaluate(log, out, "--learner", "greedy,aci", "--seed", "0,1", "--target-coverage", "0.9",
             "--quiet")
    header, _, *rows = (out / "comparison.md").read_text().splitlines()
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert "target_coverage" in columns and "alpha" not in columns
    for row in rows:
        cells = dict(zip(columns, (c.strip() for c in row.strip("|").split("|")), strict=True))
        assert cells["rounds"] == "10,000"
        assert cells["target_coverage"] == "0.9"
        assert "e+" not in row
