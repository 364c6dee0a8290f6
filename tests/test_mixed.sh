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

# run NAME NP ARGS...: a bf16 run; prints its worst relative loss difference from fp32.
run() {
    local name=$1 np=$2; shift 2
    if "${MPIRUN[@]}" -np $np $T train $CFG "${COMMON[@]}" "${BF16[@]}" "$@" --set run.out_dir=$W/$name \
        >$W/$name.log 2>&1; then :; else fail mixed_${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"; return; fi
    local out
    if out=$(/usr/bin/python3 - $W/fp32 $W/$name $np "$@" <<'PY'
import json, sys
ref, run, np_ = sys.argv[1], sys.argv[2], int(sys.argv[3])
args = ' '.join(sys.argv[4:])
rows = lambda d, t: [r for r in map(json.loads, open(d + '/metrics.jsonl')) if r['type'] == t]
a, b = rows(ref, 'step'), rows(run, 'step')
assert len(a) == len(b) == 20, (len(a), len(b))
err = max(abs(x['loss'] - y['loss']) / x['loss'] for x, y in zip(a, b))
rec = rows(run, 'run')[0]
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
print('loss %.2e zero %d N %d state %.2f bytes/param (%s)' % (err, zero, N, state,
      'formula' if mem_ok else 'MEMORY %s want %s' % (got, [round(w) for w in want])))
sys.exit(0 if err <= 2e-2 and mem_ok else 1)
PY
); then pass "mixed_${name} $out"; else fail mixed_${name} "$out"; fi
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

# The four stages against each other at dp 4 (all bf16).
if out=$(/usr/bin/python3 - $W <<'PY'
import json, sys
W = sys.argv[1]
loss = lambda d: [r['loss'] for r in map(json.loads, open(W + '/' + d + '/metrics.jsonl')) if r['type'] == 'step']
runs = [loss('dp4_zero%d' % z) for z in range(4)]
err = max(abs(x - y) / x for r in runs[1:] for x, y in zip(runs[0], r))
g16 = [loss('dp4_zero%d_g16' % z) for z in range(4)]
err16 = max(abs(x - y) / x for r in g16[1:] for x, y in zip(g16[0], r))
print('max rel loss difference between zero 0, 1, 2, 3: %.2e (fp32 gradients), %.2e (bf16)' % (err, err16))
err = max(err, err16)
sys.exit(0 if err <= 2e-2 else 1)
PY
); then pass "mixed_stages_agree_dp4 $out"; else fail mixed_stages_agree_dp4 "$out"; fi

# Determinism: the same bf16 run twice.
$T train $CFG "${COMMON[@]}" "${BF16[@]}" --set run.out_dir=$W/again >$W/again.log 2>&1
untimed() { sed -E 's/"(step_ms|tokens_per_s|mfu|mfu_peak_flops)":[^,}]*//g' "$1"; }
if cmp -s <(untimed $W/single/metrics.jsonl | grep -v '"type":"run"') <(untimed $W/again/metrics.jsonl | grep -v '"type":"run"') &&
    cmp -s $W/single/model.bin $W/again/model.bin; then pass mixed_deterministic
else fail mixed_deterministic "two bf16 runs differ"; fi

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
if cmp -s <(untimed $W/c20/metrics.jsonl | grep -v '"type":"run"\|"type":"checkpoint"') \
          <(untimed $W/c10/metrics.jsonl | grep -v '"type":"run"\|"type":"checkpoint"') &&
    cmp -s $W/c20/model.bin $W/c10/model.bin && grep -q "kind: master" $W/ck/step_00000010/manifest.yaml &&
    ! grep -q "kind: param" $W/ck/step_00000010/manifest.yaml; then pass mixed_ckpt_resume_bitwise
else fail mixed_ckpt_resume_bitwise "$(grep -h error $W/c10.log | head -2)"; fi
"${MPIRUN[@]}" -np 2 $T train $CFG "${COMMON[@]}" "${BF16[@]}" "${CK[@]}" --set parallel.zero=3 \
    --set run.out_dir=$W/cz3 --set checkpoint.dir=$W/ckz3 --set checkpoint.resume=$W/ck/step_00000010 >$W/cz3.log 2>&1
$T export $W/ckz3 --format llmc --out $W/cz3.bin >$W/e.log 2>&1
if out=$(/usr/bin/python3 - $W <<'PY'
import json, sys
W = sys.argv[1]
loss = lambda d: {r['step']: r['loss'] for r in map(json.loads, open(W + '/' + d + '/metrics.jsonl')) if r['type'] == 'step'}
a, b = loss('c20'), loss('cz3')
err = max(abs(a[k] - b[k]) / a[k] for k in range(11, 21))
print('steps 11-20 on dp2 zero3 from a 1-process bf16 checkpoint: max rel loss difference %.2e' % err)
sys.exit(0 if err <= 1e-3 else 1)
PY
) && cmp -s $W/cz3.bin $W/cz3/model.bin; then pass "mixed_ckpt_reshard $out; export equals model.bin"
else fail mixed_ckpt_reshard "$out $(tail -1 $W/cz3.log) $(cat $W/e.log)"; fi

echo "mixed precision tests: $fails failed"
[ $fails = 0 ]
