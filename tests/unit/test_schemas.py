"""The published JSON Schema files match the models, and validate what the models accept."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from banditflow.learners.registry import families
from banditflow.schemas import (
    MODELS,
    ContextEnvelope,
    FeedbackEnvelope,
    LearnerConfig,
    Limits,
    Rejected,
    family_events,
    parse_event,
    parse_family_event,
)
from banditflow.schemas.events import refuses_what_its_envelope_refuses
from banditflow.schemas.published import check_published, path_of


def test_published_files_match_the_models() -> None:
    assert check_published() == [], "run `banditflow schemas --write` and commit the files"


def test_drift_is_detected(tmp_path, monkeypatch) -> None:
    import banditflow.schemas.published as published

    monkeypatch.setattr(published, "DIRECTORY", tmp_path)
    for name in MODELS:
        (tmp_path / f"{name}.schema.json").write_text(published.render(name))
    assert published.check_published() == []
    document = json.loads((tmp_path / "context.schema.json").read_text())
    document["$defs"]["ConformalContext"]["properties"].pop("labels")
    (tmp_path / "context.schema.json").write_text(json.dumps(document))
    assert any("context.schema.json differs" in line for line in published.check_published())


@pytest.mark.parametrize(
    ("name", "record"),
    [
        ("context", {"learner_id": "a", "event_id": "1", "labels": ["x", 2], "scores": [1, 0.5]}),
        ("context", {"learner_id": "a", "event_id": "1", "features": [[0.1], [0.2]]}),
        ("feedback", {"learner_id": "a", "event_id": "1", "missed": True}),
        (
            "feedback",
            {
                "learner_id": "a",
                "event_id": "1",
                "part": "human",
                "human_cost": 0.3,
                "human_reward": 1.0,
            },
        ),
        ("learner_config", {"learner_id": "a", "family": "conformal", "algorithm": "sps"}),
    ],
)
def test_valid_records_pass_both_model_and_json_schema(name: str, record: dict) -> None:
    schema = json.loads(path_of(name).read_text())
    jsonschema.validate(record, schema)
    MODELS[name].model_validate_json(json.dumps(record))


@pytest.mark.parametrize(("name", "record"), [
    # fields of two families: no family's record (the worker refuses it: learner_rejected)
    ("context", {"learner_id": "a", "event_id": "1", "labels": ["x"], "scores": [1.0],
                 "features": [0.5]}),
    ("context", {"learner_id": "a", "event_id": "1", "colour": "red"}),  # no family's field
    ("feedback", {"learner_id": "a", "event_id": "1", "label": "x", "rewards": {"0": 1.0}}),
])
def test_records_of_no_family_fail_the_published_schema(name: str, record: dict) -> None:
    schema = json.loads(path_of(name).read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(record, schema)


def test_the_published_schemas_are_any_familys_record() -> None:
    # A record does not name its family (its learner's config does), and one may fit several
    # (a features-only context is graph_cb's and deferral's): anyOf, one member per family.
    for kind in ("context", "feedback", "truth"):
        schema = json.loads(path_of(kind).read_text())
        members = {ref["$ref"].rsplit("/", 1)[1] for ref in schema["anyOf"]}
        assert members == {getattr(family_events(name), kind).__name__
                           for name in ("conformal", "graph_cb", "deferral", "prob_graph")}


@pytest.mark.parametrize(
    ("model", "raw", "reason", "words"),
    [
        (ContextEnvelope, b'{"learner_id": "a b", "event_id": "1"}', "invalid_schema",
         "learner_id"),
        (ContextEnvelope, b'{"learner_id": "a", "event_id": ""}', "invalid_schema", "event_id"),
        (ContextEnvelope, b'{"learner_id": "a", "event_id": "1", "colour": 1}', "invalid_schema",
         "colour: Extra inputs are not permitted"),
        (family_events("conformal").feedback, b'{"learner_id": "a", "event_id": "1"}',
         "invalid_schema", "carries nothing"),
        (
            family_events("conformal").feedback,
            b'{"learner_id": "a", "event_id": "1", "label": "x", "missed": true}',
            "invalid_schema",
            "not both",
        ),
        (
            family_events("deferral").feedback,
            b'{"learner_id": "a", "event_id": "1", "human_cost": -1}',
            "invalid_schema",
            "greater than or equal",
        ),
        (
            LearnerConfig,
            b'{"learner_id": "a", "family": "magic", "algorithm": "x"}',
            "invalid_schema",
            "family",
        ),
        (
            LearnerConfig,
            b'{"learner_id": "a", "family": "conformal", "algorithm": "sps",'
            b' "feedback_timeout_s": 0}',
            "invalid_schema",
            "greater than 0",
        ),
        (ContextEnvelope, b"\xff\xfe", "malformed_json", "UTF-8"),
        # read before the learner's family is known: another family's field, not finite
        (FeedbackEnvelope, b'{"learner_id": "a", "event_id": "1", "label": "y",'
         b' "model_reward": NaN}', "non_finite", "model_reward: Input should be a finite"),
    ],
)
def test_rejections_explain_themselves(model, raw: bytes, reason: str, words: str) -> None:
    with pytest.raises(Rejected) as info:
        parse_event(raw, model, Limits())
    assert info.value.reason == reason
    assert words in info.value.detail


@pytest.mark.parametrize(("fields", "where"), [
    ('"scores": [0.5, 1e400, 2]', "scores.1"),  # (1e400 reads as an infinity)
    ('"scores": [1e308, 1e308]', None),  # finite, though their sum is not
    ('"scores": [1e400, -1e400]', "scores.0"),  # infinities whose sum is NaN
    ('"scores": [100000000000000000000000000000000000000000000000000000000000000000000000000'
     '00000000000000000000000000000000000000000000000000000000000000000000000000000000000000'
     '00000000000000000000000000000000000000000000000000000000000000000000000000000000000000'
     '00000000000000000000000000000000000000000000000000000000000000000000000000000000000000'
     '0, 1.5]', None),  # an int past any float's range: not a number that is not finite
    ('"labels": ["a", "b"], "scores": [0.5, NaN]', "scores.1"),
    ('"features": [[1.0, 2.0], [3.0, -Infinity]]', "features.1.1"),
    ('"actions": [{"id": "a", "features": [1, true, NaN]}]', "actions.0.features.2"),
])
def test_the_envelope_names_the_first_number_that_is_not_finite(
    fields: str, where: str | None
) -> None:
    raw = ('{"learner_id": "a", "event_id": "1", ' + fields + "}").encode()
    if where is None:
        parse_event(raw, ContextEnvelope, Limits())
        return
    with pytest.raises(Rejected) as info:
        parse_event(raw, ContextEnvelope, Limits())
    assert info.value.reason == "non_finite"
    assert info.value.detail == f"record: {where}: Input should be a finite number"


@pytest.mark.parametrize(("family", "fields", "detail"), [
    ("conformal", {"labels": ["a", "b", "c"], "scores": [0.1, 0.2, 0.3]},
     "3 labels exceeds the limit of 2"),
    ("deferral", {"features": [[1.0, 2.0], [3.0]]},
     "'features' has more than 2 numbers (--max-features)"),
    ("graph_cb", {"features": [1.0], "graph": [[1.0, 0.0], [0.0, 1.0]]},
     "'graph' has more than 2 numbers (--max-features)"),
])
def test_the_fields_families_bound_are_limited(family: str, fields: dict, detail: str) -> None:
    # Which fields max_labels and max_features bound is each family's context model (SIZED).
    raw = json.dumps({"learner_id": "l", "event_id": "e", **fields}).encode()
    with pytest.raises(Rejected) as rejected:
        parse_family_event(raw, family, "context", Limits(max_labels=2, max_features=2))
    assert (rejected.value.reason, rejected.value.detail) == ("oversize", detail)
    parse_family_event(raw, family, "context", Limits(max_labels=3, max_features=4))


@pytest.mark.parametrize(("kind", "fields", "reason", "detail"), [
    ("context", {"features": [0.5]}, "learner_rejected",
     "features is not conformal context (it takes labels, scores)"),
    ("feedback", {"losses": {"0": 1.0}}, "contradicting_feedback",
     "losses is not conformal feedback (it takes label, missed)"),
    ("truth", {"all_losses": {"0": 1.0}}, "invalid_schema",
     "all_losses is not conformal truth (it takes label, miscoverage, target_miscoverage)"),
])
def test_another_familys_fields_are_refused_with_what_the_family_takes(
    kind: str, fields: dict, reason: str, detail: str
) -> None:
    raw = json.dumps({"learner_id": "l", "event_id": "e", **fields}).encode()
    parse_event(raw, MODELS[kind], Limits())  # some family's record
    with pytest.raises(Rejected) as rejected:
        parse_family_event(raw, "conformal", kind, Limits())
    assert (rejected.value.reason, rejected.value.detail) == (reason, detail)


@pytest.mark.parametrize("family", sorted(families()))
def test_every_built_in_familys_records_of_a_known_learner_are_read_in_one_parse(
    family: str,
) -> None:
    """Their models refuse all their envelopes refuse, so the worker reads a known learner's
    record with them alone (processors/processor.py, ``Processor._read``): half the parsing
    of a valid record."""
    for model in family_events(family):
        assert refuses_what_its_envelope_refuses(model), model


def test_a_record_checks_its_families_declarations_once_not_per_record(monkeypatch) -> None:
    """What every family's records carry, and each family's checked models, are computed
    once per set of families: computed per record, they cost the worker half its events/s
    (issue 23's A/B run). A registration computes them anew."""
    from banditflow.learners import registry
    from banditflow.schemas import events

    checked: list[str] = []
    check = events._checked_events
    monkeypatch.setattr(events, "_checked_events",
                        lambda name, declared: checked.append(name) or check(name, declared))
    context = json.dumps({"learner_id": "l", "event_id": "e", "labels": ["a", "b"],
                          "scores": [1.0, 0.0]}).encode()
    feedback = json.dumps({"learner_id": "l", "event_id": "e", "label": "a"}).encode()
    for _ in range(2):  # (the first round may fill the caches)
        checked.clear()
        misses = events._any_family_fields.cache_info().misses
        for _ in range(50):
            parse_event(context, ContextEnvelope, Limits())
            parse_event(feedback, FeedbackEnvelope, Limits())
            parse_family_event(context, "conformal", "context", Limits())
            parse_family_event(feedback, "conformal", "feedback", Limits())
    assert checked == []
    assert events._any_family_fields.cache_info().misses == misses
    twin = dataclasses.replace(registry.family("conformal"), name="conformal_twin")
    registry.register(twin)
    try:  # another family: what some family's records carry is computed again, once
        parse_event(context, ContextEnvelope, Limits())
        parse_event(context, ContextEnvelope, Limits())
        assert events._any_family_fields.cache_info().misses == misses + 1
        assert checked == ["conformal_twin"]
    finally:
        registry.unregister("conformal_twin")
