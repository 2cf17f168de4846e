"""The LP-based policy of Li, Chen, Wen & Leung (2019): Algorithms 1/1' (one-step) and 2 (cascade).

Each round, with plug-in means ``thetahat``, ``bhat`` and ``Deltahat`` (see
:mod:`banditflow.learners.prob_graph.bound`) and ``m_j = sum_i p_ij N_i`` the expected observations:

1. warm-up: while some ``O_j < warmup_observations``, play the arm expected to reveal the
   most such arms (:meth:`LPPolicy.warmup_arm`);                                      [R]
2. realisation guard: if some ``O_j < m_j / guard_ratio`` play ``bestParent(j)``;
3. exploit: if ``m_j >= alpha(t) bhat_j`` for all ``j``, play the empirical best arm, with
   ``bhat`` computed from ``thetahat`` with every arm but the best lowered by ``target_shrink``
   standard errors (:meth:`LPPolicy.target_means`; also for the LP below),
   ``alpha(t) = log(t / log t)`` by default (``alpha_rule``, see below and
   :func:`exploration_level`);
4. forced exploration: if some ``m_j < beta(n_e) / K`` play ``bestParent(j)``, ``n_e += 1``
   (also when two arms tie for the best mean, since then ``bhat`` is infinite);
5. LP: ``c = LP(p, bhat, Deltahat)``; play an arm with ``N_i < c_i alpha(t)``, ``n_e += 1``.
   The spec allows any such arm. The default (``lp_choice="progress"``) takes the one whose
   play adds the most *relative* progress to the arms still short of their exploit target
   (``short_j = [m_j < alpha(t) bhat_j]``)::

       score_i = sum_j p_ij short_j / max(m_j, 1),

   ties to the smallest ``N_i / c_i``. Why: revealing first lets side observations correct the
   plug-in estimates before the direct plays that a noisy ``Deltahat`` makes look cheap (on the
   revealing-action graph the revealer scores about ``K`` times a direct play), and dividing by
   ``m_j`` means it can never be trapped. The trap of the older ``lp_choice="reveal"``
   (``sum_j p_ij short_j``): an arm ``i`` that cannot observe itself, whose noisy
   ``thetahat_i`` sits close to the best arm's, inflates ``bhat_i1``; the LP asks for many plays
   of ``i`` (it reveals the best arm cheaply) and "reveal" keeps choosing ``i``, which never
   corrects ``thetahat_i`` (on the report's random graph: one seed played a gap-0.1 arm in
   99,963 of 10^5 rounds). Under "progress", every arm ``j`` that ``i`` reveals has
   ``m_j >= p_ij N_i``, so ``score_i <= (number of short arms i reveals) / N_i <= K / N_i``,
   while some parent ``k`` of a short arm ``l`` is below its target (the LP covers ``l``) and
   scores at least ``p_kl / m_l``. Hence, in the LP branch, no arm is chosen once
   ``N_i > K m_l / p_kl``: the plays of any arm are bounded by ``K / p`` times the expected
   observations of every short arm, so an arm whose estimate drives the targets keeps being
   observed in proportion. ``lp_choice="ratio"`` (the smallest ``N_i / c_i``) also escapes
   the trap but explores the LP's noisy direct plays early and pays 1.5x on the
   revealing-action graph; ``"reveal"`` is kept for comparison. See
   ``docs/results/prob_graph.md``.

Streaming: the guard's ``m_j`` counts closed decisions only (in-flight ones have not been
observed yet); the targets of steps 3-5 count in-flight decisions, so concurrent decisions do
not overshoot. The LP solution is cached and re-solved only when the empirical best arm
changes, some mean of the targets (``thetahat_j``, lowered as in step 3) moves by more than
``lp_tolerance`` since the last solve, or (cascade)
the reachability estimate changes.

Cascade case: ``p`` is replaced by ``P_t``, a Monte Carlo estimate of the reachability ``r_ij``
from ``mc_samples`` live-edge samples per refresh (pooled over refreshes), raised to at least
``p_ij`` (a direct edge is a path) and set to 0 below ``gamma(t) = gamma0 / (1 + floor(log2 t))``
except for each arm's most likely parent (so every arm stays observable). It is refreshed when
``gamma`` steps down, i.e. at ``t = 1, 2, 4, 8, ...``.

Reconstructed choices [R] and their parameters (spec defaults unless noted): ``alpha(t)``, by
default ``alpha_scale * (log t - log max(log t, 1))`` (``alpha_rule="log_minus_loglog"``,
``alpha_scale=1``), which departs from the spec's [R] ``alpha(t) = log t`` (``alpha_rule="log"``,
the default before issue 16): both are ``log t (1 + o(1))``, so the asymptotic optimality is the
same, but with ``log t`` the exploit test waits for the slowest of the arms that share the
same exploration plays, a second-order cost of the order of ``C* log T`` itself at ``T = 10^5``
(on the report's revealing-action graphs ``log t`` keeps ``lp_policy`` above ``2 C* log T``,
and even the lower bound's own plan at 1.83x-2.11x); ``beta(n) = beta_a * n ** beta_b``
(0.5, 0.5), the forced-exploration test on ``m`` or on observations (``forced_count="m"`` or
``"o"``), the warm-up (``warmup_observations=1``), the tie-break LP minimising ``c_i1``
(``tie_break=True``), the guard constant (``guard_ratio=2``), the schedule ``gamma0=0.2``.
Bernoulli plug-in means are clipped to ``[kl_clip, 1 - kl_clip]`` (default 1e-3) so that the
divergences stay finite.

>>> import numpy as np
>>> from banditflow.learners.prob_graph.lp_policy import LPPolicy
>>> from banditflow.learners.prob_graph.scenarios import Environment, revealing_action, simulate
>>> scenario = revealing_action([1.0] + [0.6] * 8 + [0.5], revealer=9)
>>> learner = LPPolicy.from_params(scenario.learner_params())
>>> regret = simulate(learner, Environment(scenario), horizon=2000, seed=0)
>>> pulls = learner.summary()["arm_pulls"]
>>> pulls[9] > max(pulls[1:9])  # the revealer explores, the 0.6-arms are rarely played
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np

from banditflow.learners.base import LearnerError
from banditflow.learners.declared import Array, State, param
from banditflow.learners.prob_graph.base import ProbGraphLearner, ProbGraphParams, ProbGraphState
from banditflow.learners.prob_graph.bound import information_targets, solve_lp
from banditflow.learners.prob_graph.graph import sample_reach_counts

LP_CHOICES = ("progress", "reveal", "ratio")
"""Rules for the LP branch's arm among those below their targets (module docstring, step 5)."""

MAX_MC_SAMPLES = 100_000  # live-edge samples per refresh of the cascade's reachability
# A refresh costs about mc_samples * K^3 steps (a transitive closure per sample): 5e8 is a
# few seconds (K = 100 at the default 500 samples), the most one decision may take.
MAX_CASCADE_WORK = 5e8

ALPHA_RULES = ("log_minus_loglog", "log")
"""Forms of the exploration level ``alpha(t)`` (see :func:`exploration_level`)."""


def exploration_level(
    round_index: int, rule: str = "log_minus_loglog", scale: float = 1.0
) -> float:
    """``alpha(t)``, the level of the exploit test ``m_j >= alpha(t) bhat_j`` and the LP targets.

    ``rule="log"``: ``scale * log t`` (the spec's [R] default, used before issue 16).
    ``rule="log_minus_loglog"`` (the default): ``scale * (log t - log max(log t, 1))``, i.e.
    ``log(t / log t)`` for ``t >= e`` and ``log t`` below (where ``log log t <= 0``). It is
    continuous, non-decreasing, positive for ``t > 1``, at most ``log t``, and ``alpha(t) / log t
    -> 1``, so the asymptotic analysis (``limsup R_T / log T <= C*``) is unchanged; at finite
    ``t`` it is smaller (0.79 ``log t`` at ``t = 10^5``), which removes part of the second-order
    cost of waiting, in the exploit test, for the slowest of many arms served by the same plays
    (``docs/results/prob_graph.md``, "Issue 16's target").

    >>> log_t = math.log(100_000)
    >>> round(exploration_level(100_000), 3), round(log_t - math.log(log_t), 3)
    (9.069, 9.069)
    >>> exploration_level(2) == math.log(2), exploration_level(1)
    (True, 0.0)
    """
    log_t = math.log(round_index)
    if rule == "log":
        return scale * log_t
    if rule == "log_minus_loglog":
        return scale * (log_t - math.log(max(log_t, 1.0)))
    expected = " or ".join(map(repr, ALPHA_RULES))
    raise LearnerError(f"parameter 'alpha_rule' must be {expected}, got {rule!r}")


def threshold_reachability(estimate: np.ndarray, gamma: float) -> np.ndarray:
    """``estimate`` with entries below ``gamma`` set to 0, keeping each column's largest."""
    kept = np.where(estimate >= gamma, estimate, 0.0)
    columns = np.arange(estimate.shape[1])
    parents = np.argmax(estimate, axis=0)
    kept[parents, columns] = estimate[parents, columns]
    return kept


@dataclass(frozen=True, kw_only=True)
class LPPolicyParams(ProbGraphParams):
    alpha_rule: str = param("log_minus_loglog", choices=ALPHA_RULES)
    alpha_scale: float = param(1.0, gt=0)
    beta_a: float = param(0.5, gt=0, le=0.5)
    beta_b: float = param(0.5, gt=0, lt=1)
    forced_count: str = param("m", choices=("m", "o"))
    guard_ratio: float = param(2.0, gt=1)
    tie_break: bool = param(True)
    lp_choice: str = param("progress", choices=LP_CHOICES)
    lp_tolerance: float = param(0.01, ge=0)
    kl_clip: float = param(1e-3, gt=0, lt=0.5)
    mc_samples: int = param(500, ge=1, cap=MAX_MC_SAMPLES)
    gamma0: float = param(0.2, gt=0, le=1)
    target_shrink: float = param(1.0, ge=0)


@dataclass(kw_only=True)
class LPPolicyState(ProbGraphState):
    exploration_rounds: int
    lp_solves: int
    lp_cache: dict[str, Any] | None


@dataclass(kw_only=True)
class CascadeState(LPPolicyState):
    """The cascade case also keeps its Monte Carlo reachability estimate."""

    reach_counts: Annotated[np.ndarray, Array(dtype=np.int64)]
    reach_samples: int
    level: int


class LPPolicy(ProbGraphLearner):
    """Asymptotically optimal LP-based policy (``algorithm = "lp_policy"``).

    Parameters besides the shared ones: ``alpha_rule`` (``"log_minus_loglog"``, default, or
    ``"log"``, see :func:`exploration_level`), ``alpha_scale``, ``beta_a``, ``beta_b``,
    ``forced_count``, ``guard_ratio``, ``tie_break``, ``lp_choice`` (``"progress"``, default,
    ``"reveal"`` or ``"ratio"``, see step 5), ``lp_tolerance`` (default 0.01),
    ``kl_clip``, ``target_shrink`` (default 1: the targets' means of every arm but the best
    lowered by that many standard errors, see :meth:`target_means`; 0 for the plug-in means),
    and for the cascade case ``mc_samples`` (M, default 500) and ``gamma0``.
    """

    algorithm: ClassVar[str] = "lp_policy"
    Params = LPPolicyParams

    def __init__(self, params: LPPolicyParams) -> None:
        super().__init__(params)
        setting = self.setting
        if setting.case == "cascade" and params.mc_samples * setting.arms**3 > MAX_CASCADE_WORK:
            raise LearnerError(
                f"the cascade case with {setting.arms} arms and mc_samples = "
                f"{params.mc_samples} would take about {params.mc_samples * setting.arms**3:.1e} "
                f"steps per reachability refresh (at most {MAX_CASCADE_WORK:.0e}): use fewer "
                "arms or samples"
            )
        self.alpha_rule = params.alpha_rule
        self.alpha_scale = params.alpha_scale
        self.beta_a = params.beta_a
        self.beta_b = params.beta_b
        self.forced_count = params.forced_count
        self.guard_ratio = params.guard_ratio
        self.tie_break = params.tie_break
        self.lp_choice = params.lp_choice
        self.lp_tolerance = params.lp_tolerance
        self.kl_clip = params.kl_clip
        self.mc_samples = params.mc_samples
        self.gamma0 = params.gamma0
        self.target_shrink = params.target_shrink
        self.exploration_rounds = 0
        self.lp_solves = 0
        self.lp_cache: dict[str, Any] | None = None
        self.reach_counts = np.zeros((setting.arms, setting.arms), dtype=np.int64)
        self.reach_samples = 0
        self.level = 0
        self.matrix = setting.probabilities

    def state_record(self) -> type[State]:
        return CascadeState if self.setting.case == "cascade" else LPPolicyState

    def restored(self) -> None:
        super().restored()
        if self.setting.case == "cascade" and self.reach_samples:
            self._refresh_matrix()

    def plugin_means(self) -> np.ndarray:
        """``thetahat``; Bernoulli estimates are clipped into ``[kl_clip, 1 - kl_clip]``."""
        means = self.means()
        if self.setting.rewards == "bernoulli":
            return np.clip(means, self.kl_clip, 1.0 - self.kl_clip)
        return means

    def feedback_matrix(self, round_index: int, rng: np.random.Generator) -> np.ndarray:
        """``p`` (one-step) or the thresholded reachability estimate ``P_t`` (cascade)."""
        if self.setting.case == "cascade":
            level = round_index.bit_length() - 1  # floor(log2 t)
            if self.reach_samples == 0 or level > self.level:
                self.reach_counts += sample_reach_counts(
                    self.setting.probabilities, self.mc_samples, rng
                )
                self.reach_samples += self.mc_samples
                self.level = level
                self._refresh_matrix()
        return self.matrix

    def _refresh_matrix(self) -> None:
        estimate = np.maximum(self.reach_counts / self.reach_samples, self.setting.probabilities)
        self.matrix = threshold_reachability(estimate, self.gamma0 / (1 + self.level))

    def warmup_arm(self, matrix: np.ndarray) -> int | None:
        """While some arm has fewer than ``warmup_observations`` observations, the arm whose
        play is expected to reveal the most of them (counting in-flight plays as revealing
        what they are expected to), or None.

        Why not ``bestParent(j)`` for one short arm at a time, as the baselines do: on a graph
        where every arm observes itself, that plays every arm once, while one play of an arm
        that reveals many covers them together (on the revealing-action graph with 40 arms, 2-3
        plays of the revealer instead of 38 direct plays of gap-0.4 arms: about 13 of the
        2 C* log T = 160 the report allows). The warm-up only makes every estimate defined;
        it does not change the asymptotic behaviour.
        """
        short = self.observations < self.warmup_observations
        if not short.any():
            return None
        expected = self.observations + matrix.T @ self.in_flight
        uncovered = short & (expected < self.warmup_observations)
        weights = (uncovered if uncovered.any() else short).astype(float)
        return int(np.argmax(matrix @ weights))

    def target_means(self, theta: np.ndarray) -> np.ndarray:
        """The means the exploit test and the LP targets use: ``thetahat``, every arm but the
        empirical best lowered by ``target_shrink`` standard errors (``sigma / sqrt(O_j)``).

        Why: the targets ``b_j`` of many arms are driven by the largest of their noisy
        estimates (on the 40-arm revealing graph the highest of 38 gap-0.4 arms sits about two
        standard errors up, which triples its ``b_j``), and the LP buys that arm's excess with
        direct plays. Lowered by standard errors, a noisy-high arm no longer looks nearly as
        good as the best. Asymptotically nothing changes: the exploit test keeps every ``O_j``
        above ``alpha(t) b_j``, so ``sigma / sqrt(O_j)`` is ``O(Delta_j / sqrt(log t))`` and the
        targets converge to the true ones.
        """
        if self.target_shrink == 0.0:
            return theta
        if self.setting.rewards == "gaussian":
            deviation = np.ones_like(theta)
        else:
            deviation = np.sqrt(theta * (1.0 - theta))
        lowered = theta - self.target_shrink * deviation / np.sqrt(self.observations)
        best = int(np.argmax(theta))
        lowered[best] = theta[best]
        if self.setting.rewards == "bernoulli":
            lowered = np.clip(lowered, self.kl_clip, 1.0 - self.kl_clip)
        return lowered

    def select(self, round_index: int, rng: np.random.Generator) -> tuple[int, str]:
        matrix = self.feedback_matrix(round_index, rng)
        arm = self.warmup_arm(matrix)
        if arm is not None:
            return arm, "warmup"
        parents = np.argmax(matrix, axis=0)
        shortfall = matrix.T @ self.plays / self.guard_ratio - self.observations
        if np.any(shortfall > 0):
            return int(parents[np.argmax(shortfall)]), "guard"
        # The targets' means (lowered by their standard errors) are also what the LP cache
        # compares: they move as observations come in even while thetahat stays put.
        theta = self.target_means(self.plugin_means())
        best, targets, gaps = information_targets(theta, self.setting.rewards)
        pulls = self.plays + self.in_flight
        expected = matrix.T @ pulls
        alpha = exploration_level(round_index, self.alpha_rule, self.alpha_scale)
        finite = bool(np.all(np.isfinite(targets)))
        if finite and np.all(expected >= alpha * targets):
            return best, "exploit"
        if self.forced_count == "m":
            count = expected
        else:
            count = self.observations + matrix.T @ self.in_flight
        deficit = count - self.beta_a * self.exploration_rounds**self.beta_b / self.arms
        if np.any(deficit < 0) or not finite:
            if np.any(deficit < 0):
                target = int(np.argmin(deficit))
            else:
                tied = np.flatnonzero(~np.isfinite(targets))
                target = int(tied[np.argmin(expected[tied])])
            self.exploration_rounds += 1
            return int(parents[target]), "forced"
        allocation = self.allocation(matrix, theta, best, targets, gaps)
        self.exploration_rounds += 1
        short = (expected < alpha * targets).astype(float)
        if self.lp_choice == "progress":
            weights = short / np.maximum(expected, 1.0)
        elif self.lp_choice == "reveal":
            weights = short
        else:  # "ratio": no arm scores, the choice falls to N_i / target_i
            weights = np.zeros_like(short)
        return self.lp_arm(matrix, allocation * alpha, pulls, weights), "lp"

    @staticmethod
    def lp_arm(
        matrix: np.ndarray, target_pulls: np.ndarray, pulls: np.ndarray, weights: np.ndarray
    ) -> int:
        """Among the arms below their target pulls, the one with the largest
        ``sum_j p_ij weights_j`` (the value of what it reveals); ties go to the smallest
        ``N_i / target_i``."""
        below = np.flatnonzero(pulls < target_pulls)
        if below.size == 0:  # a cached c for slightly older estimates, or LP rounding
            below = np.flatnonzero(target_pulls > 0)
        informative = matrix[below] @ weights
        best = below[informative >= informative.max() * (1.0 - 1e-12) - 1e-15]
        return int(best[np.argmin(pulls[best] / target_pulls[best])])

    def allocation(
        self,
        matrix: np.ndarray,
        theta: np.ndarray,
        best: int,
        targets: np.ndarray,
        gaps: np.ndarray,
    ) -> np.ndarray:
        """The LP solution ``c`` for the plug-in quantities, from the cache when still valid."""
        cache = self.lp_cache
        if (
            cache is None
            or cache["best"] != best
            or cache["level"] != self.level
            or np.max(np.abs(theta - np.asarray(cache["theta"]))) > self.lp_tolerance
        ):
            _, solution = solve_lp(matrix, targets, gaps, best, tie_break=self.tie_break)
            cache = {
                "c": solution.tolist(),
                "theta": theta.tolist(),
                "best": best,
                "level": self.level,
            }
            self.lp_cache = cache
            self.lp_solves += 1
        return np.asarray(cache["c"])

    def summary(self) -> dict[str, float | list[float]]:
        return {
            **super().summary(),
            "exploration_rounds": float(self.exploration_rounds),
            "lp_solves": float(self.lp_solves),
        }
