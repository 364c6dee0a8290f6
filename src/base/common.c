// common.c: logging, checked allocation, clock, directories.
#include "base/common.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "trident: out of host memory allocating %zu bytes\n", bytes);
        abort();
    }
    return p;
}

void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "trident: out of host memory allocating %zu x %zu bytes\n", count, size);
        abort();
    }
    return p;
}

void *xgrow(void *items, int n, int *cap, size_t elem) {
    if (n < *cap) return items;
    const int grown = *cap >= 8 ? 2 * *cap : 16;
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
