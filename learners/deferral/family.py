"""The deferral family's front door (see :mod:`banditflow.learners.family`)."""

from __future__ import annotations

from pydantic import Field

from banditflow.learners.family import Family
from banditflow.learners.fields import FEATURES

FAMILY = Family(
    name="deferral",
    algorithms="banditflow.learners.deferral",
    context={"features": FEATURES},
    sized={"features": "max_features"},
    feedback={
        "model_reward": (float | None, Field(None)),
        "human_reward": (float | None, Field(None)),
        "human_cost": (float | None, Field(None, ge=0)),
    },
    feedback_qualifiers=frozenset({"human_cost"}),
    truth={
        "model_reward": (
            float | None, Field(None, description="deferral: the model's realised reward")
        ),
        "human_reward": (
            float | None, Field(None, description="deferral: the human's realised reward")
        ),
        "human_cost": (
            float | None, Field(None, ge=0, description="deferral: the human's realised cost")
        ),
    },
    gauges={
        "dual_price": "Dual price of the budget constraint (deferral)",
        "budget_spent": "Budget spent in the current period (deferral)",
        "budget_remaining": "Budget remaining in the current period (deferral)",
        "opt_reward": "OPT of the rounds with ground truth, budget pro-rated (deferral)",
        "deferral_rate": "Fraction of decisions deferred to the human (deferral)",
    },
    evaluation="banditflow.offline.evaluation.deferral",
    logs=("banditflow.offline.logs.deferral",),
)
