#!/usr/bin/env bash
# Regenerates every number and figure of docs/results/deferral.md:
#   logs (banditflow make-log), runs (banditflow evaluate, through the worker's processors),
#   then docs/results/deferral/aggregate.py -> docs/results/deferral/{tables.md,results.json,*.png}.
# The aggregation fails if any run spent more than its budget.
# Raw runs go to $OUT (default runs/deferral, not committed). JOBS parallel runs (default 2).
# 33 runs (26 of 50,000 rounds): about 40 minutes on 2 busy shared cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
BF=.venv/bin/banditflow
PY=.venv/bin/python
OUT=${OUT:-runs/deferral}
JOBS=${JOBS:-2}
T=${T:-50000}
LOG_SEED=0
mkdir -p "$OUT/logs"

# The real-data scenario is shorter (its experts and model are fixed; 20,000 rounds suffice).
declare -A ROUNDS=([uniform]=$T [complementary]=$T [digits]=${T_DIGITS:-20000})
for setting in uniform complementary digits; do
  log="$OUT/logs/$setting-${ROUNDS[$setting]}.jsonl"
  [ -s "$log" ] || nice -n 10 "$BF" make-log "deferral-$setting" --rounds "${ROUNDS[$setting]}" \
    --seed "$LOG_SEED" --out "$log"
done

jobs="$OUT/jobs.txt"
: > "$jobs"
# Synthetic settings first (the paper's), then bandit feedback, then the real-data scenario.
for setting in uniform complementary; do
  n=${ROUNDS[$setting]}
  for budget in $((n / 8)) $((n / 4)) $((n / 2)) unlimited; do
    for learner in ucb arbitrary_human best_reject; do
      echo "$setting $learner $budget full" >> "$jobs"
    done
  done
  # ModelOnly never defers: one run serves every budget.
  echo "$setting model_only unlimited full" >> "$jobs"
done
# Bandit feedback (only the chosen arm's part) against full, for UCB.
for setting in uniform complementary digits; do
  echo "$setting ucb $((${ROUNDS[$setting]} / 4)) bandit" >> "$jobs"
done
n=${ROUNDS[digits]}
for budget in $((n / 8)) $((n / 4)); do
  for learner in ucb arbitrary_human best_reject; do
    echo "digits $learner $budget full" >> "$jobs"
  done
done
echo "digits model_only unlimited full" >> "$jobs"

run() {
  local setting=$1 learner=$2 budget=$3 feedback=$4
  declare -A ROUNDS=([uniform]=$T [complementary]=$T [digits]=$T_DIGITS)
  local dir="$OUT/runs/$setting-$learner-$budget-$feedback"
  local extra=()
  # UCB: the spec's warm-up of tau = 200 random rounds (without it, on the digits the model
  # arm's estimate outgrows the never-observed human's optimism and UCB never defers).
  [ "$learner" = ucb ] && extra=(--param warmup=200)
  if [ -s "$dir/summary.json" ]; then return 0; fi
  nice -n 10 "$BF" evaluate --family deferral --learner "$learner" --log "$OUT/logs/$setting-${ROUNDS[$setting]}.jsonl" \
    --budget "$budget" --feedback "$feedback" --seed 0 --quiet --out "$dir" "${extra[@]}" > /dev/null
  echo "done $setting $learner $budget $feedback"
}
export -f run
export BF OUT T T_DIGITS=${ROUNDS[digits]}
xargs -P "$JOBS" -L 1 bash -c 'run "$@"' _ < "$jobs"

"$PY" docs/results/deferral/aggregate.py "$OUT/runs" "${RESULTS:-docs/results/deferral}"
