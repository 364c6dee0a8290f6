#!/usr/bin/env bash
# The parallel layouts on one GPU (issue 17, point 6), after test_gpu_train.sh's single-GPU
# parity: 10 bf16 steps of tests/configs/tiny.yaml (4 layers, 2 heads) on CUDA for each of
#   recompute        parallel.recompute full, one rank (also bitwise as without it)
#   zero3            dp 2, ZeRO-3 (parameters gathered per layer)
#   pp2_interleaved  pp 2, the interleaved schedule with 2 virtual stages
#   tp2_sp           tp 2 with sequence parallelism
# against the single-process CPU run of the same model and batches: losses and evaluation
# losses within bf16's 2e-2 (as test_gpu_train.sh's bf16 pair); and against the single-GPU
# run within 2e-3, where only the layout's orders of summation differ (on the CPU the layouts
# stay within 3e-6 of one process; a different initialisation is 4e-3 off, an update twice
# as large 4e-2). The ranks of a layout share the GPU, so they talk over MPI staged through
# host memory (system.comm mpi; NCCL refuses a GPU shared by two ranks).
# Then Llama (issue 18): model.arch llama (d_model 128, 2 query heads of 64 sharing 1 kv head:
# grouped-query attention on the FA2 kernels; RMSNorm, RoPE, SwiGLU on CUDA's own kernels),
# 10 bf16 steps on one GPU against the CPU within bf16's 2e-2, with the default attention
# kernels and again with TRIDENT_CUDA_ATTN=v1 (the previous ones, kept for bisecting).
# Then NCCL on the one GPU, under the test hook TRIDENT_TEST_NCCL_ONE_RANK=1 (every group a
# one-rank communicator, which the comm layer calls instead of answering groups of one
# itself): `trident comm-test --backend cuda --comm nccl` checks every collective (sum, max,
# reduce-scatter, all-gather, broadcast, barrier, in place, bf16, the non-blocking forms) on
# every group, and the single-GPU bf16 run through NCCL must write the same metrics and model
# as the same run without a comm backend, bitwise (a one-rank collective moves nothing).
#
#   tests/gpu/test_gpu_layouts.sh          on a GPU (tests/gpu/run.sh runs it)
#   tests/gpu/test_gpu_layouts.sh --cpu    the same runs and checks with system.backend cpu
#                                          in CUDA's place, NCCL's skipped: checks the script
#                                          and the layouts' configs on a machine without a GPU
# Prints PASS/FAIL lines. TRIDENT_BIN names the binary (default build/trident).
set -u
source "$(dirname "$0")/../lib.sh"
DEV=cuda
[ "${1:-}" = --cpu ] && DEV=cpu
# A python3 with numpy (tests/parity.py): Debian's here, the PyTorch environment's there.
PY=${PYTHON:-$(for p in /usr/bin/python3 python3; do
    "$p" -c 'import numpy' 2>/dev/null && { echo "$p"; break; }; done)}
untimed() {
    grep '"type":"step"\|"type":"eval"' "$1" |
        sed -E 's/"(step_ms|tokens_per_s|mfu|plan_ratio|bubble|mem_peak_bytes)":[^,}]*//g'
}
BF16=(--set train.steps=10 --set log.every=1 --set data.eval_every=5 --set checkpoint.resume=none
      --set model.n_layer=4 --set model.n_head=2 --set train.precision=bf16)

# parity NAME REF RUN TOL: the run's losses and evaluation losses against the reference's.
parity() {
    local out
    if out=$("$PY" - "$2" "$3" "$DEV" "$4" <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import errors
loss, norm, ev, param, b, run = errors(sys.argv[1], sys.argv[2], steps=10)
tol = float(sys.argv[4])
print('backend %s, comm %s: loss %.2e, val_loss %.2e (tolerance %g); grad_norm %.2e, '
      'final params %.2e' % (run.get('backend'), run.get('comm'), loss, ev, tol, norm, param))
sys.exit(0 if run.get('backend') == sys.argv[3] and loss <= tol and ev <= tol else 1)
PY
    ); then pass "$1 $out"; else fail "$1" "$out"; fi
}

# The references: one process on the CPU, and on the GPU.
for ref in "ref cpu" "one $DEV"; do
    set -- $ref
    if ! $T train $CFG "${BF16[@]}" --set system.backend=$2 --set run.out_dir=$W/$1 >$W/$1.log 2>&1
    then
        fail gpu_layouts_reference_$1 "$(tail -3 $W/$1.log | tr '\n' ' ')"
        exit 1
    fi
done

# name ranks settings...
for layout in "recompute 1 --set parallel.recompute=full" \
              "zero3 2 --set parallel.zero=3" \
              "pp2_interleaved 2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2" \
              "tp2_sp 2 --set parallel.tp=2 --set parallel.sequence_parallel=true"; do
    set -- $layout
    name=$1 np=$2
    shift 2
    launch=("${MPIRUN[@]}" -np $np)
    [ $np = 1 ] && launch=()
    if "${launch[@]}" $T train $CFG "${BF16[@]}" --set system.backend=$DEV --set system.comm=mpi \
            "$@" --set run.out_dir=$W/$name >$W/$name.log 2>&1; then
        parity gpu_layout_${name}_bf16 $W/ref $W/$name 2e-2
        parity gpu_layout_${name}_bf16_vs_one_gpu $W/one $W/$name 2e-3
        if [ $name = recompute ]; then # recomputing the forward changes no bit
            if cmp -s <(untimed $W/one/metrics.jsonl) <(untimed $W/$name/metrics.jsonl) &&
                cmp -s $W/one/model.bin $W/$name/model.bin; then pass gpu_layout_recompute_bitwise
            else fail gpu_layout_recompute_bitwise "metrics or model.bin differ from the run without"; fi
        fi
    else fail gpu_layout_${name}_bf16 "$(tail -3 $W/$name.log | tr '\n' ' ')"; fi
done

# Llama: one process on the CPU, then on the device with each attention kernel set.
LLAMA=("${BF16[@]}" --set model.arch=llama --set model.d_model=128 --set model.n_kv_head=1)
if $T train $CFG "${LLAMA[@]}" --set system.backend=cpu --set run.out_dir=$W/llama_ref \
        >$W/llama_ref.log 2>&1; then
    for attn in fa2 v1; do
        if TRIDENT_CUDA_ATTN=$attn $T train $CFG "${LLAMA[@]}" --set system.backend=$DEV \
                --set run.out_dir=$W/llama_$attn >$W/llama_$attn.log 2>&1; then
            # tests/parity.py's command form: a llama run writes no model.bin to compare
            if out=$("$PY" tests/parity.py $W/llama_ref $W/llama_$attn loss=2e-2 val=2e-2 \
                    steps=10) && grep -q "\"backend\":\"$DEV\"" $W/llama_$attn/metrics.jsonl
            then pass "gpu_llama_${attn}_bf16 backend $DEV: $out"
            else fail gpu_llama_${attn}_bf16 "$out"; fi
        else fail gpu_llama_${attn}_bf16 "$(tail -3 $W/llama_$attn.log | tr '\n' ' ')"; fi
    done
else fail gpu_llama_reference "$(tail -3 $W/llama_ref.log | tr '\n' ' ')"; fi

if [ $DEV = cpu ]; then
    echo "# --cpu: NCCL on one GPU skipped (comm-test --comm nccl and the bf16 run through NCCL)"
    [ $fails = 0 ]
    exit
fi

# NCCL on one GPU: one-rank communicators for every group (the test hook).
TRIDENT_TEST_NCCL_ONE_RANK=1 $T comm-test --backend cuda --comm nccl --bytes 8:4M --iters 5 \
    >$W/nccl_comm_test.log 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^# comm-test: world 1 .* comm nccl, backend cuda' $W/nccl_comm_test.log &&
        grep -q '^comm-test: OK, 0 wrong elements' $W/nccl_comm_test.log; then
    pass "gpu_nccl_one_rank_comm_test $(grep -c '^ ' $W/nccl_comm_test.log) rows, 0 wrong"
else fail gpu_nccl_one_rank_comm_test "exit $rc: $(grep -E 'wrong|error|FAIL' $W/nccl_comm_test.log | head -3 | tr '\n' ' ')"; fi

if TRIDENT_TEST_NCCL_ONE_RANK=1 $T train $CFG "${BF16[@]}" --set system.backend=cuda \
        --set system.comm=nccl --set run.out_dir=$W/nccl >$W/nccl.log 2>&1; then
    if grep -q '"comm":"nccl"' $W/nccl/metrics.jsonl &&
            cmp -s <(untimed $W/one/metrics.jsonl) <(untimed $W/nccl/metrics.jsonl) &&
            cmp -s $W/one/model.bin $W/nccl/model.bin; then
        pass gpu_nccl_one_rank_train_bitwise
    else fail gpu_nccl_one_rank_train_bitwise "the run through NCCL differs from the one without (or did not use NCCL: $(grep -o '"comm":"[^"]*"' $W/nccl/metrics.jsonl | head -1))"; fi
else fail gpu_nccl_one_rank_train_bitwise "$(tail -3 $W/nccl.log | tr '\n' ' ')"; fi
[ $fails = 0 ]
