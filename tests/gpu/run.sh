#!/usr/bin/env bash
# What `make test-gpu` runs (scripts/gpu-check.sh runs it too, on binaries built elsewhere):
#   tests/gpu/run.sh [--self-test] [BUILD [PART...]]
# BUILD holds trident and tests/gpu/ (default build); the PARTs (default: all three, in this
# order) are
#   ops    every op row below model size on CUDA against the CPU backend, with gradient
#          checks, and the conversion ops against bf16.h (test_gpu_ops --small, which also
#          prints the table of largest errors per op; attention on the default FA2 kernels),
#          then those attention rows again on the v1 kernels (TRIDENT_CUDA_ATTN=v1: kept
#          selectable until FA2 is proven, so that a failure bisects to one set), and the
#          matmul rows again with every cuBLASLt fallback forced (TRIDENT_TEST_CUDA_FALLBACK=1:
#          bias broadcast and column sums, the GELU kernels, the bf16 fallback GEMM); then the
#          multi-tensor gradient norm and AdamW against the CPU's per-piece ops (test_gpu_optim)
#   model  the model-sized rows (CASE_TWIN_ONLY in tests/op_cases.h: matmuls whose weight
#          gradients reduce over 16K-64K rows, over micro-batches too, the LM head at OC 50304,
#          attention at T 1024 and 2048 per head size, FA2 then v1, cross-entropy and the
#          embedding at V 50304, the Llama ops and GQA attention at Llama 3 8B's shapes),
#          against the CPU backend only: the CPU is the slow side
#   train  the training parity runs: test_gpu_train.sh (one GPU against the CPU, fp32 and
#          bf16, bitwise repeatable, 4 ranks sharing the GPU), then test_gpu_layouts.sh
#          (recompute, ZeRO-3, pp2 interleaved, tp2 with SP, each on the GPU against the CPU
#          in bf16; a bf16 llama with grouped-query attention on the FA2 and the v1 kernels;
#          NCCL on one GPU: every collective of comm-test, a run bitwise as without)
# --self-test: the same with the CPU backend in CUDA's place where a script has such a mode
# (test_gpu_ops --self-test, test_gpu_layouts.sh --cpu; test_gpu_train.sh is skipped): the
# harness and the scripts checked on a machine without a GPU.
# Prints PASS/FAIL lines and the closing "N passed, N failed".
set -u -o pipefail
cd "$(dirname "$0")/../.."
SELF=()
LAYOUTS=()
[ "${1:-}" = --self-test ] && { SELF=(--self-test); LAYOUTS=(--cpu); shift; }
BUILD=${1:-build}
[ $# -gt 0 ] && shift
PARTS=" ${*:-ops model train} "
export TRIDENT_BIN=$BUILD/trident
unset TRIDENT_CUDA_TF32 # the checks are fp32's
unset TRIDENT_CUDA_ATTN  # the default kernels first
log=$(mktemp)
status=0
ops="$BUILD/tests/gpu/test_gpu_ops"
if [[ "$PARTS" == *" ops "* ]]; then
    "$ops" "${SELF[@]}" --small 2>&1 | tee -a "$log" || status=1
    TRIDENT_CUDA_ATTN=v1 "$ops" "${SELF[@]}" --attention --small 2>&1 | tee -a "$log" || status=1
    TRIDENT_TEST_CUDA_FALLBACK=1 "$ops" "${SELF[@]}" --matmuls --small 2>&1 | tee -a "$log" ||
        status=1
    "$BUILD/tests/gpu/test_gpu_optim" "${SELF[@]}" 2>&1 | tee -a "$log" || status=1
fi
if [[ "$PARTS" == *" model "* ]]; then
    "$ops" "${SELF[@]}" --model-size 2>&1 | tee -a "$log" || status=1
    TRIDENT_CUDA_ATTN=v1 "$ops" "${SELF[@]}" --attention --model-size 2>&1 | tee -a "$log" ||
        status=1
fi
if [[ "$PARTS" == *" train "* ]]; then
    if [ ${#SELF[@]} = 0 ]; then bash tests/gpu/test_gpu_train.sh 2>&1 | tee -a "$log" || status=1
    else echo "# --self-test: test_gpu_train.sh skipped (it has no CPU mode)"; fi
    bash tests/gpu/test_gpu_layouts.sh "${LAYOUTS[@]}" 2>&1 | tee -a "$log" || status=1
fi
passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
echo "$passed passed, $failed failed"
rm -f "$log"
[ "$failed" = 0 ] && [ "$status" = 0 ]
