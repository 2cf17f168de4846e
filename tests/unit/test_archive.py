"""The archive format: its published schema matches the models, archives round-trip, and the
joined view counts a decision once, keeps each action's first reward, and finds the number of
actions in the learner's config when a decision carries no distribution."""

from __future__ import annotations

import json

import jsonschema
import pytest

from banditflow.offline.archive import ArchiveError, joined_rounds, read_archive, write_archive
from banditflow.schemas.archive import SCHEMA_PATH, check_archive_schema, render_archive_schema


def test_published_archive_schema_matches_the_models() -> None:
    assert check_archive_schema() == [], "run `banditflow schemas --write`"


def test_archive_schema_drift_is_detected(tmp_path, monkeypatch) -> None:
    import banditflow.schemas.archive as archive

    path = tmp_path / "archive.schema.json"
    monkeypatch.setattr(archive, "SCHEMA_PATH", path)
    assert "missing" in archive.check_archive_schema()[0]
    document = json.loads(render_archive_schema())
    document["$defs"]["ArchiveRecord"]["properties"].pop("raw")
    path.write_text(json.dumps(document))
    assert "differs" in archive.check_archive_schema()[0]


def record(topic: str, value: dict | None, offset: int = 0) -> dict:
    return {"topic": topic, "partition": 0, "offset": offset, "timestamp": 1.0, "key": "l",
            "value": value}


def decision(event_id: str, output: dict, family: str = "graph_cb",
             algorithm: str = "squarecb_g", learner_id: str = "l") -> dict:
    return {"learner_id": learner_id, "event_id": event_id, "family": family,
            "algorithm": algorithm, "learner_version": 1, "decided_at": 1.0, "output": output}


def test_archive_round_trip_validates_every_line(tmp_path) -> None:
    records = [record("contexts", {"learner_id": "l", "event_id": "e", "features": [1.0]}),
               record("learners", None, 1)]
    path = tmp_path / "a.jsonl"
    assert write_archive(path, records, source="kafka", prefix="p") == 2
    schema = json.loads(SCHEMA_PATH.read_text())
    for line in path.read_text().splitlines():
        jsonschema.validate(json.loads(line), schema)
    header, read = read_archive(path)
    assert (header.source, header.prefix, read) == ("kafka", "p", records)
    path.write_text(path.read_text() + '{"topic": "elsewhere", "partition": 0}\n')
    with pytest.raises(ArchiveError, match="line 4"):
        read_archive(path)
    (tmp_path / "b.jsonl").write_text('{"topic": "contexts"}\n')
    with pytest.raises(ArchiveError, match="header"):
        read_archive(tmp_path / "b.jsonl")


def test_joined_view_dedupes_and_reads_each_family_from_its_front_door() -> None:
    # graph_cb plays "action" with p and reveals losses; prob_graph plays "arm" with no p,
    # reveals rewards and gives its arm count in the config; deferral plays no action.
    rounds = joined_rounds([
        record("learners", {"learner_id": "m", "family": "prob_graph", "algorithm": "ucb_n",
                            "params": {"arms": 3}}),
        record("feedback", {"learner_id": "l", "event_id": "e1", "losses": {"0": 0.2}}),
        record("decisions", decision("e1", {"action": 0, "p": [0.5, 0.5]})),
        record("decisions", {**decision("e1", {"action": 0, "p": [0.5, 0.5]}),
                             "redelivered": True}, 1),
        record("feedback", {"learner_id": "l", "event_id": "e1", "losses": {"0": 0.9, "1": 0.1}}),
        record("decisions", decision("e2", {"arm": 2, "branch": "ucb"}, "prob_graph", "ucb_n",
                                     "m"), 2),
        record("feedback", {"learner_id": "m", "event_id": "e2", "rewards": {"1": 1.0}}),
        record("decisions", decision("e3", {"defer": True}, "deferral", "ucb"), 3),
        record("decisions", decision("e4", {"action": 1}, "no_such_family"), 4),
    ])
    assert [r.event_id for r in rounds] == ["e1", "e2"]
    first, second = rounds
    assert (first.reward, first.revealed, first.propensity) == (-0.2, {0: -0.2, 1: -0.1}, 0.5)
    assert (second.action, second.actions, second.propensity, second.p) == (2, 3, None, None)
    assert second.reward is None and second.revealed == {1: 1.0}
