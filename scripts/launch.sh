#!/usr/bin/env bash
# Starts trident on N processes of this machine with OpenMPI's mpirun (PMIx gives each
# process its rank; see DESIGN.md "Launch"). For several machines use Slurm:
# scripts/slurm/train.sbatch.
#
# usage: scripts/launch.sh -n N CONFIG [--set key=value]... [-- EXTRA_TRAIN_ARGS...]
#        scripts/launch.sh -n N -- COMMAND [ARGS...]
#
#   -n, --np N    processes (ranks): tp * pp * dp of the config
#   CONFIG        the YAML run file: runs `trident train CONFIG --set ... EXTRA_TRAIN_ARGS`
#   -- COMMAND    with no CONFIG, any other trident command, e.g. `-- comm-test --bytes 8:1M`
#   --retries N   train only: restart the job up to N times after a failure exit (exit 5:
#                 a communication failure, a timeout or a dead rank; or a rank killed by a
#                 signal), each time resuming from the newest checkpoint (checkpoint.dir with
#                 checkpoint.resume: auto); never after exits 1, 2, 3, 4 or 6, which a resume
#                 would repeat (scripts/heal.sh says the policy). Each restart is logged with
#                 the rank and host the verdict blamed. Default 0.
#   --dry-run     print the mpirun command line and exit
#   -h, --help    this text
#
# What it adds to mpirun: -np N; --allow-run-as-root when run as root; --oversubscribe when
# N is more than the cores; --bind-to none; --mca btl self,vader (shared memory);
# OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=T with T = max(1, cores / N), and for train
# `--set system.threads=T` unless a --set system.threads is given.
#
# Environment: TRIDENT=path of the binary (default build/trident beside this script);
# TRIDENT_MPIRUN_ARGS=more mpirun options (split on spaces), e.g. "--tag-output".
# Exit code: trident's (mpirun passes on the first non-zero one); 2 for a usage error here;
# 130 after a second Ctrl-C.
#
# Ctrl-C: the first makes every rank stop after its current step and write a checkpoint (it
# reaches them as SIGUSR1: mpirun itself would abort the job on SIGINT); the second ends the
# job at once. SIGTERM to this script acts as Ctrl-C; SIGUSR1 is passed on.
#
# examples:
#   scripts/launch.sh -n 4 configs/default.yaml --set parallel.zero=0
#   scripts/launch.sh -n 8 -- comm-test --world-shape 2,2,2
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T=${TRIDENT:-$ROOT/build/trident}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
bad() {
    echo "launch: error: $*" >&2
    echo "usage: scripts/launch.sh -n N CONFIG [--set key=value]... [-- EXTRA_ARGS...]" >&2
    echo "       scripts/launch.sh -n N -- COMMAND [ARGS...]    (--help for more)" >&2
    exit 2
}

np="" config="" dry=0 retries=0
sets=() extra=() have_dashdash=0
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    -n | --np)
        [ $# -ge 2 ] || bad "$1 needs a number of processes"
        np=$2; shift 2 ;;
    -n=* | --np=*) np=${1#*=}; shift ;;
    -n[0-9]*) np=${1#-n}; shift ;;
    --set)
        [ $# -ge 2 ] || bad "--set needs key=value"
        sets+=(--set "$2"); shift 2 ;;
    --set=*) sets+=(--set "${1#--set=}"); shift ;;
    --retries)
        [ $# -ge 2 ] || bad "$1 needs a number of restarts"
        retries=$2; shift 2 ;;
    --retries=*) retries=${1#*=}; shift ;;
    --dry-run) dry=1; shift ;;
    --) shift; have_dashdash=1; extra=("$@"); break ;;
    -*) bad "unknown option '$1'" ;;
    *)
        [ -z "$config" ] || bad "one CONFIG only (got '$config' and '$1'); trident's own options go after --"
        config=$1; shift ;;
    esac
done

[ -n "$np" ] || bad "-n N is required (the number of processes)"
[[ $np =~ ^[0-9]+$ ]] && [ "$((10#$np))" -ge 1 ] ||
    bad "-n '$np': the number of processes must be a whole number of at least 1"
np=$((10#$np))
[[ $retries =~ ^[0-9]+$ ]] || bad "--retries '$retries': the number of restarts must be a whole number (0: none)"
retries=$((10#$retries))

if [ -n "$config" ]; then
    [ -f "$config" ] || bad "config '$config' not found"
    [ -r "$config" ] || bad "config '$config' is not readable"
    cmd=(train "$config")
elif [ $have_dashdash = 1 ] && [ ${#extra[@]} -gt 0 ]; then
    [ $retries = 0 ] || bad "--retries restarts training: give a CONFIG"
    [ ${#sets[@]} = 0 ] || bad "--set belongs to train: give a CONFIG, or put the options after -- COMMAND"
    cmd=()
else
    bad "missing CONFIG (or -- COMMAND)"
fi

if [ ! -x "$T" ]; then
    echo "launch: error: trident binary '$T' not found or not executable" >&2
    echo "HINT: run \`make\` in $ROOT, or point TRIDENT at a binary" >&2
    exit 1
fi
if ! command -v mpirun >/dev/null; then
    echo "launch: error: mpirun not found (OpenMPI)" >&2
    echo "HINT: run scripts/install-deps.sh (openmpi-bin)" >&2
    exit 1
fi

cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
threads=$((cores / np))
[ $threads -ge 1 ] || threads=1

# train: the compute threads per rank, unless the user chose them.
if [ -n "$config" ]; then
    user_threads=0
    for a in "${sets[@]}" "${extra[@]}"; do
        case $a in system.threads=* | --set=system.threads=*) user_threads=1 ;; esac
    done
    [ $user_threads = 1 ] || sets+=(--set "system.threads=$threads")
    cmd+=("${sets[@]}" "${extra[@]}")
else
    cmd=("${extra[@]}")
fi

mpi=(mpirun -np "$np")
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
[ "$np" -gt "$cores" ] && mpi+=(--oversubscribe)
mpi+=(--bind-to none --mca btl "self,vader"
    -x OPENBLAS_NUM_THREADS=1 -x "OMP_NUM_THREADS=$threads")
[ -n "${TRIDENT_LOG:-}" ] && mpi+=(-x TRIDENT_LOG)
# shellcheck disable=SC2206 # split on purpose: a list of mpirun options
[ -n "${TRIDENT_MPIRUN_ARGS:-}" ] && mpi+=(${TRIDENT_MPIRUN_ARGS})
mpi+=("$T" "${cmd[@]}")

echo "launch: ${mpi[*]}" >&2
[ $dry = 1 ] && exit 0
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=$threads

# Ctrl-C. mpirun turns a SIGINT (or SIGTERM) into an abort of the job: the ranks get SIGTERM
# 1 s later and SIGKILL 1 s after that (OpenMPI's odls_base_sigkill_timeout), too soon for the
# checkpoint of any but a small model, and mpirun exits 1. SIGUSR1 it passes on to every rank,
# which then stops after its current step with a checkpoint (exit 0). So mpirun runs in a
# session of its own, away from the terminal's Ctrl-C, and this script passes a first Ctrl-C
# (or SIGTERM) on as SIGUSR1; a second one as SIGINT, which ends the job at once (exit 130).
# SIGUSR1 to this script is passed on as it is.
stops=0 pid=
pass_on() { # the signal for the stops so far, to mpirun once it runs
    [ -n "$pid" ] || return 0
    if [ $stops = 1 ]; then kill -USR1 "$pid" 2>/dev/null || true
    elif [ $stops -ge 2 ]; then kill -INT "$pid" 2>/dev/null || true; fi
}
on_stop() {
    stops=$((stops + 1))
    if [ $stops = 1 ]; then
        echo "launch: $1: every rank stops after its current step, with a checkpoint where" \
            "checkpoint.dir is set (passed on to mpirun as SIGUSR1); $1 again ends the job at once" >&2
    else
        echo "launch: $1 again: ending the job at once, without a checkpoint" >&2
    fi
    pass_on
}
trap 'on_stop Ctrl-C' INT
trap 'on_stop SIGTERM' TERM
trap '[ -z "$pid" ] || kill -USR1 "$pid" 2>/dev/null || true' USR1
# shellcheck source=heal.sh
. "$ROOT/scripts/heal.sh"
# With --retries the job's stderr is also kept (through tee, which this script waits for
# before it goes on), so that a failed try can name the rank and host the flight recorder's
# verdict blamed ("diagnose: blamed rank 3 (host n07)"). Without, mpirun writes to the
# terminal directly, as it always did.
errlog= teepid=
if [ $retries -gt 0 ]; then
    errlog=$(mktemp "${TMPDIR:-/tmp}/trident-launch.XXXXXX")
    trap 'rm -f "$errlog"' EXIT
fi
attempt=0
while :; do
    if [ -n "$errlog" ]; then
        : >"$errlog"
        exec {errfd}> >(tee -a "$errlog" >&2)
        teepid=$!
        setsid "${mpi[@]}" </dev/null 2>&$errfd &
    else
        setsid "${mpi[@]}" </dev/null &
    fi
    pid=$!
    pass_on # a stop that came while mpirun was starting
    # A trapped signal ends `wait` early (status > 128) while mpirun runs on: wait again. Once
    # mpirun has ended, `wait` gives its exit status (bash keeps it).
    while :; do
        rc=0
        wait "$pid" || rc=$?
        [ $rc -gt 128 ] && kill -0 "$pid" 2>/dev/null && continue
        break
    done
    pid=
    if [ -n "$teepid" ]; then # every line of this try is in errlog and out on stderr
        exec {errfd}>&-
        wait "$teepid" 2>/dev/null || true
        teepid=
    fi
    # A stop asked for by the user is never retried.
    [ $stops -ge 2 ] && exit 130
    [ $rc = 0 ] || [ $stops -gt 0 ] || [ $retries = 0 ] && exit $rc
    why=$(heal_retryable $rc) || { echo "launch: no restart after $why" >&2; exit $rc; }
    if [ $attempt -ge $retries ]; then
        echo "launch: giving up after $retries restart(s): the last try ended with $why" >&2
        exit $rc
    fi
    attempt=$((attempt + 1))
    blamed=$(grep -a 'diagnose: blamed rank' "$errlog" | tail -n 1 | sed 's/^diagnose: //' || true)
    echo "launch: restart $attempt of $retries at $(date '+%F %T') after $why${blamed:+; the verdict: $blamed}:" \
        "resuming from the newest checkpoint (this machine: no other host to move to)" >&2
done
