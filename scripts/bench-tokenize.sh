#!/usr/bin/env bash
# scripts/bench-tokenize.sh [THREADS] [MB]: the speed of `trident tokenize` against Hugging
# Face tokenizers' batch encoder (encode_batch, Rust threads) on the same documents, the same
# tokenizer and the same number of threads (default: every core). Run by `make test-perf`.
#
# The tokenizers: byte-level BPEs of 16384 tokens trained here by tokenizers on
# data/kjv.txt, one with GPT-2's pre-tokenizer and one with Llama 3's. The documents: the
# verses of data/kjv.txt in a seeded random order, ~2 KB each with words and characters of
# other scripts mixed in, MB megabytes of them (default 32) as a .jsonl file. tokenizers is
# timed on encode_batch over the documents already in memory; trident on the whole command
# (reading and parsing the file, encoding, writing the shards). Prints documents/s, tokens/s
# and the ratio for each, and checks that both made the same number of tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
MB=${2:-32}
T=${TRIDENT_BIN:-build/trident}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
[ -x "$T" ] || { echo "bench-tokenize: build trident first (make)" >&2; exit 2; }
VENV=$(scripts/venv.sh tok tokenizers==0.23.3)
export RAYON_NUM_THREADS=$THREADS TOKENIZERS_PARALLELISM=true
$VENV/bin/python - "$T" "$W" "$THREADS" "$MB" <<'EOF'
import json, os, random, struct, subprocess, sys, time
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
T, W, threads, mb = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
verses = [v for v in open('data/kjv.txt', encoding='utf-8').read().split('\n') if v]
extra = ['naïve café', 'Ελληνικά', 'русский текст', 'हिन्दी', '中文字符', '日本語', '😀👍🏽',
         '3.14159', "don't", '  \n\n', '\t', '—']
rng = random.Random(1)
docs, size = [], 0
while size < mb * 1e6:
    parts = []
    while sum(len(p) for p in parts) < 2000:
        parts.append(rng.choice(verses) if rng.random() < 0.9 else rng.choice(extra))
    docs.append(' '.join(parts))
    size += len(docs[-1].encode())
path = os.path.join(W, 'docs.jsonl')
with open(path, 'w', encoding='utf-8') as f:
    for d in docs:
        f.write(json.dumps({'text': d}) + '\n')
print('bench-tokenize: %d documents, %.1f MB, %d thread(s)' % (len(docs), size / 1e6, threads))
for kind in ('gpt2', 'llama3'):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = (pre_tokenizers.ByteLevel(add_prefix_space=False) if kind == 'gpt2' else
                         pre_tokenizers.Sequence([
                             pre_tokenizers.Split(Regex(LLAMA3), behavior='isolated'),
                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(verses, trainer=trainers.BpeTrainer(
        vocab_size=16384, special_tokens=['<|endoftext|>'], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tpath = os.path.join(W, kind + '.json')
    tok.save(tpath)
    tok = Tokenizer.from_file(tpath)  # a fresh one: no cache from the training
    t0 = time.time()
    hf_tokens = sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False))
    hf_s = time.time() - t0
    t0 = time.time()
    r = subprocess.run([T, 'tokenize', '--tokenizer', tpath, '--out', os.path.join(W, kind),
                        '--val-fraction', '0', '--threads', str(threads), path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tr_s = time.time() - t0
    if r.returncode:
        sys.exit('bench-tokenize: trident failed: ' + r.stdout)
    n = 0
    for f in os.listdir(W):
        if f.startswith(kind + '_train_'):
            with open(os.path.join(W, f), 'rb') as fh:
                n += struct.unpack('<3i', fh.read(12))[2]
    tr_tokens = n - len(docs)  # less the end-of-text tokens
    print('%-6s tokenizers %8.0f documents/s %6.2f M tokens/s | trident %8.0f documents/s '
          '%6.2f M tokens/s | ratio %.2fx%s' % (
              kind, len(docs) / hf_s, hf_tokens / hf_s / 1e6, len(docs) / tr_s,
              tr_tokens / tr_s / 1e6, hf_s / tr_s,
              '' if tr_tokens == hf_tokens else ' (TOKEN COUNTS DIFFER: %d vs %d)' % (tr_tokens,
                                                                                  hf_tokens)))
EOF
