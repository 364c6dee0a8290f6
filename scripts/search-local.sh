#!/usr/bin/env bash
# scripts/search-local.sh [BUILD]: a calibrated layout search on this machine, checked by
# running it (issue 21 point 5; README "Searching with a calibrated profile"). A timing
# result: in `make test-perf`, never in `make test`; run it alone, e.g.
# `flock /tmp/trident-maketest.lock scripts/search-local.sh`.
#
# 1. Calibrates on 2 ranks pinned one per core (`mpirun -np 2 trident plan BASE --calibrate`),
#    as scripts/perf-plan.sh does (PERF_PLAN_DIR's profile is reused when it exists).
# 2. `trident plan BASE --world 2 --search --device PROFILE --json`: every layout of 2 ranks,
#    ranked by predicted step time.
# 3. Runs the best layout of the search's top 4 families (a family: the layout but its
#    micro_batch) and 3 more from further down (the families a third and two thirds down the
#    list, the last layout), STEPS steps each, median step_ms of steps 3..
# 4. Prints predicted rank and time beside measured rank and time, and the rank correlation.
# Each run is a few seconds; the whole about two minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
T=$BUILD/trident
BASE=${SEARCH_CONFIG:-configs/bench-pipe.yaml}
STEPS=${SEARCH_STEPS:-8}
OUT=${SEARCH_DIR:-/tmp/trident-search-local}
PROFILE=${SEARCH_PROFILE:-${PERF_PLAN_DIR:-/tmp/trident-perf-plan}/profile.yaml}
[ -x "$T" ] || { echo "search-local: $T not built (make all)" >&2; exit 2; }
rm -rf "$OUT"
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
MPI=(mpirun --oversubscribe --bind-to core --map-by core -x OPENBLAS_NUM_THREADS)
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
if [ ! -f "$PROFILE" ]; then
    PROFILE=$OUT/profile.yaml
    echo "search-local: calibrating on 2 ranks at the shapes of $BASE"
    timeout 300 "${MPI[@]}" -np 2 "$T" plan "$BASE" --set parallel.pp=1 \
        --set parallel.schedule=1f1b --set system.threads=1 --calibrate --out "$PROFILE" \
        >"$OUT/calibrate.log" 2>&1 ||
        { echo "search-local: calibration failed:"; tail -5 "$OUT/calibrate.log"; exit 1; }
fi
echo "search-local: profile $PROFILE"
"$T" plan "$BASE" --world 2 --search --device "$PROFILE" --top 100000 --json \
    --set system.threads=1 >"$OUT/search.json" 2>"$OUT/search.err"
# The layouts to run: rank (1-based), then the --set overrides of each.
/usr/bin/python3 - "$OUT/search.json" >"$OUT/picked.txt" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
lay = s["layouts"]
n = len(lay)
# The best-ranked layout of each family (the search lists a family once per micro_batch, with
# near-equal times): the top 4 families, then the families a third and two thirds down and the
# last layout of the list.
seen, firsts = set(), []
for i, l in enumerate(lay):
    fam = (l["tp"], l["pp"], l["dp"], l["virtual_stages"], l["schedule"], l["zero"],
           l["recompute"], l["sequence_parallel"])
    if fam not in seen:
        seen.add(fam)
        firsts.append(i)
f = len(firsts)
picks = sorted(set(firsts[:4]) | {firsts[f // 3], firsts[2 * f // 3], n - 1})
for i in picks:
    l = lay[i]
    sets = [f"parallel.tp={l['tp']}", f"parallel.pp={l['pp']}", f"parallel.dp={l['dp']}",
            f"parallel.virtual_stages={l['virtual_stages']}", f"parallel.schedule={l['schedule']}",
            f"parallel.zero={l['zero']}", f"train.micro_batch={l['micro_batch']}",
            f"parallel.recompute={l['recompute']}",
            f"parallel.sequence_parallel={'true' if l['sequence_parallel'] else 'false'}"]
    name = (f"tp{l['tp']}-pp{l['pp']}-dp{l['dp']}-v{l['virtual_stages']}-{l['schedule']}"
            f"-z{l['zero']}-mb{l['micro_batch']}-{l['recompute']}")
    print(i + 1, n, l["step_s"] * 1e3, name, " ".join("--set " + x for x in sets))
PY
COMMON=(--set train.steps=$STEPS --set log.every=1 --set data.eval_every=0
        --set checkpoint.every=0 --set checkpoint.resume=none --set system.threads=1)
: >"$OUT/results.txt"
while read -r rank total pred name sets; do
    dir=$OUT/run-$rank
    # shellcheck disable=SC2086
    if ! timeout 600 "${MPI[@]}" -np 2 "$T" train "$BASE" "${COMMON[@]}" $sets \
        --set run.out_dir="$dir" </dev/null >"$OUT/run-$rank.log" 2>&1; then
        echo "search-local: layout #$rank ($name) failed: $(tail -1 "$OUT/run-$rank.log")"
        continue
    fi
    meas=$(/usr/bin/python3 - "$dir/metrics.jsonl" <<'PY'
import json, statistics, sys
ms = [r['step_ms'] for r in map(json.loads, open(sys.argv[1]))
      if r.get('type') == 'step' and r.get('step', 0) >= 3]
print(statistics.median(ms))
PY
)
    echo "$rank $total $pred $meas $name" >>"$OUT/results.txt"
done <"$OUT/picked.txt"
/usr/bin/python3 - "$OUT/results.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
rows = [(int(r[0]), int(r[1]), float(r[2]), float(r[3]), r[4]) for r in rows]
by_meas = sorted(rows, key=lambda r: r[3])
mrank = {r[0]: i + 1 for i, r in enumerate(by_meas)}
print(f"{'search rank':>11} {'layout':<44} {'predicted ms':>12} {'measured ms':>11} {'ratio':>6} {'measured rank':>13}")
for r in rows:
    print(f"{r[0]:>6} of {r[1]:<3} {r[4]:<44} {r[2]:12.1f} {r[3]:11.1f} {r[3] / r[2]:6.2f} {mrank[r[0]]:>8} of {len(rows)}")
n = len(rows)
if n >= 2:
    prank = {r[0]: i + 1 for i, r in enumerate(sorted(rows, key=lambda r: r[2]))}
    d2 = sum((prank[r[0]] - mrank[r[0]]) ** 2 for r in rows)
    print(f"Spearman rank correlation of predicted and measured step time over the {n} runs: "
          f"{1 - 6 * d2 / (n * (n * n - 1)):.2f}")
PY
