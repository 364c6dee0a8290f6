#!/usr/bin/env bash
# The directories a run writes (io/rundir.h, issue 15): two runs on one directory (the second
# exits 2 naming the first, on one process and on two ranks, while `export` still reads; the
# first finishes bitwise as a run alone would; two started at once: one runs, one is
# refused), the lock of a run killed with -9 taken over, unusable directories found at start
# (exit 4 before the first step), a full disk (ENOSPC injected with TRIDENT_TEST_CKPT_ENOSPC,
# and a small tmpfs where mounting is permitted: exit 4 naming the file, the previous
# checkpoint kept, a later run resumes bitwise), and the final model written when the last
# checkpoint fails.
set -u
source "$(dirname "$0")/lib.sh"

same_steps() { # A B: B's step lines equal A's (timing aside); model.bin compared apart
    /usr/bin/python3 tests/parity.py "$1" "$2" bitwise types=step,eval ignore=mem_peak_bytes \
        from=1 model=no
}
# wait_for CONDITION...: polls for up to 20 s
wait_for() {
    local i
    for i in $(seq 400); do "$@" && return 0; sleep 0.05; done
    return 1
}
# One thread per run: the runs here are short and often share the machine.
STEPS=15
R=(--set train.steps=$STEPS --set checkpoint.every=5 --set log.every=1 --set data.eval_every=0
   --set system.threads=1)
# A run slowed down by its checkpoints (0.2 s each), so that a second one meets it running.
SLOW=(env TRIDENT_TEST_CKPT_DELAY_MS=200)
$T train $CFG "${R[@]}" --set run.out_dir=$W/ref --set checkpoint.dir=$W/cref >$W/ref.log 2>&1 ||
    fail rundir_reference "$(tail -2 $W/ref.log)"
alone() { # NAME: the run in $W/NAME is the reference run, bitwise, model.bin too
    local out
    out=$(same_steps $W/ref $W/$1) && cmp -s $W/ref/model.bin $W/$1/model.bin && echo "$out"
}

# --- a second run on a directory in use: exit 2 naming the holder; export still reads ------
"${SLOW[@]}" $T train $CFG "${R[@]}" --set run.out_dir=$W/a --set checkpoint.dir=$W/ca >$W/a.log 2>&1 &
apid=$!
wait_for grep -qs "^pid: $apid$" $W/a/.trident.lock && wait_for test -f $W/ca/latest
kill -STOP $apid # it holds both locks while stopped
$T train $CFG "${R[@]}" --set run.out_dir=$W/a --set checkpoint.dir=$W/ca >$W/b.log 2>&1
rc_b=$?
t0=$SECONDS
"${MPIRUN[@]}" -np 2 $T train $CFG "${R[@]}" --set parallel.tp=2 --set system.threads=1 \
    --set run.out_dir=$W/b2 --set checkpoint.dir=$W/ca >$W/b2.log 2>&1
rc_b2=$? t_b2=$((SECONDS - t0))
$T export $W/ca --format llmc --out $W/a_export.bin >$W/export.log 2>&1
rc_export=$?
kill -CONT $apid
wait $apid
rc_a=$?
host=$(hostname)
if [ $rc_b = 2 ] && grep -q "run.out_dir $W/a is in use by pid $apid on host $host" $W/b.log &&
    grep -q "started 20" $W/b.log; then
    pass "rundir_second_run_refused: $(grep -o 'is in use by pid [0-9]* on host [^,]*' $W/b.log)"
else fail rundir_second_run_refused "exit $rc_b: $(grep -h 'error' $W/b.log | head -2)"; fi
if [ $rc_b2 = 2 ] && [ $t_b2 -lt 60 ] && grep -q "checkpoint.dir $W/ca is in use by pid $apid" $W/b2.log; then
    pass "rundir_second_run_refused_2_ranks (every rank ended, ${t_b2} s)"
else fail rundir_second_run_refused_2_ranks "exit $rc_b2 after ${t_b2} s: $(grep -h 'error' $W/b2.log | head -2)"; fi
if [ $rc_export = 0 ]; then pass rundir_export_needs_no_lock
else fail rundir_export_needs_no_lock "$(tail -2 $W/export.log)"; fi
if [ $rc_a = 0 ] && out=$(alone a); then pass "rundir_holder_bitwise_as_alone $out"
else fail rundir_holder_bitwise_as_alone "exit $rc_a $(tail -2 $W/a.log | tr '\n' ' ')"; fi
if [ ! -s $W/a/.trident.lock ] && [ -e $W/a/.trident.lock ]; then pass rundir_lock_released_clean
else fail rundir_lock_released_clean "$(cat $W/a/.trident.lock 2>&1)"; fi

# --- two runs started at once on one directory: one runs as alone, one is refused ---------
# (each at least 2 s long, so that they meet whatever the load of the machine)
SLOW=(env TRIDENT_TEST_CKPT_DELAY_MS=700)
"${SLOW[@]}" $T train $CFG "${R[@]}" --set run.out_dir=$W/s --set checkpoint.dir=$W/cs >$W/s1.log 2>&1 &
p1=$!
"${SLOW[@]}" $T train $CFG "${R[@]}" --set run.out_dir=$W/s --set checkpoint.dir=$W/cs >$W/s2.log 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
if [ "$r1$r2" = 02 ]; then loser=$W/s2.log winner=$p1
elif [ "$r1$r2" = 20 ]; then loser=$W/s1.log winner=$p2
else loser= winner=; fi
if [ -n "$loser" ] && grep -q "is in use by pid $winner" $loser && out=$(alone s); then
    pass "rundir_simultaneous_runs: one refused (exit 2, pid $winner named), the other $out"
else fail rundir_simultaneous_runs "exits $r1 $r2: $(grep -h error $W/s1.log $W/s2.log | head -2)"; fi

# --- a run killed with -9: its lock is taken over, naming it; the resume is bitwise -------
"${SLOW[@]}" $T train $CFG "${R[@]}" --set run.out_dir=$W/k --set checkpoint.dir=$W/ck >$W/k1.log 2>&1 &
kpid=$!
wait_for test -f $W/ck/latest
kill -9 $kpid
wait $kpid 2>/dev/null
$T train $CFG "${R[@]}" --set run.out_dir=$W/k --set checkpoint.dir=$W/ck >$W/k2.log 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "run.out_dir $W/k: taking over the lock of pid $kpid on host $host" $W/k2.log &&
    grep -q "checkpoint.dir $W/ck: taking over the lock of pid $kpid" $W/k2.log && out=$(alone k); then
    pass "rundir_stale_lock_taken_over (pid $kpid named), resumed: $out"
else fail rundir_stale_lock_taken_over "exit $rc: $(grep -h 'warning\|error' $W/k2.log | head -3)"; fi

# --- unusable directories: exit 4 at start, before any step, nothing left behind -----------
unusable() { # NAME PATTERN ARGS...
    local name=$1 pattern=$2
    shift 2
    $T train $CFG "${R[@]}" "$@" >$W/$name.log 2>&1
    local rc=$?
    if [ $rc = 4 ] && grep -q -- "$pattern" $W/$name.log && ! grep -q "^step " $W/$name.log &&
        [ ! -e $W/p_out ]; then pass "$name: $(grep -m1 error $W/$name.log)"
    else fail $name "exit $rc: $(grep -h 'error' $W/$name.log | head -2)"; fi
}
unusable rundir_probe_checkpoint_dir "checkpoint.dir /proc/ck: cannot create the directory" \
    --set run.out_dir=$W/p_out --set checkpoint.dir=/proc/ck
unusable rundir_probe_out_dir "run.out_dir /proc/out: cannot create the directory" \
    --set run.out_dir=/proc/out
touch $W/a_file
unusable rundir_probe_not_a_directory "checkpoint.dir $W/a_file: cannot create the directory: Not a directory" \
    --set run.out_dir=$W/p_out --set checkpoint.dir=$W/a_file
unusable rundir_probe_unwritable "checkpoint.dir /sys/kernel: cannot create" \
    --set run.out_dir=$W/p_out --set checkpoint.dir=/sys/kernel

# --- a full disk (ENOSPC injected): exit 4 naming the file, the previous checkpoint kept -----
# A checkpoint of this run is about 445 kB: the second one (step 10) does not fit in 600 kB.
TRIDENT_TEST_CKPT_ENOSPC=600000 $T train $CFG "${R[@]}" --set run.out_dir=$W/f \
    --set checkpoint.dir=$W/cf >$W/f1.log 2>&1
rc=$?
latest=$(cat $W/cf/latest 2>/dev/null)
kept=$(test -f $W/cf/$latest/manifest.yaml && echo yes) # pruned by the resumed run later
$T train $CFG "${R[@]}" --set run.out_dir=$W/f --set checkpoint.dir=$W/cf >$W/f2.log 2>&1
rc2=$?
if [ $rc = 4 ] && grep -q "cannot write $W/cf/step_00000010.tmp/rank_00000.bin: No space left on device" $W/f1.log &&
    [ "$latest" = step_00000005 ] && [ "$kept" = yes ] && [ $rc2 = 0 ] &&
    grep -q "resumed from $W/cf/step_00000005" $W/f2.log && out=$(alone f); then
    pass "rundir_enospc_injected: exit 4 naming the rank file, step 5 kept, resumed: $out"
else fail rundir_enospc_injected "exit $rc then $rc2, latest '$latest': $(grep -h error $W/f1.log $W/f2.log | head -2)"; fi

# --- the last checkpoint fails: the final model is written anyway, then exit 4 -------------
TRIDENT_TEST_CKPT_ENOSPC=1000 $T train $CFG "${R[@]}" --set checkpoint.every=0 --set run.out_dir=$W/m \
    --set checkpoint.dir=$W/cm >$W/m.log 2>&1
rc=$?
if [ $rc = 4 ] && cmp -s $W/ref/model.bin $W/m/model.bin &&
    grep -q "the checkpoint of the last step ($STEPS) was not written (see above); the final model was written to $W/m/model.bin" $W/m.log; then
    pass "rundir_final_model_despite_failed_checkpoint (exit 4, model.bin as the reference's)"
else fail rundir_final_model_despite_failed_checkpoint "exit $rc: $(grep -h error $W/m.log | head -2)"; fi

# --- a full disk for real: a 1 MiB tmpfs as checkpoint.dir, where mounting is permitted -----
mkdir -p $W/tmpfs
if mount -t tmpfs -o size=1m tmpfs $W/tmpfs 2>/dev/null; then
    trap 'umount $W/tmpfs 2>/dev/null; rm -rf "$W"' EXIT
    $T train $CFG "${R[@]}" --set run.out_dir=$W/t --set checkpoint.dir=$W/tmpfs/ck >$W/t1.log 2>&1
    rc=$?
    latest=$(cat $W/tmpfs/ck/latest 2>/dev/null)
    kept=$(test -f $W/tmpfs/ck/$latest/manifest.yaml && echo yes)
    mount -o remount,size=16m $W/tmpfs
    $T train $CFG "${R[@]}" --set run.out_dir=$W/t --set checkpoint.dir=$W/tmpfs/ck >$W/t2.log 2>&1
    rc2=$?
    if [ $rc = 4 ] && grep -q "warning: checkpoint.dir $W/tmpfs/ck: its file system has .* free, and this run writes" $W/t1.log &&
        grep -q "cannot write $W/tmpfs/ck/step_000000[0-9]*.tmp/.*: No space left on device" $W/t1.log &&
        [ "$kept" = yes ] && [ $rc2 = 0 ] && out=$(alone t); then
        pass "rundir_full_tmpfs: warned at start, exit 4 naming the file, $latest kept, resumed: $out"
    else fail rundir_full_tmpfs "exit $rc then $rc2, latest '$latest': $(grep -h 'error\|warning' $W/t1.log $W/t2.log | head -3)"; fi
    umount $W/tmpfs
else
    echo "note: mounting a tmpfs is not permitted here: the full disk was tested with TRIDENT_TEST_CKPT_ENOSPC only"
fi

echo "run directory tests: $fails failed"
[ $fails = 0 ]
