#!/usr/bin/env bash
# The planner against real runs: for a matrix of small layouts (tp, sequence parallelism, pp
# with every schedule and virtual stages, dp with each ZeRO stage and both ZeRO-3 gathers,
# recompute, and their 3D combinations; llama too) train 2 steps under mpirun and require
# `trident plan --json` (same config, --world and --set) to give exactly the run record's
# "memory" fields, its rank_params and n_params, and every step line's comm_bytes; the run
# record's own "memory_planned" (the arenas the trainer sized with the planner) to equal what
# its model and optimizer carved from them ("memory"); and the backend's measured peak to be the planned total (or the trainer's
# matmul-rate probe, allocated and freed before the model, when that is larger).
# Then the command itself: text and JSON for a 70B model on 512 GPUs, --search, and its
# errors. --all (make test-full) adds the 8-rank variants of each family (3D with ZeRO 0-2,
# 3D bf16 with bf16 gradients, Llama's bf16 3D, gpipe under ZeRO-3 step). Prints PASS/FAIL lines.
set -u
source "$(dirname "$0")/lib.sh"
ALL=0
[ "${1:-}" = --all ] && ALL=1
COMMON=(--set train.steps=2 --set data.eval_every=0 --set system.threads=1 --set train.micro_batch=2
        --set system.backend=cpu)

# check NAME NP ARGS...: train on NP ranks, plan the same, compare.
check() {
    local name=$1 np=$2; shift 2
    if ! "${MPIRUN[@]}" -np $np $T train $CFG "${COMMON[@]}" "$@" --set run.out_dir=$W/$name >$W/$name.log 2>&1; then
        fail ${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"
        return
    fi
    if ! $T plan $CFG --world $np --json "${COMMON[@]}" "$@" >$W/$name.plan 2>$W/$name.plan.err; then
        fail ${name}_plan "$(tail -3 $W/$name.plan.err | tr '\n' ' ')"
        return
    fi
    local out
    if grep -q "the planner says" $W/$name.log; then # every rank compares its own allocation
        fail plan_every_rank_${name} "$(grep -m1 'the planner says' $W/$name.log)"
    fi
    if out=$(/usr/bin/python3 - $W/$name/metrics.jsonl $W/$name.plan <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
plan = json.load(open(sys.argv[2]))
run, steps = rows[0], [r for r in rows if r['type'] == 'step']
bad = []
planned = dict(plan['memory'], scratch_bytes=plan['scratch_bytes'])
for k, v in run['memory'].items():
    if planned.get(k) != v: bad.append('%s run %s plan %s' % (k, v, planned.get(k)))
    if run['memory_planned'].get(k) != v: bad.append('%s run %s memory_planned %s' % (k, v, run['memory_planned'].get(k)))
for k in ('rank_params', 'n_params'):
    if plan[k] != run[k]: bad.append('%s run %s plan %s' % (k, run[k], plan[k]))
for s in steps:
    for g, v in s['comm_bytes'].items():
        if plan['comm_bytes'][g] != v: bad.append('step %d comm %s run %d plan %d' % (s['step'], g, v, plan['comm_bytes'][g]))
if len(steps) != 2: bad.append('%d step lines' % len(steps))
# The run's own prediction (issue 21 point 3): the planner's step time on this device in the
# run record, and each step line's measured time over it.
pr = run.get('plan', {})
if pr.get('device') != 'cpu' or abs(pr.get('step_s', 0) - plan['step_s']) > 1e-5 * plan['step_s']:
    bad.append('run record plan %s, trident plan step_s %s' % (pr, plan['step_s']))
for s in steps:
    if abs(s.get('plan_ratio', 0) - s['step_ms'] / 1e3 / pr.get('step_s', 1)) > 1e-3 * s.get('plan_ratio', 1):
        bad.append('step %d plan_ratio %s, step_ms %s' % (s['step'], s.get('plan_ratio'), s['step_ms']))
# The backend's peak: the planned total (the record's kinds plus the model's scratch), or
# trainer.c's matmul-rate probe (512x768, 768x768 and 512x768 floats, freed before the model
# is built) when that is larger; nothing else.
probe = 4 * (512 * 768 + 768 * 768 + 512 * 768)
if steps[-1]['mem_peak_bytes'] != max(plan['total_bytes'], probe):
    bad.append('mem_peak_bytes %d, planned total %d' % (steps[-1]['mem_peak_bytes'], plan['total_bytes']))
m, c = run['memory'], steps[-1]['comm_bytes']
print('; '.join(bad) if bad else 'state %d act %d buckets %d gather %d | tp %d pp %d dp %d | peak-planned %d' % (
    m['param_bytes'] + m['grad_bytes'] + m['master_bytes'] + m['adam_bytes'], m['activation_bytes'],
    m['grad_bucket_bytes'], m['param_gather_bytes'], c['tp'], c['pp'], c['dp'], steps[-1]['mem_peak_bytes'] - plan['total_bytes']))
sys.exit(1 if bad else 0)
PY
); then pass "plan_matches_${name} $out"; else fail plan_matches_${name} "$out"; fi
}

L4=(--set model.n_layer=4 --set model.n_head=4)
check single 1
# timing.json that cannot be written (a directory in its place): one warning, the run goes on.
mkdir -p $W/recompute/timing.json
check recompute 1 --set parallel.recompute=full
if [ "$(grep -c "could not write $W/recompute/timing.json" $W/recompute.log)" = 1 ]; then
    pass timing_unwritable_warns_once
else fail timing_unwritable_warns_once "$(grep -m2 timing $W/recompute.log | tr '\n' ' ')"; fi
check tp2 2 "${L4[@]}" --set parallel.tp=2
check tp2_sp 2 "${L4[@]}" --set parallel.tp=2 --set parallel.sequence_parallel=true --set parallel.recompute=full
check pp2_gpipe 2 --set parallel.pp=2 --set parallel.schedule=gpipe
check pp2_1f1b 2 --set parallel.pp=2 --set train.global_batch=16
check pp2_interleaved 2 "${L4[@]}" --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.global_batch=16
check dp2_zero0 2 --set parallel.zero=0 --set parallel.bucket_mb=0.01
check dp2_zero1 2 --set parallel.zero=1
check dp2_zero2 2 "${L4[@]}" --set parallel.zero=2 --set parallel.bucket_mb=0.02
check dp2_zero2_no_overlap 2 "${L4[@]}" --set parallel.zero=2 --set parallel.bucket_mb=0.02 --set parallel.overlap=false
check dp4_zero3 4 --set parallel.zero=3 --set train.global_batch=16 --set train.micro_batch=1
check dp2_zero3_step 2 --set parallel.zero=3 --set parallel.zero3_gather=step --set train.global_batch=16
for zero in $([ $ALL = 1 ] && echo 0 1 2) 3; do
    check 3d_zero$zero 8 "${L4[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=interleaved \
        --set parallel.virtual_stages=2 --set parallel.zero=$zero --set parallel.sequence_parallel=true \
        --set parallel.recompute=full --set train.global_batch=16 --set parallel.bucket_mb=0.01
done
# Mixed precision: bf16 parameters (2 bytes, gathered as such) and stored activations, an fp32
# master copy; gradients and their reduction in fp32 or bf16.
BF16=(--set train.precision=bf16)
check bf16_single 1 "${BF16[@]}"
check bf16_dp2_zero1 2 "${BF16[@]}" --set parallel.zero=1
if [ $ALL = 1 ]; then
check bf16_3d_zero2 8 "${L4[@]}" "${BF16[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.zero=2 \
    --set parallel.sequence_parallel=true --set train.global_batch=16
fi
check bf16_dp2_zero3_step 2 "${BF16[@]}" --set parallel.zero=3 --set parallel.zero3_gather=step --set train.global_batch=16
check bf16_dp2_zero1_bf16grads 2 "${BF16[@]}" --set parallel.zero=1 --set train.grad_dtype=bf16 --set train.reduce_dtype=bf16
if [ $ALL = 1 ]; then
check bf16_3d_zero3_bf16grads 8 "${L4[@]}" "${BF16[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.zero=3 \
    --set parallel.sequence_parallel=true --set train.global_batch=16 --set train.grad_dtype=bf16 --set train.reduce_dtype=bf16
fi
check bf16_dp2_zero0_bf16grads 2 "${BF16[@]}" --set parallel.zero=0 --set train.grad_dtype=bf16 --set train.reduce_dtype=bf16 \
    --set parallel.bucket_mb=0.01
check bf16_dp2_zero1_reduce_bf16 2 "${BF16[@]}" --set parallel.zero=1 --set train.reduce_dtype=bf16
check bf16_dp2_zero2_grads_bf16_reduce_fp32 2 "${BF16[@]}" --set parallel.zero=2 --set train.grad_dtype=bf16
# Llama (README "Llama"): its table (q|k|v of grouped-query heads, gate|up, lm_head), its
# buffers and its collectives, summed by the planner from the same specs.
LL=(--set model.arch=llama --set model.n_layer=4 --set model.n_head=4 --set model.n_kv_head=2
    --set model.ffn_hidden=64)
check llama_tp2_sp 2 "${LL[@]}" --set parallel.tp=2 --set parallel.sequence_parallel=true
check llama_3d_zero3 8 "${LL[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=interleaved \
    --set parallel.virtual_stages=2 --set parallel.zero=3 --set parallel.sequence_parallel=true \
    --set parallel.recompute=full --set train.global_batch=16 --set parallel.bucket_mb=0.01
if [ $ALL = 1 ]; then
check llama_bf16_tied_3d_zero2 8 "${LL[@]}" "${BF16[@]}" --set parallel.tp=2 --set parallel.pp=2 \
    --set parallel.zero=2 --set train.global_batch=16 --set model.tie_embeddings=true
fi
# Zero-bubble schedules (issue 20): the W-buffers of the split backward (with recompute and
# bf16, the operands B keeps for W), zbv's V (rank 0 holds the embedding and the loss: no tied
# copy of wte, no embedding-group sum).
check pp2_zbh1 2 --set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.global_batch=16
check zbv_3d_zero3_bf16 8 "${L4[@]}" "${BF16[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=zbv \
    --set parallel.virtual_stages=2 --set parallel.zero=3 --set parallel.sequence_parallel=true \
    --set parallel.recompute=full --set train.global_batch=16 --set parallel.bucket_mb=0.01
check llama_zbv_tied_pp2 2 "${LL[@]}" --set parallel.pp=2 --set parallel.schedule=zbv --set parallel.virtual_stages=2 \
    --set model.tie_embeddings=true --set train.global_batch=16
if [ $ALL = 1 ]; then
check tp2_pp2_zero3_step_gpipe 8 "${L4[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=gpipe \
    --set parallel.zero=3 --set parallel.zero3_gather=step --set train.global_batch=8 --set train.micro_batch=1
fi

# plan RUN_DIR (README "Predicted against measured, per stage") on runs made above: the
# prediction the run record holds per stage beside what the run measured (timing.json),
# one process, pp 2 (1f1b, interleaved) and tp 2 x pp 2 x dp 2 (4 ranks per stage).
check_rundir() { # name: the run directory $W/name, planned above as $W/name.plan
    local name=$1 out
    if ! $T plan $W/$name >$W/$name.rd.txt 2>&1 || ! $T plan $W/$name --json >$W/$name.rd.json 2>&1; then
        fail plan_rundir_$name "$(tail -3 $W/$name.rd.txt | tr '\n' ' ')"
    elif out=$(/usr/bin/python3 tests/plan_rundir_check.py $W/$name $W/$name.plan $W/$name.rd.txt $W/$name.rd.json 2>&1); then
        pass "plan_rundir_$name $out"
    else fail plan_rundir_$name "$out"; fi
}
check_rundir single
check_rundir pp2_1f1b
check_rundir pp2_interleaved
check_rundir 3d_zero3
# Its errors: no run record (2), options of a CONFIG (2), a damaged record or timing.json (4,
# the file and the key named); without timing.json the prediction alone (0).
R=$W/rundir_case
rundir_case() { # name code pattern [edit...]: a copy of the pp2_1f1b run, edited, planned
    local name=$1 code=$2 pattern=$3; shift 3
    rm -rf $R && cp -r $W/pp2_1f1b $R && (cd $R && eval "${1:-true}")
    $T plan $R "${@:2}" >$W/out 2>&1
    local rc=$?
    if [ $rc = "$code" ] && grep -qE -- "$pattern" $W/out; then pass plan_rundir_$name
    else fail plan_rundir_$name "exit $rc: $(head -3 $W/out | tr '\n' ' ')"; fi
}
rundir_case no_record 2 "$R/metrics.jsonl does not exist" "rm metrics.jsonl"
rundir_case no_run_line 2 "no run record: .*no \{\"type\":\"run\"\} line" "sed -i 1d metrics.jsonl"
rundir_case world_option 2 "a run directory takes only --json" true --world 2
rundir_case set_option 2 "run directory's is in its run record" true --set parallel.pp=1
rundir_case timing_torn 4 "$R/timing.json: not valid JSON" "truncate -s 40 timing.json"
rundir_case timing_layout 4 "$R/timing.json: mesh: another layout" "sed -i 's/\"pp\":2/\"pp\":1/; s/\"dp\":1/\"dp\":2/' timing.json"
rundir_case record_no_plan 4 "$R/metrics.jsonl line 1: run record: plan: none" "sed -i '1s/\"plan\":/\"plan_x\":/' metrics.jsonl"
rundir_case record_bad_part 4 "plan.stages\[1\].comm_s: not a number >= 0" "sed -i '1s/\"comm_s\":[^}]*}]/\"comm_s\":-1}]/' metrics.jsonl"
rundir_case no_timing 0 "measured: nothing yet" "rm timing.json"
rundir_case timing_dir 4 "$R/timing.json: Is a directory" "rm timing.json; mkdir timing.json"

# The command: a model far larger than this machine plans in well under a second.
expect_plan() { # name code pattern args...
    local name=$1 code=$2 pattern=$3; shift 3
    $T plan "$@" >$W/out 2>&1
    local rc=$?
    if [ $rc = "$code" ] && grep -qE -- "$pattern" $W/out; then pass $name
    else fail $name "exit $rc: $(head -3 $W/out | tr '\n' ' ')"; fi
}
expect_plan plan_70b_512 0 "fits: (yes|NO)" configs/plan-70b.yaml --world 512
expect_plan plan_70b_assumptions 0 "parallel.overlap" configs/plan-70b.yaml --world 512 --device a100
if $T plan configs/plan-70b.yaml --world 512 --json --device h200 >$W/70b.json 2>&1 &&
        /usr/bin/python3 -c "
import json; p = json.load(open('$W/70b.json'))
assert p['type'] == 'plan' and p['world'] == 512 and len(p['stages']) == p['mesh']['pp']
assert p['device']['name'] == 'h200' and p['n_params'] > 6.9e10 and 0 < p['mfu'] < 1
assert all(s['total_bytes'] == sum(s['memory'].values()) for s in p['stages'])
"; then pass plan_json_70b; else fail plan_json_70b "$(tail -2 $W/70b.json)"; fi
expect_plan plan_search_70b 0 "^ +1 +[0-9]+ " configs/plan-70b.yaml --world 512 --search --top 5
expect_plan plan_search_rejects 0 "does not fit: .* GB at least" configs/plan-70b.yaml --world 64 --search --top 3
expect_plan plan_search_heads 0 "tp 3, 6, 12, 24: model.n_head \(64\) % tp != 0" configs/plan-70b.yaml --world 24 --search --top 3
expect_plan plan_search_tiny 0 "to use #1: --set parallel.tp=" $CFG --world 4 --search
expect_plan plan_unknown_device 2 "unknown device tpu" $CFG --device tpu
expect_plan plan_bad_world 2 "parallel.tp" $CFG --world 3 --set parallel.tp=2
expect_plan plan_bad_key 2 "parallel.zeroo" $CFG --set parallel.zeroo=1
[ $fails = 0 ]
