"""Environments that generate contexts and answer decisions with (partial) feedback.

They are pure (numpy only), so the Kafka simulator and offline tests drive the same ones.

>>> import numpy as np

from banditflow.learners.family import Application
from banditflow.learners.registry import families
>>> env = GaussianScores(labels=5, alpha=0.9)
>>> round(env.tau_star, 4)
-0.2816
>>> round(env.miscoverage(env.tau_star), 3)
0.1
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from banditflow.learners.family import Application
from banditflow.learners.registry import families


@dataclass(frozen=True)
class Round:
    """One round: the context fields the application sends and what only it knows."""

    context: dict[str, Any]
    true_label: Any


@dataclass(frozen=True)
class GaussianScores:
    """Conformal scenario: the true label scores N(signal, 1), the others N(0, 1).

    So G*(tau) = Phi(tau - signal) and tau* = signal + Phi^{-1}(1 - alpha) are known exactly,
    which lets the metrics compute exact regret from the ``truth`` topic.
    """

    labels: int = 20
    alpha: float = 0.9
    signal: float = 1.0

    @property
    def tau_star(self) -> float:
        return self.signal + NormalDist().inv_cdf(1.0 - self.alpha)

    def miscoverage(self, threshold: float | None) -> float:
        """G*(threshold): the probability that the true label scores below it."""
        if threshold is None or math.isinf(threshold):
            return 0.0
        return NormalDist(self.signal, 1.0).cdf(threshold)

    def draw(self, rng: np.random.Generator) -> Round:
        names = [f"label-{i}" for i in range(self.labels)]
        scores = rng.normal(0.0, 1.0, self.labels)
        true_index = int(rng.integers(self.labels))
        scores[true_index] += self.signal
        return Round(
            {"labels": names, "scores": [round(float(s), 6) for s in scores]}, names[true_index]
        )

    def feedback(self, output: dict[str, Any], round_: Round) -> dict[str, Any]:
        """Semi-bandit feedback: the true label only if it is in the set."""
        if round_.true_label in output["labels"]:
            return {"label": round_.true_label}
        return {"missed": True}

    def truth(self, output: dict[str, Any], round_: Round) -> dict[str, Any]:
        return {
            "label": round_.true_label,
            "miscoverage": self.miscoverage(output["threshold"]),
            "target_miscoverage": 1.0 - self.alpha,
        }


# ----------------------------------------------------------------- one application per family
def applications() -> dict[str, Application]:
    """Each family's simulated application (its front door's
    :class:`banditflow.learners.family.Application`), by family; a family that declares none
    is not simulated."""
    return {name: declared.application for name, declared in families().items()
            if declared.application is not None}


@dataclass
class Traffic:
    """A family's evaluation task as live traffic: its rounds (contexts), the feedback the
    application sends for a decision (the task's own, so offline evaluation and the live
    simulation answer alike), the ground truth for the ``truth`` topic, and the learner
    parameters (``params_for(algorithm)``)."""

    task: Any
    params_for: Any
    rounds: list[Any]

    def feedback(self, round_: Any, output: dict[str, Any],
                 rng: np.random.Generator) -> list[dict[str, Any]]:
        return self.task.feedback(round_, output, rng)

    def truth(self, round_: Any, output: dict[str, Any]) -> dict[str, Any]:
        """The truth event's fields: what the family's learners turn into exact regret (the
        family's evaluation task says what they are)."""
        return dict(self.task.truth(round_, output))

    def oracle_set_size(self) -> float | None:
        """The mean set size of the best fixed threshold on these rounds, for tasks that
        decide sets (conformal), else None."""
        oracle = getattr(self.task, "oracle_set_size", None)
        return None if oracle is None else float(oracle(self.rounds))

    def target_coverage(self) -> float | None:
        """The learners' target coverage, for tasks that have one (conformal), else None."""
        return getattr(self.task, "target_coverage", None)

    def budget(self) -> float | None:
        """The budget B of the run (rounds = one period), for budgeted tasks (deferral)."""
        return getattr(self.task, "budget", None)


def traffic(family_name: str, events: int, seed: int, workdir: Path) -> Traffic:
    """``events`` rounds of the family's application: its log built into ``workdir`` with the
    make-log builder and read by the family's evaluation task, exactly as ``banditflow
    make-log`` then ``banditflow evaluate`` would."""
    from banditflow.offline.evaluation import add_evaluate_options, build_task
    from banditflow.offline.logs import builders

    application = applications()[family_name]

    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{application.log}-{events}-{seed}.json"
    builders()[application.log](path, events, seed)
    parser = argparse.ArgumentParser()
    add_evaluate_options(parser)
    args = parser.parse_args([
        "--family", family_name, "--learner", application.learner,
        "--horizon", str(events), "--out", str(workdir), application.log_option, str(path),
        *application.options,
    ])
    task, params_for = build_task(args, seed)
    return Traffic(task, params_for, list(task.rounds()))
