#!/usr/bin/env bash
# The data order end to end (io/data_order.h): a blend of two sources (the Old and New
# Testament shards of `make data`, weights 0.6 and 0.4) with two named validation sets,
# shuffled:
#   - the run says what it reads (sources, tokens, samples, epochs), its run record holds each
#     source's path, weight, share, tokens and samples, its eval lines val_loss/ot and /nt;
#     each checkpoint records how many samples each source gave (exactly its share here);
#   - dp 2 (ZeRO-1) reads the same batches: the same losses as one process (FP32_PARITY, as
#     the layout tests, which run tp, pp and dp with the default shuffled order); with
#     --all-layouts (make test-full) tp 2 and pp 2 too, which place no data of their own;
#   - a checkpoint of step 10 on one process, resumed on dp 2, continues with the same
#     metrics as the uninterrupted run;
#   - a resume whose config asks for another order (data.shuffle, the weights) is refused,
#     exit 2 naming both values, and with checkpoint.resume_changes: allow continues (also
#     with a source left out, whose samples then count as retired);
#   - a version 2 checkpoint (before data.shuffle) continues its plain order, says so, and
#     matches the plain run bitwise;
#   - a run past one epoch says so at the start and when epoch 2 begins;
#   - config and data errors of the list forms: exit 2 with the item's key, exit 3 with the
#     key and the pattern.
set -u
source "$(dirname "$0")/lib.sh"
BLEND='data.train=[{path: "data/kjv_ot_train_*.bin", weight: 0.6}, {path: "data/kjv_nt_train_*.bin", weight: 0.4}]'
VALS='data.val=[{name: ot, path: "data/kjv_ot_val_*.bin"}, {name: nt, path: "data/kjv_nt_val_*.bin"}]'
COMMON=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=8
        --set system.threads=1 --set data.eval_every=10 --set "$BLEND" --set "$VALS")
# check NAME FILE PATTERN...: every PATTERN (grep -E) is in FILE.
check() {
    local name=$1 file=$2 p
    shift 2
    for p in "$@"; do
        grep -qE -- "$p" "$file" || { fail "$name" "no '$p' in $file: $(tail -3 "$file" | tr '\n' ' ')"; return 1; }
    done
    pass "$name"
}

$T train $CFG "${COMMON[@]}" --set run.out_dir=$W/ref --set checkpoint.dir=$W/ck \
    --set checkpoint.every=10 --set checkpoint.async=false --set log.tensorboard=$W/tb >$W/ref.log 2>&1 ||
    fail blend_reference_run "$(tail -2 $W/ref.log | tr '\n' ' ')"
check blend_startup_lines $W/ref.log \
    'data.train: a blend of 2 sources, shuffled \(seed 7\), 8 samples a step' \
    '\[0\] data/kjv_ot_train_\*.bin: weight 0.6 \(4.8 samples a step\), 1 shard, 3215854 tokens, 100495 samples' \
    '\[1\] data/kjv_nt_train_\*.bin: weight 0.4 \(3.2 samples a step\)' \
    'data.val ot: data/kjv_ot_val_\*.bin' 'val loss ot [0-9.]+ \| nt [0-9.]+'
if out=$(/usr/bin/python3 - $W/ref $W/ck <<'PY'
import json, re, sys
run, ck = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(run + '/metrics.jsonl')]
rec = lines[0]
src = rec['data_train']
assert [s['path'] for s in src] == ['data/kjv_ot_train_*.bin', 'data/kjv_nt_train_*.bin'], src
assert [s['weight'] for s in src] == [0.6, 0.4], src
assert abs(src[0]['share'] - 0.6) < 1e-6 and abs(src[1]['share'] - 0.4) < 1e-6, src
assert src[0]['tokens'] == 3215854 and src[0]['samples'] == 3215853 // 32, src
assert [v['name'] for v in rec['data_val']] == ['ot', 'nt'], rec['data_val']
evals = [l for l in lines if l['type'] == 'eval']
assert [sorted(k for k in e if k.startswith('val_loss')) for e in evals] == \
    [['val_loss/nt', 'val_loss/ot']] * 2, evals
# 10 steps of 8 at 0.6 / 0.4: 48 and 32 samples, exactly.
text = open(ck + '/step_00000010/manifest.yaml').read()
got = [int(x) for x in re.findall(r'- \{path: "[^"]*", weight: [0-9.]+, samples: (\d+)', text)]
assert got == [48, 32], got
assert 'data_order: {shuffle: true, seed: 7, global_batch: 8, origin_step: 0, retired: 0}' in text
print('sources %s, val sets %s, samples at step 10 %s' % ([s['path'] for s in src],
      [v['name'] for v in rec['data_val']], got))
PY
); then pass "blend_run_record $out"; else fail blend_run_record "$out"; fi
# The named sets' TensorBoard tags, and scripts/plot.py's curves of them.
if grep -qa 'val_loss/ot' $W/tb/events.* && grep -qa 'val_loss/nt' $W/tb/events.* &&
    out=$(/usr/bin/python3 - $W/ref <<'PY'
import sys
sys.path.insert(0, 'scripts')
import plot
_, run = plot.read_run(sys.argv[1])
assert sorted(run['eval']) == [10, 20] and all(sorted(v) == ['nt', 'ot'] for v in run['eval'].values()), run['eval']
print('ok')
PY
) && /usr/bin/python3 scripts/plot.py $W/ref --out $W/ref.png >/dev/null && [ -s $W/ref.png ]; then
    pass blend_val_sets_in_tensorboard_and_plot
else fail blend_val_sets_in_tensorboard_and_plot "tags: $(ls $W/tb 2>&1); plot: $out"; fi

# Every layout reads the same batches.
LAYOUTS=("dp2 parallel.dp=2")
[ "${1:-}" = --all-layouts ] && LAYOUTS+=("tp2 parallel.tp=2" "pp2 parallel.pp=2")
for layout in "${LAYOUTS[@]}"; do
    set -- $layout
    name=blend_$1
    if "${MPIRUN[@]}" -np 2 $T train $CFG "${COMMON[@]}" --set $2 --set run.out_dir=$W/$name \
            >$W/$name.log 2>&1; then
        match_reference ${name}_parity $W/ref $W/$name "${FP32_PARITY[@]}"
    else fail ${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"; fi
done

# The checkpoint of step 10 (one process), resumed on dp 2.
rm -rf $W/ck/step_00000020 && echo step_00000010 >$W/ck/latest
cp -r $W/ck $W/ck_a && cp -r $W/ck $W/ck_v
if "${MPIRUN[@]}" -np 2 $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/resumed \
        --set checkpoint.dir=$W/ck >$W/resumed.log 2>&1; then
    match_reference blend_resume_1_to_dp2 $W/ref $W/resumed loss=1e-5 norm=1e-4 val=1e-5 from=11
else fail blend_resume_1_to_dp2 "$(tail -3 $W/resumed.log | tr '\n' ' ')"; fi

# Another order is refused (exit 2, both values named), unless allowed.
$T train $CFG "${COMMON[@]}" --set run.out_dir=$W/other --set checkpoint.dir=$W/ck_a \
    --set data.shuffle=false >$W/other.log 2>&1
rc=$?
[ $rc = 2 ] && check blend_resume_other_order_refused $W/other.log \
    'data.shuffle true -> false: the training samples come in another order' \
    'checkpoint.resume_changes: allow' ||
    fail blend_resume_other_order_refused "exit $rc: $(tail -2 $W/other.log | tr '\n' ' ')"
W2='data.train=[{path: "data/kjv_ot_train_*.bin", weight: 0.5}, {path: "data/kjv_nt_train_*.bin", weight: 0.5}]'
$T train $CFG "${COMMON[@]}" --set "$W2" --set run.out_dir=$W/other --set checkpoint.dir=$W/ck_a \
    >$W/other2.log 2>&1
rc=$?
[ $rc = 2 ] && check blend_resume_other_weights_refused $W/other2.log \
    'data.train \[\{path: "data/kjv_ot_train_\*.bin", weight: 0.6\}.* -> \[.*weight: 0.5\}\]: other training data' ||
    fail blend_resume_other_weights_refused "exit $rc: $(tail -2 $W/other2.log | tr '\n' ' ')"
if $T train $CFG "${COMMON[@]}" --set "$W2" --set run.out_dir=$W/other --set checkpoint.dir=$W/ck_a \
        --set checkpoint.resume_changes=allow >$W/other3.log 2>&1; then
    check blend_resume_other_weights_allowed $W/other3.log 'the data order changes at step 10' \
        'step    20/20'
else fail blend_resume_other_weights_allowed "$(tail -2 $W/other3.log | tr '\n' ' ')"; fi

# Allowed with a source left out: its samples retire (they still count in the global sample
# index), and the checkpoint that run writes is read back and continued.
ONE='data.train=[{path: "data/kjv_ot_train_*.bin", weight: 1}]'
if $T train $CFG "${COMMON[@]}" --set "$ONE" --set run.out_dir=$W/drop --set checkpoint.dir=$W/ck_v \
        --set checkpoint.resume_changes=allow >$W/drop.log 2>&1 &&
    grep -q 'origin_step: 10, retired: 32}' $W/ck_v/step_00000020/manifest.yaml &&
    $T train $CFG "${COMMON[@]}" --set "$ONE" --set run.out_dir=$W/drop --set checkpoint.dir=$W/ck_v \
        --set train.steps=22 >$W/drop2.log 2>&1 && grep -q 'resumed from .*step_00000020' $W/drop2.log; then
    pass blend_resume_source_left_out_allowed
else fail blend_resume_source_left_out_allowed "$(tail -2 $W/drop.log $W/drop2.log 2>&1 | tr '\n' ' ')"; fi

# A version 2 checkpoint (written before data.shuffle) continues its plain order: made from
# a plain run's checkpoint by taking out what version 3 added and sealing it again.
PLAIN=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=8
       --set system.threads=1 --set data.eval_every=10)
$T train $CFG "${PLAIN[@]}" --set data.shuffle=false --set run.out_dir=$W/plain \
    --set checkpoint.dir=$W/ckp --set checkpoint.every=10 --set checkpoint.async=false \
    >$W/plain.log 2>&1 || fail blend_plain_run "$(tail -2 $W/plain.log | tr '\n' ' ')"
rm -rf $W/ckp/step_00000020 && echo step_00000010 >$W/ckp/latest
manifest_rewrite $W/ckp/step_00000010/manifest.yaml \
    '(data_order:|data_sources:|  - \{path:|    shuffle:|    resume_changes:)' 2
mkdir -p $W/v2 && head -n 12 $W/plain/metrics.jsonl >$W/v2/metrics.jsonl
if $T train $CFG "${PLAIN[@]}" --set run.out_dir=$W/v2 --set checkpoint.dir=$W/ckp \
        >$W/v2.log 2>&1; then
    check blend_v2_checkpoint_says_plain $W/v2.log \
        'checkpoint .*step_00000010 was written before data.shuffle: continuing in plain order' &&
        match_reference blend_v2_checkpoint_continues_plain $W/plain $W/v2 bitwise \
            types=step,eval ignore=mem_peak_bytes from=11 model=no
else fail blend_v2_checkpoint_says_plain "$(tail -3 $W/v2.log | tr '\n' ' ')"; fi

# Past one epoch: 198 samples of 256 tokens, 8 a step: epoch 2 begins in step 25.
$T train $CFG --set train.steps=30 --set train.global_batch=8 --set model.seq_len=256 \
    --set system.threads=1 --set data.eval_every=0 --set "data.train=data/kjv_nt_val_*.bin" \
    --set run.out_dir=$W/epochs >$W/epochs.log 2>&1 ||
    fail blend_epochs_run "$(tail -2 $W/epochs.log | tr '\n' ' ')"
check blend_past_one_epoch_said $W/epochs.log \
    '24.8 steps per epoch; the run.s 30 steps make 1.21 epochs' \
    'warning: data.train: the run.s 30 steps read its 198 samples 1.21 times' \
    'step 25: data.train: epoch 2 begins: its 198 samples were each read once, and repeat from here in a new order'

# Errors of the list forms.
$T train $CFG --set run.out_dir=$W/e \
    --set 'data.train=[{path: "data/kjv_ot_train_*.bin", weight: 1}, {path: "data/kjv_nt_train_*.bin", weight: -1}]' \
    >$W/e1.log 2>&1
rc=$?
[ $rc = 2 ] && check blend_bad_weight_exit2 $W/e1.log 'data.train\[1\].weight: must be a finite number > 0' ||
    fail blend_bad_weight_exit2 "exit $rc: $(tail -2 $W/e1.log | tr '\n' ' ')"
$T train $CFG --set run.out_dir=$W/e \
    --set 'data.train=[{path: "data/kjv_ot_train_*.bin", weight: 1}, {path: "data/none_*.bin", weight: 1}]' \
    >$W/e2.log 2>&1
rc=$?
[ $rc = 3 ] && check blend_no_match_exit3 $W/e2.log "data.train\[1\].path: no file matches 'data/none_\*.bin'" ||
    fail blend_no_match_exit3 "exit $rc: $(tail -2 $W/e2.log | tr '\n' ' ')"
$T train $CFG --set run.out_dir=$W/e \
    --set 'data.val=[{name: a, path: "data/kjv_ot_val_*.bin"}, {name: a, path: "data/kjv_nt_val_*.bin"}]' \
    >$W/e3.log 2>&1
rc=$?
[ $rc = 2 ] && check blend_duplicate_val_name_exit2 $W/e3.log "data.val\[1\].name: 'a' names data.val\[0\] too" ||
    fail blend_duplicate_val_name_exit2 "exit $rc: $(tail -2 $W/e3.log | tr '\n' ' ')"
[ $fails = 0 ]
