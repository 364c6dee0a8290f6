#!/usr/bin/env bash
# Runs every test (C unit tests build/tests/test_*, shell tests tests/test_*.sh, Python
# reference tests tests/test_*.py through their .sh drivers) and prints the closing line
# "N passed, N failed". Each test prints "PASS name" / "FAIL name: why" lines.
set -u
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
log=$(mktemp -d)/tests.log
status=0
run() {
    local name=$1; shift
    local t0=$SECONDS out rc
    out=$(mktemp)
    echo "=== $name"
    "$@" >"$out" 2>&1
    rc=$?
    # A test that exited non-zero without printing FAIL (a crash) still counts as a failure.
    if [ $rc != 0 ] && ! grep -q '^FAIL ' "$out"; then
        echo "FAIL $name: exited with status $rc" >>"$out"
    fi
    [ $rc = 0 ] || status=1
    cat "$out" | tee -a "$log"
    rm -f "$out"
    echo "--- $name: $((SECONDS - t0)) s"
}
for t in build/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue;; esac
    run "$(basename "$t")" "$t"
done
for t in tests/test_*.sh; do
    [ -f "$t" ] || continue
    run "$(basename "$t")" bash "$t"
done
passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$status" = 0 ]
