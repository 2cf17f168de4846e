"""Compiled per-decision arithmetic of the graph_cb family: SquareCB's distribution, dec of a
distribution, the draw of an action, the scores of a candidate set, one recursive-least-squares
update, the greedy independence number of a graph.

Each is a few numpy operations on vectors of tens of entries, where numpy's per-call
overhead (about a microsecond an operation) is most of the cost; compiled, each is one call
(docs/results/graph_cb_candidates.md measures the per-round path). Like the solver's kernels
(:mod:`banditflow.learners.graph_cb.primal_dual`) they are compiled with explicit types when
this module is imported (numba's on-disk cache after the first time) and run as plain Python,
correct but slow, where numba is not installed. Compiled code does not check indices, so
each kernel checks its arrays' shapes first (a ValueError).
"""

from __future__ import annotations

import numpy as np

from banditflow.learners.graph_cb.primal_dual import njit

# A feedback graph comes writable (a context's) or read-only (a named graph, built once and
# shared: graphs.named_graph); compiled signatures are exact about it, so the kernels that
# take a graph are compiled for both.
_GRAPHS = ("float64[:, ::1]", "Array(float64, 2, 'C', readonly=True)")


def _graph_signatures(signature: str) -> list[str]:
    """``signature`` (with ``{graph}`` for the graph's type) for both kinds of graph."""
    return [signature.format(graph=graph) for graph in _GRAPHS]


@njit(_graph_signatures("float64(float64[::1], float64[::1], {graph}, float64)"), cache=True,
      error_model="numpy")
def dec(p: np.ndarray, fhat: np.ndarray, G: np.ndarray, gamma: float) -> float:
    """``max_a <p - e_a, fhat> + g_a(p) / gamma`` with ``g_a(p) = sum_i (p_i - 1[i = a])^2 / W_i``,
    ``W = G^T p`` (a term is 0 when its numerator is, even over W_i = 0, and +inf when only
    W_i is). ``g_a`` is the sum over i != a of ``own_i = p_i^2 / W_i`` plus
    ``(1 - p_a)^2 / W_a``: O(K) once W is known."""
    size = p.size
    if fhat.size != size or G.shape[0] != size or G.shape[1] != size:
        raise ValueError("dec needs p and fhat of one length K and a K x K graph")
    reveal = np.zeros(size)
    for a in range(size):
        if p[a] != 0.0:
            for j in range(size):
                reveal[j] += G[a, j] * p[a]
    expected = 0.0
    own = np.zeros(size)
    own_total = 0.0
    unbounded = 0  # terms p_i^2 / 0 with p_i > 0
    for i in range(size):
        expected += p[i] * fhat[i]
        if p[i] != 0.0:
            if reveal[i] > 0.0:
                own[i] = p[i] * p[i] / reveal[i]
                own_total += own[i]
            else:
                own[i] = np.inf
                unbounded += 1
    worst = -np.inf
    for a in range(size):
        missed = 0.0
        if p[a] != 1.0:
            missed = (1.0 - p[a]) ** 2 / reveal[a] if reveal[a] > 0.0 else np.inf
        if unbounded > (1 if own[a] == np.inf else 0):
            others = np.inf
        else:
            others = own_total - own[a] if own[a] != np.inf else own_total
        worst = max(worst, expected - fhat[a] + (others + missed) / gamma)
    return worst


@njit("float64[::1](float64[::1], float64)", cache=True, error_model="numpy")
def inverse_gap_weighting(fhat: np.ndarray, gamma: float) -> np.ndarray:
    """SquareCB's distribution: ``p_a = 1 / (K + gamma (fhat_a - fhat_b))`` for a != b, the
    first argmin of fhat, and the rest of the mass on b."""
    size = fhat.size
    best = 0
    for a in range(1, size):
        if fhat[a] < fhat[best]:
            best = a
    p = np.empty(size)
    others = 0.0
    for a in range(size):
        if a != best:
            p[a] = 1.0 / (size + gamma * (fhat[a] - fhat[best]))
            others += p[a]
    p[best] = 1.0 - others
    return p


@njit("int64(float64[::1], float64)", cache=True, error_model="numpy")
def draw(p: np.ndarray, uniform: float) -> int:
    """The index ``Generator.choice(len(p), p=p)`` picks with its uniform draw ``uniform``:
    the first whose cumulative probability, normalised by the total, exceeds it (numpy's
    cumulative sum is sequential, as here, so the index is the same to the last bit)."""
    cdf = np.cumsum(p)
    total = cdf[-1]
    for a in range(p.size):
        if cdf[a] / total > uniform:
            return a
    return p.size - 1


@njit(_graph_signatures("Tuple((float64[::1], float64, int64))(float64[::1], {graph}, float64, "
                        "float64)"), cache=True, error_model="numpy")
def inverse_gap_decision(fhat: np.ndarray, G: np.ndarray, gamma: float,
                         uniform: float) -> tuple[np.ndarray, float, int]:
    """SquareCB's decision in one call: p (:func:`inverse_gap_weighting`), its :func:`dec`
    under ``G``, and the index the uniform draw ``uniform`` picks (:func:`draw`)."""
    p = inverse_gap_weighting(fhat, gamma)
    return p, dec(p, fhat, G, gamma), draw(p, uniform)


@njit("float64[::1](float64[::1], float64[::1], float64[:, ::1], boolean, float64, float64)",
      cache=True, error_model="numpy")
def pair_scores(weights: np.ndarray, shared: np.ndarray, candidates: np.ndarray, bias: bool,
                low: float, high: float) -> np.ndarray:
    """``<weights, pair features (+ 1 with bias)>`` of ``shared`` (D) with each row of
    ``candidates`` (n x d_a), clipped to [low, high], without building the pair features:
    the crossed weights fold into one vector over the candidate's features (O(D d_a + n d_a),
    not O(n D d_a)). The weights' layout is :func:`~banditflow.learners.graph_cb.candidates.
    pair_features`': D x d_a crossed (k-major), d_a candidate, D shared, then the bias."""
    size, items = candidates.shape
    shared_dim = shared.size
    crossed = shared_dim * items
    if weights.size != crossed + items + shared_dim + (1 if bias else 0):
        raise ValueError("the weights do not fit pair features of these sizes")
    folded = weights[crossed:crossed + items].copy()
    base = weights[-1] if bias else 0.0
    for k in range(shared_dim):
        base += weights[crossed + items + k] * shared[k]
        for j in range(items):
            folded[j] += shared[k] * weights[k * items + j]
    scores = np.empty(size)
    for i in range(size):
        score = base
        for j in range(items):
            score += candidates[i, j] * folded[j]
        scores[i] = min(max(score, low), high)
    return scores


@njit("float64[::1](float64[::1], float64[::1], boolean)", cache=True, error_model="numpy")
def pair_vector(shared: np.ndarray, candidate: np.ndarray, bias: bool) -> np.ndarray:
    """The pair features of ``shared`` with one candidate's (the row
    :func:`~banditflow.learners.graph_cb.candidates.pair_features` gives), then 1 with
    ``bias``."""
    shared_dim, items = shared.size, candidate.size
    crossed = shared_dim * items
    vector = np.empty(crossed + items + shared_dim + (1 if bias else 0))
    for k in range(shared_dim):
        for j in range(items):
            vector[k * items + j] = shared[k] * candidate[j]
        vector[crossed + items + k] = shared[k]
    vector[crossed:crossed + items] = candidate
    if bias:
        vector[-1] = 1.0
    return vector


@njit("void(float64[::1], float64[:, ::1], float64[::1], float64, float64, float64)",
      cache=True, error_model="numpy")
def rls_step(weights: np.ndarray, inverse: np.ndarray, vector: np.ndarray, loss: float,
             low: float, high: float) -> None:
    """One recursive-least-squares update in place (Sherman-Morrison, O(d^2)) on the example
    (``vector``, ``loss``): with the residual ``clip(<weights, vector>, low, high) - loss``,
    ``u = inverse @ vector`` and ``gain = u / (1 + <vector, u>)``, ``weights -= residual
    gain`` and ``inverse -= gain u^T``."""
    if weights.size != vector.size or inverse.shape[0] != vector.size:
        raise ValueError("the weights, inverse Gram matrix and vector differ in size")
    residual = min(max(np.dot(weights, vector), low), high) - loss
    direction = inverse @ vector
    denominator = 1.0 + np.dot(vector, direction)
    for i in range(vector.size):
        gain = direction[i] / denominator
        weights[i] -= residual * gain
        for j in range(vector.size):
            inverse[i, j] -= gain * direction[j]


@njit("void(float64[::1], float64[:, ::1], float64[::1], float64[::1], boolean, float64, float64, "
      "float64)", cache=True, error_model="numpy")
def rls_pair_step(weights: np.ndarray, inverse: np.ndarray, shared: np.ndarray,
                  candidate: np.ndarray, bias: bool, loss: float, low: float,
                  high: float) -> None:
    """:func:`rls_step` on the pair features of ``shared`` with ``candidate``
    (:func:`pair_vector`), in one call."""
    rls_step(weights, inverse, pair_vector(shared, candidate, bias), loss, low, high)


@njit(_graph_signatures("int64({graph})"), cache=True, error_model="numpy")
def greedy_independent_set_size(G: np.ndarray) -> int:
    """The size of the independent set built by repeatedly taking the first node of minimum
    remaining degree and removing its neighbours (i != j adjacent when ``G[i, j] > 0`` or
    ``G[j, i] > 0``), in O(K^2): removing a node lowers its remaining neighbours' degrees."""
    size = G.shape[0]
    if G.shape[1] != size:
        raise ValueError("a feedback graph is K x K")
    adjacent = np.zeros((size, size), dtype=np.bool_)
    degree = np.zeros(size, dtype=np.int64)
    for i in range(size):
        for j in range(size):
            if i != j and (G[i, j] > 0.0 or G[j, i] > 0.0):
                adjacent[i, j] = True
                degree[i] += 1
    remaining = np.ones(size, dtype=np.bool_)
    removed = np.empty(size, dtype=np.int64)
    left = size
    chosen = 0
    while left > 0:
        node = -1
        for i in range(size):
            if remaining[i] and (node < 0 or degree[i] < degree[node]):
                node = i
        count = 0
        for j in range(size):
            if remaining[j] and (j == node or adjacent[node, j]):
                remaining[j] = False
                removed[count] = j
                count += 1
        left -= count
        for r in range(count):
            for j in range(size):
                if remaining[j] and adjacent[removed[r], j]:
                    degree[j] -= 1
        chosen += 1
    return chosen


@njit(["boolean(float64[::1])", "boolean(float64[:, ::1])"], cache=True)
def all_finite(values: np.ndarray) -> bool:
    """``np.isfinite(values).all()``, compiled: numpy's reduction wrapper costs more than a
    candidate set's scores."""
    return np.isfinite(values).all()
