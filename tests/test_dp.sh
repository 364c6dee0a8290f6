#!/usr/bin/env bash
# Data-parallel training under mpirun against the single-process run on the same global
# batch: losses and gradient norms step by step, the final model, the dp bytes per step,
# and the launch-time config errors of a multi-process job. Prints PASS/FAIL lines.
set -u
cd "$(dirname "$0")/.."
T=${TRIDENT_BIN:-build/trident}
CFG=tests/configs/tiny.yaml
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS=1
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
COMMON=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=8 --set system.threads=1 --set data.eval_every=10)

if $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/ref >$W/ref.log 2>&1; then pass dp_reference_run
else fail dp_reference_run "$(tail -2 $W/ref.log | tr '\n' ' ')"; fi

for dp in 2 4; do
    if "${MPIRUN[@]}" -np $dp $T train $CFG "${COMMON[@]}" --set parallel.zero=0 --set run.out_dir=$W/dp$dp >$W/dp$dp.log 2>&1; then
        pass dp${dp}_run
    else fail dp${dp}_run "$(tail -3 $W/dp$dp.log | tr '\n' ' ')"; continue; fi
    # Losses within 1e-5 relative, gradient norms within 1e-4, val losses within 1e-5, the final
    # parameters within 1e-4 of the largest, and dp bytes = all-reduce of every gradient
    # (4 bytes per parameter) plus the 8-byte loss sum, per step.
    if out=$(/usr/bin/python3 - $W/ref $W/dp$dp $dp <<'PY'
import json, sys, numpy as np
ref, run, dp = sys.argv[1], sys.argv[2], int(sys.argv[3])
def rows(d, kind): return [json.loads(l) for l in open(d + '/metrics.jsonl') if '"type":"%s"' % kind in l]
a, b = rows(ref, 'step'), rows(run, 'step')
assert len(a) == len(b) == 20, (len(a), len(b))
loss = max(abs(x['loss'] - y['loss']) / abs(x['loss']) for x, y in zip(a, b))
norm = max(abs(x['grad_norm'] - y['grad_norm']) / abs(x['grad_norm']) for x, y in zip(a, b))
ev = max(abs(x['val_loss'] - y['val_loss']) / x['val_loss'] for x, y in zip(rows(ref, 'eval'), rows(run, 'eval')))
pa = np.fromfile(ref + '/model.bin', dtype=np.float32)[256:]
pb = np.fromfile(run + '/model.bin', dtype=np.float32)[256:]
param = np.abs(pa - pb).max() / np.abs(pa).max()
n_params = json.loads(open(run + '/metrics.jsonl').readline())['n_params']
want = 4 * n_params + 8
bytes_ok = all(r['comm_bytes']['dp'] == want for r in b)
print('loss %.2e norm %.2e val %.2e param %.2e dp_bytes %d (want %d)' % (loss, norm, ev, param, b[-1]['comm_bytes']['dp'], want))
sys.exit(0 if loss <= 1e-5 and norm <= 1e-4 and ev <= 1e-5 and param <= 1e-4 and bytes_ok else 1)
PY
); then pass "dp${dp}_parity $out"; else fail dp${dp}_parity "$out"; fi
done

# A world that does not factor: one message (from rank 0 only), exit 2 on every rank.
"${MPIRUN[@]}" -np 3 $T train $CFG --set parallel.tp=2 --set run.out_dir=$W/bad >$W/bad.log 2>&1
rc=$?
n=$(grep -c "parallel.tp" $W/bad.log)
if [ $rc = 2 ] && [ "$n" = 1 ]; then pass launch_world_not_factoring
else fail launch_world_not_factoring "exit $rc, $n messages naming parallel.tp: $(head -3 $W/bad.log | tr '\n' ' ')"; fi
# Lines from ranks != 0 carry the [rN tpX dpY ppZ] prefix.
TRIDENT_LOG=debug "${MPIRUN[@]}" -np 2 $T train $CFG --set parallel.zero=0 --set train.steps=1 --set run.out_dir=$W/pfx --set model.init_from=$W/missing.bin >$W/pfx.log 2>&1
if grep -q '^\[r1 tp0 dp1 pp0\] error: cannot open model file' $W/pfx.log; then pass log_rank_prefix
else fail log_rank_prefix "$(grep -m2 error $W/pfx.log | tr '\n' ' ')"; fi
[ $fails = 0 ]
