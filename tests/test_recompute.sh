#!/usr/bin/env bash
# Activation recompute (parallel.recompute: full): every slot keeps only its layers' inputs
# and each layer's forward runs again before its backward. Losses, gradient norms and the
# final model must be bitwise identical to recompute none (memory and timing fields and the
# tp bytes of the recomputed forwards aside), alone and on a 3D layout
# (tp 2 x pp 2 interleaved x dp 2, ZeRO-3, sequence parallel), with fewer activation bytes.
set -u
source "$(dirname "$0")/lib.sh"
check() { # name np args...
    local name=$1 np=$2; shift 2
    for r in none full; do
        if ! "${MPIRUN[@]}" -np $np $T train $CFG --set train.micro_batch=2 --set system.threads=1 \
                --set parallel.recompute=$r --set run.out_dir=$W/$name-$r "$@" >$W/$name-$r.log 2>&1; then
            fail ${name}_$r "$(tail -2 $W/$name-$r.log | tr '\n' ' ')"
            return
        fi
    done
    match_reference ${name}_bitwise $W/$name-none $W/$name-full bitwise types=step,eval \
        ignore=mem_peak_bytes,comm_bytes
    local a b
    a=$(head -1 $W/$name-none/metrics.jsonl | grep -o '"activation_bytes":[0-9]*' | head -1 | cut -d: -f2)
    b=$(head -1 $W/$name-full/metrics.jsonl | grep -o '"activation_bytes":[0-9]*' | head -1 | cut -d: -f2)
    if [ -n "$a" ] && [ -n "$b" ] && [ "$b" -lt "$a" ]; then pass "${name}_activation_bytes $a -> $b"
    else fail ${name}_activation_bytes "none $a, full $b"; fi
}
check single 1 --set model.n_layer=4
check 3d 8 --set model.n_layer=4 --set model.n_head=4 --set parallel.tp=2 --set parallel.pp=2 \
    --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set parallel.zero=3 \
    --set parallel.sequence_parallel=true --set train.global_batch=16
[ $fails = 0 ]
