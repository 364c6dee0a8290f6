#!/usr/bin/env bash
# Single-GPU training parity (issue 9, point 5): tests/configs/tiny.yaml for 10 steps with
# system.backend=cpu and with system.backend=cuda, same weights (the init is a pure function
# of the seed) and same batches; in fp32 the losses must agree within 1e-4 relative at every
# step, and the evaluation losses too. Gradient norms and the final parameters are printed
# (not checked: 10 AdamW steps amplify rounding differences in tiny gradient components).
# The same pair under train.precision bf16 (bf16 tensor-core matmuls on CUDA, the operands
# widened on the CPU) must agree within 2e-2, and train.precision tf32 (TF32 tensor-core
# matmuls) with the CPU's fp32 within 1e-2. Then a second CUDA run must write the same lines
# bitwise, timing fields aside (DESIGN.md "Metrics"); the CUDA run's steps must make no device
# allocation (issue 17: the count at TRIDENT_LOG=debug) and its MFU must be against the
# device table's peak of the precision; 4 ranks sharing the GPU with system.comm auto must
# find that out (one warning), stage MPI and follow the single-GPU run within bf16's tolerance
# (tp2 x dp2, ZeRO-2, bf16); system.comm nccl there must be refused (exit 2). Prints
# PASS/FAIL lines. TRIDENT_BIN names the binary (default build/trident).
set -u
source "$(dirname "$0")/../lib.sh"
# A python3 with numpy (tests/parity.py): Debian's here, the PyTorch environment's there.
PY=${PYTHON:-$(for p in /usr/bin/python3 python3; do
    "$p" -c 'import numpy' 2>/dev/null && { echo "$p"; break; }; done)}
untimed() {
    grep '"type":"step"\|"type":"eval"' "$1" |
        sed -E 's/"(step_ms|tokens_per_s|mfu|plan_ratio|bubble|mem_peak_bytes)":[^,}]*//g'
}
COMMON=(--set train.steps=10 --set log.every=1 --set data.eval_every=5 --set checkpoint.resume=none)
ran=1
for be in cpu cuda cuda2 cpu_bf16 cuda_bf16 cuda_tf32; do
    prec=fp32; case $be in *_bf16) prec=bf16;; *_tf32) prec=tf32;; esac
    backend=${be%_*}
    log_level=info; [ $be = cuda ] && log_level=debug # the allocation count
    if TRIDENT_LOG=$log_level $T train $CFG "${COMMON[@]}" --set system.backend=${backend%2} \
            --set train.precision=$prec --set run.out_dir=$W/$be >$W/$be.log 2>&1; then
        pass "gpu_train_run_$be"
    else fail "gpu_train_run_$be" "$(tail -3 $W/$be.log | tr '\n' ' ')"; ran=0; fi
done
[ $ran = 1 ] || exit 1

if out=$("$PY" - $W/cpu $W/cuda <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import errors, rows
loss, norm, ev, param, b, run = errors(sys.argv[1], sys.argv[2], steps=10)
print('backend %s: loss %.2e, val_loss %.2e (tolerance 1e-4); grad_norm %.2e, final params %.2e'
      % (run.get('backend'), loss, ev, norm, param))
for a, c in zip(rows(sys.argv[1], 'step'), b):
    print('  step %2d loss cpu %.7f cuda %.7f' % (a['step'], a['loss'], c['loss']), file=sys.stderr)
sys.exit(0 if run.get('backend') == 'cuda' and loss <= 1e-4 and ev <= 1e-4 else 1)
PY
); then pass "gpu_train_parity $out"; else fail gpu_train_parity "$out"; fi

if out=$("$PY" - $W/cpu_bf16 $W/cuda_bf16 <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import errors
loss, norm, ev, param, b, run = errors(sys.argv[1], sys.argv[2], steps=10)
print('bf16: loss %.2e, val_loss %.2e (tolerance 2e-2); grad_norm %.2e, final params %.2e'
      % (loss, ev, norm, param))
sys.exit(0 if run.get('backend') == 'cuda' and loss <= 2e-2 and ev <= 2e-2 else 1)
PY
); then pass "gpu_train_parity_bf16 $out"; else fail gpu_train_parity_bf16 "$out"; fi

if out=$("$PY" - $W/cpu $W/cuda_tf32 <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import errors
loss, norm, ev, param, b, run = errors(sys.argv[1], sys.argv[2], steps=10)
print('tf32 against the CPU fp32: loss %.2e, val_loss %.2e (tolerance 1e-2)' % (loss, ev))
sys.exit(0 if run.get('backend') == 'cuda' and loss <= 1e-2 and ev <= 1e-2 else 1)
PY
); then pass "gpu_train_parity_tf32 $out"; else fail gpu_train_parity_tf32 "$out"; fi

# Issue 17: no device allocation inside the steps; the MFU's peak from the device table.
if grep -q '^cuda backend: 0 device allocations inside the 10 training steps' $W/cuda.log &&
    ! grep -q 'workspace grows' $W/cuda.log; then pass gpu_train_no_step_allocations
else fail gpu_train_no_step_allocations "$(grep -E 'allocations|grows' $W/cuda.log | head -3 | tr '\n' ' ')"; fi
if grep -q "dense fp32 peak" $W/cuda.log && grep -q "dense bf16 peak" $W/cuda_bf16.log &&
    grep -q "dense tf32 peak" $W/cuda_tf32.log; then pass "gpu_train_mfu_peak $(grep -h 'MFU against' $W/cuda_tf32.log)"
else fail gpu_train_mfu_peak "$(grep -h 'MFU against' $W/cuda*.log | head -3 | tr '\n' ' ')"; fi

if cmp -s <(untimed $W/cuda/metrics.jsonl) <(untimed $W/cuda2/metrics.jsonl) &&
        cmp -s $W/cuda/model.bin $W/cuda2/model.bin; then pass gpu_train_repeatable_bitwise
else fail gpu_train_repeatable_bitwise "two CUDA runs differ (metrics or model.bin)"; fi

# Several ranks on the one GPU (NCCL refuses that): system.comm auto must see it (the ranks'
# bus ids) and stage through the host, saying so once. tp2 x dp2 with ZeRO-2 and bf16
# against the single-GPU run of the same config.
MULTI=("${COMMON[@]}" --set model.n_head=2 --set train.precision=bf16 --set system.backend=cuda)
if $T train $CFG "${MULTI[@]}" --set run.out_dir=$W/one >$W/one.log 2>&1 &&
        "${MPIRUN[@]}" -np 4 $T train $CFG "${MULTI[@]}" --set system.comm=auto --set parallel.tp=2 \
        --set parallel.zero=2 --set run.out_dir=$W/four >$W/four.log 2>&1; then
    if [ "$(grep -c 'both use GPU .* which NCCL refuses' $W/four.log)" = 1 ] &&
        grep -q '"comm":"mpi (staged)"' $W/four/metrics.jsonl; then pass gpu_shared_gpu_detected
    else fail gpu_shared_gpu_detected "$(grep -E 'warning|comm' $W/four.log | head -3 | tr '\n' ' ')"; fi
    if out=$("$PY" - $W/one $W/four <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import errors
loss, norm, ev, param, b, run = errors(sys.argv[1], sys.argv[2], steps=10)
print('4 ranks on one GPU (%s) vs 1: loss %.2e, val_loss %.2e' % (run.get('comm'), loss, ev))
sys.exit(0 if loss <= 2e-2 and ev <= 2e-2 else 1)
PY
    ); then pass "gpu_multirank_one_gpu $out"; else fail gpu_multirank_one_gpu "$out"; fi
else fail gpu_multirank_one_gpu "$(tail -3 $W/four.log | tr '\n' ' ')"; fi
"${MPIRUN[@]}" -np 2 $T train $CFG "${MULTI[@]}" --set system.comm=nccl --set parallel.tp=2 \
    --set run.out_dir=$W/nccl2 >$W/nccl2.log 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "system.comm: nccl, but ranks 0 and 1 both use GPU" $W/nccl2.log; then
    pass gpu_shared_gpu_nccl_refused
else fail gpu_shared_gpu_nccl_refused "exit $rc: $(tail -3 $W/nccl2.log | tr '\n' ' ')"; fi
[ $fails = 0 ]
