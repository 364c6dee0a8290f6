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
untimed() { grep -v '"type":"run"' "$1" | sed -E 's/"(step_ms|tokens_per_s|mfu|bubble)":[^,}]*//g'; }
if grep -q '"comm":"mpi (staged)"' $W/staged/metrics.jsonl &&
    cmp -s <(untimed $W/plain/metrics.jsonl) <(untimed $W/staged/metrics.jsonl) &&
    cmp -s $W/plain/model.bin $W/staged/model.bin; then
    pass "staged_comm_bitwise_3d $(grep -c '"type":"step"' $W/staged/metrics.jsonl) step lines, comm_bytes equal"
else fail staged_comm_bitwise_3d "$(tail -2 $W/staged.log | tr '\n' ' ')"; fi
[ $fails = 0 ]
