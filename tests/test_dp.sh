#!/usr/bin/env bash
# Data-parallel training under mpirun against the single-process run on the same global
# batch: losses and gradient norms step by step, the final model, the dp bytes per step,
# and the launch-time config errors of a multi-process job. Prints PASS/FAIL lines.
set -u
source "$(dirname "$0")/lib.sh"
COMMON=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=8 --set system.threads=1 --set data.eval_every=10)

if $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/ref >$W/ref.log 2>&1; then pass dp_reference_run
else fail dp_reference_run "$(tail -2 $W/ref.log | tr '\n' ' ')"; fi

# bucket_mb 0.01 puts every layer in a bucket of its own; the default (25) merges them.
# zero3_gather step keeps each chunk gathered from its first pass to the update.
for layout in "2 0 25" "4 0 0.01" "2 1 25" "4 1 25" "2 2 25" "4 2 0.01" "2 3 0.01" "4 3 25" "2 3 25 step"; do
    set -- $layout
    dp=$1 zero=$2 gather=${4:-pass} name=dp$1_zero$2${4:+_$4}
    if "${MPIRUN[@]}" -np $dp $T train $CFG "${COMMON[@]}" --set parallel.zero=$zero --set parallel.bucket_mb=$3 \
            --set parallel.zero3_gather=$gather --set run.out_dir=$W/$name >$W/$name.log 2>&1; then
        pass ${name}_run
    else fail ${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"; continue; fi
    # Losses within 1e-5 relative, gradient norms within 1e-4, val losses within 1e-5, the final
    # parameters within 1e-4 of the largest.
    match_reference ${name}_parity $W/ref $W/$name "${FP32_PARITY[@]}"
    # dp bytes per step as the stage's scheme implies (zero 0: all-reduce of every gradient;
    # zero 1: reduce-scatter of the gradients plus all-gather of the parameters, 4 bytes per
    # element of the padded buffer each, plus the 8-byte norm partial), plus the 8-byte loss
    # sum; memory by kind as the ZeRO formulas for fp32 training give (zero 0: 16P; zero 1:
    # 8P + 8P/N, P the rank's parameters, up to the padding of the shard boundaries).
    if out=$(/usr/bin/python3 - $W/$name $dp $zero <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import rows
run, dp, zero = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b, run0 = rows(run, 'step'), rows(run, 'run')[0]
P = run0['rank_params']
cfg = run0['config']
C, T, L = cfg['model']['d_model'], cfg['model']['seq_len'], cfg['model']['n_layer']
pad = cfg['model']['vocab_pad_to']
Vp = -(-cfg['model']['vocab_size'] // pad) * pad
m = cfg['train']['global_batch'] // (cfg['train']['micro_batch'] * dp)
up = lambda n: -(-n // dp) * dp
if zero == 0: want = 4 * P
elif zero == 1: want = 2 * 4 * up(P) + 8
else: # buckets (wte, wpe, each layer, the final LayerNorm) reduce-scattered every
      # micro-batch; stage 2 all-gathers them after the step, stage 3 before every forward
      # and every backward of every micro-batch
    # layers merged while they fit in parallel.bucket_mb (at least one each)
    layer, cap, layers, merged = 12 * C * C + 13 * C, cfg['parallel']['bucket_mb'] * 2**20, [], 0
    for l in range(L):
        if merged and 4 * (merged + layer) > cap: layers.append(merged); merged = 0
        merged += layer
    layers.append(merged)
    buckets = up(Vp * C) + up(T * C) + sum(up(n) for n in layers) + up(2 * C)
    gathers = 3 * m if cfg['parallel']['zero3_gather'] == 'pass' else m + 1
    want = (m + 1 if zero == 2 else gathers) * 4 * buckets + 8
want += 8 # the loss
# With zero3_gather step, an evaluation's gathers stay valid for the next step's first pass.
every = cfg['data']['eval_every']
def wanted(step):
    if zero == 3 and cfg['parallel']['zero3_gather'] == 'step' and every and step > 1 and (step - 1) % every == 0:
        return want - 4 * buckets
    return want
bytes_ok = len(b) == 20 and all(r['comm_bytes']['dp'] == wanted(r['step']) for r in b)
mem = run0['memory']
total = mem['param_bytes'] + mem['grad_bytes'] + mem['master_bytes'] + mem['adam_bytes']
formula = [16 * P, 8 * P + 8 * P / dp, 4 * P + 12 * P / dp, 16 * P / dp][zero]
mem_ok = formula <= total <= formula + 64 * dp + 16 * (L + 3)
print('dp_bytes %d (formula %d) state_bytes %d (formula %d)' % (
      b[-1]['comm_bytes']['dp'], want, total, formula))
sys.exit(0 if bytes_ok and mem_ok else 1)
PY
); then pass "${name}_dp_bytes_memory $out"; else fail ${name}_dp_bytes_memory "$out"; fi
done
# The stages against each other at dp 4: the same losses within 1e-5.
match_reference dp4_zero0_vs_zero1 $W/dp4_zero0 $W/dp4_zero1 loss=1e-5 steps=20
match_reference dp4_zero0_vs_zero2 $W/dp4_zero0 $W/dp4_zero2 loss=1e-5 steps=20
match_reference dp4_zero0_vs_zero3 $W/dp4_zero0 $W/dp4_zero3 loss=1e-5 steps=20
# ZeRO-1, 2 and 3 with tp (2 and 3 with sequence parallelism) and interleaved pp:
# dp 2 x tp 2 x pp 2 against the single process.
$T train $CFG "${COMMON[@]}" --set model.n_layer=4 --set model.n_head=4 --set run.out_dir=$W/ref3d >$W/ref3d.log 2>&1
for layout in "1 false" "2 true" "3 true"; do
    set -- $layout
    name=dp2_tp2_pp2_interleaved_zero$1_sp$2
    if "${MPIRUN[@]}" -np 8 $T train $CFG "${COMMON[@]}" --set parallel.zero=$1 --set parallel.tp=2 --set parallel.pp=2 \
            --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set model.n_layer=4 --set model.n_head=4 \
            --set parallel.sequence_parallel=$2 --set run.out_dir=$W/$name >$W/$name.log 2>&1; then
        match_reference ${name}_parity $W/ref3d $W/$name "${FP32_PARITY[@]}"
    else fail ${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"; fi
done

# A world that does not factor: one message (from rank 0 only), exit 2 on every rank.
"${MPIRUN[@]}" -np 3 $T train $CFG --set parallel.tp=2 --set run.out_dir=$W/bad >$W/bad.log 2>&1
rc=$?
n=$(grep -c "parallel.tp" $W/bad.log)
if [ $rc = 2 ] && [ "$n" = 1 ]; then pass launch_world_not_factoring
else fail launch_world_not_factoring "exit $rc, $n messages naming parallel.tp: $(head -3 $W/bad.log | tr '\n' ' ')"; fi
# Lines from ranks != 0 carry the [rN tpX dpY ppZ] prefix.
TRIDENT_LOG=debug "${MPIRUN[@]}" -np 2 $T train $CFG --set train.steps=1 --set run.out_dir=$W/pfx --set model.init_from=$W/missing.bin >$W/pfx.log 2>&1
if grep -q '^\[r1 tp0 dp1 pp0\] error: cannot open model file' $W/pfx.log; then pass log_rank_prefix
else fail log_rank_prefix "$(grep -m2 error $W/pfx.log | tr '\n' ' ')"; fi
[ $fails = 0 ]
