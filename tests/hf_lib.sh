# hf_lib.sh: what the Hugging Face tests share (test_hf.sh, test_hf_llama.sh, test_llama.sh;
# sourced after lib.sh): the venv of transformers, a config that imports a Hugging Face
# directory, and the checks of a command's exit and output and of ref_dump's dump.
DUMP=${REF_DUMP:-build/tests/ref_dump}

# hf_venv: VENV and PY from build/venv-hf (made once by scripts/venv.sh; transformers 4.40.2
# runs on Debian's torch 1.13 and wants tokenizers < 0.20); 1 when it cannot be made (pip's
# last lines in $W/venv.log). Hugging Face stays offline: every model is made by the test.
hf_venv() {
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    VENV=$(scripts/venv.sh hf transformers==4.40.2 tokenizers==0.19.1 safetensors==0.4.3 \
        2>$W/venv.log) || return 1
    PY="$VENV/bin/python"
}

# cfg OUT INIT_FROM [KEY=VALUE...]: a YAML file, tests/configs/ref.yaml (or BASE=FILE) without
# its model shape (config.json supplies it)
cfg() {
    BASE=${BASE:-tests/configs/ref.yaml} /usr/bin/python3 - "$@" <<'PY'
import os, sys, yaml
c = yaml.safe_load(open(os.environ["BASE"]))
for k in ("arch", "n_layer", "n_head", "d_model", "vocab_size"):
    c["model"].pop(k, None)
c["model"]["init_from"] = sys.argv[2]
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    s, key = k.split(".")
    c.setdefault(s, {})[key] = yaml.safe_load(v)
yaml.safe_dump(c, open(sys.argv[1], "w"))
PY
}

# expect NAME CODE PATTERN CMD...: exit CODE and output matching PATTERN
expect() {
    local name=$1 code=$2 pattern=$3
    shift 3
    "$@" >$W/out 2>&1
    local rc=$?
    if [ $rc != "$code" ]; then fail "$name" "exit $rc, expected $code: $(tail -n 3 $W/out | tr '\n' ' ')"
    elif ! grep -qE -- "$pattern" $W/out; then fail "$name" "output lacks /$pattern/: $(tail -n 3 $W/out | tr '\n' ' ')"
    else pass "$name"; fi
}

# dump NAME DIR [KEY=VALUE...]: the config and ref_dump's dump (trident's logits, the tokens)
dump() {
    local name=$1 dir=$2
    shift 2
    cfg $W/$name.yaml $dir "run.out_dir=$W/$name" "$@"
    mkdir -p $W/$name.dump
    $DUMP $W/$name.yaml $W/$name.dump 10 >$W/$name.dump.log 2>&1 ||
        fail ${name}_dump "$(tail -3 $W/$name.dump.log | tr '\n' ' ')"
}
