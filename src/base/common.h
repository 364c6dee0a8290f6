// common.h: status codes, error propagation and logging shared by every module.
//
// Two tiers of errors (STYLE.md): what a user can cause returns a tri_status up the call
// chain; a broken invariant is a TRI_ASSERT that prints file:line and aborts.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// Exit codes of DESIGN.md; a function returns one of these, main() exits with it.
typedef enum {
    TRI_OK = 0,
    TRI_ERR_INTERNAL = 1,
    TRI_ERR_CONFIG = 2,    // usage or config error
    TRI_ERR_DATA = 3,      // input data error
    TRI_ERR_CKPT = 4,      // checkpoint or model file error
    TRI_ERR_COMM = 5,      // communication failure or timeout
    TRI_ERR_NONFINITE = 6, // non-finite loss or gradients
    // Not an exit code: a stop request (base/stop.h) ended a phase early. Passed up like an
    // error so that every caller unwinds; `train` then exits 0 with the reason.
    TRI_STOPPED = 64,
} tri_status;

typedef enum {
    LOG_LEVEL_DEBUG = 0,
    LOG_LEVEL_INFO = 1,
    LOG_LEVEL_WARN = 2,
    LOG_LEVEL_ERROR = 3
} log_level;

// Logging. log_set_rank() sets the "[r5 tp1 dp0 pp1]" prefix used by ranks != 0.
// TRIDENT_LOG=debug|info|warn picks the level (default info).
void log_init(void);
void log_set_rank(int rank, int tp, int dp, int pp);
// The "[r5 tp1 dp0 pp1] " prefix of this rank's lines ("" on rank 0).
const char *log_rank_prefix(void);
int log_enabled(log_level level);
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Config validation gives the same verdict on every rank, so ranks != 0 hold their stderr
// while it runs and the job prints each problem once. Returns a token for log_unmute.
int log_mute_if_not_rank0(void);
void log_unmute(int token);

#define LOG_DEBUG(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define LOG_INFO(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define LOG_WARN(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define LOG_ERROR(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
// The line after an error that says what to do: "HINT: ..." on stderr, with the rank prefix.
void log_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define LOG_HINT(...) log_hint(__VA_ARGS__)

// Propagate a failing status with a file:line trace (printed at debug level), so that
// a failure deep in a call chain reads like a stack trace.
#define TRI_CHECK(call)                                                                            \
    do {                                                                                           \
        tri_status tri_check_rc_ = (call);                                                         \
        if (tri_check_rc_ != TRI_OK) {                                                             \
            LOG_DEBUG("%s:%d -> %d (%s)", __FILE__, __LINE__, (int)tri_check_rc_, #call);          \
            return tri_check_rc_;                                                                  \
        }                                                                                          \
    } while (0)

// Same, but jumps to a cleanup label with rc set.
#define TRI_CHECK_GOTO(call, rc, label)                                                            \
    do {                                                                                           \
        (rc) = (call);                                                                             \
        if ((rc) != TRI_OK) {                                                                      \
            LOG_DEBUG("%s:%d -> %d (%s)", __FILE__, __LINE__, (int)(rc), #call);                   \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#define TRI_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "trident: internal error at %s:%d: assertion '%s' failed\n", __FILE__, \
                    __LINE__, #cond);                                                              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

// Allocation that cannot fail silently. Out of host memory ends the process with exit 1
// (TRI_ERR_INTERNAL, DESIGN.md "CLI") after a message naming the bytes and, in the _for
// forms, what they were for ("the parameter table"); in a multi-rank job the abort hook (set
// by the comm layer once MPI runs: MPI_Abort) ends every rank, so none waits on this one.
void *xmalloc(size_t bytes);
void *xcalloc(size_t count, size_t size);
void *xmalloc_for(size_t bytes, const char *what);
void *xcalloc_for(size_t count, size_t size, const char *what);
char *xstrdup(const char *s);
// The message and the exit of a failed host allocation of `bytes` for `what` (NULL: not
// known); does not return.
void tri_out_of_host_memory(size_t bytes, const char *what) __attribute__((noreturn));
// How a fatal error ends the process: hook(TRI_ERR_...) when set (the comm layer's, which
// takes every rank of the job down), else exit(code). NULL restores exit.
void tri_set_abort_hook(void (*hook)(int code));
void tri_abort_job(int code) __attribute__((noreturn));
// A growable array with room for one more element: `items` (n used, *cap allocated, elem
// bytes each), reallocated to twice its capacity (at least 16) when full; the new room is
// zeroed. Returns the array to use from now on.
void *xgrow(void *items, int n, int *cap, size_t elem);

double time_now_s(void); // monotonic seconds
// Writes all n bytes of buf to fd, again after a short write or EINTR: 0, or -1 with errno.
int tri_write_all(int fd, const void *buf, size_t n);
// The whole of a regular file of at most `max` bytes, NUL-terminated (*len: its bytes), to
// free(); NULL with errno: fopen's, EISDIR (not a regular file), EFBIG (past max), EIO (a
// short read).
char *tri_read_small_file(const char *path, size_t max, size_t *len);

// The median of v[0..n) (sorted in place; the mean of the middle two for an even n); 0 for n 0.
double tri_median(double *v, int n);

// mkdir -p (mode 0755): 0, or -1 with errno set.
int make_dirs(const char *path);
