#!/usr/bin/env bash
# Device profiles (`trident plan --calibrate`, `--device FILE`; plan_profile.h): calibrating on
# the tiny config writes a profile that loads back (plan --json gives the profile's numbers);
# a hand-edited profile moves the prediction as the time model says (twice the matmul rate:
# half the compute); the plan says "calibrated on HOST" for a profile and "uncalibrated
# estimate" for a built-in device; and the reader's errors (missing key, another
# profile_version, a negative rate, not YAML, an unknown key, a missing file) exit 2 naming
# the file and the key. Thread scaling: measured by a 2-thread calibration, applied by the time
# model; system.device_profile: the run record's prediction, and a warning when the run's
# idle OpenMP threads wait otherwise than the calibration's. Prints PASS/FAIL lines; a few
# seconds.
set -u
source "$(dirname "$0")/lib.sh"
P=$W/prof.yaml

if $T plan $CFG --set system.threads=1 --calibrate --out $P >$W/cal.out 2>$W/cal.err &&
    grep -q "^wrote $P" $W/cal.out && grep -q "^profile_version: 1$" $P; then
    pass profile_calibrate
else
    fail profile_calibrate "$(tail -3 $W/cal.err $W/cal.out | tr '\n' ' ')"
fi

# Round trip: the JSON's profile numbers are the file's.
$T plan $CFG --device $P --json >$W/plan.json 2>$W/plan.err
if python3 - $P $W/plan.json <<'EOF'; then pass profile_round_trip; else fail profile_round_trip "see above"; fi
import json, sys, yaml
prof = yaml.safe_load(open(sys.argv[1]))
plan = json.loads(open(sys.argv[2]).read())
dev = plan["device"]
assert dev["calibrated"] is True, dev
got = dev["profile"]
assert got["threads"] == prof["threads"] == 1, (got, prof["threads"])
for k in ["matmul_rate", "gemm_half", "attn_rate", "elem_bw", "mem_bw", "intra_bw", "inter_bw",
          "latency_intra", "latency_inter", "matmul_rate_bf16"]:
    want = float(prof[k]["value"])
    if abs(got[k] - want) > 1e-5 * abs(want):
        sys.exit(f"{k}: plan {got[k]}, profile {want}")
assert [round(x, 3) for x in got["fbw"]] == [round(float(x), 3) for x in prof["fbw"]["value"]]
assert abs(dev["peak_flops"] - float(prof["peak_fp32"]["value"])) <= 1e-5 * dev["peak_flops"]
EOF

if $T plan $CFG --device $P 2>&1 | grep -q "calibrated on .* with 1 threads" &&
    $T plan $CFG --device cpu 2>&1 | grep -q "uncalibrated estimate"; then
    pass profile_says_calibrated
else
    fail profile_says_calibrated "no 'calibrated on' / 'uncalibrated estimate' line"
fi

# Thread scaling: --calibrate on one rank with 2 threads also measures 1 thread (the
# thread_scaling points); the time model scales a rank's compute rates between measured thread
# counts by them (beyond the last, per thread), and linearly without them.
if $T plan $CFG --set system.threads=2 --calibrate --out $W/p2.yaml >$W/cal2.out 2>&1 &&
    python3 - $W/p2.yaml <<'EOF'; then pass profile_thread_scaling_measured; else fail profile_thread_scaling_measured "$(tail -3 $W/cal2.out | tr '\n' ' ')"; fi
import sys, yaml
p = yaml.safe_load(open(sys.argv[1]))
pts = p["thread_scaling"]["value"]
assert p["threads"] == 2 and [q[0] for q in pts] == [1, 2], pts
assert all(x > 0 for q in pts for x in q[1:]), pts
EOF
python3 - $P $W/scaled.yaml $W/linear.yaml <<'EOF'
import sys
text = open(sys.argv[1]).read().replace("\nthreads: 1 ", "\nthreads: 2 ")
open(sys.argv[3], "w").write(text)
# The same rates, now said to be 2 threads' and 1.5 times 1 thread's, for every kind of op.
open(sys.argv[2], "w").write(text + "thread_scaling: {value: [[1, 2e9, 2e9, 2e9], [2, 3e9, 3e9, 3e9]], source: measured}\n")
EOF
compute() { # PROFILE THREADS
    $T plan $CFG --device $1 --set system.threads=$2 --json 2>/dev/null |
        python3 -c "import json,sys; print(json.load(sys.stdin)['stages'][0]['compute_s'])"
}
if python3 - $(compute $W/scaled.yaml 1) $(compute $W/scaled.yaml 2) $(compute $W/scaled.yaml 4) \
    $(compute $W/linear.yaml 1) $(compute $W/linear.yaml 2) <<'EOF'; then pass profile_thread_scaling_model; else fail profile_thread_scaling_model "see above"; fi
import sys
s1, s2, s4, l1, l2 = map(float, sys.argv[1:6])
print(f"measured scaling: 1 thread {s1 / s2:.4f} x 2 threads' time, 4 threads {s4 / s2:.4f}; linear: {l1 / l2:.4f}")
assert abs(s1 / s2 - 1.5) < 1e-4 and abs(s4 / s2 - 0.5) < 1e-4 and abs(l1 / l2 - 2) < 1e-4
EOF

# system.device_profile: the run record's prediction comes from the profile (and `plan` of the
# same config uses it by default); a path that does not open is the config's error.
$T train $CFG --set train.steps=2 --set run.out_dir=$W/rec --set system.device_profile=$P \
    >$W/rec.out 2>&1
$T plan $CFG --set system.device_profile=$P --json >$W/rec_plan.json 2>/dev/null
if python3 - $W/rec/metrics.jsonl $W/rec_plan.json $P <<'EOF'; then pass profile_in_run_record; else fail profile_in_run_record "$(tail -3 $W/rec.out | tr '\n' ' ')"; fi
import json, sys
rec = json.loads(open(sys.argv[1]).readline())["plan"]
plan = json.loads(open(sys.argv[2]).read())
assert rec["calibrated"] is True and rec["profile"] == sys.argv[3], rec
assert plan["device"]["calibrated"] is True, plan["device"]
assert abs(rec["step_s"] - plan["step_s"]) <= 1e-5 * plan["step_s"], (rec["step_s"], plan["step_s"])
EOF
# The profile records how idle OpenMP threads waited while it measured (omp_wait): a 2-thread
# run that waits otherwise is warned that its prediction may be off (each parallel region
# wakes or spins differently); one that waits alike is not.
$T train $CFG --set train.steps=2 --set system.threads=2 --set run.out_dir=$W/wsame \
    --set system.device_profile=$W/p2.yaml >$W/wsame.out 2>&1
OMP_WAIT_POLICY=active $T train $CFG --set train.steps=2 --set system.threads=2 \
    --set run.out_dir=$W/wother --set system.device_profile=$W/p2.yaml >$W/wother.out 2>&1
if grep -q '^omp_wait: "OMP_WAIT_POLICY=passive"' $W/p2.yaml && ! grep -q "waiting as" $W/wsame.out &&
    grep -q "$W/p2.yaml was measured with idle OpenMP threads waiting as 'OMP_WAIT_POLICY=passive', this run waits as 'OMP_WAIT_POLICY=active'" $W/wother.out; then
    pass profile_omp_wait_mismatch_warned
else
    fail profile_omp_wait_mismatch_warned "profile: '$(grep omp_wait $W/p2.yaml)'; same: $(grep -c 'waiting as' $W/wsame.out) warnings; other: $(grep 'waiting as' $W/wother.out | head -1)"
fi
$T train $CFG --set train.steps=2 --set run.out_dir=$W/rec2 --set system.device_profile=$W/absent.yaml >$W/rec2.out 2>&1
rc=$?
$T check $CFG --set system.device_profile=$W/absent.yaml >$W/rec3.out 2>&1
rc3=$?
if [ $rc = 2 ] && grep -q "system.device_profile: cannot open the profile $W/absent.yaml" $W/rec2.out &&
    [ $rc3 = 2 ] && grep -q "system.device_profile in $CFG" $W/rec3.out; then
    pass profile_config_key_error
else
    fail profile_config_key_error "train exit $rc, check exit $rc3: $(head -3 $W/rec2.out $W/rec3.out | tr '\n' ' ')"
fi

# Twice every compute rate the time model reads (matmul, bf16 matmul, attention, the
# elementwise bandwidth): compute per stage halves.
sed -E 's/^((matmul_rate|matmul_rate_bf16|attn_rate|elem_bw): \{value: )([0-9.e+-]+)/echo "\1$(python3 -c "print(2*\3)")"/e' $P >$W/fast.yaml
$T plan $CFG --device $W/fast.yaml --json >$W/fast.json 2>$W/fast.err
if python3 - $W/plan.json $W/fast.json <<'EOF'; then pass profile_rate_halves_compute; else fail profile_rate_halves_compute "see above"; fi
import json, sys
a, b = (json.loads(open(p).read()) for p in sys.argv[1:3])
ca, cb = a["stages"][0]["compute_s"], b["stages"][0]["compute_s"]
print(f"compute {ca:.4g} s -> {cb:.4g} s")
assert abs(cb / ca - 0.5) < 0.01, cb / ca
assert b["step_s"] < a["step_s"]
EOF

# Errors: exit 2, the file and the key named.
bad() { # NAME KEY FILE
    local name=$1 key=$2 f=$3 rc
    $T plan $CFG --device $f >$W/$name.out 2>&1
    rc=$?
    if [ $rc = 2 ] && grep -qF "$f" $W/$name.out && grep -qF "$key" $W/$name.out; then
        pass profile_error_$name
    else
        fail profile_error_$name "exit $rc: $(head -3 $W/$name.out | tr '\n' ' ')"
    fi
}
grep -v "^mem_bw:" $P >$W/missing.yaml
bad missing_key mem_bw $W/missing.yaml
sed 's/^profile_version: 1/profile_version: 2/' $P >$W/version.yaml
bad wrong_version profile_version $W/version.yaml
sed -E 's/^(attn_rate: \{value: )/\1-/' $P >$W/negative.yaml
bad negative_rate attn_rate $W/negative.yaml
printf 'profile_version: 1\nthis: [is, not\n' >$W/notyaml.yaml
bad not_yaml "not YAML" $W/notyaml.yaml
sed 's/^gemm_half:/gemm_halff:/' $P >$W/unknown.yaml
bad unknown_key gemm_halff $W/unknown.yaml
bad no_file "cannot open" $W/absent.yaml
sed -E 's/source: measured\} # one layer/source: guessed} # one layer/' $P >$W/source.yaml
bad bad_source fbw $W/source.yaml
sed -E 's/^    - \[1, /    - [3, /' $W/p2.yaml >$W/scaling.yaml
bad thread_scaling_order thread_scaling $W/scaling.yaml
exit $((fails > 0))
