#!/usr/bin/env bash
# Tensor parallelism (and sequence parallelism) under mpirun against the single-process run
# on the same global batch, 20 steps: loss within 1e-5 relative at every step, gradient norm
# within 1e-4, final full parameters within 1e-4 of the largest; the tp bytes per step
# against the scheme's formula; tp x dp together. The vocabulary (250) is not a multiple of
# tp, so padding is exercised. Prints PASS/FAIL lines.
set -u
source "$(dirname "$0")/lib.sh"
COMMON=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=8 --set system.threads=1
        --set model.n_head=4 --set model.vocab_size=250 --set data.eval_every=10 --set parallel.zero=0)

if $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/ref >$W/ref.log 2>&1; then pass tp_reference_run
else fail tp_reference_run "$(tail -2 $W/ref.log | tr '\n' ' ')"; fi

# tp_bytes DIR TP SP DP: the tp bytes of every step line against the scheme's formula
# (payload as counted by the comm layer: all-reduce and reduce-scatter count their input,
# all-gather its output), n_micro micro-batches of N rows:
#   no SP: all-reduces of N*C floats: the embedding, 2 per layer forward, 2 per layer
#          backward, the LM head's input gradient; and 3 of N floats in the cross-entropy;
#   SP:    each of those row reductions becomes a reduce-scatter, and every "identity" of
#          the conjugate pairs an all-gather of N*C floats (2 per layer each way, the final
#          LayerNorm forward, the embedding backward); plus, once per step, the all-reduce of
#          the LayerNorm gradients (4C per layer and 2C final).
tp_bytes() {
    /usr/bin/python3 - "$@" <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import rows
run, tp, sp, dp = sys.argv[1], int(sys.argv[2]), sys.argv[3] == 'true', int(sys.argv[4])
b, cfg = rows(run, 'step'), rows(run, 'run')[0]['config']
L, C, T = cfg['model']['n_layer'], cfg['model']['d_model'], cfg['model']['seq_len']
B, GB = cfg['train']['micro_batch'], cfg['train']['global_batch']
N, m = B * T, GB // (B * dp)
if tp == 1: want = 0
elif not sp: want = m * ((4 * L + 2) * N * C * 4 + 3 * N * 4)
else: want = m * ((8 * L + 4) * N * C * 4 + 3 * N * 4) + (4 * L + 2) * C * 4
print('tp_bytes %d (formula %d) on %d step lines' % (b[-1]['comm_bytes']['tp'], want, len(b)))
sys.exit(0 if b and all(r['comm_bytes']['tp'] == want for r in b) else 1)
PY
}

for layout in "2 false 1" "4 false 1" "2 true 1" "4 true 1" "2 false 2" "2 true 2"; do
    set -- $layout
    tp=$1 sp=$2 dp=$3 name=tp$1_sp$2_dp$3 np=$(( $1 * $3 ))
    if "${MPIRUN[@]}" -np $np $T train $CFG "${COMMON[@]}" --set parallel.tp=$tp \
            --set parallel.sequence_parallel=$sp --set run.out_dir=$W/$name >$W/$name.log 2>&1; then
        match_reference ${name}_parity $W/ref $W/$name "${FP32_PARITY[@]}"
        if out=$(tp_bytes $W/$name $tp $sp $dp); then pass "${name}_tp_bytes $out"; else fail ${name}_tp_bytes "$out"; fi
    else fail ${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"; fi
done
[ $fails = 0 ]
