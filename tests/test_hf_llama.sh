#!/usr/bin/env bash
# Hugging Face in and out for LlamaForCausalLM (README "Hugging Face in and out"), with
# transformers 4.40.2 itself as the reference (tests/hf_llama.py in build/venv-hf):
#   - seeded random LlamaForCausalLMs saved by save_pretrained (grouped-query attention, 4
#     heads sharing 2 kv heads, an untied head; and a tied one with rope_theta 5e5 and
#     rms_norm_eps 1e-6) load through model.init_from: trident's logits equal HF's within
#     1e-5 of the largest logit, its first loss within 1e-5 relative, and 10 training steps
#     equal a plain PyTorch AdamW loop over the HF model within 1e-4 (1 process, tp 2 x pp 2,
#     tp 2 with sequence parallelism: each rank reads only its slices); the bf16 and the
#     sharded save give the same logits;
#   - export --format hf from a tp 2 llama checkpoint (one file and sharded): every tensor
#     equals the checkpoint's (read in Python from its manifest), from_pretrained loads it,
#     and its logits equal trident's on the exported directory; the run directory exports
#     its checkpoint; --format llmc refuses a llama (exit 4);
#   - refused with the key named (exit 2): rope_scaling, attention_bias, num_key_value_heads
#     not dividing num_attention_heads or not divisible by parallel.tp, a contradicting --set;
#   - `trident sample DIR` / `trident export DIR` straight from a Hugging Face directory: greedy
#     sampling from a byte-level GQA model equals transformers' generate on the prompt's bytes;
#     an hf export of the untied, the tied and the sharded save holds the same tensors bit for
#     bit (and config.json's positions and token ids); --format llmc refuses the directory
#     (exit 4); a truncated file exits 4 naming file and tensor, rope_scaling exits 2, and a
#     config.json giving an unbuildable model (odd head size) exits 2 with one error line
#     naming the file and the key.
# --all (make test-full) adds the tied model on tp 2 x pp 2 x dp 2 with ZeRO-3, an fp32 file
# into a bf16 run, and a random SmolLM-135M-shaped save (bf16) imported with
# configs/smollm-135m.yaml: its logits against transformers'.
set -u
source "$(dirname "$0")/lib.sh"
ALL=0
[ "${1:-}" = --all ] && ALL=1
source "$(dirname "$0")/hf_lib.sh"
hf_venv || { fail hf_llama_venv "$(head -c 600 $W/venv.log | tr '\n' ' ')"; exit 1; }
"$PY" tests/hf_llama.py make $W/hf >$W/make.log 2>&1 || fail hf_llama_make "$(tail -3 $W/make.log)"

# train NAME NP DIR [KEY=VALUE...]: a trident run of NP processes from DIR
train() {
    local name=$1 np=$2 dir=$3
    shift 3
    cfg $W/$name.yaml $dir "run.out_dir=$W/$name" "$@"
    if [ $np = 1 ]; then $T train $W/$name.yaml >$W/$name.log 2>&1
    else "${MPIRUN[@]}" -np $np $T train $W/$name.yaml >$W/$name.log 2>&1; fi ||
        fail ${name}_train "$(grep -m3 -E "error|HINT" $W/$name.log | tr '\n' ' ')"
}

# --- in ------------------------------------------------------------------------------------
dump in_fp32 $W/hf/fp32
train in_fp32 1 $W/hf/fp32
grep -q "config.json sets model.arch gpt2 -> llama, .*model.n_kv_head 4 -> 2, model.ffn_hidden 512 -> 96, model.tie_embeddings true -> false" \
    $W/in_fp32.log && pass hf_llama_in_overrides_said ||
    fail hf_llama_in_overrides_said "$(head -2 $W/in_fp32.log)"
dump in_tied $W/hf/tied
train in_tied 1 $W/hf/tied
dump in_bf16 $W/hf/bf16
dump in_shard $W/hf/shard
train in_tp2pp2 4 $W/hf/fp32 parallel.tp=2 parallel.pp=2
train in_tp2sp 2 $W/hf/fp32 parallel.tp=2 parallel.sequence_parallel=true

# --- out: from a tp 2 checkpoint, one file and sharded -------------------------------------
train src 2 $W/hf/fp32 parallel.tp=2 train.steps=4 checkpoint.every=4 checkpoint.dir=$W/out_ck
expect hf_llama_export_one_file 0 "wrote $W/exp1: 21 tensors" \
    $T export $W/out_ck --format hf --out $W/exp1
expect hf_llama_export_sharded 0 "in [0-9]+ files" \
    $T export $W/out_ck --format hf --out $W/exp2 --max-shard-size 40000
# the run directory (a llama run writes no model.bin) stands for its checkpoint
expect hf_llama_export_run_dir 0 "$W/src has no model.bin: reading its checkpoint $W/out_ck/step_00000004" \
    $T export $W/src --format hf --out $W/exp3
expect hf_llama_export_llmc_refused 4 "holds a llama model \(model.arch llama\), and the llmc format" \
    $T export $W/out_ck --format llmc --out $W/exp.bin
dump exp1 $W/exp1 # trident's logits of the exported model (exp2 holds the same tensors)

# --- sample and export straight from a Hugging Face directory -----------------------------
P="In the beginning"
$T sample $W/hf/byte --prompt "$P" --temperature 0 --tokens 24 >$W/sample.out 2>$W/sample.err ||
    fail hf_llama_sample_run "$(tail -n 3 $W/sample.err | tr '\n' ' ')"
for m in fp32 tied shard; do
    $T export $W/hf/$m --format hf --out $W/rt_$m >$W/rt.log 2>&1 || fail hf_llama_export_from_hf_$m "$(tail -n 2 $W/rt.log)"
done
expect hf_llama_export_llmc_from_hf_refused 4 "the directory holds a llama model \(model.arch llama\), and the llmc format" \
    $T export $W/hf/fp32 --format llmc --out $W/hf.bin

"$PY" tests/hf_llama.py \
    check $W/hf/fp32 $W/in_fp32.dump $W/in_fp32 $W/in_fp32.yaml --name hf_llama_in_fp32 + \
    check $W/hf/tied $W/in_tied.dump $W/in_tied $W/in_tied.yaml --name hf_llama_in_tied + \
    logits $W/hf/bf16 $W/in_bf16.dump $W/in_bf16.yaml --name hf_llama_in_bf16_file + \
    logits $W/hf/shard $W/in_shard.dump $W/in_shard.yaml --name hf_llama_in_sharded + \
    check $W/hf/fp32 $W/in_fp32.dump $W/in_tp2pp2 $W/in_tp2pp2.yaml --name hf_llama_in_tp2pp2 + \
    check $W/hf/fp32 $W/in_fp32.dump $W/in_tp2sp $W/in_tp2sp.yaml --name hf_llama_in_tp2sp + \
    export $W/out_ck/step_00000004 $W/exp1 --name hf_llama_export_tp2 + \
    export $W/out_ck/step_00000004 $W/exp2 --name hf_llama_export_tp2_sharded + \
    logits $W/exp1 $W/exp1.dump $W/exp1.yaml --name hf_llama_export_tp2 + \
    generate $W/hf/byte $W/sample.out "$P" 24 --name hf_llama_sample_greedy + \
    same $W/hf/fp32 $W/rt_fp32 --name hf_llama_export_hf_roundtrip + \
    same $W/hf/tied $W/rt_tied --name hf_llama_export_hf_roundtrip_tied + \
    same $W/hf/fp32 $W/rt_shard --name hf_llama_export_hf_roundtrip_sharded 2>$W/py.log
[ "${PIPESTATUS[0]}" = 0 ] || { fails=$((fails + 1)); tail -5 $W/py.log; }

# --- refused (exit 2, the key named) -------------------------------------------------------
# edit NAME PYTHON: a copy of the fp32 model whose config.json dict c is changed by PYTHON
edit() {
    cp -r $W/hf/fp32 $W/$1
    /usr/bin/python3 -c "
import json, sys
c = json.load(open(sys.argv[1]))
$2
json.dump(c, open(sys.argv[1], 'w'))" $W/$1/config.json
}
edit rope 'c["rope_scaling"] = {"type": "linear", "factor": 2.0}'
expect hf_llama_refused_rope_scaling 2 'rope/config.json: "rope_scaling" is an object of type "linear": trident.s RoPE has no scaling' \
    $T train $W/in_fp32.yaml --set model.init_from=$W/rope
edit bias 'c["attention_bias"] = True'
expect hf_llama_refused_attention_bias 2 'bias/config.json: "attention_bias" is true: trident.s Llama has no biases' \
    $T train $W/in_fp32.yaml --set model.init_from=$W/bias
edit kv3 'c["num_key_value_heads"] = 3'
expect hf_llama_refused_kv_heads 2 'config.json: "num_key_value_heads" is 3: it must divide num_attention_heads' \
    $T train $W/in_fp32.yaml --set model.init_from=$W/kv3
expect hf_llama_refused_kv_heads_tp 2 "model.n_kv_head \(2\) must be divisible by parallel.tp \(4\)" \
    $T train $W/in_fp32.yaml --set parallel.tp=4
expect hf_llama_sample_refused_rope_scaling 2 'rope/config.json: "rope_scaling" is an object of type "linear"' \
    $T sample $W/rope --tokens 2
# A config.json that reads but gives no model trident can build (head size 64 / 64 = 1, odd for
# RoPE): sample and export say so in one line naming the file and the key, then a HINT, and
# nothing else (no "1 error in /dev/null" of the empty YAML that export_open once loaded).
edit hs1 'c["num_attention_heads"] = 64; c["num_key_value_heads"] = 64'
for cmd in "sample $W/hs1 --tokens 2" "export $W/hs1 --format hf --out $W/hs1_out"; do
    name=hf_llama_${cmd%% *}_refused_model_one_error
    expect $name 2 "^$W/hs1/config.json: model.d_model: rotary embeddings .*\(64 / 64 = 1\) must be even" \
        $T $cmd
    [ "$(grep -vc '^HINT' $W/out)" = 1 ] && pass ${name}_alone ||
        fail ${name}_alone "more than the one error line: $(tr '\n' ' ' <$W/out)"
done
cp -r $W/hf/fp32 $W/trunc && truncate -s -100 $W/trunc/model.safetensors
expect hf_llama_sample_truncated 4 "trunc/model.safetensors: tensor .* lies past the end of the file" \
    $T sample $W/trunc --tokens 2
expect hf_llama_conflict 2 "model.tie_embeddings is true in the config but false in $W/hf/fp32/config.json" \
    $T train $W/in_fp32.yaml --set model.tie_embeddings=true

# --- --all: the tied model on tp 2 x pp 2 x dp 2 with ZeRO-3 (the last stage's copy of wte
# read from embed_tokens), an fp32 file into a bf16 run, and a SmolLM-135M-shaped model with
# configs/smollm-135m.yaml -----------------------------------------------------------------
if [ $ALL = 1 ]; then
    dump tied_mb2 $W/hf/tied train.micro_batch=2
    train tied_3d 8 $W/hf/tied train.micro_batch=2 parallel.tp=2 parallel.pp=2 parallel.dp=2 \
        parallel.zero=3
    train bf16_run 1 $W/hf/fp32 train.precision=bf16 train.steps=1
    "$PY" tests/hf_llama.py \
        check $W/hf/tied $W/tied_mb2.dump $W/tied_3d $W/tied_3d.yaml --name hf_llama_in_tied_3d + \
        check $W/hf/fp32 $W/in_fp32.dump $W/bf16_run $W/bf16_run.yaml --steps 1 --tol 5e-4 \
        --name hf_llama_in_bf16_run || fails=$((fails + 1))
    "$PY" tests/hf_llama.py make-smol $W/smol >$W/smol.log 2>&1 || fail hf_llama_smol_make "$(tail -3 $W/smol.log)"
    BASE=configs/smollm-135m.yaml dump smol $W/smol model.arch=llama model.n_layer=30 \
        model.n_head=9 model.d_model=576 model.vocab_size=49152 model.seq_len=64 \
        train.micro_batch=1 train.global_batch=1 data.train=data/kjv_train_000.bin \
        data.val=data/kjv_val_000.bin parallel.zero=0 system.threads=2
    if grep -q "config.json sets" $W/smol.dump.log; then
        fail hf_llama_smol_no_override "$(grep "config.json sets" $W/smol.dump.log)"
    else pass hf_llama_smol_no_override; fi
    "$PY" tests/hf_llama.py logits $W/smol $W/smol.dump $W/smol.yaml --name hf_llama_smol135m ||
        fails=$((fails + 1))
fi
exit $((fails > 0))
