#!/usr/bin/env bash
# Mixed precision (train.precision: bf16; bf16 parameters and stored activations, fp32
# master weights and Adam state, fp32 gradients): against the fp32 single-process run on the same global batch for
# 20 steps (losses within 2e-2 relative at every step) on one process, dp 2 and 4 with ZeRO
# 0-3 and tp2 x pp2 x dp2 interleaved with ZeRO 1 and 3; the four stages against each other
# at dp 4; the memory of each against the ZeRO formulas (2P + 4P + 12P/N, 2P + 16P/N,
# 18P/N); determinism; and bf16 checkpoints (bitwise resume, another layout, export).
set -u
source "$(dirname "$0")/lib.sh"
COMMON=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=16 --set system.threads=1
        --set model.n_layer=4 --set model.n_head=4 --set data.eval_every=10 --set log.every=1)
BF16=(--set train.precision=bf16)

$T train $CFG "${COMMON[@]}" --set run.out_dir=$W/fp32 >$W/fp32.log 2>&1 || fail mixed_fp32_reference "$(tail -2 $W/fp32.log)"

# run NAME NP ARGS...: a bf16 run; its losses against fp32's, and its memory against the
# ZeRO formulas.
run() {
    local name=$1 np=$2; shift 2
    if "${MPIRUN[@]}" -np $np $T train $CFG "${COMMON[@]}" "${BF16[@]}" "$@" --set run.out_dir=$W/$name \
        >$W/$name.log 2>&1; then :; else fail mixed_${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"; return; fi
    match_reference mixed_${name} $W/fp32 $W/$name loss=2e-2 steps=20
    local out
    if out=$(/usr/bin/python3 - $W/$name <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import rows
rec = rows(sys.argv[1], 'run')[0]
m, P = rec['memory'], rec['rank_params']
zero = rec['config']['parallel']['zero'] if rec['mesh']['dp'] > 1 else 0
N = rec['mesh']['dp']
# ZeRO formulas (bytes): params 2P (2P/N at 3), grads gP (gP/N at 2, 3; g = 4, or 2 for bf16
# gradients), master 4P/N and Adam 8P/N (4P and 8P at 0); padding of shard boundaries allowed.
g = 2 if rec['config']['train']['grad_dtype'] == 'bf16' else 4
want = {0: (2 * P, g * P, 4 * P, 8 * P), 1: (2 * P, g * P, 4 * P / N, 8 * P / N),
        2: (2 * P, g * P / N, 4 * P / N, 8 * P / N), 3: (2 * P / N, g * P / N, 4 * P / N, 8 * P / N)}[zero]
got = (m['param_bytes'], m['grad_bytes'], m['master_bytes'], m['adam_bytes'])
slack = 18 * N * 64  # bytes: a shard's padding per bucket, over every bucket
mem_ok = all(abs(g - w) <= slack for g, w in zip(got, want))
state = sum(got) / P
print('zero %d N %d state %.2f bytes/param (%s)' % (zero, N, state,
      'formula' if mem_ok else 'MEMORY %s want %s' % (got, [round(w) for w in want])))
sys.exit(0 if mem_ok else 1)
PY
); then pass "mixed_${name}_memory $out"; else fail mixed_${name}_memory "$out"; fi
}

run single 1
for zero in 0 1 2 3; do run dp2_zero$zero 2 --set parallel.zero=$zero; done
for zero in 0 1 2 3; do run dp4_zero$zero 4 --set parallel.zero=$zero; done
run 3d_zero1 8 --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=interleaved \
    --set parallel.virtual_stages=2 --set parallel.zero=1
run 3d_zero3 8 --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=interleaved \
    --set parallel.virtual_stages=2 --set parallel.zero=3
# bf16 gradients, accumulated and reduced over dp in bf16: 16P, 4P + 12P/N, 2P + 14P/N, 16P/N.
G16=(--set train.grad_dtype=bf16 --set train.reduce_dtype=bf16)
for zero in 0 1 2 3; do run dp4_zero${zero}_g16 4 "${G16[@]}" --set parallel.zero=$zero; done
run 3d_zero1_g16 8 "${G16[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=interleaved \
    --set parallel.virtual_stages=2 --set parallel.zero=1 --set parallel.sequence_parallel=true
run 3d_zero3_g16 8 "${G16[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=interleaved \
    --set parallel.virtual_stages=2 --set parallel.zero=3
# The reduction in another dtype than the accumulation: fp32 gradients reduced in bf16, and
# bf16 gradients reduced in fp32.
run dp2_zero1_reduce_bf16 2 --set parallel.zero=1 --set train.reduce_dtype=bf16
run dp2_zero2_reduce_bf16 2 --set parallel.zero=2 --set train.reduce_dtype=bf16
run dp2_zero0_g16_reduce_fp32 2 --set parallel.zero=0 --set train.grad_dtype=bf16
run dp2_zero3_g16_reduce_fp32 2 --set parallel.zero=3 --set train.grad_dtype=bf16

# The four stages against each other at dp 4 (all bf16), with fp32 and with bf16 gradients.
for z in 1 2 3; do
    match_reference mixed_stages_agree_dp4_zero0_vs_zero$z $W/dp4_zero0 $W/dp4_zero$z loss=2e-2 steps=20
    match_reference mixed_stages_agree_dp4_g16_zero0_vs_zero$z $W/dp4_zero0_g16 $W/dp4_zero${z}_g16 \
        loss=2e-2 steps=20
done

# Determinism: the same bf16 run twice.
$T train $CFG "${COMMON[@]}" "${BF16[@]}" --set run.out_dir=$W/again >$W/again.log 2>&1
match_reference mixed_deterministic $W/single $W/again bitwise

# Stored activations: bf16 slots take less than fp32's (the fp32 work buffers of one layer
# included); recompute with bf16 is bitwise identical to bf16 without it.
act() { head -1 "$1/metrics.jsonl" | grep -o '"activation_bytes":[0-9]*' | head -1 | cut -d: -f2; }
$T train $CFG "${COMMON[@]}" "${BF16[@]}" --set parallel.recompute=full --set run.out_dir=$W/rc >$W/rc.log 2>&1
a32=$(act $W/fp32) a16=$(act $W/single)
if [ -n "$a16" ] && [ "$a16" -lt "$a32" ] && cmp -s $W/single/model.bin $W/rc/model.bin; then
    pass "mixed_activations fp32 $a32 -> bf16 $a16 bytes; recompute full bitwise identical"
else fail mixed_activations "fp32 $a32, bf16 $a16; recompute $(cmp $W/single/model.bin $W/rc/model.bin 2>&1)"; fi

# bf16 checkpoints: the master weights are stored; bitwise resume; resume on dp2 zero3;
# export equal to the run's model.bin (the bf16 parameters).
CK=(--set checkpoint.every=10)
$T train $CFG "${COMMON[@]}" "${BF16[@]}" "${CK[@]}" --set run.out_dir=$W/c20 --set checkpoint.dir=$W/ck >$W/c20.log 2>&1
mkdir -p $W/c10 && cp $W/c20/metrics.jsonl $W/c10/
$T train $CFG "${COMMON[@]}" "${BF16[@]}" "${CK[@]}" --set run.out_dir=$W/c10 --set checkpoint.dir=$W/ck10 \
    --set checkpoint.resume=$W/ck/step_00000010 >$W/c10.log 2>&1
match_reference mixed_ckpt_resume_bitwise $W/c20 $W/c10 bitwise types=step,eval ||
    echo "    $(grep -h error $W/c10.log | head -2 | tr '\n' ' ')"
if grep -q "kind: master" $W/ck/step_00000010/manifest.yaml &&
    ! grep -q "kind: param" $W/ck/step_00000010/manifest.yaml; then pass mixed_ckpt_stores_master
else fail mixed_ckpt_stores_master "the manifest's kinds: $(grep -o 'kind: [a-z_]*' $W/ck/step_00000010/manifest.yaml | sort -u | tr '\n' ' ')"; fi
"${MPIRUN[@]}" -np 2 $T train $CFG "${COMMON[@]}" "${BF16[@]}" "${CK[@]}" --set parallel.zero=3 \
    --set run.out_dir=$W/cz3 --set checkpoint.dir=$W/ckz3 --set checkpoint.resume=$W/ck/step_00000010 >$W/cz3.log 2>&1
$T export $W/ckz3 --format llmc --out $W/cz3.bin >$W/e.log 2>&1
# steps 11-20 on dp2 zero3 from a 1-process bf16 checkpoint
match_reference mixed_ckpt_reshard $W/c20 $W/cz3 loss=1e-3 from=11 steps=10
if cmp -s $W/cz3.bin $W/cz3/model.bin; then pass mixed_ckpt_export_equals_model
else fail mixed_ckpt_export_equals_model "$(tail -1 $W/cz3.log) $(cat $W/e.log)"; fi

echo "mixed precision tests: $fails failed"
[ $fails = 0 ]
