#!/usr/bin/env bash
# Device profiles (`trident plan --calibrate`, `--device FILE`; plan_profile.h): calibrating on
# the tiny config writes a profile that loads back (plan --json gives the profile's numbers);
# a hand-edited profile moves the prediction as the time model says (twice the matmul rate:
# half the compute); the plan says "calibrated on HOST" for a profile and "uncalibrated
# estimate" for a built-in device; and the reader's errors (missing key, another
# profile_version, a negative rate, not YAML, an unknown key, a missing file) exit 2 naming
# the file and the key. Prints PASS/FAIL lines; a few seconds.
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
exit $((fails > 0))
