#!/usr/bin/env bash
# Multi-process tests of the launch (PMIx) and the MPI comm backend: `trident comm-test`
# under mpirun on 1, 2, 4 and 8 ranks with several mesh shapes (every collective on every
# group, blocking and non-blocking, wrong elements counted over the world), the staged
# backend over MPI (TRIDENT_COMM_STAGED=1), the launch layout, the comm timeout
# (every process exits with code 5 and the message names the group, the collective, the
# step and the ranks), and the config error of a world that the mesh does not factor.
# Prints PASS/FAIL lines. Every mpirun runs under `timeout`, so a hang fails the test
# instead of hanging the suite.
set -u
cd "$(dirname "$0")/.."
T=${TRIDENT_BIN:-build/trident} # TRIDENT_BIN: test another build
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS=1
# Root in containers; 8 ranks on 2 cores.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
BYTES=8:4K
ITERS=3
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
tail_of() { tail -n 4 "$1" | tr '\n' ' ' | cut -c1-400; }

if [ ! -x $T ]; then
    fail comm_build "$T is missing; run make"
    exit 1
fi
if ! command -v mpirun >/dev/null; then
    fail comm_mpirun "mpirun not found (OpenMPI); run scripts/install-deps.sh"
    exit 1
fi

# comm_test NAME NP SHAPE [STAGED]: comm-test on NP ranks must find no wrong element; with
# STAGED=1 on the staged backend over MPI (TRIDENT_COMM_STAGED=1, set for every rank).
comm_test() {
    local name=$1 np=$2 shape=$3 staged=${4:-0} args=()
    [ -n "$shape" ] && args=(--world-shape "$shape")
    TRIDENT_COMM_STAGED=$staged timeout 120 "${MPIRUN[@]}" -x TRIDENT_COMM_STAGED -np "$np" \
        $T comm-test "${args[@]}" --bytes $BYTES --iters $ITERS >"$W/out" 2>&1
    local rc=$?
    if [ $rc != 0 ]; then fail "$name" "exit $rc: $(tail_of "$W/out")"
    elif ! grep -q "comm-test: OK, 0 wrong elements" "$W/out"; then fail "$name" "no OK line: $(tail_of "$W/out")"
    elif [ "$np" -gt 1 ] && ! grep -qE "^ +[0-9]+ +[0-9]+ +float all_reduce_sum" "$W/out"; then
        fail "$name" "no table rows"
    elif [ "$np" -gt 1 ] && ! grep -q "^# non-blocking forms .*: 0 differ" "$W/out"; then
        fail "$name" "no line on the non-blocking forms"
    elif [ "$staged" = 1 ] && ! grep -q "comm mpi (staged)," "$W/out"; then
        fail "$name" "not run on the staged backend: $(grep -m1 '# comm-test:' "$W/out")"
    else pass "$name"; fi
}

# --- singleton: started alone, a world of one (no PMIx server, no MPI)
TRIDENT_LOG=debug timeout 60 $T comm-test --bytes $BYTES --iters $ITERS >"$W/out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "launch: singleton" "$W/out" && grep -q "world 1 = .*comm self" "$W/out"; then
    pass comm_singleton
else fail comm_singleton "exit $rc: $(tail_of "$W/out")"; fi

# --- launch layout under mpirun: rank, world, local rank and local size from PMIx
TRIDENT_LOG=debug timeout 60 "${MPIRUN[@]}" -np 4 $T comm-test --bytes 8:8 --iters 1 >"$W/out" 2>&1
rc=$?
ok=1
for r in 0 1 2 3; do grep -qE "launch: pmix namespace [^ ]+ rank $r of 4, local $r of 4 " "$W/out" || ok=0; done
if [ $rc = 0 ] && [ $ok = 1 ]; then pass launch_pmix_layout
else fail launch_pmix_layout "exit $rc: $(grep 'launch:' "$W/out" | tr '\n' ' ' | cut -c1-400)"; fi

# --- comm-test on every world size and several shapes (tp,pp,dp)
comm_test comm_np1 1 ""
comm_test comm_np2_tp2 2 2,1,1
comm_test comm_np2_pp2 2 1,2,1
comm_test comm_np2_dp2 2 1,1,2
comm_test comm_np4_default 4 ""
comm_test comm_np4_tp2_pp2 4 2,2,1
comm_test comm_np4_pp2_dp2 4 1,2,2
comm_test comm_np4_tp2_dp2 4 2,1,2
comm_test comm_np4_tp4 4 4,1,1
comm_test comm_np4_pp4 4 1,4,1
comm_test comm_np8_tp2_pp2_dp2 8 2,2,2
comm_test comm_np8_pp4_dp2 8 1,4,2
# the staged backend (MPI through host copies, as several ranks sharing a GPU use it)
comm_test comm_np4_tp2_dp2_staged 4 2,1,2 1
comm_test comm_np8_tp2_pp2_dp2_staged 8 2,2,2 1

# --- a shape that does not multiply to the world is a usage error (exit 2)
timeout 60 "${MPIRUN[@]}" -np 2 $T comm-test --world-shape 2,2,1 >"$W/out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "multiplies to 4, but the world has 2 ranks" "$W/out"; then pass comm_bad_shape
else fail comm_bad_shape "exit $rc: $(tail_of "$W/out")"; fi

# --- timeout: rank 2 stops at step 1; the other three wait 3 s, name what they waited for,
# and the job ends with exit code 5 within timeout + 10 s.
t0=$(date +%s%N)
timeout 60 "${MPIRUN[@]}" -np 4 $T comm-test --world-shape 1,1,4 --timeout 3 --stall-rank 2 \
    --stall-step 1 >"$W/out" 2>&1
rc=$?
elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
line=$(grep -m1 "error: comm timeout after" "$W/out")
if [ $rc != 5 ]; then fail comm_timeout_exit "exit $rc, expected 5: $(tail_of "$W/out")"
else pass comm_timeout_exit; fi
if [ $elapsed_ms -lt 13000 ]; then pass comm_timeout_bounded
else fail comm_timeout_bounded "took $elapsed_ms ms, expected under 13 s (timeout 3 + 10)"; fi
if echo "$line" | grep -qE "all_reduce of [0-9]+ bytes on group dp \(ranks 0,1,2,3\) at step 1; waiting for ranks [0-9,]*2[0-9,]* \(global\)"; then
    pass comm_timeout_message
else fail comm_timeout_message "message: '${line:-none}'"; fi
if [ "$(grep -c "error: comm timeout after" "$W/out")" -ge 1 ] && grep -q "stalling at step 1" "$W/out"; then
    pass comm_timeout_stall
else fail comm_timeout_stall "$(tail_of "$W/out")"; fi
sleep 0.2
if pgrep -f "$T comm-test --world-shape 1,1,4 --timeout 3" >/dev/null; then
    fail comm_timeout_no_leftover "a comm-test process is still alive after the job ended"
else pass comm_timeout_no_leftover; fi

# --- a world the mesh does not factor is a config error naming the key
timeout 60 $T check configs/default.yaml --world 6 --set parallel.tp=4 >"$W/out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "parallel.tp" "$W/out"; then pass check_world_not_factored
else fail check_world_not_factored "exit $rc: $(tail_of "$W/out")"; fi

[ $fails = 0 ]
