# tests/lib.sh: what the multi-rank shell tests share. Sourced, not run: it moves to the
# repository root and sets T (the trident binary; TRIDENT_BIN overrides), CFG (the tiny
# test config), W (a scratch directory removed at exit), MPIRUN (mpirun for this machine:
# oversubscribed, root allowed, bounded by a timeout), and pass/fail, which print the
# PASS/FAIL lines tests/run_all.sh counts and count the failures in $fails, and
# match_reference, which compares a run with a reference run (below).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
T=${TRIDENT_BIN:-build/trident}
CFG=tests/configs/tiny.yaml
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS=1
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} # as tests/run_all.sh says why
MPIRUN=(timeout 180 mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

# match_reference NAME REF RUN [CHECK...]: compares the run directory RUN with the reference
# run REF through tests/parity.py and prints "PASS NAME <measured errors>" or "FAIL NAME:
# <what differs>"; returns 0 on a pass. CHECKs (parity.py says more):
#   loss=TOL norm=TOL val=TOL param=TOL   largest relative errors allowed: per-step loss and
#                                         grad_norm, val_loss, final parameters (of the largest)
#   steps=N                               both runs have N step lines
#   from=STEP                             only the lines from STEP on (a resumed run)
#   bitwise [types=step,eval] [ignore=FIELD,...] [model=no]
#                                         metrics lines equal as text, timing fields aside,
#                                         and model.bin equal
# FP32_PARITY: what a parallel layout of an fp32 run must meet against the single process
# on the same global batch, 20 steps.
FP32_PARITY=(loss=1e-5 norm=1e-4 val=1e-5 param=1e-4 steps=20)
match_reference() {
    local name=$1 ref=$2 run=$3 out
    shift 3
    if out=$(/usr/bin/python3 tests/parity.py "$ref" "$run" "$@" 2>&1); then pass "$name $out"
    else fail "$name" "$out"; fi
}

# manifest_rewrite FILE [DROP] [VERSION]: rewrites a checkpoint manifest as an older trident
# or a hand edit would leave it: drops the lines matching the regex DROP (at their start),
# sets `version:` to VERSION, and seals it again (the last line is the CRC-32C of the bytes
# before it), except as version 1, which has no seal.
manifest_rewrite() {
    /usr/bin/python3 - "$1" "${2:-}" "${3:-}" <<'PY'
import re, sys
path, drop, version = sys.argv[1], sys.argv[2], sys.argv[3]
lines = [l for l in open(path, 'rb').read().splitlines(keepends=True)
         if not l.startswith(b'manifest_crc32c:') and not (drop and re.match(drop.encode(), l))]
body = b''.join(lines)
if version:
    body = re.sub(rb'(?m)^version: \d+$', b'version: ' + version.encode(), body)
table = []
for i in range(256):  # CRC-32C (Castagnoli), reflected
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table.append(c)
crc = 0xFFFFFFFF
for b in body:
    crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
if version != '1':
    body += b'manifest_crc32c: 0x%08x\n' % (crc ^ 0xFFFFFFFF)
open(path, 'wb').write(body)
PY
}
