"""A synthetic Personalizer-style log in DSJSON, with the true value of every simple policy.

``dsjson-synthetic``: a news site shows one of 4 articles (``_multi``, each with a topic) to
users of two kinds (30 % "sports fans", 70 % "readers", with a device); the click
probabilities depend on both. The logging policy explores: it plays the article it thinks
best for the user's kind with probability 0.55 and each other one with 0.15. A click is
reward 1 (``_label_cost`` -1), no click cost 0; 3 % of the events were never activated
(``_skipLearn``, no reward), as in a Personalizer log with deferred activation. The builder's
description states the true mean reward of ``logged``, ``uniform`` and ``constant:J``, which
``banditflow ope`` estimates from the log.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

KINDS = ("sports", "reader")
KIND_SHARE = np.array([0.3, 0.7])
TOPICS = ("football", "politics", "science", "cooking")
CLICK = np.array([[0.60, 0.10, 0.20, 0.15],   # sports fans
                  [0.10, 0.35, 0.30, 0.25]])  # readers
LOGGING = np.array([[0.55, 0.15, 0.15, 0.15],
                    [0.15, 0.55, 0.15, 0.15]])
NOT_ACTIVATED = 0.03


def true_values() -> dict[str, float]:
    """The mean reward per event of each policy ``banditflow ope`` can name."""
    values = {"logged": float(KIND_SHARE @ (LOGGING * CLICK).sum(axis=1)),
              "uniform": float(KIND_SHARE @ CLICK.mean(axis=1))}
    for j in range(len(TOPICS)):
        values[f"constant:{j}"] = float(KIND_SHARE @ CLICK[:, j])
    return values


def synthetic_events(rounds: int, seed: int) -> list[str]:
    """``rounds`` DSJSON lines of the problem in the module docstring."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(rounds):
        kind = int(rng.choice(2, p=KIND_SHARE))
        action = int(rng.choice(len(TOPICS), p=LOGGING[kind]))
        clicked = bool(rng.random() < CLICK[kind, action])
        ranked = [action + 1] + [a + 1 for a in range(len(TOPICS)) if a != action]
        event_id = f"{seed}-{i:07d}"
        event = {
            "_label_cost": -1.0 if clicked else 0.0,
            "_label_probability": float(LOGGING[kind, action]),
            "_label_Action": action + 1, "_labelIndex": action,
            "o": [{"v": 1.0, "EventId": event_id}] if clicked else [],
            "Timestamp": f"2024-03-01T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:"
                         f"{i % 60:02d}.000Z",
            "Version": "1", "EventId": event_id,
            "a": ranked, "p": [float(LOGGING[kind, a - 1]) for a in ranked],
            "c": {"User": {"kind": KINDS[kind], "device": "mobile" if rng.random() < 0.5
                           else "desktop"},
                  "_multi": [{"Article": {"topic": topic}} for topic in TOPICS]},
            "VWState": {"m": "synthetic/1"},
        }
        if rng.random() < NOT_ACTIVATED:
            event["_skipLearn"] = True
            event["o"] = [{"EventId": event_id, "ActionTaken": False}]
        lines.append(json.dumps(event, separators=(",", ":")))
    return lines


def build(out: Path, rounds: int, seed: int) -> str:
    out.write_text("\n".join(synthetic_events(rounds, seed)) + "\n")
    values = ", ".join(f"{name} {value:.4f}" for name, value in true_values().items())
    return f"{rounds:,} DSJSON events; true mean reward per policy: {values}"


LOGS = {"dsjson-synthetic": build}
