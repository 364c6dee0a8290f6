#!/usr/bin/env bash
# Host memory at scale (DESIGN.md's scale rule): a tp 2 x pp 2 run of a 51 M-parameter model
# (203 MB of fp32) that starts from an llm.c file (model.init_from: each rank reads only its
# slices) and ends with its model.bin written (tensor by tensor through rank 0, in pieces)
# must peak within what `trident plan` says it holds (its largest stage's arenas plus the
# host memory it allocates outside them at start-up or at the final save) plus the runtime's
# own memory. The runtime allowance is measured, not guessed: the peak of the same layout
# with a tiny model (the libraries, MPI, the CPU backend's threads, the mapped token shards),
# plus 64 MiB for what MPI allocates for the pieces' sums. Holding the whole model anywhere
# (the old save_model: 2.25 x 203 MB more on every rank) or reading the whole file (203 MB
# more) fails it. The run's lr is 1e-30, so no value moves: the model.bin written must be
# the file read, bit for bit, which checks the sliced reads and the streamed write too.
set -u
source "$(dirname "$0")/lib.sh"
CFGM=$W/hostmem.yaml
cat >$CFGM <<EOF
run: {name: hostmem, out_dir: $W/big, seed: 3}
model: {n_layer: 4, n_head: 8, d_model: 1024, seq_len: 16, vocab_size: 256, vocab_pad_to: 64}
parallel: {tp: 2, pp: 2}
train: {micro_batch: 1, global_batch: 2, steps: 1}
optim: {lr: 1.0e-30, min_lr: 1.0e-30, warmup_steps: 0}
data: {train: "data/kjv_train_*.bin", val: "data/kjv_val_*.bin", eval_every: 0}
log: {every: 1}
system: {threads: 1}
EOF
# The initial model: an llm.c file (V = Vp = 256, the run's padding) of N(0, 0.02) values.
/usr/bin/python3 - "$W/init.bin" <<'PY'
import sys
import numpy as np
T, V, L, NH, C, Vp = 16, 256, 4, 8, 1024, 256
n = Vp * C + T * C + 2 * C + L * (12 * C * C + 13 * C)
h = np.zeros(256, dtype=np.int32)
h[:8] = [20240326, 3, T, V, L, NH, C, Vp]
w = (np.random.default_rng(5).standard_normal(n) * 0.02).astype(np.float32)
with open(sys.argv[1], 'wb') as f:
    f.write(h.tobytes())
    f.write(w.tobytes())
PY
peak_mib() { sed -nE 's/.*host memory: peak resident ([0-9.]+) MiB.*/\1/p' "$1" | tail -1; }

"${MPIRUN[@]}" -np 4 "$T" train $CFGM --set model.d_model=32 --set run.out_dir=$W/tiny >$W/tiny.log 2>&1
base=$(peak_mib $W/tiny.log)
"${MPIRUN[@]}" -np 4 "$T" train $CFGM --set model.init_from=$W/init.bin >$W/big.log 2>&1
rc=$?
peak=$(peak_mib $W/big.log)
if [ $rc = 0 ] && [ -n "$base" ] && [ -n "$peak" ] && grep -q "model written to $W/big/model.bin" $W/big.log; then
    pass host_memory_run
else fail host_memory_run "exit $rc, peaks '$base' '$peak': $(tail -3 $W/big.log | tr '\n' ' ')"; fi
if cmp -s $W/init.bin $W/big/model.bin; then pass host_memory_model_roundtrip
else fail host_memory_model_roundtrip "model.bin differs from the file the run started from"; fi

"$T" plan $CFGM --set model.init_from=$W/init.bin --world 4 --json >$W/plan.json 2>$W/plan.err
if out=$(/usr/bin/python3 - $W/plan.json "$base" "$peak" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
base, peak = float(sys.argv[2]), float(sys.argv[3])
MiB = 1048576.0
# Every rank of a stage holds what tp rank 0, dp rank 0 does here (tp splits evenly).
held = max(s['total_bytes'] + max(s['host_startup_bytes'], s['host_save_bytes'])
           for s in plan['stages']) / MiB
assert plan['host_save_bytes'] > 0, 'the plan says model.bin is not written'
bound = held + base + 64
print('peak %.1f MiB <= %.1f = plan %.1f (arenas + host) + runtime %.1f + 64; model %.1f MiB'
      % (peak, bound, held, base, plan['n_params'] * 4 / MiB))
sys.exit(0 if peak <= bound else 1)
PY
); then pass "host_memory_within_plan $out"; else fail host_memory_within_plan "$out $(cat $W/plan.err)"; fi
exit $((fails > 0))
