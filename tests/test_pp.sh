#!/usr/bin/env bash
# Pipeline parallelism under mpirun against the single-process run on the same global batch,
# 20 steps: every schedule (gpipe, 1f1b, interleaved with 2 virtual stages) at pp 2 and 4,
# losses within 1e-6 relative at every step; pp x tp (and x dp) within the TP issue's
# tolerances; the bubble fields; and the pipeline config errors of `trident check`.
set -u
source "$(dirname "$0")/lib.sh"
COMMON=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=8 --set system.threads=1
        --set model.n_layer=8 --set model.n_head=4 --set model.vocab_size=250 --set data.eval_every=10
        --set parallel.zero=0)

if $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/ref >$W/ref.log 2>&1; then pass pp_reference_run
else fail pp_reference_run "$(tail -2 $W/ref.log | tr '\n' ' ')"; fi

# bubble DIR PP V M: the bubble fields of every step line: measured in [0, 1), and the
# formula's exact value (pp - 1) / v / (m + (pp - 1) / v).
bubble() {
    /usr/bin/python3 - "$@" <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import rows
run, pp, v, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
b = rows(run, 'step')
b_over = (pp - 1) / v
formula = b_over / (m + b_over)
ok = b and all(0 <= r['bubble'] < 1 and abs(r['bubble_formula'] - formula) < 1e-4 for r in b)
print('bubble %.2f formula %.4f on %d step lines' % (b[-1]['bubble'], b[-1]['bubble_formula'], len(b)))
sys.exit(0 if ok else 1)
PY
}

# name pp schedule v tp dp sp loss_tol
for layout in "pp2_gpipe 2 gpipe 1 1 1 false 1e-6" "pp2_1f1b 2 1f1b 1 1 1 false 1e-6" \
              "pp2_interleaved_v2 2 interleaved 2 1 1 false 1e-6" "pp4_gpipe 4 gpipe 1 1 1 false 1e-6" \
              "pp4_1f1b 4 1f1b 1 1 1 false 1e-6" "pp4_interleaved_v2 4 interleaved 2 1 1 false 1e-6" \
              "tp2_pp2_1f1b 2 1f1b 1 2 1 false 1e-5" "tp2_pp2_sp_interleaved 2 interleaved 2 2 1 true 1e-5" \
              "dp2_tp2_pp2_interleaved 2 interleaved 2 2 2 false 1e-5"; do
    set -- $layout
    name=$1 pp=$2 sched=$3 v=$4 tp=$5 dp=$6 sp=$7 tol=$8 np=$(( $2 * $5 * $6 ))
    m=$(( 8 / (2 * dp) ))
    if "${MPIRUN[@]}" -np $np $T train $CFG "${COMMON[@]}" --set parallel.pp=$pp --set parallel.tp=$tp \
            --set parallel.schedule=$sched --set parallel.virtual_stages=$v --set parallel.sequence_parallel=$sp \
            --set run.out_dir=$W/$name >$W/$name.log 2>&1; then
        match_reference ${name}_parity $W/ref $W/$name loss=$tol norm=1e-4 val=$tol param=1e-4 steps=20
        if out=$(bubble $W/$name $pp $v $m); then pass "${name}_bubble $out"; else fail ${name}_bubble "$out"; fi
    else fail ${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"; fi
done
if grep -q "bubble .* (formula" $W/pp4_1f1b.log; then pass pp_step_line_bubble; else fail pp_step_line_bubble "no bubble on the step line"; fi

# Config errors, caught by `trident check` with the key named (exit 2).
expect_check() { # name pattern args...
    local name=$1 pattern=$2; shift 2
    $T check $CFG "$@" >$W/check.log 2>&1
    local rc=$?
    if [ $rc = 2 ] && grep -q -- "$pattern" $W/check.log; then pass $name
    else fail $name "exit $rc: $(head -3 $W/check.log | tr '\n' ' ')"; fi
}
expect_check pp_check_1f1b_micro "parallel.pp" --world 4 --set parallel.pp=4 --set train.micro_batch=4 --set train.global_batch=8 --set model.n_layer=4
expect_check pp_check_layers "model.n_layer" --world 3 --set parallel.pp=3 --set model.n_layer=4
expect_check pp_check_interleaved_v "parallel.virtual_stages" --world 2 --set parallel.pp=2 --set parallel.schedule=interleaved
expect_check pp_check_interleaved_m "parallel" --world 2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.micro_batch=1 --set train.global_batch=3
[ $fails = 0 ]
