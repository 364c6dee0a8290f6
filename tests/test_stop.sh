#!/usr/bin/env bash
# Stops and stalls outside the comm timeout, and metrics that cannot be written (issue 15,
# defects 6 and 7):
#   - metrics.jsonl on a full disk (the TRIDENT_TEST_METRICS_FULL_BYTES hook, and a real
#     small tmpfs where this process may mount one): exit 4 naming the file after a
#     checkpoint of the next step, no torn line, a resume that continues bitwise; with
#     log.metrics_required: false one warning, exit 0 and the final model; a torn last line
#     left by a killed run is removed on resume;
#   - a rank stopped (SIGSTOP) during start-up: exit 5 within system.init_timeout_s + 10 s,
#     the phase and the rank not heard from named; SIGTERM to the other rank meanwhile ends
#     it within 10 s (nothing to checkpoint), and a second SIGINT at once (exit 130);
#   - SIGTERM during evaluation (one rank of two): exit 0 within 10 s with a checkpoint of the
#     step, and a resume that repeats the evaluation and continues bitwise;
#   - SIGTERM during a long resume (TRIDENT_TEST_RESUME_DELAY_MS), to one process and to both
#     ranks of a job as Slurm sends it: exit 0 within 10 s, nothing written, and the rerun
#     continues bitwise;
#   - Ctrl-C (SIGINT to the process group, as a terminal sends it) to one process and to a
#     2-rank job under scripts/launch.sh, with and without checkpoint.dir: a checkpoint of the
#     step and exit 0 (a resume continues bitwise), or a last line saying nothing could be
#     saved; a second Ctrl-C: exit 130 at once.
# Every run is bounded by `timeout`.
set -u
source "$(dirname "$0")/lib.sh"
MNT=
cleanup() {
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT

# The jobs of a stalled start-up run under a tighter bound than lib.sh's 180 s.
MPIRUN20=(timeout 20 "${MPIRUN[@]:2}")
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
# wait_for FILE PATTERN: up to 20 s for PATTERN to appear in FILE.
wait_for() {
    local i
    for i in $(seq 400); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
    return 1
}
# rank_pid NAME RANK: the pid of rank RANK of the job writing to $W/NAME.
rank_pid() {
    local p
    for p in $(pgrep -f "^$T train .*run.out_dir=$W/$1( |$)"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo $p; return 0; }
    done
    return 1
}
# lines_whole FILE: every line of FILE ends in a newline and is a JSON object.
lines_whole() {
    /usr/bin/python3 - "$1" <<'PY'
import json, sys
data = open(sys.argv[1], 'rb').read()
assert data.endswith(b'\n'), 'the last line has no newline'
for n, line in enumerate(data.split(b'\n')[:-1], 1):
    json.loads(line)
PY
}
same_steps() { # A B FROM: step and eval lines of B equal A's from step FROM on, model.bin equal
    /usr/bin/python3 tests/parity.py "$1" "$2" bitwise types=step,eval ignore=mem_peak_bytes from=$3
}

# --- metrics on a full disk (hook): exit 4 after a checkpoint, no torn line, bitwise resume
M=(--set train.steps=30 --set checkpoint.every=100 --set log.every=1 --set data.eval_every=0 --set system.threads=1)
timeout 60 $T train $CFG "${M[@]}" --set run.out_dir=$W/mref >$W/mref.log 2>&1
TRIDENT_TEST_METRICS_FULL_BYTES=6000 timeout 60 $T train $CFG "${M[@]}" --set run.out_dir=$W/mfull \
    --set checkpoint.dir=$W/cmfull >$W/mfull.log 2>&1
rc=$?
lost=$(sed -n 's/.*writing failed at the step \([0-9]*\) line.*/\1/p' $W/mfull.log | head -1)
at=$(cat $W/cmfull/latest 2>/dev/null)
if [ $rc = 4 ] && grep -q "error: cannot write metrics file $W/mfull/metrics.jsonl (the step [0-9]* line): No space left on device" $W/mfull.log &&
    [ -n "$lost" ] && [ "$at" = "step_$(printf %08d $((lost + 1)))" ] && tail -2 $W/mfull.log | grep -q "error: stopped because metrics could not be written after step $((lost + 1)): metrics file $W/mfull/metrics.jsonl" &&
    lines_whole $W/mfull/metrics.jsonl && [ ! -e $W/mfull/model.bin ]; then
    pass "stop_metrics_full_exit4 (step $lost's line lost, checkpoint $at, no torn line)"
else fail stop_metrics_full_exit4 "exit $rc, lost '$lost', latest '$at': $(grep -h 'error' $W/mfull.log | head -3 | tr '\n' ' ')"; fi
timeout 60 $T train $CFG "${M[@]}" --set run.out_dir=$W/mfull --set checkpoint.dir=$W/cmfull >$W/mfull2.log 2>&1
rc=$?
if [ $rc = 0 ] && out=$(same_steps $W/mref $W/mfull $((lost + 2))) && cmp -s $W/mref/model.bin $W/mfull/model.bin &&
    lines_whole $W/mfull/metrics.jsonl; then pass "stop_metrics_full_resume_bitwise $out"
else fail stop_metrics_full_resume_bitwise "exit $rc: ${out:-} $(tail -2 $W/mfull2.log | tr '\n' ' ')"; fi

# --- log.metrics_required: false: one loud warning, training completes, model written
TRIDENT_TEST_METRICS_FULL_BYTES=6000 timeout 60 $T train $CFG "${M[@]}" --set run.out_dir=$W/mopt \
    --set log.metrics_required=false >$W/mopt.log 2>&1
rc=$?
if [ $rc = 0 ] && [ "$(grep -c 'METRICS LOST' $W/mopt.log)" = 1 ] && cmp -s $W/mref/model.bin $W/mopt/model.bin &&
    lines_whole $W/mopt/metrics.jsonl && tail -1 $W/mopt.log | grep -q "warning: metrics file $W/mopt/metrics.jsonl is incomplete: writing failed at the step"; then
    pass stop_metrics_not_required
else fail stop_metrics_not_required "exit $rc: $(grep -h 'warning\|error' $W/mopt.log | head -3 | tr '\n' ' ')"; fi

# --- a real full file system: a 16 KiB tmpfs for metrics.jsonl (root outside a locked-down
# container; elsewhere the hook above stands in for it)
mkdir -p $W/mnt
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=16k tmpfs $W/mnt 2>/dev/null; then
    MNT=$W/mnt
    timeout 60 $T train $CFG "${M[@]}" --set train.steps=80 --set run.out_dir=$W/mtmp \
        --set log.metrics=$MNT/metrics.jsonl --set checkpoint.dir=$W/cmtmp >$W/mtmp.log 2>&1
    rc=$?
    if [ $rc = 4 ] && grep -q "cannot write metrics file $MNT/metrics.jsonl (the step [0-9]* line): No space left on device" $W/mtmp.log &&
        lines_whole $MNT/metrics.jsonl && [ -f $W/cmtmp/latest ]; then
        pass "stop_metrics_tmpfs_full ($(grep -c '"type":"step"' $MNT/metrics.jsonl) step lines kept, checkpoint $(cat $W/cmtmp/latest))"
    else fail stop_metrics_tmpfs_full "exit $rc: $(grep -h 'error' $W/mtmp.log | head -2 | tr '\n' ' ')"; fi
    umount $MNT && MNT=
else
    echo "# stop_metrics_tmpfs_full skipped: cannot mount a tmpfs here (the ENOSPC hook covers the case)"
fi

# --- a torn last line (a run killed while writing its checkpoint line) is removed when a run
# resumes; before, the run record was glued to it
timeout 60 $T train $CFG "${M[@]}" --set checkpoint.every=10 --set run.out_dir=$W/torn --set checkpoint.dir=$W/ctorn >$W/torn.log 2>&1
/usr/bin/python3 - $W/torn/metrics.jsonl <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if json.loads(l).get('step', 0) <= 10]
open(sys.argv[1], 'w').write(''.join(lines) + '{"type":"checkpoint","step":10,"dir":"/x')
PY
timeout 60 $T train $CFG "${M[@]}" --set run.out_dir=$W/torn --set checkpoint.dir=$W/ctorn2 \
    --set checkpoint.resume=$W/ctorn/step_00000010 >$W/torn2.log 2>&1
rc=$?
if [ $rc = 0 ] && lines_whole $W/torn/metrics.jsonl && grep -q "removed a torn last line" $W/torn2.log &&
    out=$(same_steps $W/mref $W/torn 1); then pass "stop_metrics_torn_line_resume $out"
else fail stop_metrics_torn_line_resume "exit $rc: ${out:-} $(tail -2 $W/torn2.log | tr '\n' ' ')"; fi

# --- a rank stopped during start-up: the other ends the job with exit 5 within
# init_timeout_s + 10 s, naming the phase and the rank it never heard from
S=(--set system.threads=1 --set data.eval_every=0)
"${MPIRUN20[@]}" -np 2 $T train $CFG "${S[@]}" --set system.init_timeout_s=2 --set run.out_dir=$W/stall >$W/stall.log 2>&1 &
job=$!
victim=
for i in $(seq 1000); do victim=$(rank_pid stall 1) && break; sleep 0.005; done
[ -n "$victim" ] && kill -STOP $victim
t0=$(date +%s%N)
wait $job
rc=$?
elapsed=$(ms_since $t0)
line=$(grep -m1 "error: start-up stalled in phase" $W/stall.log)
if [ -n "$victim" ] && [ $rc = 5 ] && [ $elapsed -lt 12000 ] && grep -q "error: start-up made no progress for [0-9]* s (system.init_timeout_s) in phase '" $W/stall.log &&
    echo "$line" | grep -q "ranks not heard from in this phase: 1\|every rank reached this phase"; then
    pass "stop_init_deadline_stopped_rank ($elapsed ms: ${line#*error: })"
else fail stop_init_deadline_stopped_rank "victim '$victim', exit $rc after $elapsed ms: $(grep -h 'error' $W/stall.log | head -2 | tr '\n' ' ')"; fi

# --- signals to a rank blocked in start-up (its peer is stopped): SIGTERM ends it within
# 10 s, saying why there is nothing to checkpoint; a second SIGINT ends it at once (exit 130)
blocked_start() { # NAME: starts 2 ranks, stops rank 1; sets job and r0
    "${MPIRUN20[@]}" -np 2 $T train $CFG "${S[@]}" --set run.out_dir=$W/$1 >$W/$1.log 2>&1 &
    job=$!
    local victim= i
    for i in $(seq 1000); do victim=$(rank_pid $1 1) && break; sleep 0.005; done
    [ -n "$victim" ] && kill -STOP $victim
    sleep 0.5
    r0=$(rank_pid $1 0)
    [ -n "$victim" ] && [ -n "$r0" ]
}
elapsed=-1
if blocked_start sterm; then
    t0=$(date +%s%N)
    kill -TERM $r0
    for i in $(seq 750); do kill -0 $r0 2>/dev/null || break; sleep 0.02; done
    elapsed=$(ms_since $t0)
fi
wait $job
if [ -n "$r0" ] && [ $elapsed -ge 0 ] && [ $elapsed -lt 10000 ] &&
    grep -q "stopped by SIGTERM during start-up (phase '[^']*'), before the first step: nothing to checkpoint" $W/sterm.log; then
    pass "stop_sigterm_startup_blocked (rank 0 gone $elapsed ms after the signal)"
else fail stop_sigterm_startup_blocked "rank 0 '$r0', $elapsed ms: $(grep -h 'stopped\|error' $W/sterm.log | head -2 | tr '\n' ' ')"; fi
elapsed=-1
if blocked_start sint; then
    kill -INT $r0
    sleep 0.3
    t0=$(date +%s%N)
    kill -INT $r0
    for i in $(seq 100); do kill -0 $r0 2>/dev/null || break; sleep 0.02; done
    elapsed=$(ms_since $t0)
fi
wait $job
if [ -n "$r0" ] && [ $elapsed -ge 0 ] && [ $elapsed -lt 1500 ] && grep -q "second SIGINT: exiting at once, without a checkpoint" $W/sint.log; then
    pass "stop_second_sigint (rank 0 gone $elapsed ms after the second SIGINT)"
else fail stop_second_sigint "rank 0 '$r0', $elapsed ms: $(tail -3 $W/sint.log | tr '\n' ' ')"; fi

# --- SIGTERM to one rank during evaluation: checkpoint of the step, exit 0, and a resume
# that repeats the evaluation and continues bitwise
E=(--set train.steps=4 --set data.eval_every=2 --set data.eval_batches=1000 --set checkpoint.every=100
   --set log.every=1 --set system.threads=1)
"${MPIRUN[@]}" -np 2 $T train $CFG "${E[@]}" --set run.out_dir=$W/eref >$W/eref.log 2>&1
"${MPIRUN[@]}" -np 2 $T train $CFG "${E[@]}" --set run.out_dir=$W/ev --set checkpoint.dir=$W/cev >$W/ev.log 2>&1 &
job=$!
t0=
if wait_for $W/ev.log "step     2/4 | loss"; then
    sleep 0.2
    t0=$(date +%s%N)
    kill -TERM $(rank_pid ev 1)
fi
wait $job
rc=$?
elapsed=$([ -n "$t0" ] && ms_since $t0 || echo -1)
if [ $rc = 0 ] && [ $elapsed -ge 0 ] && [ $elapsed -lt 10000 ] && [ "$(cat $W/cev/latest 2>/dev/null)" = step_00000002 ] &&
    tail -1 $W/ev.log | grep -q "stopped by SIGTERM during the evaluation of step 2: checkpoint written to $W/cev"; then
    pass "stop_sigterm_eval ($elapsed ms after the signal)"
else fail stop_sigterm_eval "exit $rc after $elapsed ms: $(tail -2 $W/ev.log | tr '\n' ' ')"; fi
"${MPIRUN[@]}" -np 2 $T train $CFG "${E[@]}" --set run.out_dir=$W/ev --set checkpoint.dir=$W/cev >$W/ev2.log 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "evaluating again" $W/ev2.log && out=$(same_steps $W/eref $W/ev 1); then
    pass "stop_sigterm_eval_resume_bitwise $out"
else fail stop_sigterm_eval_resume_bitwise "exit $rc: ${out:-} $(tail -2 $W/ev2.log | tr '\n' ' ')"; fi

# --- SIGTERM during a long resume (a pause before each tensor read): exit 0 within 10 s,
# nothing written; the rerun continues bitwise
R=(--set train.steps=12 --set checkpoint.every=6 --set log.every=1 --set data.eval_every=6 --set system.threads=1)
timeout 60 $T train $CFG "${R[@]}" --set run.out_dir=$W/rref --set checkpoint.dir=$W/crs >$W/rref.log 2>&1
# reading NAME: whether a process of the job writing $W/NAME has a checkpoint rank file open.
reading() {
    local p
    for p in $(pgrep -f "^$T train .*run.out_dir=$W/$1( |$)"); do
        ls -l /proc/$p/fd 2>/dev/null | grep -q "crs/step_00000006/rank_" && return 0
    done
    return 1
}
resume_stop() { # NAME NP: a resume from step 6 stopped by SIGTERM to every rank (as Slurm does)
    local name=$1 np=$2 launch=(timeout 60) i
    [ $np -gt 1 ] && launch=("${MPIRUN[@]}" -np $np)
    TRIDENT_TEST_RESUME_DELAY_MS=100 "${launch[@]}" $T train $CFG "${R[@]}" --set run.out_dir=$W/$name \
        --set checkpoint.dir=$W/c$name --set checkpoint.resume=$W/crs/step_00000006 >$W/$name.log 2>&1 &
    local job=$!
    for i in $(seq 400); do reading $name && break; sleep 0.05; done
    t0=$(date +%s%N)
    kill -TERM $(pgrep -f "^$T train .*run.out_dir=$W/$name( |$)")
    wait $job
    rc=$?
    elapsed=$(ms_since $t0)
}
before=$(ls -lR --time-style=+%s.%N $W/crs | md5sum)
resume_stop rs 1
if [ $rc = 0 ] && [ $elapsed -lt 10000 ] && [ "$before" = "$(ls -lR --time-style=+%s.%N $W/crs | md5sum)" ] &&
    [ ! -e $W/rs/model.bin ] && [ ! -e $W/crs_rs ] &&
    tail -1 $W/rs.log | grep -q "stopped by SIGTERM during start-up (phase 'resume'), before the first step: nothing to checkpoint"; then
    pass "stop_sigterm_resume ($elapsed ms after the signal, nothing written)"
else fail stop_sigterm_resume "exit $rc after $elapsed ms: $(tail -2 $W/rs.log | tr '\n' ' ')"; fi
timeout 60 $T train $CFG "${R[@]}" --set run.out_dir=$W/rs --set checkpoint.dir=$W/crs2 \
    --set checkpoint.resume=$W/crs/step_00000006 >$W/rs2.log 2>&1
rc=$?
if [ $rc = 0 ] && out=$(same_steps $W/rref $W/rs 7) && cmp -s $W/rref/model.bin $W/rs/model.bin; then
    pass "stop_sigterm_resume_rerun_bitwise $out"
else fail stop_sigterm_resume_rerun_bitwise "exit $rc: ${out:-} $(tail -2 $W/rs2.log | tr '\n' ' ')"; fi
resume_stop rs_np2 2
if [ $rc = 0 ] && [ $elapsed -lt 10000 ] && [ "$(grep -c "stopped by SIGTERM during start-up (phase 'resume')" $W/rs_np2.log)" = 1 ]; then
    pass "stop_sigterm_resume_np2 ($elapsed ms after the signal to both ranks)"
else fail stop_sigterm_resume_np2 "exit $rc after $elapsed ms: $(tail -3 $W/rs_np2.log | tr '\n' ' ')"; fi

# --- Ctrl-C (issue 16): a first SIGINT stops after the current step with a checkpoint and
# exit 0, as SIGTERM does; without checkpoint.dir the last line says nothing could be saved;
# a second SIGINT ends the process at once (exit 130). One process, and 2 ranks under
# scripts/launch.sh, whose Ctrl-C (SIGINT to its process group, as a terminal sends it) reaches
# the ranks as SIGUSR1: mpirun itself would abort the job.
C=(--set data.eval_every=0 --set log.every=1 --set checkpoint.every=1000 --set system.threads=1)
# Steps of about half a second, so that a second Ctrl-C lands while the first is honoured.
SLOW=(--set model.d_model=256 --set model.n_head=4 --set model.seq_len=128 --set train.micro_batch=8
      --set train.global_batch=16)
# ctrl_c NAME COUNT NP [ARGS...]: trains in the background (NP 1: trident alone; 2: launch.sh
# -n 2), waits for step 5, sends COUNT SIGINTs 0.1 s apart to the process group (a terminal's
# Ctrl-C), and sets rc, elapsed (ms from the last SIGINT to the end) and left (processes of
# the run still there).
ctrl_c() {
    local name=$1 count=$2 np=$3 i job guard
    shift 3
    # setsid: the run leads a process group of its own, which the SIGINTs go to (no `timeout`
    # in it: that would pass each one on again; a watchdog bounds the run instead)
    if [ $np = 1 ]; then
        env --default-signal=INT setsid $T train $CFG "${C[@]}" --set train.steps=100000 \
            --set run.out_dir=$W/$name "$@" >$W/$name.log 2>&1 &
    else
        env --default-signal=INT setsid scripts/launch.sh -n $np $CFG "${C[@]}" \
            --set train.steps=100000 --set run.out_dir=$W/$name "$@" >$W/$name.log 2>&1 &
    fi
    job=$!
    (sleep 120 && kill -KILL -- -$job) 2>/dev/null &
    guard=$!
    wait_for $W/$name.log "step     5/" || true
    for i in $(seq $count); do
        [ $i -gt 1 ] && sleep 0.1
        kill -INT -- -$job 2>/dev/null
    done
    local t0=$(date +%s%N)
    wait $job
    rc=$?
    elapsed=$(ms_since $t0)
    kill $guard 2>/dev/null
    sleep 0.2 # ranks that outlive the job would still be there
    left=$(pgrep -f "run.out_dir=$W/$name( |$)" | wc -l)
}
latest_step() { sed -n 's/^step_0*\([0-9]\)/\1/p' $1/latest 2>/dev/null; }

M1=(--set train.steps=300)
timeout 60 $T train $CFG "${C[@]}" "${M1[@]}" --set run.out_dir=$W/cref >$W/cref.log 2>&1
ctrl_c c1 1 1 --set checkpoint.dir=$W/cc1 "${M1[@]}"
at=$(latest_step $W/cc1)
if [ $rc = 0 ] && [ $elapsed -lt 10000 ] && [ -n "$at" ] &&
    tail -1 $W/c1.log | grep -q "^stopped by SIGINT after step $at: checkpoint written to $W/cc1; a run with checkpoint.resume: auto continues from it$"; then
    pass "stop_ctrl_c_1proc_checkpoint (step $at, $elapsed ms)"
else fail stop_ctrl_c_1proc_checkpoint "exit $rc after $elapsed ms, latest '$at': $(tail -2 $W/c1.log | tr '\n' ' ')"; fi
# The stop's checkpoint resumes bitwise: the same run as the uninterrupted reference.
if [ -n "$at" ] && [ "$at" -lt 300 ]; then
    timeout 60 $T train $CFG "${C[@]}" "${M1[@]}" --set run.out_dir=$W/c1 --set checkpoint.dir=$W/cc1 >$W/c1b.log 2>&1
    rc=$?
    if [ $rc = 0 ] && out=$(same_steps $W/cref $W/c1 1) && cmp -s $W/cref/model.bin $W/c1/model.bin; then
        pass "stop_ctrl_c_1proc_resume_bitwise $out"
    else fail stop_ctrl_c_1proc_resume_bitwise "exit $rc: ${out:-} $(tail -2 $W/c1b.log | tr '\n' ' ')"; fi
else fail stop_ctrl_c_1proc_resume_bitwise "no checkpoint before step 300 to resume ('$at')"; fi

ctrl_c c2 1 1
if [ $rc = 0 ] && [ $elapsed -lt 10000 ] && [ ! -e $W/c2/model.bin ] &&
    tail -1 $W/c2.log | grep -q "^warning: stopped by SIGINT after step [0-9]* without a checkpoint: nothing could be saved, since checkpoint.dir is not set"; then
    pass "stop_ctrl_c_1proc_no_checkpoint_dir ($elapsed ms)"
else fail stop_ctrl_c_1proc_no_checkpoint_dir "exit $rc after $elapsed ms: $(tail -2 $W/c2.log | tr '\n' ' ')"; fi

ctrl_c c3 2 1 --set checkpoint.dir=$W/cc3 "${SLOW[@]}"
if [ $rc = 130 ] && [ $elapsed -lt 1500 ] && [ ! -e $W/cc3/latest ] && [ $left = 0 ] &&
    tail -1 $W/c3.log | grep -q "second SIGINT: exiting at once, without a checkpoint"; then
    pass "stop_ctrl_c_twice_1proc_exit130 ($elapsed ms after the second)"
else fail stop_ctrl_c_twice_1proc_exit130 "exit $rc after $elapsed ms, latest '$(cat $W/cc3/latest 2>/dev/null)', $left left: $(tail -2 $W/c3.log | tr '\n' ' ')"; fi

ctrl_c l1 1 2 --set checkpoint.dir=$W/cl1
at=$(latest_step $W/cl1)
if [ $rc = 0 ] && [ $elapsed -lt 10000 ] && [ -n "$at" ] && [ $left = 0 ] &&
    grep -q "^launch: Ctrl-C: every rank stops after its current step" $W/l1.log &&
    tail -1 $W/l1.log | grep -q "^stopped by SIGUSR1 after step $at: checkpoint written to $W/cl1; a run with checkpoint.resume: auto continues from it$"; then
    pass "stop_ctrl_c_launch_np2_checkpoint (step $at, $elapsed ms)"
else fail stop_ctrl_c_launch_np2_checkpoint "exit $rc after $elapsed ms, latest '$at', $left left: $(tail -3 $W/l1.log | tr '\n' ' ')"; fi

# (mpirun passes stdout and stderr on apart: the last step lines and the report may come after
# the warning, which is the last line of stderr)
ctrl_c l2 1 2
if [ $rc = 0 ] && [ $elapsed -lt 10000 ] && [ $left = 0 ] &&
    [ "$(grep -c 'nothing could be saved, since checkpoint.dir is not set' $W/l2.log)" = 1 ] &&
    grep -v "^step \|^  \|^outputs:\|^next:" $W/l2.log | tail -1 |
    grep -q "^warning: stopped by SIGUSR1 after step [0-9]* without a checkpoint: nothing could be saved"; then
    pass "stop_ctrl_c_launch_np2_no_checkpoint_dir ($elapsed ms)"
else fail stop_ctrl_c_launch_np2_no_checkpoint_dir "exit $rc after $elapsed ms, $left left: $(tail -3 $W/l2.log | tr '\n' ' ')"; fi

# A second Ctrl-C: launch.sh passes SIGINT to mpirun, which kills the ranks within about 2 s
# (SIGTERM, then SIGKILL: odls_base_sigkill_timeout); launch.sh exits 130.
ctrl_c l3 2 2 --set checkpoint.dir=$W/cl3 "${SLOW[@]}"
if [ $rc = 130 ] && [ $elapsed -lt 6000 ] && [ $left = 0 ] &&
    grep -q "^launch: Ctrl-C again: ending the job at once, without a checkpoint" $W/l3.log; then
    pass "stop_ctrl_c_twice_launch_np2_exit130 ($elapsed ms after the second)"
else fail stop_ctrl_c_twice_launch_np2_exit130 "exit $rc after $elapsed ms, $left left: $(tail -3 $W/l3.log | tr '\n' ' ')"; fi

echo "stop tests: $fails failed"
[ $fails = 0 ]
