"""Importing Vowpal Wabbit / Personalizer DSJSON and Open Bandit Pipeline logs: lines in VW's
documented shapes parse (skipped and non-activated events left out as VW does), the joined
view reads them like an archive, and ``banditflow ope`` recovers known target values from the
synthetic DSJSON log of ``make-log dsjson-synthetic`` (rewards = -_label_cost) and prints
exactly the documented JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from banditflow.learners.registry import make_learner
from banditflow.offline.archive import joined_rounds, read_archive
from banditflow.offline.formats import import_log
from banditflow.offline.formats.dsjson import dsjson_records, flatten
from banditflow.offline.formats.obp import OBPFormatError, obp_records
from banditflow.offline.logs.dsjson import build, synthetic_events, true_values
from banditflow.streams.cli import main

# A CB event as Personalizer's joiner writes it (VW's DSJSON with its label fields): the
# chosen action first in "a", "p" in the order of "a", the outcome in "o".
CB_EVENT = {
    "_label_cost": -1.0, "_label_probability": 0.8, "_label_Action": 2, "_labelIndex": 1,
    "o": [{"v": 1.0, "EventId": "6f6a4f43", "ActionTaken": False}],
    "Timestamp": "2021-07-29T10:00:00.000Z", "Version": "1", "EventId": "6f6a4f43",
    "a": [2, 1, 3], "p": [0.8, 0.1, 0.1],
    "c": {"GUser": {"id": "a", "major": "eng", "hobby": "hiking"}, "TimeOfDay": "morning",
          "_multi": [{"TAction": {"a1": "f1"}}, {"TAction": {"a2": "f2"}},
                     {"TAction": {"a3": "f3"}, "price": 2.5}]},
    "VWState": {"m": "N/A"},
}
# The same event never activated: the joiner marks it not learnable.
NOT_ACTIVATED = {**CB_EVENT, "EventId": "na", "_skipLearn": True,
                 "o": [{"EventId": "na", "ActionTaken": True}]}
# Activated (an ActionTaken outcome) but without a reward: no label cost.
UNLABELED = {key: value for key, value in CB_EVENT.items()
             if not key.startswith("_label")} | {"EventId": "ul", "_labelIndex": 0,
                                                  "a": [1, 2, 3]}
# A conditional contextual bandit event (slots), and a line that is not a decision.
CCB_EVENT = {"Version": "1", "EventId": "ccb", "c": {"_multi": [{"a": 1}], "_slots": [{}]},
             "_outcomes": [{"_id": "ccb", "_label_cost": 0, "_a": [0], "_p": [1.0]}]}
DANGLING = {"RewardValue": 1.0, "EventId": "dangling", "EnqueuedTimeUtc": "2021-07-29"}


def lines(*events: object) -> list[str]:
    return [json.dumps(e) if not isinstance(e, str) else e for e in events]


def test_dsjson_events_in_vw_shapes() -> None:
    records, report = dsjson_records(
        lines(CB_EVENT, NOT_ACTIVATED, UNLABELED, CCB_EVENT, DANGLING, "{not json", CB_EVENT),
        learner_id="p13n", dims=16)
    assert report.events == 2
    assert dict(report.skipped) == {
        "not activated (_skipLearn)": 1, "CCB / slates event": 1,
        "no c._multi (not a CB event)": 1, "not JSON": 1, "repeated EventId": 1}
    config = records[0]["value"]
    assert config["params"] == {"feature_dim": 16, "action_features": 16, "max_actions": 3,
                                "graph_kind": "bandit"}
    rounds = {r.event_id: r for r in joined_rounds(records)}
    event = rounds["6f6a4f43"]
    assert (event.action, event.propensity, event.reward) == (1, 0.8, 1.0)
    assert event.p == [0.1, 0.8, 0.1] and event.actions == 3
    # _multi is the event's candidates (ids: 1-based positions), shared features apart.
    assert len(event.features) == 16 and sum(event.features) == 4.0  # (4 shared features)
    assert [c["id"] for c in event.candidates] == ["1", "2", "3"]
    assert [sum(c["features"]) for c in event.candidates] == [1.0, 1.0, 3.5]
    assert event.candidates[0]["features"] != event.candidates[1]["features"]
    assert event.ts == 1627552800.0 and event.pdrop == 0.0
    unlabeled = rounds["ul"]
    assert (unlabeled.action, unlabeled.reward) == (0, None)


def test_dsjson_candidates_are_learnable_and_pdrop_is_kept() -> None:
    """The imported context is one a learner of the imported config decides on; a pdrop is
    kept on the decision (the round then counts 1 / (1 - pdrop) in OPE), a bad one skips the
    event."""
    records, report = dsjson_records(lines({**CB_EVENT, "pdrop": 0.25},
                                           {**CB_EVENT, "EventId": "bad", "pdrop": 1.0}))
    assert dict(report.skipped) == {"pdrop not in [0, 1)": 1}
    (logged,) = joined_rounds(records)
    assert logged.pdrop == 0.25
    config = records[0]["value"]
    learner = make_learner("graph_cb", "squarecb", config["params"])
    context = next(r["value"] for r in records if r["topic"] == "contexts")
    decided = learner.decide(context, np.random.default_rng(0))
    feedback = next(r["value"] for r in records if r["topic"] == "feedback")
    assert feedback["losses"] == {"2": -1.0}  # by the played candidate's id
    learner.learn({**decided.pending, "action": 1}, feedback)
    assert learner.oracle.updates == 1


def test_dsjson_features_are_vw_style() -> None:
    features = dict(flatten({"U": {"id": "a", "age": 3, "vip": True, "no": False,
                                   "v": [1.0, 2.0]}, "_tag": "x", "t": "night"}))
    assert features == {"U^ida": 1.0, "U^age": 3.0, "U^vip": 1.0, "U^v[0]": 1.0,
                        "U^v[1]": 2.0, "tnight": 1.0}


def test_dsjson_propensity_follows_the_label_when_p_disagrees() -> None:
    event = {**CB_EVENT, "_label_probability": 0.5}
    records, _ = dsjson_records(lines(event))
    (logged,) = joined_rounds(records)
    assert (logged.propensity, logged.p) == (0.5, None)


def test_ope_on_a_dsjson_log_recovers_the_target_value(tmp_path, capsys) -> None:
    path = tmp_path / "log.dsjson"
    build(path, 4_000, seed=2)
    truth = true_values()["constant:2"]
    activated = sum('"_skipLearn"' not in line for line in path.read_text().splitlines())
    assert main(["ope", str(path), "--format", "dsjson", "--policy", "constant:2",
                 "--policy", "logged", "--json", "--out", str(tmp_path / "ope")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"rounds", "policies"} and printed["rounds"] == activated < 4_000
    constant, logged = printed["policies"]
    assert set(constant) == {"policy", "ips", "snips", "dr", "ess"}
    assert constant["policy"] == "constant:2"
    for name in ("ips", "snips", "dr"):
        assert set(constant[name]) == {"value", "ci_low", "ci_high"}
        assert constant[name]["ci_low"] <= truth <= constant[name]["ci_high"], name
        assert abs(constant[name]["value"] - truth) < 0.05, name
    assert logged["ips"]["ci_low"] <= true_values()["logged"] <= logged["ips"]["ci_high"]
    assert logged["ips"]["ci_low"] > truth
    assert (tmp_path / "ope" / "ope.png").stat().st_size > 0
    diagnostics = json.loads((tmp_path / "ope" / "ope.json").read_text())["diagnostics"]
    assert diagnostics["without_propensity"] == 0 and diagnostics["scored_rounds"] == activated


def test_import_log_writes_an_archive_ope_reads(tmp_path, capsys) -> None:
    path = tmp_path / "log.dsjson"
    path.write_text("\n".join(synthetic_events(300, seed=4)) + "\n")
    archive = tmp_path / "log.archive.jsonl"
    assert main(["import-log", str(path), "--format", "dsjson", "--out", str(archive)]) == 0
    header, records = read_archive(archive)
    rounds = len(joined_rounds(records))
    assert header.source == "dsjson" and 280 < rounds < 300  # (3 % not activated)
    capsys.readouterr()
    assert main(["ope", str(archive), "--policy", "uniform", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rounds"] == rounds
    assert main(["ope", str(archive), "--policy", "uniform"]) == 0
    table = capsys.readouterr().out
    assert f"{rounds} rounds scored of {rounds} logged decisions" in table and "uniform" in table


def obp_feedback(rounds: int = 6) -> dict:
    rng = np.random.default_rng(0)
    return {"n_rounds": rounds, "n_actions": 3, "action": rng.integers(0, 3, rounds),
            "position": np.arange(rounds) % 2, "reward": rng.integers(0, 2, rounds),
            "pscore": np.full(rounds, 1 / 3), "context": rng.normal(size=(rounds, 2)),
            "action_context": np.eye(3), "action_dist": np.full((rounds, 3, 2), 1 / 3)}


def test_obp_batch_feedback_imports_with_positions_and_action_context(tmp_path) -> None:
    feedback = obp_feedback()
    path = tmp_path / "feedback.npz"
    np.savez(path, **feedback)
    records, report = import_log(path, "obp", learner_id="zozo")
    assert report.events == 6
    # The items' features (action_context) make each round's candidates.
    assert records[0]["value"]["params"] == {"feature_dim": 2 + 2, "action_features": 3,
                                             "max_actions": 3, "graph_kind": "bandit"}
    rounds = joined_rounds(records)
    for t, logged in enumerate(rounds):
        assert logged.event_id == str(t) and logged.action == feedback["action"][t]
        assert logged.propensity == pytest.approx(1 / 3) and logged.actions == 3
        assert logged.reward == float(feedback["reward"][t]) and logged.p is None
        x = [*feedback["context"][t].tolist(), float(t % 2 == 0), float(t % 2 == 1)]
        assert logged.features == x
        assert logged.candidates == [{"id": str(j), "features": row}
                                     for j, row in enumerate(np.eye(3).tolist())]
    json_path = tmp_path / "feedback.json"
    json_path.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in feedback.items()}))
    assert joined_rounds(import_log(json_path, "obp")[0])[3].reward == rounds[3].reward


@pytest.mark.parametrize(("change", "message"), [
    ({"reward": None}, "without reward"),
    ({"action": [0, 5]}, r"must lie in \[0, 3\)"),
    ({"context": [[1.0]]}, "2 rows"),
    ({"action": [0.5, 1.0]}, "integers"),
])
def test_bad_obp_feedback_is_refused(change: dict, message: str) -> None:
    feedback = {"n_actions": 3, "action": [0, 1], "reward": [1, 0], "pscore": [0.5, 0.5],
                "context": [[0.1], [0.2]]} | change
    with pytest.raises(OBPFormatError, match=message):
        obp_records(feedback)
