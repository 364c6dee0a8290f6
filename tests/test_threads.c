// test_threads.c: how many CPU threads a rank takes with system.threads 0, and how their
// idle waiting is described (src/compute/backend_cpu_process.c):
//   - the rule on the layouts of README "CPU threads": one process, ranks sharing a node,
//     ranks bound by a launcher (srun, mpirun --bind-to), cgroup quotas;
//   - the cgroup files, v2 and v1, read from fake trees (TRIDENT_TEST_CGROUP_ROOT): quotas
//     up the hierarchy, cpusets, a container's root, the lines of /proc/self/cgroup;
//   - the wait-policy text (a user's odd value cannot break the run record's JSON);
//   - a seeded fuzzer of those files: each case writes a fake tree whose files are well
//     formed or malformed in a known way, derives the expected thread count from the kernel's
//     formats (a malformed file is ignored), and runs the reader in a child: never a signal,
//     never past the time bound, always the expected count and text.
//
//   build/tests/test_threads [--cases N] [--seed S]   (make test: 300 cases per family)
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compute/backend.h"
#include "fuzzlib.h"
#include "testlib.h"

static char g_root[256];
static int g_mask, g_online; // this process's real affinity mask and online CPUs
static uint64_t g_seed = 16, g_rng;

static uint64_t rnd(void) { return fuzz_rnd(&g_rng); }
static long rnd_in(long lo, long hi) { return lo + (long)(rnd() % (uint64_t)(hi - lo + 1)); }

// ---- fake trees ----

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}
static void tree_clear(void) {
    nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    mkdir(g_root, 0755);
}
// Writes g_root + rel (its folders made), `n` bytes of `text` (-1: strlen).
static void put(const char *rel, const char *text, long n) {
    char path[1024];
    snprintf(path, sizeof path, "%s%s", g_root, rel);
    for (char *p = path + strlen(g_root) + 1; *p; p++)
        if (*p == '/') *p = '\0', mkdir(path, 0755), *p = '/';
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(text, 1, n < 0 ? strlen(text) : (size_t)n, f);
    fclose(f);
}
typedef struct {
    int threads;
    char why[512];
} fit_result;

static fit_result fit(int requested, int local) {
    fit_result r;
    r.threads = backend_cpu_fit_threads(requested, local, r.why, sizeof r.why);
    return r;
}

// ---- the rule ----

static void test_rule(void) {
    static const struct {
        int mask, node;
        double quota;
        int local, want;
        const char *what;
    } cases[] = {
        {2, 2, 0, 1, 2, "one process takes every core"},
        {1, 2, 0, 1, 1, "taskset -c 0: one core, one thread"},
        {2, 2, 0, 2, 1, "2 ranks on 2 cores: 1 thread each"},
        {2, 2, 0, 8, 1, "8 ranks on 2 cores: never below 1"},
        {64, 64, 0, 8, 8, "8 unbound ranks on 64 cores"},
        {8, 64, 0, 8, 8, "srun --cpu-bind: 8 ranks bound to 8 cores each"},
        {32, 64, 0, 8, 8, "mpirun --bind-to socket: 4 ranks on each 32-core socket"},
        {1, 64, 0, 2, 1, "mpirun --bind-to core: 1 core each"},
        {4, 64, 0, 1, 4, "one process bound to 4 of 64 cores"},
        {64, 64, 4, 1, 4, "docker --cpus=4 on 64 cores"},
        {64, 64, 4, 4, 1, "4 ranks in a 4-core quota"},
        {64, 64, 1.5, 1, 1, "a quota of 1.5 cores: 1 thread, never throttled"},
        {64, 64, 6, 2, 3, "2 ranks in a 6-core quota"},
        {16, 16, 0.5, 1, 1, "half a core: still 1 thread"},
        {0, 0, 0, 0, 1, "nothing known: 1 thread"},
        {2, 1, 0, 1, 2, "a cpuset smaller than the mask counts as the mask"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = backend_cpu_threads_rule(cases[i].mask, cases[i].node, cases[i].quota,
                                           cases[i].local);
        if (got != cases[i].want) {
            printf("  rule: %s: got %d, want %d\n", cases[i].what, got, cases[i].want);
            bad++;
        }
    }
    TEST_CHECK(!bad, "threads_rule_layouts", "%d of the layouts above wrong", bad);
}

// ---- the cgroup files, one shape at a time ----

static void expect_fit(const char *name, int local, int want_threads, const char *want_why) {
    fit_result r = fit(0, local);
    TEST_CHECK(r.threads == want_threads && strstr(r.why, want_why), name,
               "got %d (%s), want %d with '%s'", r.threads, r.why, want_threads, want_why);
}

static void test_cgroup_files(void) {
    char want[256];
    tree_clear();
    // No file at all: the mask and the online CPUs say it.
    if (g_mask >= g_online)
        snprintf(want, sizeof want, "%d core%s allowed, 1 rank on this node", g_mask,
                 g_mask == 1 ? "" : "s");
    else
        snprintf(want, sizeof want, "%d of %d cores allowed, 1 rank on this node", g_mask,
                 g_online);
    expect_fit("threads_no_cgroup_files", 1, backend_cpu_threads_rule(g_mask, g_online, 0, 1),
               want);

    // v2: the quota is the smallest up the hierarchy; "max" is none.
    tree_clear();
    put("/proc/self/cgroup", "0::/job/step\n", -1);
    put("/sys/fs/cgroup/cpu.max", "max 100000\n", -1);
    put("/sys/fs/cgroup/job/cpu.max", "100000 100000\n", -1);
    put("/sys/fs/cgroup/job/step/cpu.max", "300000 100000\n", -1);
    expect_fit("threads_v2_quota_smallest_ancestor", 1, 1, "cgroup quota 1.00 cores");

    tree_clear();
    put("/proc/self/cgroup", "0::/\n", -1); // a container's own namespace: its root
    put("/sys/fs/cgroup/cpu.max", "150000 100000", -1);
    expect_fit("threads_v2_container_root", 1, 1, "cgroup quota 1.50 cores");

    // v2 cpuset: a node of 64 CPUs of which this process may use its mask.
    tree_clear();
    put("/proc/self/cgroup", "0::/job\n", -1);
    put("/sys/fs/cgroup/job/cpuset.cpus.effective", "0-31,32,33-63\n", -1);
    snprintf(want, sizeof want, "of 64 cores allowed, 2 ranks");
    expect_fit("threads_v2_cpuset_node", 2, backend_cpu_threads_rule(g_mask, 64, 0, 2),
               g_mask < 64 ? want : "cores allowed");

    // v1 (this machine's hybrid layout): cpu and cpuset hierarchies of their own.
    tree_clear();
    put("/proc/self/cgroup", "12:pids:/\n4:cpu,cpuacct:/slurm/job_7\n3:cpuset:/slurm/job_7\n0::/\n",
        -1);
    put("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n", -1);
    put("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n", -1);
    put("/sys/fs/cgroup/cpu/slurm/job_7/cpu.cfs_quota_us", "250000\n", -1);
    put("/sys/fs/cgroup/cpu/slurm/job_7/cpu.cfs_period_us", "100000\n", -1);
    put("/sys/fs/cgroup/cpuset/slurm/job_7/cpuset.effective_cpus", "0-127\n", -1);
    expect_fit("threads_v1_quota_and_cpuset", 1, backend_cpu_threads_rule(g_mask, 128, 2.5, 1),
               "cgroup quota 2.50 cores");

    // v1 inside a container without a cgroup namespace: the path names the host's cgroup,
    // which the container's mount holds at its root.
    tree_clear();
    put("/proc/self/cgroup", "5:cpu,cpuacct:/docker/0123abcd\n", -1);
    put("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "100000\n", -1);
    put("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n", -1);
    expect_fit("threads_v1_container_walks_to_root", 1, 1, "cgroup quota 1.00 cores");

    // A path with ".." is never followed (a fake file could point outside the mount).
    tree_clear();
    put("/proc/self/cgroup", "0::/../../escape\n", -1);
    put("/sys/fs/cgroup/cpu.max", "100000 100000\n", -1);
    fit_result r = fit(0, 1);
    TEST_CHECK(!strstr(r.why, "quota"), "threads_cgroup_dotdot_ignored", "got %s", r.why);

    // An explicit count is kept, and says what 0 would take when it is more.
    tree_clear();
    put("/proc/self/cgroup", "0::/\n", -1);
    put("/sys/fs/cgroup/cpu.max", "100000 100000\n", -1);
    r = fit(3, 1);
    TEST_CHECK(r.threads == 3 && strstr(r.why, "system.threads; 0 would take 1: ") &&
                   strstr(r.why, "cgroup quota 1.00 cores"),
               "threads_explicit_kept_and_explained", "got %d (%s)", r.threads, r.why);
    r = fit(1, 1);
    TEST_CHECK(r.threads == 1 && !strcmp(r.why, "system.threads"), "threads_explicit_fits",
               "got %d (%s)", r.threads, r.why);
}

// ---- the wait text ----

static int json_safe(const char *s) {
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) return 0;
    return 1;
}

static void test_wait_describe(void) {
    char out[128];
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("TRIDENT_REEXEC");
    setenv("OMP_WAIT_POLICY", "passive", 1);
    backend_cpu_wait_describe(out, sizeof out);
    TEST_CHECK(!strcmp(out, "OMP_WAIT_POLICY=passive"), "wait_user_policy", "got %s", out);
    setenv("TRIDENT_REEXEC", "OMP_WAIT_POLICY", 1);
    backend_cpu_wait_describe(out, sizeof out);
    TEST_CHECK(!strcmp(out, "OMP_WAIT_POLICY=passive (set by trident)"), "wait_set_by_trident",
               "got %s", out);
    setenv("TRIDENT_REEXEC", "OPENBLAS_CORETYPE", 1);
    backend_cpu_wait_describe(out, sizeof out);
    TEST_CHECK(!strcmp(out, "OMP_WAIT_POLICY=passive"), "wait_restart_for_blas_only", "got %s",
               out);
    setenv("OMP_WAIT_POLICY", "act\"ive\\\n", 1);
    setenv("GOMP_SPINCOUNT", "10000000000000000000000000000000000", 1);
    backend_cpu_wait_describe(out, sizeof out);
    TEST_CHECK(json_safe(out) && strstr(out, "GOMP_SPINCOUNT=") && strstr(out, "act?ive??"),
               "wait_odd_values_json_safe", "got %s", out);
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("TRIDENT_REEXEC");
    backend_cpu_wait_describe(out, sizeof out);
    TEST_CHECK(strstr(out, "default") != NULL, "wait_default", "got %s", out);
}

// ---- the fuzzer ----
//
// Each generator writes one file in a form chosen at random and returns what the kernel's
// format makes of it: a quota in cores (0: none or malformed) or a CPU count (0: malformed).

// Returns 1 when the form is malformed (ignored by the reader).
static int gen_cpu_max(const char *rel, double *quota) {
    char t[256];
    long q = rnd_in(1000, 2000000), p = rnd_in(1000, 1000000);
    int n = -1;
    *quota = 0;
    switch (rnd() % 2 ? rnd() % 3 : 3 + rnd() % 7) { // half of them well formed
    case 0: snprintf(t, sizeof t, "%ld %ld\n", q, p), *quota = (double)q / (double)p; break;
    case 1: snprintf(t, sizeof t, "%ld %ld", q, p), *quota = (double)q / (double)p; break;
    case 2: snprintf(t, sizeof t, "max %ld\n", p); break;
    case 3: snprintf(t, sizeof t, "%ld\n", q); break;         // no period
    case 4: snprintf(t, sizeof t, "-%ld %ld\n", q, p); break; // negative
    case 5: snprintf(t, sizeof t, "%ld 0\n", q); break;       // zero period
    case 6: snprintf(t, sizeof t, "%ld %ld x\n", q, p); break;
    case 7: snprintf(t, sizeof t, "99999999999999999999 %ld\n", p); break;
    case 8: t[0] = '\0'; break;
    default: // bytes, the first never a digit
        n = (int)rnd_in(1, 64);
        for (int i = 0; i < n; i++) t[i] = (char)rnd();
        t[0] = (char)('a' + rnd() % 26);
    }
    put(rel, t, n);
    return *quota == 0 && strncmp(t, "max ", 4);
}

static void gen_cpu_list(const char *rel, int *count) {
    char t[4096] = "";
    size_t len = 0;
    *count = 0;
    int kind = (int)(rnd() % 8);
    if (kind < 4) { // well formed: sorted ranges and single CPUs
        long cpu = rnd_in(0, 8);
        int parts = (int)rnd_in(1, 6);
        for (int i = 0; i < parts; i++) {
            long width = rnd_in(0, 40);
            len += (size_t)snprintf(t + len, sizeof t - len, i ? ",%ld" : "%ld", cpu);
            if (width) len += (size_t)snprintf(t + len, sizeof t - len, "-%ld", cpu + width);
            *count += (int)width + 1;
            cpu += width + rnd_in(2, 9);
        }
        if (kind < 3) snprintf(t + len, sizeof t - len, "\n");
    } else {
        static const char *const bad[] = {"3-1\n",       "0-\n", ",1\n", "1,,2\n", "a\n",
                                          "0-2000000\n", "\n",   "",     "1 2\n",  "-1\n"};
        snprintf(t, sizeof t, "%s", bad[rnd() % (sizeof bad / sizeof bad[0])]);
    }
    put(rel, t, -1);
}

typedef struct {
    const char *name;
    int cases, as_written, ignored, crashes, hangs, wrong;
} family;

enum { VERDICT_AS_WRITTEN, VERDICT_IGNORED, VERDICT_WRONG };

// Runs backend_cpu_fit_threads on the tree just written and checks its count and text
// against the expected quota (0: none) and node CPUs (0: unknown).
static int check_case(const family *fam, int c, int local, double quota, int node, int malformed) {
    fit_result r = fit(0, local);
    if (node < 1) node = g_online;
    if (node < g_mask) node = g_mask;
    int want = backend_cpu_threads_rule(g_mask, node, quota, local);
    char quota_text[64] = "", node_text[64] = "";
    if (quota > 0) snprintf(quota_text, sizeof quota_text, "cgroup quota %.2f cores", quota);
    if (node > g_mask) snprintf(node_text, sizeof node_text, "%d of %d cores", g_mask, node);
    if (r.threads == want && json_safe(r.why) && (quota > 0) == !!strstr(r.why, "quota") &&
        (quota <= 0 || strstr(r.why, quota_text)) && (node > g_mask) == !!strstr(r.why, " of ") &&
        (node <= g_mask || strstr(r.why, node_text)))
        return malformed ? VERDICT_IGNORED : VERDICT_AS_WRITTEN;
    printf("  %s case %d: got %d (%s); want %d, quota %.3f, node %d (seed %llu)\n", fam->name, c,
           r.threads, r.why, want, quota, node, (unsigned long long)g_seed);
    fflush(stdout);
    return VERDICT_WRONG;
}

// One case: writes a fake tree and checks the reader on it (check_case's verdict).
typedef int (*fuzz_case)(const family *fam, int c);

// Runs a family's cases in one child, which sends each verdict down a pipe as it goes: a
// crash or a hang (the whole family past FAMILY_TIMEOUT_S) is then counted at the case
// that caused it, and the child's random stream is the same as it would be in-process.
#define FAMILY_TIMEOUT_S 60
static void run_family(family *fam, fuzz_case one, int cases) {
    int fd[2];
    if (pipe(fd)) return;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        alarm(FAMILY_TIMEOUT_S);
        for (int c = 0; c < cases; c++) {
            char v = (char)one(fam, c);
            if (write(fd[1], &v, 1) != 1) _exit(2);
        }
        _exit(0);
    }
    close(fd[1]);
    char v;
    while (read(fd[0], &v, 1) == 1) {
        fam->cases++;
        if (v == VERDICT_AS_WRITTEN) fam->as_written++;
        else if (v == VERDICT_IGNORED) fam->ignored++;
        else fam->wrong++;
    }
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        printf("  %s case %d: %s (seed %llu)\n", fam->name, fam->cases,
               sig == SIGALRM ? "past the time bound" : strsignal(sig), (unsigned long long)g_seed);
        fam->cases++;
        if (sig == SIGALRM) fam->hangs++;
        else fam->crashes++;
    }
}

static void report(const family *fam) {
    printf("%s: %d cases, %d read as written, %d with a malformed file ignored, %d crashes, "
           "%d hangs, %d wrong\n",
           fam->name, fam->cases, fam->as_written, fam->ignored, fam->crashes, fam->hangs,
           fam->wrong);
    char name[64];
    snprintf(name, sizeof name, "fuzz_%s", fam->name);
    TEST_CHECK(fam->cases > 0 && !fam->crashes && !fam->hangs && !fam->wrong, name,
               "see the lines above");
}

// A random cgroup path of depth 0-3 ("/" or "/a/b").
static void gen_path(char *path, size_t n) {
    int depth = (int)rnd_in(0, 3);
    snprintf(path, n, depth ? "" : "/");
    for (int i = 0; i < depth; i++)
        snprintf(path + strlen(path), n - strlen(path), "/l%d_%c", i, (char)('a' + rnd() % 26));
}

// Levels of `path`, deepest first, as prefixes: "/a/b" -> "/a/b", "/a", "".
static int levels(const char *path, char lv[4][128]) {
    int n = 0;
    snprintf(lv[n++], 128, "%s", strcmp(path, "/") ? path : "");
    while (lv[n - 1][0]) {
        snprintf(lv[n], 128, "%s", lv[n - 1]);
        *strrchr(lv[n], '/') = '\0';
        n++;
    }
    return n;
}

static int fuzz_v2(const family *fam, int c) {
    tree_clear();
    char path[128], lv[4][128], rel[1024], line[160];
    gen_path(path, sizeof path);
    snprintf(line, sizeof line, "0::%s\n", path);
    put("/proc/self/cgroup", line, -1);
    int n = levels(path, lv), node = 0, malformed = 0;
    double quota = 0;
    for (int i = 0; i < n; i++) {
        if (rnd() % 3) {
            double q;
            snprintf(rel, sizeof rel, "/sys/fs/cgroup%s/cpu.max", lv[i]);
            malformed |= gen_cpu_max(rel, &q);
            if (q > 0 && (quota == 0 || q < quota)) quota = q;
        }
        if (rnd() % 3 == 0) {
            int cpus;
            snprintf(rel, sizeof rel, "/sys/fs/cgroup%s/cpuset.cpus.effective", lv[i]);
            gen_cpu_list(rel, &cpus);
            malformed |= cpus == 0;
            if (!node) node = cpus; // the deepest well-formed one
        }
    }
    return check_case(fam, c, (int)rnd_in(1, 8), quota, node, malformed);
}

static int fuzz_v1(const family *fam, int c) {
    tree_clear();
    char path[128], lv[4][128], rel[1024], text[512];
    gen_path(path, sizeof path);
    snprintf(text, sizeof text, "7:cpuset:%s\n4:cpu,cpuacct:%s\n1:name=systemd:/\n0::/\n", path,
             path);
    put("/proc/self/cgroup", text, -1);
    int n = levels(path, lv), node = 0, malformed = 0;
    double quota = 0;
    // A container without a cgroup namespace holds only the root level, whatever the path.
    int first = rnd() % 4 == 0 ? n - 1 : 0;
    for (int i = first; i < n; i++) {
        if (rnd() % 3) {
            long q = rnd_in(1000, 2000000), p = rnd_in(1000, 1000000);
            int form = (int)(rnd() % 2 ? rnd() % 2 : 2 + rnd() % 3); // 0, 1 well formed
            snprintf(rel, sizeof rel, "/sys/fs/cgroup/cpu%s/cpu.cfs_quota_us", lv[i]);
            snprintf(text, sizeof text, form == 1 ? "-1\n" : form == 2 ? "x%ld\n" : "%ld\n", q);
            put(rel, text, -1);
            snprintf(rel, sizeof rel, "/sys/fs/cgroup/cpu%s/cpu.cfs_period_us", lv[i]);
            snprintf(text, sizeof text, form == 3 ? "0\n" : form == 4 ? "%ld junk\n" : "%ld\n", p);
            put(rel, text, -1);
            double qc = form == 0 ? (double)q / (double)p : 0;
            malformed |= form >= 2;
            if (qc > 0 && (quota == 0 || qc < quota)) quota = qc;
        }
        if (rnd() % 3 == 0) {
            int cpus;
            snprintf(rel, sizeof rel, "/sys/fs/cgroup/cpuset%s/cpuset.effective_cpus", lv[i]);
            gen_cpu_list(rel, &cpus);
            malformed |= cpus == 0;
            if (!node) node = cpus;
        }
    }
    return check_case(fam, c, (int)rnd_in(1, 8), quota, node, malformed);
}

// /proc/self/cgroup itself: lines well formed or not; only a well-formed v2 line leads to
// the quota written at its path.
static int fuzz_proc(const family *fam, int c) {
    tree_clear();
    char text[2048] = "", rel[512];
    size_t len = 0;
    int good = 0, kind = (int)(rnd() % 8);
    switch (kind) {
    case 0: len = (size_t)snprintf(text, sizeof text, "0::/ok\n"), good = 1; break;
    case 1: len = (size_t)snprintf(text, sizeof text, "0::ok\n"); break;        // relative
    case 2: len = (size_t)snprintf(text, sizeof text, "0:/ok\n"); break;        // one colon
    case 3: len = (size_t)snprintf(text, sizeof text, "0::/ok/../ok\n"); break; // ".."
    case 4: // a path longer than any cgroup's
        len = (size_t)snprintf(text, sizeof text, "0::/");
        for (int i = 0; i < 600; i++) text[len++] = 'a';
        text[len++] = '\n';
        break;
    case 5: len = (size_t)snprintf(text, sizeof text, "0::/ok"), good = 1; break; // no newline
    default:
        len = (size_t)rnd_in(0, 300);
        for (size_t i = 0; i < len; i++) text[i] = (char)rnd();
        if (len) text[0] = 'x'; // never "0:"
    }
    put("/proc/self/cgroup", text, (long)len);
    snprintf(rel, sizeof rel, "/sys/fs/cgroup/ok/cpu.max");
    put(rel, "100000 100000\n", -1);
    return check_case(fam, c, 1, good ? 1.0 : 0, 0, !good);
}

int main(int argc, char **argv) {
    int cases = 300;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cases")) cases = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) g_seed = strtoull(argv[i + 1], NULL, 10);
    }
    g_rng = g_seed;
    log_init();
    cpu_set_t set;
    g_mask = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    g_online = (int)sysconf(_SC_NPROCESSORS_ONLN);
    // tmpfs where there is one: a case writes and removes a dozen small files.
    snprintf(g_root, sizeof g_root, "%s/test_threads.XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(g_root)) return 1;
    setenv("TRIDENT_TEST_CGROUP_ROOT", g_root, 1);

    test_rule();
    test_cgroup_files();
    test_wait_describe();
    family v2 = {"cgroup_v2", 0, 0, 0, 0, 0, 0}, v1 = {"cgroup_v1", 0, 0, 0, 0, 0, 0},
           proc = {"proc_cgroup", 0, 0, 0, 0, 0, 0};
    run_family(&v2, fuzz_v2, cases);
    run_family(&v1, fuzz_v1, cases);
    run_family(&proc, fuzz_proc, cases);
    report(&v2);
    report(&v1);
    report(&proc);

    nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_EXIT();
}
