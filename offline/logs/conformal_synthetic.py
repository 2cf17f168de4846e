"""Synthetic conformal logs with a known score distribution."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def gaussian(out: Path, rounds: int, seed: int) -> str:
    """10 labels; the true label scores N(1.5, 1), the others N(0, 1)."""
    rng = np.random.default_rng(seed)
    with open(out, "w") as log:
        for t in range(rounds):
            scores = rng.normal(size=10)
            true = int(rng.integers(10))
            scores[true] += 1.5
            log.write(json.dumps({"event_id": f"g{t}", "labels": [f"c{i}" for i in range(10)],
                                  "scores": scores.round(6).tolist(),
                                  "true_label": f"c{true}"}) + "\n")
    return f"{rounds} rounds, 10 labels, true label ~ N(1.5, 1), others ~ N(0, 1)"


LOGS = {"conformal-gaussian": gaussian}
