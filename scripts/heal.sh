#!/usr/bin/env bash
# heal.sh: the restart policy of scripts/launch.sh --retries and scripts/slurm/train.sbatch
# (issue 19, "healing inside the allocation"; DESIGN.md "CLI": a restart policy retries only
# exit 5 and deaths by signal). Sourced by both for its functions; run on its own it answers
# one question, so that tests/test_heal.sh can check the policy against given host lists:
#
#   scripts/heal.sh retryable RC
#       exit 0 when a job that ended with RC is worth restarting: 5 (communication failure,
#       timeout or a dead rank) or a death by signal (128 + N, as mpirun, srun and bash report
#       it; 137 for SIGKILL). Not 0, nor 1, 2, 3, 4 or 6: a bitwise resume would fail the
#       same way. Prints the reason either way.
#   scripts/heal.sh blamed FILE
#       the hosts that a verdict in FILE (diagnose/verdict.txt, or a job log holding its
#       "diagnose: blamed rank 3 (host n07)" line) blames, one per line, in its order.
#   scripts/heal.sh exclude HOSTS NEED EXCLUDED BLAMED
#       the hosts to leave out of the next try, comma-separated (maybe empty). HOSTS: the
#       allocation's hosts; NEED: how many the job runs on; EXCLUDED: those already left out;
#       BLAMED: the verdict's hosts (all lists comma-separated). A blamed host is left out
#       only while enough hosts remain (a spare); otherwise the job tries again on the same
#       hosts. A note on stderr says which.
#
# Exit codes on its own: 0 answered (retryable: yes), 1 not retryable, 2 usage error.

# heal_retryable RC: see above. Prints "exit 5 (...)" or why not.
heal_retryable() {
    local rc=$1
    case $rc in
    5) echo "exit 5 (a communication failure, a timeout or a dead rank)"; return 0 ;;
    0) echo "exit 0 (success)"; return 1 ;;
    1 | 2 | 3 | 4 | 6)
        echo "exit $rc (a restart would fail the same way: DESIGN.md \"CLI\")"; return 1 ;;
    *)
        if [[ $rc =~ ^[0-9]+$ ]] && [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
            echo "exit $rc (a process killed by signal $((rc - 128)))"; return 0
        fi
        echo "exit $rc (not a failure a restart heals)"; return 1 ;;
    esac
}

# heal_blamed FILE: the blamed hosts of the last verdict line in FILE, one per line; nothing
# (and status 0) for a file without one.
heal_blamed() {
    [ -r "$1" ] || return 0
    { grep -a 'diagnose: blamed rank' "$1" || true; } | tail -n 1 |
        { grep -oE '\(host [^)]*\)' || true; } | sed -E 's/^\(host (.*)\)$/\1/' |
        awk '$0 != "unknown" && !seen[$0]++'
}

# heal_exclude HOSTS NEED EXCLUDED BLAMED: see above.
heal_exclude() {
    local hosts=$1 need=$2 excluded=$3 blamed=$4 h
    local -A out=() known=()
    local all=() keep=()
    IFS=, read -ra all <<<"$hosts"
    for h in "${all[@]}"; do [ -n "$h" ] && known[$h]=1; done
    IFS=, read -ra keep <<<"$excluded"
    for h in "${keep[@]}"; do [ -n "$h" ] && out[$h]=1; done
    local new=()
    IFS=, read -ra new <<<"$blamed"
    for h in "${new[@]}"; do
        [ -n "$h" ] || continue
        if [ -z "${known[$h]:-}" ]; then
            echo "heal: the verdict blames host $h, which is not in the allocation ($hosts)" >&2
            continue
        fi
        [ -n "${out[$h]:-}" ] && continue
        local left=0
        for x in "${all[@]}"; do [ -n "$x" ] && [ -z "${out[$x]:-}" ] && [ "$x" != "$h" ] && left=$((left + 1)); done
        if [ "$left" -ge "$need" ]; then
            out[$h]=1
            echo "heal: leaving out host $h (blamed by the verdict); $left hosts remain for $need" >&2
        else
            echo "heal: host $h is blamed, but without it $left hosts remain for $need: no spare," \
                "trying again on the same hosts" >&2
        fi
    done
    local list=()
    for h in "${all[@]}"; do [ -n "$h" ] && [ -n "${out[$h]:-}" ] && list+=("$h"); done
    (IFS=,; echo "${list[*]}")
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    usage() { sed -n '2,/^# Exit codes/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
    [ $# -ge 1 ] || usage
    case $1 in
    retryable) [ $# = 2 ] || usage; heal_retryable "$2" ;;
    blamed) [ $# = 2 ] || usage; heal_blamed "$2" ;;
    exclude)
        [ $# = 5 ] || usage
        [[ $3 =~ ^[0-9]+$ ]] && [ "$3" -ge 1 ] || { echo "heal: NEED '$3' is not a number of hosts" >&2; exit 2; }
        heal_exclude "$2" "$3" "$4" "$5" ;;
    -h | --help) usage ;;
    *) echo "heal: unknown question '$1'" >&2; usage ;;
    esac
fi
