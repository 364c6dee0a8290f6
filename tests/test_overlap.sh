#!/usr/bin/env bash
# parallel.overlap (comm.h's non-blocking collectives): the dp reduction of each gradient
# bucket runs while the backward computes the next (ZeRO-2/3 layer buckets alternating
# between two workspaces), ZeRO-3 gathers a chunk's buckets ahead of the layers that read
# them, and pipeline transfers stay in flight until an op touches their micro-batch slot.
# None of that may change a bit: for each layout a run with overlap and one without must
# write the same metrics (timing fields aside, comm_bytes included) and the same model.bin.
# Also under the staged comm backend (TRIDENT_COMM_STAGED=1: MPI through host buffers, each
# request with its own). A reduce_dtype other than grad_dtype goes through one conversion
# buffer and does not overlap. Prints PASS/FAIL lines.
set -u
source "$(dirname "$0")/lib.sh"
COMMON=(--set train.steps=4 --set data.eval_every=2 --set system.threads=1 --set train.micro_batch=2
        --set train.global_batch=16 --set model.n_layer=4 --set model.n_head=4)

# same NAME NP ARGS...: NP ranks with parallel.overlap true and false.
same() {
    local name=$1 np=$2; shift 2
    local env=(env)
    [ "${STAGED:-0}" = 1 ] && env=(env TRIDENT_COMM_STAGED=1)
    for ov in true false; do
        if ! "${env[@]}" TRIDENT_LOG=debug "${MPIRUN[@]}" -x TRIDENT_COMM_STAGED -x TRIDENT_LOG -np $np \
                $T train $CFG "${COMMON[@]}" "$@" \
                --set parallel.overlap=$ov --set run.out_dir=$W/$name-$ov >$W/$name-$ov.log 2>&1; then
            fail overlap_$name "overlap=$ov: $(tail -3 $W/$name-$ov.log | tr '\n' ' ')"
            return
        fi
    done
    # The trainer's debug line counts what it left in flight: something with overlap (the
    # test would otherwise pass with the blocking path), nothing without.
    if ! grep -E "overlap: ([1-9]|.* [1-9][0-9]* (parameter|pipeline))" $W/$name-true.log >/dev/null; then
        fail overlap_$name "overlap=true left nothing in flight: $(grep -m1 'overlap:' $W/$name-true.log)"
        return
    fi
    if grep "overlap:" $W/$name-false.log | grep -E " [1-9][0-9]* (dp|parameter|pipeline)" >/dev/null; then
        fail overlap_$name "overlap=false left something in flight"
        return
    fi
    # Bitwise equal to overlap=false, comm_bytes included.
    match_reference overlap_$name $W/$name-false $W/$name-true bitwise steps=4 &&
        echo "    in flight per step on rank 0: $(grep -m1 '^step 1 overlap:' $W/$name-true.log |
            sed -E 's/.*overlap: //; s/ (left running under|under) [a-z ]*[a-z]//g')"
}

export TRIDENT_COMM_STAGED=0
same dp2_zero0 2 --set parallel.zero=0 --set parallel.bucket_mb=0.01
same dp2_zero2 2 --set parallel.zero=2 --set parallel.bucket_mb=0.02
same dp4_zero3_bf16 4 --set parallel.zero=3 --set parallel.bucket_mb=0.02 --set train.precision=bf16 \
    --set train.grad_dtype=bf16 --set train.reduce_dtype=bf16
same dp2_zero3_step 2 --set parallel.zero=3 --set parallel.zero3_gather=step
same pp2_dp2_interleaved_zero2 4 --set parallel.pp=2 --set parallel.schedule=interleaved \
    --set parallel.virtual_stages=2 --set parallel.zero=2 --set parallel.bucket_mb=0.01
same pp4_1f1b 4 --set parallel.pp=4
same tp2_pp2_dp2_zero3_recompute 8 --set parallel.tp=2 --set parallel.pp=2 --set parallel.zero=3 \
    --set parallel.sequence_parallel=true --set parallel.recompute=full
STAGED=1 same staged_pp2_dp2_zero3 4 --set parallel.pp=2 --set parallel.zero=3 --set parallel.bucket_mb=0.01
# The staged runs really were staged.
grep -q '"comm":"mpi (staged)"' $W/staged_pp2_dp2_zero3-true/metrics.jsonl ||
    fail overlap_staged_backend "the staged run did not use the staged comm backend"
[ $fails = 0 ]
