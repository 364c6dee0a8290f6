#!/usr/bin/env bash
# Hugging Face in and out (README "Hugging Face in and out"), with transformers itself as the
# reference (tests/hf_gpt2.py in build/venv-hf, made once by scripts/venv.sh):
#   - a seeded random GPT2LMHeadModel saved by save_pretrained (fp32, bf16, and fp32 in 40 KB
#     shards with model.safetensors.index.json) loads through model.init_from: trident's
#     logits equal HF's within 1e-5 of the largest logit, its first loss within 1e-5
#     relative, and 10 training steps equal a plain PyTorch AdamW loop over the HF model
#     within 1e-4 (1 process, and tp 2 x pp 2 where each rank reads only its slices);
#   - config.json sets the model keys (said once), refuses a contradicting --set and a
#     seq_len past n_positions (exit 2), and what trident cannot compute (exit 2, key named);
#   - export --format hf from a tp 2 checkpoint (one file and sharded): from_pretrained's
#     logits equal trident's (ref_dump of the llm.c export of the same checkpoint), and the
#     run's tokenizer loads with AutoTokenizer;
#   - a missing tensor, a truncated file, a wrong shape: exit 4 naming the file and tensor;
#   - `trident sample DIR` and `trident export DIR` straight from a Hugging Face directory:
#     greedy sampling (--temperature 0) from a byte-level model equals transformers' generate
#     on the prompt's bytes, and with DIR/tokenizer.json (ids 255 - byte) on its ids; an hf
#     export of the fp32 and the sharded save holds the same tensors bit for bit and the same
#     config.json positions and token ids; the llm.c export gives the same logits as the
#     directory; a corrupt or truncated file exits 4 naming it (and the tensor), a refused
#     config.json value exits 2 naming the key.
set -u
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/hf_lib.sh"
hf_venv || { fail hf_venv "$(head -c 600 $W/venv.log | tr '\n' ' ')"; exit 1; }
"$PY" tests/hf_gpt2.py make $W/hf >$W/make.log 2>&1 || fail hf_make "$(tail -3 $W/make.log)"

# --- in: 1 process, fp32 and bf16 files, sharded -------------------------------------------
dump in_fp32 $W/hf/fp32
expect hf_in_overrides_said 0 "config.json sets model.n_layer 4 -> 2, model.d_model 128 -> 64, model.vocab_size 256 -> 250" \
    $T train $W/in_fp32.yaml
dump in_bf16 $W/hf/bf16
$T train $W/in_bf16.yaml >$W/in_bf16.log 2>&1 || fail hf_in_bf16_train "$(tail -3 $W/in_bf16.log)"
dump in_shard $W/hf/shard
# tp 2 x pp 2: each rank reads its slices of the same file (the dump is the 1-process one)
cfg $W/in_tp.yaml $W/hf/fp32 run.out_dir=$W/in_tp parallel.tp=2 parallel.pp=2
"${MPIRUN[@]}" -np 4 $T train $W/in_tp.yaml >$W/in_tp.log 2>&1 || fail hf_in_tp2pp2_train "$(tail -3 $W/in_tp.log)"
# an fp32 file into a bf16 run: its first loss near HF's
cfg $W/in_mixed.yaml $W/hf/fp32 run.out_dir=$W/in_mixed train.precision=bf16 train.steps=1
$T train $W/in_mixed.yaml >$W/in_mixed.log 2>&1 || fail hf_in_bf16_run "$(tail -3 $W/in_mixed.log)"

# --- out: from a tp 2 checkpoint, one file and sharded, with the run's tokenizer -----------
# the fixture tokenizer in the format transformers 4.40's tokenizers 0.19 reads ("a b" merges)
/usr/bin/python3 tests/tokenize_fixture.py $W/tok.json >/dev/null
/usr/bin/python3 -c "
import json, sys
t = json.load(open(sys.argv[1]))
t['model']['merges'] = [' '.join(m) for m in t['model']['merges']]
t['model'].pop('ignore_merges', None)
json.dump(t, open(sys.argv[1], 'w'))" $W/tok.json
cfg $W/out.yaml $W/hf/fp32 run.out_dir=$W/outrun parallel.tp=2 train.steps=4 checkpoint.every=4 \
    checkpoint.dir=$W/out_ck data.tokenizer=$W/tok.json
"${MPIRUN[@]}" -np 2 $T train $W/out.yaml >$W/out.log 2>&1 || fail hf_out_train "$(grep -m3 -E "error|HINT" $W/out.log)"
$T export $W/out_ck --format llmc --out $W/out.bin >$W/exp.log 2>&1
expect hf_export_one_file 0 "wrote $W/exp1: 28 tensors" $T export $W/out_ck --format hf --out $W/exp1
expect hf_export_sharded 0 "in 7 files" $T export $W/out_ck --format hf --out $W/exp2 --max-shard-size 100000
[ -f $W/exp2/model.safetensors.index.json ] && [ ! -e $W/exp2/model.safetensors ] ||
    fail hf_export_sharded_index "no index, or a stale model.safetensors"
SHAPE=(model.arch=gpt2 model.n_layer=2 model.n_head=4 model.d_model=64 model.vocab_size=250)
cfg $W/exp.yaml $W/out.bin "${SHAPE[@]}"
mkdir -p $W/exp.dump && $DUMP $W/exp.yaml $W/exp.dump 1 >$W/exp.dump.log 2>&1
# --- sample and export straight from a Hugging Face directory -----------------------------
P="In the beginning"
$T sample $W/hf/byte --prompt "$P" --temperature 0 --tokens 24 >$W/sample.out 2>$W/sample.err ||
    fail hf_sample_run "$(tail -n 3 $W/sample.err | tr '\n' ' ')"
cp -r $W/hf/byte $W/bytetok && cp $W/hf/reversed_tokenizer.json $W/bytetok/tokenizer.json
$T sample $W/bytetok --prompt "$P" --temperature 0 --tokens 24 >$W/sample_tok.out 2>$W/sample.err ||
    fail hf_sample_tokenizer_run "$(tail -n 3 $W/sample.err | tr '\n' ' ')"
expect hf_export_from_hf 0 "exported $W/hf/fp32 to $W/rt \(hf\)" $T export $W/hf/fp32 --format hf --out $W/rt
$T export $W/hf/shard --format hf --out $W/rt_shard >$W/rt.log 2>&1 || fail hf_export_from_hf_sharded "$(tail -n 2 $W/rt.log)"
$T export $W/bytetok --format hf --out $W/rt_tok >$W/rt.log 2>&1 && cmp -s $W/rt_tok/tokenizer.json $W/bytetok/tokenizer.json &&
    pass hf_export_from_hf_tokenizer || fail hf_export_from_hf_tokenizer "$(tail -n 2 $W/rt.log)"
expect hf_export_onto_itself 2 "--out $W/rt is the source directory" $T export $W/rt --format hf --out $W/rt
expect hf_sample_prompt_needs_tokenizer 2 "no tokenizer is known" $T sample $W/hf/fp32 --prompt "$P"
# the llm.c export of the directory (seq_len: all 64 positions): the same logits as the
# directory itself read by model.init_from
$T export $W/hf/fp32 --format llmc --out $W/hf.bin >$W/rt.log 2>&1 || fail hf_export_llmc_from_hf "$(tail -n 2 $W/rt.log)"
dump hfbin $W/hf.bin model.arch=gpt2 model.n_layer=2 model.n_head=4 model.d_model=64 \
    model.vocab_size=250 model.seq_len=64
dump hfdir $W/hf/fp32 model.seq_len=64
if [ -s $W/hfbin.dump/logits.bin ] && cmp -s $W/hfbin.dump/logits.bin $W/hfdir.dump/logits.bin; then
    pass hf_export_llmc_from_hf
else fail hf_export_llmc_from_hf "the llm.c export's logits differ from the directory's"; fi

# the exported directory read back by trident (its shape given too: equal keys are no
# conflict): the same logits as the llm.c export's
cfg $W/back.yaml $W/exp2 "${SHAPE[@]}"
mkdir -p $W/back.dump && $DUMP $W/back.yaml $W/back.dump 1 >$W/back.dump.log 2>&1
if cmp -s $W/back.dump/logits.bin $W/exp.dump/logits.bin; then pass hf_export_import_roundtrip
else fail hf_export_import_roundtrip "logits of the re-imported export differ"; fi

"$PY" tests/hf_gpt2.py \
    check $W/hf/fp32 $W/in_fp32.dump $W/in_fp32 $W/in_fp32.yaml --name hf_in_fp32 + \
    check $W/hf/bf16 $W/in_bf16.dump $W/in_bf16 $W/in_bf16.yaml --name hf_in_bf16_file + \
    logits $W/hf/shard $W/in_shard.dump $W/in_shard.yaml --name hf_in_sharded + \
    check $W/hf/fp32 $W/in_fp32.dump $W/in_tp $W/in_tp.yaml --name hf_in_tp2pp2 + \
    check $W/hf/fp32 $W/in_fp32.dump $W/in_mixed $W/in_mixed.yaml --steps 1 --tol 5e-4 \
    --name hf_in_bf16_run + \
    logits $W/exp1 $W/exp.dump $W/exp.yaml --name hf_export_tp2 + \
    logits $W/exp2 $W/exp.dump $W/exp.yaml --name hf_export_tp2_sharded + \
    tokenizer $W/exp1 "In the beginning God created the heaven and the earth." + \
    generate $W/hf/byte $W/sample.out "$P" 24 --name hf_sample_greedy + \
    generate $W/bytetok $W/sample_tok.out "$P" 24 --reverse --name hf_sample_tokenizer_json + \
    same $W/hf/fp32 $W/rt --name hf_export_hf_roundtrip + \
    same $W/hf/fp32 $W/rt_shard --name hf_export_hf_roundtrip_sharded 2>$W/py.log
[ "${PIPESTATUS[0]}" = 0 ] || { fails=$((fails + 1)); tail -5 $W/py.log; }

# --- refused ------------------------------------------------------------------------------
expect hf_in_conflict 2 "model.n_layer is 3 in the config but 2 in $W/hf/fp32/config.json" \
    $T train $W/in_fp32.yaml --set model.n_layer=3
expect hf_in_seq_len 2 "model.seq_len is 128, but .*config.json's model has 64 positions \(n_positions\)" \
    $T train $W/in_fp32.yaml --set model.seq_len=128
cp -r $W/hf/fp32 $W/act && sed -i 's/"gelu_new"/"relu"/' $W/act/config.json
expect hf_in_refused_activation 2 'config.json: "activation_function" is "relu"' \
    $T train $W/in_fp32.yaml --set model.init_from=$W/act
cp -r $W/hf/fp32 $W/trunc && truncate -s -100 $W/trunc/model.safetensors
expect hf_in_truncated 4 "trunc/model.safetensors: tensor .* lies past the end of the file" \
    $T train $W/in_fp32.yaml --set model.init_from=$W/trunc
# a shard's tensor dropped from the index: the tensor and the directory named
cp -r $W/hf/shard $W/miss && sed -i '/"transformer.h.1.mlp.c_fc.weight"/d' $W/miss/model.safetensors.index.json
expect hf_in_missing_tensor 4 "miss: no tensor transformer.h.1.mlp.c_fc.weight \(trident's h1.fcw\)" \
    $T train $W/in_fp32.yaml --set model.init_from=$W/miss
# the same damage through sample and export (export_open), and a header that is not one
expect hf_sample_truncated 4 "trunc/model.safetensors: tensor .* lies past the end of the file" \
    $T sample $W/trunc --tokens 2
expect hf_export_truncated 4 "trunc/model.safetensors: tensor .* lies past the end of the file" \
    $T export $W/trunc --format hf --out $W/trunc_out
cp -r $W/hf/fp32 $W/corrupt && printf 'not a safetensors header' | dd of=$W/corrupt/model.safetensors conv=notrunc 2>/dev/null
expect hf_sample_corrupt 4 "corrupt/model.safetensors: the header length" $T sample $W/corrupt --tokens 2
expect hf_sample_missing_tensor 4 "miss: no tensor transformer.h.1.mlp.c_fc.weight" $T sample $W/miss --tokens 2
expect hf_sample_refused_activation 2 'act/config.json: "activation_function" is "relu"' $T sample $W/act --tokens 2
exit $((fails > 0))
