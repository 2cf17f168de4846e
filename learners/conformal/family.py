"""The conformal family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

import numpy as np

from banditflow.learners.family import JSON, Application, Contract, Family

_LABELS = ["a", "b", "c", "d", "e"]


def _context(rng: np.random.Generator) -> JSON:
    return {"labels": _LABELS, "scores": rng.random(len(_LABELS)).round(6).tolist()}


def _feedback(output: JSON, rng: np.random.Generator) -> list[JSON]:
    label = _LABELS[int(rng.integers(len(_LABELS)))]
    return [{"label": label} if label in output["labels"] else {"missed": True}]


def _valid(output: JSON) -> bool:
    return set(output["labels"]) <= set(_LABELS) and output["set_size"] == len(output["labels"])


FAMILY = Family(
    name="conformal",
    algorithms="banditflow.learners.conformal",
    events="banditflow.schemas.conformal",
    gauges={
        "coverage": "Fraction of settled decisions whose set covered the true label (conformal)",
        "coverage_target": "Target coverage of the learner (conformal)",
        "coverage_exact": "Coverage computed from ground truth (conformal, truth topic)",
        "mean_set_size": "Mean prediction-set size (conformal)",
        "threshold": "Current score threshold tau; -Inf means the full label set (conformal)",
    },
    evaluation="banditflow.offline.evaluation.conformal",
    logs=("banditflow.offline.logs.conformal_synthetic", "banditflow.offline.logs.conformal_tasks"),
    # SPS needs the most rounds to show its set size near the oracle's: it sets the demo's
    # length.
    application=Application("conformal-gaussian", "sps", "greedy", 8000, 300.0,
                            ("--alpha", "0.9")),
    contract=Contract(
        _context, _feedback, _valid, {"target_coverage": 0.8},
        {"sps": {"horizon": 1000, "max_values": 64}, "greedy": {"horizon": 1000},
         "aci": {"window": 100}, "etc": {"horizon": 1000}, "con_etc": {"horizon": 1000}},
        bad_context={"labels": [], "scores": []},
    ),
)
