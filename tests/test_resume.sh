#!/usr/bin/env bash
# Resuming with another config (README "Checkpoints and resume", "Resuming"), end to end:
#   - free changes of every group (layout on 2 ranks, micro-batch, steps, evaluation, logging,
#     checkpoints, system, run.out_dir) run, each printed with what it does, and the run
#     record lists exactly them;
#   - guarded changes are refused (exit 2) naming every key and checkpoint.resume_changes,
#     with nothing written; with checkpoint.resume_changes: allow the run goes on, warns for
#     each and records them;
#   - a change of the model's shape is refused (exit 4) even with allow;
#   - a checkpoint written before a key existed (its line removed, the manifest resealed)
#     resumes with no difference reported;
#   - a seeded fuzz family: random subsets of changes, each case's exit code (0, 2 or 4 as the
#     classes say), every changed key named, no signal, no hang.
#   RESUME_FUZZ_CASES=N (default 8), RESUME_FUZZ_SEED=S (default 1) for longer runs.
set -u
source "$(dirname "$0")/lib.sh"

B=(--set data.eval_every=0 --set log.every=1 --set system.threads=2 --set checkpoint.every=6)
$T train $CFG "${B[@]}" --set train.steps=12 --set run.out_dir=$W/base --set checkpoint.dir=$W/cb \
    >$W/base.log 2>&1 || fail resume_base "$(tail -2 $W/base.log)"
CK=$W/cb/step_00000006

# record_keys DIR: "key:class ..." of the run record's resume_changes, sorted.
record_keys() {
    /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
run = json.loads(open(sys.argv[1]).readline())
print(' '.join(sorted('%s:%s' % (c['key'], c['class']) for c in run['resume_changes'])))
PY
}

# --- free changes of every group, on another layout: they run, each printed and recorded
FREE=(--set train.steps=16 --set train.micro_batch=2 --set data.eval_every=4 --set data.eval_batches=1
      --set data.val=data/kjv_val_00*.bin --set log.every=2 --set checkpoint.every=8 --set checkpoint.keep=2
      --set checkpoint.async=false --set system.threads=1 --set system.comm_timeout_s=100
      --set parallel.zero=2 --set parallel.overlap=false --set parallel.bucket_mb=1 --set run.name=other
      --set model.vocab_pad_to=32)
"${MPIRUN[@]}" -np 2 $T train $CFG "${B[@]}" "${FREE[@]}" --set run.out_dir=$W/free \
    --set checkpoint.dir=$W/cfree --set checkpoint.resume=$CK >$W/free.log 2>&1
rc=$?
want="checkpoint.async:free checkpoint.dir:free checkpoint.every:free checkpoint.keep:free checkpoint.resume:free data.eval_batches:free data.eval_every:free data.val:free log.every:free model.vocab_pad_to:free parallel.bucket_mb:free parallel.dp:free parallel.overlap:free parallel.zero:free run.name:free run.out_dir:free system.comm_timeout_s:free system.threads:free train.micro_batch:free train.steps:free"
got=$(record_keys $W/free 2>&1)
missing=
for kc in $want; do grep -q "^resume: ${kc%:free} " $W/free.log || missing="$missing ${kc%:free}"; done
if [ $rc = 0 ] && [ "$got" = "$want" ] && [ -z "$missing" ] &&
    grep -q "^resume: parallel.dp 1 -> 2: resharded from tp1 x pp1 x dp1 to tp1 x pp1 x dp2$" $W/free.log &&
    grep -q "^resume: train.steps 12 -> 16: the LR decay now ends at step 16 instead of 12 (warmup unchanged); the LR of the next step (7) " $W/free.log &&
    grep -q "^resume: train.micro_batch 4 -> 2: gradient accumulation: 2 -> 2 micro-batches per step and replica" $W/free.log &&
    grep -q '"type":"step","step":16' $W/free/metrics.jsonl; then
    pass "resume_free_changes_run ($(echo $want | wc -w) free keys printed and recorded, dp2 from 1 process)"
else fail resume_free_changes_run "exit $rc, not printed:${missing:-} recorded: $got $(grep -h 'error' $W/free.log | head -2)"; fi

# --- guarded changes: refused with exit 2 and nothing written; allowed, they run and are recorded
G=(--set optim.lr=2e-3 --set train.grad_clip=0.5 --set train.steps=12)
before=$(ls -lR --time-style=+%s.%N $W/cb | md5sum)
$T train $CFG "${B[@]}" "${G[@]}" --set run.out_dir=$W/guard --set checkpoint.dir=$W/cguard \
    --set checkpoint.resume=$CK >$W/guard.log 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "error: cannot resume from $CK as configured: 2 guarded keys differ" $W/guard.log &&
    grep -q "^error:   optim.lr 0.001 -> 0.002: another peak learning rate" $W/guard.log &&
    grep -q "^error:   train.grad_clip 1.0 -> 0.5: gradients clipped at another norm" $W/guard.log &&
    grep -q "^HINT: .*(--set train.grad_clip=1.0 --set optim.lr=0.001); to resume with the changes, set checkpoint.resume_changes: allow" $W/guard.log &&
    [ ! -e $W/guard/metrics.jsonl ] && [ -z "$(ls $W/cguard 2>/dev/null | grep step_)" ] &&
    [ "$before" = "$(ls -lR --time-style=+%s.%N $W/cb | md5sum)" ]; then
    pass "resume_guarded_refused_exit2 (both keys named, nothing written)"
else fail resume_guarded_refused_exit2 "exit $rc: $(grep -h 'error\|HINT' $W/guard.log | head -4 | tr '\n' ' ')"; fi
$T train $CFG "${B[@]}" "${G[@]}" --set checkpoint.resume_changes=allow --set run.out_dir=$W/allow \
    --set checkpoint.dir=$W/callow --set checkpoint.resume=$CK >$W/allow.log 2>&1
rc=$?
got=$(record_keys $W/allow 2>&1)
if [ $rc = 0 ] && grep -q "^warning: resume: optim.lr 0.001 -> 0.002 (guarded; allowed by checkpoint.resume_changes)" $W/allow.log &&
    grep -q "^warning: resume: train.grad_clip 1.0 -> 0.5 (guarded; allowed" $W/allow.log &&
    [[ "$got" == *"optim.lr:guarded"* && "$got" == *"train.grad_clip:guarded"* && "$got" == *"checkpoint.resume_changes:free"* ]] &&
    grep -q '"type":"step","step":12' $W/allow/metrics.jsonl; then
    pass "resume_guarded_allowed_recorded ($got)"
else fail resume_guarded_allowed_recorded "exit $rc, recorded '$got': $(grep -h 'error\|warning' $W/allow.log | head -3 | tr '\n' ' ')"; fi

# --- the model's shape: refused with exit 4 even with allow
$T train $CFG "${B[@]}" --set model.n_layer=3 --set checkpoint.resume_changes=allow --set run.out_dir=$W/shape \
    --set checkpoint.dir=$W/cshape --set checkpoint.resume=$CK >$W/shape.log 2>&1
rc=$?
if [ $rc = 4 ] && grep -q "^error:   model.n_layer 2 -> 3: the checkpoint holds the tensors of another number of layers" $W/shape.log &&
    grep -q "^HINT: resume it with the checkpoint's model keys (--set model.n_layer=2).*checkpoint.resume_changes: allow cannot change a model's shape" $W/shape.log &&
    [ ! -e $W/shape/metrics.jsonl ]; then
    pass "resume_shape_refused_even_with_allow (exit 4)"
else fail resume_shape_refused_even_with_allow "exit $rc: $(grep -h 'error\|HINT' $W/shape.log | head -3 | tr '\n' ' ')"; fi

# --- a checkpoint written before a key existed: the key is compared as its default
cp -r $CK $W/old
manifest_rewrite $W/old/manifest.yaml '    resume_changes:'
$T train $CFG "${B[@]}" --set train.steps=12 --set run.out_dir=$W/oldr --set checkpoint.dir=$W/coldr \
    --set checkpoint.resume=$W/old >$W/oldr.log 2>&1
rc=$?
if [ $rc = 0 ] && ! grep -q "resume_changes" $W/old/manifest.yaml && ! grep -q "^resume: checkpoint.resume_changes" $W/oldr.log &&
    grep -q "resumed from $W/old: step 6" $W/oldr.log; then
    pass "resume_checkpoint_without_new_key"
else fail resume_checkpoint_without_new_key "exit $rc: $(grep -h 'resume\|error' $W/oldr.log | head -3 | tr '\n' ' ')"; fi

# --- seeded fuzz: random subsets of changes ------------------------------------------------
FZ_FREE=(train.steps=14 train.micro_batch=2 data.eval_every=3 log.every=3 checkpoint.every=4
         checkpoint.async=false system.threads=1 parallel.zero=0 parallel.recompute=full run.name=fz)
FZ_GUARDED=(optim.lr=2e-3 optim.weight_decay=0.2 train.global_batch=16 train.grad_clip=0.5 run.seed=8
            optim.warmup_steps=3 "data.train=data/kjv_train_00*.bin" optim.decay=linear)
FZ_FIXED=(model.n_layer=3 model.d_model=64 model.seq_len=16)
cases=${RESUME_FUZZ_CASES:-8} seed=${RESUME_FUZZ_SEED:-1}
RANDOM=$seed
ran=0 refused2=0 refused4=0 crashes=0 hangs=0 wrong=0 t0=$SECONDS
for c in $(seq $cases); do
    sets=() keys=() guarded=0 fixed=0 allow=$((RANDOM % 2))
    for kv in "${FZ_FREE[@]}"; do [ $((RANDOM % 3)) = 0 ] && sets+=(--set "$kv") && keys+=("${kv%%=*}"); done
    for kv in "${FZ_GUARDED[@]}"; do [ $((RANDOM % 4)) = 0 ] && sets+=(--set "$kv") && keys+=("${kv%%=*}") && guarded=1; done
    for kv in "${FZ_FIXED[@]}"; do [ $((RANDOM % 8)) = 0 ] && sets+=(--set "$kv") && keys+=("${kv%%=*}") && fixed=1; done
    [ $allow = 1 ] && sets+=(--set checkpoint.resume_changes=allow)
    want=0
    [ $guarded = 1 ] && [ $allow = 0 ] && want=2
    [ $fixed = 1 ] && want=4
    timeout 30 $T train $CFG "${B[@]}" --set train.steps=12 "${sets[@]}" --set run.out_dir=$W/fz$c \
        --set checkpoint.dir=$W/cfz$c --set checkpoint.resume=$CK >$W/fz$c.log 2>&1
    rc=$?
    unnamed=
    for k in "${keys[@]}"; do grep -q "^\(resume: \|error:   \|warning: resume: \)$k " $W/fz$c.log || unnamed="$unnamed $k"; done
    if [ $rc = 124 ]; then hangs=$((hangs + 1))
    elif [ $rc -ge 128 ]; then crashes=$((crashes + 1))
    elif [ $rc != $want ] || [ -n "$unnamed" ]; then
        wrong=$((wrong + 1))
        echo "# case $c (seed $seed): exit $rc, want $want, unnamed:${unnamed:-} sets: ${sets[*]}"
    fi
    case $rc in 0) ran=$((ran + 1)) ;; 2) refused2=$((refused2 + 1)) ;; 4) refused4=$((refused4 + 1)) ;; esac
    rm -rf $W/fz$c $W/cfz$c
done
echo "# fuzz resume_changes: $cases cases (seed $seed): $ran ran, $refused2 refused (exit 2), $refused4 refused (exit 4), $crashes crashes, $hangs hangs, $wrong wrong, $((SECONDS - t0)) s"
if [ $crashes = 0 ] && [ $hangs = 0 ] && [ $wrong = 0 ]; then
    pass "resume_fuzz_changes ($cases cases: $ran ran, $refused2 exit 2, $refused4 exit 4)"
else fail resume_fuzz_changes "$crashes crashes, $hangs hangs, $wrong wrong"; fi

echo "resume tests: $fails failed"
[ $fails = 0 ]
