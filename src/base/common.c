// common.c: logging, checked allocation, clock, directories.
#include "base/common.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/checked.h"
#include "base/env.h"

static log_level g_level = LOG_LEVEL_INFO;
static int g_rank = 0;
static char g_prefix[64] = "";

void log_init(void) {
    const char *env = env_get(ENV_TRIDENT_LOG);
    if (!env) return;
    if (!strcmp(env, "debug")) g_level = LOG_LEVEL_DEBUG;
    else if (!strcmp(env, "info")) g_level = LOG_LEVEL_INFO;
    else if (!strcmp(env, "warn")) g_level = LOG_LEVEL_WARN;
    else if (!strcmp(env, "error")) g_level = LOG_LEVEL_ERROR;
}

void log_set_rank(int rank, int tp, int dp, int pp) {
    g_rank = rank;
    if (rank == 0) g_prefix[0] = '\0';
    else snprintf(g_prefix, sizeof g_prefix, "[r%d tp%d dp%d pp%d] ", rank, tp, dp, pp);
}

const char *log_rank_prefix(void) { return g_prefix; }

int log_enabled(log_level level) { return level >= g_level; }

void log_msg(log_level level, const char *fmt, ...) {
    if (level < g_level) return;
    // Info lines are rank 0's summaries; other ranks speak only at debug, warn and error.
    if (level == LOG_LEVEL_INFO && g_rank != 0) return;
    FILE *f = level >= LOG_LEVEL_WARN ? stderr : stdout;
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const char *tag = level == LOG_LEVEL_ERROR  ? "error: "
                      : level == LOG_LEVEL_WARN ? "warning: "
                                                : "";
    fprintf(f, "%s%s%s\n", g_prefix, tag, line);
    fflush(f);
}

void log_hint(const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%sHINT: %s\n", g_prefix, line);
    fflush(stderr);
}

int log_mute_if_not_rank0(void) {
    if (g_rank == 0) return -1;
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    if (saved < 0 || null < 0) {
        if (saved >= 0) close(saved);
        if (null >= 0) close(null);
        return -1;
    }
    dup2(null, 2);
    close(null);
    return saved;
}

void log_unmute(int token) {
    if (token < 0) return;
    fflush(stderr);
    dup2(token, 2);
    close(token);
}

static void (*g_abort_hook)(int code);

void tri_set_abort_hook(void (*hook)(int code)) { g_abort_hook = hook; }

void tri_abort_job(int code) {
    fflush(stdout);
    fflush(stderr);
    if (g_abort_hook) g_abort_hook(code);
    exit(code); // no hook, or it returned
}

void tri_out_of_host_memory(size_t bytes, const char *what) {
    // No allocation here: the message is formatted on the stack.
    LOG_ERROR("out of host memory: %zu bytes (%.3g GB)%s%s could not be allocated", bytes,
              (double)bytes / 1e9, what ? " for " : "", what ? what : "");
    LOG_HINT("the process's memory limit (ulimit -v, the job's memory request) or the node's "
             "memory is too small for this run; `trident plan CONFIG` shows what a rank holds");
    tri_abort_job(TRI_ERR_INTERNAL);
}

// TRIDENT_TEST_HOST_ALLOC_LIMIT (a test hook): allocations past it fail. Read once; 0: none.
static size_t test_alloc_limit(void) {
    static int read;
    static size_t limit;
    if (!read) {
        const char *v = env_get(ENV_TEST_HOST_ALLOC_LIMIT);
        limit = v ? (size_t)strtoull(v, NULL, 10) : 0;
        read = 1;
    }
    return limit;
}

void *xmalloc_for(size_t bytes, const char *what) {
    const size_t limit = test_alloc_limit();
    void *p = limit && bytes > limit ? NULL : malloc(bytes ? bytes : 1);
    if (!p) tri_out_of_host_memory(bytes, what);
    return p;
}

void *xcalloc_for(size_t count, size_t size, const char *what) {
    const size_t limit = test_alloc_limit(), bytes = sat_mul_size(count, size);
    void *p = limit && bytes > limit ? NULL : calloc(count ? count : 1, size ? size : 1);
    if (!p) tri_out_of_host_memory(bytes, what);
    return p;
}

void *xmalloc(size_t bytes) { return xmalloc_for(bytes, NULL); }

void *xcalloc(size_t count, size_t size) { return xcalloc_for(count, size, NULL); }

void *xgrow(void *items, int n, int *cap, size_t elem) {
    if (n < *cap) return items;
    // Callers bound their counts (an int n); the doubling must not pass INT_MAX either.
    const int grown = *cap >= 8 ? (*cap <= INT_MAX / 2 ? 2 * *cap : INT_MAX) : 16;
    TRI_ASSERT(grown > n);
    char *bigger = xcalloc((size_t)grown, elem);
    if (n) memcpy(bigger, items, (size_t)n * elem);
    free(items);
    *cap = grown;
    return bigger;
}

char *xstrdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

double time_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int make_dirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

char *tri_read_small_file(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat st;
    const int err = fstat(fileno(f), &st) != 0   ? errno
                    : !S_ISREG(st.st_mode)       ? EISDIR
                    : (uint64_t)st.st_size > max ? EFBIG
                                                 : 0;
    char *buf = NULL;
    if (!err) {
        buf = xmalloc((size_t)st.st_size + 1);
        *len = fread(buf, 1, (size_t)st.st_size, f);
        buf[*len] = '\0';
    }
    const int short_read = buf && (*len != (size_t)st.st_size || ferror(f));
    fclose(f);
    if (!err && !short_read) return buf;
    free(buf);
    errno = err ? err : EIO;
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tri_median(double *v, int n) {
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int tri_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return -1;
        p += put, n -= (size_t)put;
    }
    return 0;
}
