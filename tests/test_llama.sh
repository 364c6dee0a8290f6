#!/usr/bin/env bash
# model.arch llama (README "Llama") end to end:
#   1. against Hugging Face transformers' LlamaForCausalLM (tests/ref_llama_hf.py, in the venv
#      build/venv-hf that scripts/venv.sh makes once): trident trains 2 steps with a final
#      checkpoint (one process, plain data order) and resumes for step 3; the checkpoint, read
#      in Python from its manifest and rank file, loaded into transformers by the Hugging Face
#      names, gives step 3's loss within 1e-5 and its gradient norm within 1e-4 (relative):
#      grouped-query and multi-head attention, untied and tied heads, another theta and eps;
#   2. every layout against the single-process llama run on the same global batch, 20 steps
#      (loss 1e-5, grad_norm 1e-4, val 1e-5, as GPT-2's layouts): tp 2 with sequence
#      parallelism, pp 2 interleaved, pp 2 zbv (the V: embedding and untied head on rank 0,
#      the backward split into B and W), dp 2 ZeRO-3 with overlap, tp 2 x pp 2 x dp 2;
#      recompute bitwise equal to its absence; a checkpoint of one process resumed on tp 2 x
#      dp 2 (ZeRO-3); `trident sample` of that checkpoint.
# --all (make test-full) adds pp 2 with 1f1b and zb-h1, zbv with the tied head, dp 2 with
# ZeRO-1 and ZeRO-2, the tied head over pp 2,
# bf16 over tp 2 x pp 2 x dp 2 with recompute against the bf16 single process, and a resume on
# pp 2. Prints PASS/FAIL lines.
set -u
source "$(dirname "$0")/lib.sh"
ALL=0
[ "${1:-}" = --all ] && ALL=1

# ---- 1. Hugging Face transformers ----
source "$(dirname "$0")/hf_lib.sh"
if ! hf_venv; then
    fail hf_venv "$(head -c 600 $W/venv.log | tr '\n' ' ')"
    VENV=/nonexistent
fi
HF=(--set model.arch=llama --set data.shuffle=false --set data.eval_every=0 --set system.threads=1)
# hf_case NAME SETS...: 2 steps with a final checkpoint, resumed for step 3, against transformers
hf_case() {
    local name=$1 d=$W/hf_$1
    shift
    for steps in 2 3; do
        if ! $T train $CFG "${HF[@]}" "$@" --set train.steps=$steps --set run.out_dir=$d \
            --set checkpoint.dir=$d/ckpt >$d.$steps.log 2>&1; then
            fail hf_${name}_run "$(tail -2 $d.$steps.log | tr '\n' ' ')"
            return
        fi
    done
    [ -x $VENV/bin/python ] &&
        { $VENV/bin/python tests/ref_llama_hf.py $d/ckpt/step_00000002 $d/metrics.jsonl 3 ||
            fails=$((fails + 1)); }
}
hf_case gqa --set model.n_kv_head=1 --set model.ffn_hidden=64
hf_case mha
hf_case tied --set model.n_head=4 --set model.n_kv_head=2 --set model.ffn_hidden=96 \
    --set model.tie_embeddings=true --set model.rope_theta=500000 --set model.norm_eps=1e-6

# ---- 2. layouts ----
L=(--set model.arch=llama --set model.n_layer=4 --set model.n_head=4 --set model.n_kv_head=2
   --set model.ffn_hidden=64 --set model.vocab_size=250 --set train.steps=20
   --set train.micro_batch=2 --set train.global_batch=8 --set system.threads=1
   --set data.eval_every=10)
PARITY=(loss=1e-5 norm=1e-4 val=1e-5 steps=20) # no param: a llama run writes no model.bin
run1() { # NAME SETS...: one process
    local name=$1
    shift
    $T train $CFG "${L[@]}" "$@" --set run.out_dir=$W/$name >$W/$name.log 2>&1 ||
        fail ${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"
}
layout() { # NAME NP REF SETS...: NP ranks against the run REF
    local name=$1 np=$2 ref=$3
    shift 3
    if "${MPIRUN[@]}" -np $np $T train $CFG "${L[@]}" "$@" --set run.out_dir=$W/$name \
        >$W/$name.log 2>&1; then
        match_reference llama_${name}_parity $W/$ref $W/$name "${PARITY[@]}"
    else fail llama_${name}_run "$(tail -3 $W/$name.log | tr '\n' ' ')"; fi
}
run1 ref
run1 ref_recompute --set parallel.recompute=full
match_reference llama_recompute_bitwise $W/ref $W/ref_recompute bitwise model=no
layout tp2_sp 2 ref --set parallel.tp=2 --set parallel.sequence_parallel=true
layout pp2_interleaved 2 ref --set parallel.pp=2 --set parallel.schedule=interleaved \
    --set parallel.virtual_stages=2
layout pp2_zbv 2 ref --set parallel.pp=2 --set parallel.schedule=zbv --set parallel.virtual_stages=2
layout dp2_zero3 2 ref --set parallel.zero=3 --set parallel.overlap=true
layout tp2_pp2_dp2 8 ref --set parallel.tp=2 --set parallel.pp=2 --set parallel.zero=1

# A checkpoint of one process (step 10 of the reference's 20), resumed on tp 2 x dp 2.
run1 ck --set checkpoint.dir=$W/ck/ckpt --set checkpoint.every=10
if "${MPIRUN[@]}" -np 4 $T train $CFG "${L[@]}" --set run.out_dir=$W/resumed \
    --set checkpoint.resume=$W/ck/ckpt/step_00000010 --set parallel.tp=2 --set parallel.zero=3 \
    >$W/resumed.log 2>&1; then
    match_reference llama_resume_reshard_tp2_dp2 $W/ref $W/resumed loss=1e-5 norm=1e-4 val=1e-5 from=11
else fail llama_resume_reshard_run "$(tail -3 $W/resumed.log | tr '\n' ' ')"; fi
if out=$($T sample $W/ck/ckpt --tokens 16 --seed 1 2>&1) && [ -n "$out" ]; then
    pass "llama_sample $(echo "$out" | tail -1 | head -c 60)"
else fail llama_sample "$(echo "$out" | tail -2 | tr '\n' ' ')"; fi

if [ $ALL = 1 ]; then
    layout pp2_1f1b 2 ref --set parallel.pp=2
    layout dp2_zero1 2 ref --set parallel.zero=1
    layout dp2_zero2 2 ref --set parallel.zero=2 --set parallel.overlap=true
    run1 ref_tied --set model.tie_embeddings=true
    layout pp2_tied 2 ref_tied --set parallel.pp=2 --set model.tie_embeddings=true
    layout pp2_zbh1 2 ref --set parallel.pp=2 --set parallel.schedule=zb-h1
    layout pp2_zbv_tied 2 ref_tied --set parallel.pp=2 --set parallel.schedule=zbv \
        --set parallel.virtual_stages=2 --set model.tie_embeddings=true
    run1 ref_bf16 --set train.precision=bf16
    PARITY=(loss=1e-3 norm=1e-2 steps=20) # bf16 layouts round other sums (as test_mixed.sh)
    layout bf16_tp2_pp2_dp2_recompute 8 ref_bf16 --set train.precision=bf16 --set parallel.tp=2 \
        --set parallel.pp=2 --set parallel.zero=2 --set parallel.recompute=full
    if "${MPIRUN[@]}" -np 2 $T train $CFG "${L[@]}" --set run.out_dir=$W/resumed_pp2 \
        --set checkpoint.resume=$W/ck/ckpt/step_00000010 --set parallel.pp=2 \
        >$W/resumed_pp2.log 2>&1; then
        match_reference llama_resume_reshard_pp2 $W/ref $W/resumed_pp2 loss=1e-5 norm=1e-4 val=1e-5 from=11
    else fail llama_resume_reshard_pp2_run "$(tail -3 $W/resumed_pp2.log | tr '\n' ' ')"; fi
fi
[ $fails = 0 ]
