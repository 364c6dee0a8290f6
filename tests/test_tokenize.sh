#!/usr/bin/env bash
# tests/test_tokenize.sh: `trident tokenize` and the tokenizer of `trident sample`.
#
#   1. parity with Hugging Face tokenizers (tests/tokenize_parity.py), in a venv made here
#      (build/venv-tok, made by scripts/venv.sh with tokenizers from PyPI; kept
#      for the next run: the first install takes 10-50 s, as the machine is loaded)
#   2. the shards: format, end-of-text tokens, shard sizes and names, val split, uint32,
#      the byte-level round trip (decoding gives back the input), on a small tokenizer
#      written by tests/tokenize_fixture.py
#   3. every user error: its exit code (2 tokenizer.json or usage, 3 input, 4 output) and the
#      file or field named
#   4. sample: the prompt encoded and the output decoded, with --tokenizer or the run's
#      recorded data.tokenizer; refusals of a prompt it cannot encode
#   5. the seeded fuzzers of tests/fuzz_tokenizer.py (TOKENIZE_FUZZ_CASES=N for more cases
#      than the 200 per family of make test)
set -u
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
FX=$W/fixture.json

# expect NAME CODE PATTERN CMD...: exit code CODE and stdout+stderr matching PATTERN
expect() {
    local name=$1 code=$2 pattern=$3
    shift 3
    "$@" >"$W/out" 2>&1
    local rc=$?
    if [ $rc != "$code" ]; then fail "$name" "exit $rc, expected $code: $(tail -n 3 "$W/out" | tr '\n' ' ')"
    elif ! grep -qE -- "$pattern" "$W/out"; then fail "$name" "output lacks /$pattern/: $(tail -n 3 "$W/out" | tr '\n' ' ')"
    else pass "$name"; fi
}
tok() { $T tokenize --tokenizer "$@"; }

# --- 1. parity with tokenizers
if ! VENV=$(scripts/venv.sh tok tokenizers==0.23.3 2>$W/venv.log); then
    fail venv "$(head -c 600 $W/venv.log | tr '\n' ' ')"
    VENV=/nonexistent
fi
if [ -x $VENV/bin/python ]; then
    $VENV/bin/python tests/tokenize_parity.py $T $W/parity || fails=$((fails + 1))
fi

echo "--- parity: $SECONDS s"
# --- 2. the shards
$PY tests/tokenize_fixture.py $FX
$PY tests/tokenize_fixture.py $W/fixture32.json --shift 70000
printf '{"text": "In the beginning God created the heaven and the earth."}\n\n{"text": ""}\n{"text": "And God said<|endoftext|>Let there be light", "id": 3}\n' >$W/docs.jsonl
expect shards_jsonl 0 "3 documents" tok $FX --out $W/a/docs --val-fraction 0 $W/docs.jsonl
# shard_check PREFIX SPLIT: prints "<magic> <version> <ids...>" of every shard of a split
shard_ids() {
    $PY - "$@" <<'EOF'
import glob, struct, sys
for path in sorted(glob.glob('%s_%s_*.bin' % (sys.argv[1], sys.argv[2]))):
    data = open(path, 'rb').read()
    magic, version, n = struct.unpack('<3i', data[:12])
    width = 2 if version == 1 else 4
    assert len(data) == 1024 + n * width, path
    ids = struct.unpack('<%d%s' % (n, 'H' if width == 2 else 'I'), data[1024:])
    print(path.rsplit('_', 1)[1], magic, version, n, *ids)
EOF
}
decode() { # decode FIXTURE PREFIX SPLIT...: the text the shards' ids stand for
    $PY - "$@" <<'EOF'
import glob, json, struct, sys
sys.path.insert(0, 'tests')
import tokenize_fixture
spec = json.load(open(sys.argv[1]))
ids = []
for split in sys.argv[3:]:
    for path in sorted(glob.glob('%s_%s_*.bin' % (sys.argv[2], split))):
        data = open(path, 'rb').read()
        n, width = struct.unpack('<3i', data[:12])[2], 2 if data[4] == 1 else 4
        ids += struct.unpack('<%d%s' % (n, 'H' if width == 2 else 'I'), data[1024:])
sys.stdout.buffer.write(tokenize_fixture.decode(spec, ids))
EOF
}
eot=$($PY -c "import json; print(json.load(open('$FX'))['added_tokens'][0]['id'])")
out=$(shard_ids $W/a/docs train)
# Two end-of-text tokens from the documents and one inside the text; the empty document
# is just its end-of-text token; the blank line is none.
if [ "$(echo "$out" | cut -d' ' -f1-3)" = "000.bin 20240520 1" ] &&
    [ "$(echo "$out" | tr ' ' '\n' | tail -n +5 | grep -cx $eot)" = 4 ] &&
    [ "$(echo "$out" | cut -d' ' -f5)" = $eot ] &&
    [ "$(decode $FX $W/a/docs train)" = "<|endoftext|>In the beginning God created the heaven and the earth.<|endoftext|><|endoftext|>And God said<|endoftext|>Let there be light" ]; then
    pass shards_eot_and_roundtrip
else fail shards_eot_and_roundtrip "$out"; fi

# The corpus, in shards of 100000 tokens, with 5% for val: every shard but the last of a
# split full, names sorted, and the decoded train + val equal to the file after one end of text.
expect shards_split 0 "val +[0-9]+ tokens in [0-9]+ shard" tok $FX --out $W/k/kjv --shard-tokens 100000 --threads 2 data/kjv.txt
vocab_kjv=$(grep -oE "vocab_size: [0-9]+" $W/out | cut -d' ' -f2)
if $PY - $W/k/kjv <<'EOF'
import glob, os, struct, sys
p = sys.argv[1]
train, val = sorted(glob.glob(p + '_train_*.bin')), sorted(glob.glob(p + '_val_*.bin'))
count = lambda files: [struct.unpack('<3i', open(f, 'rb').read(12))[2] for f in files]
nt, nv = count(train), count(val)
assert [os.path.basename(f) for f in train[:2]] == ['kjv_train_000.bin', 'kjv_train_001.bin'], train
assert all(x == 100000 for x in nt[:-1] + nv[:-1]), (nt, nv)
assert 0.04 < sum(nv) / sum(nt + nv) < 0.06, (nt, nv)
EOF
then pass shards_sizes_and_val_fraction; else fail shards_sizes_and_val_fraction "see above"; fi
if cmp -s <(decode $FX $W/k/kjv train val) <(printf '<|endoftext|>'; cat data/kjv.txt); then
    pass shards_roundtrip_kjv
else fail shards_roundtrip_kjv "train + val do not decode to data/kjv.txt"; fi
# The shards do not depend on the thread count (the text is cut into pieces on the way).
expect shards_one_thread 0 "train" tok $FX --out $W/k1/kjv --shard-tokens 100000 --threads 1 data/kjv.txt
if diff -q <(cat $W/k/kjv_*.bin | sha256sum) <(cat $W/k1/kjv_*.bin | sha256sum) >/dev/null; then
    pass shards_same_on_1_and_2_threads
else fail shards_same_on_1_and_2_threads "the shards differ"; fi
printf 'one\n' >$W/one.txt
printf 'two\n' >$W/two.txt
: >$W/empty.txt
expect shards_text_files 0 "3 file\(s\), 0.0 MB, 2 documents" tok $FX --out $W/t/t --val-fraction 0 $W/one.txt $W/empty.txt $W/two.txt
expect shards_uint32 0 "uint32 tokens" tok $W/fixture32.json --out $W/u/u --val-fraction 0 $W/docs.jsonl
if shard_ids $W/u/u train | grep -q "^000.bin 20240801 7 .* $((eot + 70000)) "; then pass shards_uint32_header
else fail shards_uint32_header "$(shard_ids $W/u/u train | cut -c1-80)"; fi
# The printed config keys train: model.vocab_size and data.tokenizer as tokenize says.
vocab=$(grep -oE "vocab_size: [0-9]+" $W/out | cut -d' ' -f2)
expect config_snippet_trains 0 "done: 4 steps" $T train $CFG --set run.out_dir=$W/run --set train.steps=4 \
    --set model.vocab_size=$vocab_kjv \
    --set "data.train=$W/k/kjv_train_*.bin" --set "data.val=$W/k/kjv_val_*.bin" --set data.tokenizer=$FX \
    --set data.eval_every=2 --set checkpoint.dir=$W/run/ck
[ "$vocab" = $((70000 + eot + 1)) ] && pass config_snippet_vocab || fail config_snippet_vocab "vocab_size $vocab"

echo "--- shards: $SECONDS s"
# --- 3. user errors
jq_set() { # jq_set OUT EXPR: the fixture with one change, written by Python
    $PY -c "import json,sys; d=json.load(open('$FX')); $2; json.dump(d, open('$1','w'))"
}
expect err_usage 2 "needs --tokenizer FILE, --out PREFIX" $T tokenize data/kjv.txt
expect err_option 2 "unknown option --bogus" tok $FX --out $W/e/e --bogus data/kjv.txt
expect err_val_fraction 2 "val-fraction needs a number in \[0, 1\)" tok $FX --out $W/e/e --val-fraction 1 data/kjv.txt
expect err_tokenizer_missing 2 "cannot read tokenizer file '$W/nope.json'" tok $W/nope.json --out $W/e/e data/kjv.txt
jq_set $W/unigram.json "d['model']['type'] = 'Unigram'"
expect err_unigram 2 "unigram.json: model.type: is \"Unigram\"" tok $W/unigram.json --out $W/e/e data/kjv.txt
jq_set $W/wordpiece.json "d['model']['type'] = 'WordPiece'"
expect err_wordpiece 2 "model.type: is \"WordPiece\"" tok $W/wordpiece.json --out $W/e/e data/kjv.txt
jq_set $W/nfc.json "d['normalizer'] = {'type': 'NFC'}"
expect err_normalizer 2 "nfc.json: normalizer: type \"NFC\"" tok $W/nfc.json --out $W/e/e data/kjv.txt
jq_set $W/regex.json "d['pre_tokenizer'] = {'type': 'Sequence', 'pretokenizers': [{'type': 'Split', 'pattern': {'Regex': '\\\\s+'}, 'behavior': 'Isolated', 'invert': False}, {'type': 'ByteLevel', 'add_prefix_space': False, 'use_regex': False}]}"
expect err_regex 2 "pre_tokenizer.pretokenizers\[0\].pattern.Regex: .* is not a regex trident implements" tok $W/regex.json --out $W/e/e data/kjv.txt
jq_set $W/merge.json "d['model']['merges'][3] = ['zz', 'q']"
expect err_merge 2 "model.merges\[3\]: .*\"zz\" is not in model.vocab" tok $W/merge.json --out $W/e/e data/kjv.txt
jq_set $W/fallback.json "d['model']['byte_fallback'] = True"
expect err_byte_fallback 2 "model.byte_fallback: is true" tok $W/fallback.json --out $W/e/e data/kjv.txt
head -c 2000 $FX >$W/cut.json
expect err_json_syntax 2 "cut.json: not valid JSON: line 1, column 2001" tok $W/cut.json --out $W/e/e data/kjv.txt
expect err_eot 2 "--eot '<nope>' is not a token" tok $FX --eot '<nope>' --out $W/e/e data/kjv.txt
expect err_existing_shards 2 "'$W/a/docs_train_000.bin' already exists" tok $FX --out $W/a/docs $W/docs.jsonl
expect err_input_missing 3 "cannot read input '$W/nope.txt'" tok $FX --out $W/e/e $W/nope.txt
printf 'ok\n\xff\xfe bad\n' >$W/latin1.txt
expect err_input_utf8 3 "latin1.txt: invalid UTF-8 at byte 3 \(0xFF\)" tok $FX --out $W/e/e $W/latin1.txt
printf '{"text": "ok"}\n{"text": "a",}\n' >$W/bad.jsonl
expect err_jsonl_syntax 3 "bad.jsonl:2: not a JSON object: line 1, column 14" tok $FX --out $W/e/e $W/bad.jsonl
printf '{"text": "ok"}\n\n{"body": "a"}\n' >$W/notext.jsonl
expect err_jsonl_no_text 3 "notext.jsonl:3: the line is an object without a \"text\" string \(found missing\)" tok $FX --out $W/e/e $W/notext.jsonl
# a bad line after a first shard was written: the shard goes too
{ for i in $(seq 6000); do echo '{"text": "In the beginning God created the heaven and the earth."}'; done; echo '{"text": 1}'; } >$W/late.jsonl
expect err_late_line_removes 3 "removed the [0-9]+ shard\(s\) written before the error" tok $FX --out $W/e/e --shard-tokens 1000 --val-fraction 0 $W/late.jsonl
grep -q "late.jsonl:6001: .*(found a number)" $W/out && pass err_late_line_named || fail err_late_line_named "$(head -1 $W/out)"
expect err_output 4 "cannot create the output directory '/proc/trident-no/dir'" tok $FX --out /proc/trident-no/dir/x data/kjv.txt
ls $W/e 2>/dev/null | grep -q . && fail err_no_output_left "$(ls $W/e)" || pass err_no_output_left

echo "--- errors: $SECONDS s"
# --- 4. sample with the tokenizer
expect sample_recorded_tokenizer 0 "^In the beginning" $T sample $W/run --prompt "In the beginning" --tokens 8
expect sample_checkpoint_tokenizer 0 "^And God" $T sample $W/run/ck --prompt "And God" --tokens 4
expect sample_no_tokenizer_prompt 2 "no tokenizer is known, so the prompt cannot be encoded" $T sample $W/run/model.bin --prompt "In" --tokens 2
expect sample_no_tokenizer_ids 0 "^<[0-9]+>" $T sample $W/run/model.bin --tokens 2
expect sample_tokenizer_option 0 "^The" $T sample $W/run/model.bin --tokenizer $FX --prompt "The" --tokens 4
expect sample_tokenizer_too_big 2 "token id [0-9]+, outside the model's vocabulary" $T sample $W/run/model.bin --tokenizer $W/fixture32.json --prompt "The" --tokens 2
expect sample_tokenizer_bad 2 "unigram.json: model.type" $T sample $W/run --tokenizer $W/unigram.json --tokens 2

echo "--- sample: $SECONDS s"
# --- 5. the fuzzers
# (build/tests/fork_tokenize runs each case in a fork of one process: see its header)
FUZZ_BIN=$(dirname $T)/tests/fork_tokenize
[ -x $FUZZ_BIN ] || FUZZ_BIN=$T
$PY tests/fuzz_tokenizer.py $FUZZ_BIN $W/fuzz --cases "${TOKENIZE_FUZZ_CASES:-200}" || fails=$((fails + 1))

[ $fails = 0 ]
