#!/usr/bin/env bash
# Pipeline schedules side by side: 1f1b, interleaved (2 virtual stages), zb-h1 and zbv (2
# chunks in a V) on the same model, batch and steps, each pipeline rank pinned to its own core
# (mpirun --bind-to core, system.threads 1).
#   scripts/bench-pipeline.sh [CONFIG=configs/bench-pipe.yaml] [STEPS=12] [SCHEDULES...]
# Per schedule, the medians over steps 3..STEPS (steps 1-2 warm up) of rank 0's step line:
#   step ms      the step time
#   idle         the measured fraction of the step rank 0 waited on other stages ("bubble")
#   formula      the schedule's idle fraction at unit times F = B = W and equal stages
#                (sched_bubble_fraction), the same on every rank
#   simulated    rank 0's idle in every rank's table simulated by `trident plan --fbw` with the
#                F:B:W ratios measured here (pass_ms) and the planner's per-stage compute (the
#                LM head's stage heavier): the idle the schedule and the imbalance explain with
#                free messages; measured - simulated is what communication and timing noise add
#   F / B / W    rank 0's mean ms per action
# No thresholds: it prints numbers. Needs 2 free cores for pp 2 (pp cores in general).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/bench-pipe.yaml}
STEPS=${2:-12}
shift 2 2>/dev/null || shift $# 
SCHEDULES=("$@")
[ ${#SCHEDULES[@]} -gt 0 ] || SCHEDULES=(1f1b interleaved zb-h1 zbv)
[ -x build/trident ] || { echo "bench-pipeline: build/trident missing; run make" >&2; exit 1; }
PP=$(build/trident plan "$CONFIG" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["mesh"]["pp"])')
LOG=$(mktemp -d /tmp/trident-bench-pipe.XXXXXX)
echo "bench-pipeline: $CONFIG, pp $PP, $STEPS steps, one rank per core; logs in $LOG" >&2
ROOT=()
[ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)
printf '%-12s %3s %9s %7s %8s %10s %8s %8s %8s\n' schedule v "step ms" idle formula simulated "F ms" "B ms" "W ms"
for s in "${SCHEDULES[@]}"; do
    v=1
    case $s in interleaved | zbv) v=2 ;; esac
    out=$LOG/$s
    if ! OPENBLAS_NUM_THREADS=1 timeout 900 mpirun "${ROOT[@]}" -np "$PP" --bind-to core --map-by core \
            -x OPENBLAS_NUM_THREADS build/trident train "$CONFIG" --set parallel.schedule=$s \
            --set parallel.virtual_stages=$v --set train.steps=$STEPS --set system.threads=1 \
            --set run.out_dir=$out >$LOG/$s.log 2>&1; then
        echo "bench-pipeline: $s failed; see $LOG/$s.log" >&2
        tail -3 $LOG/$s.log >&2
        continue
    fi
    /usr/bin/python3 scripts/bench_pipeline.py "$s" "$v" "$out/metrics.jsonl" "$CONFIG"
done
