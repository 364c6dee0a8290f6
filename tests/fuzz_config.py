#!/usr/bin/env python3
"""fuzz_config.py: a seeded fuzzer of run configs (issue 15). Driven by tests/test_fuzz_config.sh.

Mutates tests/configs/tiny.yaml and configs/*.yaml by family (below), runs `trident check` on
each case, `trident plan` on what check accepts, and a one-step `trident train` on a few small
accepted cases, and asserts for every run:
  - the documented exit code: check and plan 0 or 2, and the same verdict from both; train
    0, 2, 3 or 4 (a fuzzed vocabulary can be smaller than the data's tokens: a data error;
    a fuzzed checkpoint.resume names no checkpoint: a checkpoint error);
  - in every error, the config file or the --set argument named (config messages read
    "FILE:LINE: section.key: ..." or "--set ARG: section.key: ...");
  - no signal (a crash, an abort), no run longer than its bound (check and plan 20 s, train
    60 s);
  - no wrong verdict where the mutation has a known one: an unknown key, a duplicate, a
    negative count, a string where a number belongs, a tag that does not fit, YAML nested
    past 64 levels must be refused; quoted names (`dp: "auto"`, `schedule: "1f1b"`) and
    fitting tags must be accepted.
The `sizes` family is the issue's defect 1: values whose products overflowed an int; check,
plan and train must all refuse them with exit 2 and the key named.
The `blend` family (issue 16) attacks the list forms of data.train ({path, weight} sources)
and data.val ({name, path} sets), in flow and block style, in the file or a --set: missing,
negative, zero, NaN, infinite and huge weights, wrong types, empty lists, duplicate paths and
names, thousands of sources, deep nesting; besides the checks above, every refusal must name
data.train or data.val (the item's key path, data.train[1].weight) unless YAML itself is
refused (nesting past 64 levels), and valid blends must be accepted. It runs --blend-cases
cases (default 200) on top of --cases. The `llama` family (issue 18) sets model.arch llama's shape
keys (n_head, d_model, n_kv_head, ffn_hidden, ffn_multiple_of, tp, tie_embeddings, rope_theta,
norm_eps) to combinations whose verdict is known from the rules; --llama-cases (default 100).

Prints one PASS/FAIL line per family with its numbers (cases, accepted, clean errors, crashes,
hangs, wrong successes, wrong refusals, unnamed errors), and the slowest run. Reproducible:
the same --seed gives the same cases (each FAIL line names the case and its file).
"""
import argparse
import glob
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
CHECK_S, TRAIN_S = 20, 60
SECTIONS = ('run', 'model', 'parallel', 'train', 'optim', 'data', 'checkpoint', 'log', 'system')


def scalar_text(v):
    """YAML text of a base config's value, plain where that reads back the same."""
    if v is None:
        return 'null'
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, dict)):  # data.train's and data.val's list forms: JSON is YAML flow
        return json.dumps(v)
    s = str(v)
    if re.fullmatch(r'[A-Za-z_][A-Za-z0-9_./-]*', s) and s not in ('null', 'true', 'false', 'yes', 'no', 'on', 'off'):
        return s
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"') + '"'


class Doc:
    """A config as ordered sections of (key, value text) lines, emitted as block YAML."""

    def __init__(self, cfg):
        self.sections = [(s, [(k, scalar_text(v)) for k, v in (cfg.get(s) or {}).items()])
                         for s in SECTIONS if s in cfg]

    def emit(self):
        out = []
        for s, items in self.sections:
            out.append(s + ':')
            out.extend('  %s: %s' % (k, v) for k, v in items)
        return ('\n'.join(out) + '\n').encode()

    def set(self, section, key, text):
        for s, items in self.sections:
            if s == section:
                for i, (k, _) in enumerate(items):
                    if k == key:
                        items[i] = (k, text)
                        return
                items.append((key, text))
                return
        self.sections.append((section, [(key, text)]))

    def get(self, section, key):  # the key's value text, or None when the file leaves it out
        for s, items in self.sections:
            for k, v in items if s == section else []:
                if k == key:
                    return v
        return None

    def add(self, section, key, text):  # a second line for the key (a duplicate)
        for s, items in self.sections:
            if s == section:
                items.append((key, text))
                return
        self.sections.append((section, [(key, text)]))


class Keys:
    """Every key with its resolved default and type, read off `trident check`'s output."""

    def __init__(self, trident, cfg_path):
        out = subprocess.run([trident, 'check', cfg_path], capture_output=True, text=True).stdout
        text = out.split('# micro-batches')[0]
        resolved = yaml.safe_load(text)
        self.keys = [(s, k, v) for s in SECTIONS for k, v in resolved[s].items()]

    def of(self, kind):
        def is_kind(v):
            return {'int': isinstance(v, int) and not isinstance(v, bool),
                    'float': isinstance(v, float), 'bool': isinstance(v, bool),
                    'str': isinstance(v, str), 'null': v is None}[kind]
        return [(s, k, v) for s, k, v in self.keys if is_kind(v)]


# ---- families: each returns (label, file bytes, --set args, expected verdict) ----------------
# expected: 'reject', 'accept' or 'any'.

HUGE = ['2147483647', '2147483648', '4294967296', '9223372036854775807', '9223372036854775808',
        '1e308', '1e400', '536870912', '1073741824', '357913942', '99999999999999999999999']


def fam_unknown_key(r, doc, keys):
    s, k, _ = r.choice(keys.keys)
    typo = r.choice([k + 'x', k[:-1], k[1:] + k[0], 'zz_' + k, k.upper()])
    if typo == k:
        typo = k + '_'
    doc.add(s, typo, '1')
    if r.random() < 0.3:
        doc.sections.append((r.choice(['modle', 'trainn', 'extra', 'Model']), [('a', '1')]))
    return 'unknown key %s.%s' % (s, typo), doc.emit(), [], 'reject'


def fam_dup_key(r, doc, keys):
    present = [(s, k, v) for s, items in doc.sections for k, v in items]
    s, k, v = r.choice(present)  # a key the file sets: a second line for it
    doc.add(s, k, v)
    return 'duplicate %s.%s' % (s, k), doc.emit(), [], 'reject'


def fam_huge(r, doc, keys):
    s, k, _ = r.choice(keys.of('int') + keys.of('float'))
    v = r.choice(HUGE)
    return 'huge %s.%s=%s' % (s, k, v), doc.emit(), ['%s.%s=%s' % (s, k, v)], 'any'


def fam_negative(r, doc, keys):
    s, k, _ = r.choice(keys.of('int') + keys.of('float'))
    v = r.choice(['-1', '-2147483648', '-9223372036854775809', '-0.5', '-1e308'])
    return 'negative %s.%s=%s' % (s, k, v), doc.emit(), ['%s.%s=%s' % (s, k, v)], 'reject'


def fam_zero(r, doc, keys):
    s, k, _ = r.choice(keys.of('int') + keys.of('float'))
    v = r.choice(['0', '0.0', '-0', '0e0'])
    doc.set(s, k, v)
    return 'zero %s.%s=%s' % (s, k, v), doc.emit(), [], 'any'


def fam_wrong_type(r, doc, keys):
    s, k, v = r.choice(keys.of('int') + keys.of('float') + keys.of('bool') + keys.of('str'))
    if isinstance(v, str):  # a collection where a string belongs
        text = r.choice(['[a, b]', '{a: 1}', '[]', '{}'])
    else:
        text = r.choice(['abc', '[1, 2]', '{a: 1}', '"7"', "'x'", '1.5.2', '0x1G', 'yes please'])
        if isinstance(v, bool) and text in ('"7"', "'x'"):
            text = 'maybe'
    doc.set(s, k, text)
    return 'wrong type %s.%s: %s' % (s, k, text), doc.emit(), [], 'reject'


def fam_tags(r, doc, keys):
    s, k, v = r.choice(keys.keys)
    tag = r.choice(['!!str', '!!int', '!!float', '!!bool', '!!null', '!!binary', '!local', '!'])
    text = '%s %s' % (tag, scalar_text(v) if v is not None else '~')
    expect = 'any'
    is_int = isinstance(v, int) and not isinstance(v, bool)
    if tag in ('!!binary', '!local'):
        expect = 'reject'
    elif tag == '!!str' and (is_int or isinstance(v, (float, bool))):
        expect = 'reject'  # a string where a number or boolean belongs
    elif tag == '!!int' and is_int:
        expect = 'accept'
    elif tag == '!!float' and isinstance(v, float):
        expect = 'accept'
    # v is tiny.yaml's value: on another base file whose own value differs (global_batch 8
    # where bf16.yaml's micro_batch * dp is 16) it can break a rule between keys.
    cur = doc.get(s, k)
    if expect == 'accept' and cur is not None and cur != scalar_text(v):
        expect = 'any'
    doc.set(s, k, text)
    return 'tag %s.%s: %s' % (s, k, text), doc.emit(), [], expect


def fam_quotes(r, doc, keys):
    s, k, v = r.choice(keys.keys)
    if r.random() < 0.25:  # the two: dp: "auto", schedule: "1f1b" (its current name)
        current = {k: v for s, items in doc.sections for k, v in items if s == 'parallel'}
        s, k, v = r.choice([('parallel', 'dp', 'auto'),
                            ('parallel', 'schedule', str(yaml.safe_load(current.get('schedule', '1f1b'))))])
    q = r.choice(['"', "'"])
    text = q + (scalar_text(v) if not isinstance(v, str) else v) + q
    if v is None:
        expect = 'any'  # "null" is a string: a path for init_from, refused where null is not
    elif isinstance(v, str):
        expect = 'accept'
    else:
        expect = 'reject'  # a quoted number or boolean is a string
    # As in fam_tags: v is tiny.yaml's value; on a base file whose own value differs (schedule
    # 1f1b where pp2-tp2.yaml has interleaved with 2 virtual stages) it can break a rule
    # between keys, so acceptance is no longer known.
    cur = doc.get(s, k)
    if expect == 'accept' and cur is not None and yaml.safe_load(cur) != v:
        expect = 'any'
    doc.set(s, k, text)
    return 'quoted %s.%s: %s' % (s, k, text), doc.emit(), [], expect


def fam_deep(r, doc, keys):
    s, k, _ = r.choice(keys.keys)
    n = r.choice([3, 63, 64, 65, 1000, 100000, 200000])
    kind = r.choice(['[', '{a: ', '- '])
    if kind == '- ':  # block sequences nested on one line: "- - - x"
        text = '\n    ' + '- ' * n + 'x'
    else:
        text = kind * n + '1' + (']' if kind == '[' else '}') * n
    doc.set(s, k, text)
    return 'deep %s.%s: %d levels of %r' % (s, k, n, kind.strip()), doc.emit(), [], 'reject'


def fam_long_string(r, doc, keys):
    s, k, v = r.choice(keys.keys)
    n = r.choice([300, 5000, 100000, 1000000])
    text = '"' + ''.join(r.choice('abcxyz/_.') for _ in range(n)) + '"'
    expect = 'any' if v is None or isinstance(v, str) else 'reject'
    doc.set(s, k, text)
    return 'long string %s.%s: %d chars' % (s, k, n), doc.emit(), [], expect


def fam_binary(r, doc, keys):
    data = bytearray(doc.emit())
    for _ in range(r.randint(1, 8)):
        pos = r.randrange(len(data) + 1)
        data[pos:pos] = bytes(r.randrange(256) for _ in range(r.randint(1, 4)))
    return 'binary bytes', bytes(data), [], 'any'


def fam_truncated(r, doc, keys):
    data = doc.emit()
    cut = r.randrange(len(data))
    return 'truncated at byte %d of %d' % (cut, len(data)), data[:cut], [], 'any'


def fam_sizes(r, doc, keys):
    """Defect 1: products of valid ints past an int or a rank; each refused by check, plan and
    train with the key named."""
    cases = [
        ['model.n_layer=357913942'],
        ['model.d_model=1073741824', 'model.n_head=1'],
        ['model.d_model=536870912'],
        ['model.d_model=268435456'],
        ['train.micro_batch=134217728', 'train.global_batch=134217728'],
        ['model.n_layer=2000000', 'model.d_model=2', 'model.n_head=1'],
        ['model.vocab_size=2000000000', 'model.d_model=4096', 'model.n_head=1', 'model.vocab_pad_to=1'],
        ['train.global_batch=536870912', 'train.micro_batch=1'],
        ['parallel.schedule=gpipe', 'train.global_batch=16777216', 'train.micro_batch=1',
         'model.d_model=4096', 'model.n_head=32'],
        ['model.seq_len=1000000', 'system.backend=cpu'],
        ['train.steps=2147483647', 'train.global_batch=2147483647', 'model.seq_len=100000',
         'train.micro_batch=1'],
    ]
    sets = cases[r.randrange(len(cases))] if r.random() < 0.6 else [
        'model.n_layer=%d' % r.choice([10 ** 6, 10 ** 7, 10 ** 8, 2 ** 31 - 1]),
        'model.d_model=%d' % r.choice([2 ** 12, 2 ** 16, 2 ** 20, 2 ** 24]), 'model.n_head=1']
    return 'sizes ' + ' '.join(sets), doc.emit(), sets, 'reject'


GLOBS = ['data/kjv_ot_train_*.bin', 'data/kjv_nt_train_*.bin', 'data/kjv_train_*.bin',
         'data/kjv_*_train_000.bin']


def blend_text(r, items, block):
    """A list of mappings (each a list of (key, value text) pairs) as YAML: flow or block."""
    flows = ['{' + ', '.join('%s: %s' % kv for kv in it) + '}' for it in items]
    if block:
        return ''.join('\n    - ' + f for f in flows)
    return '[' + ', '.join(flows) + ']'


def fam_blend(r, doc, keys):
    """data.train or data.val as a list; returns the case with the key a refusal names."""
    val = r.random() < 0.3
    key = 'data.val' if val else 'data.train'
    n = r.choice([1, 2, 2, 3, 5])
    q = lambda g: '"%s"' % g
    if val:
        items = [[('name', 'set%d' % i), ('path', q(GLOBS[i % 4]))] for i in range(n)]
    else:
        items = [[('path', q(GLOBS[i % 4] if i < 4 else 'data/%s' % ('./' * i) + 'kjv_train_*.bin')),
                  ('weight', r.choice(['1', '0.5', '2.0', '7', '1e-3', '3']))] for i in range(n)]
    expect, what, i = 'reject', '', r.randrange(n)
    kind = r.choice(['valid', 'valid', 'missing', 'bad_weight', 'bad_weight', 'wrong_type', 'empty',
                     'not_mapping', 'unknown_key', 'dup_key', 'dup_item', 'many', 'deep', 'huge',
                     'bad_name'])
    if kind == 'valid':
        expect, what = 'accept', 'valid'
    elif kind == 'missing':
        items[i].pop(r.randrange(2))
        what = 'item %d misses a key' % i
    elif kind == 'bad_weight' and not val:
        w = r.choice(['-1', '0', '0.0', '-0', '.nan', '.NaN', '.inf', '-.inf', '1e400', '-1e-300',
                      'nan', 'inf'])
        items[i][1] = ('weight', w)
        what = 'weight %s' % w
        if w in ('nan', 'inf'):  # plain words: not numbers in YAML 1.1 either
            what += ' (a word)'
    elif kind in ('bad_weight', 'wrong_type'):
        k = r.randrange(2)
        bad = r.choice(['[1, 2]', '{a: 1}', 'null', '~', '""', '!!binary aGk=', '!!int 5', '"3"',
                        '[]', 'true'])
        items[i][k] = (items[i][k][0], bad)
        what = '%s: %s' % (items[i][k][0], bad)
        if items[i][k][0] == 'weight' and bad == '!!int 5':
            expect = 'accept'  # a tagged integer is a number
        if items[i][k][0] in ('path', 'name') and bad == 'true':
            expect = 'any'  # a plain word where a string belongs is that string
        if items[i][k][0] == 'name' and bad == '!!int 5':
            expect = 'any'
        if items[i][k][0] in ('path', 'name') and bad == '"3"':
            expect = 'accept'  # a quoted string is a string
    elif kind == 'empty':
        return 'blend %s: []' % key, emit_blend(doc, key, '[]'), [], 'reject', key
    elif kind == 'not_mapping':
        text = r.choice(['[a, b]', '[[1, 2]]', '{a: 1}', '[1]', '[null]', '[[]]'])
        return 'blend %s: %s' % (key, text), emit_blend(doc, key, text), [], 'reject', key
    elif kind == 'unknown_key':
        items[i].append((r.choice(['wieght', 'paths', 'name' if not val else 'weight', 'x']), '1'))
        what = 'an unknown key'
    elif kind == 'dup_key':
        items[i].append(items[i][r.randrange(len(items[i]))])
        what = 'a duplicate key'
    elif kind == 'dup_item':
        if n == 1:
            items.append(list(items[0]))
        else:
            items[i] = list(items[(i + 1) % n])
        what = 'two items alike'
    elif kind == 'many':
        m = r.choice([1000, 1024, 1025, 3000])
        if val:
            items = [[('name', 's%d' % j), ('path', q(GLOBS[j % 4]))] for j in range(m)]
        else:
            items = [[('path', q('data/' + './' * (j // 4) + GLOBS[j % 4][5:])), ('weight', '1')]
                     for j in range(m)]
        expect = 'accept' if m <= 1024 else 'reject'
        what = '%d items' % m
    elif kind == 'deep':
        d = r.choice([5, 30, 63, 70, 500])
        k = r.randrange(2)
        items[i][k] = (items[i][k][0], '[' * d + '1' + ']' * d)
        what = 'a value nested %d deep' % d
        key = None if d + 4 > 64 else key  # past 64 levels YAML itself is refused
    elif kind == 'huge' and not val:
        items = [[('path', q(GLOBS[0])), ('weight', '1e308')], [('path', q(GLOBS[1])), ('weight', r.choice(['1e308', '1', '1e-300']))]]
        expect = 'accept' if items[1][1][1] == '1e308' else 'reject'
        what = 'weights %s and %s' % (items[0][1][1], items[1][1][1])
    elif kind == 'bad_name' and val:
        bad = r.choice(['"a/b"', '"x y"', '"%s"' % ('n' * 65), '"val_loss:1"', '"é"'])
        items[i][0] = ('name', bad)
        what = 'name %s' % bad
    else:
        expect, what = 'accept', 'valid (%s does not apply to %s)' % (kind, key)
    text = blend_text(r, items, r.random() < 0.4 and kind != 'many')
    label = 'blend %s: %s' % (key or 'data', what)
    if r.random() < 0.25 and kind not in ('many', 'deep') and '\n' not in text:
        sets = ['%s=%s' % (key or 'data.train', text)]
        return label + ' (--set)', doc.emit(), sets, expect, key
    return label, emit_blend(doc, key or ('data.val' if val else 'data.train'), text), [], expect, key


def emit_blend(doc, key, text):
    section, name = key.split('.')
    doc.set(section, name, text)
    return doc.emit()


def fam_llama(r, doc, keys):
    """Issue 18: model.arch llama's shape keys against its rules (README "Config reference"), on
    tiny.yaml with a tp the world follows; the verdict is known: accepted exactly when d_model
    divides into n_head heads of an even size (RoPE's pairs), n_kv_head (0: n_head) is at most
    n_head and divides it, and tp divides n_head, n_kv_head and ffn_hidden (0: the Llama rule)."""
    h = r.choice([1, 2, 3, 4, 6, 8])
    d = r.choice([24, 32, 36, 48, 64])
    kv = r.choice([0, 0, 1, 2, 3, 4, 5, 8])
    f = r.choice([0, 0, 48, 63, 64, 96])
    mult = r.choice([1, 32, 256])
    tp = r.choice([1, 1, 2, 4])
    sets = ['model.arch=llama', 'model.n_head=%d' % h, 'model.d_model=%d' % d,
            'model.n_kv_head=%d' % kv, 'model.ffn_hidden=%d' % f, 'model.ffn_multiple_of=%d' % mult,
            'parallel.tp=%d' % tp, 'model.tie_embeddings=%s' % r.choice(['true', 'false', '-1']),
            'model.rope_theta=%s' % r.choice(['10000', '500000.0', '1']),
            'model.norm_eps=%s' % r.choice(['1e-5', '1e-6'])]
    kv_ = kv or h
    f_ = f or (2 * 4 * d // 3 + mult - 1) // mult * mult
    ok = (d % h == 0 and (d // h) % 2 == 0 and h % tp == 0 and kv_ <= h and h % kv_ == 0 and
          kv_ % tp == 0 and f_ % tp == 0)
    return ('llama ' + ' '.join(sets), doc.emit(), sets, 'accept' if ok else 'reject', None, tp)


FAMILIES = [('unknown_key', fam_unknown_key), ('dup_key', fam_dup_key), ('huge', fam_huge),
            ('negative', fam_negative), ('zero', fam_zero), ('wrong_type', fam_wrong_type),
            ('tags', fam_tags), ('quotes', fam_quotes), ('deep', fam_deep),
            ('long_string', fam_long_string), ('binary', fam_binary),
            ('truncated', fam_truncated), ('sizes', fam_sizes)]

# ---- running ------------------------------------------------------------------------------


def run(cmd, timeout):
    """One process of the real command line."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, cwd=ROOT)
        out = (p.stdout + p.stderr).decode('utf-8', 'replace')
        return p.returncode, out, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return 'hang', '', time.monotonic() - t0


def run_batch(harness, cases):
    """The commands `cases` (argument lists after `trident`) through tests/fuzz_config_check.c:
    main.c's own check and plan, one forked child each. Returns (rc, output, seconds) each."""
    text = ''.join('\t'.join(c) + '\n' for c in cases).encode()
    p = subprocess.run([harness], input=text, capture_output=True, cwd=ROOT)
    data, at, results = p.stdout, 0, []
    while at < len(data):
        nl = data.index(b'\n', at)
        _, rc, dt, n = data[at:nl].split()
        out = data[nl + 1:nl + 1 + int(n)].decode('utf-8', 'replace')
        at = nl + 1 + int(n)
        rc = int(rc)
        results.append(('hang' if rc == -1 else rc if rc < 128 else -(rc - 128), out, float(dt)))
    if len(results) != len(cases):
        raise SystemExit('fuzz_config_check answered %d of %d cases (exit %d): %s'
                         % (len(results), len(cases), p.returncode, p.stderr[-500:]))
    return results


def run_batches(args, cases):
    """run_batch over args.jobs harness processes at once."""
    if not cases:
        return []
    k = (len(cases) + args.jobs - 1) // args.jobs
    chunks = [cases[i:i + k] for i in range(0, len(cases), k)]
    with ThreadPoolExecutor(args.jobs) as pool:
        return [r for part in pool.map(lambda c: run_batch(args.harness, c), chunks) for r in part]


def world_of(cfg):
    par = cfg.get('parallel') or {}
    tp, pp, dp = par.get('tp', 1), par.get('pp', 1), par.get('dp', 'auto')
    try:
        return int(tp) * int(pp) * (int(dp) if dp != 'auto' else 1)
    except (TypeError, ValueError):
        return 1


def named(out, path, sets):
    """Whether an error names the config file or the --set argument."""
    return path in out or any(('--set ' + s) in out for s in sets)


class Case:
    def __init__(self, args, i, fam, gen, base_path, base_cfg, keys, workdir):
        r = random.Random('%d/%d' % (args.seed, i))
        out = gen(r, Doc(base_cfg), keys)
        label, data, self.sets, self.expect = out[:4]
        self.key = out[4] if len(out) > 4 else None  # what a refusal must name besides the file
        self.fam = fam
        self.path = os.path.join(workdir, 'c%04d_%s.yaml' % (i, fam))
        with open(self.path, 'wb') as f:
            f.write(data)
        self.label = '%s (from %s, %s)' % (label, os.path.basename(base_path), self.path)
        self.set_args = [a for s in self.sets for a in ('--set', s)]
        self.world = str(out[5] if len(out) > 5 else world_of(base_cfg))  # a family's own world
        self.problems, self.slowest, self.verdict, self.plan_bytes = [], 0.0, None, None

    def argv(self, command, *extra):
        return [command, self.path, '--world', self.world] + list(extra) + self.set_args

    def judge(self, what, rc, out, dt, allowed, bound):
        self.slowest = max(self.slowest, dt)
        if rc == 'hang':
            return self.problems.append(('hang', '%s ran past %d s' % (what, bound)))
        if rc < 0 or rc >= 128:
            return self.problems.append(('crash', '%s: signal or abort (%d): %s' % (what, rc, out[-300:])))
        if rc not in allowed:
            return self.problems.append(('crash', '%s: exit %d, documented %s: %s' % (what, rc, allowed, out[-300:])))
        if rc != 0 and not named(out, self.path, self.sets):
            self.problems.append(('unnamed', '%s: exit %d names neither file nor key: %s' % (what, rc, out[-300:])))
        elif rc == 2 and self.key and self.key not in out:
            self.problems.append(('unnamed', '%s: exit 2 does not name %s: %s' % (what, self.key, out[-300:])))


def small_for_training(plan_json):
    """A plan small enough to train a step in a test: one process, little memory."""
    try:
        p = json.loads(plan_json)
    except ValueError:
        return False
    cfg = p['config']
    return (p['world'] == 1 and p['total_bytes'] < 64 << 20 and p['n_params'] < 2 << 20 and
            cfg['model']['seq_len'] <= 128 and cfg['train']['micro_batch'] * cfg['model']['seq_len'] <= 1024 and
            cfg['train']['global_batch'] <= 64 and cfg['model']['init_from'] is None and
            cfg['system']['backend'] != 'cuda' and cfg['system']['comm'] != 'nccl')


def train(args, case, workdir, n):
    out_dir = os.path.join(workdir, 'train%d' % n)
    over = ['train.steps=1', 'data.eval_every=0', 'checkpoint.dir=null', 'log.metrics=null',
            'run.out_dir=' + out_dir, 'system.threads=1']
    if case.fam == 'sizes':
        over = []  # refused before anything runs
    rc, out, dt = run([args.trident, 'train', case.path] + case.set_args +
                      [a for o in over for a in ('--set', o)], TRAIN_S)
    case.judge('train', rc, out, dt, (2,) if case.fam == 'sizes' else (0, 2, 3, 4), TRAIN_S)
    return rc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--trident', default=os.path.join(ROOT, 'build', 'trident'))
    ap.add_argument('--harness', default=os.path.join(ROOT, 'build', 'tests', 'fuzz_config_check'))
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--cases', type=int, default=260)
    ap.add_argument('--blend-cases', type=int, default=200)
    ap.add_argument('--llama-cases', type=int, default=100)
    ap.add_argument('--cli', type=int, default=12, help='cases also run through the real binary')
    ap.add_argument('--trains', type=int, default=3)
    ap.add_argument('--jobs', type=int, default=2)
    args = ap.parse_args()
    args.trident, args.harness = os.path.abspath(args.trident), os.path.abspath(args.harness)
    bases = [os.path.join(ROOT, 'tests/configs/tiny.yaml')] + sorted(glob.glob(os.path.join(ROOT, 'configs/*.yaml')))
    base_cfgs = {b: yaml.safe_load(open(b)) for b in bases}
    keys = Keys(args.trident, bases[0])
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix='trident_fuzz_config_') as workdir:
        cases = []
        for i in range(args.cases):
            r = random.Random('%d/pick/%d' % (args.seed, i))
            fam, gen = FAMILIES[i % len(FAMILIES)]
            # Half the cases start from tiny.yaml (small enough to plan and train).
            base = bases[0] if r.random() < 0.5 or fam == 'sizes' else r.choice(bases)
            cases.append(Case(args, i, fam, gen, base, base_cfgs[base], keys, workdir))
        for i in range(args.cases, args.cases + args.blend_cases):
            r = random.Random('%d/pick/%d' % (args.seed, i))
            base = bases[0] if r.random() < 0.7 else r.choice(bases)
            cases.append(Case(args, i, 'blend', fam_blend, base, base_cfgs[base], keys, workdir))
        n = args.cases + args.blend_cases
        for i in range(n, n + args.llama_cases):  # tiny.yaml: its world is the case's tp
            cases.append(Case(args, i, 'llama', fam_llama, bases[0], base_cfgs[bases[0]], keys, workdir))
        # check, every case (main.c's, in the harness)
        for c, (rc, out, dt) in zip(cases, run_batches(args, [c.argv('check') for c in cases])):
            c.judge('check', rc, out, dt, (0, 2), CHECK_S)
            c.verdict = rc
            if rc == 0 and c.expect == 'reject':
                c.problems.append(('wrong_success', 'check accepted it'))
            if rc == 2 and c.expect == 'accept':
                c.problems.append(('wrong_refusal', 'check refused it: %s' % out[-300:]))
        # plan gives check's verdict: every accepted case, and the refused size cases
        planned = [c for c in cases if c.verdict == 0 or (c.fam == 'sizes' and c.verdict == 2)]
        for c, (rc, out, dt) in zip(planned, run_batches(args, [c.argv('plan', '--json') for c in planned])):
            c.judge('plan', rc, out, dt, (0, 2), CHECK_S)
            if rc in (0, 2) and rc != c.verdict:
                c.problems.append(('crash', 'plan exit %s, check exit %s: %s' % (rc, c.verdict, out[-300:])))
            if rc == 0:
                c.plan_json = out
        # The real command line on a sample (the harness runs main.c's code; this checks that
        # the binary agrees), every size case included through train.
        r = random.Random('%d/cli' % args.seed)
        sample = [c for c in cases if c.fam != 'sizes']
        sample = r.sample(sample, min(args.cli, len(sample))) + [c for c in cases if c.fam == 'sizes'][:4]

        def cli(c):
            rc, out, dt = run([args.trident] + c.argv('check'), CHECK_S)
            c.judge('trident check', rc, out, dt, (0, 2), CHECK_S)
            if rc != c.verdict:
                c.problems.append(('crash', 'trident check exit %s, the harness %s' % (rc, c.verdict)))
            if rc == 0 or c.fam == 'sizes':
                prc, pout, pdt = run([args.trident] + c.argv('plan'), CHECK_S)
                c.judge('trident plan', prc, pout, pdt, (0, 2), CHECK_S)
                if prc != rc:
                    c.problems.append(('crash', 'trident plan exit %s, check %s' % (prc, rc)))
            if c.fam == 'sizes':
                train(args, c, workdir, 1000 + cases.index(c))
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(cli, sample))
        # A step of training for a few small accepted cases.
        trained = [c for c in cases if c.verdict == 0 and small_for_training(getattr(c, 'plan_json', ''))]
        trained = random.Random('%d/train' % args.seed).sample(trained, min(args.trains, len(trained)))
        with ThreadPoolExecutor(args.jobs) as pool:
            train_rcs = list(pool.map(lambda a: train(args, a[1], workdir, a[0]), enumerate(trained)))
    elapsed = time.monotonic() - t0
    failed = 0
    for fam, _ in FAMILIES + [('blend', fam_blend), ('llama', fam_llama)]:
        rs = [c for c in cases if c.fam == fam]
        count = {k: sum(1 for c in rs for p in c.problems if p[0] == k)
                 for k in ('crash', 'hang', 'wrong_success', 'wrong_refusal', 'unnamed')}
        accepted = sum(1 for c in rs if c.verdict == 0)
        clean = sum(1 for c in rs if c.verdict == 2 and not any(p[0] == 'unnamed' for p in c.problems))
        line = ('fuzz_config %s: %d cases, %d accepted, %d clean errors, %d crashes, %d hangs, '
                '%d wrong successes, %d wrong refusals, %d unnamed errors'
                % (fam, len(rs), accepted, clean, count['crash'], count['hang'],
                   count['wrong_success'], count['wrong_refusal'], count['unnamed']))
        bad = [c for c in rs if c.problems]
        if bad:
            failed += 1
            print('FAIL %s; first: %s: %s' % (line, bad[0].label, bad[0].problems[0][1]))
        else:
            print('PASS ' + line)
    slowest = max(cases, key=lambda c: c.slowest)
    print('fuzz_config: %d cases (seed %d) in %.1f s on %d jobs, %d also through the trident '
          'binary; %d one-step trains (exits %s); slowest run %.2f s (%s)'
          % (len(cases), args.seed, elapsed, args.jobs, len(sample), len(trained), train_rcs,
             slowest.slowest, slowest.label))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
