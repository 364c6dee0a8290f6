"""`trident plan RUN_DIR` against the files it reads (tests/test_plan.sh).

usage: plan_rundir_check.py RUN_DIR PLAN_JSON TEXT JSON

RUN_DIR is a run's out_dir, PLAN_JSON `trident plan CONFIG --json` of the same config and
world, TEXT and JSON what `trident plan RUN_DIR` and `--json` printed. Checks:
  - one stage per pipeline stage, in stage order (pp_rank 0, 1, ...), in both outputs;
  - predicted: each stage's compute, waits and comm equal PLAN_JSON's stages[r].step_parts
    and the run record's plan.stages[r] (the trainer's prediction is `trident plan`'s), their
    sum the plan's step;
  - measured: each stage's numbers equal timing.json's stages[r] (and its rank count the
    stage's tp x dp ranks); timing.json's median_of the run's logged steps; where stage 0 is
    rank 0 alone, its step equals the median of metrics.jsonl's step_ms and its waits the
    median of bubble x step_ms (the step lines' own measure of the pipeline waits);
  - ratios are measured over predicted; "most wrong" names the stage and part with the
    largest |measured - predicted| of compute, waits and comm, in the text too.
Prints a summary and exits 0, or what differs and exits 1.
"""
import json
import re
import statistics
import sys

run_dir, plan_path, text_path, json_path = sys.argv[1:5]
rows = [json.loads(l) for l in open(run_dir + '/metrics.jsonl')]
record = [r for r in rows if r['type'] == 'run'][-1]
steps = [r for r in rows if r['type'] == 'step']
plan = json.load(open(plan_path))
timing = json.load(open(run_dir + '/timing.json'))
out = json.load(open(json_path))
text = open(text_path).read()
bad = []
PARTS = ('compute', 'waits', 'comm')


def close(a, b, rel=1e-9, abs_=0.0):
    return abs(a - b) <= rel * max(abs(a), abs(b)) + abs_


mesh = record['mesh']
pp, ranks = mesh['pp'], mesh['tp'] * mesh['dp']
if len(out['stages']) != pp or len(timing['stages']) != pp:
    bad.append('%d stages in the output, %d in timing.json, pp %d'
               % (len(out['stages']), len(timing['stages']), pp))
for r, s in enumerate(out['stages']):
    if s['pp_rank'] != r or timing['stages'][r]['pp_rank'] != r:
        bad.append('stage %d: pp_rank %s (timing.json %s)' % (r, s['pp_rank'], timing['stages'][r]['pp_rank']))
    want = plan['stages'][r]['step_parts']
    for k in PARTS:
        if not close(s['predicted'][k + '_ms'], 1e3 * want[k + '_s'], 1e-5):
            bad.append('stage %d predicted %s %s ms, plan CONFIG %s s' % (r, k, s['predicted'][k + '_ms'], want[k + '_s']))
        if not close(s['predicted'][k + '_ms'], 1e3 * record['plan']['stages'][r][k + '_s']):
            bad.append('stage %d predicted %s differs from the run record' % (r, k))
    if not close(s['predicted']['step_ms'], 1e3 * plan['step_s'], 1e-5):
        bad.append('stage %d predicted step %s, plan %s' % (r, s['predicted']['step_ms'], plan['step_s']))
    if not close(sum(s['predicted'][k + '_ms'] for k in PARTS), s['predicted']['step_ms'], 1e-4):
        bad.append('stage %d: compute + waits + comm is not the step' % r)
    t = timing['stages'][r]
    for k in PARTS + ('step',):
        if s['measured'][k + '_ms'] != t[k + '_ms']:
            bad.append('stage %d measured %s %s, timing.json %s' % (r, k, s['measured'][k + '_ms'], t[k + '_ms']))
        p = s['predicted'][k + '_ms']
        if p > 0 and not close(s['ratio'][k], t[k + '_ms'] / p, 1e-9):
            bad.append('stage %d ratio %s' % (r, k))
    if s['measured']['ranks'] != ranks or t['ranks'] != ranks:
        bad.append('stage %d: %s ranks measured, the stage has %d' % (r, s['measured']['ranks'], ranks))
if timing['logged_steps'] != len(steps) or out['measured']['median_of'] != timing['median_of']:
    bad.append('logged_steps %s, %d step lines' % (timing['logged_steps'], len(steps)))
used = [s for s in steps if timing['from_step'] <= s['step'] <= timing['to_step']]
if len(used) != timing['median_of']:
    bad.append('median_of %d, %d step lines from %d to %d'
               % (timing['median_of'], len(used), timing['from_step'], timing['to_step']))
if ranks == 1 and used:  # stage 0 is rank 0, whose step lines these are
    s0 = timing['stages'][0]
    step_ms = statistics.median(s['step_ms'] for s in used)
    if not close(s0['step_ms'], step_ms, 0, 0.0015):
        bad.append('stage 0 step %s ms, the step lines\' median %s' % (s0['step_ms'], step_ms))
    if pp > 1:
        waits = statistics.median(s['bubble'] * s['step_ms'] for s in used)
        if not close(s0['waits_ms'], waits, 0, 0.002 + 1e-4 * step_ms):
            bad.append('stage 0 waits %s ms, the step lines\' bubble x step_ms %s' % (s0['waits_ms'], waits))
# The stage and part the prediction is furthest off.
err = [(abs(s['measured'][k + '_ms'] - s['predicted'][k + '_ms']), r, k)
       for r, s in enumerate(out['stages']) for k in PARTS]
_, wr, wk = max(err)
mw = out['most_wrong']
if (mw['pp_rank'], mw['part']) != (wr, wk):
    bad.append('most_wrong %s, expected stage %d %s' % (mw, wr, wk))
if "most wrong: stage %d's %s," % (wr, wk) not in text:
    bad.append('the text does not name stage %d %s as most wrong' % (wr, wk))
table = [int(m.group(1)) for m in re.finditer(r'(?m)^(\d+) +\d', text)]
if table != list(range(pp)):
    bad.append('text table rows %s, expected stages 0..%d in order' % (table, pp - 1))
if bad:
    print('; '.join(bad))
    sys.exit(1)
print('%d stages x %d ranks, %d steps; most wrong stage %d %s' % (pp, ranks, timing['median_of'], wr, wk))
