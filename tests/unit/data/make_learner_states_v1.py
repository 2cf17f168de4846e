"""Writes ``learner_states_v1.json``: states and decisions of every algorithm as the learners
before the declared params and state records (commit ccf218d) wrote them, read back by
``tests/unit/test_learner_states_v1.py``.

Run it with that commit's packages first on the path, e.g.::

    git archive ccf218d | tar -x -C /tmp/old   # and map its folders into /tmp/oldpkg/banditflow
    PYTHONPATH=/tmp/oldpkg python tests/unit/data/make_learner_states_v1.py /tmp/old
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from banditflow.learners.registry import make_learner
from banditflow.processors.redo import LazyGenerator

ROUNDS, NEXT, SEED = 100, 10, 7


def main(tree: Path) -> None:
    sys.path.insert(0, str(tree / "tests" / "unit"))
    import test_learner_contract as contract  # the contract suite's environments

    cases = [(family, name, {**contract.FAMILY[family].params,
                             **contract.PARAMS.get((family, name), {})})
             for family, name in contract.CASES]
    cases += [
        ("conformal", "sps", {"target_coverage": 0.8, "horizon": 1000}),
        ("graph_cb", "squarecb_g", {**contract.FAMILY["graph_cb"].params, "warm_start": False}),
        ("graph_cb", "squarecb", {**contract.FAMILY["graph_cb"].params, "update": "rls"}),
        ("deferral", "ucb", {**contract.FAMILY["deferral"].params, "link": "logistic"}),
        ("prob_graph", "lp_policy", {**contract.FAMILY["prob_graph"].params,
                                     "case": "cascade", "mc_samples": 20}),
    ]
    written = []
    for family, name, params in cases:
        learner = make_learner(family, name, params)
        contract.drive(learner, family, ROUNDS, SEED)
        state = learner.to_state()
        rng = __import__("numpy").random.default_rng(SEED + 1)
        contexts = [contract.FAMILY[family].context(rng) for _ in range(NEXT)]
        outputs = [learner.decide(context, LazyGenerator(SEED, f"next{i}")).output
                   for i, context in enumerate(contexts)]
        written.append({"family": family, "algorithm": name, "params": params,
                        "state": state, "contexts": contexts, "outputs": outputs,
                        "state_after": learner.to_state()})
    out = Path(__file__).with_name("learner_states_v1.json")
    out.write_bytes(orjson.dumps(written, option=orjson.OPT_SERIALIZE_NUMPY))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
