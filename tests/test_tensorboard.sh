#!/usr/bin/env bash
# tests/test_tensorboard.sh: watching a run (README "Watching a run").
#   - log.tensorboard read back by TensorBoard's own reader (PyPI tensorboard, installed here
#     into build/venv-tb by scripts/venv.sh, kept for the next run) equals metrics.jsonl, scalar for
#     scalar (tests/tb_check.py), for one process, a pipelined 2-rank run and a run resumed
#     twice (from an older checkpoint, whose later steps it rewrites, then with the resume
#     command the end of the run prints);
#   - an event directory that cannot be made stops the run at start (exit 4, key named);
#   - the step line's MFU, elapsed time and ETA; the end-of-run report's paths, and its
#     sample, export and resume commands run as printed;
#   - scripts/plot.py draws a resumed run and two runs to PNGs of the size asked for.
source "$(dirname "$0")/lib.sh"
COMMON=(--set train.steps=12 --set log.every=2 --set data.eval_every=4 --set system.threads=1)

# TensorBoard in a venv over Debian's python3 (scripts/venv.sh: made once, kept in build/)
if ! VENV=$(scripts/venv.sh tb tensorboard==2.21.0 2>$W/venv.log); then
    fail tb_venv "$(head -c 600 $W/venv.log | tr '\n' ' ')"
    exit 1
fi
echo "tensorboard $("$VENV/bin/python" -c 'import tensorboard; print(tensorboard.__version__)') in $VENV"

train() { # name log [trident train arguments...]: one run; fails the test when it fails
    local name=$1 log=$2
    shift 2
    if ! "$@" >"$log" 2>&1; then
        fail "$name" "the run failed: $(tail -3 "$log" | tr '\n' ' ')"
        return 1
    fi
}

# One process; a pipelined run on 2 ranks (rank 0 writes); a run resumed from the checkpoint
# of step 6 after it had logged up to 12 (TensorBoard must show the second run's steps 7-12),
# then resumed again at its end by the command it prints.
train tb_single_run $W/single.log $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/single \
    --set log.tensorboard=$W/single/tb
train tb_pp_run $W/pp.log "${MPIRUN[@]}" -np 2 $T train $CFG "${COMMON[@]}" --set parallel.pp=2 \
    --set run.out_dir=$W/pp --set log.tensorboard=$W/pp/tb
RES=("${COMMON[@]}" --set run.out_dir=$W/res --set log.tensorboard=$W/res/tb --set checkpoint.every=6)
train tb_resume_run_a $W/resA.log $T train $CFG "${RES[@]}" --set checkpoint.dir=$W/ckA
train tb_resume_run_b $W/resB.log $T train $CFG "${RES[@]}" --set checkpoint.dir=$W/ckB \
    --set checkpoint.resume=$W/ckA/step_00000006 --set train.steps=16
resume_cmd=$(sed -n 's/^  resume       //p' $W/resB.log)
if [ -n "$resume_cmd" ] && train tb_printed_resume $W/resC.log bash -c "$resume_cmd" &&
    grep -q "^resumed from $W/ckB/step_00000016" $W/resC.log && grep -q "^done: 16 steps" $W/resC.log; then
    pass "tb_printed_resume_command_resumes $(grep -c '"type":"run"' $W/res/metrics.jsonl) segments"
else fail tb_printed_resume_command_resumes "command: ${resume_cmd:-none printed}; $(tail -2 $W/resC.log 2>/dev/null | tr '\n' ' ')"; fi

# TensorBoard's reader against metrics.jsonl, every scalar of every logged step.
"$VENV/bin/python" tests/tb_check.py \
    tb_single_equals_metrics $W/single/tb $W/single/metrics.jsonl files=1 \
    tags=loss,lr,grad_norm,tokens,tokens_per_s,mfu,mem_peak_bytes,comm_bytes/tp,comm_bytes/pp,comm_bytes/dp,val_loss \
    tb_pipelined_equals_metrics $W/pp/tb $W/pp/metrics.jsonl files=1 tags=bubble,bubble_formula \
    tb_resumed_equals_metrics $W/res/tb $W/res/metrics.jsonl files=3 resumed=6,16 ||
    fails=$((fails + 1))

# An event directory under a regular file: exit 4 at start, the key and the path named.
: >$W/afile
$T train $CFG "${COMMON[@]}" --set run.out_dir=$W/bad --set log.tensorboard=$W/afile/tb >$W/bad.log 2>&1
rc=$?
if [ $rc = 4 ] && grep -q "error: log.tensorboard: cannot create directory $W/afile/tb" $W/bad.log &&
    grep -q "HINT:" $W/bad.log && ! grep -q "^step " $W/bad.log; then pass tb_unwritable_dir_exit4
else fail tb_unwritable_dir_exit4 "exit $rc: $(head -3 $W/bad.log | tr '\n' ' ')"; fi

# The step line: the fields it had, then MFU, elapsed time and ETA.
re='^step +[0-9]+/12 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| norm [0-9.]+ \| [0-9.]+ ms \| [0-9]+ tok/s \| MFU [0-9.]+% \| [0-9:]+s? elapsed, ETA [0-9:]+s?( \| [0-9.]+x plan)?$'
n_lines=$(grep -c '^step .*tok/s' $W/single.log)
if [ "$n_lines" = 7 ] && [ "$(grep -cE "$re" $W/single.log)" = 7 ] &&
    grep -qE '^step +12/12 .*, ETA 0s( \| [0-9.]+x plan)?$' $W/single.log; then pass "tb_step_line_mfu_elapsed_eta $(grep -m1 '^step    12/' $W/single.log)"
else fail tb_step_line_mfu_elapsed_eta "$n_lines step lines, e.g. $(grep -m1 '^step .*tok/s' $W/single.log)"; fi
if grep -qE '^step +[0-9]+/12 .* ETA [0-9:]+s? \| bubble [0-9.]+ \(formula' $W/pp.log; then pass tb_step_line_pipelined
else fail tb_step_line_pipelined "$(grep -m1 '^step .*tok/s' $W/pp.log)"; fi

# The end of a run: its outputs, and next commands that work as printed.
if grep -qx "  model        $W/single/model.bin" $W/single.log &&
    grep -qx "  metrics      $W/single/metrics.jsonl" $W/single.log &&
    grep -qx "  tensorboard  $W/single/tb (tensorboard --logdir $W/single/tb)" $W/single.log &&
    grep -q "^  checkpoint   none (checkpoint.dir is null" $W/single.log &&
    grep -qx "  checkpoint   $W/ckB/step_00000016" $W/resB.log; then pass tb_end_report_outputs
else fail tb_end_report_outputs "$(sed -n '/^outputs:/,$p' $W/single.log | tr '\n' '|')"; fi
sample_cmd=$(sed -n 's/^  sample       //p' $W/single.log)
export_cmd=$(sed -n 's/^  export       //p' $W/single.log)
if [ -n "$sample_cmd" ] && bash -c "$sample_cmd" >$W/sample.out 2>&1 && [ -s $W/sample.out ] &&
    [ -n "$export_cmd" ] && bash -c "$export_cmd" >$W/export.out 2>&1 &&
    [ -s $W/single/model.safetensors ] && ! grep -q "^  resume" $W/single.log; then
    pass tb_end_report_commands_run
else fail tb_end_report_commands_run "sample: $sample_cmd; export: $export_cmd; $(tail -2 $W/export.out 2>/dev/null)"; fi

# plot.py's join: the resumed run restarts at steps 7 and 17 and keeps every logged step once;
# in a file whose second segment (resumed at 4) repeats steps 5-6, the second segment's
# values win and step 8 of the first is gone.
cat >$W/overlap.jsonl <<'EOF'
{"type":"run"}
{"type":"step","step":2,"loss":3.0}
{"type":"step","step":4,"loss":2.0}
{"type":"step","step":6,"loss":1.0}
{"type":"step","step":8,"loss":0.5}
{"type":"run","resumed_from_step":4}
{"type":"step","step":6,"loss":1.5}
EOF
join=$(/usr/bin/python3 - $W/res $W/res/metrics.jsonl $W/overlap.jsonl 2>&1 <<'PY'
import json, sys
sys.path.insert(0, "scripts")
import plot
_, run = plot.read_run(sys.argv[1])
lines = [json.loads(l) for l in open(sys.argv[2])]
logged = sorted(r["step"] for r in lines if r["type"] == "step")
_, ov = plot.read_run(sys.argv[3])
print("ok" if run["restarts"] == [7, 17] and sorted(run["step"]) == logged and
      {s: r["loss"] for s, r in ov["step"].items()} == {2: 3.0, 4: 2.0, 6: 1.5} and
      ov["restarts"] == [5] else f"restarts {run['restarts']}, steps {sorted(run['step'])} "
      f"(metrics.jsonl {logged}), overlap {ov}")
PY
)
if [ "$join" = ok ]; then pass tb_plot_joins_restarts; else fail tb_plot_joins_restarts "$join"; fi

# plot.py: the resumed run (three segments joined) and two runs together, to PNGs of the
# stated size (the PNG signature, then IHDR's width and height).
png_size() {
    /usr/bin/python3 -c 'import struct, sys
d = open(sys.argv[1], "rb").read(24)
print("%dx%d" % struct.unpack(">II", d[16:24]) if d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR" else "not a PNG")' "$1" 2>&1
}
if /usr/bin/python3 scripts/plot.py $W/res --out $W/res.png --size 640x480 >$W/plot.log 2>&1 &&
    [ "$(png_size $W/res.png)" = 640x480 ] &&
    /usr/bin/python3 scripts/plot.py $W/single $W/res/metrics.jsonl --out $W/two.png >>$W/plot.log 2>&1 &&
    [ "$(png_size $W/two.png)" = 1200x800 ]; then pass "tb_plot_png $(tr '\n' ' ' <$W/plot.log)"
else fail tb_plot_png "$(tail -3 $W/plot.log | tr '\n' ' ') $(png_size $W/res.png 2>&1)"; fi
[ -n "${TB_KEEP:-}" ] && cp -r $W "$TB_KEEP" # for a look at the runs and plots
[ $fails = 0 ]
