// env.c: the table of environment variables (env.h) and the only place in src/ and cuda/
// that reads or writes the environment.
#include "base/env.h"

#include <stdlib.h>
#include <string.h>

// README.md's "Environment variables" lists these, one line each (tests/test_env.c).
const env_desc ENV_TABLE[ENV_COUNT] = {
    [ENV_TRIDENT_LOG] = {"TRIDENT_LOG", ENV_BY_USER, "debug|info|warn|error", "info",
                         "log level; at debug a failing call prints the chain of file:line "
                         "it passed through (other values are ignored)"},
    [ENV_TRIDENT_CUDA_TF32] = {"TRIDENT_CUDA_TF32", ENV_BY_USER, "1",
                               "fp32 matmuls (CUBLAS_COMPUTE_32F)",
                               "the CUDA backend's fp32 matmuls run in TF32 on the tensor "
                               "cores: several times faster, ~1e-3 relative error per product"},
    [ENV_TRIDENT_CUDA_ATTN] = {"TRIDENT_CUDA_ATTN", ENV_BY_USER, "fa2|v1", "fa2",
                               "the CUDA backend's attention kernels: fa2 (FlashAttention-2 "
                               "structure on bf16 q, k, v; D from O) or v1, the previous ones "
                               "(to bisect a failing device run); any other value is an error "
                               "(exit 2)"},
    [ENV_TRIDENT_CUDA_BF16_PATH] = {"TRIDENT_CUDA_BF16_PATH", ENV_BY_USER, "fused|v1", "fused",
                                    "the CUDA backend's bf16 data path: fused (the matmuls write "
                                    "bf16 outputs and the bf16 GELU input themselves; bf16 logits "
                                    "and the fused classifier) or v1, the previous one (fp32 "
                                    "outputs rounded by a separate pass, fp32 logits; to bisect a "
                                    "failing device run); any other value is an error (exit 2)"},
    [ENV_TRIDENT_CUDA_LN] = {"TRIDENT_CUDA_LN", ENV_BY_USER, "vec|v1", "vec",
                             "the CUDA backend's LayerNorm and residual kernels: vec (128-bit "
                             "loads and stores where C % 4 == 0) or v1, the previous scalar ones "
                             "(to bisect a failing device run); any other value is an error "
                             "(exit 2)"},
    [ENV_FLIGHT_RECORDER] = {"TRIDENT_FLIGHT_RECORDER", ENV_BY_USER, "0|1", "1",
                             "0 turns the flight recorder off (no <out_dir>/diagnose/ rings, no "
                             "verdict on a stall or a dead rank), to measure its cost"},
    [ENV_FLIGHT_LINKS] = {"TRIDENT_FLIGHT_LINKS", ENV_BY_USER, "0|1", "1",
                          "0: no liveness links between the flight recorders of ranks on "
                          "different hosts (a death there is then noticed at the launcher's "
                          "stop request, or as a stall); for networks that refuse the "
                          "connections"},
    [ENV_TRIDENT_CUDA_OPTIM] = {"TRIDENT_CUDA_OPTIM", ENV_BY_USER, "multi|v1", "multi",
                                "the CUDA backend's optimizer: multi (the gradient norm and "
                                "AdamW as a few multi-tensor launches over every piece) or v1, "
                                "the previous one (launches per piece; to bisect a failing "
                                "device run); any other value is an error (exit 2)"},
    [ENV_TEST_COMM_STAGED] = {"TRIDENT_COMM_STAGED", ENV_BY_TEST_HOOK, "1",
                              "staged only under a device backend with system.comm: mpi",
                              "every MPI call is staged through host buffers on the CPU path "
                              "too, as when ranks share a GPU (train and comm-test)"},
    [ENV_TEST_GPU_BUS_ID] = {"TRIDENT_TEST_GPU_BUS_ID", ENV_BY_TEST_HOOK,
                             "PCI bus ids, comma-separated", "only a device backend asks",
                             "the CPU path acts as if local rank i used the GPU of item i (mod "
                             "the count; as many GPUs visible as items): system.comm auto "
                             "stages MPI when two ranks share one, as on a GPU"},
    [ENV_TEST_CUDA_FALLBACK] = {"TRIDENT_TEST_CUDA_FALLBACK", ENV_BY_TEST_HOOK, "1",
                                "cuBLASLt's epilogues and bf16 algorithms where it has them",
                                "the CUDA backend takes every cuBLASLt fallback: bias broadcast "
                                "and column sums, the GELU kernels, the bf16 fallback GEMM"},
    [ENV_TEST_CKPT_DELAY_MS] = {"TRIDENT_TEST_CKPT_DELAY_MS", ENV_BY_TEST_HOOK, "milliseconds", "0",
                                "a pause after each MiB of a checkpoint rank file, so "
                                "that a kill lands inside a write"},
    [ENV_TEST_RESUME_DELAY_MS] = {"TRIDENT_TEST_RESUME_DELAY_MS", ENV_BY_TEST_HOOK, "milliseconds",
                                  "0",
                                  "a pause before each tensor span a resume reads, so that a "
                                  "stop signal lands inside a resume"},
    [ENV_TEST_NCCL_ONE_RANK] = {"TRIDENT_TEST_NCCL_ONE_RANK", ENV_BY_TEST_HOOK, "1",
                                "a world of one uses no comm backend (every group has one rank)",
                                "a world of one on a GPU with system.comm: nccl (comm-test --comm "
                                "nccl) runs every collective through NCCL on one-rank "
                                "communicators: a single GPU's check of the NCCL backend"},
    [ENV_TEST_METRICS_FULL_BYTES] = {"TRIDENT_TEST_METRICS_FULL_BYTES", ENV_BY_TEST_HOOK, "bytes",
                                     "no limit but the file system's",
                                     "metrics.jsonl acts as if its file system were full once it "
                                     "holds this many bytes: a line written past it is cut "
                                     "short and fails with ENOSPC"},
    [ENV_TEST_CKPT_ENOSPC] = {"TRIDENT_TEST_CKPT_ENOSPC", ENV_BY_TEST_HOOK, "bytes", "no limit",
                              "once the process has written this many bytes of checkpoint "
                              "files, every further checkpoint write fails with ENOSPC, as on "
                              "a full disk"},
    [ENV_TEST_HOST_ALLOC_LIMIT] = {"TRIDENT_TEST_HOST_ALLOC_LIMIT", ENV_BY_TEST_HOOK, "bytes",
                                   "no limit",
                                   "a host allocation (xmalloc and friends) of more than this "
                                   "many bytes fails as out of host memory does"},
    [ENV_TEST_CPU_BF16_OUT] = {"TRIDENT_TEST_CPU_BF16_OUT", ENV_BY_TEST_HOOK, "1",
                               "the CPU's bf16 runs round each matmul output in its own pass",
                               "the CPU backend takes the bf16-output matmul route the CUDA "
                               "backend takes (fp32 GEMM then rounding inside the op), so "
                               "that route runs, and is checked bitwise, without a GPU"},
    [ENV_TEST_CGROUP_ROOT] = {"TRIDENT_TEST_CGROUP_ROOT", ENV_BY_TEST_HOOK, "a directory",
                              "the real /proc/self/cgroup and /sys/fs/cgroup",
                              "system.threads 0 reads proc/self/cgroup and sys/fs/cgroup/... "
                              "under this directory, so that a test can give it cgroup "
                              "quotas and cpusets"},
    [ENV_TEST_SLOW_RANK] = {"TRIDENT_TEST_SLOW_RANK", ENV_BY_TEST_HOOK, "RANK:MS", "no rank slowed",
                            "world rank RANK busy-loops MS milliseconds at the start of every "
                            "training step: a straggler for the metrics' straggler field and "
                            "its warning"},
    [ENV_TEST_HOSTS] = {"TRIDENT_TEST_HOSTS", ENV_BY_TEST_HOOK, "host names, comma-separated",
                        "each rank's own host name",
                        "the flight recorder's ring gives world rank r the host name of item r "
                        "(mod the count), so that ranks of one machine take each other for "
                        "ranks on other nodes: no pid probe, heartbeats read at a stop request "
                        "(the verdict names these hosts)"},
    [ENV_REEXEC] = {"TRIDENT_REEXEC", ENV_BY_INTERNAL,
                    "the variables it set (OPENBLAS_CORETYPE, OMP_WAIT_POLICY)",
                    "not restarted yet",
                    "set before trident restarts itself with the variables that libraries read "
                    "as they load, so that it restarts at most once and the run record tells "
                    "its choice from the user's"},
    [ENV_OPENBLAS_CORETYPE] = {"OPENBLAS_CORETYPE", ENV_BY_USER, "an OpenBLAS core name",
                               "trident picks Haswell or SkylakeX when OpenBLAS chose generic "
                               "kernels on an AVX2 CPU, and restarts itself once",
                               "read by OpenBLAS when it loads; when set, trident keeps the "
                               "kernels it names"},
    [ENV_PMIX_NAMESPACE] = {"PMIX_NAMESPACE", ENV_BY_LAUNCHER, "set by the launcher",
                            "a process started alone is a world of one",
                            "a PMIx launcher started this process: a failing PMIx_Init is "
                            "then an error (exit 5), not a world of one; also the job named "
                            "in lock files when SLURM_JOB_ID is unset"},
    [ENV_PMIX_RANK] = {"PMIX_RANK", ENV_BY_LAUNCHER, "set by the launcher",
                       "a process started alone is a world of one", "as PMIX_NAMESPACE"},
    [ENV_SLURM_JOB_ID] = {"SLURM_JOB_ID", ENV_BY_LAUNCHER, "set by Slurm",
                          "the job is named by PMIX_NAMESPACE, if any",
                          "the job id written into the lock files of run.out_dir and "
                          "checkpoint.dir, so that a refused run names the job holding them"},
    [ENV_OPENBLAS_NUM_THREADS] = {"OPENBLAS_NUM_THREADS", ENV_BY_LIBRARY, "N", "all cores",
                                  "OpenBLAS's own thread pool, started when it loads; trident "
                                  "computes with OpenMP and sets OpenBLAS to 1 thread, so the "
                                  "tests and scripts/launch.sh set 1"},
    [ENV_OMP_NUM_THREADS] = {"OMP_NUM_THREADS", ENV_BY_LIBRARY, "N", "all cores",
                             "the OpenMP default; trident's CPU backend sets its own count "
                             "from system.threads; scripts/launch.sh and the Slurm script set "
                             "the same value"},
    [ENV_OMP_WAIT_POLICY] = {"OMP_WAIT_POLICY", ENV_BY_USER, "passive|active",
                             "train and sample restart themselves once with passive",
                             "read by OpenMP when it loads: passive threads sleep when idle, "
                             "active ones spin; when set, trident keeps it (the tests set "
                             "passive and skip the restart)"},
    [ENV_GOMP_SPINCOUNT] = {"GOMP_SPINCOUNT", ENV_BY_USER, "N|infinite", "as OMP_WAIT_POLICY says",
                            "read by libgomp when it loads: an idle thread spins N times, then "
                            "sleeps; when set, trident sets no OMP_WAIT_POLICY"},
};

const char *env_get(env_id id) { return getenv(ENV_TABLE[id].name); }

int env_flag(env_id id) {
    const char *v = env_get(id);
    return v && !strcmp(v, "1");
}

int env_int(env_id id, int unset) {
    const char *v = env_get(id);
    return v ? atoi(v) : unset;
}

int env_choice(env_id id, const char *const *names, int n, int unset) {
    const char *v = env_get(id);
    if (!v) return unset;
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) return i;
    return -1;
}

void env_set(env_id id, const char *value) { setenv(ENV_TABLE[id].name, value, 1); }

void env_unset(env_id id) { unsetenv(ENV_TABLE[id].name); }

const char *env_kind_name(env_kind kind) {
    switch (kind) {
    case ENV_BY_USER: return "user";
    case ENV_BY_TEST_HOOK: return "test hook";
    case ENV_BY_INTERNAL: return "internal";
    case ENV_BY_LAUNCHER: return "launcher";
    case ENV_BY_LIBRARY: return "library";
    }
    return "?";
}
