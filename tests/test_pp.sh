#!/usr/bin/env bash
# Pipeline parallelism under mpirun against the single-process run on the same global batch,
# 20 steps: every schedule (gpipe, 1f1b, interleaved with 2 virtual stages, zb-h1, zbv) at pp 2
# and 4, losses within 1e-6 relative at every step; pp x tp (and x dp) within the TP issue's
# tolerances; the bubble fields; zb-h1 bitwise 1f1b's on the same layout (the split backward
# adds the same gradients in the same order), composed with dp, ZeRO-3 and overlap,
# recompute and bf16; and the pipeline config errors of `trident check`.
set -u
source "$(dirname "$0")/lib.sh"
COMMON=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=8 --set system.threads=1
        --set model.n_layer=8 --set model.n_head=4 --set model.vocab_size=250 --set data.eval_every=10
        --set parallel.zero=0)

if $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/ref >$W/ref.log 2>&1; then pass pp_reference_run
else fail pp_reference_run "$(tail -2 $W/ref.log | tr '\n' ' ')"; fi

# bubble DIR PP V M SCHEDULE: the bubble fields of every step line: measured in [0, 1), and
# the formula's exact value: (pp - 1) / v / (m + (pp - 1) / v); zb-h1 (pp-1)/(3m+pp-1) (m >=
# pp); zbv (pp-1)/(6m+pp-1) (m >= 2pp), below that the simulated tables' figure of
# tests/test_sched.c (pp 4, m 4: 5/29); the pass times, F and B > 0 and W > 0 exactly when split.
bubble() {
    /usr/bin/python3 - "$@" <<'PY'
import sys
sys.path.insert(0, 'tests')
from parity import rows
run, pp, v, m, sched = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
b = rows(run, 'step')
b_over = (pp - 1) / v
formula = b_over / (m + b_over)
if sched == 'zb-h1': formula = (pp - 1) / (3 * m + pp - 1)
if sched == 'zbv': formula = (pp - 1) / (6 * m + pp - 1) if m >= 2 * pp else {(4, 4): 5 / 29}[(pp, m)]
split = sched in ('zb-h1', 'zbv')
if not all(r['pass_ms']['F'] > 0 and r['pass_ms']['B'] > 0 and (r['pass_ms']['W'] > 0) == split for r in b):
    print('pass_ms %s' % b[-1]['pass_ms'])
    sys.exit(1)
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
              "dp2_tp2_pp2_interleaved 2 interleaved 2 2 2 false 1e-5" "pp2_zbh1 2 zb-h1 1 1 1 false 1e-6" \
              "pp2_zbv 2 zbv 2 1 1 false 1e-6" "pp4_zbh1 4 zb-h1 1 1 1 false 1e-6" "pp4_zbv 4 zbv 2 1 1 false 1e-6" \
              "tp2_pp2_sp_zbv 2 zbv 2 2 1 true 1e-5"; do
    set -- $layout
    name=$1 pp=$2 sched=$3 v=$4 tp=$5 dp=$6 sp=$7 tol=$8 np=$(( $2 * $5 * $6 ))
    m=$(( 8 / (2 * dp) ))
    if "${MPIRUN[@]}" -np $np $T train $CFG "${COMMON[@]}" --set parallel.pp=$pp --set parallel.tp=$tp \
            --set parallel.schedule=$sched --set parallel.virtual_stages=$v --set parallel.sequence_parallel=$sp \
            --set run.out_dir=$W/$name >$W/$name.log 2>&1; then
        match_reference ${name}_parity $W/ref $W/$name loss=$tol norm=1e-4 val=$tol param=1e-4 steps=20
        if out=$(bubble $W/$name $pp $v $m $sched); then pass "${name}_bubble $out"; else fail ${name}_bubble "$out"; fi
    else fail ${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"; fi
done
if grep -q "bubble .* (formula" $W/pp4_1f1b.log; then pass pp_step_line_bubble; else fail pp_step_line_bubble "no bubble on the step line"; fi

# zb-h1 against 1f1b on the same layout: bitwise the same step lines (timing fields aside) and
# model.bin, here with dp 2, ZeRO-3 and overlap, recompute and bf16 (10 steps).
same_as_1f1b() { # name args...
    local name=$1; shift
    local a=$W/${name}_1f1b b=$W/${name}_zbh1 ok=1
    for s in 1f1b zb-h1; do
        local out=$a
        [ $s = zb-h1 ] && out=$b
        "${MPIRUN[@]}" -np 4 $T train $CFG "${COMMON[@]}" --set train.steps=10 --set parallel.pp=2 \
            --set parallel.schedule=$s --set run.out_dir=$out "$@" >$out.log 2>&1 ||
            { fail ${name}_run "$s: $(tail -3 $out.log | tr '\n' ' ')"; ok=0; }
    done
    [ $ok = 1 ] || return
    if cmp -s $a/model.bin $b/model.bin &&
        cmp -s <(untimed_steps $a/metrics.jsonl) <(untimed_steps $b/metrics.jsonl); then
        pass "${name}_zbh1_bitwise_1f1b"
    else fail "${name}_zbh1_bitwise_1f1b" "$(diff <(untimed_steps $a/metrics.jsonl) <(untimed_steps $b/metrics.jsonl) | head -3 | tr '\n' ' ')"; fi
}
untimed_steps() {
    grep '"type":"step"' "$1" | sed -E 's/"(straggler|pass_ms)":\{[^}]*\}//g; s/"(step_ms|tokens_per_s|mfu|plan_ratio|bubble|bubble_formula|mem_peak_bytes)":[^,}]*//g'
}
same_as_1f1b dp2_pp2_zero3_overlap_recompute_bf16 --set parallel.dp=2 --set parallel.zero=3 \
    --set parallel.overlap=true --set parallel.recompute=full --set train.precision=bf16

# zbv under dp 2 with ZeRO-3, overlap and recompute (its W fills the ZeRO-3 buckets, its B
# gathers) against the single process, 20 steps.
if "${MPIRUN[@]}" -np 4 $T train $CFG "${COMMON[@]}" --set parallel.pp=2 --set parallel.dp=2 \
        --set parallel.schedule=zbv --set parallel.virtual_stages=2 --set parallel.zero=3 \
        --set parallel.overlap=true --set parallel.recompute=full --set run.out_dir=$W/dp2_zbv_zero3 \
        >$W/dp2_zbv_zero3.log 2>&1; then
    match_reference dp2_pp2_zbv_zero3_overlap_recompute_parity $W/ref $W/dp2_zbv_zero3 loss=1e-5 \
        norm=1e-4 val=1e-5 param=1e-4 steps=20
else fail dp2_pp2_zbv_zero3_run "$(tail -3 $W/dp2_zbv_zero3.log | tr '\n' ' ')"; fi

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
expect_check pp_check_zbv_v "parallel.virtual_stages: 2" --world 2 --set parallel.pp=2 --set parallel.schedule=zbv
expect_check pp_check_zbv_pp "schedule zbv needs parallel.pp >= 2" --world 1 --set parallel.schedule=zbv --set parallel.virtual_stages=2
expect_check pp_check_zbh1_v "virtual stages need parallel.schedule: interleaved or zbv" --world 2 --set parallel.pp=2 --set parallel.schedule=zb-h1 --set parallel.virtual_stages=2
[ $fails = 0 ]
