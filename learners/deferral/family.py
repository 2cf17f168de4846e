"""The deferral family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

import numpy as np

from banditflow.learners.family import JSON, Application, Contract, Family
from banditflow.learners.graph_cb.family import features_context

_DIM = 2


def _feedback(output: JSON, rng: np.random.Generator) -> list[JSON]:
    parts = [{"part": "model", "model_reward": round(float(rng.random()), 6)}]
    if output["defer"]:
        parts.append({"part": "human", "human_reward": round(float(rng.random()), 6),
                      "human_cost": round(0.1 * float(rng.random()), 6)})
    return parts


def _valid(output: JSON) -> bool:
    return isinstance(output["defer"], bool)


FAMILY = Family(
    name="deferral",
    algorithms="banditflow.learners.deferral",
    events="banditflow.schemas.deferral",
    gauges={
        "dual_price": "Dual price of the budget constraint (deferral)",
        "budget_spent": "Budget spent in the current period (deferral)",
        "budget_remaining": "Budget remaining in the current period (deferral)",
        "opt_reward": "OPT of the rounds with ground truth, budget pro-rated (deferral)",
        "deferral_rate": "Fraction of decisions deferred to the human (deferral)",
    },
    evaluation="banditflow.offline.evaluation.deferral",
    logs=("banditflow.offline.logs.deferral",),
    # UCB defers at random for its first 200 rounds (as in docs/results/deferral.sh): without
    # it the human arm, never tried, never looks better than the model.
    application=Application("deferral-digits", "ucb", "model_only", 2000, 100.0,
                            learner_params={"warmup": 200}),
    contract=Contract(
        features_context, _feedback, _valid,
        {"dim": _DIM, "budget": 0.3, "c_max": 0.1, "horizon": 200},
        {"best_reject": {"model_theta": [0.1] * _DIM, "threshold": 0.5},
         "neural_linear": {"hidden_size": 4, "window": 50, "retrain_every": 50,
                           "train_steps": 2, "batch_size": 16}},
        bad_context={"features": [0.1] * (_DIM + 1)},
        # a network retrained every 50 events
        events={"neural_linear": 1_000}, rounds={"neural_linear": 100},
    ),
)
