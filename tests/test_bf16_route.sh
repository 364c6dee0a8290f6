#!/usr/bin/env bash
# tests/test_bf16_route.sh: the bf16 data path where the matmuls write their bf16 outputs
# themselves (backend.h matmul_fwd16 / _bwd16, the CUDA backend's default), run on the CPU
# through TRIDENT_TEST_CPU_BF16_OUT=1: the model routes qkv, the GELU output and input and the
# fc input gradient through the bf16-output ops and drops their fp32 copies. The CPU's ops
# compute the same fp32 values and round them once, as the fp32 route's to_bf16 does, so the
# two routes must agree bitwise; the arenas must shrink by exactly the fp32 copies, as planned.
source "$(dirname "$0")/lib.sh"
RUN=(--set train.steps=6 --set train.micro_batch=2 --set train.global_batch=4
     --set system.threads=1 --set train.precision=bf16 --set data.eval_every=3)

route() { # name np env [--set ...]: one run into $W/name
    local name=$1 np=$2 hook=$3
    shift 3
    local launch=()
    [ "$np" -gt 1 ] && launch=("${MPIRUN[@]}" -x TRIDENT_TEST_CPU_BF16_OUT -np "$np")
    TRIDENT_TEST_CPU_BF16_OUT=$hook timeout 120 "${launch[@]}" "$T" train $CFG "${RUN[@]}" \
        --set run.out_dir="$W/$name" "$@" >"$W/$name.log" 2>&1 ||
        fail "bf16 route $name runs" "exit $?: $(tail -3 "$W/$name.log")"
}

# memory NAME: activation and scratch bytes carved, and whether they equal the plan's
mem() {
    /usr/bin/python3 - "$W/$1/metrics.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
m, p = r["memory"], r["memory_planned"]
print(m["activation_bytes"] + m["scratch_bytes"], "planned" if m == p else "unplanned")
PY
}

for layout in single tp2_sp; do
    np=1 extra=()
    [ $layout = tp2_sp ] && np=2 extra=(--set parallel.tp=2 --set parallel.sequence_parallel=true)
    route ${layout}_v1 $np 0 "${extra[@]}"
    route ${layout}_direct $np 1 "${extra[@]}"
    match_reference "bf16 outputs written by the matmuls = fp32 outputs rounded after ($layout)" \
        "$W/${layout}_v1" "$W/${layout}_direct" bitwise types=step,eval
    read -r b_v1 p_v1 <<<"$(mem ${layout}_v1)"
    read -r b_dir p_dir <<<"$(mem ${layout}_direct)"
    if [ "$p_v1 $p_dir" = "planned planned" ] && [ "$b_dir" -lt "$b_v1" ]; then
        pass "bf16 outputs: arenas $b_v1 -> $b_dir bytes of activations + scratch, as planned ($layout)"
    else
        fail "bf16 outputs: arenas ($layout)" "$b_v1 ($p_v1) -> $b_dir ($p_dir)"
    fi
done

# Recompute keeps the fp32 route (model_bf16_direct): the same arenas with the hook as without.
route rc_v1 1 0 --set parallel.recompute=full
route rc_direct 1 1 --set parallel.recompute=full
if [ "$(mem rc_v1)" = "$(mem rc_direct)" ]; then
    pass "bf16 with recompute keeps the fp32 route: $(mem rc_direct)"
else
    fail "bf16 with recompute keeps the fp32 route" "$(mem rc_v1) vs $(mem rc_direct)"
fi
match_reference "bf16 with recompute: the same bits under the hook" "$W/rc_v1" "$W/rc_direct" \
    bitwise types=step,eval
exit $((fails > 0))
