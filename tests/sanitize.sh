#!/usr/bin/env bash
# tests/sanitize.sh BUILD: what `make test-asan` runs on a SAN=1 build (AddressSanitizer and
# UndefinedBehaviorSanitizer, every report fatal): the unit tests, a single-process run, a
# tp2 x pp2 run, a checkpoint and its resume on another layout, plan (text, JSON, --search),
# sample and both exports. A case passes when it exits as expected and no sanitizer reported
# anything. Leaks are checked in every single-process case (LeakSanitizer, with the MPI and
# PMIx libraries' own allocations suppressed); under mpirun OpenMPI's plugins, unloaded at
# exit, leave leaks no suppression can name, so the multi-rank cases run without it.
set -u
source "$(dirname "$0")/lib.sh"
B=${1:-build-san}
T=$B/trident
export OPENBLAS_NUM_THREADS=1
printf 'leak:libmpi\nleak:libopen-pal\nleak:libopen-rte\nleak:libpmix\nleak:libhwloc\nleak:libevent\nleak:libgomp\nleak:libopenblas\n' >$W/lsan.supp
export LSAN_OPTIONS=suppressions=$W/lsan.supp
SAN_LEAKS=detect_leaks=1:abort_on_error=0:halt_on_error=1
SAN_NO_LEAKS=detect_leaks=0:abort_on_error=0:halt_on_error=1
MPISAN=("${MPIRUN[@]}" -x ASAN_OPTIONS=$SAN_NO_LEAKS -x UBSAN_OPTIONS)
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
COMMON=(--set train.steps=6 --set system.threads=1 --set data.eval_every=3)

# check NAME WANT_RC CMD...: runs CMD, passes when its exit code is WANT_RC and its output
# holds no sanitizer report.
check() {
    local name=$1 want=$2
    shift 2
    "$@" >$W/$name.log 2>&1
    local rc=$?
    if grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer" $W/$name.log; then
        fail "san_$name" "$(grep -m3 -E "ERROR:|runtime error:|SUMMARY:" $W/$name.log | tr '\n' ' ')"
    elif [ $rc != "$want" ]; then
        fail "san_$name" "exit $rc, want $want: $(tail -2 $W/$name.log | tr '\n' ' ')"
    else
        pass "san_$name"
    fi
}

export ASAN_OPTIONS=$SAN_LEAKS
for t in $B/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    check "unit_$(basename $t)" 0 "$t"
done
check train_1proc 0 $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/one --set checkpoint.dir=$W/ck \
    --set log.tensorboard=$W/one/tb
check resume_1proc 0 $T train $CFG "${COMMON[@]}" --set train.steps=8 --set run.out_dir=$W/one \
    --set checkpoint.dir=$W/ck --set log.tensorboard=$W/one/tb
check plan_text 0 $T plan configs/plan-70b.yaml --world 512
check plan_json 0 $T plan configs/plan-70b.yaml --world 512 --device h200 --json
check plan_search 0 $T plan configs/plan-70b.yaml --world 64 --search --top 3
check sample_run 0 $T sample $W/one --tokens 16 --prompt "And"
check sample_ckpt 0 $T sample $W/ck --tokens 16
check export_llmc 0 $T export $W/ck --format llmc --out $W/e.bin
check export_safetensors 0 $T export $W/ck --format safetensors --out $W/e.safetensors
check check_bad_key 2 $T check $CFG --set model.n_layers=3
# issue 15 defect 1: a layer count whose products pass an int, refused before any buffer
check plan_huge_layers 2 $T plan $CFG --world 1 --set model.n_layer=357913942
check train_huge_width 2 $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/huge --set model.d_model=1073741824 \
    --set model.n_head=1
check train_bad_data 3 $T train $CFG "${COMMON[@]}" --set run.out_dir=$W/bad --set "data.train=$W/none_*.bin"
# tokenize's readers: the seeded fuzzers (each case fails on a sanitizer report in its stderr)
/usr/bin/python3 tests/tokenize_fixture.py $W/tokenizer.json
check tokenize_kjv 0 $T tokenize --tokenizer $W/tokenizer.json --out $W/tok/kjv --threads 2 data/kjv.txt
check tokenize_fuzz 0 /usr/bin/python3 tests/fuzz_tokenizer.py $B/tests/fork_tokenize $W/fuzz --cases 100

export ASAN_OPTIONS=$SAN_NO_LEAKS
check train_tp2_pp2 0 "${MPISAN[@]}" -np 4 $T train $CFG "${COMMON[@]}" --set parallel.tp=2 \
    --set parallel.pp=2 --set run.out_dir=$W/tp2pp2 --set checkpoint.dir=$W/ck4
check resume_dp2_zero3 0 "${MPISAN[@]}" -np 2 $T train $CFG "${COMMON[@]}" --set train.steps=8 \
    --set parallel.zero=3 --set run.out_dir=$W/dp2 --set checkpoint.dir=$W/ck4
check comm_test 0 "${MPISAN[@]}" -np 4 $T comm-test --world-shape 2,2,1 --iters 1
[ $fails = 0 ]
