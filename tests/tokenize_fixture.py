"""tokenize_fixture.py OUT.json [--shift N]: a small GPT-2-style byte-level BPE tokenizer.json.

The 256 byte symbols (id = byte), merges of common English pairs, and <|endoftext|> as a
special added token: enough for the command-line, sample and fuzz tests, which do not need
Hugging Face's tokenizers (tests/tokenize_parity.py does). --shift N adds N to every id
(ids past 65535 make uint32 shards). Also imported by tests/fuzz_tokenizer.py.
"""
import json
import sys

MERGES = ['Ġ t', 'h e', 'Ġt he', 'Ġ a', 'n d', 'Ġa nd', 'Ġ o', 'Ġo f', 'i n', 'e r', 'Ġ s',
          'Ġ h', 'Ġ w', 'o u', 'Ġ L', 'Ġ G', 'o d', 'Ġ G', 'Ġ b', 'r e', 'Ġ m', 'a t', 'e n',
          'Ġ f', 'h a', 'i s', 'Ġt h', 'o r', 'Ġh is', 'Ġ c', 'a n', 'Ġ i', 'e d', 'Ġ unto']


def bytes_to_unicode():
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def make(shift=0):
    byte_char = bytes_to_unicode()
    vocab = {byte_char[b]: b for b in range(256)}
    merges = []
    for m in MERGES:
        a, b = m.split(' ')
        for part in (a, b):  # parts that no merge made are bytes spelled out ('unto')
            if part not in vocab:
                prev = part[0]
                for ch in part[1:]:
                    merges.append([prev, ch])
                    vocab.setdefault(prev + ch, len(vocab))
                    prev += ch
        if [a, b] not in merges:
            merges.append([a, b])
        vocab.setdefault(a + b, len(vocab))
    eot = len(vocab)
    vocab['<|endoftext|>'] = eot
    return {
        'version': '1.0', 'truncation': None, 'padding': None,
        'added_tokens': [{'id': eot + shift, 'content': '<|endoftext|>', 'single_word': False,
                          'lstrip': False, 'rstrip': False, 'normalized': False,
                          'special': True}],
        'normalizer': None,
        'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True,
                          'use_regex': True},
        'post_processor': None,
        'decoder': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True,
                    'use_regex': True},
        'model': {'type': 'BPE', 'dropout': None, 'unk_token': None,
                  'continuing_subword_prefix': None, 'end_of_word_suffix': None,
                  'fuse_unk': False, 'byte_fallback': False, 'ignore_merges': False,
                  'vocab': {k: v + shift for k, v in vocab.items()}, 'merges': merges},
    }


def decode(spec, ids):
    """The bytes the ids stand for (the ByteLevel decoder's rule)."""
    char_byte = {c: b for b, c in bytes_to_unicode().items()}
    by_id = {v: k for k, v in spec['model']['vocab'].items()}
    by_id.update({t['id']: t['content'] for t in spec['added_tokens']})
    table = {i: bytes(char_byte[c] for c in s) if all(c in char_byte for c in s) else s.encode()
             for i, s in by_id.items()}
    return b''.join(table[i] for i in ids)


if __name__ == '__main__':
    shift = int(sys.argv[sys.argv.index('--shift') + 1]) if '--shift' in sys.argv else 0
    with open(sys.argv[1], 'w', encoding='utf-8') as f:
        json.dump(make(shift), f, ensure_ascii=False)
