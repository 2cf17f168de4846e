"""Scenario files of the ``prob_graph`` family (``banditflow make-log prob-graph-...``).

``prob_graph`` is evaluated on a generative model, not on a logged stream: ``banditflow
evaluate --family prob_graph`` reads a *scenario file* (JSON, ``{"arms", "means", "edges",
"case", "rewards"}``) and generates ``--horizon`` rounds from it. So these builders write that
JSON file, not a JSONL log; ``--rounds`` is ignored (the horizon is chosen at evaluation) and
``--seed`` draws the random graphs (Erdos-Renyi, random ``p_ij``). Each name is one of the
graphs of the report (``docs/results/prob_graph.md``):

- ``prob-graph-er[-cascade]``: Erdos-Renyi, 10 arms, each ordered pair an edge with
  probability 0.4, every edge live with ``p = 0.5``; Gaussian rewards.
- ``prob-graph-clique[-cascade]``: the loopless clique on 6 arms, ``p = 0.3``; Gaussian.
- ``prob-graph-revealing``: 20 arms observing themselves (``p = 1``); arm 19 (mean 0.5) also
  reveals every other arm with ``p = 0.9``; the best arm (1.0) and 18 arms at 0.6; Gaussian.
- ``prob-graph-revealing-wide``: the revealing-action graph with 40 arms (38 at 0.6).
- ``prob-graph-revealing-cascade``: the same arms, but the revealer reaches the others only
  through 3 hub arms (revealer -> hub -> block, every edge ``p = 0.9``): one step it reveals
  3 arms, in the cascade case all of them (with probability 0.81); Gaussian.
- ``prob-graph-random[-cascade]``: the loopless clique on 8 arms with ``p_ij ~
  Uniform(0.1, 1)``; Bernoulli rewards.

Without ``banditflow``, :func:`write_scenario` does the same from Python.

>>> import json, tempfile
>>> from pathlib import Path
>>> path = Path(tempfile.mkdtemp()) / "revealing.json"
>>> print(LOGS["prob-graph-revealing"](path, 0, 0))
revealing-action graph: 20 arms, one_step, gaussian, C*(theta) = 6.94
>>> json.loads(path.read_text())["edges"][-1]
[19, 18, 0.9]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from banditflow.learners.prob_graph.scenarios import (
    Scenario,
    erdos_renyi,
    loopless_clique,
    parse_scenario,
    random_probabilities,
    revealing_action,
)
from banditflow.offline.evaluation.prob_graph import lower_bound

ER_MEANS = [1.0, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
CLIQUE_MEANS = [1.0, 0.8, 0.7, 0.6, 0.5, 0.4]
RANDOM_MEANS = [0.7, 0.6, 0.55, 0.5, 0.45, 0.4, 0.3, 0.2]
REVEALING_ARMS = 20
REVEALER = REVEALING_ARMS - 1
HUBS = (0, 1, 2)


def revealing_means(arms: int = REVEALING_ARMS) -> list[float]:
    """Best arm 1 (mean 1.0), the revealer (last arm, 0.5), all others 0.6."""
    means = [0.6] * arms
    means[1], means[-1] = 1.0, 0.5
    return means


def revealing_tree(case: str) -> Scenario:
    """Self-loops everywhere; revealer -> hubs -> blocks of the remaining arms, ``p = 0.9``."""
    arms = REVEALING_ARMS
    edges: list[list[Any]] = [[i, i, 1.0] for i in range(arms)]
    edges += [[REVEALER, hub, 0.9] for hub in HUBS]
    others = [j for j in range(arms) if j not in HUBS and j != REVEALER]
    for k, j in enumerate(others):
        edges.append([HUBS[k % len(HUBS)], j, 0.9])
    return parse_scenario(
        {"arms": arms, "means": revealing_means(), "edges": edges, "case": case,
         "rewards": "gaussian"}
    )


def build(name: str, seed: int) -> tuple[Scenario, str]:
    """The scenario called ``name`` (without the ``prob-graph-`` prefix) and its description."""
    case = "cascade" if name.endswith("-cascade") else "one_step"
    graph = name.removesuffix("-cascade")
    rng = np.random.default_rng(seed)
    if graph == "er":
        return erdos_renyi(ER_MEANS, 0.4, 0.5, rng, case=case), "Erdos-Renyi graph (0.4), p = 0.5"
    if graph == "clique":
        return loopless_clique(CLIQUE_MEANS, 0.3, case=case), "loopless clique, p = 0.3"
    if graph == "revealing-wide":
        scenario = revealing_action(revealing_means(40), 39, reveal_p=0.9, case=case)
        return scenario, "revealing-action graph"
    if graph == "revealing":
        if case == "cascade":
            return revealing_tree(case), "revealing-action tree (revealer -> 3 hubs -> blocks)"
        scenario = revealing_action(revealing_means(), REVEALER, reveal_p=0.9, case=case)
        return scenario, "revealing-action graph"
    if graph == "random":
        scenario = random_probabilities(RANDOM_MEANS, rng, case=case, rewards="bernoulli")
        return scenario, "loopless clique, p_ij ~ U(0.1, 1)"
    raise ValueError(f"unknown prob_graph scenario {name!r}")


def write_scenario(name: str, out: Path, seed: int = 0) -> str:
    """Write scenario ``name`` as JSON to ``out``; returns a one-line description."""
    scenario, text = build(name, seed)
    out.write_text(json.dumps(scenario.to_dict()) + "\n")
    c_star, _ = lower_bound(scenario)
    setting = scenario.setting
    return (
        f"{text}: {scenario.arms} arms, {setting.case}, {setting.rewards}, "
        f"C*(theta) = {c_star:.2f}"
    )


def _builder(name: str) -> Callable[[Path, int, int], str]:
    def builder(out: Path, rounds: int, seed: int) -> str:
        return write_scenario(name, out, seed)

    builder.__doc__ = f"Scenario file {name!r} (JSON; rounds ignored)."
    return builder


NAMES = [
    f"{graph}{suffix}"
    for graph in ("er", "clique", "revealing", "random")
    for suffix in ("", "-cascade")
] + ["revealing-wide"]
LOGS = {f"prob-graph-{name}": _builder(name) for name in NAMES}
