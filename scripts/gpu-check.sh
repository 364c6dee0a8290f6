#!/usr/bin/env bash
# gpu-check.sh: the one script of a device run (issue 9, point 7): the GPU tests and the
# benchmark on a machine with a GPU but without trident's build dependencies.
#
# 1. Here, where trident builds (nvcc, libyaml, OpenBLAS, MPI, PMIx; no GPU needed):
#        scripts/gpu-check.sh --pack
#    builds build/gpu-check/ with CUDA (trident and tests/gpu/*), then packs the binaries,
#    every shared library they load that is neither glibc's, the C++ runtime nor NVIDIA's
#    (found by ldd: libyaml, OpenBLAS, OpenMPI, PMIx, libgomp, ...), OpenMPI's mpirun with
#    what it loads at run time (its components, help texts, PMIx's plugins: the tests start
#    several ranks on the one GPU, and the device may have no MPI) and the data shards into
#    build/gpu-check/bundle.tar.xz (about 12 MB; build/ is ignored, so it travels only as
#    carried). GPU_CHECK_BUILD moves build/gpu-check (on both sides).
# 2. On the device machine, through the device tool (one call, at most 465 s of work):
#        run(command="bash scripts/gpu-check.sh", carry=["build/gpu-check/bundle.tar.xz"],
#            timeout_s=480)
#    It unpacks the bundle to /tmp/trident-gpu, finds libnccl.so.2 (the nvidia-nccl-cu13
#    Python package there), libcublasLt.so.13 and libcudart.so.13 (the CUDA toolkit or the
#    Python packages), and runs the binaries through wrappers that set LD_LIBRARY_PATH for
#    them alone (Python keeps its own libraries); the bundle's mpirun runs relocated there
#    (OPAL_PREFIX, PMIX_PREFIX), first on PATH. Results, under $OUT:
#        env.txt        nvidia-smi, the libraries found, versions
#        test-gpu.log   tests/gpu/run.sh ops train: every op row below model size on CUDA
#                       against the CPU backend with gradient checks, the conversion ops
#                       against bf16.h, the matmuls again on every cuBLASLt fallback, the
#                       training parity runs in fp32, bf16 and tf32, no device allocation
#                       inside a step, 4 ranks on the one GPU found and staged by system.comm
#                       auto, then recompute, ZeRO-3, pp2 interleaved, tp2 with SP, a bf16
#                       llama (GQA) against the CPU; NCCL on one GPU)
#        test-model.log tests/gpu/run.sh model: the model-sized op rows (16K-64K-row
#                       reductions, OC and V 50304, attention at T 1024 and 2048, the Llama
#                       ops and GQA attention at Llama 3 8B's shapes)
#        bf16-path.log  10 bf16 steps of tests/configs/tiny.yaml on the fused bf16 data path
#                       (matmuls writing bf16 outputs, bf16 logits and the fused classifier,
#                       float4 LayerNorm kernels) and on v1 (TRIDENT_CUDA_BF16_PATH=v1 with
#                       TRIDENT_CUDA_LN=v1: the kernels before them), whose losses must agree
#                       within bf16's rounding (tests/parity.py);
#                       then the same fused run with the optimizer per piece
#                       (TRIDENT_CUDA_OPTIM=v1) against the multi-tensor one: losses, norms
#                       and parameters within 1e-4 (only the norm's order of sums differs)
#        bench-ops.log  test_gpu_ops --bench: op timings at GPT-2 124M sizes (the matmuls
#                       with fp32 and with bf16 operands), fp32 then TF32; then
#                       --bench-attn: attention per head size at T 1024 and 2048 on the FA2
#                       kernels, then on v1 (TRIDENT_CUDA_ATTN=v1)
#        bench-gpu.log  scripts/bench-gpu.sh: trident against PyTorch, 124M and 350M
#        summary.txt    the pass/fail lines, the time per kind of op row, the benchmark table
#    Each phase has its own time limit (GPU_CHECK_TEST_S 120, _MODEL_S 45, _BF16_S 35,
#    _OPS_S 60, _BENCH_S 175 seconds), so one that hangs still leaves the others' results, and none
#    runs past GPU_CHECK_DEADLINE_S (465) seconds from the start: a phase gets what is left,
#    so the summary is written before the device call's 480 s end, whatever the set-up took.
#    GPU_CHECK_PHASES picks phases for a rerun
#    (command="GPU_CHECK_PHASES=bench-gpu bash scripts/gpu-check.sh"). STEPS (default 8)
#    sets the benchmark's steps per run.
#    Expected times on one H200 (estimated from sizes, not measured; see tests/gpu/run.sh):
#    test-gpu ~68 s, test-model ~20 s, bf16-path ~22 s; the limits leave about twice that.
# 3. Here, without a GPU:
#        scripts/gpu-check.sh --dry         the phases, their limits and commands, and whether
#                                           the limits fit the deadline (exit 1 if not)
#        scripts/gpu-check.sh --self-test   the device part on the bundle, with the CPU backend
#                                           in CUDA's place (tests/gpu/run.sh --self-test; the
#                                           phases test-gpu and test-model, without limits
#                                           unless set): the bundle, the wrappers and its
#                                           mpirun checked before a device run
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${GPU_CHECK_BUILD:-build/gpu-check} # where --pack builds, and the bundle's folder
BUNDLE=$BUILD_DIR/bundle.tar.xz

MODE=device
case "${1:-}" in
"") ;;
--pack) MODE=pack ;;
--dry) MODE=dry ;;
--self-test) MODE=self ;;
*)
    echo "usage: scripts/gpu-check.sh [--pack | --dry | --self-test]" >&2
    exit 2
    ;;
esac
B=/tmp/trident-gpu # where the bundle is unpacked
SELF=""
[ $MODE = self ] && SELF=--self-test

# The phases: name, time limit (s), command. Off the device (--self-test) a phase runs
# without a limit unless its variable is set.
NO_LIMIT=$([ $MODE = self ] && echo 0)
PHASE_NAMES=(test-gpu test-model bf16-path bench-ops bench-gpu)
PHASE_LIMITS=("${GPU_CHECK_TEST_S:-${NO_LIMIT:-120}}" "${GPU_CHECK_MODEL_S:-${NO_LIMIT:-45}}"
    "${GPU_CHECK_BF16_S:-${NO_LIMIT:-35}}" "${GPU_CHECK_OPS_S:-${NO_LIMIT:-60}}"
    "${GPU_CHECK_BENCH_S:-${NO_LIMIT:-175}}")
PHASE_COMMANDS=(
    "tests/gpu/run.sh $SELF $B ops train"
    "tests/gpu/run.sh $SELF $B model"
    "for p in fused v1; do rm -rf /tmp/gpu-check-bf16-\$p && ln=vec && { [ \$p = fused ] || ln=v1; } &&
     TRIDENT_CUDA_LN=\$ln TRIDENT_CUDA_BF16_PATH=\$p $B/trident train tests/configs/tiny.yaml --set system.backend=cuda \
       --set train.precision=bf16 --set train.steps=10 --set data.eval_every=0 \
       --set run.out_dir=/tmp/gpu-check-bf16-\$p || exit 1; done &&
     python3 tests/parity.py /tmp/gpu-check-bf16-v1 /tmp/gpu-check-bf16-fused loss=2e-2 steps=10 &&
     rm -rf /tmp/gpu-check-optim-v1 && TRIDENT_CUDA_OPTIM=v1 $B/trident train tests/configs/tiny.yaml \
       --set system.backend=cuda --set train.precision=bf16 --set train.steps=10 \
       --set data.eval_every=0 --set run.out_dir=/tmp/gpu-check-optim-v1 &&
     python3 tests/parity.py /tmp/gpu-check-optim-v1 /tmp/gpu-check-bf16-fused loss=1e-4 norm=1e-4 \
       param=1e-4 steps=10"
    "$B/tests/gpu/test_gpu_ops --bench && TRIDENT_CUDA_TF32=1 $B/tests/gpu/test_gpu_ops --bench &&
     $B/tests/gpu/test_gpu_ops --bench-attn && TRIDENT_CUDA_ATTN=v1 $B/tests/gpu/test_gpu_ops --bench-attn"
    "STEPS=${STEPS:-8} TRIDENT_BIN=$B/trident BENCH_OUT=/tmp/bench-gpu scripts/bench-gpu.sh")
DEADLINE=${GPU_CHECK_DEADLINE_S:-465} # s from the start: the device call's 480 less the summary
SETUP_S=25                            # unpacking, finding NVIDIA's libraries, env.txt (a guess)

if [ $MODE = dry ]; then
    total=0
    for i in "${!PHASE_NAMES[@]}"; do
        printf 'phase %-10s at most %4s s: %s\n' "${PHASE_NAMES[$i]}" "${PHASE_LIMITS[$i]}" \
            "$(echo "${PHASE_COMMANDS[$i]}" | tr -s ' \n' ' ')"
        total=$((total + PHASE_LIMITS[i]))
    done
    echo "limits: $total s + about $SETUP_S s of set-up, against the deadline of $DEADLINE s" \
        "(a phase that would pass it gets only what is left)"
    [ $((total + SETUP_S)) -le "$DEADLINE" ] && exit 0
    echo "gpu-check: the limits do not fit the deadline: the last phases would be cut short" >&2
    exit 1
fi

if [ $MODE = pack ]; then
    set -e
    make --no-print-directory BUILD="$BUILD_DIR" USE_CUDA=1 -j"${JOBS:-2}" \
        "$BUILD_DIR/trident" "$BUILD_DIR/tests/gpu/test_gpu_ops" \
        "$BUILD_DIR/tests/gpu/test_gpu_optim" data
    stage=$BUILD_DIR/stage
    rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
    cp "$BUILD_DIR/trident" "$BUILD_DIR/tests/gpu/test_gpu_ops" \
        "$BUILD_DIR/tests/gpu/test_gpu_optim" "$stage/bin/"
    cp data/*.bin "$stage/data/"
    # OpenMPI's launcher, of the same installation as the libmpi trident links, with what it
    # and the ranks' libmpi load at run time: the MCA components (OPAL_PKGLIBDIR), the help
    # texts (below OPAL_PREFIX as below /usr) and PMIx's plugins and texts (PMIX_PREFIX).
    mpi=$stage/mpi
    mkdir -p "$mpi/bin" "$mpi/pmix/lib" "$mpi/pmix/share"
    cp -L "$(command -v mpirun)" "$mpi/bin/mpirun"
    ompi_path() { ompi_info --parsable --path "$1" | cut -d: -f3; }
    prefix=$(ompi_path prefix) pkgdata=$(ompi_path pkgdatadir)
    cp -rL "$(ompi_path pkglibdir)" "$mpi/components"
    mkdir -p "$mpi/$(dirname "${pkgdata#"$prefix"/}")"
    cp -rL "$pkgdata" "$mpi/${pkgdata#"$prefix"/}"
    pmix_lib=$(ldd "$stage/bin/trident" | awk '$1 ~ /^libpmix\.so/ {print $3}')
    pmix_prefix=$(dirname "$(dirname "$(readlink -f "$pmix_lib")")")
    cp -rL "$pmix_prefix/lib/pmix" "$mpi/pmix/lib/"
    [ -d "$pmix_prefix/share/pmix" ] && cp -rL "$pmix_prefix/share/pmix" "$mpi/pmix/share/"
    # Everything ldd resolves, except glibc's own libraries, NVIDIA's (the device has its
    # driver and CUDA 13; NCCL comes from its Python package) and the C++ runtime (the
    # device's is newer, and NVIDIA's libraries there may need that one).
    { ldd "$stage"/bin/* "$mpi/bin/mpirun" $(find "$mpi" -name '*.so') 2>/dev/null || true; } |
        awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
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
[ -f "$BUNDLE" ] || { echo "gpu-check: $BUNDLE is missing: run scripts/gpu-check.sh --pack" \
    "here and name it in carry" | tee "$OUT/summary.txt"; exit 2; }
rm -rf "$B" && mkdir -p "$B/tests/gpu" "$B/mpibin" && tar -C "$B" -xJf "$BUNDLE"
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
wrap "$B/tests/gpu/test_gpu_optim" "$B/bin/test_gpu_optim"
# The bundle's mpirun (the OpenMPI of trident's libmpi, whatever MPI the machine has), first
# on PATH for the tests (tests/lib.sh's MPIRUN), relocated to the bundle: it and the ranks it
# starts (which inherit these variables) find the components, help texts and PMIx's plugins
# there.
{
    echo '#!/bin/sh'
    echo "export OPAL_PREFIX=$B/mpi OPAL_PKGLIBDIR=$B/mpi/components PMIX_PREFIX=$B/mpi/pmix"
    echo 'export OMPI_MCA_btl_base_warn_component_unused=0'
    echo "export LD_LIBRARY_PATH=$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo "exec $B/mpi/bin/mpirun \"\$@\""
} >"$B/mpibin/mpirun" && chmod +x "$B/mpibin/mpirun"
export PATH=$B/mpibin:$PATH

{
    date -u
    nvidia-smi 2>&1
    echo "LD_LIBRARY_PATH for trident: $LIBS"
    LD_LIBRARY_PATH=$LIBS ldd "$B/bin/trident" 2>&1
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
    "$B/trident" --version 2>&1
    mpirun --version 2>&1 | head -n 1
} >"$OUT/env.txt"
echo "gpu-check: set up in $SECONDS s" | tee -a "$OUT/env.txt" >&2

PHASES=" ${GPU_CHECK_PHASES:-${PHASE_NAMES[*]}} "
[ $MODE = self ] && PHASES=" ${GPU_CHECK_PHASES:-test-gpu test-model} "
# phase I: phase I of the table, into $OUT/NAME.log, within its limit and, on the device,
# within what is left before the deadline.
phase() {
    local name=${PHASE_NAMES[$1]} secs=${PHASE_LIMITS[$1]}
    [[ "$PHASES" == *" $name "* ]] || return 0
    if [ $MODE = device ]; then
        local left=$((DEADLINE - SECONDS))
        [ "$left" -lt "$secs" ] && secs=$left
        if [ "$secs" -lt 10 ]; then
            echo "gpu-check: $name: skipped, $left s left before the deadline" |
                tee "$OUT/$name.log" >&2
            return 1
        fi
    fi
    echo "gpu-check: $name (at most $secs s; 0: no limit) ..." >&2
    local t0=$SECONDS
    timeout "$secs" bash -c "${PHASE_COMMANDS[$1]}" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "gpu-check: $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$name.log" >&2
    return $rc
}
for i in "${!PHASE_NAMES[@]}"; do phase "$i"; done

{
    for p in test-gpu test-model; do
        [ -f "$OUT/$p.log" ] || continue
        echo "$p: $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/$p.log" || echo "no summary line")"
        grep -E '^FAIL|^# [0-9]+ rows below model size|^gpu-check: ' "$OUT/$p.log"
    done
    tail -n 2 "$OUT/bf16-path.log"
    grep -E '^bench: (these ops|matmul qkv|attention)' "$OUT/bench-ops.log"
    grep -E '^\|' "$OUT/bench-gpu.log"
} >"$OUT/summary.txt" 2>/dev/null
cat "$OUT/summary.txt"
