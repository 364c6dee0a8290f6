#!/usr/bin/env bash
# scripts/venv.sh NAME PACKAGE==VERSION...: makes (once) the Python venv build/venv-NAME over
# Debian's python3 (--system-site-packages: torch and numpy come from the system) with the
# PyPI packages given, and prints its path. The tests' references live there, never the
# binary's dependencies: tokenizers (test_tokenize.sh, bench-tokenize.sh), tensorboard
# (test_tensorboard.sh). One venv per purpose, because their pins can conflict (transformers
# 4.40.2 wants tokenizers < 0.20). A lock keeps two test runs of one tree from building it at
# once; a venv missing one of the packages is made again. Exit 1 (with pip's last lines on
# stderr) when it cannot be made: no python3-venv, or no access to PyPI.
set -u
[ $# -ge 2 ] || { echo "usage: scripts/venv.sh NAME PACKAGE==VERSION..." >&2; exit 2; }
cd "$(dirname "$0")/.."
NAME=$1
shift
VENV=build/venv-$NAME
mkdir -p build
(
    flock 9
    # every pin installed at its version, else the venv is made again
    ok=1
    for p in "$@"; do
        v=$("$VENV/bin/python" -m pip show "${p%%==*}" 2>/dev/null | sed -n 's/^Version: //p')
        [ "$v" = "${p##*==}" ] || ok=0
    done
    [ $ok = 1 ] && exit 0
    rm -rf "$VENV"
    LOG=$(mktemp)
    if /usr/bin/python3 -m venv --system-site-packages "$VENV" >"$LOG" 2>&1 &&
        "$VENV/bin/pip" install -q --disable-pip-version-check "$@" >>"$LOG" 2>&1; then
        rm -f "$LOG"
        exit 0
    fi
    echo "scripts/venv.sh: cannot make $VENV with $*: $(tail -n 3 "$LOG" | tr '\n' ' ')" >&2
    echo "HINT: install python3-venv (scripts/install-deps.sh) and check access to PyPI" >&2
    rm -rf "$VENV" "$LOG"
    exit 1
) 9>"build/.venv-$NAME.lock" || exit 1
echo "$VENV"
