"""The synthetic settings of the deferral paper."""

from __future__ import annotations

import math

import numpy as np
import pytest

from banditflow.learners.deferral.scenarios import sample_contexts, synthetic


def test_context_distribution() -> None:
    rng = np.random.default_rng(0)
    x = sample_contexts(rng, 40_000)
    assert x.shape == (40_000, 20)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0)
    ones = np.count_nonzero(x, axis=1)
    values = np.unique(np.round(x[x > 0] ** -2).astype(int))
    assert set(values) <= set(range(1, 9))  # entries are 1 / sqrt(|x_bar|)
    mass = np.array([math.comb(20, k) * 0.3**k for k in range(1, 9)])
    expected = mass / mass.sum()
    observed = np.bincount(ones, minlength=9)[1:] / ones.size
    np.testing.assert_allclose(observed, expected, atol=0.01)
    # given |x_bar|, every coordinate is equally likely to be on
    np.testing.assert_allclose((x > 0).mean(axis=0), (ones.mean() / 20), atol=0.01)


@pytest.mark.parametrize("kind", ["uniform", "complementary"])
def test_means_and_parameters(kind: str) -> None:
    scenario = synthetic(kind, horizon=2000, seed=5)
    scale = 1.0 / math.sqrt(8)
    for mean in (scenario.model_mean, scenario.human_mean, scenario.cost_mean):
        assert np.all((mean >= 0.0) & (mean <= 1.0))
    np.testing.assert_allclose(scenario.human_mean, scenario.features @ scenario.theta_human)
    if kind == "complementary":
        assert sorted(set(scenario.theta_human / scale)) == [0.0, 1.0]
        assert np.count_nonzero(scenario.theta_human) == 10
        np.testing.assert_allclose(scenario.theta_model, scale - scenario.theta_human)
    else:
        assert scenario.theta_model.max() <= 0.5 * scale
    for realised in (scenario.model_reward, scenario.human_reward, scenario.human_cost):
        assert set(np.unique(realised)) <= {0.0, 1.0}
    assert scenario.budget == pytest.approx(2000 * 8000 / 50000)


def test_logistic_and_noiseless_and_seeded() -> None:
    scenario = synthetic("uniform", horizon=300, seed=2, link="logistic", noise="none")
    np.testing.assert_allclose(
        scenario.cost_mean, 1.0 / (1.0 + np.exp(-scenario.features @ scenario.w_cost)))
    np.testing.assert_array_equal(scenario.human_cost, scenario.cost_mean)
    again = synthetic("uniform", horizon=300, seed=2, link="logistic", noise="none")
    np.testing.assert_array_equal(scenario.features, again.features)
    with pytest.raises(ValueError, match="kind"):
        synthetic("adversarial")
