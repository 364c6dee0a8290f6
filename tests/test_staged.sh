#!/usr/bin/env bash
# The staged comm backend (src/comm/comm_staged.c: MPI through host staging, how several ranks
# share one GPU): forced on the CPU path with TRIDENT_COMM_STAGED=1, a tp2 x pp2 x dp2 run
# (ZeRO-3, sequence parallelism, interleaved schedule: every collective and the pipeline's
# grouped sends and receives) writes the same metrics and model, bit for bit, as plain MPI.
set -u
source "$(dirname "$0")/lib.sh"
C=(--set train.steps=10 --set system.threads=1 --set data.eval_every=5 --set model.n_layer=4
   --set model.n_head=4 --set train.global_batch=16 --set train.micro_batch=2 --set parallel.tp=2
   --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2
   --set parallel.zero=3 --set parallel.sequence_parallel=true)
"${MPIRUN[@]}" -np 8 $T train $CFG "${C[@]}" --set run.out_dir=$W/plain >$W/plain.log 2>&1
TRIDENT_COMM_STAGED=1 "${MPIRUN[@]}" -x TRIDENT_COMM_STAGED -np 8 $T train $CFG "${C[@]}" \
    --set run.out_dir=$W/staged >$W/staged.log 2>&1
grep -q '"comm":"mpi (staged)"' $W/staged/metrics.jsonl ||
    fail staged_comm_backend "the staged run did not use the staged comm backend: $(tail -2 $W/staged.log | tr '\n' ' ')"
# comm_bytes included.
match_reference staged_comm_bitwise_3d $W/plain $W/staged bitwise steps=10
[ $fails = 0 ]
