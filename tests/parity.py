"""What the parallel parity tests (tests/test_tp.sh, test_pp.sh, test_dp.sh) compare: a
run's metrics.jsonl and model.bin against the single-process reference run's."""
import json
import numpy as np


def rows(run_dir, kind):
    """The metrics lines of one type ('run', 'step', 'eval') of a run directory."""
    return [r for r in map(json.loads, open(run_dir + '/metrics.jsonl')) if r['type'] == kind]


def errors(ref, run, steps=20):
    """Largest relative differences over the steps: loss, grad_norm, val_loss, and the final
    parameters relative to the largest. Also returns the run's step rows and run record."""
    a, b = rows(ref, 'step'), rows(run, 'step')
    assert len(a) == len(b) == steps, (len(a), len(b))
    loss = max(abs(x['loss'] - y['loss']) / abs(x['loss']) for x, y in zip(a, b))
    norm = max(abs(x['grad_norm'] - y['grad_norm']) / abs(x['grad_norm']) for x, y in zip(a, b))
    ev = max(abs(x['val_loss'] - y['val_loss']) / x['val_loss']
             for x, y in zip(rows(ref, 'eval'), rows(run, 'eval')))
    pa = np.fromfile(ref + '/model.bin', dtype=np.float32)[256:]
    pb = np.fromfile(run + '/model.bin', dtype=np.float32)[256:]
    param = float(np.abs(pa - pb).max() / np.abs(pa).max())
    return loss, norm, ev, param, b, rows(run, 'run')[0]
