#!/usr/bin/env bash
# scripts/refactor-snapshot.sh OUT_DIR: the behaviour of a fixed set of runs, written so that
# two builds can be compared with `diff -r BEFORE AFTER` (STYLE: a refactor keeps behaviour).
#
# Runs, each 20 steps of tests/configs/tiny.yaml (evaluation every 10, system.threads 1):
#   single      one process
#   tp2_sp      tp 2 with sequence parallelism
#   pp4_int     pp 4, interleaved, 2 virtual stages (8 layers)
#   dp4_zero3   dp 4, ZeRO-3, parallel.overlap on
#   3d_bf16     tp 2 x pp 2 x dp 2, bf16, ZeRO-2, full recompute
#   resume      10 steps on one process with a checkpoint, then resumed on tp 2 x dp 2 to 20
# and `trident plan --json` for configs/plan-70b.yaml on 512 ranks (h100 and h200).
# For each run OUT_DIR holds metrics.jsonl without its timing fields (step_ms, tokens_per_s,
# mfu, bubble, blocked_ms, mfu_peak_flops, straggler, pass_ms, plan_ratio) and the sha256 of the final model.bin. The runs
# write under /tmp/trident-snapshot so that the paths in the run records are the same.
set -euo pipefail
cd "$(dirname "$0")/.."
# One snapshot at a time on a machine: every copy of the tree writes the same paths.
if [ -z "${SNAPSHOT_LOCKED:-}" ]; then
    exec env SNAPSHOT_LOCKED=1 flock /tmp/trident-snapshot.lock "$0" "$@"
fi
out=${1:?usage: scripts/refactor-snapshot.sh OUT_DIR}
mkdir -p "$out"
T=${TRIDENT_BIN:-build/trident}
CFG=tests/configs/tiny.yaml
R=/tmp/trident-snapshot
rm -rf "$R" && mkdir -p "$R"
export OPENBLAS_NUM_THREADS=1
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
# The plain data order (data.shuffle: false): the order these runs had before shuffling was
# the default, so that snapshots from before and after compare.
COMMON=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=8
        --set system.threads=1 --set data.eval_every=10 --set data.shuffle=false)

run() { # name np [--set ...]
    local name=$1 np=$2
    shift 2
    local launch=()
    [ "$np" -gt 1 ] && launch=("${MPIRUN[@]}" -np "$np")
    "${launch[@]}" "$T" train $CFG "${COMMON[@]}" --set run.out_dir=$R/$name "$@" \
        >$R/$name.log 2>&1 || { echo "run $name failed:"; tail -5 $R/$name.log; exit 1; }
}
keep() { # name: normalised metrics and the model's digest into $out
    /usr/bin/python3 - "$R/$1/metrics.jsonl" >"$out/$1.jsonl" <<'PY'
import json, sys
timing = {'step_ms', 'tokens_per_s', 'mfu', 'bubble', 'blocked_ms', 'mfu_peak_flops', 'straggler',
          'pass_ms', 'plan_ratio'}
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({k: v for k, v in r.items() if k not in timing}, sort_keys=True))
PY
    if [ -f $R/$1/model.bin ]; then sha256sum <$R/$1/model.bin >"$out/$1.model.sha256"; fi
}

run single 1; keep single
run tp2_sp 2 --set parallel.tp=2 --set parallel.sequence_parallel=true; keep tp2_sp
run pp4_int 4 --set parallel.pp=4 --set parallel.virtual_stages=2 --set parallel.schedule=interleaved \
    --set model.n_layer=8; keep pp4_int
run dp4_zero3 4 --set parallel.zero=3 --set parallel.overlap=true --set train.micro_batch=1; keep dp4_zero3
run 3d_bf16 8 --set parallel.tp=2 --set parallel.pp=2 --set train.precision=bf16 --set parallel.zero=2 \
    --set parallel.recompute=full; keep 3d_bf16
run resume_a 1 --set train.steps=10 --set checkpoint.dir=$R/ck --set checkpoint.async=false
run resume 4 --set parallel.tp=2 --set checkpoint.dir=$R/ck; keep resume
$T plan configs/plan-70b.yaml --world 512 --json >"$out/plan70b_h100.json"
$T plan configs/plan-70b.yaml --world 512 --device h200 --json >"$out/plan70b_h200.json"
echo "snapshot in $out: $(ls "$out" | wc -l) files"
