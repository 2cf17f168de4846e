"""A graph_cb application for the README's archive / OPE example: 3,000 contexts in batches
of 100 to the learner "router" (SquareCB.G, 3 actions, bandit feedback), each batch's
decisions answered with their cost before the next batch is sent. The learner's config names
two candidate policies, which the worker evaluates live (its ``banditflow_ope_*`` gauges).

    python docs/examples/graph_cb_traffic.py [BOOTSTRAP]   (default 127.0.0.1:9092)
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
from kafka import KafkaConsumer, KafkaProducer

BOOTSTRAP = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9092"
LEARNER = "router"
producer = KafkaProducer(bootstrap_servers=BOOTSTRAP)
decisions = KafkaConsumer("banditflow.decisions", bootstrap_servers=BOOTSTRAP,
                          auto_offset_reset="earliest", consumer_timeout_ms=30000)


def send(topic, body):
    producer.send(f"banditflow.{topic}", key=LEARNER.encode(), value=json.dumps(body).encode())

PARAMS = {"actions": 3, "feature_dim": 2, "graph_kind": "bandit"}
# Two candidate policies the worker evaluates live on the learner's traffic (live OPE; they
# never change what the learner decides): router_epsilon_greedy.json's learner, and uniform.
# SquareCB.G with gamma 10 over 3 actions and losses in [0, 1] gives every action at least
# 1 / (3 + 10) of its draws, so the learning candidate's explore_eval_bound can be 0.05: it
# then learns from about 5 % of the rounds where it agrees with the log, never clipped.
CONFIG = Path(__file__).parent / "router_epsilon_greedy.json"  # (wherever it is run from)
EPSILON_GREEDY = {k: v for k, v in json.loads(CONFIG.read_text()).items() if k != "family"}
EPSILON_GREEDY["explore_eval_bound"] = 0.05
send("learners", {"learner_id": LEARNER, "family": "graph_cb", "algorithm": "squarecb_g",
                  "params": {**PARAMS, "gamma_schedule": "constant", "gamma": 10.0},
                  "candidates": {"epsilon_greedy": EPSILON_GREEDY,
                                 "uniform": {"algorithm": "epsilon_greedy",
                                             "params": {**PARAMS, "epsilon": 1.0}}}})

# Action a costs 1 with probability sigmoid(w_a . x + b_a), else 0 (reward = -cost).
w, b = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 0.5]]), np.array([0.0, 0.0, 0.3])
rng = np.random.default_rng(0)
started, answered = time.monotonic(), 0
for batch in range(30):  # 30 batches of 100 contexts, each answered before the next
    contexts = {f"e{batch}-{i}": rng.normal(size=2).round(4) for i in range(100)}
    for event_id, x in contexts.items():
        send("contexts", {"learner_id": LEARNER, "event_id": event_id, "features": x.tolist()})
    producer.flush()
    for record in decisions:
        decision = json.loads(record.value)
        if decision["event_id"] not in contexts:  # (an earlier run's, or a redelivery)
            continue
        action, x = decision["output"]["action"], contexts.pop(decision["event_id"])
        cost = float(rng.random() < 1 / (1 + np.exp(-(w[action] @ x + b[action]))))
        send("feedback", {"learner_id": LEARNER, "event_id": decision["event_id"],
                          "losses": {str(action): cost}})
        answered += 1
        if not contexts:
            break
    if contexts:
        sys.exit(f"{LEARNER}: no decision for {len(contexts)} contexts of batch {batch} within "
                 "30 s: is a worker running on this bootstrap?")
    if (batch + 1) % 10 == 0 and batch < 29:
        print(f"{LEARNER}: {answered:,} of 3,000 contexts answered", flush=True)
producer.flush()
print(f"{LEARNER}: {answered:,} contexts decided and answered in "
      f"{time.monotonic() - started:.1f} s")
