"""The paper's regret of a conformal threshold, per round.

>>> round(conformal_round_regret(0.12, 0.1), 9)  # miscoverage above target: sets too small
0.2
>>> round(conformal_round_regret(0.05, 0.1), 9)  # below target: sets larger than needed
0.005
"""

from __future__ import annotations

# The paper's phi for conformal regret: under-coverage costs lambda1 per unit of miscoverage
# below target, over-shooting the miscoverage target (too-small sets) costs lambda2.
CONFORMAL_LAMBDA_UNDER = 0.1
CONFORMAL_LAMBDA_OVER = 10.0


def conformal_round_regret(miscoverage: float, target_miscoverage: float) -> float:
    """phi(tau*) - phi(tau) with phi of the paper (phi(tau*) = 0)."""
    gap = miscoverage - target_miscoverage
    return (CONFORMAL_LAMBDA_UNDER if gap <= 0 else CONFORMAL_LAMBDA_OVER) * abs(gap)
