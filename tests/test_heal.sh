#!/usr/bin/env bash
# test_heal.sh: a job that heals itself (issue 19, point 5): the restart policy of
# scripts/heal.sh against given exit codes, verdicts and host lists, and the restart end to
# end through scripts/launch.sh --retries with mpirun:
#
#   policy   retryable exits (5, deaths by signal) and not (0, 1, 2, 3, 4, 6); the hosts a
#            verdict blames; which host the next try leaves out, with and without a spare.
#   healed   4 ranks, rank 2 SIGKILLed after the checkpoint of step 20: launch.sh restarts the
#            job, which resumes from the newest checkpoint and completes; its step and eval
#            lines (timing fields aside) and model.bin equal an uninterrupted run's.
#   fuzz     tests/fuzz_heal.py: 100 seeded cases a family (verdict reader, host choice).
#   no_retry exits 2 (config) and 3 (data) are not retried.
# Prints one timing line ("# healed: kill to done 3.9 s") for the closing note.
. "$(dirname "$0")/lib.sh"
HEAL=scripts/heal.sh

# --- policy: exit codes ---
ok=1 got=
for rc in 5 129 134 137 143; do bash $HEAL retryable $rc >/dev/null || { ok=0; got+=" $rc:no"; }; done
for rc in 0 1 2 3 4 6 7 127 255; do bash $HEAL retryable $rc >/dev/null && { ok=0; got+=" $rc:yes"; }; done
if [ $ok = 1 ]; then pass heal_policy_exit_codes
else fail heal_policy_exit_codes "wrong answers:$got"; fi

# --- policy: the blamed hosts of a verdict ---
printf '%s\n' "diagnose: step 30, dp group {0,1,2,3}: all_reduce #45 stalled" \
    "diagnose: blamed rank 3 (host n07)" >$W/v1
printf '%s\n' "[r0] info: something" "diagnose: blamed ranks 1 (host n02), 5 (host n04), 7 (host n04), 9 (host unknown)" >$W/v2
printf '%s\n' "diagnose: no verdict" >$W/v3
b1=$(bash $HEAL blamed $W/v1 | tr '\n' ,) b2=$(bash $HEAL blamed $W/v2 | tr '\n' ,)
b3=$(bash $HEAL blamed $W/v3 | tr '\n' ,) b4=$(bash $HEAL blamed $W/missing | tr '\n' ,)
if [ "$b1" = n07, ] && [ "$b2" = n02,n04, ] && [ -z "$b3" ] && [ -z "$b4" ]; then pass heal_policy_blamed
else fail heal_policy_blamed "got '$b1' '$b2' '$b3' '$b4'"; fi

# --- policy: which hosts the next try leaves out (HOSTS NEED EXCLUDED BLAMED -> EXPECTED) ---
ok=1 got=
while IFS='|' read -r hosts need excluded blamed want; do
    out=$(bash $HEAL exclude "$hosts" "$need" "$excluded" "$blamed" 2>/dev/null)
    [ "$out" = "$want" ] || { ok=0; got+=" [$hosts need $need out '$excluded' blamed '$blamed': '$out', want '$want']"; }
done <<'EOF'
n1,n2,n3|2||n2|n2
n1,n2|2||n2|
n1,n2,n3,n4|2|n1|n2|n1,n2
n1,n2,n3,n4|2|n1,n2|n3|n1,n2
n1,n2,n3|2|n2|n2|n2
n1,n2,n3|2||n9|
n1,n2,n3,n4|2||n2,n4|n2,n4
n1,n2,n3,n4|3||n2,n4|n2
n1,n2,n3|2|||
EOF
if [ $ok = 1 ]; then pass heal_policy_exclude_hosts
else fail heal_policy_exclude_hosts "$got"; fi
bash $HEAL exclude n1,n2 x "" n1 >/dev/null 2>&1
rc=$?
if [ $rc = 2 ]; then pass heal_policy_usage; else fail heal_policy_usage "exit $rc for NEED 'x'"; fi

# --- policy: seeded fuzzing of the verdict reader and the host choice (HEAL_FUZZ_CASES=N for
# more than 100 a family)
if python3 tests/fuzz_heal.py "${HEAL_FUZZ_CASES:-100}" 19 >$W/fuzz.log 2>&1; then
    pass "heal_fuzz $(grep '^fuzz_heal' $W/fuzz.log | sed 's/^fuzz_heal //' | tr '\n' ';')"
else fail heal_fuzz "$(grep -v '^fuzz_heal' $W/fuzz.log | head -3 | tr '\n' ' ') $(grep '^fuzz_heal' $W/fuzz.log | tr '\n' ';')"; fi

# --- healed: rank 2 killed after a checkpoint, restarted, bitwise equal to an uninterrupted run
export TRIDENT=$T
ARGS=(--set train.steps=60 --set train.global_batch=16 --set checkpoint.every=10 --set log.every=5
      --set data.eval_every=20 --set system.threads=1 --set checkpoint.async=false)
scripts/launch.sh -n 4 $CFG "${ARGS[@]}" --set run.out_dir=$W/ref --set checkpoint.dir=$W/ref-ckpt \
    >$W/ref.log 2>&1 || fail heal_reference_run "exit $?: $(tail -n 3 $W/ref.log | tr '\n' ' ')"
# Rank 0 slowed to ~30 ms a step (it changes no number), so that the kill lands mid-run.
TRIDENT_TEST_SLOW_RANK=0:30 TRIDENT_MPIRUN_ARGS="-x TRIDENT_TEST_SLOW_RANK" \
    timeout 120 scripts/launch.sh --retries 2 -n 4 $CFG "${ARGS[@]}" --set run.out_dir=$W/heal \
    --set checkpoint.dir=$W/heal-ckpt >$W/heal.log 2>&1 &
job=$!
for i in $(seq 300); do [ -d $W/heal-ckpt/step_00000020 ] && break; sleep 0.1; done
pid=$(python3 -c "import struct,sys; print(struct.unpack_from('<i', open(sys.argv[1],'rb').read(2048), 32)[0])" \
    $W/heal/diagnose/rank_00002.ring 2>/dev/null)
t0=$(date +%s%N)
[ -n "$pid" ] && kill -KILL "$pid"
wait $job
rc=$?
echo "# healed: kill to done $(((($(date +%s%N) - t0) / 1000000)))ms"
restarts=$(grep -c "^launch: restart " $W/heal.log)
if [ -n "$pid" ] && [ $rc = 0 ] && [ "$restarts" = 1 ] &&
    grep -q "^launch: restart 1 of 2 .*after exit \(5\|1[34][0-9]\) .*blamed rank 2 (host $(hostname))" $W/heal.log &&
    grep -q "^resumed from $W/heal-ckpt/step_000000[2-5]0" $W/heal.log; then
    pass "heal_restart_after_kill ($(grep -o 'after exit [0-9]* ([^)]*)' $W/heal.log | head -1), $(grep -o 'resumed from [^:]*' $W/heal.log | sed "s|$W/||"))"
else
    fail heal_restart_after_kill "victim '$pid', exit $rc, $restarts restarts: $(grep -E '^launch: (restart|no|giving)|^resumed|error' $W/heal.log | head -4 | tr '\n' ' ')"
fi
match_reference heal_restart_bitwise $W/ref $W/heal bitwise types=step,eval steps=13

# --- no restart after exits 2 and 3 ---
for case in "2|--set train.micro_batch=3" "3|--set data.train=$W/nothing_*.bin"; do
    want=${case%%|*}
    # shellcheck disable=SC2086
    timeout 60 scripts/launch.sh --retries 3 -n 2 $CFG ${case#*|} --set run.out_dir=$W/bad$want \
        >$W/bad$want.log 2>&1
    rc=$?
    if [ $rc = $want ] && grep -q "^launch: no restart after exit $want " $W/bad$want.log &&
        [ "$(grep -c '^launch: mpirun' $W/bad$want.log)" = 1 ]; then pass "heal_no_restart_exit_$want"
    else fail "heal_no_restart_exit_$want" "exit $rc: $(grep '^launch:' $W/bad$want.log | tail -n 2 | tr '\n' ' ')"; fi
done
[ $fails = 0 ]
