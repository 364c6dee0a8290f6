"""One row of scripts/bench-pipeline.sh: SCHEDULE V METRICS_JSONL CONFIG [STEPS].

Medians over steps 3.. of rank 0's step lines (step_ms, bubble, pass_ms), the unit-time formula
(the mean over ranks), and rank 0's idle in the schedule tables simulated by `trident plan --fbw`
with this run's measured F:B:W (the planner's stage times: the last stage, or zbv's rank 0,
carries the LM head)."""
import json
import statistics
import subprocess
import sys

sched, v, metrics, config = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
steps = [json.loads(l) for l in open(metrics)]
steps = [r for r in steps if r.get('type') == 'step' and r['step'] >= 3]
if not steps:
    sys.exit(f'bench-pipeline: no step lines past step 2 in {metrics}')
med = lambda k: statistics.median(r[k] for r in steps)
passes = {k: statistics.median(r['pass_ms'][k] for r in steps) for k in 'FBW'}
f, b, w = passes['F'], passes['B'], passes['W']
if w == 0:  # an unsplit backward: B holds B + W; the planner's ratios split it as F:B:W 1:1:1
    b, w = b / 2, b / 2
plan = subprocess.run(['build/trident', 'plan', config, '--json', '--set',
                       f'parallel.schedule={sched}', '--set', f'parallel.virtual_stages={v}',
                       '--fbw', f'{f:.6g}:{b:.6g}:{w:.6g}'], capture_output=True, text=True)
sim = json.loads(plan.stdout)['stages'][0]['idle_sim'] if plan.returncode == 0 else float('nan')
print('%-12s %3s %9.1f %7.3f %8.3f %10.3f %8.2f %8.2f %8.2f' %
      (sched, v, med('step_ms'), med('bubble'), steps[-1]['bubble_formula'], sim,
       passes['F'], passes['B'], passes['W']))
