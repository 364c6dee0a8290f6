#!/usr/bin/env bash
# GPU benchmark (issue 9, point 6): trident against PyTorch on one GPU, same shapes, batches
# and token stream, in the same run.
#   scripts/bench-gpu.sh [CONFIG...]   default: configs/bench-gpu-124m.yaml configs/bench-gpu-350m.yaml
# For each config:
#   trident bf16  `trident train CONFIG --set system.backend=cuda --set train.precision=bf16`
#                 (bf16 parameters and stored activations, bf16 tensor-core matmuls with fp32
#                 accumulation, fp32 master weights and Adam state)
#   trident tf32  `--set train.precision=tf32`: fp32 storage, TF32 tensor-core matmuls
#   torch bf16    scripts/bench_gpu_torch.py CONFIG: bf16 autocast, torch.compile,
#                 scaled_dot_product_attention, fused AdamW
# tokens/s is the median of steps 3..N (1-2 are warm-up: cuBLASLt plans, torch.compile).
# MFU = flops_per_token (trident's run record: 6 x matmul parameters + 12 L T C, the same
# model FLOPs for both) x tokens/s / PEAK_TFLOPS (989: dense bf16 of an H100/H200 SXM, the
# issue's yardstick, also for trident's TF32 run). Memory: trident's mem_peak_bytes
# (its allocations) against `trident plan --device h200`'s total, and torch's
# max_memory_allocated. No thresholds: it prints numbers.
# Environment: TRIDENT_BIN (default build/trident), PYTHON (python3 with torch, numpy, yaml),
# STEPS (default: the configs' train.steps), PEAK_TFLOPS (989), BENCH_OUT (runs/bench-gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
T=${TRIDENT_BIN:-build/trident}
PY=${PYTHON:-python3}
PEAK=${PEAK_TFLOPS:-989}
OUTD=${BENCH_OUT:-runs/bench-gpu}
CONFIGS=("$@")
[ ${#CONFIGS[@]} -gt 0 ] || CONFIGS=(configs/bench-gpu-124m.yaml configs/bench-gpu-350m.yaml)
STEP_SET=()
[ -n "${STEPS:-}" ] && STEP_SET=(--set train.steps="$STEPS")
mkdir -p "$OUTD"
echo "bench-gpu: logs and runs in $OUTD" >&2

# Median tokens/s of steps >= 3, the largest mem_peak_bytes and flops_per_token of a run
# directory, as JSON ({} when the run wrote no steps).
summarise() {
    "$PY" - "$1/metrics.jsonl" <<'EOF'
import json, statistics, sys
try:
    recs = [json.loads(l) for l in open(sys.argv[1])]
except OSError:
    print("{}"); sys.exit()
run = next((r for r in recs if r.get("type") == "run"), {})
steps = [r for r in recs if r.get("type") == "step"]
if not steps:
    print("{}"); sys.exit()
timed = [r["tokens_per_s"] for r in steps if r["step"] >= 3] or [r["tokens_per_s"] for r in steps]
print(json.dumps({"tok_s": statistics.median(timed), "tok_s_best": max(timed),
                  "flops_per_token": run.get("flops_per_token"), "backend": run.get("backend"),
                  "mem_peak": max(r.get("mem_peak_bytes", 0) for r in steps),
                  "loss": [steps[0]["loss"], steps[-1]["loss"]]}))
EOF
}

ROWS=()
for cfg in "${CONFIGS[@]}"; do
    name=$(basename "$cfg" .yaml)
    plan=$("$T" plan "$cfg" --device h200 --json 2>/dev/null | tail -n 1)
    [ -n "$plan" ] || plan="{}"
    declare -A res=()
    for mode in bf16 tf32; do
        dir="$OUTD/$name-$mode"
        rm -rf "$dir"
        echo "bench-gpu: $name: trident $mode ..." >&2
        tf32=(env -u TRIDENT_CUDA_TF32) # the key says it (train.precision tf32), not the override
        prec=$mode
        if ! "${tf32[@]}" "$T" train "$cfg" --set system.backend=cuda --set run.out_dir="$dir" \
                --set train.precision=$prec \
                --set log.every=1 "${STEP_SET[@]}" >"$OUTD/$name-$mode.log" 2>&1; then
            echo "bench-gpu: trident $mode failed on $cfg; see $OUTD/$name-$mode.log:" >&2
            tail -n 3 "$OUTD/$name-$mode.log" >&2
        fi
        res[$mode]=$(summarise "$dir")
        echo "bench-gpu: $name: trident $mode ${res[$mode]}" >&2
    done
    echo "bench-gpu: $name: torch (torch.compile takes a minute) ..." >&2
    torch_json=$("$PY" scripts/bench_gpu_torch.py "$cfg" ${STEPS:+--steps "$STEPS"} \
        2>"$OUTD/$name.torch.log" | tail -n 1)
    if [ -z "$torch_json" ]; then
        echo "bench-gpu: bench_gpu_torch.py failed on $cfg; see $OUTD/$name.torch.log:" >&2
        tail -n 3 "$OUTD/$name.torch.log" >&2
        torch_json="{}"
    fi
    echo "bench-gpu: $name: torch $torch_json" >&2
    ROWS+=("$name|${res[bf16]}|${res[tf32]}|$torch_json|$plan")
    unset res
done

"$PY" - "$PEAK" "${ROWS[@]}" <<'EOF'
import json, sys
peak = float(sys.argv[1]) * 1e12
gb = lambda b: f"{b / 1e9:.2f} GB" if b else "-"
hdr = ("config", "trident bf16 tok/s (MFU)", "trident tf32 tok/s (MFU)", "torch bf16 tok/s (MFU)",
       "bf16/torch", "tf32/torch", "trident bf16 mem peak", "plan total", "torch mem peak")
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join("---" for _ in hdr) + "|")
for row in sys.argv[2:]:
    name, b16, t32, tor, plan = (json.loads(x) if i else x for i, x in enumerate(row.split("|", 4)))
    fpt = b16.get("flops_per_token") or t32.get("flops_per_token") or plan.get("flops_per_token")
    def cell(tok):
        return f"{tok:.0f} ({100 * fpt * tok / peak:.1f}%)" if tok and fpt else "-"
    tt = tor.get("tokens_per_s_median")
    ratio = lambda r: f"{r['tok_s'] / tt:.2f}" if r.get("tok_s") and tt else "-"
    print(f"| {name} | {cell(b16.get('tok_s'))} | {cell(t32.get('tok_s'))} | {cell(tt)} | "
          f"{ratio(b16)} | {ratio(t32)} | {gb(b16.get('mem_peak'))} | {gb(plan.get('total_bytes'))} | "
          f"{gb(tor.get('peak_mem_bytes'))} |")
print(f"tok/s: median of steps 3..N; MFU against {peak / 1e12:.0f} TFLOP/s with trident's "
      "flops_per_token for both; plan total: `trident plan --device h200` for the config as "
      "written (bf16)")
EOF
