#!/usr/bin/env bash
# Checkpoints (DESIGN.md "Files"): bitwise resume on the same layout (one process and 4 ranks,
# sync and async writes alike), resharding tp2 pp2 dp2 zero1 -> tp1 pp4 dp2 zero3
# (interleaved) -> tp2 pp2 zero0 (zbv: the V placement, rank 0 holding both ends) -> 1 process
# against the unchanged layout, exports of any
# checkpoint, checkpoint.keep, preemption by SIGUSR1 / SIGTERM, and damaged checkpoints
# (truncated, corrupted, missing rank file, another model's manifest, kill -9 during writes).
set -u
source "$(dirname "$0")/lib.sh"

# same_steps A B [FROM]: the step and eval lines of B (from step FROM on, default 1) equal
# A's apart from the timing fields and mem_peak_bytes, and B has no step or eval line A lacks
# (model.bin is compared apart).
same_steps() {
    /usr/bin/python3 tests/parity.py "$1" "$2" bitwise types=step,eval ignore=mem_peak_bytes \
        from=${3:-1} model=no
}

# --- bitwise resume, one process: 20 steps vs stopped at 10 and resumed -----------------
ONE=(--set train.steps=20 --set checkpoint.every=10 --set log.every=1 --set data.eval_every=5)
$T train $CFG "${ONE[@]}" --set run.out_dir=$W/r20 --set checkpoint.dir=$W/c20 >$W/r20.log 2>&1
$T train $CFG "${ONE[@]}" --set run.out_dir=$W/r20s --set checkpoint.dir=$W/c20s --set checkpoint.async=false >$W/r20s.log 2>&1
mkdir -p $W/r10 && cp $W/r20/metrics.jsonl $W/r10/ # the resumed run keeps steps 1-10 of it
$T train $CFG "${ONE[@]}" --set run.out_dir=$W/r10 --set checkpoint.dir=$W/c10 \
    --set checkpoint.resume=$W/c20/step_00000010 >$W/r10.log 2>&1
if out=$(same_steps $W/r20 $W/r10) && cmp -s $W/r20/model.bin $W/r10/model.bin &&
    grep -q "resumed from $W/c20/step_00000010: step 10" $W/r10.log; then pass "ckpt_resume_bitwise_1proc $out"
else fail ckpt_resume_bitwise_1proc "$out $(tail -2 $W/r10.log | tr '\n' ' ')"; fi
nodir() { grep -v '^    out_dir:\|^    dir:\|^    async:\|^manifest_crc32c:' "$1"; } # the seal covers those lines
if cmp -s $W/c20/step_00000010/rank_00000.bin $W/c20s/step_00000010/rank_00000.bin &&
    cmp -s <(nodir $W/c20/step_00000020/manifest.yaml) <(nodir $W/c20s/step_00000020/manifest.yaml); then
    pass ckpt_async_equals_sync
else fail ckpt_async_equals_sync "rank files or manifests differ"; fi
if grep -q "ckpt blocked [0-9.]* ms (async)" $W/r20.log && grep -q '"type":"checkpoint","step":10' $W/r20/metrics.jsonl &&
    [ "$(cat $W/c20/latest)" = step_00000020 ]; then pass ckpt_step_line_blocked_time
else fail ckpt_step_line_blocked_time "$(grep ckpt $W/r20.log | head -2)"; fi

# --- bitwise resume, 4 ranks (tp2 dp2 zero2) -------------------------------------------
FOUR=("${ONE[@]}" --set parallel.tp=2 --set parallel.zero=2 --set system.threads=1)
"${MPIRUN[@]}" -np 4 $T train $CFG "${FOUR[@]}" --set run.out_dir=$W/m20 --set checkpoint.dir=$W/cm >$W/m20.log 2>&1
mkdir -p $W/m10 && cp $W/m20/metrics.jsonl $W/m10/
"${MPIRUN[@]}" -np 4 $T train $CFG "${FOUR[@]}" --set run.out_dir=$W/m10 --set checkpoint.dir=$W/cm10 \
    --set checkpoint.resume=$W/cm/step_00000010 >$W/m10.log 2>&1
if out=$(same_steps $W/m20 $W/m10) && cmp -s $W/m20/model.bin $W/m10/model.bin; then pass "ckpt_resume_bitwise_tp2_dp2_zero2 $out"
else fail ckpt_resume_bitwise_tp2_dp2_zero2 "$out $(tail -2 $W/m10.log | tr '\n' ' ')"; fi
n_files=$(ls $W/cm/step_00000010/rank_*.bin | wc -l)
if [ "$n_files" = 4 ] && ! ls $W/cm/step_00000010/*.idx >/dev/null 2>&1; then pass ckpt_one_file_per_rank
else fail ckpt_one_file_per_rank "$n_files rank files"; fi

# --- resharding: every region once, any layout loads it -------------------------------
RS=(--set train.steps=20 --set train.micro_batch=2 --set train.global_batch=16 --set system.threads=1
    --set model.n_layer=8 --set model.n_head=4 --set model.vocab_size=250 --set model.vocab_pad_to=128
    --set data.eval_every=0 --set checkpoint.every=5 --set checkpoint.keep=10)
"${MPIRUN[@]}" -np 8 $T train $CFG "${RS[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.zero=1 \
    --set run.out_dir=$W/A --set checkpoint.dir=$W/cA >$W/A.log 2>&1
"${MPIRUN[@]}" -np 8 $T train $CFG "${RS[@]}" --set parallel.pp=4 --set parallel.zero=3 --set parallel.schedule=interleaved \
    --set parallel.virtual_stages=2 --set run.out_dir=$W/B --set checkpoint.dir=$W/cB \
    --set checkpoint.resume=$W/cA/step_00000005 >$W/B.log 2>&1
"${MPIRUN[@]}" -np 4 $T train $CFG "${RS[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=zbv \
    --set parallel.virtual_stages=2 --set parallel.zero=0 --set run.out_dir=$W/C \
    --set checkpoint.dir=$W/cC --set checkpoint.resume=$W/cB/step_00000010 >$W/C.log 2>&1
$T train $CFG "${RS[@]}" --set run.out_dir=$W/D --set checkpoint.dir=$W/cD --set checkpoint.resume=$W/cC/step_00000015 >$W/D.log 2>&1
if out=$(/usr/bin/python3 - $W <<'PY'
import json, sys
W = sys.argv[1]
def steps(d):
    return {r['step']: r for r in map(json.loads, open(W + '/' + d + '/metrics.jsonl')) if r['type'] == 'step'}
A, worst, ok = steps('A'), 0.0, True
for d, first, last in (('B', 6, 10), ('C', 11, 15), ('D', 16, 20)):
    s = steps(d)
    ok &= sorted(s)[0] == first and all(s[k]['tokens'] == A[k]['tokens'] for k in range(first, 21))
    worst = max([worst] + [abs(s[k]['loss'] - A[k]['loss']) / A[k]['loss'] for k in range(first, last + 1)])
print('max rel loss err %.2e over steps 6-20 on 3 other layouts' % worst)
sys.exit(0 if ok and worst <= 1e-5 else 1)
PY
); then pass "ckpt_reshard_chain $out"; else fail ckpt_reshard_chain "$out $(tail -1 $W/D.log)"; fi
# zbv's own checkpoint resumed on its layout: bitwise the uninterrupted run's model.
"${MPIRUN[@]}" -np 4 $T train $CFG "${RS[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.schedule=zbv \
    --set parallel.virtual_stages=2 --set parallel.zero=0 --set run.out_dir=$W/C2 \
    --set checkpoint.resume=$W/cC/step_00000015 >$W/C2.log 2>&1
if cmp -s $W/C/model.bin $W/C2/model.bin; then pass ckpt_zbv_resume_bitwise
else fail ckpt_zbv_resume_bitwise "$(tail -2 $W/C2.log | tr '\n' ' ')"; fi
if grep -q "mesh: {world: 8, tp: 2, pp: 2, dp: 2" $W/cA/step_00000005/manifest.yaml &&
    ! grep -h "tensor: " $W/cA/step_00000020/manifest.yaml | sed 's/, file: .*//' | sort | uniq -d | grep -q .; then
    pass ckpt_no_region_twice
else fail ckpt_no_region_twice "a region is stored twice"; fi

# --- exports from any checkpoint --------------------------------------------------------
$T export $W/cA --format llmc --out $W/eA.bin >$W/e.log 2>&1
$T export $W/cD/step_00000020 --format llmc --out $W/eD.bin >>$W/e.log 2>&1
$T export $W/cB/step_00000010 --format safetensors --out $W/eB.safetensors >>$W/e.log 2>&1
$T export $W/cB/step_00000010 --format llmc --out $W/eB.bin >>$W/e.log 2>&1
if cmp -s $W/eA.bin $W/A/model.bin && cmp -s $W/eD.bin $W/D/model.bin; then pass ckpt_export_llmc_equals_model
else fail ckpt_export_llmc_equals_model "$(tail -2 $W/e.log)"; fi
# trident's own logits of the exported model (ref_dump with model.init_from), against the
# safetensors file read as Hugging Face's GPT-2 would read it.
sed "s|^model: .*|model: {n_layer: 8, n_head: 4, d_model: 32, seq_len: 32, vocab_size: 250, vocab_pad_to: 128, init_from: $W/eB.bin}|" \
    $CFG >$W/eB.yaml
mkdir -p $W/eBdump && build/tests/ref_dump $W/eB.yaml $W/eBdump 1 >$W/eBdump.log 2>&1
/usr/bin/python3 tests/st_gpt2.py $W/eB.safetensors $W/eB.bin $W/eBdump 4 2>&1 |
    sed 's/^PASS /PASS ckpt_export_/; s/^FAIL /FAIL ckpt_export_/'
[ "${PIPESTATUS[0]}" = 0 ] || fails=$((fails + 1))
if $T sample $W/cC --tokens 8 >$W/s.log 2>&1; then pass ckpt_sample # (vocabulary 250, no tokenizer: no prompt)
else fail ckpt_sample "$(tail -2 $W/s.log)"; fi

# --- checkpoint.keep ----------------------------------------------------------------------
$T train $CFG --set train.steps=10 --set checkpoint.every=2 --set checkpoint.keep=2 --set run.out_dir=$W/k \
    --set checkpoint.dir=$W/ck >$W/k.log 2>&1
if [ "$(ls $W/ck | tr '\n' ' ')" = "latest step_00000008 step_00000010 " ]; then pass ckpt_keep
else fail ckpt_keep "left: $(ls $W/ck | tr '\n' ' ')"; fi
# A fresh run (resume: none) in the same directory: its checkpoints are older by step
# number than those there, and are kept anyway; latest names its newest.
$T train $CFG --set train.steps=4 --set checkpoint.every=2 --set checkpoint.keep=2 --set run.out_dir=$W/k2 \
    --set checkpoint.dir=$W/ck --set checkpoint.resume=none >$W/k2.log 2>&1
if [ "$(cat $W/ck/latest)" = step_00000004 ] && [ -f $W/ck/step_00000004/manifest.yaml ]; then pass ckpt_keep_fresh_run
else fail ckpt_keep_fresh_run "latest $(cat $W/ck/latest), left: $(ls $W/ck | tr '\n' ' ')"; fi

# --- preemption: SIGUSR1 to mpirun (passed on to the ranks), SIGTERM to one rank ----------
PRE=(--set train.steps=200 --set checkpoint.every=1000 --set log.every=1 --set data.eval_every=0
     --set parallel.tp=2 --set system.threads=1)
"${MPIRUN[@]}" -np 4 $T train $CFG "${PRE[@]}" --set run.out_dir=$W/full --set checkpoint.dir=$W/cfull >$W/full.log 2>&1
preempt() { # name signal target(mpirun|rank)
    local name=$1 sig=$2 target=$3
    "${MPIRUN[@]}" -np 4 $T train $CFG "${PRE[@]}" --set run.out_dir=$W/$name --set checkpoint.dir=$W/c$name >$W/$name.log 2>&1 &
    local pid=$! i
    for i in $(seq 200); do grep -q "step    20/" $W/$name.log 2>/dev/null && break; sleep 0.05; done
    if [ $target = mpirun ]; then kill -$sig $(pgrep -f "^mpirun .*run.out_dir=$W/$name ")
    else kill -$sig $(pgrep -f "^$T train .*run.out_dir=$W/$name " | tail -1); fi
    wait $pid
    local rc=$?
    local at=$(sed -n 's/^step: //p' $W/c$name/$(cat $W/c$name/latest 2>/dev/null)/manifest.yaml 2>/dev/null)
    "${MPIRUN[@]}" -np 4 $T train $CFG "${PRE[@]}" --set run.out_dir=$W/$name --set checkpoint.dir=$W/c$name >$W/$name.2.log 2>&1
    local out
    if [ $rc = 0 ] && grep -q "stopped by SIG$sig after step" $W/$name.log && [ -n "$at" ] && [ "$at" -lt 200 ] &&
        out=$(same_steps $W/full $W/$name) && grep -q "resumed from .*step $at" $W/$name.2.log; then
        pass "${name} stopped at step $at, resumed: $out"
    else fail $name "rc $rc, checkpoint step '$at': $(grep -h 'stopped\|error' $W/$name.log $W/$name.2.log | head -3 | tr '\n' ' ')"; fi
}
preempt ckpt_preempt_sigusr1_mpirun USR1 mpirun
preempt ckpt_preempt_sigterm_one_rank TERM rank

# --- damaged checkpoints: exit 4, the file and tensor named, nothing overwritten ----------
damaged() { # name pattern setup-command... (EXTRA: more --set arguments for the run)
    local name=$1 pattern=$2; shift 2
    rm -rf $W/bad $W/rbad $W/bad_out; cp -r $W/c20/step_00000010 $W/bad; mkdir -p $W/rbad; echo keep >$W/rbad/metrics.jsonl
    "$@"
    local before=$(cd $W/bad && ls -l --time-style=+%s.%N; md5sum * 2>/dev/null)
    $T train $CFG "${ONE[@]}" --set run.out_dir=$W/rbad --set checkpoint.dir=$W/bad_out \
        --set checkpoint.resume=$W/bad ${EXTRA:-} >$W/bad.log 2>&1
    local rc=$? after=$(cd $W/bad && ls -l --time-style=+%s.%N; md5sum * 2>/dev/null)
    if [ $rc = 4 ] && grep -q -- "$pattern" $W/bad.log && [ "$before" = "$after" ] &&
        [ "$(cat $W/rbad/metrics.jsonl)" = keep ] && [ ! -e $W/bad_out ]; then pass $name
    else fail $name "exit $rc: $(grep -h 'error' $W/bad.log | head -2 | tr '\n' ' ')"; fi
}
damaged ckpt_truncated_rank_file "rank file .*rank_00000.bin is [0-9]* bytes, the manifest says" \
    truncate -s 1000 $W/bad/rank_00000.bin
damaged ckpt_corrupted_byte "checksum mismatch in .*rank_00000.bin: tensor h0.qkvw" \
    /usr/bin/python3 -c "
import re, sys
m = open('$W/bad/manifest.yaml').read()
off = int(re.search(r'tensor: h0.qkvw, kind: param.*byte_offset: (\d+)', m).group(1))
f = open('$W/bad/rank_00000.bin', 'r+b'); f.seek(off + 100); b = f.read(1); f.seek(off + 100); f.write(bytes([b[0] ^ 1]))"
damaged ckpt_missing_rank_file "rank file .*rank_00000.bin is missing" rm $W/bad/rank_00000.bin
EXTRA="--set model.d_model=64" damaged ckpt_other_model \
    "model.d_model 32 -> 64: the checkpoint's tensors are d_model wide" true
damaged ckpt_no_manifest "is not a checkpoint (no manifest.yaml" rm $W/bad/manifest.yaml

# --- edited manifests (issue 15): the seal, every field's range and the regions' tiling ------
# manifest_tool FILE reseal|v1: seals FILE again after an edit (a version 2 or 3 manifest's last
# line is the CRC-32C of the bytes before it), or makes it a version 1 manifest (no seal line,
# no data order: version 3's data_order and data_sources lines out, and the config's
# data.shuffle, a key that came with version 3).
manifest_tool() {
    if [ "$2" = v1 ]; then
        manifest_rewrite "$1" '(data_order:|data_sources:|  - \{path:|    shuffle:)' 1
    else
        manifest_rewrite "$1"
    fi
}
damaged ckpt_manifest_step_negative "manifest.yaml:4: step: -3 is out of range" \
    sed -i 's/^step: 10$/step: -3/' $W/bad/manifest.yaml
damaged ckpt_manifest_samples_edited "tokens: 2560, but samples 88 x config.model.seq_len" \
    sed -i 's/^samples: 80$/samples: 88/' $W/bad/manifest.yaml
damaged ckpt_manifest_optim_t_edited "manifest.yaml:7: optim_t: 7, but step is 10" \
    sed -i 's/^optim_t: 10$/optim_t: 7/' $W/bad/manifest.yaml
damaged ckpt_manifest_truncated "no 'manifest_crc32c: 0x...' line at its end" truncate -s 5000 $W/bad/manifest.yaml
damaged ckpt_manifest_newer_version "format version '4': this trident reads versions 1 to 3" \
    sed -i 's/^version: 3$/version: 4/' $W/bad/manifest.yaml
v1_edit() { manifest_tool $W/bad/manifest.yaml v1 && sed -i 's/^step: 10$/step: 12/' $W/bad/manifest.yaml; }
damaged ckpt_manifest_v1_edited "optim_t: 10, but step is 12" v1_edit
# A version 1 checkpoint (as trident wrote them before the seal, and before data.shuffle: a
# run in plain order) still resumes, bitwise, in its plain order (the config's shuffle aside).
$T train $CFG "${ONE[@]}" --set data.shuffle=false --set run.out_dir=$W/r20p \
    --set checkpoint.dir=$W/c20p >$W/r20p.log 2>&1
rm -rf $W/v1 $W/rv1 && cp -r $W/c20p/step_00000010 $W/v1 && manifest_tool $W/v1/manifest.yaml v1
mkdir -p $W/rv1 && cp $W/r20p/metrics.jsonl $W/rv1/
$T train $CFG "${ONE[@]}" --set run.out_dir=$W/rv1 --set checkpoint.dir=$W/cv1 --set checkpoint.resume=$W/v1 >$W/rv1.log 2>&1
if out=$(same_steps $W/r20p $W/rv1) && cmp -s $W/r20p/model.bin $W/rv1/model.bin &&
    grep -q "format version 1 has no manifest checksum" $W/rv1.log && grep -q "^version: 1$" $W/v1/manifest.yaml &&
    grep -q "was written before data.shuffle: continuing in plain order" $W/rv1.log; then
    pass "ckpt_version1_resumes_bitwise $out"
else fail ckpt_version1_resumes_bitwise "$out $(grep -h error $W/rv1.log | head -2)"; fi
# Issue 15's tp2 case: one region line copied over another and the manifest sealed again, so
# that only the tiling check can see it: refused before a byte is read, on any layout.
rm -rf $W/dup $W/rdup && cp -r $W/cm/step_00000010 $W/dup
/usr/bin/python3 - $W/dup/manifest.yaml <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines(keepends=True)
qkv = [i for i, l in enumerate(lines) if 'tensor: h0.qkvw, kind: param' in l]
lines[qkv[1]] = lines[qkv[0]]  # another rank's rows of h0.qkvw replaced by the first's
open(sys.argv[1], 'w').write(''.join(lines))
PY
manifest_tool $W/dup/manifest.yaml reseal
$T train $CFG "${ONE[@]}" --set run.out_dir=$W/rdup --set checkpoint.dir=$W/cdup --set checkpoint.resume=$W/dup >$W/dup.log 2>&1
rc=$?
if [ $rc = 4 ] && grep -q "manifest.yaml:[0-9]*: regions: h0.qkvw (param): rows .* overlap the region of line" $W/dup.log &&
    [ ! -e $W/cdup ] && ! grep -q "^step " $W/dup.log; then pass "ckpt_tp2_duplicated_region: $(grep -m1 -o 'regions: .*' $W/dup.log)"
else fail ckpt_tp2_duplicated_region "exit $rc: $(grep -h error $W/dup.log | head -2)"; fi

# --- a damaged `latest` (issue 15): the newest complete checkpoint, said why, bitwise --------
for how in empty deleted loop; do
    rm -rf $W/lat $W/rlat && mkdir -p $W/lat $W/rlat && cp -r $W/c20/step_00000010 $W/lat/
    cp $W/r20/metrics.jsonl $W/rlat/ # steps 1-20 of the full run: 11-20 are written again
    case $how in
    empty) : >$W/lat/latest ;;
    deleted) ;;
    loop) ln -s latest $W/lat/latest ;;
    esac
    $T train $CFG "${ONE[@]}" --set run.out_dir=$W/rlat --set checkpoint.dir=$W/lat >$W/lat.log 2>&1
    if out=$(same_steps $W/r20 $W/rlat) && cmp -s $W/r20/model.bin $W/rlat/model.bin &&
        grep -q "warning: checkpoint $W/lat: latest .*; using the newest complete checkpoint, $W/lat/step_00000010" $W/lat.log &&
        grep -q "resumed from $W/lat/step_00000010: step 10" $W/lat.log; then
        pass "ckpt_latest_${how}_resumes_newest $out"
    else fail ckpt_latest_${how}_resumes_newest "$out $(grep -h 'warning\|error' $W/lat.log | head -2)"; fi
done
# Step directories, none complete, no latest: exit 4, never a fresh start over them.
rm -rf $W/inc $W/rinc && mkdir -p $W/inc $W/rinc && cp -r $W/c20/step_00000010 $W/inc/ && rm $W/inc/step_00000010/manifest.yaml
echo keep >$W/rinc/metrics.jsonl
$T train $CFG "${ONE[@]}" --set run.out_dir=$W/rinc --set checkpoint.dir=$W/inc >$W/inc.log 2>&1
rc=$?
if [ $rc = 4 ] && grep -q "checkpoint.dir $W/inc holds 1 step_N directory but no complete checkpoint" $W/inc.log &&
    [ "$(cat $W/rinc/metrics.jsonl)" = keep ] && [ "$(ls $W/inc | tr '\n' ' ')" = "step_00000010 " ]; then
    pass ckpt_incomplete_checkpoints_no_fresh_start
else fail ckpt_incomplete_checkpoints_no_fresh_start "exit $rc: $(grep -h error $W/inc.log | head -2)"; fi

# --- kill -9 at random moments while checkpoints are being written --------------------
KILL=(--set train.steps=12 --set checkpoint.every=1 --set checkpoint.keep=2 --set log.every=1
      --set data.eval_every=0 --set model.d_model=128 --set model.n_layer=4)
$T train $CFG "${KILL[@]}" --set run.out_dir=$W/kref --set checkpoint.dir=$W/ckref >$W/kref.log 2>&1
killed_ok=0 mid_write=0 detail=
for i in 1 2 3 4 5; do
    TRIDENT_TEST_CKPT_DELAY_MS=15 $T train $CFG "${KILL[@]}" --set run.out_dir=$W/kill --set checkpoint.dir=$W/ckill >$W/kill.$i.log 2>&1 &
    pid=$!
    for j in $(seq 100); do grep -q "^step " $W/kill.$i.log && break; sleep 0.05; done # training
    sleep 0.$((RANDOM % 6))
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    latest=$(cat $W/ckill/latest 2>/dev/null)
    mid_write=$((mid_write + $(ls -d $W/ckill/*.tmp 2>/dev/null | wc -l)))
    if [ -z "$latest" ] || [ -f $W/ckill/$latest/manifest.yaml ]; then killed_ok=$((killed_ok + 1))
    else detail="latest -> $latest has no manifest"; fi
    detail="$detail [kill $i: latest '${latest}', $(ls $W/ckill 2>/dev/null | grep -c tmp) tmp]"
done
$T train $CFG "${KILL[@]}" --set run.out_dir=$W/kill --set checkpoint.dir=$W/ckill >$W/kill.final.log 2>&1
if [ $killed_ok = 5 ] && [ $mid_write -ge 1 ] && out=$(same_steps $W/kref $W/kill) && cmp -s $W/kref/model.bin $W/kill/model.bin &&
    grep -q "checkpoint.dir $W/ckill: taking over the lock of pid" $W/kill.final.log; then
    pass "ckpt_kill9_during_writes $detail; resumed to the end: $out"
else fail ckpt_kill9_during_writes "$detail $out $(tail -2 $W/kill.final.log | tr '\n' ' ')"; fi

echo "checkpoint tests: $fails failed"
[ $fails = 0 ]
