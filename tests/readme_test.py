#!/usr/bin/env python3
"""readme_test.py [README] [--keep] [--only LINE...]: runs every command README.md shows and
compares every output it quotes (tests/test_readme.sh runs it in make test).

Each fenced block of the README is one of these (README "Tests and benchmark" has the
short form):

  ```sh (also bash, shell, console)   commands, run in order. A command ends where its line
      does not end in a backslash and its quotes are closed; `#` lines are comments. Lines
      `#> TEXT` right after a command are its expected output (stdout and stderr), compared
      line by line; `#> [exit N]` first says it exits N (else it must exit 0).
  any other block needs a marker, an HTML comment on a line of its own right before it
  (blank lines between are allowed):
      <!-- readme-test: output -->        the output of the last command of the previous
                                          shell block, compared
      <!-- readme-test: output CMD -->    the output of CMD (run here), compared
      <!-- readme-test: example [CMD] --> machine-dependent output (timings): CMD runs and
                                          must succeed, the text is not compared
      <!-- readme-test: file PATH -->     the text of the file PATH, compared
      <!-- readme-test: config -->        a run config that `trident check` accepts
      <!-- readme-test: text -->          not a command and not an output (a diagram)
  and for any block:
      <!-- readme-test: skip REASON -->   not run, because it cannot run here (a GPU, a
                                          cluster, the network, a server that never ends)
      <!-- readme-test: skip-command PREFIX -- REASON -->  the block's commands that start
                                          with PREFIX are not run
      <!-- readme-test: example -->       (on a shell block) its commands run, its `#>`
                                          lines are not compared
  and anywhere in the text:
      <!-- readme-test: check CMD -->     CMD must succeed: ties a figure of the prose
                                          around it to the code (grep a config, a plan)

Compared text: trailing blanks are ignored, a line `...` stands for any number of lines,
and the path of the copy the commands run in reads as `.`. Everything else must be equal.

The commands run in order, in one copy of the repository (the files git tracks or does
not ignore, and what make built in data/), with `build/` standing for the real build except
for `build/trident`, a wrapper that appends `--set train.steps=1 --set data.eval_every=0` to
every `train` (however it is started: make run, launch.sh, mpirun) and `--tokens 16` to
every `sample`, so that a README training runs one step and a sample is short. Each shell
block runs in one bash (its variables last until the block ends).

Prints a PASS or FAIL line per block, SKIP lines with their reasons, and at the end the
counts: commands run, outputs compared, example blocks, skipped blocks and commands, text
blocks, checks. Exit 1 on any failure.
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SHELL_LANGS = {'sh', 'bash', 'shell', 'console'}
MARKER = re.compile(r'<!--\s*readme-test:\s*(.*?)\s*-->')
FENCE = re.compile(r'^(\s*)```(\S*)\s*$')
TRAIN_ARGS = '--set train.steps=1 --set data.eval_every=0'
SAMPLE_ARGS = '--tokens 16'
BLOCK_TIMEOUT_S = 600


class Block:
    def __init__(self, line, lang, body, markers):
        self.line, self.lang, self.body = line, lang, body
        self.markers = markers  # [(kind, arg)]

    def marker(self, kind):
        return next((a for k, a in self.markers if k == kind), None)

    def has(self, kind):
        return any(k == kind for k, _ in self.markers)


def parse_marker(text):
    kind, _, arg = text.partition(' ')
    return kind, arg.strip()


def parse_readme(path):
    """The blocks and standalone checks of the README, in order, and the errors of its markers."""
    lines = open(path, encoding='utf-8').read().split('\n')
    items, pending, errors = [], [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            indent, lang = m.group(1), m.group(2)
            body, j = [], i + 1
            while j < len(lines) and not re.match(r'^\s*```\s*$', lines[j]):
                s = lines[j]
                body.append(s[len(indent):] if s.startswith(indent) else s.lstrip())
                j += 1
            if j == len(lines):
                errors.append(f'{path}:{i + 1}: a fenced block that is never closed')
                break
            items.append(Block(i + 1, lang, body, [parse_marker(t) for _, t in pending]))
            pending = []
            i = j + 1
            continue
        text = lines[i].strip()
        mm = MARKER.fullmatch(text)  # a marker is a line of its own (not one quoted in prose)
        if mm:
            kind, arg = parse_marker(mm.group(1))
            if kind == 'check':
                items.append(('check', i + 1, arg))
            else:
                pending.append((i + 1, mm.group(1)))
        elif text and pending:
            errors.append(f'{path}:{pending[0][0]}: marker "{pending[0][1]}" is not followed by '
                          'a fenced block')
            pending = []
        i += 1
    for line, t in pending:
        errors.append(f'{path}:{line}: marker "{t}" is not followed by a fenced block')
    return items, errors


def split_commands(body):
    """[(command text, [expected lines], expected exit)] of a shell block."""
    cmds, cur = [], []
    for line in body:
        if not cur and line.startswith('#>'):
            if not cmds:
                raise ValueError(f'"{line}" follows no command')
            text = line[3:] if line.startswith('#> ') else line[2:]
            m = re.fullmatch(r'\[exit (\d+)\]', text.strip())
            if m and not cmds[-1][1]:
                cmds[-1][2] = int(m.group(1))
            else:
                cmds[-1][1].append(text)
            continue
        if not cur and (not line.strip() or line.lstrip().startswith('#')):
            continue
        cur.append(line)
        text = '\n'.join(cur)
        if text.endswith('\\'):
            continue
        try:
            shlex.split(text, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        cmds.append([text, [], 0])
        cur = []
    if cur:
        raise ValueError(f'unfinished command: {cur[0]}')
    return cmds


def normalise(text, copy):
    text = text.replace(copy + '/', '').replace(copy, '.')
    lines = [ln.rstrip() for ln in text.split('\n')]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def segments(expected):
    """expected split at its `...` lines."""
    segs, seg = [], []
    for ln in expected:
        if ln.strip() == '...':
            segs.append(seg)
            seg = []
        else:
            seg.append(ln)
    segs.append(seg)
    return segs


def mismatch(expected, actual):
    """None when actual (lines) is expected with each `...` line standing for any lines;
    else what differs: the first README line that is not where it should be, and what the
    output has there instead."""
    segs = segments(expected)
    pos = 0
    for n, seg in enumerate(segs):
        first, last = n == 0, n == len(segs) - 1
        if not seg:
            if first and last and actual:
                return f'README shows nothing, the output has "{actual[0]}"'
            continue
        if first:
            starts = [0]
        elif last:
            starts = [len(actual) - len(seg)] if len(actual) - len(seg) >= pos else []
        else:
            starts = list(range(pos, len(actual) - len(seg) + 1))
        whole = first and last  # no `...` at all: the output is exactly seg
        k = next((k for k in starts if actual[k:k + len(seg)] == seg and
                  (not whole or len(actual) == len(seg))), None)
        if k is not None:
            pos = k + len(seg)
            continue
        # The closest place: where the most leading lines are equal.
        best, best_k = -1, pos
        for k in starts or [pos]:
            eq = next((j for j in range(len(seg))
                       if k + j >= len(actual) or actual[k + j] != seg[j]), len(seg))
            if eq > best:
                best, best_k = eq, k
        if best == len(seg):  # all equal: the output goes on where README stops
            return f'the output goes on after "{seg[-1]}" with "{actual[best_k + len(seg)]}"'
        at = best_k + best
        got = f'"{actual[at]}"' if 0 <= at < len(actual) else 'nothing (it has ended)'
        return f'README has "{seg[best]}" where the output has {got}'
    return None


def make_copy(root):
    """A copy of the repository to run the README in; returns its path."""
    copy = tempfile.mkdtemp(prefix='trident-readme-')
    files = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
                           cwd=root, capture_output=True, check=True).stdout.decode().split('\0')
    for f in files:
        if not f or f.startswith('build-san/') or not os.path.isfile(os.path.join(root, f)):
            continue
        dst = os.path.join(copy, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(root, f), dst)
    data = os.path.join(root, 'data')  # with what `make data` built there (ignored by git)
    for f in os.listdir(data):
        src, dst = os.path.join(data, f), os.path.join(copy, 'data', f)
        if os.path.isfile(src) and not os.path.exists(dst):
            shutil.copy2(src, dst)
    build = os.path.join(root, 'build')
    os.makedirs(os.path.join(copy, 'build'))
    for f in os.listdir(build):
        if f != 'trident':
            os.symlink(os.path.join(build, f), os.path.join(copy, 'build', f))
    wrapper = os.path.join(copy, 'build', 'trident')
    with open(wrapper, 'w') as w:
        w.write('#!/bin/bash\n'
                '# tests/readme_test.py: README trainings run one step, samples 16 tokens\n'
                f'T="{build}/trident"\n'
                f'if [ "${{1:-}}" = train ]; then exec -a "$0" "$T" "$@" {TRAIN_ARGS}; fi\n'
                f'if [ "${{1:-}}" = sample ]; then exec -a "$0" "$T" "$@" {SAMPLE_ARGS}; fi\n'
                'exec -a "$0" "$T" "$@"\n')
    os.chmod(wrapper, 0o755)
    # The wrapper is newer than every object, so make (`make run`) keeps it; anything make
    # would rebuild means the build is stale.
    q = subprocess.run(['make', '-q', 'all'], cwd=copy, capture_output=True, env=clean_env())
    if q.returncode != 0:
        raise RuntimeError('the build is not up to date with the sources (make -q all fails in '
                           'the copy); run make first')
    return copy


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ('MAKEFLAGS', 'MAKELEVEL', 'MFLAGS', 'MAKEOVERRIDES')}
    env['OPENBLAS_NUM_THREADS'] = '1'
    return env


def run_script(script, copy, timeout=BLOCK_TIMEOUT_S):
    return subprocess.run(['bash', '-c', script], cwd=copy, env=clean_env(), timeout=timeout,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors='replace')


def run_block_commands(cmds, copy, skip_prefixes):
    """Runs the commands of one shell block in one bash; returns [(rc or None, output)]."""
    out = tempfile.mkdtemp(dir=copy, prefix='.readme-out-')
    script = ['set -o pipefail']
    for k, (text, _, _) in enumerate(cmds):
        if any(text.startswith(p) for p in skip_prefixes):
            continue
        script.append(f'{{ {text}\n}} >{out}/{k}.out 2>&1; echo $? >{out}/{k}.rc')
    run_script('\n'.join(script), copy)
    results = []
    for k in range(len(cmds)):
        try:
            rc = int(open(f'{out}/{k}.rc').read())
            results.append((rc, open(f'{out}/{k}.out', errors='replace').read()))
        except FileNotFoundError:
            results.append((None, ''))
    shutil.rmtree(out)
    return results


def main():
    ap = argparse.ArgumentParser(description='runs what README.md shows')
    ap.add_argument('readme', nargs='?', default='README.md')
    ap.add_argument('--keep', action='store_true', help='keep the copy the commands ran in')
    ap.add_argument('--only', type=int, nargs='+', help='only the blocks at these lines')
    args = ap.parse_args()
    keep, only = args.keep, set(args.only or [])
    readme = os.path.abspath(args.readme)
    root = os.path.dirname(readme)
    items, errors = parse_readme(readme)
    fails = len(errors)
    for e in errors:
        print(f'FAIL readme_markers: {e}')
    n = dict(commands=0, skipped_commands=0, compared=0, examples=0, skipped_blocks=0, text=0,
             checks=0, files=0, configs=0)
    t0 = time.time()
    try:
        copy = make_copy(root)
    except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
        print(f'FAIL readme_copy: {e}')
        return 1
    rel = os.path.relpath(readme, root)
    last = None  # (command, output) of the last command of the last shell block run

    def fail(where, msg):
        nonlocal fails
        fails += 1
        print(f'FAIL {where}: {msg}')

    try:
        for it in items:
            if isinstance(it, tuple):  # a check in the prose
                _, line, cmd = it
                if only and line not in only:
                    continue
                r = run_script(cmd, copy)
                n['checks'] += 1
                if r.returncode == 0:
                    print(f'PASS {rel}:{line} check: {cmd}')
                else:
                    fail(f'{rel}:{line}', f'check `{cmd}` exits {r.returncode}: the prose and the '
                         f'code disagree {(r.stdout + r.stderr).strip()[-200:]}')
                continue
            b = it
            where = f'{rel}:{b.line}'
            if only and b.line not in only:
                continue
            t_block = time.time()
            kinds = [k for k, _ in b.markers]
            unknown = [k for k in kinds if k not in ('skip', 'skip-command', 'example', 'output',
                                                     'file', 'config', 'text')]
            if unknown:
                fail(where, f'unknown marker {unknown[0]}')
                continue
            if b.has('skip'):
                n['skipped_blocks'] += 1
                print(f'SKIP {where}: {b.marker("skip") or "(no reason given)"}')
                if not b.marker('skip'):
                    fail(where, 'a skip marker needs a reason')
                continue
            if b.lang in SHELL_LANGS:
                try:
                    cmds = split_commands(b.body)
                except ValueError as e:
                    fail(where, str(e))
                    continue
                skips = []
                for k, a in b.markers:
                    if k == 'skip-command':
                        prefix, _, reason = a.partition(' -- ')
                        if not reason:
                            fail(where, f'skip-command "{a}" needs " -- REASON"')
                        skips.append(prefix.strip())
                        print(f'SKIP {where}: `{prefix.strip()}...`: {reason}')
                results = run_block_commands(cmds, copy, skips)
                example = b.has('example')
                bad = []
                ran = 0
                for (text, expected, code), (rc, output) in zip(cmds, results):
                    first = re.sub(r'\s+#\s.*$', '', text.split('\n')[0])  # shown in messages
                    if any(text.startswith(p) for p in skips):
                        n['skipped_commands'] += 1
                        continue
                    ran += 1
                    n['commands'] += 1
                    got = normalise(output, copy)
                    if rc != code:
                        bad.append(f'`{first}` exits {rc}, not {code}: {" | ".join(got[-4:])}')
                    elif expected and not example:
                        n['compared'] += 1
                        diff = mismatch([e.rstrip() for e in expected], got)
                        if diff:
                            bad.append(f'`{first}` printed other than README says: {diff}')
                    last = (first, got)
                if example:
                    n['examples'] += 1
                if bad:
                    fail(where, '; '.join(bad))
                else:
                    print(f'PASS {where} {b.lang}: {ran} command(s)'
                          f'{", example" if example else ""} ({time.time() - t_block:.1f} s)')
                continue
            # Any other block: its marker says what it is.
            kind = next((k for k in kinds if k in ('output', 'example', 'file', 'config', 'text')),
                        None)
            body = [ln.rstrip() for ln in b.body]
            while body and not body[-1]:
                body.pop()
            if kind is None:
                fail(where, f'a ```{b.lang} block without a marker: mark it <!-- readme-test: '
                     'output|example|text|file PATH|config|skip REASON --> (tests/readme_test.py)')
            elif kind == 'text':
                n['text'] += 1
                print(f'PASS {where} text')
            elif kind == 'file':
                path = b.marker('file')
                try:
                    want = normalise(open(os.path.join(root, path)).read(), copy)
                except OSError as e:
                    fail(where, f'file {path}: {e}')
                    continue
                n['files'] += 1
                diff = mismatch(body, want)
                if not diff:
                    print(f'PASS {where} the text of {path}')
                else:
                    fail(where, f'differs from {path}: {diff}')
            elif kind == 'config':
                cfg = os.path.join(copy, f'.readme-config-{b.line}.yaml')
                open(cfg, 'w').write('\n'.join(body) + '\n')
                r = run_script(f'build/trident check {shlex.quote(cfg)}', copy)
                n['configs'] += 1
                if r.returncode == 0:
                    print(f'PASS {where} config accepted by trident check')
                else:
                    fail(where, f'trident check refuses it: {(r.stdout + r.stderr)[-300:]}')
            else:  # output or example
                cmd = b.marker(kind)
                if cmd:
                    r = run_script(cmd, copy)
                    n['commands'] += 1
                    got = normalise(r.stdout + r.stderr, copy)
                    if r.returncode != 0:
                        fail(where, f'`{cmd}` exits {r.returncode}: {" | ".join(got[-4:])}')
                        continue
                    source = cmd
                elif last:
                    source, got = last
                else:
                    fail(where, 'an output block with no command before it')
                    continue
                if kind == 'example':
                    n['examples'] += 1
                    print(f'PASS {where} example of `{source}` (not compared)')
                else:
                    n['compared'] += 1
                    diff = mismatch(body, got)
                    if not diff:
                        print(f'PASS {where} output of `{source}`')
                    else:
                        fail(where, f'output of `{source}` differs: {diff}')
    finally:
        if keep:
            print(f'# the copy is kept: {copy}')
        else:
            shutil.rmtree(copy, ignore_errors=True)
    print(f'# README checks: {n["commands"]} commands run, {n["compared"]} outputs compared, '
          f'{n["examples"]} example blocks, {n["skipped_blocks"]} blocks and '
          f'{n["skipped_commands"]} commands skipped, {n["text"]} text blocks, '
          f'{n["files"]} files and {n["configs"]} configs compared, {n["checks"]} checks of '
          f'the prose; {time.time() - t0:.0f} s')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
