#!/usr/bin/env bash
# gpu-check.sh: the one script of a device run (issue 9, point 7): the GPU tests and the
# benchmark on a machine with a GPU but without trident's build dependencies.
#
# 1. Here, where trident builds (nvcc, libyaml, OpenBLAS, MPI, PMIx; no GPU needed):
#        scripts/gpu-check.sh --pack
#    builds build/gpu-check/ with CUDA (trident and tests/gpu/*), then packs the binaries,
#    every shared library they load that is neither glibc's, the C++ runtime nor NVIDIA's
#    (found by ldd: libyaml, OpenBLAS, OpenMPI, PMIx, libgomp, ...) and the data shards into
#    build/gpu-check/bundle.tar.xz (about 6 MB; build/ is ignored, so it travels only as
#    carried). GPU_CHECK_BUILD moves build/gpu-check (on both sides).
# 2. On the device machine, through the device tool (one call, at most 7 minutes of work):
#        run(command="bash scripts/gpu-check.sh", carry=["build/gpu-check/bundle.tar.xz"],
#            timeout_s=480)
#    It unpacks the bundle to /tmp/trident-gpu, finds libnccl.so.2 (the nvidia-nccl-cu13
#    Python package there), libcublasLt.so.13 and libcudart.so.13 (the CUDA toolkit or the
#    Python packages), and runs the binaries through wrappers that set LD_LIBRARY_PATH for
#    them alone (Python keeps its own libraries). Results, under $OUT:
#        env.txt        nvidia-smi, the libraries found, versions
#        test-gpu.log   tests/gpu/run.sh: what `make test-gpu` runs (every op on CUDA against
#                       the CPU backend, gradient checks, the matmuls again on every cuBLASLt
#                       fallback, the training parity runs in fp32, bf16 and tf32, no device
#                       allocation inside a step, 4 ranks on the one GPU found and staged by
#                       system.comm auto)
#        bench-ops.log  test_gpu_ops --bench: op timings at GPT-2 124M sizes (the matmuls
#                       with fp32 and with bf16 operands), fp32 then TF32; then
#                       --bench-attn: attention per head size at T 1024 and 2048 on the FA2
#                       kernels, then on v1 (TRIDENT_CUDA_ATTN=v1)
#        bf16-path.log  10 bf16 steps of tests/configs/tiny.yaml on the fused bf16 data path
#                       (matmuls writing bf16 outputs) and on v1 (TRIDENT_CUDA_BF16_PATH=v1),
#                       whose losses must agree within bf16's rounding (tests/parity.py)
#        bench-gpu.log  scripts/bench-gpu.sh: trident against PyTorch, 124M and 350M
#        summary.txt    the pass/fail line and the benchmark table
#    Each phase has its own time limit (GPU_CHECK_TEST_S 150, _BF16_S 35, _OPS_S 60,
#    _BENCH_S 175 seconds: 420 in all), so one that hangs still leaves the others' results;
#    GPU_CHECK_PHASES picks phases for a rerun
#    (command="GPU_CHECK_PHASES=bench-gpu bash scripts/gpu-check.sh").
#    STEPS (default 8) sets the benchmark's steps per run.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${GPU_CHECK_BUILD:-build/gpu-check} # where --pack builds, and the bundle's folder
BUNDLE=$BUILD_DIR/bundle.tar.xz

if [ "${1:-}" = --pack ]; then
    set -e
    make --no-print-directory BUILD="$BUILD_DIR" USE_CUDA=1 -j"${JOBS:-2}" \
        "$BUILD_DIR/trident" "$BUILD_DIR/tests/gpu/test_gpu_ops" data
    stage=$BUILD_DIR/stage
    rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
    cp "$BUILD_DIR/trident" "$BUILD_DIR/tests/gpu/test_gpu_ops" "$stage/bin/"
    cp data/*.bin "$stage/data/"
    # Everything ldd resolves, except glibc's own libraries, NVIDIA's (the device has its
    # driver and CUDA 13; NCCL comes from its Python package) and the C++ runtime (the
    # device's is newer, and NVIDIA's libraries there may need that one).
    ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
        while read -r soname path; do
            case "$soname" in
            libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | \
                libcuda.so* | libcudart.so* | libnccl.so* | libcublas*.so* | libnvidia* | \
                libstdc++.so* | libgcc_s.so*) ;;
            *) cp -L "$path" "$stage/lib/$soname" ;;
            esac
        done
    tar -C "$stage" -cJf "$BUNDLE" .
    echo "gpu-check: packed $(du -h "$BUNDLE" | cut -f1) into $BUNDLE:"
    tar -tJf "$BUNDLE" | sed 's/^/  /'
    echo "gpu-check: on the device: run(command=\"bash scripts/gpu-check.sh\"," \
        "carry=[\"$BUNDLE\"], timeout_s=480)"
    exit 0
fi

OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
B=/tmp/trident-gpu
[ -f "$BUNDLE" ] || { echo "gpu-check: $BUNDLE is missing: run scripts/gpu-check.sh --pack" \
    "here and name it in carry" | tee "$OUT/summary.txt"; exit 2; }
rm -rf "$B" && mkdir -p "$B/tests/gpu" && tar -C "$B" -xJf "$BUNDLE"
for f in "$B"/data/*.bin; do [ -f "data/$(basename "$f")" ] || cp "$f" data/; done

# The directory holding library $1: the CUDA toolkit first, then the Python packages
# (nvidia-nccl-cu13, nvidia-cublas, ...), then anywhere under /usr and /opt.
libdir_of() {
    local hit
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        [ -e "$d/$1" ] && { echo "$d"; return; }
    done
    local sites
    sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    hit=$(find $sites /usr /opt -name "$1" -not -path '*/proc/*' 2>/dev/null | head -n 1)
    [ -n "$hit" ] && dirname "$hit"
}
LIBS=$B/lib
for lib in libnccl.so.2 libcublasLt.so.13 libcudart.so.13; do
    d=$(libdir_of $lib)
    if [ -z "$d" ]; then echo "gpu-check: $lib not found" >&2
    elif [[ ":$LIBS:" != *":$d:"* ]]; then LIBS=$LIBS:$d; fi
done
# Wrappers: the binaries see the bundle's libraries, nothing else does.
wrap() { printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$LIBS" "$2" >"$1" && chmod +x "$1"; }
wrap "$B/trident" "$B/bin/trident"
wrap "$B/tests/gpu/test_gpu_ops" "$B/bin/test_gpu_ops"

{
    date -u
    nvidia-smi 2>&1
    echo "LD_LIBRARY_PATH for trident: $LIBS"
    LD_LIBRARY_PATH=$LIBS ldd "$B/bin/trident" 2>&1
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
    "$B/trident" --version 2>&1
} >"$OUT/env.txt"

PHASES=" ${GPU_CHECK_PHASES:-test-gpu bf16-path bench-ops bench-gpu} "
phase() { # name seconds command...
    local name=$1 secs=$2
    shift 2
    [[ "$PHASES" == *" $name "* ]] || return 0
    echo "gpu-check: $name (at most $secs s) ..." >&2
    local t0=$SECONDS
    timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "gpu-check: $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$name.log" >&2
    return $rc
}
phase test-gpu "${GPU_CHECK_TEST_S:-150}" tests/gpu/run.sh "$B"
phase bf16-path "${GPU_CHECK_BF16_S:-35}" bash -c "for p in fused v1; do
    rm -rf /tmp/gpu-check-bf16-\$p
    TRIDENT_CUDA_BF16_PATH=\$p '$B/trident' train tests/configs/tiny.yaml \\
        --set system.backend=cuda --set train.precision=bf16 --set train.steps=10 \\
        --set data.eval_every=0 --set run.out_dir=/tmp/gpu-check-bf16-\$p || exit 1
done
python3 tests/parity.py /tmp/gpu-check-bf16-v1 /tmp/gpu-check-bf16-fused loss=2e-2 steps=10"
phase bench-ops "${GPU_CHECK_OPS_S:-60}" bash -c "'$B/tests/gpu/test_gpu_ops' --bench &&
    TRIDENT_CUDA_TF32=1 '$B/tests/gpu/test_gpu_ops' --bench &&
    '$B/tests/gpu/test_gpu_ops' --bench-attn &&
    TRIDENT_CUDA_ATTN=v1 '$B/tests/gpu/test_gpu_ops' --bench-attn"
phase bench-gpu "${GPU_CHECK_BENCH_S:-175}" env STEPS="${STEPS:-8}" TRIDENT_BIN="$B/trident" \
    BENCH_OUT=/tmp/bench-gpu scripts/bench-gpu.sh

{
    grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/test-gpu.log" || echo "test-gpu: no summary line"
    grep '^FAIL' "$OUT/test-gpu.log"
    tail -2 "$OUT/bf16-path.log"
    grep -E '^bench: (these ops|matmul qkv|attention)' "$OUT/bench-ops.log"
    grep -E '^\|' "$OUT/bench-gpu.log"
} >"$OUT/summary.txt" 2>/dev/null
cat "$OUT/summary.txt"
