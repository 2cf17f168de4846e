"""O(K) exploration distributions for the graphs with a known closed form.

Each function takes the oracle's predicted losses ``fhat`` (length K) and ``gamma`` and
returns a distribution over the K actions. ``bandit`` is the exact minimiser of the decision
estimation coefficient; the others are constant-factor optimal (paper, Section 4 and App. B).

>>> import numpy as np
>>> from banditflow.learners.graph_cb.closed_forms import cops_and_robbers, inventory
>>> cops_and_robbers(np.array([0.1998, 0.0999]), 10.0).round(3).tolist()
[0.333, 0.667]
>>> inventory(np.array([0.3, 0.0, 0.5, 0.1]), 10.0).round(3).tolist()
[0.0, 0.5, 0.0, 0.5]
"""

from __future__ import annotations

import numpy as np


def bandit(fhat: np.ndarray, gamma: float) -> tuple[np.ndarray, float]:
    """The exact optimum for the bandit graph (G = I) and its dec.

    With gaps ``d = fhat - min fhat``, every action's constraint is tight at the optimum:
    ``p_a = 1 / (1 + gamma (d_a + z))`` with the unique ``z >= 0`` making the mass 1, and then
    ``dec = <p, d> + z``. ``z`` is found by Newton's method on the convex decreasing mass
    function, started left of the root, so iterates increase monotonically to it.
    """
    gaps = gamma * (fhat - fhat.min())
    scaled_z = 0.0  # gamma * z
    for _ in range(100):
        inverse = 1.0 / (1.0 + gaps + scaled_z)
        excess = inverse.sum() - 1.0
        if excess <= 1e-13:
            break
        scaled_z += excess / np.dot(inverse, inverse)
    p = 1.0 / (1.0 + gaps + scaled_z)
    p /= p.sum()
    return p, float((np.dot(p, gaps) + scaled_z) / gamma)


def cops_and_robbers(fhat: np.ndarray, gamma: float) -> np.ndarray:
    """Ones minus identity (Eq. 6): all mass on the best two actions."""
    first, second = np.argsort(fhat, kind="stable")[:2]
    p = np.zeros_like(fhat, dtype=float)
    p[second] = 1.0 / (2.0 + gamma * (fhat[second] - fhat[first]))
    p[first] = 1.0 - p[second]
    return p


def apple_tasting(fhat: np.ndarray, gamma: float, revealing: int = 0) -> np.ndarray:
    """Two actions, ``revealing`` reveals both losses and the other reveals nothing (Eq. 7)."""
    other = 1 - revealing
    p = np.zeros(2)
    gap = fhat[revealing] - fhat[other]
    p[revealing] = 1.0 if gap <= 0.0 else 2.0 / (4.0 + gamma * gap)
    p[other] = 1.0 - p[revealing]
    return p


def inventory(fhat: np.ndarray, gamma: float) -> np.ndarray:
    """Level i reveals every level j <= i (Prop. 3): ``u_j = 1 / (1 + gamma (f_j - min f))``,
    ``S_j = max_{j' >= j} u_j'`` and ``p_j = S_j - S_{j+1}``."""
    u = 1.0 / (1.0 + gamma * (fhat - fhat.min()))
    suffix_max = np.maximum.accumulate(u[::-1])[::-1]
    return suffix_max - np.append(suffix_max[1:], 0.0)


def self_aware(fhat: np.ndarray, gamma: float, G: np.ndarray) -> np.ndarray:
    """Undirected graph with all self-loops (Prop. 4): a greedy maximal independent set I by
    increasing ``fhat`` starting at ``k1 = argmin fhat``; ``p_a = 1 / (|I| + gamma (f_a - f_k1))``
    for a in I other than k1, the rest of the mass on k1."""
    order = np.argsort(fhat, kind="stable")
    available = np.ones(fhat.size, dtype=bool)
    independent: list[int] = []
    for node in order:
        if available[node]:
            independent.append(int(node))
            available &= G[node] == 0.0
    best = independent[0]
    p = np.zeros_like(fhat, dtype=float)
    others = np.array(independent[1:], dtype=int)
    p[others] = 1.0 / (len(independent) + gamma * (fhat[others] - fhat[best]))
    p[best] = 1.0 - p[others].sum()
    return p
