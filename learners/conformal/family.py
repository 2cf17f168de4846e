"""The conformal family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from banditflow.learners.family import Family

# An integer label is a 64-bit integer: decisions and the state log encode it as one.
Label = str | Annotated[int, Field(ge=-(2**63), lt=2**63)]


def _unique_labels(cls: type, labels: list[Label] | None) -> list[Label] | None:
    if labels is not None:
        seen: set[Label] = set()
        for label in labels:
            if label in seen:
                raise ValueError(f"duplicate label {label!r}: labels must be unique")
            seen.add(label)
    return labels


def _scores_match_labels(context: Any) -> Any:
    if (context.labels is None) != (context.scores is None):
        raise ValueError("'labels' and 'scores' go together")
    if context.labels is not None and len(context.labels) != len(context.scores or []):
        raise ValueError(
            f"'labels' and 'scores' must have equal length, "
            f"got {len(context.labels)} and {len(context.scores or [])}"
        )
    return context


def _label_or_missed(feedback: Any) -> Any:
    if feedback.label is not None and feedback.missed:
        raise ValueError("give either 'label' (covered) or 'missed': true, not both")
    return feedback


FAMILY = Family(
    name="conformal",
    algorithms="banditflow.learners.conformal",
    context={
        "labels": (list[Label] | None, Field(None, description="conformal: candidate labels")),
        "scores": (list[float] | None, Field(None, description="conformal: one score per label")),
    },
    sized={"labels": "max_labels"},
    context_validators={
        "_unique_labels": field_validator("labels")(_unique_labels),
        "_scores_match_labels": model_validator(mode="after")(_scores_match_labels),
    },
    feedback={
        "label": (
            Label | None, Field(None, description="conformal: the true label, if it was in the set")
        ),
        "missed": (
            bool | None,
            Field(None, description="conformal: true when the label was not in the set"),
        ),
    },
    feedback_validators={"_label_or_missed": model_validator(mode="after")(_label_or_missed)},
    truth={
        "label": (Label | None, Field(None)),
        "miscoverage": (
            float | None,
            Field(None, ge=0, le=1, description="conformal: G*(threshold used) of the environment"),
        ),
        "target_miscoverage": (float | None, Field(None, ge=0, le=1)),
    },
    gauges={
        "coverage": "Fraction of settled decisions whose set covered the true label (conformal)",
        "coverage_target": "Target coverage of the learner (conformal)",
        "coverage_exact": "Coverage computed from ground truth (conformal, truth topic)",
        "mean_set_size": "Mean prediction-set size (conformal)",
        "threshold": "Current score threshold tau; -Inf means the full label set (conformal)",
    },
    evaluation="banditflow.offline.evaluation.conformal",
    logs=("banditflow.offline.logs.conformal_synthetic", "banditflow.offline.logs.conformal_tasks"),
)
