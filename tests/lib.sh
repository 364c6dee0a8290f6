# tests/lib.sh: what the multi-rank shell tests share. Sourced, not run: it moves to the
# repository root and sets T (the trident binary; TRIDENT_BIN overrides), CFG (the tiny
# test config), W (a scratch directory removed at exit), MPIRUN (mpirun for this machine:
# oversubscribed, root allowed, bounded by a timeout), and pass/fail, which print the
# PASS/FAIL lines tests/run_all.sh counts and count the failures in $fails.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
T=${TRIDENT_BIN:-build/trident}
CFG=tests/configs/tiny.yaml
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS=1
MPIRUN=(timeout 180 mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
