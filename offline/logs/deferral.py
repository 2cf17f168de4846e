"""Deferral logs: the paper's synthetic settings and a real-data scenario (scikit-learn digits).

Every line is ``{"event_id", "features", "model_reward", "human_reward", "human_cost",
"model_mean", "human_mean", "cost_mean"}``: the context the learner sees, the realised
outcome of both arms (the evaluation only reveals what the feedback mode allows) and the
expected values (used for OPT in expectation and BestReject's known model reward). The
budget is not part of the log: ``banditflow evaluate --family deferral --budget B``.

- ``deferral-uniform`` / ``deferral-complementary``:
:func:`banditflow.learners.deferral.scenarios.synthetic`
  (d = 20, Bernoulli rewards and costs, identity link).
- ``deferral-digits``: the 8x8 digits bundled with scikit-learn. A logistic regression trained
  on 200 images pooled to 4x4 (about 78 % accurate, much worse on some classes) is the model;
  its reward is 1 when it is right. A deferral goes to one of three simulated experts drawn
  at random. Each expert is a specialist of some digits (accuracy 0.97 there, 0.80 elsewhere)
  and slower and less accurate on images the model finds hard; its answer time, scaled to
  ``[0, 1]``, is the cost (Beta-distributed around a mean that grows with the difficulty and
  outside the expert's specialty). The learner sees 13 features of the model's output:
  ``[1, confidence, margin, one-hot(predicted digit)] / 2`` (norm <= 1). Rounds draw
  held-out images with replacement.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from banditflow.learners.deferral.scenarios import synthetic

DIGITS_TRAIN = 200
# The experts' specialties (digits they know well), accuracies and answer-time parameters.
EXPERT_SPECIALTIES = ((0, 1, 2, 3), (4, 5, 6), (7, 8, 9, 1))
SPECIALIST_ACCURACY = 0.97
GENERALIST_ACCURACY = 0.80
HARDNESS_ACCURACY_DROP = 0.15
BASE_TIME = 0.10
HARDNESS_TIME = 0.45
GENERALIST_TIME = 0.20
TIME_CONCENTRATION = 6.0  # Beta(mean * k, (1 - mean) * k): the spread of answer times


def write_rounds(out: Path, prefix: str, columns: dict[str, np.ndarray]) -> None:
    """One JSON line per round from column arrays (features keep full precision: a rounded
    unit vector can exceed norm 1)."""
    features = columns.pop("features")
    with open(out, "w") as log:
        for t in range(features.shape[0]):
            line: dict[str, Any] = {"event_id": f"{prefix}{t}", "features": features[t].tolist()}
            line.update({name: float(values[t]) for name, values in columns.items()})
            log.write(json.dumps(line) + "\n")


def synthetic_log(kind: str, out: Path, rounds: int, seed: int) -> str:
    """The paper's synthetic setting ``kind`` as a log."""
    scenario = synthetic(kind, horizon=rounds, seed=seed)
    write_rounds(out, kind[0], {
        "features": scenario.features,
        "model_reward": scenario.model_reward,
        "human_reward": scenario.human_reward,
        "human_cost": scenario.human_cost,
        "model_mean": scenario.model_mean,
        "human_mean": scenario.human_mean,
        "cost_mean": scenario.cost_mean,
    })
    return (
        f"{rounds} rounds of the paper's {kind} setting (d=20, identity link, Bernoulli "
        f"outcomes); mean model reward {scenario.model_mean.mean():.3f}, human "
        f"{scenario.human_mean.mean():.3f}, cost {scenario.cost_mean.mean():.3f}"
    )


def uniform(out: Path, rounds: int, seed: int) -> str:
    return synthetic_log("uniform", out, rounds, seed)


def complementary(out: Path, rounds: int, seed: int) -> str:
    return synthetic_log("complementary", out, rounds, seed)


def digits_scenario(rounds: int, seed: int) -> dict[str, np.ndarray]:
    """The digits scenario's columns (see the module docstring)."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    pooled = images.reshape(-1, 4, 2, 4, 2).mean(axis=(2, 4)).reshape(-1, 16) / 16.0
    train_x, test_x, train_y, test_y = train_test_split(
        pooled, labels, train_size=DIGITS_TRAIN, random_state=seed, stratify=labels
    )
    classifier = LogisticRegression(max_iter=2000, C=0.5).fit(train_x, train_y)
    proba = classifier.predict_proba(test_x)
    ranked = np.sort(proba, axis=1)
    confidence, margin = ranked[:, -1], ranked[:, -1] - ranked[:, -2]
    predicted = classifier.classes_[proba.argmax(axis=1)]
    correct = (predicted == test_y).astype(float)
    onehot = np.eye(10)[predicted]
    features = np.column_stack([np.ones(len(test_y)), confidence, margin, onehot]) / 2.0
    # Difficulty in [0, 1]: how unsure the model is, relative to the held-out images.
    hardness = 1.0 - (confidence - confidence.min()) / (np.ptp(confidence) or 1.0)
    specialist = np.array([[label in s for s in EXPERT_SPECIALTIES] for label in test_y])
    accuracy = np.where(specialist, SPECIALIST_ACCURACY, GENERALIST_ACCURACY)
    accuracy = accuracy - HARDNESS_ACCURACY_DROP * hardness[:, None]  # (images, experts)
    time_mean = BASE_TIME + HARDNESS_TIME * hardness[:, None] + GENERALIST_TIME * ~specialist

    rng = np.random.default_rng([seed, 1])
    image = rng.integers(len(test_y), size=rounds)
    expert = rng.integers(len(EXPERT_SPECIALTIES), size=rounds)
    p_right = accuracy[image, expert]
    mean_time = time_mean[image, expert]
    return {
        "features": features[image],
        "model_reward": correct[image],
        "human_reward": (rng.random(rounds) < p_right).astype(float),
        "human_cost": rng.beta(mean_time * TIME_CONCENTRATION,
                               (1.0 - mean_time) * TIME_CONCENTRATION),
        "model_mean": correct[image],  # the model is deterministic on an image
        "human_mean": accuracy.mean(axis=1)[image],  # over the random expert
        "cost_mean": time_mean.mean(axis=1)[image],
    }


def digits(out: Path, rounds: int, seed: int) -> str:
    """The real-data scenario on scikit-learn's bundled digits (no download)."""
    columns = digits_scenario(rounds, seed)
    summary = {name: float(columns[name].mean()) for name in
               ("model_reward", "human_mean", "cost_mean")}
    write_rounds(out, "d", columns)
    return (
        f"{rounds} rounds of held-out sklearn digits: model (logistic regression on 4x4 "
        f"images, {DIGITS_TRAIN} training images) accuracy {summary['model_reward']:.3f}; "
        f"3 simulated experts, mean accuracy {summary['human_mean']:.3f}, mean answer time "
        f"(cost) {summary['cost_mean']:.3f}; 13 features"
    )


LOGS = {
    "deferral-uniform": uniform,
    "deferral-complementary": complementary,
    "deferral-digits": digits,
}
