#!/usr/bin/env bash
# The checkpoint fuzzer (tests/ckpt_fuzz.c says what each family damages and what each case
# must end in) on four checkpoint.dirs: one process (fp32), tp 2 on two ranks (two rank
# files, column and row splits), one process in bf16 (fp32 master weights) and one process
# reading a blend of two sources (a data order with two sources and a schedule state), and a
# llama on tp 2, two checkpoints each.
#   FUZZ_CASES=N (default 150: cases per family)   FUZZ_SEED=S (default 1)
# e.g. FUZZ_CASES=5000 FUZZ_SEED=7 bash tests/test_ckpt_fuzz.sh for a long run.
set -u
source "$(dirname "$0")/lib.sh"

C=(--set data.eval_every=0 --set log.every=1 --set system.threads=1)
$T train $CFG "${C[@]}" --set train.steps=10 --set checkpoint.every=5 --set run.out_dir=$W/rA \
    --set checkpoint.dir=$W/A >$W/A.log 2>&1 || fail ckpt_fuzz_base_fp32 "$(tail -2 $W/A.log)"
"${MPIRUN[@]}" -np 2 $T train $CFG "${C[@]}" --set train.steps=4 --set checkpoint.every=2 \
    --set parallel.tp=2 --set run.out_dir=$W/rB --set checkpoint.dir=$W/B >$W/B.log 2>&1 ||
    fail ckpt_fuzz_base_tp2 "$(tail -2 $W/B.log)"
$T train $CFG "${C[@]}" --set train.steps=2 --set checkpoint.every=1 --set train.precision=bf16 \
    --set run.out_dir=$W/rC --set checkpoint.dir=$W/C >$W/C.log 2>&1 ||
    fail ckpt_fuzz_base_bf16 "$(tail -2 $W/C.log)"
$T train $CFG "${C[@]}" --set train.steps=6 --set checkpoint.every=3 --set run.out_dir=$W/rD \
    --set 'data.train=[{path: "data/kjv_ot_train_*.bin", weight: 0.7}, {path: "data/kjv_nt_train_*.bin", weight: 0.3}]' \
    --set checkpoint.dir=$W/D >$W/D.log 2>&1 || fail ckpt_fuzz_base_blend "$(tail -2 $W/D.log)"
# A llama (issue 18) on tp 2: its arch keys in the manifest, q|k|v blocks of unequal heights
# (2 kv heads for 4 query heads) split over the ranks, an untied lm_head.
"${MPIRUN[@]}" -np 2 $T train $CFG "${C[@]}" --set train.steps=2 --set checkpoint.every=1 \
    --set parallel.tp=2 --set model.arch=llama --set model.n_head=4 --set model.n_kv_head=2 \
    --set model.ffn_hidden=64 --set run.out_dir=$W/rE --set checkpoint.dir=$W/E >$W/E.log 2>&1 ||
    fail ckpt_fuzz_base_llama_tp2 "$(tail -2 $W/E.log)"
# Thousands of small files are written and removed: in memory where there is a tmpfs.
work=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d -p $W)
trap 'rm -rf "$W" "$work"' EXIT
t0=$SECONDS
build/tests/ckpt_fuzz --seed "${FUZZ_SEED:-1}" --cases "${FUZZ_CASES:-150}" --work "$work" \
    $W/A $W/B $W/C $W/D $W/E || fails=$((fails + 1))
echo "checkpoint fuzzer: $((SECONDS - t0)) s; $fails failed"
[ $fails = 0 ]
