"""Off-policy evaluation on seeded synthetic logs whose target values are known.

The logging policy prefers the actions that pay more (a softmax of the expected rewards,
mixed with 20 % uniform exploration), so the plain mean reward of the rounds where the logged
action agrees with the target is far off: only the right weights recover the value. The
population value of each target policy comes from 10^6 fresh contexts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from banditflow.offline.archive import LoggedRound
from banditflow.offline.ope.evaluation import OPEReport, evaluate
from banditflow.offline.ope.policies import PolicyError, parse_policy

ACTIONS = 4
DIM = 3
THETA = np.random.default_rng(1234).normal(size=(ACTIONS, DIM))
BIAS = np.array([-0.5, 0.0, 0.3, -0.2])
EXPLORATION = 0.2
TARGETS = ("constant:2", "uniform", "logged")


def expected_rewards(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(x @ THETA.T + BIAS)))


def logging_distribution(x: np.ndarray) -> np.ndarray:
    scores = np.exp(4.0 * expected_rewards(x))
    return (1 - EXPLORATION) * scores / scores.sum(axis=1, keepdims=True) + EXPLORATION / ACTIONS


def true_values() -> dict[str, float]:
    x = np.random.default_rng(99).normal(size=(1_000_000, DIM))
    f = expected_rewards(x)
    return {"constant:2": float(f[:, 2].mean()), "uniform": float(f.mean()),
            "logged": float((logging_distribution(x) * f).sum(axis=1).mean())}


TRUTH = true_values()


def synthetic_log(rounds: int, seed: int, full_p: bool = True) -> list[LoggedRound]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rounds, DIM))
    mu = logging_distribution(x)
    actions = (rng.random((rounds, 1)) > mu.cumsum(axis=1)).sum(axis=1)
    f = expected_rewards(x)[np.arange(rounds), actions]
    rewards = (rng.random(rounds) < f).astype(float)
    return [LoggedRound("l", str(i), action=int(actions[i]), actions=ACTIONS,
                        propensity=float(mu[i, actions[i]]),
                        p=mu[i].tolist() if full_p else None, reward=float(rewards[i]),
                        features=x[i].round(6).tolist()) for i in range(rounds)]


def estimates(report: OPEReport, name: str) -> dict[str, tuple[float, float, float]]:
    return {p.policy: (getattr(p, name).value, getattr(p, name).ci_low, getattr(p, name).ci_high)
            for p in report.policies}


def test_estimates_are_unbiased_and_a_wrong_weight_is_caught() -> None:
    log = synthetic_log(20_000, seed=7)
    report = evaluate(log, [parse_policy(spec) for spec in TARGETS])
    assert report.rounds == 20_000 and report.tiny_propensity == 0
    for name in ("ips", "snips", "dr"):
        for policy, (value, low, high) in estimates(report, name).items():
            standard_error = (high - low) / (2 * 1.96)
            assert abs(value - TRUTH[policy]) < 4 * standard_error, (name, policy)
    ips_se = {p.policy: (p.ips.ci_high - p.ips.ci_low) / 3.92 for p in report.policies}
    # Ignoring the logging propensities (weighting as if actions had been uniform) or not
    # weighting at all misses the target value by many standard errors.
    as_if_uniform = [LoggedRound(**{**r.__dict__, "propensity": 1 / ACTIONS, "p": None})
                     for r in log]
    wrong = estimates(evaluate(as_if_uniform, [parse_policy("constant:2")]), "ips")
    assert abs(wrong["constant:2"][0] - TRUTH["constant:2"]) > 8 * ips_se["constant:2"]
    agreeing = [r.reward for r in log if r.action == 2]
    assert abs(np.mean(agreeing) - TRUTH["constant:2"]) > 8 * ips_se["constant:2"]


def test_dr_has_a_narrower_interval_than_ips() -> None:
    report = evaluate(synthetic_log(5_000, seed=3), [parse_policy("constant:2")])
    (result,) = report.policies
    assert result.dr.ci_high - result.dr.ci_low < 0.8 * (result.ips.ci_high - result.ips.ci_low)


def test_intervals_cover_at_the_stated_rate() -> None:
    repeats = 150
    covered = {(name, spec): 0 for name in ("ips", "snips", "dr") for spec in TARGETS[:2]}
    errors = {key: [] for key in covered}
    for seed in range(repeats):
        report = evaluate(synthetic_log(1_000, seed=1000 + seed),
                          [parse_policy(spec) for spec in TARGETS[:2]], seed=seed)
        for name, spec in covered:
            value, low, high = estimates(report, name)[spec]
            covered[name, spec] += low <= TRUTH[spec] <= high
            errors[name, spec].append(value - TRUTH[spec])
    for key, count in covered.items():
        assert 0.90 <= count / repeats <= 0.99, (key, count / repeats)
        bias = np.mean(errors[key])
        assert abs(bias) < 4 * np.std(errors[key]) / math.sqrt(repeats), (key, bias)


def test_logged_policy_without_its_distribution_weighs_every_round_once() -> None:
    log = synthetic_log(2_000, seed=5, full_p=False)
    (result,) = evaluate(log, [parse_policy("logged")]).policies
    mean = float(np.mean([r.reward for r in log]))
    assert result.ips.value == pytest.approx(mean) and result.ess == pytest.approx(2_000)
    assert result.dr.value == pytest.approx(mean)


def test_unscorable_rounds_are_counted_and_tiny_propensities_clipped() -> None:
    log = synthetic_log(50, seed=1)
    log[0].reward = None
    log[1].propensity = None
    log[2].propensity = 0.0
    log[3].actions = None
    log[4].propensity, log[4].action, log[4].reward = 1e-5, 2, 1.0
    target = [parse_policy("constant:2")]
    report = evaluate(log, target, min_propensity=1e-3)
    assert (report.logged, report.rounds, report.without_reward) == (50, 46, 1)
    assert (report.without_propensity, report.tiny_propensity) == (3, 1)
    unclipped = evaluate(log, target, min_propensity=0.0)
    assert unclipped.tiny_propensity == 0
    # The tiny propensity's weight is 1 / 10^-3 instead of 1 / 10^-5.
    difference = 46 * (unclipped.policies[0].ips.value - report.policies[0].ips.value)
    assert difference == pytest.approx(1e5 - 1e3)


@pytest.mark.parametrize("spec", ["constant", "constant:-1", "greedy", "constant:x"])
def test_bad_policy_specs_are_refused(spec: str) -> None:
    with pytest.raises(PolicyError):
        parse_policy(spec)


def test_constant_beyond_the_actions_is_refused() -> None:
    with pytest.raises(PolicyError, match="only 4 actions"):
        evaluate(synthetic_log(10, seed=0), [parse_policy("constant:4")])


def test_json_stays_valid_when_an_interval_is_unbounded() -> None:
    import json

    report = evaluate(synthetic_log(1, seed=0), [parse_policy("uniform")])
    (policy,) = json.loads(json.dumps(report.as_json(), allow_nan=False))["policies"]
    assert policy["ips"]["ci_low"] is None and policy["ips"]["value"] is not None


def learner_config(tmp_path, algorithm: str, **params: object) -> str:
    import json

    path = tmp_path / f"{algorithm}.json"
    path.write_text(json.dumps({
        "family": "graph_cb", "algorithm": algorithm, "seed": 3,
        "params": {"actions": ACTIONS, "feature_dim": DIM, "graph_kind": "bandit",
                   "update": "rls", **params}}))
    return str(path)


def test_a_learner_that_always_explores_is_the_uniform_policy(tmp_path) -> None:
    spec = learner_config(tmp_path, "epsilon_greedy", epsilon=1.0)
    learning, uniform = evaluate(synthetic_log(500, seed=2),
                                 [parse_policy(spec), parse_policy("uniform")]).policies
    assert learning.policy == spec and 0 < learning.learned_from < 500
    for name in ("ips", "snips", "dr"):
        assert getattr(learning, name) == pytest.approx(getattr(uniform, name))


def test_a_learning_policy_is_evaluated_as_it_learns(tmp_path) -> None:
    spec = learner_config(tmp_path, "squarecb_g", gamma_schedule="constant", gamma=20.0)
    report = evaluate(synthetic_log(5_000, seed=11), [parse_policy(spec)])
    (learning,) = report.policies
    # It learns which action suits which context: better than every fixed policy's true value.
    assert learning.dr.ci_low > max(TRUTH["constant:2"], TRUTH["uniform"])
    assert learning.ips.ci_low > TRUTH["constant:2"]
    # explore_eval accepts round t with probability pi_t(a_t) min(mu) / mu_t <= min(mu) / mu_t.
    assert 0 < learning.learned_from < 5_000 * 0.2
    assert f"learned from {learning.learned_from:,} of the 5,000 rounds" in report.table()


def test_learners_that_do_not_fit_the_log_are_refused(tmp_path) -> None:
    import json

    from banditflow.offline.ope.learning_policy import LearningPolicyError

    path = tmp_path / "sps.json"
    path.write_text(json.dumps({"family": "conformal", "algorithm": "sps",
                                "params": {"target_coverage": 0.9, "horizon": 100}}))
    with pytest.raises(LearningPolicyError, match="no distribution"):
        parse_policy(str(path))
    path.write_text(json.dumps({"family": "graph_cb", "algorithm": "squarecb",
                                "params": {"actions": 3, "feature_dim": DIM,
                                           "graph_kind": "bandit"}}))
    with pytest.raises(LearningPolicyError, match="plays 3 actions"):
        evaluate(synthetic_log(10, seed=0), [parse_policy(str(path))])
    path.write_text("[1, 2]")
    with pytest.raises(LearningPolicyError, match="not a learner config"):
        parse_policy(str(path))
