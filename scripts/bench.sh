#!/usr/bin/env bash
# CPU benchmark: trident against PyTorch on the same shapes, batches and steps.
#   scripts/bench.sh [THREADS=2] [CONFIG...]      (default configs: bench-s, bench-m)
# For each config: `build/trident train CONFIG --set system.threads=THREADS`, then
# scripts/bench_torch.py on the same shape (for a `model.arch: llama` config
# scripts/bench_hf_llama.py: transformers' LlamaForCausalLM, in the venv build/venv-hf;
# configs/bench-llama.yaml is issue 18's shape) (float32, torch.set_num_threads(THREADS),
# OMP_NUM_THREADS=THREADS, OMP_WAIT_POLICY=PASSIVE, AdamW(foreach=True), no torch.compile).
# tokens/s is the median of steps 3..N (steps 1-2 are warm-up). The sgemm rate, measured
# in the same run (build/tests/test_ops_attn --bench when built, and numpy float32 matmuls on
# the same OpenBLAS between the configs; the best of them), is the denominator of the
# model FLOP/s (flops_per_token from the metrics run record times tokens/s).
# No thresholds: it prints numbers.
# OPENBLAS_CORETYPE: trident sets it for the CPU's ISA when OpenBLAS 0.3.21 falls back to
# its generic SSE3 kernels (it does not know recent CPUs). PyTorch and numpy use the same
# OpenBLAS, so the script exports the same core for all of them, unless already set.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
shift || true
CONFIGS=("$@")
[ ${#CONFIGS[@]} -gt 0 ] || CONFIGS=(configs/bench-s.yaml configs/bench-m.yaml)
PY=/usr/bin/python3

[ -x build/trident ] || { echo "bench: build/trident missing; run make" >&2; exit 1; }
"$PY" -c 'import torch, numpy, yaml' 2>/dev/null ||
    { echo "bench: /usr/bin/python3 needs python3-torch, python3-numpy, python3-yaml (scripts/install-deps.sh)" >&2; exit 1; }

if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
    has() { [[ " $flags " == *" $1 "* ]]; }
    if has avx512f && has avx512bw && has avx512vl && has avx512dq; then export OPENBLAS_CORETYPE=SkylakeX
    elif has avx2 && has fma; then export OPENBLAS_CORETYPE=Haswell; fi
fi
LOG=$(mktemp -d /tmp/trident-bench.XXXXXX)
echo "bench: $THREADS threads, logs in $LOG, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}" >&2
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# --- sgemm rate: build/tests/test_ops_attn --bench when built (its line
# "sgemm (512x768)@(768x3072): 1 thread A GFLOP/s; OpenBLAS N threads B GFLOP/s; backend
# matmul_fwd (OpenMP tiles) C GFLOP/s"; the rate is the better of the N-thread ones, B and C),
# else numpy float32 matmul.
SGEMM_GFLOPS=""
SGEMM_SRC=""
if [ -x build/tests/test_ops_attn ]; then
    echo "bench: sgemm rate from build/tests/test_ops_attn --bench $THREADS (about a minute) ..." \
        >&2
    if build/tests/test_ops_attn --bench "$THREADS" >"$LOG/test_ops_attn.txt" 2>&1; then
        SGEMM_GFLOPS=$("$PY" - "$LOG/test_ops_attn.txt" <<'EOF'
import re, sys
for line in open(sys.argv[1]):
    if line.lower().startswith("sgemm") and "GFLOP/s" in line:
        multi = re.findall(r"OpenBLAS \d+ threads ([0-9.]+) GFLOP/s", line) + \
                re.findall(r"\(OpenMP tiles\) ([0-9.]+) GFLOP/s", line)
        nums = multi or re.findall(r"([0-9.]+) GFLOP/s", line)
        print(max(float(x) for x in nums))
        break
EOF
)
        [ -n "$SGEMM_GFLOPS" ] && SGEMM_SRC="build/tests/test_ops_attn --bench $THREADS, the better of OpenBLAS's and the backend's $THREADS-thread rate: $(grep -i -m1 '^sgemm' "$LOG/test_ops_attn.txt")"
    fi
fi
# numpy float32 (512x768)@(768x3072) on the same OpenBLAS with THREADS threads, about 2 s; run
# at the start, before each config and at the end. Other processes on a shared machine only
# ever lower a measurement, so the sgemm rate used is the best of all of them.
numpy_sgemm() {
    OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS "$PY" - <<'EOF'
import time
import numpy as np
n, k, m = 512, 768, 3072
a = np.random.default_rng(0).standard_normal((n, k), dtype=np.float32)
b = np.random.default_rng(1).standard_normal((k, m), dtype=np.float32)
a @ b  # warm-up
best = 0.0
for _ in range(5):
    reps, t0 = 0, time.perf_counter()
    while True:
        a @ b
        reps += 1
        t = time.perf_counter() - t0
        if t > 0.3:
            break
    best = max(best, 2.0 * n * k * m * reps / t / 1e9)
print(f"{best:.2f}")
EOF
}
NUMPY_RATES=()
probe() { NUMPY_RATES+=("$(numpy_sgemm)"); }
probe
[ -n "$SGEMM_GFLOPS" ] && echo "bench: sgemm $SGEMM_GFLOPS GFLOP/s from $SGEMM_SRC" >&2

ROWS=()
for cfg in "${CONFIGS[@]}"; do
    name=$(basename "$cfg" .yaml)
    out="runs/$name"
    probe
    echo "bench: $name: trident ..." >&2
    build/trident train "$cfg" --set system.threads="$THREADS" --set run.out_dir="$out" \
        --set log.every=1 >"$LOG/$name.trident.log" 2>&1 ||
        { echo "bench: trident failed on $cfg; see $LOG/$name.trident.log" >&2; tail -n 5 "$LOG/$name.trident.log" >&2; exit 1; }
    trident_json=$("$PY" - "$out/metrics.jsonl" <<'EOF'
import json, statistics, sys
run, steps = None, []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") == "run":
        run = r
    elif r.get("type") == "step":
        steps.append(r)
timed = [r["tokens_per_s"] for r in steps if r["step"] >= 3] or [r["tokens_per_s"] for r in steps]
print(json.dumps({"tok_s": statistics.median(timed), "tok_s_best": max(timed), "flops_per_token": run["flops_per_token"],
                  "own_peak": run.get("mfu_peak_flops"), "n_params": run.get("n_params"),
                  "loss": [steps[0]["loss"], steps[-1]["loss"]]}))
EOF
)
    # The peer: a plain PyTorch GPT-2, or for a llama config transformers' LlamaForCausalLM
    # (in the venv build/venv-hf, made once; PyPI is needed the first time).
    peer_py=$PY peer=scripts/bench_torch.py
    if grep -Eq '^[[:space:]]*arch:[[:space:]]*llama' "$cfg"; then
        peer_py=$(scripts/venv.sh hf transformers==4.40.2 tokenizers==0.19.1 safetensors==0.4.3)/bin/python ||
            { echo "bench: cannot make the venv build/venv-hf for transformers" >&2; exit 1; }
        peer=scripts/bench_hf_llama.py
    fi
    echo "bench: $name: $(basename "$peer" .py) ..." >&2
    torch_json=$(OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=$THREADS \
        "$peer_py" "$peer" "$cfg" --threads "$THREADS" 2>"$LOG/$name.torch.log" | tail -n 1) ||
        { echo "bench: $peer failed on $cfg; see $LOG/$name.torch.log" >&2; tail -n 5 "$LOG/$name.torch.log" >&2; exit 1; }
    echo "bench: $name: trident $trident_json" >&2
    echo "bench: $name: torch   $torch_json" >&2
    ROWS+=("$name|$trident_json|$torch_json")
done

probe
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
"$PY" - "$THREADS" "${SGEMM_GFLOPS:-0}" "$SGEMM_SRC" "$LOAD0" "$LOAD1" "$(nproc)" "${NUMPY_RATES[*]}" "${ROWS[@]}" <<'EOF'
import json, sys
threads, ops, src, load0, load1, ncpu, probes = sys.argv[1], float(sys.argv[2]), *sys.argv[3:8]
probes = [float(x) for x in probes.split()]
sgemm = max([ops] + probes)
print(f"threads {threads} of {ncpu} CPUs; load average {load0} before, {load1} after "
      "(other processes on the machine lower every number)")
print(f"sgemm {sgemm:.1f} GFLOP/s: the best of "
      + (f"{ops:.1f} ({src}) and " if ops > 0 else "")
      + "numpy float32 (512x768)@(768x3072) with OPENBLAS_NUM_THREADS=" + threads
      + " at the start, before each config and at the end: " + " ".join(f"{x:.1f}" for x in probes))
hdr = ("config", "trident tok/s", "torch tok/s", "trident/torch", "trident GFLOP/s",
       "of sgemm", "torch GFLOP/s", "of sgemm", "best step tok/s trident/torch")
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join("---" for _ in hdr) + "|")
own = []
for row in sys.argv[8:]:
    name, t, p = row.split("|", 2)
    t, p = json.loads(t), json.loads(p)
    tf = t["flops_per_token"] * t["tok_s"] / 1e9
    pf = t["flops_per_token"] * p["tokens_per_s_median"] / 1e9
    print(f"| {name} | {t['tok_s']:.0f} | {p['tokens_per_s_median']:.0f} | "
          f"{t['tok_s'] / p['tokens_per_s_median']:.2f} | {tf:.1f} | {tf / sgemm:.2f} | "
          f"{pf:.1f} | {pf / sgemm:.2f} | {t['tok_s_best']:.0f} / {p['tokens_per_s_best']:.0f} |")
    if t.get("own_peak"):
        own.append(f"{name} {t['own_peak'] / 1e9:.1f}")
print("tok/s: median of steps 3..N (best: the fastest of them); GFLOP/s: the metrics run "
      "record's flops_per_token x median tok/s")
if own:
    print("trident's own matmul rate (run record mfu_peak_flops), GFLOP/s: " + ", ".join(own))
EOF
