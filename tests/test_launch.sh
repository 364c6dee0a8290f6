#!/usr/bin/env bash
# Tests of scripts/launch.sh (mpirun on one machine): a 2-rank training run, usage errors
# (exit 2), another trident command after --, trident's exit code passed through, and a
# rank killed with SIGKILL while the others wait in a collective: the launcher must return
# non-zero and leave no process behind, well before the comm timeout would have fired.
# Prints PASS/FAIL lines. Every launch runs under `timeout`, so a hang fails instead of
# hanging the suite.
set -u
cd "$(dirname "$0")/.." || exit 1
export TRIDENT=${TRIDENT_BIN:-${TRIDENT:-build/trident}} # TRIDENT_BIN: test another build
L=scripts/launch.sh
W=$(mktemp -d)
bgpid=
cleanup() {
    [ -n "$bgpid" ] && kill -KILL "$bgpid" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
tail_of() { tail -n 4 "$1" | tr '\n' ' ' | cut -c1-400; }

if [ ! -x "$TRIDENT" ]; then
    fail launch_build "$TRIDENT is missing; run make"
    exit 1
fi
if ! command -v mpirun >/dev/null; then
    fail launch_mpirun "mpirun not found (OpenMPI); run scripts/install-deps.sh"
    exit 1
fi
for s in scripts/launch.sh scripts/slurm/train.sbatch scripts/slurm/local-cluster.sh; do
    if bash -n "$s" 2>"$W/out"; then pass "launch_syntax_$(basename "$s")"
    else fail "launch_syntax_$(basename "$s")" "$(tail_of "$W/out")"; fi
done

# --- train on 2 ranks: exit 0, 6 step lines, system.threads set by the launcher
timeout 120 $L -n 2 tests/configs/tiny.yaml --set parallel.zero=0 --set run.out_dir="$W/run" \
    >"$W/out" 2>&1
rc=$?
steps=$(grep -c '"type":"step"' "$W/run/metrics.jsonl" 2>/dev/null)
if [ $rc = 0 ] && [ "${steps:-0}" = 6 ] && grep -q "mesh: world 2 " "$W/out"; then pass launch_train_np2
else fail launch_train_np2 "exit $rc, ${steps:-0} step lines: $(tail_of "$W/out")"; fi
cores=$(nproc)
want=$((cores / 2)); [ $want -ge 1 ] || want=1
if grep -q -- "--set system.threads=$want" "$W/out" && grep -q -- "--bind-to none" "$W/out" &&
    grep -q -- "--mca btl self,vader" "$W/out"; then pass launch_mpirun_line
else fail launch_mpirun_line "$(grep '^launch:' "$W/out" | cut -c1-400)"; fi

# --- a user's system.threads is kept; --oversubscribe only past the cores
$L -n $((cores + 1)) --dry-run tests/configs/tiny.yaml --set system.threads=1 >"$W/out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q -- "--oversubscribe" "$W/out" &&
    [ "$(grep -o 'system.threads=[0-9]*' "$W/out")" = system.threads=1 ]; then pass launch_dry_run
else fail launch_dry_run "exit $rc: $(tail_of "$W/out")"; fi

# --- usage errors: exit 2 with a message
usage_err() {
    local name=$1 want=$2; shift 2
    timeout 30 $L "$@" >"$W/out" 2>&1
    local rc=$?
    if [ $rc = 2 ] && grep -qF -- "$want" "$W/out"; then pass "$name"
    else fail "$name" "exit $rc, expected 2 and '$want': $(tail_of "$W/out")"; fi
}
usage_err launch_bad_n_zero "number of processes" -n 0 tests/configs/tiny.yaml
usage_err launch_bad_n_word "number of processes" -n two tests/configs/tiny.yaml
usage_err launch_no_n "-n N is required" tests/configs/tiny.yaml
usage_err launch_missing_config "config '$W/nope.yaml' not found" -n 2 "$W/nope.yaml"
usage_err launch_no_config "missing CONFIG" -n 2

# --- another command after --
timeout 120 $L -n 4 -- comm-test --world-shape 2,2,1 --bytes 8:1K >"$W/out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "comm-test: OK, 0 wrong elements" "$W/out"; then pass launch_comm_test_np4
else fail launch_comm_test_np4 "exit $rc: $(tail_of "$W/out")"; fi

# --- trident's exit code comes through (a shape that does not match the world: 2)
timeout 60 $L -n 2 -- comm-test --world-shape 2,2,1 >"$W/out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "multiplies to 4, but the world has 2 ranks" "$W/out"; then
    pass launch_exit_code
else fail launch_exit_code "exit $rc, expected 2: $(tail_of "$W/out")"; fi

# --- a rank dies: rank 2 stalls at step 1 while ranks 0, 1, 3 wait in the all-reduce; we
# kill it with SIGKILL. The launcher must return non-zero and every process of the job must
# be gone within timeout (20 s) + 10 s. A tag in the environment tells our processes from
# any other job's.
tag=launch-test-$$-$RANDOM
t0=$(date +%s%N)
TRIDENT_LAUNCH_TEST_TAG=$tag timeout 60 $L -n 4 -- comm-test --world-shape 1,1,4 --timeout 20 \
    --stall-rank 2 --stall-step 1 --bytes 8:64 --iters 2 >"$W/dead" 2>&1 &
bgpid=$!
# env_of PID: the environment of PID, one VAR=VALUE a line (nothing when unreadable or gone).
env_of() { { tr '\0' '\n' <"/proc/$1/environ"; } 2>/dev/null; }
# tagged: the processes whose environment holds our tag (the launcher, mpirun and the ranks).
tagged() {
    local d p
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        env_of "$p" | grep -qx "TRIDENT_LAUNCH_TEST_TAG=$tag" && echo "$p"
    done
}
# rank_pid R: the trident process of our job whose OMPI_COMM_WORLD_RANK is R.
rank_pid() {
    local p exe
    exe=$(readlink -f "$TRIDENT")
    for p in $(tagged); do
        [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$exe" ] || continue
        env_of "$p" | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return 0; }
    done
    return 1
}
victim=
for ((i = 0; i < 150; i++)); do # up to 15 s for the job to reach the stall
    if grep -q "stalling at step 1" "$W/dead"; then
        victim=$(rank_pid 2)
        [ -n "$victim" ] && break
    fi
    kill -0 $bgpid 2>/dev/null || break
    sleep 0.1
done
if [ -z "$victim" ]; then
    fail launch_rank_killed "rank 2 never stalled or its pid was not found: $(tail_of "$W/dead")"
else
    sleep 0.5 # let ranks 0, 1 and 3 enter the collective
    kill -KILL "$victim"
    wait $bgpid
    rc=$?
    bgpid=
    elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
    if [ $rc != 0 ] && [ $rc != 124 ] && [ $elapsed_ms -lt 30000 ]; then
        pass launch_rank_killed
    else fail launch_rank_killed "launcher exit $rc after $elapsed_ms ms (want non-zero within 30 s): $(tail_of "$W/dead")"; fi
    echo "# launcher exit $rc, $elapsed_ms ms from start to exit (rank 2 killed after the stall)"
    sleep 0.3
    # Nothing of the job may remain: no rank, no mpirun, no helper.
    left=$(tagged | tr '\n' ' ')
    left=${left% }
    if [ -z "$left" ]; then pass launch_rank_killed_no_leftover
    else
        fail launch_rank_killed_no_leftover "still alive: $(for p in $left; do { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | cut -c1-80; echo -n "($p); "; done)"
        for p in $left; do kill -KILL "$p" 2>/dev/null; done
    fi
fi

[ $fails = 0 ]
