#!/usr/bin/env bash
# tests/test_bf16_route.sh: the bf16 data path where the matmuls write their bf16 outputs
# themselves (backend.h matmul_fwd16 / _bwd16, the CUDA backend's default), run on the CPU
# through TRIDENT_TEST_CPU_BF16_OUT=1: the model routes qkv, the GELU output and input and the
# fc input gradient through the bf16-output ops and drops their fp32 copies, and the LM head
# writes bf16 logits for the fused classifier (model_xent16: xent_stats16, xent_bwd16). The
# CPU's layer ops compute the same fp32 values and round them once, as the fp32 route's
# to_bf16 does; the classifier reads the logits' bf16 rounding, so the routes agree to bf16's
# rounding of the logits (measured: loss 1e-5, parameters 3e-3 after 6 steps), not bitwise.
# The arenas must shrink, as planned. Over tp 2 the fused classifier rescales each rank's sums
# to the global maximum before summing them: its loss must match one rank's to float rounding.
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
    match_reference "bf16 outputs and bf16 logits ~ fp32 outputs rounded after ($layout)" \
        "$W/${layout}_v1" "$W/${layout}_direct" loss=1e-3 val=1e-3 norm=5e-3 param=2e-2
    read -r b_v1 p_v1 <<<"$(mem ${layout}_v1)"
    read -r b_dir p_dir <<<"$(mem ${layout}_direct)"
    if [ "$p_v1 $p_dir" = "planned planned" ] && [ "$b_dir" -lt "$b_v1" ]; then
        pass "bf16 outputs: arenas $b_v1 -> $b_dir bytes of activations + scratch, as planned ($layout)"
    else
        fail "bf16 outputs: arenas ($layout)" "$b_v1 ($p_v1) -> $b_dir ($p_dir)"
    fi
done

# The fused classifier over tp 2 (local maxima all-reduced, each rank's sums rescaled to them)
# against one rank's: the step-1 loss is the same function of the same parameters.
match_reference "fused classifier: tp 2 (rescaled sums) = one rank" "$W/single_direct" \
    "$W/tp2_sp_direct" loss=1e-4 val=1e-4 steps=6

# Recompute keeps the layers' fp32 route (model_bf16_direct) but takes the fused classifier
# (model_xent16): under the hook the arenas shrink by the logits' half and mm16's head chunk.
route rc_v1 1 0 --set parallel.recompute=full
route rc_direct 1 1 --set parallel.recompute=full
read -r b_v1 p_v1 <<<"$(mem rc_v1)"
read -r b_dir p_dir <<<"$(mem rc_direct)"
if [ "$p_v1 $p_dir" = "planned planned" ] && [ "$b_dir" -lt "$b_v1" ]; then
    pass "bf16 with recompute: the fused classifier only, arenas $b_v1 -> $b_dir, as planned"
else
    fail "bf16 with recompute: arenas" "$b_v1 ($p_v1) -> $b_dir ($p_dir)"
fi
match_reference "bf16 with recompute: the fused classifier ~ the fp32 logits" "$W/rc_v1" \
    "$W/rc_direct" loss=1e-3 val=1e-3 norm=5e-3 param=2e-2
match_reference "bf16 with recompute = without, under the hook" "$W/single_direct" \
    "$W/rc_direct" bitwise types=step,eval
exit $((fails > 0))
