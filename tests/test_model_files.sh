#!/usr/bin/env bash
# Issue 15's model-file reproducers, end to end: a NaN or Inf weight in an llm.c file is
# refused by `sample`, `export` and `train` (model.init_from) with exit 4 and the tensor and
# element named (it used to be accepted, and `train` blamed the learning rate with exit 6),
# also on tp 2 where only the rank whose shard holds it reads it (every rank exits 4); the
# header whose size wrapped to zero is refused (it used to abort `export`, exit 134); a
# large model with a checkpoint.dir leaves model.bin to the checkpoint (llmc_save_wanted is
# unit-tested in test_llmc; here the small-model default writes it).
set -u
source "$(dirname "$0")/lib.sh"
# expect NAME CODE PATTERN CMD...: exit CODE and output matching PATTERN
expect() {
    local name=$1 code=$2 pattern=$3
    shift 3
    "$@" >$W/out 2>&1
    local rc=$?
    if [ $rc != "$code" ]; then fail "$name" "exit $rc, expected $code: $(tail -n 3 $W/out | tr '\n' ' ')"
    elif ! grep -qE -- "$pattern" $W/out; then fail "$name" "output lacks /$pattern/: $(tail -n 3 $W/out | tr '\n' ' ')"
    else pass "$name"; fi
}
expect model_files_train 0 "model written" "$T" train $CFG --set run.out_dir=$W/a --set train.steps=2
# A copy of model.bin with one value of h1.fcw (row 70 of 128: tp rank 1's half) set to
# `value`; fcw of layer 1 starts after wte, wpe, ln1w/b, qkvw/b, attprojw/b, ln2w/b and layer
# 0's fcw.
poison() { # OUT VALUE
    /usr/bin/python3 - $W/a/model.bin "$1" "$2" <<'PY'
import sys
import numpy as np
h = np.fromfile(sys.argv[1], dtype=np.int32, count=256)
w = np.fromfile(sys.argv[1], dtype=np.float32, offset=1024)
T, V, L, NH, C, Vp = h[2:8]
off = Vp * C + T * C + L * (C + C + 3 * C * C + 3 * C + C * C + C + C + C) + 1 * 4 * C * C
w[off + 70 * C + 5] = float(sys.argv[3])
open(sys.argv[2], 'wb').write(h.tobytes() + w.tobytes())
PY
}
poison $W/nan.bin nan
poison $W/inf.bin -inf
expect model_files_sample_nan 4 "h1.fcw holds a non-finite value \(nan\) at row 70, column 5" \
    "$T" sample $W/nan.bin --tokens 4
expect model_files_export_inf 4 "h1.fcw holds a non-finite value \(-inf\) at row 70, column 5" \
    "$T" export $W/inf.bin --format safetensors --out $W/x.safetensors
if [ ! -e $W/x.safetensors ] && [ ! -e $W/x.safetensors.tmp ]; then pass model_files_export_leaves_nothing
else fail model_files_export_leaves_nothing "an output file was left"; fi
expect model_files_init_from_nan 4 "$W/nan.bin: tensor h1.fcw holds a non-finite value" \
    "$T" train $CFG --set run.out_dir=$W/b --set model.init_from=$W/nan.bin --set train.steps=1
# tp 2: rank 1 holds row 70 and names it; rank 0 learns it and stops too.
expect model_files_init_from_nan_tp2 4 "\[r1 tp1 dp0 pp0\] error: .*h1.fcw holds a non-finite value" \
    "${MPIRUN[@]}" -np 2 "$T" train $CFG --set run.out_dir=$W/c --set model.init_from=$W/nan.bin \
    --set parallel.tp=2 --set train.steps=1
# The header whose 2^64 values wrapped to zero (a 1024-byte file passed the size check).
/usr/bin/python3 -c "
import struct
h = [20240326, 3, 1024, 3843757, 349525, 1, 1 << 21, 3843757] + [0] * 248
open('$W/wrap.bin', 'wb').write(struct.pack('256i', *h))"
expect model_files_wrapping_header 4 "wrap.bin: header word 4, L \(n_layer\), is 349525" \
    "$T" export $W/wrap.bin --format llmc --out $W/y.bin
exit $((fails > 0))
