"""`banditflow ope` scores one version of a learner (issue 29: a learner reconfigured under the
same id had the old version's rounds mixed into the new one's estimate, silently)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from banditflow.offline.archive import write_archive
from banditflow.streams.cli import main

LID = "router"


def rounds(version: int, count: int, loss: float) -> list[dict[str, Any]]:
    records = []
    for i in range(count):
        event = f"v{version}-{i}"
        records += [
            {"topic": "contexts", "partition": 0, "offset": i, "key": LID,
             "value": {"learner_id": LID, "event_id": event, "features": [1.0, 0.0]}},
            {"topic": "decisions", "partition": 0, "offset": i, "key": LID,
             "value": {"learner_id": LID, "event_id": event, "family": "graph_cb",
                       "learner_version": version, "output": {"action": 0, "p": [1.0, 0.0]}}},
            {"topic": "feedback", "partition": 0, "offset": i, "key": LID,
             "value": {"learner_id": LID, "event_id": event, "losses": {"0": loss}}},
        ]
    return records


def config(algorithm: str) -> dict[str, Any]:
    return {"topic": "learners", "partition": 0, "offset": 0, "key": LID,
            "value": {"learner_id": LID, "family": "graph_cb", "algorithm": algorithm,
                      "params": {"actions": 2, "feature_dim": 2}}}


@pytest.fixture
def log(tmp_path: Path) -> Path:
    records = [config("epsilon_greedy"), *rounds(1, 3, 1.0), config("squarecb_g"),
               *rounds(2, 20, 0.25)]
    write_archive(tmp_path / "a.jsonl", records, source="kafka")
    return tmp_path / "a.jsonl"


@pytest.mark.parametrize(("version", "rounds_scored", "value", "left_out"), [
    (None, 20, -0.25, "left out version 1 (3 decisions) (--learner-version chooses)"),
    ("2", 20, -0.25, "left out version 1 (3 decisions)"),
    ("1", 3, -1.0, "left out version 2 (20 decisions)"),
])
def test_ope_scores_the_chosen_version_and_names_the_other(
    log: Path, capsys: pytest.CaptureFixture[str], version: str | None, rounds_scored: int,
    value: float, left_out: str,
) -> None:
    chosen = [] if version is None else ["--learner-version", version]
    assert main(["ope", str(log), "--learner-id", LID, "--policy", "logged", "--json",
                 *chosen]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["rounds"] == rounds_scored
    assert result["policies"][0]["ips"]["value"] == pytest.approx(value)
    assert left_out in captured.err


def test_an_unknown_version_is_refused_with_the_versions_there(log: Path) -> None:
    with pytest.raises(SystemExit, match=r"no version 3 in the log \(versions with decisions: "
                                         r"1, 2\)"):
        main(["ope", str(log), "--learner-id", LID, "--policy", "logged", "--learner-version",
              "3"])
