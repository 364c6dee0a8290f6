#!/usr/bin/env bash
# The backward's B/W split (tests/test_wsplit.c says what is compared: split and mixed B/W
# orders against model_backward, bitwise) where the one-process run of build/tests/test_wsplit
# cannot go: bf16 through the backend's bf16-output route (TRIDENT_TEST_CPU_BF16_OUT=1: the
# matmuls' bf16 outputs and the fused bf16 classifier), and 2 ranks under mpirun: tp 2 with
# and without sequence parallelism (gpt2 and llama), dp 2 with ZeRO 1, 2 and 3 (2 and 3 with
# parallel.overlap), ZeRO-2 with bf16 gradients. Prints the binary's PASS/FAIL lines.
set -u
source "$(dirname "$0")/lib.sh"
BIN=$(dirname "$T")/tests/test_wsplit
LL=model.arch=llama,model.ffn_hidden=48 # n_kv_head = n_head (2): tp 2 splits it
if ! TRIDENT_TEST_CPU_BF16_OUT=1 $BIN train.precision=bf16 \
    train.precision=bf16,parallel.recompute=full $LL,train.precision=bf16 >$W/bf16_out.log 2>&1; then
    grep -q '^FAIL' $W/bf16_out.log || fail wsplit_bf16_out "$(tail -3 $W/bf16_out.log | tr '\n' ' ')"
fi
cat $W/bf16_out.log | grep -E '^(PASS|FAIL)'
if ! "${MPIRUN[@]}" -np 2 $BIN parallel.tp=2 parallel.tp=2,parallel.sequence_parallel=true \
    $LL,parallel.tp=2,parallel.sequence_parallel=true \
    parallel.tp=2,parallel.sequence_parallel=true,train.precision=bf16,parallel.recompute=full \
    parallel.dp=2,parallel.zero=1 parallel.dp=2,parallel.zero=2,parallel.overlap=true \
    parallel.dp=2,parallel.zero=3,parallel.overlap=true \
    parallel.dp=2,parallel.zero=3,train.precision=bf16 \
    parallel.dp=2,parallel.zero=2,train.grad_dtype=bf16 \
    $LL,parallel.dp=2,parallel.zero=3,parallel.overlap=true >$W/ranks.log 2>&1; then
    grep -q '^FAIL' $W/ranks.log || fail wsplit_ranks "$(tail -3 $W/ranks.log | tr '\n' ' ')"
fi
cat $W/ranks.log | grep -E '^(PASS|FAIL)'
[ $fails = 0 ] && ! grep -q '^FAIL' $W/*.log
