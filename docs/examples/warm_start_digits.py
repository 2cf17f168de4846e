"""Warm start on scikit-learn's digits (``make-log graph_cb-digits``, K = 10, bandit
feedback): a SquareCB.G learner whose oracle ``banditflow warm-start`` trained on 5,000
rounds logged by a uniform policy, against the same learner cold, over the first 10^4 live
rounds of another pass through the data. The learners are driven directly, as the worker's
processors drive them: decide with the event's generator, play the sampled action, learn its
loss (the only one bandit feedback reveals).

    banditflow make-log graph_cb-digits --rounds 5000 --seed 1 --out runs/digits-logged.jsonl
    banditflow make-log graph_cb-digits --rounds 10000 --seed 0 --out runs/digits-live.jsonl
    python docs/examples/warm_start_digits.py runs/digits-logged.jsonl runs/digits-live.jsonl
"""

import json
import sys

import numpy as np

from banditflow.learners.registry import make_learner
from banditflow.offline.archive import joined_rounds
from banditflow.offline.formats import EventNumbers, imported_round
from banditflow.offline.warm_start import warm_config
from banditflow.processors.redo import event_seed
from banditflow.schemas import LearnerConfig

PARAMS = {"actions": 10, "feature_dim": 64, "graph_kind": "bandit", "update": "rls"}


def read(path: str) -> list[dict]:
    with open(path) as lines:
        return [json.loads(line) for line in lines]


def uniformly_logged(lines: list[dict], seed: int) -> list[dict]:
    """Archive records of a uniform logging policy on a full-information log."""
    rng = np.random.default_rng(seed)
    numbers = EventNumbers()
    records = []
    for line in lines:
        action = int(rng.integers(10))
        records += imported_round(numbers, "logger", line["event_id"], None, line["features"],
                                  {"action": action, "p": [0.1] * 10},
                                  float(line["losses"][action]), "uniform")
    return records


def live_mean_loss(params: dict, lines: list[dict], seed: int) -> float:
    learner = make_learner("graph_cb", "squarecb_g", params)
    total = 0.0
    for line in lines:
        decided = learner.decide({"features": line["features"]},
                                 event_seed(seed, line["event_id"]))
        action = decided.output["action"]
        loss = float(line["losses"][action])
        learner.learn(decided.pending, {"losses": {str(action): loss}})
        total += loss
    return total / len(lines)


def main() -> None:
    logged, live = read(sys.argv[1]), read(sys.argv[2])
    config = LearnerConfig(learner_id="digits", family="graph_cb", algorithm="squarecb_g",
                           params=PARAMS)
    warmed, trained = warm_config(config, joined_rounds(uniformly_logged(logged, seed=7)))
    print(f"oracle trained on {trained:,} uniformly logged rounds")
    for seed in (0, 1, 2):
        cold = live_mean_loss(PARAMS, live, seed)
        warm = live_mean_loss(warmed.params, live, seed)
        print(f"seed {seed}: mean loss over {len(live):,} live rounds: cold {cold:.4f}, "
              f"warm {warm:.4f}")


if __name__ == "__main__":
    main()
