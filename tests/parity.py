"""How a run compares with a reference run: its metrics.jsonl and model.bin against the
reference's. The shell tests call it through match_reference (tests/lib.sh); tests/gpu
imports errors() and rows().

  parity.py REF RUN [loss=TOL] [norm=TOL] [val=TOL] [param=TOL] [steps=N] [from=STEP]
      Largest relative differences: loss and grad_norm over the step lines, val_loss (or each
      val_loss/NAME) over the eval lines, and the final parameters (model.bin) relative to the reference's
      largest. Each quantity given a TOL is checked (<= TOL); the others are not computed.
      Both runs must have the same step and eval lines (N step lines with steps=N); with
      from=STEP only the lines from that step on, matched by step number.

  parity.py REF RUN bitwise [types=T,...] [ignore=FIELD,...] [from=STEP] [steps=N] [model=no]
      The metrics lines of the types given (default: every type but 'run') equal as text,
      once the timing fields (TIMING) and the ignored ones are removed, in the same order;
      with from=STEP only the lines from that step on, matched by (type, step), and RUN may
      have no line REF lacks. model.bin must be equal byte for byte unless model=no.

Prints one line (the measured errors, or what differs) and exits 0 when every check holds.
"""
import json
import re
import sys

import numpy as np

# Fields that measure time or name a slow rank and its host (DESIGN.md "Metrics": two runs
# differ only in these).
TIMING = ('step_ms', 'tokens_per_s', 'mfu', 'bubble', 'blocked_ms', 'mfu_peak_flops', 'straggler',
          'pass_ms', 'plan_ratio')


def rows(run_dir, kind):
    """The metrics lines of one type ('run', 'step', 'eval') of a run directory."""
    return [r for r in map(json.loads, open(run_dir + '/metrics.jsonl')) if r['type'] == kind]


def model_params(run_dir):
    """The parameters of a run's model.bin (llm.c format: fp32, or bf16 for version 5) as
    float32."""
    raw = np.fromfile(run_dir + '/model.bin', dtype=np.uint8)
    header = raw[:1024].view(np.int32)
    if header[1] == 5:
        return (raw[1024:].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return raw[1024:].view(np.float32)


def param_error(ref, run):
    pa, pb = model_params(ref), model_params(run)
    assert pa.shape == pb.shape, ('model.bin sizes differ', pa.shape, pb.shape)
    return float(np.abs(pa - pb).max() / np.abs(pa).max())


def errors(ref, run, steps=20):
    """Largest relative differences over the steps: loss, grad_norm, val_loss, and the final
    parameters relative to the largest. Also returns the run's step rows and run record."""
    a, b = rows(ref, 'step'), rows(run, 'step')
    assert len(a) == len(b) == steps, (len(a), len(b))
    loss = max(abs(x['loss'] - y['loss']) / abs(x['loss']) for x, y in zip(a, b))
    norm = max(abs(x['grad_norm'] - y['grad_norm']) / abs(x['grad_norm']) for x, y in zip(a, b))
    ev = max(abs(x['val_loss'] - y['val_loss']) / x['val_loss']
             for x, y in zip(rows(ref, 'eval'), rows(run, 'eval')))
    return loss, norm, ev, param_error(ref, run), b, rows(run, 'run')[0]


def paired(ref, run, kind, first):
    """The (reference, run) lines of one type: all, in order and equal in number; or from
    step `first` on, matched by step number (every reference step present in the run)."""
    a, b = rows(ref, kind), rows(run, kind)
    if first is None:
        assert len(a) == len(b), '%d %s lines in the reference, %d in the run' % (len(a), kind, len(b))
        return list(zip(a, b))
    a = {r['step']: r for r in a if r['step'] >= first}
    b = {r['step']: r for r in b if r['step'] >= first}
    missing = sorted(set(a) - set(b))
    assert not missing, 'the run has no %s line for steps %s' % (kind, missing[:5])
    return [(a[s], b[s]) for s in sorted(a)]


def tolerances(ref, run, opts):
    first = int(opts['from']) if 'from' in opts else None
    steps = paired(ref, run, 'step', first)
    checks = []
    if 'steps' in opts:
        assert len(steps) == int(opts['steps']), \
            '%d step lines compared, want %s' % (len(steps), opts['steps'])
    assert steps, 'no step lines to compare'
    rel = lambda x, y, key: abs(x[key] - y[key]) / abs(x[key])
    if 'loss' in opts:
        checks.append(('loss', max(rel(x, y, 'loss') for x, y in steps)))
    if 'norm' in opts:
        checks.append(('norm', max(rel(x, y, 'grad_norm') for x, y in steps)))
    if 'val' in opts:
        evals = paired(ref, run, 'eval', first)
        assert evals, 'no eval lines to compare'
        # val_loss, or val_loss/NAME for each named set of data.val
        checks.append(('val', max(rel(x, y, k) for x, y in evals for k in x if k.startswith('val_loss'))))
    if 'param' in opts:
        checks.append(('param', param_error(ref, run)))
    assert checks, 'nothing to check: give loss=, norm=, val= or param='
    ok, words = True, []
    for name, err in checks:
        tol = float(opts[name])
        good = err <= tol  # False for NaN
        ok &= good
        words.append('%s %.2e (%s %s)' % (name, err, '<=' if good else 'FAILS, tolerance', opts[name]))
    return ok, '%s over %d steps' % (' '.join(words), len(steps))


def without(line, fields):
    """The text of a metrics line with these fields (and their values) removed."""
    for f in fields:
        line = re.sub(r'"%s":(\{[^}]*\}|"[^"]*"|[^,}]*),?' % re.escape(f), '', line)
    return line.rstrip('\n').rstrip(',')


def bitwise(ref, run, opts):
    types = opts['types'].split(',') if 'types' in opts else None
    drop = TIMING + tuple(f for f in opts.get('ignore', '').split(',') if f)
    first = int(opts['from']) if 'from' in opts else None

    def lines(d):
        out = []
        for text in open(d + '/metrics.jsonl'):
            r = json.loads(text)
            if (r['type'] in types) if types else r['type'] != 'run':
                out.append(((r['type'], r.get('step')), without(text, drop)))
        return out
    a, b = lines(ref), lines(run)
    if first is None:
        bad = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        ok = len(a) == len(b) and not bad and a
        n_steps = sum(1 for k, _ in b if k[0] == 'step')
        what = 'bitwise: %d lines equal (%d steps)' % (len(a), n_steps) if ok else \
            'bitwise: %d lines vs %d, %d differ, first %s' % (
                len(a), len(b), len(bad), a[bad[0]][0] if bad else '-')
    else:
        da, db = dict(a), dict(b)
        keys = [k for k in da if k[1] is not None and k[1] >= first]
        bad = [k for k in keys if da[k] != db.get(k)]
        ok = keys and not bad and not set(db) - set(da)
        n_steps = sum(1 for k in keys if k[0] == 'step')
        what = 'bitwise: %d lines from step %d, %d differ %s' % (len(keys), first, len(bad), bad[:2])
    if 'steps' in opts and n_steps != int(opts['steps']):
        ok, what = False, what + '; %d step lines, want %s' % (n_steps, opts['steps'])
    if opts.get('model', 'yes') != 'no':
        same = open(ref + '/model.bin', 'rb').read() == open(run + '/model.bin', 'rb').read()
        ok, what = ok and same, what + ('; model.bin equal' if same else '; model.bin DIFFERS')
    return bool(ok), what


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    ref, run, rest = argv[0], argv[1], argv[2:]
    mode = 'bitwise' if rest[:1] == ['bitwise'] else 'tolerances'
    opts = dict(a.split('=', 1) for a in rest if a != 'bitwise')
    try:
        ok, what = (bitwise if mode == 'bitwise' else tolerances)(ref, run, opts)
    except (AssertionError, OSError, KeyError, ValueError) as e:
        ok, what = False, 'cannot compare %s with %s: %s' % (run, ref, e)
    print(what)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
