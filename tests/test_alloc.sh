#!/usr/bin/env bash
# tests/test_alloc.sh: running out of memory ends a run with exit 1 and a message naming the
# bytes and what they were for (issue 15, defect 9: it was abort(), exit 134), and in a job of
# several ranks it ends every rank at once instead of leaving the others in a collective until
# the comm timeout.
#   - the rank's arenas past the process's address space (ulimit -v, RLIMIT_AS): a config whose
#     arenas need about 4 GB under a 2 GiB limit: "out of cpu memory: activation_bytes needs N
#     bytes";
#   - a host allocation past TRIDENT_TEST_HOST_ALLOC_LIMIT (a test hook: deterministic where a
#     limit of the address space depends on the libraries mapped): "out of host memory: N
#     bytes ... for the parameter table";
#   - both on rank 1 of 2 only, with a comm timeout of 300 s: the job ends with exit 1 in
#     seconds.
set -u
source "$(dirname "$0")/lib.sh"

# expect NAME CODE SECONDS PATTERN CMD...: exit code CODE within SECONDS, output matching
# PATTERN.
expect() {
    local name=$1 code=$2 limit=$3 pattern=$4
    shift 4
    local t0=$SECONDS
    "$@" >"$W/out" 2>&1
    local rc=$? dt=$((SECONDS - t0))
    if [ $rc != "$code" ]; then fail "$name" "exit $rc, expected $code: $(grep -E 'error|HINT' "$W/out" | head -3 | tr '\n' ' ')"
    elif [ $dt -gt "$limit" ]; then fail "$name" "took $dt s, more than $limit"
    elif ! grep -qE -- "$pattern" "$W/out"; then fail "$name" "output lacks /$pattern/: $(tail -n 3 "$W/out" | tr '\n' ' ')"
    else pass "$name ($dt s)"; fi
}

# Arenas of about 3.6 GB (`trident plan`: 256 sequences of 256 tokens at d_model 256 on the
# CPU backend, whose attention keeps its probabilities), a small model: the activation arena
# is refused by the address-space limit before anything is touched. (Running processes map
# about 1.4 GB of libraries.)
BIG=(--set model.d_model=256 --set model.n_head=4 --set model.seq_len=256 --set train.micro_batch=256
     --set train.global_batch=256 --set train.steps=1 --set data.eval_every=0 --set system.threads=1
     --set system.backend=cpu --set system.comm_timeout_s=${ALLOC_TEST_TIMEOUT_S:-300})
LIMIT='ulimit -v 2097152'
expect alloc_arena_past_rlimit_as 1 60 "out of cpu memory: activation_bytes needs [0-9]+ bytes" \
    bash -c "$LIMIT"' && exec "$@"' _ $T train $CFG "${BIG[@]}" --set run.out_dir=$W/a

# 87,000 layers of d_model 2: a parameter table of 1,044,004 entries (142 MB), within the size
# rules; the host refuses it.
TABLE=(--set model.n_layer=87000 --set model.d_model=2 --set model.n_head=1)
expect alloc_host_check 1 30 "out of host memory: [0-9]+ bytes \(.*\) for the parameter table" \
    env TRIDENT_TEST_HOST_ALLOC_LIMIT=1000000 $T check $CFG "${TABLE[@]}"
expect alloc_host_plan 1 30 "out of host memory: [0-9]+ bytes .* for the parameter table" \
    env TRIDENT_TEST_HOST_ALLOC_LIMIT=1000000 $T plan $CFG "${TABLE[@]}"
expect alloc_host_fits_without_limit 0 60 "valid for a world of 1" $T check $CFG "${TABLE[@]}"

# Rank 1 of 2 out of memory, rank 0 not: rank 0 would wait in its first tp collective for the
# comm timeout (300 s) and exit 5; the abort ends both at once, with exit 1.
cat >$W/rank1.sh <<'EOF'
#!/usr/bin/env bash
# Runs "$@", on rank 1 under $RANK1 (a shell command: a limit).
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then eval "$RANK1"; fi
exec "$@"
EOF
chmod +x $W/rank1.sh
expect alloc_one_rank_arena_ends_the_job 1 90 "\[r1 .*out of cpu memory: activation_bytes" \
    env RANK1="$LIMIT" "${MPIRUN[@]}" -x RANK1 -np 2 $W/rank1.sh \
    $T train $CFG "${BIG[@]}" --set parallel.tp=2 --set train.micro_batch=512 \
    --set train.global_batch=512 --set run.out_dir=$W/b
expect alloc_one_rank_host_ends_the_job 1 90 "\[r1 .*out of host memory: [0-9]+ bytes" \
    env RANK1='export TRIDENT_TEST_HOST_ALLOC_LIMIT=20000' "${MPIRUN[@]}" -x RANK1 -np 2 \
    $W/rank1.sh $T train $CFG --set parallel.tp=2 --set system.threads=1 \
    --set system.comm_timeout_s=${ALLOC_TEST_TIMEOUT_S:-300} --set run.out_dir=$W/c
[ $fails = 0 ]
