// env.h: every environment variable trident reads, in one table (in the spirit of NCCL's
// NCCL_PARAM list): its name, who reads it, its accepted values, what unset means, and what
// it does. Every read and write of the environment in src/ and cuda/ goes through env_get,
// env_flag, env_int, env_set and env_unset; tests/test_env.c fails on a call of the C
// library's environment functions anywhere else in src/ or cuda/, and on a table entry
// missing from README.md's section "Environment variables" (one line per entry).
//
// Variables read only by a library (OpenBLAS, OpenMP) are listed too, as ENV_BY_LIBRARY,
// where trident, its tests or its scripts rely on them; trident itself never reads those.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ENV_BY_USER,      // a knob for users
    ENV_BY_TEST_HOOK, // for the tests only: exercises a path a CPU-only machine would not take
    ENV_BY_INTERNAL,  // set by trident for itself (across its own re-exec)
    ENV_BY_LAUNCHER,  // set by the launcher (mpirun, srun --mpi=pmix), read by trident
    ENV_BY_LIBRARY,   // read by a library, never by trident itself
} env_kind;

// Indexes ENV_TABLE. Test hooks are named ENV_TEST_*.
typedef enum {
    ENV_TRIDENT_LOG,
    ENV_TRIDENT_CUDA_TF32,
    ENV_TRIDENT_CUDA_ATTN,
    ENV_TRIDENT_CUDA_BF16_PATH,
    ENV_TRIDENT_CUDA_LN,
    ENV_FLIGHT_RECORDER, // TRIDENT_FLIGHT_RECORDER
    ENV_FLIGHT_LINKS,    // TRIDENT_FLIGHT_LINKS
    ENV_TRIDENT_CUDA_OPTIM,
    ENV_TEST_COMM_STAGED,        // TRIDENT_COMM_STAGED
    ENV_TEST_GPU_BUS_ID,         // TRIDENT_TEST_GPU_BUS_ID
    ENV_TEST_CUDA_FALLBACK,      // TRIDENT_TEST_CUDA_FALLBACK
    ENV_TEST_CKPT_DELAY_MS,      // TRIDENT_TEST_CKPT_DELAY_MS
    ENV_TEST_CKPT_ENOSPC,        // TRIDENT_TEST_CKPT_ENOSPC
    ENV_TEST_RESUME_DELAY_MS,    // TRIDENT_TEST_RESUME_DELAY_MS
    ENV_TEST_NCCL_ONE_RANK,      // TRIDENT_TEST_NCCL_ONE_RANK
    ENV_TEST_METRICS_FULL_BYTES, // TRIDENT_TEST_METRICS_FULL_BYTES
    ENV_TEST_HOST_ALLOC_LIMIT,   // TRIDENT_TEST_HOST_ALLOC_LIMIT
    ENV_TEST_CPU_BF16_OUT,       // TRIDENT_TEST_CPU_BF16_OUT
    ENV_TEST_CGROUP_ROOT,        // TRIDENT_TEST_CGROUP_ROOT
    ENV_TEST_SLOW_RANK,          // TRIDENT_TEST_SLOW_RANK
    ENV_TEST_HOSTS,              // TRIDENT_TEST_HOSTS
    ENV_REEXEC,                  // TRIDENT_REEXEC
    ENV_OPENBLAS_CORETYPE,
    ENV_PMIX_NAMESPACE,
    ENV_PMIX_RANK,
    ENV_SLURM_JOB_ID,
    ENV_OPENBLAS_NUM_THREADS,
    ENV_OMP_NUM_THREADS,
    ENV_OMP_WAIT_POLICY,
    ENV_GOMP_SPINCOUNT,
    ENV_COUNT
} env_id;

typedef struct {
    const char *name; // "TRIDENT_LOG"
    env_kind kind;
    const char *values;  // what it accepts: "debug|info|warn|error", "1", "milliseconds"
    const char *unset;   // what trident does when it is unset (the default)
    const char *meaning; // one line
} env_desc;

extern const env_desc ENV_TABLE[ENV_COUNT];

// The variable's value, or NULL when it is unset.
const char *env_get(env_id id);
// 1 when the variable is exactly "1", else 0 (unset, "0", "true", ...).
int env_flag(env_id id);
// atoi of the value, or `unset` when the variable is unset.
int env_int(env_id id, int unset);
// The index of the value in names[0, n) (exact match), `unset` when the variable is unset,
// or -1 when it holds anything else: the caller names the variable and the choices.
int env_choice(env_id id, const char *const *names, int n, int unset);
// setenv(name, value, overwrite) and unsetenv(name).
void env_set(env_id id, const char *value);
void env_unset(env_id id);
// "user", "test hook", "internal", "launcher", "library".
const char *env_kind_name(env_kind kind);

#ifdef __cplusplus
}
#endif
