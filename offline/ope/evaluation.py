"""``banditflow ope``: estimate what target policies would have earned on logged rounds.

The rounds come from :func:`banditflow.offline.archive.joined_rounds` (an archive, or an imported
DSJSON / OBP log). A round is scored when its decision names the played action among a
known number of actions, its propensity mu lies in (0, 1], and its reward was observed
(graph_cb: the feedback revealed the played action's loss; a timed-out decision has none).
The others are counted, never guessed.

**Candidate sets.** A round whose context offered its own candidates (graph_cb's
``actions``) is scored over them: ``uniform`` spreads over the round's candidates,
``constant:J`` plays its J-th, and DR's reward model regresses on the features of each
(context, candidate) pair (:func:`banditflow.learners.graph_cb.candidates.pair_features`).

**Dropped events.** A round whose logger dropped events with probability ``pdrop`` (DSJSON)
stands for 1 / (1 - pdrop) rounds, as in Vowpal Wabbit: every estimator (IPS, SNIPS, DR, the
logged policy's) weighs its terms by it, normalised so that the weights average 1.

**Clipping.** A propensity below ``min_propensity`` (default 10^-3) is raised to it in the
weights pi / mu, so no round weighs more than 1 / min_propensity: this bounds the variance
and biases the estimates towards the logged rewards of such rounds; the share of rounds it
touched is reported (``tiny propensity``). Set it to 0 for the unclipped estimators.

>>> from banditflow.offline.archive import LoggedRound
>>> from banditflow.offline.ope.policies import parse_policy
>>> rounds = [LoggedRound("l", str(i), action=i % 2, actions=2, propensity=0.5, p=[0.5, 0.5],
...                       reward=float(i % 2), features=None) for i in range(100)]
>>> report = evaluate(rounds, [parse_policy("constant:1"), parse_policy("logged")])
>>> [(p.policy, round(p.ips.value, 3), round(p.snips.value, 3)) for p in report.policies]
[('constant:1', 1.0, 1.0), ('logged', 0.5, 0.5)]
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from banditflow.offline.archive import LoggedRound
from banditflow.offline.ope.learning_policy import LearningPolicy
from banditflow.offline.ope.policies import TargetPolicy
from banditflow.offline.ope.reward_model import ActionFeatures, cross_fitted_predictions
from banditflow.processors.estimators import MIN_PROPENSITY, Estimate, PolicyEstimates, Sums

ESTIMATORS = ("ips", "snips", "dr")


@dataclass
class OPEReport:
    """Estimates per target policy, with what the log held and what was left out."""

    rounds: int
    logged: int
    without_reward: int
    without_propensity: int
    tiny_propensity: int
    min_propensity: float
    policies: list[PolicyEstimates]

    def as_json(self) -> dict[str, Any]:
        """``{"rounds": N, "policies": [{"policy", "ips", "snips", "dr", "ess"}, ...]}``."""
        return {"rounds": self.rounds, "policies": [p.as_dict() for p in self.policies]}

    def diagnostics(self) -> dict[str, Any]:
        return {"logged_decisions": self.logged, "scored_rounds": self.rounds,
                "without_reward": self.without_reward,
                "without_propensity": self.without_propensity,
                "tiny_propensity": self.tiny_propensity,
                "tiny_propensity_share": self.tiny_propensity / self.rounds if self.rounds
                else 0.0,
                "missing_propensity_share": self.without_propensity / self.logged if self.logged
                else 0.0,
                "min_propensity": self.min_propensity,
                "learned_from": {p.policy: p.learned_from for p in self.policies
                                 if p.learned_from is not None}}

    def table(self) -> str:
        width = max([16, *(len(p.policy) + 2 for p in self.policies)])
        lines = [
            f"{self.rounds:,} rounds scored of {self.logged:,} logged decisions: "
            f"{self.without_reward:,} without an observed reward, "
            f"{self.without_propensity:,} without a usable propensity "
            f"({_share(self.without_propensity, self.logged)}); "
            f"{self.tiny_propensity:,} scored with a propensity below {self.min_propensity:g}, "
            f"clipped ({_share(self.tiny_propensity, self.rounds)})",
            "",
            f"{'policy':<{width}}" + "".join(f"{name.upper() + ' [95% CI]':<30}"
                                             for name in ESTIMATORS) + "ESS",
        ]
        for estimates in self.policies:
            cells = "".join(f"{_interval(getattr(estimates, name)):<30}" for name in ESTIMATORS)
            lines.append(f"{estimates.policy:<{width}}{cells}{estimates.ess:,.1f}")
        lines.extend(f"{estimates.policy}: learned from {estimates.learned_from:,} of the "
                     f"{self.rounds:,} rounds (explore_eval acceptance)"
                     for estimates in self.policies if estimates.learned_from is not None)
        return "\n".join(lines)

    def write(self, directory: Path) -> list[Path]:
        """``ope.json`` (estimates and diagnostics) and ``ope.png`` (estimates with their
        intervals) in ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        summary = directory / "ope.json"
        summary.write_text(json.dumps({**self.as_json(), "diagnostics": self.diagnostics()},
                                      indent=2) + "\n")
        plot = directory / "ope.png"
        plot_estimates(plot, self.policies)
        return [summary, plot]


def _share(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f} %" if whole else "0 %"


def _interval(estimate: Estimate) -> str:
    if math.isnan(estimate.value):
        return "undefined"
    if math.isnan(estimate.ci_low):  # (too few rounds for an interval: processors.estimators)
        return f"{estimate.value:.4f} [too few rounds]"
    return f"{estimate.value:.4f} [{estimate.ci_low:.4f}, {estimate.ci_high:.4f}]"


def plot_estimates(path: Path, policies: Sequence[PolicyEstimates]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(policies) + 2), 3.8))
    for offset, name in zip((-0.2, 0.0, 0.2), ESTIMATORS, strict=True):
        x, values, errors = [], [], [[], []]
        for i, estimates in enumerate(policies):
            estimate = getattr(estimates, name)
            if math.isnan(estimate.value):
                continue
            x.append(i + offset)
            values.append(estimate.value)
            bounded = not math.isnan(estimate.ci_low)  # (no interval: a bare point)
            errors[0].append(estimate.value - estimate.ci_low if bounded else 0.0)
            errors[1].append(estimate.ci_high - estimate.value if bounded else 0.0)
        ax.errorbar(x, values, yerr=errors, fmt="o", capsize=4, label=name.upper())
    ax.set_xticks(range(len(policies)), [p.policy for p in policies])
    ax.set_ylabel("estimated mean reward (95% CI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _scorable(round_: LoggedRound) -> bool:
    return (round_.actions is not None and 0 <= round_.action < round_.actions
            and round_.propensity is not None and 0.0 < round_.propensity <= 1.0)


def model_features(round_: LoggedRound) -> list[float] | list[list[float]] | None:
    """The features DR's reward model reads for a round: the context's, or the pair features
    of each of its candidates."""
    if round_.candidates is None:
        return round_.features
    # (imported here: the graph_cb learners' module loads numba, which a log without
    # candidate sets does not need)
    from banditflow.learners.graph_cb.candidates import pair_features

    shared = np.asarray(round_.features or [], dtype=float)
    offered = np.asarray([c["features"] for c in round_.candidates], dtype=float)
    return pair_features(shared, offered).tolist()


def event_weights(rounds: Sequence[LoggedRound]) -> np.ndarray:
    """How many rounds each stands for, 1 / (1 - pdrop), normalised to average 1."""
    counts = np.array([1.0 / (1.0 - r.pdrop) for r in rounds])
    return counts / counts.mean() if len(counts) else counts


def evaluate(rounds: Sequence[LoggedRound], policies: Sequence[TargetPolicy | LearningPolicy],
             min_propensity: float = MIN_PROPENSITY, folds: int = 5,
             seed: int = 0) -> OPEReport:
    """IPS, SNIPS and DR estimates of every policy on ``rounds`` (see the module docstring;
    a learning policy learns as it goes through them,
    :mod:`banditflow.offline.ope.learning_policy`);
    the DR reward model is cross-fitted over ``folds`` folds drawn with ``seed``."""
    with_propensity = [r for r in rounds if _scorable(r)]
    scored = [r for r in with_propensity if r.reward is not None]
    actions = np.array([r.action for r in scored], dtype=int)
    counts = [int(r.actions or 0) for r in scored]
    rewards = np.array([r.reward for r in scored], dtype=float)
    propensities = np.array([r.propensity for r in scored], dtype=float)
    clipped = np.maximum(propensities, min_propensity)
    design = ActionFeatures.of([model_features(r) for r in scored], counts)
    represented = event_weights(scored)
    predictions = cross_fitted_predictions(design, actions, rewards, folds, seed)
    n = len(scored)
    modelled = predictions[np.arange(n), actions] if n else np.zeros(0)
    results = []
    for policy in policies:
        if isinstance(policy, LearningPolicy):
            targets: Sequence[np.ndarray | None] = policy.progressive_distributions(
                scored, clipped.tolist())
        else:
            targets = [policy.probabilities(k, r.p) for k, r in zip(counts, scored, strict=True)]
        weights = np.empty(n)
        direct = np.empty(n)
        for i, target in enumerate(targets):
            if target is None:  # the logging policy, whose distribution was not logged
                weights[i], direct[i] = 1.0, modelled[i]
            else:
                weights[i] = target[actions[i]] / clipped[i]
                direct[i] = float(target @ predictions[i, : counts[i]])
        weights *= represented
        sums = Sums.of(weights, rewards, represented * direct + weights * (rewards - modelled))
        results.append(sums.estimates(
            policy.spec,
            learned_from=policy.learned_from if isinstance(policy, LearningPolicy) else None,
        ))
    return OPEReport(
        rounds=n,
        logged=len(rounds),
        without_reward=len(with_propensity) - n,
        without_propensity=len(rounds) - len(with_propensity),
        tiny_propensity=int(np.sum(propensities < min_propensity)),
        min_propensity=min_propensity,
        policies=results,
    )
