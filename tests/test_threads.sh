#!/usr/bin/env bash
# tests/test_threads.sh: CPU threads on a shared machine (README "CPU threads"), through
# `trident train`:
#   - system.threads 0 takes the cores the process may use: every core alone, 1 under
#     `taskset -c` of one core, the cores divided between 2 ranks, a cgroup quota (a fake
#     tree through TRIDENT_TEST_CGROUP_ROOT); the start line and the run record say why;
#   - such a run equals bitwise a run with system.threads set to the count it chose;
#   - an explicit system.threads is kept, with what 0 would take;
#   - idle OpenMP threads wait passively: train restarts itself once with
#     OMP_WAIT_POLICY=passive, never when the user set OMP_WAIT_POLICY or
#     GOMP_SPINCOUNT, and commands that do not compute (check, plan) never restart; plan
#     --calibrate restarts as train does (its rates are train's).
# Timing is measured by scripts/bench-threads.sh (make test-perf), never here.
source "$(dirname "$0")/lib.sh"
unset OMP_WAIT_POLICY GOMP_SPINCOUNT TRIDENT_REEXEC
COMMON=(--set train.steps=2 --set data.eval_every=0 --set log.every=1)
CORES=$(nproc) # the CPUs of this shell's affinity mask
ONE_CPU=$(taskset -pc $$ | sed 's/.*: //; s/[-,].*//')

# field RUN KEY: KEY of RUN's run record (the first line of metrics.jsonl)
field() {
    /usr/bin/python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline()).get(sys.argv[2], "<none>"))' \
        "$1/metrics.jsonl" "$2" 2>/dev/null
}
train() { # name [launcher...] -- [train arguments...]: one run into $W/name
    local name=$1 launch=()
    shift
    while [ "$1" != -- ]; do launch+=("$1"); shift; done
    shift
    "${launch[@]}" $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/$name "$@" >$W/$name.log 2>&1 ||
        { fail "$name" "the run failed: $(tail -3 $W/$name.log | tr '\n' ' ')"; return 1; }
}
# expect NAME RUN THREADS WHY_PART WAIT: the record's count, its reason and the start line
expect() {
    local name=$1 run=$2 threads=$3 why=$4 wait=$5 got_t got_why got_wait
    got_t=$(field $W/$run threads) got_why=$(field $W/$run threads_why) got_wait=$(field $W/$run omp_wait)
    if [ "$got_t" = "$threads" ] && [[ "$got_why" == *"$why"* ]] && [ "$got_wait" = "$wait" ] &&
        grep -qF "threads: $threads per rank ($got_why); idle waiting: $wait" $W/$run.log; then
        pass "$name ($got_t: $got_why; $got_wait)"
    else
        fail "$name" "record: $got_t ($got_why; $got_wait), want $threads ($why; $wait); start line: $(grep '^threads:' $W/$run.log)"
    fi
}
PASSIVE="OMP_WAIT_POLICY=passive (set by trident)"

# Alone: every core of the mask.
train alone -- --set system.threads=0 &&
    expect threads_auto_alone alone "$CORES" "allowed, 1 rank on this node" "$PASSIVE"
# taskset of one core: 1 thread, and the same steps as system.threads 1, bit for bit.
train one_core taskset -c "$ONE_CPU" -- --set system.threads=0 &&
    expect threads_auto_one_core one_core 1 "1 " "$PASSIVE"
train one_thread -- --set system.threads=1 &&
    match_reference threads_auto_equals_explicit_count $W/one_thread $W/one_core bitwise
# 2 ranks share the cores: half each (1 on this 2-core machine; rank 0's record).
half=$((CORES / 2 > 0 ? CORES / 2 : 1))
train two_ranks "${MPIRUN[@]}" -np 2 -- --set system.threads=0 &&
    expect threads_auto_two_ranks two_ranks "$half" "2 ranks on this node" "$PASSIVE"
# A cgroup quota of one core (v2, a fake tree): 1 thread, the quota named.
mkdir -p $W/cg/proc/self $W/cg/sys/fs/cgroup
echo "0::/" >$W/cg/proc/self/cgroup
echo "100000 100000" >$W/cg/sys/fs/cgroup/cpu.max
TRIDENT_TEST_CGROUP_ROOT=$W/cg train quota -- --set system.threads=0 &&
    expect threads_auto_cgroup_quota quota 1 "cgroup quota 1.00 cores" "$PASSIVE"
# An explicit count is kept, with what 0 would take when that is fewer.
train explicit taskset -c "$ONE_CPU" -- --set system.threads=2 &&
    expect threads_explicit_kept explicit 2 "system.threads; 0 would take 1: " "$PASSIVE"

# The user's waiting wins: no restart, nothing set.
OMP_WAIT_POLICY=active train user_active -- --set system.threads=1 &&
    expect wait_user_policy_kept user_active 1 system.threads "OMP_WAIT_POLICY=active"
GOMP_SPINCOUNT=20000 train user_spin -- --set system.threads=1 &&
    expect wait_user_spincount_kept user_spin 1 system.threads "GOMP_SPINCOUNT=20000"

# Restarts, counted as execve calls: train once (the first exec is the shell's), check never.
if command -v strace >/dev/null; then
    execs() { strace -f -qq -e trace=execve -o $W/strace.txt "$@" >$W/strace.log 2>&1; grep -c 'execve(' $W/strace.txt; }
    n_train=$(execs $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/traced)
    n_check=$(execs $T check $CFG)
    n_user=$(OMP_WAIT_POLICY=passive execs $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/traced2)
    if [ "$n_train" = 2 ] && [ "$n_check" = 1 ] && [ "$n_user" = 1 ]; then
        pass "wait_restart_once_only_when_computing (execve: train $n_train, check $n_check, train with OMP_WAIT_POLICY set $n_user)"
    else
        fail wait_restart_once_only_when_computing "execve: train $n_train (want 2), check $n_check (want 1), with OMP_WAIT_POLICY $n_user (want 1)"
    fi
    # plan --calibrate times the ops as train runs them: the same restart (here it stops at
    # once, with no config named); plan alone does not restart.
    n_cal=$(execs $T plan --calibrate)
    n_plan=$(execs $T plan $CFG)
    if [ "$n_cal" = 2 ] && [ "$n_plan" = 1 ] && grep -q "OMP_WAIT_POLICY=passive" <(strace -f -qq -v -e trace=execve -s 4096 $T plan --calibrate 2>&1); then
        pass "wait_restart_calibrate_as_train (execve: plan --calibrate $n_cal, plan $n_plan)"
    else
        fail wait_restart_calibrate_as_train "execve: plan --calibrate $n_cal (want 2, with OMP_WAIT_POLICY=passive), plan $n_plan (want 1)"
    fi
fi
[ $fails = 0 ]
