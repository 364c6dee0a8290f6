#!/usr/bin/env bash
# scripts/bench-threads.sh [STEPS] [REPEATS]: how steady the CPU backend's step time is when
# the cores are oversubscribed. Run by `make test-perf`; never a pass/fail check (the
# machine's other load decides the numbers).
#
# Trains tests/configs/tiny.yaml widened to a ~20 ms step (d_model 64, seq_len 64, 16
# sequences a step, no evaluation) for STEPS steps (default 30) in these scenarios:
#   alone       one process, system.threads = the cores
#   busy        the same, with one busy process per core (`yes >/dev/null`) started before it
#   ranks       as many ranks as cores (mpirun --bind-to none), system.threads = the cores
#               each: threads x ranks > cores, the machine oversubscribed by trident itself
#   auto-busy   one process, system.threads = 0 (trident's own choice), busy processes too
# each REPEATS times (default 3), the scenarios interleaved so that a burst of outside load
# lands on all of them. For each scenario it prints the step time (metrics.jsonl step_ms,
# step 1 left out: first touch of every buffer) pooled over the repeats: min (the speed when
# nothing interferes), median, p90, max and spread = max / median, then each repeat's max, which shows how noisy the machine was, and
# the load average before and after. With busy processes on every core a fair share is
# about half the machine, so a steady run's median is about twice the alone median and its
# max stays within a small factor of that median; a stall shows as a max of seconds.
#
# BENCH_BINS="NAME=PATH ..." measures several builds in the same rounds, interleaved (an
# older build against this one: BENCH_BINS="main=/tmp/trident-main new=build/trident"),
# default the one binary TRIDENT_BIN or build/trident; BENCH_SCENARIOS a subset ("alone
# busy"); extra arguments after REPEATS are passed to every run (--set k=v ...). The
# environment passes through, OMP_WAIT_POLICY and GOMP_SPINCOUNT also to mpirun's ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-30}
REPEATS=${2:-3}
shift $(($# < 2 ? $# : 2))
BINS=(${BENCH_BINS:-trident=${TRIDENT_BIN:-build/trident}})
for b in "${BINS[@]}"; do
    [ -x "${b#*=}" ] || { echo "bench-threads: ${b#*=} is not an executable (make first)" >&2; exit 2; }
done
CORES=$(nproc)
SCENARIOS=${BENCH_SCENARIOS:-alone busy ranks auto-busy}
W=$(mktemp -d)
busy_pids=()
stop_busy() {
    local p
    for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${busy_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    busy_pids=()
}
trap 'stop_busy; rm -rf "$W"' EXIT
start_busy() {
    local i
    for ((i = 0; i < CORES; i++)); do
        yes >/dev/null &
        busy_pids+=($!)
    done
    sleep 0.5 # let the scheduler see them as running before the first step
}
export OPENBLAS_NUM_THREADS=1
MPIRUN=(timeout 600 mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
# Environment variables of the OpenMP runtime pass through mpirun as set here.
for v in OMP_WAIT_POLICY GOMP_SPINCOUNT; do [ -n "${!v:-}" ] && MPIRUN+=(-x "$v"); done
SETS=(--set train.steps="$STEPS" --set model.d_model=64 --set model.seq_len=64
      --set train.micro_batch=8 --set train.global_batch=16 --set data.eval_every=0
      --set log.every=1 --set checkpoint.dir=null "$@")

run_one() { # name=binary scenario repeat
    local T=${1#*=} s=$2 r=$3 out=$W/${1%%=*}_$2_$3 launch=() threads=$CORES
    case $s in
    ranks) launch=("${MPIRUN[@]}" -np "$CORES") ;;
    auto-busy) threads=0 ;;
    esac
    case $s in *busy) start_busy ;; esac
    if ! "${launch[@]}" "$T" train tests/configs/tiny.yaml "${SETS[@]}" \
        --set run.out_dir="$out" --set system.threads=$threads >"$out.log" 2>&1; then
        stop_busy
        echo "bench-threads: the $s run failed:" >&2
        tail -5 "$out.log" >&2
        exit 1
    fi
    stop_busy
}

echo "bench-threads: ${BINS[*]}; $CORES cores, $STEPS steps x $REPEATS repeats; load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < REPEATS; r++)); do
    for s in $SCENARIOS; do
        for b in "${BINS[@]}"; do run_one "$b" "$s" "$r"; done
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$W" "$REPEATS" "${BINS[*]}" $SCENARIOS <<'PY'
import json, statistics, sys
w, repeats, scenarios = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
names = [b.split('=')[0] for b in sys.argv[3].split()]
print(f"{'build':<8} {'scenario':<10} {'threads':>7} {'min':>7} {'median':>8} {'p90':>8} "
      f"{'max':>8} {'spread':>7}   max of each repeat (ms)")
for s, name in ((s, name) for s in scenarios for name in names):
    pooled, maxes, threads = [], [], '?'
    for r in range(repeats):
        lines = [json.loads(l) for l in open(f'{w}/{name}_{s}_{r}/metrics.jsonl')]
        threads = lines[0].get('threads', '?')
        ms = [l['step_ms'] for l in lines if l['type'] == 'step' and l['step'] > 1]
        pooled += ms
        maxes.append(max(ms))
    pooled.sort()
    med = statistics.median(pooled)
    p90 = pooled[min(len(pooled) - 1, int(0.9 * len(pooled)))]
    print(f"{name:<8} {s:<10} {threads:>7} {pooled[0]:>7.1f} {med:>8.1f} {p90:>8.1f} {pooled[-1]:>8.1f} "
          f"{pooled[-1] / med:>7.1f}   " + ' '.join(f'{m:.0f}' for m in maxes))
PY
