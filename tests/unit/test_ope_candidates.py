"""Off-policy evaluation of a candidate-set log (graph_cb contexts offering their own
actions), read from archive records as ``banditflow ope`` reads them, checked against the
estimators computed directly from the log's numbers: IPS, SNIPS and DR (its reward model a
ridge regression on pair features, cross-fitted) with dropped-event weights 1 / (1 - pdrop)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from banditflow.offline.archive import joined_rounds
from banditflow.offline.ope.evaluation import evaluate
from banditflow.offline.ope.policies import parse_policy
from banditflow.processors.estimators import RIDGE

ROUNDS = 300
FOLDS = 3


def candidate_log(seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Archive records and, per round, the numbers a direct computation needs. Candidate ids
    are digits in a shuffled order, so that an id read as an index would name another
    candidate; a third of the rounds were logged with a pdrop."""
    rng = np.random.default_rng(seed)
    records, truth = [], []

    def record(topic: str, value: dict) -> None:
        records.append({"topic": topic, "partition": 0, "offset": len(records), "key": "c",
                        "value": {"learner_id": "c", **value}})

    for t in range(ROUNDS):
        n = int(rng.integers(2, 7))
        shared = rng.normal(size=2).round(3)
        items = rng.normal(size=(n, 2)).round(3)
        ids = [str(i) for i in rng.permutation(n)]
        p = rng.dirichlet(np.ones(n))
        action = int(rng.choice(n, p=p))
        reward = float(np.tanh(shared @ items[action]) + rng.normal(0, 0.1))
        pdrop = 0.5 if t % 3 == 0 else 0.0
        event = {"event_id": f"e{t}"}
        record("contexts", {**event, "features": shared.tolist(),
                            "actions": [{"id": i, "features": f}
                                        for i, f in zip(ids, items.tolist(), strict=True)]})
        output = {"action": action, "action_id": ids[action], "p": p.tolist()}
        if pdrop:
            output["pdrop"] = pdrop
        record("decisions", {**event, "family": "graph_cb", "algorithm": "imported:test",
                             "learner_version": 1, "output": output, "decided_at": 0.0})
        record("feedback", {**event, "losses": {ids[action]: -reward}})
        truth.append({"shared": shared, "items": items, "p": p, "action": action,
                      "reward": reward, "pdrop": pdrop})
    return records, truth


def pairs(shared: np.ndarray, items: np.ndarray) -> np.ndarray:
    """(shared x item, item, shared) with an intercept, written out longhand."""
    rows = [[s * a for s in shared for a in item] + list(item) + list(shared) + [1.0]
            for item in items]
    return np.array(rows)


def direct(truth: list[dict], target, folds: int, seed: int) -> dict[str, float]:
    n = len(truth)
    c = np.array([1.0 / (1.0 - r["pdrop"]) for r in truth])
    pi = [target(r) for r in truth]
    w = np.array([pi[i][r["action"]] / r["p"][r["action"]] for i, r in enumerate(truth)])
    rewards = np.array([r["reward"] for r in truth])
    ips = float(np.sum(c * w * rewards) / np.sum(c))
    snips = float(np.sum(c * w * rewards) / np.sum(c * w))
    fold_of = np.random.default_rng(seed).permutation(n) % folds
    dr_terms = np.empty(n)
    for i, r in enumerate(truth):
        train = [j for j in range(n) if fold_of[j] != fold_of[i]]
        x = np.array([pairs(truth[j]["shared"], truth[j]["items"])[truth[j]["action"]]
                      for j in train])
        theta = np.linalg.solve(x.T @ x + RIDGE * np.eye(x.shape[1]), x.T @ rewards[train])
        q = np.clip(pairs(r["shared"], r["items"]) @ theta, rewards.min(), rewards.max())
        dr_terms[i] = pi[i] @ q + w[i] * (r["reward"] - q[r["action"]])
    dr = float(np.sum(c * dr_terms) / np.sum(c))
    return {"ips": ips, "snips": snips, "dr": dr}


def test_ope_on_a_candidate_set_log_equals_a_direct_computation() -> None:
    records, truth = candidate_log()
    rounds = joined_rounds(json.loads(json.dumps(records)))
    assert [r.action for r in rounds] == [t["action"] for t in truth]
    assert [r.reward for r in rounds] == pytest.approx([t["reward"] for t in truth])
    assert [r.pdrop for r in rounds] == [t["pdrop"] for t in truth]
    report = evaluate(rounds, [parse_policy("uniform"), parse_policy("constant:1"),
                               parse_policy("logged")], min_propensity=0.0, folds=FOLDS, seed=3)
    targets = {
        "uniform": lambda r: np.full(len(r["p"]), 1.0 / len(r["p"])),
        "constant:1": lambda r: np.eye(len(r["p"]))[1],
        "logged": lambda r: r["p"],
    }
    assert report.rounds == ROUNDS
    for estimates in report.policies:
        expected = direct(truth, targets[estimates.policy], FOLDS, seed=3)
        for name, value in expected.items():
            assert getattr(estimates, name).value == pytest.approx(value, rel=1e-9), (
                estimates.policy, name)


def test_pdrop_changes_the_estimates_as_dropped_rounds_would() -> None:
    """Rounds logged with pdrop = 1/2 count twice: the same as the log with those rounds
    written twice and no pdrop (for IPS and SNIPS, which need no reward model)."""
    records, _ = candidate_log(seed=1)
    rounds = joined_rounds(records)
    doubled = []
    for r in rounds:
        plain = type(r)(**{**r.__dict__, "pdrop": 0.0})
        doubled.extend([plain, plain] if r.pdrop else [plain])
    policy = [parse_policy("uniform")]
    weighted = evaluate(rounds, policy, min_propensity=0.0, folds=1).policies[0]
    repeated = evaluate(doubled, policy, min_propensity=0.0, folds=1).policies[0]
    ignored = evaluate([type(r)(**{**r.__dict__, "pdrop": 0.0}) for r in rounds], policy,
                       min_propensity=0.0, folds=1).policies[0]
    assert weighted.ips.value == pytest.approx(repeated.ips.value, rel=1e-12)
    assert weighted.snips.value == pytest.approx(repeated.snips.value, rel=1e-12)
    assert abs(weighted.ips.value - ignored.ips.value) > 1e-3


def test_a_learner_policy_decides_and_learns_over_the_logged_candidates(tmp_path) -> None:
    """A candidate-set learner that always explores is the uniform policy over each round's
    candidates; one that learns (squarecb) reads the logged candidate by its id."""
    records, _ = candidate_log(seed=2)
    rounds = joined_rounds(records)
    form = {"feature_dim": 2, "action_features": 2, "max_actions": 6, "graph_kind": "bandit"}
    explorer = tmp_path / "explorer.json"
    explorer.write_text(json.dumps({"family": "graph_cb", "algorithm": "epsilon_greedy",
                                    "params": {**form, "epsilon": 1.0}}))
    learner = tmp_path / "learner.json"
    learner.write_text(json.dumps({"family": "graph_cb", "algorithm": "squarecb",
                                   "params": {**form, "update": "rls"}}))
    report = evaluate(rounds, [parse_policy("uniform"), parse_policy(str(explorer)),
                               parse_policy(str(learner))], folds=2)
    uniform, explored, learned = report.policies
    for name in ("ips", "snips", "dr"):
        assert getattr(explored, name).value == pytest.approx(getattr(uniform, name).value)
    assert 0 < learned.learned_from < len(rounds)
    assert learned.ips.value > uniform.ips.value  # (rewards tanh(shared . item): learnable)
