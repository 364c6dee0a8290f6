#!/usr/bin/env bash
# End-to-end tests of the trident command line: determinism, user errors and their exit
# codes, export and sample. Prints PASS/FAIL lines.
set -u
cd "$(dirname "$0")/.."
T=build/trident
CFG=tests/configs/tiny.yaml
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
# expect NAME CODE PATTERN CMD...: exit code CODE and stderr+stdout matching PATTERN
expect() {
    local name=$1 code=$2 pattern=$3; shift 3
    "$@" >"$W/out" 2>&1
    local rc=$?
    if [ $rc != "$code" ]; then fail "$name" "exit $rc, expected $code: $(tail -n 3 "$W/out" | tr '\n' ' ')"
    elif ! grep -qE -- "$pattern" "$W/out"; then fail "$name" "output lacks /$pattern/: $(tail -n 3 "$W/out" | tr '\n' ' ')"
    else pass "$name"; fi
}
# Strips the timing fields, which are the only ones allowed to differ between runs.
untimed() { sed -E 's/"(straggler|pass_ms)":\{[^}]*\}//g; s/"(step_ms|tokens_per_s|mfu|mfu_peak_flops|bubble|plan_ratio)":[^,}]*//g' "$1"; }

# --- determinism: two runs of one config write identical metrics apart from timing
expect train_run_a 0 "done: 6 steps" $T train $CFG --set run.out_dir=$W/a
expect train_run_b 0 "done: 6 steps" $T train $CFG --set run.out_dir=$W/b
if [ -s $W/a/metrics.jsonl ] && cmp -s <(untimed $W/a/metrics.jsonl | sed "s|$W/a|X|g") <(untimed $W/b/metrics.jsonl | sed "s|$W/b|X|g"); then
    pass determinism_metrics
else fail determinism_metrics "metrics differ: $(diff <(untimed $W/a/metrics.jsonl) <(untimed $W/b/metrics.jsonl) | head -4 | tr '\n' ' ')"; fi
if cmp -s $W/a/model.bin $W/b/model.bin; then pass determinism_model; else fail determinism_model "model.bin differs"; fi
n_step=$(grep -c '"type":"step"' $W/a/metrics.jsonl); n_eval=$(grep -c '"type":"eval"' $W/a/metrics.jsonl)
if [ "$n_step" = 6 ] && [ "$n_eval" = 2 ] && head -1 $W/a/metrics.jsonl | grep -q '"type":"run"'; then pass metrics_lines
else fail metrics_lines "$n_step step and $n_eval eval lines"; fi
if /usr/bin/python3 -c "
import json,sys
rows=[json.loads(l) for l in open('$W/a/metrics.jsonl')]
need={'step','loss','lr','grad_norm','tokens','step_ms','tokens_per_s','mfu','mem_peak_bytes','comm_bytes'}
steps=[r for r in rows if r['type']=='step']
assert all(need <= set(r) for r in steps), 'missing fields'
assert set(steps[0]['comm_bytes'])=={'tp','pp','dp'}
assert steps[-1]['tokens']==6*8*32
assert rows[0]['config']['model']['n_layer']==2
" 2>$W/py; then pass metrics_schema; else fail metrics_schema "$(tail -1 $W/py)"; fi
# The loss falls on a longer run of the same tiny model.
expect train_loss_falls 0 "done" $T train $CFG --set run.out_dir=$W/c --set train.steps=40 --set optim.lr=3e-3 --set data.eval_every=0
if /usr/bin/python3 -c "
import json
s=[json.loads(l) for l in open('$W/c/metrics.jsonl') if '\"step\"' in l]
assert s[-1]['loss'] < s[0]['loss'] - 1.0, (s[0]['loss'], s[-1]['loss'])
"; then pass loss_falls; else fail loss_falls "loss did not fall by 1.0 in 40 steps"; fi

# --- export and sample
expect export_llmc 0 "exported" $T export $W/a --format llmc --out $W/m.bin
if cmp -s $W/m.bin $W/a/model.bin; then pass export_llmc_roundtrip; else fail export_llmc_roundtrip "export differs from model.bin"; fi
expect export_safetensors 0 "exported" $T export $W/a --format safetensors --out $W/m.safetensors
# The safetensors file read as Hugging Face's GPT2LMHeadModel reads it (tests/st_gpt2.py):
# names, shapes and the logits of a Conv1D-layout GPT-2 against the llm.c file's.
/usr/bin/python3 tests/st_gpt2.py $W/m.safetensors $W/a/model.bin 2>&1 || fails=$((fails + 1))
expect export_bad_format 2 "llmc, safetensors or hf" $T export $W/a --format onnx --out $W/x
expect export_missing_run 4 "cannot open model file" $T export $W/nope --format llmc --out $W/x
expect sample_runs 0 "^And God" $T sample $W/a --prompt "And God" --tokens 16 --seed 1
$T sample $W/a --prompt "x" --tokens 24 --seed 5 >$W/s1 2>&1; $T sample $W/a --prompt "x" --tokens 24 --seed 5 >$W/s2 2>&1
if cmp -s $W/s1 $W/s2; then pass sample_deterministic; else fail sample_deterministic "same seed, different text"; fi
expect init_from_roundtrip 0 "done" $T train $CFG --set run.out_dir=$W/d --set model.init_from=$W/a/model.bin --set train.steps=1
expect init_from_shape 4 "model.n_layer is 2 in the model file but 3 in the config" $T train $CFG --set run.out_dir=$W/e --set model.init_from=$W/a/model.bin --set model.n_layer=3
# An llm.c bf16 file (version 5) of the same model: rounded to nearest even, it loads and
# starts within bf16 rounding of the fp32 model's first loss.
/usr/bin/python3 -c "
import numpy as np
h = np.fromfile('$W/a/model.bin', dtype=np.int32, count=256).copy()
w = np.fromfile('$W/a/model.bin', dtype=np.float32, offset=1024)
u = w.view(np.uint32).astype(np.uint64)
b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
h[1] = 5
open('$W/bf16.bin', 'wb').write(h.tobytes() + b.tobytes())"
expect init_from_bf16 0 "done" $T train $CFG --set run.out_dir=$W/g --set model.init_from=$W/bf16.bin --set train.steps=1
$T train $CFG --set run.out_dir=$W/h --set model.init_from=$W/a/model.bin --set train.steps=1 >/dev/null 2>&1
if /usr/bin/python3 -c "
import json
a = [json.loads(l) for l in open('$W/g/metrics.jsonl')][1]['loss']
b = [json.loads(l) for l in open('$W/h/metrics.jsonl')][1]['loss']
assert abs(a - b) / b < 1e-2 and a != b, (a, b)
"; then pass init_from_bf16_loss; else fail init_from_bf16_loss "bf16 start differs from fp32 by more than 1e-2"; fi
printf 'not a model' >$W/junk.bin
expect init_from_junk 4 "junk.bin" $T train $CFG --set run.out_dir=$W/e --set model.init_from=$W/junk.bin

# --- bad data: exit 3, naming the file
mkshard() { # mkshard FILE MAGIC VERSION NTOK NBYTES_OF_TOKENS TOKEN_VALUE
    /usr/bin/python3 -c "
import struct,sys
h=[0]*256; h[0]=$2; h[1]=$3; h[2]=$4
open('$1','wb').write(struct.pack('<256i',*h)+struct.pack('<H',$6)*($5//2))"
}
mkshard $W/badmagic_000.bin 12345 1 1000 2000 65
expect data_bad_magic 3 "badmagic_000.bin.*magic" $T train $CFG --set run.out_dir=$W/e --set "data.train=$W/badmagic_*.bin"
mkshard $W/short_000.bin 20240520 1 1000 1000 65
expect data_wrong_size 3 "short_000.bin.*size" $T train $CFG --set run.out_dir=$W/e --set "data.train=$W/short_*.bin"
mkshard $W/vocab_000.bin 20240520 1 1000 2000 300
expect data_token_vocab 3 "vocab_000.bin.*300" $T train $CFG --set run.out_dir=$W/e --set "data.train=$W/vocab_*.bin"
mkshard $W/few_000.bin 20240520 1 100 200 65
expect data_too_few 3 "few_" $T train $CFG --set run.out_dir=$W/e --set "data.train=$W/few_*.bin"
expect data_no_match 3 "nothing_\*" $T train $CFG --set run.out_dir=$W/e --set "data.train=$W/nothing_*.bin"
expect data_bad_val 3 "data.val" $T train $CFG --set run.out_dir=$W/e --set "data.val=$W/nothing_*.bin"

# --- config and usage errors: exit 2
expect cli_no_args 2 "usage" $T
expect cli_unknown_command 2 "unknown command" $T frobnicate
expect cli_missing_config 2 "cannot open config" $T train $W/none.yaml
expect cli_bad_set 2 "model.n_layr" $T train $CFG --set model.n_layr=3
expect cli_check_world 2 "parallel" $T check $CFG --world 3 --set parallel.tp=2
expect cli_check_ok 0 "mesh: world 4" $T check $CFG --world 4 --set parallel.tp=2
expect cli_help 0 "usage" $T --help
expect cli_version 0 "trident [0-9]" $T --version

# --- non-finite loss: exit 6 naming the step
expect nonfinite_loss 6 "non-finite" $T train $CFG --set run.out_dir=$W/f --set optim.lr=1e30 --set optim.min_lr=1e29 --set optim.warmup_steps=0 --set train.grad_clip=0 --set train.steps=6

# --- system.backend: auto falls back to the CPU without a GPU; cuda asked for without one
# (or in a build without CUDA) is a config error naming the key.
if nvidia-smi -L >/dev/null 2>&1; then echo "SKIP backend_cuda_without_gpu: this machine has a GPU"
else expect backend_cuda_without_gpu 2 "system.backend: cuda" $T train $CFG --set run.out_dir=$W/g --set system.backend=cuda; fi
expect backend_auto_cpu 0 "backend cpu" $T train $CFG --set run.out_dir=$W/h --set system.backend=auto

[ $fails = 0 ]
