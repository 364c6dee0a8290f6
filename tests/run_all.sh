#!/usr/bin/env bash
# tests/run_all.sh [PATTERN...]: runs the tests (C unit tests build/tests/test_*, shell tests
# tests/test_*.sh, Python reference tests tests/test_*.py through their .sh drivers) and
# prints the closing line "N passed, N failed". Each test prints "PASS name" / "FAIL name:
# why" lines.
#
# With PATTERNs, only the tests whose name (test_dp.sh, test_ops, ...) matches one of them
# run: a PATTERN with a glob character (* ? [) is a shell glob on the whole name
# ('test_ops*'), any other a substring (dp). `make test T=PATTERN` passes one on.
set -u
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# What train and sample would restart themselves with (README "CPU threads"), set here so
# that the suite's ~1000 processes skip the restart (~0.1 s each on 2 cores);
# tests/test_threads.sh unsets it and checks the restart itself.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
patterns=("$@")
log=$(mktemp -d)/tests.log
: >"$log"
status=0
selected() { # name: whether the patterns (none: every test) select it
    [ ${#patterns[@]} = 0 ] && return 0
    local p
    for p in "${patterns[@]}"; do
        case "$p" in
        *[*?[]*) [[ "$1" == $p ]] && return 0 ;;
        *) [[ "$1" == *"$p"* ]] && return 0 ;;
        esac
    done
    return 1
}
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
names=() ran=0
for t in build/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue;; esac
    names+=("$(basename "$t")")
    selected "$(basename "$t")" || continue
    run "$(basename "$t")" "$t"
    ran=$((ran + 1))
done
for t in tests/test_*.sh; do
    [ -f "$t" ] || continue
    names+=("$(basename "$t")")
    selected "$(basename "$t")" || continue
    run "$(basename "$t")" bash "$t"
    ran=$((ran + 1))
done
if [ $ran = 0 ]; then
    echo "run_all.sh: no test matches ${patterns[*]}; the tests are: ${names[*]}" >&2
    echo "(C tests appear once built: make test, or make all build/tests/test_NAME)" >&2
    exit 2
fi
passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$status" = 0 ]
