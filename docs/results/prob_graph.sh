#!/usr/bin/env bash
# Regenerates every number and figure of docs/results/prob_graph.md.
#
#   docs/results/prob_graph.sh            # everything (~35 min on 2 busy cores)
#   JOBS=4 docs/results/prob_graph.sh     # more parallel jobs
#   STEPS=report docs/results/prob_graph.sh   # only re-aggregate existing runs
#
# Steps: scenarios (banditflow make-log prob-graph-*), direct (the learners alone, long
# horizons), wide (a 40-arm revealing graph), choice (lp_policy with lp_choice=ratio),
# evaluate (banditflow evaluate: the same rounds through the worker's processors, shorter),
# report (tables, results.json and PNGs into docs/results/prob_graph/).
# Raw runs (trajectory.jsonl per run) stay in $WORK; only aggregates are committed.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python}
BF=${BF:-.venv/bin/banditflow}
WORK=${WORK:-/tmp/banditflow-prob-graph}
OUT=docs/results/prob_graph
JOBS=${JOBS:-2}
STEPS=${STEPS:-scenarios direct wide choice evaluate report}
NICE="nice -n 10"
NAMES="revealing revealing-cascade er er-cascade clique clique-cascade random random-cascade"
LEARNERS="lp_policy ucb_n thompson"
# Horizons and seeds (chosen for 2 cores shared with other jobs; see the report):
T_LONG=${T_LONG:-100000}      # revealing graph, lp_policy and ucb_n, LONG_SEEDS, direct
LONG_SEEDS=${LONG_SEEDS:-0-9}
T_REVEAL=${T_REVEAL:-10000}   # revealing graph (both cases), 10 seeds, direct
T_MID=${T_MID:-3000}          # the other six scenarios, 10 seeds, direct
SEEDS=${SEEDS:-0-9}
T_EVAL=${T_EVAL:-1000}        # every scenario through the processors (banditflow evaluate)
EVAL_SEEDS=${EVAL_SEEDS:-0,1,2}

has_step() { [[ " $STEPS " == *" $1 "* ]]; }
mkdir -p "$WORK/scenarios" "$OUT/scenarios"

if has_step scenarios; then
  for name in $NAMES revealing-wide; do
    $BF make-log "prob-graph-$name" --seed 0 --out "$OUT/scenarios/$name.json"
  done
fi

simulate() {  # scenario learners seeds horizon out-dir [extra simulate options]
  $NICE "$PY" -m streams.evaluation.prob_graph simulate --scenario "$OUT/scenarios/$1.json" \
    --learners "$2" --seeds "$3" --horizon "$4" --out "$5/$1" "${@:6}"
}
export -f simulate
export NICE PY OUT WORK

if has_step direct; then
  # The long revealing-graph runs in the background, one process per learner ...
  for learner in lp_policy ucb_n; do
    simulate revealing "$learner" "$LONG_SEEDS" "$T_LONG" "$WORK/direct-long" &
  done
  # ... and one job per (scenario, learner) for the 10-seed runs.
  for name in $NAMES; do
    horizon=$T_MID
    [[ $name == revealing* ]] && horizon=$T_REVEAL
    for learner in $LEARNERS; do echo "$name $learner $SEEDS $horizon"; done
  done | xargs -P "$JOBS" -L 1 bash -c 'simulate "$0" "$1" "$2" "$3" "$WORK/direct"'
  wait
fi

if has_step wide; then
  # The revealing graph with 40 arms: UCB-N's cost grows with K, the LP policy's does not.
  for learner in $LEARNERS; do echo "revealing-wide $learner $SEEDS $T_REVEAL"; done |
    xargs -P "$JOBS" -L 1 bash -c 'simulate "$0" "$1" "$2" "$3" "$WORK/direct"'
fi

if has_step choice; then
  # lp_policy with lp_choice=ratio (LP branch: smallest N_i / target_i) as "lp_ratio".
  for name in revealing revealing-wide er clique random; do
    horizon=$T_MID
    [[ $name == revealing* ]] && horizon=$T_REVEAL
    echo "$name lp_policy $SEEDS $horizon"
  done | xargs -P "$JOBS" -L 1 bash -c \
    'simulate "$0" "$1" "$2" "$3" "$WORK/direct" --param lp_choice=\"ratio\" --label lp_ratio'
fi

if has_step evaluate; then
  # The worker's code path: JSON events, schema validation, pending store, feedback join.
  for name in $NAMES; do
    for learner in $LEARNERS; do echo "$name $learner"; done
  done | xargs -P "$JOBS" -L 1 sh -c \
    "$NICE $BF evaluate --family prob_graph --learner \$1 --seed $EVAL_SEEDS \
       --scenario $OUT/scenarios/\$0.json --horizon $T_EVAL --quiet \
       --out $WORK/evaluate/\$0/\$1 > /dev/null"
fi

if has_step report; then
  $PY -m streams.evaluation.prob_graph report "$WORK/direct-long" "$OUT/long" \
    --learners lp_policy,ucb_n --at "$T_REVEAL"
  $PY -m streams.evaluation.prob_graph report "$WORK/direct" "$OUT/direct" \
    --learners lp_policy,lp_ratio,ucb_n,thompson --at "$T_EVAL"
  $PY -m streams.evaluation.prob_graph report "$WORK/evaluate" "$OUT/evaluate"
fi
