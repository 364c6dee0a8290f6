// backend_cpu_process.c: what the CPU backend settles for the whole process rather than for
// one backend: OpenBLAS's kernels, how OpenMP's idle threads wait, and how many compute
// threads a rank takes when system.threads is 0.
//
// Waiting. libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it loads (before
// main; setenv later changes nothing), and has no call to change them. Unset, an idle
// thread spins ~3 ms (300k iterations) before it sleeps, after every parallel region and at
// every barrier. On shared cores (a busy process beside the run, or more threads than cores
// over a node's ranks) those spins take the cores from the threads with work: steps of
// ~10 ms in scripts/bench-threads.sh stalled for up to 6 s, where with passive waiting
// (sleep at once) none passed 0.16 s (README "CPU threads"). Waking a sleeping thread costs
// ~5-30 us per parallel region on an idle machine (+4% on the default model's step), which
// a user with cores of their own buys back with OMP_WAIT_POLICY=active. So `train` and
// `sample` restart themselves once with OMP_WAIT_POLICY=passive, unless the user chose
// OMP_WAIT_POLICY or GOMP_SPINCOUNT; the restart also carries OPENBLAS_CORETYPE when needed
// (below).
//
// Thread count (system.threads 0). A rank takes the cores it may use, shared with the other
// ranks of its node that may use the same ones: the CPUs of its affinity mask (taskset,
// mpirun --bind-to, srun --cpu-bind), capped by the cgroup's CPU quota (containers, cgroup
// v2 cpu.max or v1 cpu.cfs_quota_us), divided among the local ranks (PMIx). When the mask is
// narrower than the node (the cgroup's cpuset, else the online CPUs), a launcher bound each
// rank to cores of its own, and only the local ranks whose masks would tile those cores
// (local * mask / node, rounded up) share them. The count decides the static partitions of
// the reductions, so results are bitwise those of an explicit system.threads of that count.
#include "compute/backend_cpu_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"

// ---------------------------------------------------------------------------------------
// OpenBLAS's kernels
//
// OpenBLAS 0.3.21 does not know CPUs newer than it (Sapphire/Emerald Rapids under KVM
// among them) and falls back to its generic SSE3 "Prescott" kernels, ~5x slower than its
// AVX-512 ones. Its core is chosen when the library loads, from OPENBLAS_CORETYPE, so the
// process picks the core the CPU supports and starts itself again, once, before anything
// else happens (no thread, file or communicator exists yet).

static int blas_core_is_generic(const char **core_out) {
#if defined(__x86_64__)
    const char *core = openblas_get_corename();
    static const char *const generic[] = {"Prescott",  "Core2", "Penryn", "Dunnington",
                                          "Nehalem",   "Atom",  "Katmai", "Coppermine",
                                          "Northwood", "Banias"};
    *core_out = core;
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (core && !strcmp(core, generic[i]))
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    *core_out = NULL;
#endif
    return 0;
}

static const char *blas_core_for_cpu(void) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
#endif
    return "Haswell";
}

void backend_cpu_prepare_process(char **argv, int passive_wait) {
    if (env_get(ENV_REEXEC)) return; // restarted already: never loop
    const char *core;
    const int set_core = !env_get(ENV_OPENBLAS_CORETYPE) && blas_core_is_generic(&core);
    const int set_wait = passive_wait && !env_get(ENV_OMP_WAIT_POLICY) &&
                         !env_get(ENV_GOMP_SPINCOUNT);
    if (!set_core && !set_wait) return;
    if (set_core) env_set(ENV_OPENBLAS_CORETYPE, blas_core_for_cpu());
    if (set_wait) env_set(ENV_OMP_WAIT_POLICY, "passive");
    // The names of what trident set: the run record tells its choice from the user's.
    env_set(ENV_REEXEC, set_core && set_wait ? "OPENBLAS_CORETYPE,OMP_WAIT_POLICY"
                        : set_core           ? "OPENBLAS_CORETYPE"
                                             : "OMP_WAIT_POLICY");
    fflush(NULL);
    execv("/proc/self/exe", argv);
    // exec failed: carry on with what the libraries loaded with, and record nothing as set.
    if (set_core) env_unset(ENV_OPENBLAS_CORETYPE);
    if (set_wait) env_unset(ENV_OMP_WAIT_POLICY);
    env_unset(ENV_REEXEC);
}

void backend_cpu_warn_generic_blas(void) {
    const char *core;
    static int warned = 0; // once per process, not once per backend
    if (warned || !blas_core_is_generic(&core)) return;
    warned = 1;
    LOG_WARN("OpenBLAS uses its generic '%s' kernels on this AVX2 CPU; matmuls run several "
             "times slower than they could.\nHINT: export OPENBLAS_CORETYPE=%s before starting "
             "trident.",
             core, blas_core_for_cpu());
}

// A user's value in the run record: at most 24 characters, each outside [A-Za-z0-9._+-]
// replaced by '?', so that the text needs no JSON escape.
static void plain_value(char *out, size_t n, const char *value) {
    size_t i = 0;
    for (; value[i] && i < 24 && i + 1 < n; i++) {
        unsigned char c = (unsigned char)value[i];
        out[i] = isalnum(c) || strchr("._+-", c) ? (char)c : '?';
    }
    out[i] = '\0';
}

void backend_cpu_wait_describe(char *out, size_t n) {
    const char *policy = env_get(ENV_OMP_WAIT_POLICY), *spin = env_get(ENV_GOMP_SPINCOUNT);
    const char *set = env_get(ENV_REEXEC);
    char p[32], s[32];
    if (policy) plain_value(p, sizeof p, policy);
    if (spin) plain_value(s, sizeof s, spin);
    if (spin && policy) snprintf(out, n, "GOMP_SPINCOUNT=%s, OMP_WAIT_POLICY=%s", s, p);
    else if (spin) snprintf(out, n, "GOMP_SPINCOUNT=%s", s);
    else if (policy)
        snprintf(out, n, "OMP_WAIT_POLICY=%s%s", p,
                 set && strstr(set, "OMP_WAIT_POLICY") ? " (set by trident)" : "");
    else snprintf(out, n, "OpenMP's default (spin ~3 ms, then sleep)");
}

// ---------------------------------------------------------------------------------------
// The cores a process may use

// The CPUs of this process's affinity mask; 0 when unknown.
static int affinity_cpus(void) {
    for (int cpus = 1024; cpus <= 1 << 18; cpus *= 2) { // masks past 1024 CPUs need a bigger set
        cpu_set_t *set = CPU_ALLOC(cpus);
        if (!set) return 0;
        size_t size = CPU_ALLOC_SIZE(cpus);
        int rc = sched_getaffinity(0, size, set), err = errno;
        int count = rc == 0 ? CPU_COUNT_S(size, set) : 0;
        CPU_FREE(set);
        if (rc == 0 || err != EINVAL) return count;
    }
    return 0;
}

// Reads the small file ROOT + rel (ROOT: the test hook TRIDENT_TEST_CGROUP_ROOT, else "")
// into buf, NUL-terminated; 0 when it is absent or unreadable.
static int read_small(const char *rel, char *buf, size_t n) {
    const char *root = env_get(ENV_TEST_CGROUP_ROOT);
    char path[PATH_MAX];
    int len = snprintf(path, sizeof path, "%s%s", root ? root : "", rel);
    if (len < 0 || len >= (int)sizeof path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t got = fread(buf, 1, n - 1, f);
    int bad = ferror(f);
    fclose(f);
    buf[got] = '\0';
    return !bad;
}

// The cgroups of this process, from /proc/self/cgroup: "0::/path" (v2) and v1 lines
// "N:cpu,cpuacct:/path", "N:cpuset:/path". Empty when absent.
typedef struct {
    char v2[512], cpu[512], cpuset[512];
} cgroup_paths;

// Where the hierarchies are mounted: v2 at the top (a v1 machine has none there), v1 per
// controller.
#define V2 "/sys/fs/cgroup"
#define V1_CPU "/sys/fs/cgroup/cpu"
#define V1_CPUSET "/sys/fs/cgroup/cpuset"

// Whether the comma-separated list holds `name`.
static int has_controller(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

static void cgroup_paths_read(cgroup_paths *cg) {
    char text[8192];
    memset(cg, 0, sizeof *cg);
    if (!read_small("/proc/self/cgroup", text, sizeof text)) return;
    char *next;
    for (char *line = text; *line; line = next) {
        next = line + strcspn(line, "\n");
        if (*next) *next++ = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = '\0';
        const char *controllers = c1 + 1, *path = c2 + 1;
        // The kernel writes absolute paths without "..": anything else is not followed.
        if (path[0] != '/' || strstr(path, "..") || strlen(path) >= sizeof cg->v2) continue;
        if (!strcmp(line, "0") && !*controllers) strcpy(cg->v2, path);
        if (has_controller(controllers, "cpu")) strcpy(cg->cpu, path);
        if (has_controller(controllers, "cpuset")) strcpy(cg->cpuset, path);
    }
}

// Reads `file` of cgroup `path` under the hierarchy mounted at `mount`, or of its parent
// when up is 1 (its grandparent when 2, ...): 1 when read, 0 when absent there, -1 when `up`
// climbs past the root. A level may be absent where the file is not: inside a container
// without a cgroup namespace the path names the host's cgroup, whose files the mount's root
// holds, so callers walk up to the root.
static int cgroup_read(const char *mount, const char *path, int up, const char *file, char *buf,
                       size_t n) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    for (int i = 0; i < up; i++) {
        char *slash = strrchr(dir, '/');
        if (!slash || !dir[1]) return -1; // at the root already
        slash[slash == dir ? 1 : 0] = '\0';
    }
    char rel[1024];
    snprintf(rel, sizeof rel, "%s%s/%s", mount, strcmp(dir, "/") ? dir : "", file);
    return read_small(rel, buf, n);
}

// A non-negative decimal integer up to 10^15 ending at `*end` ("" past it); -1 otherwise.
static long long parse_count(const char *s, const char **end) {
    if (!isdigit((unsigned char)*s)) return -1;
    long long v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        v = v * 10 + (*s - '0');
        if (v > 1000000000000000LL) return -1;
    }
    *end = s;
    return v;
}

// cgroup v2 cpu.max "QUOTA PERIOD" (or "max PERIOD") in cores; 0 for no limit or an
// unreadable value.
static double parse_cpu_max(const char *s) {
    const char *end;
    long long quota = parse_count(s, &end);
    if (quota <= 0 || *end != ' ') return 0;
    long long period = parse_count(end + 1, &end);
    if (period <= 0 || (*end && strcmp(end, "\n"))) return 0;
    return (double)quota / (double)period;
}

// One number on a line, as in v1's cpu.cfs_quota_us ("-1" means no limit: returns -1).
static long long parse_line_count(const char *s) {
    const char *end;
    long long v = parse_count(s, &end);
    return v >= 0 && (!*end || !strcmp(end, "\n")) ? v : -1;
}

// The CPU quota of this process's cgroup in cores, the smallest over it and its ancestors
// (each limits the ones below it); 0 when none is set.
static double cgroup_quota(const cgroup_paths *cg) {
    double best = 0;
    char buf[128], period[128];
    int rc;
    for (int up = 0;
         cg->v2[0] && (rc = cgroup_read(V2, cg->v2, up, "cpu.max", buf, sizeof buf)) >= 0; up++) {
        double q = rc ? parse_cpu_max(buf) : 0;
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    for (int up = 0; cg->cpu[0] && (rc = cgroup_read(V1_CPU, cg->cpu, up, "cpu.cfs_quota_us", buf,
                                                     sizeof buf)) >= 0;
         up++) {
        long long q = rc ? parse_line_count(buf) : -1, p = -1;
        if (q > 0 &&
            cgroup_read(V1_CPU, cg->cpu, up, "cpu.cfs_period_us", period, sizeof period) > 0)
            p = parse_line_count(period);
        if (q > 0 && p > 0 && (best == 0 || (double)q / (double)p < best))
            best = (double)q / (double)p;
    }
    return best;
}

// "0-3,8,10-11": the number of CPUs listed; 0 when unreadable or empty.
static int parse_cpu_list(const char *s) {
    long long count = 0;
    while (*s && *s != '\n') {
        const char *end;
        long long a = parse_count(s, &end), b = a;
        if (a < 0 || a >= 1 << 20) return 0;
        s = end;
        if (*s == '-') {
            b = parse_count(s + 1, &end);
            if (b < a || b >= 1 << 20) return 0;
            s = end;
        }
        count += b - a + 1;
        if (count >= 1 << 20) return 0;
        if (*s == ',') s++;
        else if (*s && *s != '\n') return 0;
    }
    return (int)count;
}

// The CPUs of this process's cgroup cpuset (all the ranks of a job or container on this
// node may use them); 0 when unknown. The deepest level that has the file says it: its
// effective set already excludes what the ancestors exclude.
static int cgroup_cpuset_cpus(const cgroup_paths *cg) {
    char buf[4096];
    int rc, cpus;
    for (int up = 0; cg->v2[0] && (rc = cgroup_read(V2, cg->v2, up, "cpuset.cpus.effective", buf,
                                                    sizeof buf)) >= 0;
         up++)
        if (rc && (cpus = parse_cpu_list(buf)) > 0) return cpus;
    for (int up = 0;
         cg->cpuset[0] && (rc = cgroup_read(V1_CPUSET, cg->cpuset, up, "cpuset.effective_cpus", buf,
                                            sizeof buf)) >= 0;
         up++)
        if (rc && (cpus = parse_cpu_list(buf)) > 0) return cpus;
    return 0;
}

int backend_cpu_threads_rule(int mask_cpus, int node_cpus, double quota_cpus, int local_ranks) {
    const long local = local_ranks > 1 ? local_ranks : 1, mask = mask_cpus > 1 ? mask_cpus : 1;
    const long node = node_cpus > mask ? node_cpus : mask;
    // The local ranks on these cores: all of them on an unbound node; else those whose
    // masks of this size tile the same share of the node.
    long sharing = mask >= node ? local : (local * mask + node - 1) / node;
    if (sharing < 1) sharing = 1;
    long threads = mask / sharing;
    // A quota limits the whole cgroup, which all local ranks share; rounded down, so that no
    // rank's threads outrun it and get throttled for the rest of a period.
    if (quota_cpus > 0 && quota_cpus / (double)local < (double)threads)
        threads = (long)(quota_cpus / (double)local);
    return threads < 1 ? 1 : (int)threads;
}

int backend_cpu_fit_threads(int requested, int local_ranks, char *why, size_t n) {
    cgroup_paths cg;
    cgroup_paths_read(&cg);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1 || online > INT_MAX) online = 1;
    int mask = affinity_cpus();
    if (mask < 1) mask = (int)online;
    int node = cgroup_cpuset_cpus(&cg);
    if (node < 1) node = (int)online;
    if (node < mask) node = mask;
    const double quota = cgroup_quota(&cg);
    const int local = local_ranks > 1 ? local_ranks : 1;
    const int fit = backend_cpu_threads_rule(mask, node, quota, local);

    char cores[256];
    int len = mask >= node
                  ? snprintf(cores, sizeof cores, "%d core%s allowed", mask, mask == 1 ? "" : "s")
                  : snprintf(cores, sizeof cores, "%d of %d cores allowed", mask, node);
    if (quota > 0)
        len += snprintf(cores + len, sizeof cores - (size_t)len, ", cgroup quota %.2f cores",
                        quota);
    snprintf(cores + len, sizeof cores - (size_t)len, ", %d rank%s on this node", local,
             local == 1 ? "" : "s");
    if (requested <= 0) snprintf(why, n, "%s", cores);
    else if (requested > fit) snprintf(why, n, "system.threads; 0 would take %d: %s", fit, cores);
    else snprintf(why, n, "system.threads");
    return requested > 0 ? requested : fit;
}
