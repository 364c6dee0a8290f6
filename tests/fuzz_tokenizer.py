"""fuzz_tokenizer.py TRIDENT WORKDIR [--cases N] [--seed S]: seeded fuzzing of the readers of
`trident tokenize`, in three families. TRIDENT is the trident binary, or build/tests/
fork_tokenize, which runs the same command in a fork per case (much faster than starting
a CUDA build of trident each time).

  tokenizer_json  a tokenizer.json (tests/tokenize_fixture.py) with bytes flipped, inserted
                  or cut, nesting, invalid UTF-8, or a field deleted, retyped or set to an
                  unsupported kind: exit 0 or 2, and 2 with the file named
  jsonl           JSON-lines input with broken syntax, invalid UTF-8, lone surrogates, control
                  characters, NUL bytes, a missing or non-string "text", deep nesting, long
                  lines: exit 3 naming FILE:LINE of the first bad line, else exit 0
  text            plain-text input of random bytes: exit 3 naming the file and byte offset of
                  the first invalid UTF-8, else exit 0

Each case asserts the exit code (what an independent check of the input in Python says it
must be, where it can tell: Python's json module, str.encode), the file named with a HINT,
no signal, no sanitizer report (in a SAN=1 build) and a run under the time bound. Prints per family one PASS/FAIL line with: cases, clean errors,
successes, crashes (signals, sanitizer reports), hangs, wrong successes (a bad input accepted), wrong refusals
(a good input refused or a bad one with the wrong code or message), and the slowest case.
"""
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenize_fixture  # noqa: E402

TRIDENT, WORK = sys.argv[1], sys.argv[2]
CASES = int(sys.argv[sys.argv.index('--cases') + 1]) if '--cases' in sys.argv else 200
SEED = int(sys.argv[sys.argv.index('--seed') + 1]) if '--seed' in sys.argv else 16
BOUND_S = 10.0
failures = 0


class Stats:
    def __init__(self, name):
        self.name, self.cases, self.errors, self.ok = name, 0, 0, 0
        self.crashes, self.hangs, self.wrong_ok, self.wrong_refusal = 0, 0, 0, 0
        self.slowest, self.slowest_case, self.examples = 0.0, '', []

    def note(self, what, detail):
        if len(self.examples) < 3:
            self.examples.append('%s: %s' % (what, detail))

    def report(self):
        global failures
        bad = self.crashes + self.hangs + self.wrong_ok + self.wrong_refusal
        line = ('cases=%d clean_errors=%d successes=%d crashes=%d hangs=%d wrong_successes=%d '
                'wrong_refusals=%d slowest=%.2fs (%s)' % (
                    self.cases, self.errors, self.ok, self.crashes, self.hangs, self.wrong_ok,
                    self.wrong_refusal, self.slowest, self.slowest_case))
        if bad:
            failures += 1
            print('FAIL fuzz_%s: %s; %s' % (self.name, line, ' | '.join(self.examples)))
        else:
            print('PASS fuzz_%s %s' % (self.name, line))


SERVER = None  # the fork_tokenize process, when TRIDENT is one


def tokenize(args):
    """(exit code or -signal or None for a hang, seconds, stderr) of `trident tokenize ARGS`."""
    global SERVER
    errfile = os.path.join(WORK, 'stderr.txt')
    if os.path.basename(TRIDENT) == 'fork_tokenize':
        if SERVER is None:
            SERVER = subprocess.Popen([TRIDENT, str(BOUND_S)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        SERVER.stdin.write('\t'.join([errfile] + args) + '\n')
        SERVER.stdin.flush()
        kind, *rest = SERVER.stdout.readline().split()
        rc = int(rest[0]) if kind == 'exit' else -int(rest[0]) if kind == 'signal' else None
        with open(errfile, 'rb') as f:
            return rc, float(rest[-1]) / 1e3, f.read().decode(errors='replace')
    t0 = time.time()
    try:
        r = subprocess.run([TRIDENT, 'tokenize'] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        return None, BOUND_S, ''
    return r.returncode, time.time() - t0, r.stderr.decode(errors='replace')


def run(stats, args, want_rc, must_name, case):
    """Runs `trident tokenize ARGS`; want_rc: the exit code required, or a set allowed."""
    out = os.path.join(WORK, 'out')
    for f in os.listdir(WORK):
        if f.startswith('out_'):
            os.remove(os.path.join(WORK, f))
    rc, dt, err = tokenize(['--out', out, '--threads', '2'] + args)
    stats.cases += 1
    if rc is None:
        stats.hangs += 1
        stats.note('hang', case)
        return
    if dt > stats.slowest:
        stats.slowest, stats.slowest_case = dt, case
    allowed = want_rc if isinstance(want_rc, set) else {want_rc}
    if rc < 0 or 'Sanitizer' in err or 'runtime error:' in err:
        stats.crashes += 1  # a signal, or a sanitizer's report (make test-asan)
        stats.note('signal %d' % -rc if rc < 0 else 'sanitizer report', '%s: %s' % (
            case, next((ln for ln in err.splitlines() if 'ERROR' in ln or 'runtime error' in ln),
                       '')))
    elif rc not in allowed:
        if rc == 0:
            stats.wrong_ok += 1
        else:
            stats.wrong_refusal += 1
        stats.note('exit %d, want %s' % (rc, sorted(allowed)), '%s: %s' % (case, err.strip()[-200:]))
    elif rc == 0:
        stats.ok += 1
    elif must_name not in err or 'HINT' not in err:
        stats.wrong_refusal += 1
        stats.note('message lacks %r or a HINT' % must_name, '%s: %s' % (case, err.strip()[-200:]))
    else:
        stats.errors += 1


# ---- tokenizer.json

ODD_VALUES = [None, True, False, 0, -1, 1.5, 1e300, 2 ** 40, '', 'x', 'Unigram', [], {}, [1, 2],
              {'type': 'NFC'}, ['a'], 'a b c']


def paths(obj, prefix=()):
    """Every (container, key) path in a JSON tree."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:6]):
            yield prefix + (i,)
            yield from paths(v, prefix + (i,))


def get_parent(obj, path):
    for k in path[:-1]:
        obj = obj[k]
    return obj


def structural(rng, spec):
    """A valid-JSON mutation; must_fail when the result is surely not a supported tokenizer."""
    kinds = ['retype', 'delete', 'kind', 'merge', 'vocab', 'added', 'regex']
    kind = rng.choice(kinds)
    must_fail = False
    if kind == 'kind':
        where, value = rng.choice([
            (('model', 'type'), rng.choice(['Unigram', 'WordPiece', 'WordLevel', 'bpe', ''])),
            (('normalizer',), {'type': rng.choice(['NFC', 'NFKC', 'Lowercase', 'Strip'])}),
            (('pre_tokenizer', 'type'), rng.choice(['Whitespace', 'Metaspace', 'Digits'])),
            (('decoder', 'type'), rng.choice(['WordPiece', 'Metaspace', 'Fuse'])),
            (('model', 'byte_fallback'), True), (('model', 'dropout'), 0.1),
            (('model', 'continuing_subword_prefix'), '##'), (('version',), '2.0')])
        get_parent(spec, where)[where[-1]] = value
        must_fail = True
    elif kind == 'regex':
        spec['pre_tokenizer'] = {'type': 'Sequence', 'pretokenizers': [
            {'type': 'Split', 'pattern': {'Regex': rng.choice([r'\s+', r'\p{L}+', "'s|'t"])},
             'behavior': 'Isolated', 'invert': False},
            {'type': 'ByteLevel', 'add_prefix_space': False, 'use_regex': False}]}
        must_fail = True
    elif kind == 'merge':
        merges = spec['model']['merges']
        i = rng.randrange(len(merges))
        merges[i] = rng.choice([['zz', 'qq'], ['a'], [1, 2], 'a b', None, ['Ġ', 'zzz']])
        must_fail = True
    elif kind == 'vocab':
        vocab = spec['model']['vocab']
        key = rng.choice(list(vocab))
        vocab[key] = rng.choice([-1, 1.5, 'x', None, 2 ** 31, 2 ** 21, 2 ** 21 - 1, 0])
        must_fail = not isinstance(vocab[key], int) or not 0 <= vocab[key] < 2 ** 21
    elif kind == 'added':
        t = spec['added_tokens'][0]
        k = rng.choice(['content', 'id', 'lstrip', 'special'])
        t[k] = rng.choice(ODD_VALUES)
        must_fail = (k == 'content' and not isinstance(t[k], str)) or \
            (k in ('lstrip', 'special') and t[k] is not None and not isinstance(t[k], bool))
    else:
        path = rng.choice(list(paths(spec)))
        parent = get_parent(spec, path)
        if kind == 'delete':
            del parent[path[-1]]
        else:
            parent[path[-1]] = rng.choice(ODD_VALUES)
        must_fail = path in (('model',), ('model', 'vocab'), ('model', 'merges'),
                             ('pre_tokenizer',)) and kind == 'delete'
    return kind, must_fail


def fuzz_tokenizer_json(rng):
    stats = Stats('tokenizer_json')
    base = tokenize_fixture.make()
    text = json.dumps(base, ensure_ascii=False).encode()
    docs = os.path.join(WORK, 'docs.jsonl')
    with open(docs, 'w') as f:
        f.write('{"text": "In the beginning God created the heaven and the earth."}\n'
                '{"text": "And the earth was without form, and void<|endoftext|>."}\n')
    path = os.path.join(WORK, 'tok.json')
    for case in range(CASES):
        if rng.random() < 0.5:  # bytes
            data = bytearray(text)
            op = rng.choice(['flip', 'insert', 'cut', 'delete', 'nest', 'utf8', 'nul'])
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(len(data))
                if op == 'flip':
                    data[i] ^= 1 << rng.randrange(8)
                elif op == 'insert':
                    data[i:i] = bytes([rng.choice(b'{}[]",:\\ 0e-tfn\x00\xff')])
                elif op == 'cut':
                    data = data[:i]
                elif op == 'delete':
                    del data[i]
                elif op == 'nest':
                    n = rng.choice([63, 64, 65, 1000, 200000])
                    data = bytearray(b'{"model": ' + b'[' * n + b']' * n + b'}')
                elif op == 'utf8':
                    data[i:i] = rng.choice([b'\xc0\xaf', b'\xed\xa0\x80', b'\xf4\x90\x80\x80',
                                            b'\xe2\x82'])
                else:
                    data[i:i] = b'\x00'
            try:
                json.loads(bytes(data).decode('utf-8'))
                want = {0, 2}  # still JSON: may be a valid tokenizer
            except (ValueError, RecursionError):
                want = 2
            desc = 'bytes %s' % op
        else:
            spec = json.loads(text)
            kind, must_fail = structural(rng, spec)
            data = json.dumps(spec, ensure_ascii=rng.random() < 0.5).encode()
            want = 2 if must_fail else {0, 2}
            desc = 'structure %s' % kind
        with open(path, 'wb') as f:
            f.write(data)
        run(stats, ['--tokenizer', path, '--val-fraction', '0', docs], want, path,
            'case %d (%s)' % (case, desc))
    stats.report()


# ---- JSON lines and text

def random_text(rng):
    parts = ['In the beginning', ' ', '\n', '\u00e9', '\u4e2d\u6587', '\U0001f600', '"', '\\',
             '\t', '<|endoftext|>', '\u2028', '\x7f', "'s", '123']
    return ''.join(rng.choice(parts) for _ in range(rng.randint(0, 12)))


def levels(obj):
    """How many containers deep a JSON value nests (trident reads at most 64)."""
    if isinstance(obj, dict):
        return 1 + max((levels(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max((levels(v) for v in obj), default=0)
    return 0


def first_bad_line(data):
    """The 1-based number of the first line that is not a JSON object with a "text" string
    of valid Unicode, nested at most 64 levels, or 0. Blank lines (ASCII whitespace only)
    are skipped."""
    def reject(c):
        raise ValueError(c)
    for n, line in enumerate(data.split(b'\n'), 1):
        if not line.strip(b' \t\n\r\x0b\x0c'):
            continue
        try:
            s = line.decode('utf-8')
            if s.startswith('\ufeff'):
                s = s[1:]
            obj = json.loads(s, parse_constant=reject)
            if not isinstance(obj, dict) or not isinstance(obj.get('text'), str) or \
                    levels(obj) > 64:
                return n
            obj['text'].encode('utf-8')  # lone surrogates cannot be
        except (ValueError, UnicodeError, RecursionError):
            return n
    return 0


def fuzz_jsonl(rng):
    stats = Stats('jsonl')
    spec = os.path.join(WORK, 'fixture.json')
    with open(spec, 'w') as f:
        json.dump(tokenize_fixture.make(), f)
    path = os.path.join(WORK, 'in.jsonl')
    for case in range(CASES):
        lines = [json.dumps({'text': random_text(rng), 'n': i}, ensure_ascii=rng.random() < 0.5)
                 .encode() for i in range(rng.randint(1, 8))]
        op = rng.choice(['flip', 'insert', 'cut', 'surrogate', 'control', 'nul', 'type',
                         'nest', 'long', 'blank', 'crlf', 'bom', 'array', 'dup', 'none'])
        k = rng.randrange(len(lines))
        line = bytearray(lines[k])
        i = rng.randrange(len(line))
        if op == 'flip':
            line[i] ^= 1 << rng.randrange(8)
        elif op == 'insert':
            line[i:i] = bytes([rng.choice(b'{}[]",:\\ \x80\xff')])
        elif op == 'cut':
            line = line[:i]
        elif op == 'surrogate':
            line = bytearray(b'{"text": "a\\ud800b"}' if rng.random() < 0.5 else
                             b'{"text": "\\udfff"}')
        elif op == 'control':
            line = bytearray(b'{"text": "a\x01b"}')
        elif op == 'nul':
            line[i:i] = b'\x00'
        elif op == 'type':
            line = bytearray(json.dumps({'text': rng.choice([None, 1, [], {}, True])}).encode()
                             if rng.random() < 0.7 else b'{"txt": "x"}')
        elif op == 'nest':
            n = rng.choice([10, 62, 63, 64, 100000])
            line = bytearray(b'{"text": "x", "deep": ' + b'[' * n + b']' * n + b'}')
        elif op == 'long':
            line = bytearray(json.dumps({'text': 'ab ' * rng.choice([1000, 400000])}).encode())
        elif op == 'blank':
            line = bytearray(rng.choice([b'', b'   ', b'\t', b'\r']))
        elif op == 'crlf':
            line += b'\r'
        elif op == 'bom':
            line[0:0] = b'\xef\xbb\xbf'
        elif op == 'array':
            line = bytearray(b'["text", "x"]')
        elif op == 'dup':
            line = bytearray(b'{"text": 1, "text": "ok"}')
        lines[k] = bytes(line)
        data = b'\n'.join(lines) + (b'\n' if rng.random() < 0.7 else b'')
        with open(path, 'wb') as f:
            f.write(data)
        bad = first_bad_line(data)
        if not bad and not any(ln.strip(b' \t\n\r\x0b\x0c') for ln in data.split(b'\n')):
            want, name = 3, path  # no document at all
        else:
            want, name = (3, '%s:%d:' % (path, bad)) if bad else (0, path)
        run(stats, ['--tokenizer', spec, '--val-fraction', '0', path], want, name,
            'case %d (%s)' % (case, op))
    stats.report()


def fuzz_text(rng):
    stats = Stats('text')
    spec = os.path.join(WORK, 'fixture.json')
    path = os.path.join(WORK, 'in.txt')
    for case in range(max(CASES // 2, 1)):
        base = random_text(rng).encode() + b'\nAnd God said\n' + random_text(rng).encode()
        data = bytearray(base)
        for _ in range(rng.randint(0, 3)):
            i = rng.randrange(len(data) + 1)
            data[i:i] = bytes([rng.randrange(256)])
        try:
            data.decode('utf-8')
            want, name = 0, path
        except UnicodeDecodeError as e:
            want, name = 3, '%s: invalid UTF-8 at byte %d' % (path, e.start)
        with open(path, 'wb') as f:
            f.write(data)
        run(stats, ['--tokenizer', spec, '--val-fraction', '0', path], want, name,
            'case %d' % case)
    stats.report()


def main():
    os.makedirs(WORK, exist_ok=True)
    rng = random.Random(SEED)
    fuzz_tokenizer_json(rng)
    fuzz_jsonl(rng)
    fuzz_text(rng)
    if SERVER:
        SERVER.stdin.close()
        SERVER.wait()
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
