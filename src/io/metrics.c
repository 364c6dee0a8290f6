// metrics.c: the JSONL metrics file. Every line is one JSON object; two runs of the same
// config, layout and backend write identical lines apart from the timing fields. Writes are
// checked (metrics.h): a line is either in the file whole or not at all.
#include "io/metrics.h"

#include <ctype.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"

#ifndef TRIDENT_VERSION
#define TRIDENT_VERSION "0.1.0"
#endif

void metrics_format_double(char *buf, size_t n, double x) {
    if (!isfinite(x)) {
        snprintf(buf, n, "null");
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

static int has_file(const metrics_log *ml) { return ml->path && ml->fd >= 0; }

// The first failed write (`what`: "step 12 line", "run record", ...): the file stays as it
// is (complete lines only) and gets no more.
static void metrics_fail(metrics_log *ml, int err, const char *what) {
    if (ml->failed) return;
    ml->failed = 1;
    ml->failed_errno = err;
    snprintf(ml->failed_line, sizeof ml->failed_line, "%s", what);
    if (ml->required) {
        LOG_ERROR("cannot write metrics file %s (the %s): %s", ml->path, what, strerror(err));
        LOG_HINT("free space on its file system or point log.metrics elsewhere; the run stops at "
                 "the next step boundary, writes a checkpoint where checkpoint.dir is set, and "
                 "exits 4 (log.metrics_required: false keeps training without metrics)");
    } else {
        LOG_WARN("!!! METRICS LOST: cannot write metrics file %s (the %s): %s. "
                 "log.metrics_required is false, so training goes on, but NO MORE METRICS are "
                 "written in this run; the file keeps its complete lines up to this one !!!",
                 ml->path, what, strerror(err));
    }
}

// Writes one whole line (ending in '\n') at the end of the file. A short write is undone, so
// that the file never holds a torn line.
static void write_line(metrics_log *ml, const char *text, size_t len, const char *what) {
    if (!has_file(ml) || ml->failed) return;
    size_t done = 0;
    int err = 0;
    while (done < len) {
        size_t chunk = len - done;
        if (ml->full_at >= 0) { // the test hook: a file system that is full at full_at bytes
            int64_t room = ml->full_at - (ml->size + (int64_t)done);
            if (room <= 0) {
                err = ENOSPC;
                break;
            }
            if ((int64_t)chunk > room) chunk = (size_t)room;
        }
        ssize_t w = write(ml->fd, text + done, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            err = w < 0 ? errno : EIO;
            break;
        }
        done += (size_t)w;
    }
    if (!err) {
        ml->size += (int64_t)len;
        return;
    }
    if (done > 0 && ftruncate(ml->fd, (off_t)ml->size) != 0)
        LOG_WARN("could not cut the torn line off %s: %s", ml->path, strerror(errno));
    metrics_fail(ml, err, what);
}

static void write_linef(metrics_log *ml, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void write_linef(metrics_log *ml, const char *what, const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    TRI_ASSERT(n > 0 && (size_t)n < sizeof text);
    write_line(ml, text, (size_t)n, what);
}

// Rewrites `path` with the lines that a run resumed at `step` keeps: the run records, the
// lines of steps up to `step`, and no torn last line. Sets *eval_miss when the step line of
// `step` is kept but no eval line of it. 0, or an errno.
static int keep_lines_until(const char *path, int step, int *eval_miss) {
    FILE *in = fopen(path, "r");
    if (!in) return errno == ENOENT ? 0 : errno;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        int err = errno;
        fclose(in);
        return err;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int step_kept = 0, eval_kept = 0, torn = 0;
    while ((len = getline(&line, &cap, in)) > 0) {
        if (line[len - 1] != '\n') { // only the last line can lack it
            torn = 1;
            continue;
        }
        const char *s = strstr(line, "\"step\":");
        const int at = s ? atoi(s + 7) : -1;
        if (!strstr(line, "\"type\":\"run\"") && s && at > step) continue;
        if (at == step && strstr(line, "\"type\":\"step\"")) step_kept = 1;
        if (at == step && strstr(line, "\"type\":\"eval\"")) eval_kept = 1;
        fputs(line, out);
    }
    free(line);
    int err = ferror(in) ? EIO : 0;
    fclose(in);
    if (fflush(out) != 0 || fsync(fileno(out)) != 0) err = err ? err : errno;
    if (fclose(out) != 0) err = err ? err : errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) {
        unlink(tmp);
        return err;
    }
    if (torn) LOG_INFO("metrics: removed a torn last line from %s", path);
    *eval_miss = step_kept && !eval_kept;
    return 0;
}

tri_status metrics_open(metrics_log *ml, const run_config *cfg, int world, const char *backend,
                        const char *comm, const char *extra_json, int resumed_step) {
    memset(ml, 0, sizeof *ml);
    ml->fd = -1;
    ml->required = cfg->log.metrics_required;
    ml->full_at = env_get(ENV_TEST_METRICS_FULL_BYTES)
                      ? strtoll(env_get(ENV_TEST_METRICS_FULL_BYTES), NULL, 10)
                      : -1;
    char path[4096];
    if (cfg->log.metrics) snprintf(path, sizeof path, "%s", cfg->log.metrics);
    else snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->run.out_dir);
    ml->path = xstrdup(path);
    if (resumed_step >= 0) {
        int err = keep_lines_until(path, resumed_step, &ml->resumed_eval_miss);
        if (err) {
            metrics_fail(ml, err, "lines kept for the resume");
            if (ml->required) return TRI_ERR_CKPT;
        }
    }
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (resumed_step >= 0 ? O_APPEND : O_TRUNC);
    ml->fd = ml->failed ? -1 : open(path, flags, 0644);
    if (!ml->failed && ml->fd < 0) {
        const int err = errno;
        LOG_ERROR("cannot write metrics file %s: %s", path, strerror(err));
        LOG_HINT("check log.metrics and run.out_dir");
        if (ml->required) {
            free(ml->path);
            ml->path = NULL;
            return TRI_ERR_CONFIG;
        }
        LOG_WARN("log.metrics_required is false: training without metrics");
        ml->failed = 1;
        ml->failed_errno = err;
        snprintf(ml->failed_line, sizeof ml->failed_line, "run record");
        return TRI_OK;
    }
    struct stat st;
    if (has_file(ml)) ml->size = fstat(ml->fd, &st) == 0 ? (int64_t)st.st_size : 0;
    // The run record holds the whole config: rendered in memory, written as one line.
    char *record = NULL;
    size_t record_len = 0;
    FILE *mem = open_memstream(&record, &record_len);
    TRI_ASSERT(mem);
    fprintf(mem,
            "{\"type\":\"run\",\"version\":\"%s\",\"world\":%d,"
            "\"mesh\":{\"tp\":%d,\"pp\":%d,\"dp\":%d},\"backend\":\"%s\",\"comm\":\"%s\","
            "\"config\":",
            TRIDENT_VERSION, world, cfg->parallel.tp, cfg->parallel.pp, cfg->parallel.dp, backend,
            comm);
    config_print_json(cfg, mem);
    fprintf(mem, "%s}\n", extra_json ? extra_json : "");
    TRI_ASSERT(fclose(mem) == 0);
    write_line(ml, record, record_len, "run record");
    free(record);
    return metrics_stops_run(ml) ? TRI_ERR_CKPT : TRI_OK;
}

void metrics_write_step(metrics_log *ml, const metrics_step *s) {
    if (!has_file(ml)) return;
    char loss[32], lr[32], norm[32], mfu[32], bubble[160] = "", what[32], straggler[384] = "";
    metrics_format_double(loss, sizeof loss, s->loss);
    metrics_format_double(lr, sizeof lr, s->lr);
    metrics_format_double(norm, sizeof norm, s->grad_norm);
    metrics_format_double(mfu, sizeof mfu, s->mfu);
    if (s->pipelined)
        snprintf(bubble, sizeof bubble,
                 ",\"bubble\":%.4f,\"bubble_formula\":%.4f,\"pass_ms\":{\"F\":%.3f,\"B\":%.3f,"
                 "\"W\":%.3f}",
                 s->bubble, s->bubble_formula, s->pass_ms[0], s->pass_ms[1], s->pass_ms[2]);
    if (s->has_straggler) {
        // A host name is [A-Za-z0-9.-]; anything else is shown as '?' so the JSON stays valid.
        char host[sizeof s->straggler_host];
        size_t i = 0;
        for (; i + 1 < sizeof host && s->straggler_host[i]; i++) {
            const char ch = s->straggler_host[i];
            host[i] = (isalnum((unsigned char)ch) || ch == '.' || ch == '-' || ch == '_') ? ch
                                                                                          : '?';
        }
        host[i] = '\0';
        snprintf(straggler, sizeof straggler,
                 ",\"straggler\":{\"rank\":%d,\"host\":\"%s\",\"excess_pct\":%.1f,"
                 "\"step_ms\":%.3f,\"compute_ms\":%.3f,\"comm_wait_ms\":%.3f,"
                 "\"median_compute_ms\":%.3f}",
                 s->straggler_rank, host, s->straggler_excess_pct, s->straggler_step_ms,
                 s->straggler_compute_ms, s->straggler_wait_ms, s->straggler_median_ms);
    }
    char plan[48] = "";
    if (s->plan_ratio > 0) snprintf(plan, sizeof plan, ",\"plan_ratio\":%.4f", s->plan_ratio);
    snprintf(what, sizeof what, "step %d line", s->step);
    write_linef(
        ml, what,
        "{\"type\":\"step\",\"step\":%d,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,"
        "\"tokens\":%lld,\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"mfu\":%s%s,"
        "\"mem_peak_bytes\":%llu,\"comm_bytes\":{\"tp\":%llu,\"pp\":%llu,\"dp\":%llu}%s%s}\n",
        s->step, loss, lr, norm, (long long)s->tokens, s->step_ms, s->tokens_per_s, mfu, plan,
        (unsigned long long)s->mem_peak_bytes, (unsigned long long)s->comm_tp,
        (unsigned long long)s->comm_pp, (unsigned long long)s->comm_dp, bubble, straggler);
}

void metrics_write_eval(metrics_log *ml, int step, const char *const *names, const double *val_loss,
                        int n) {
    if (!has_file(ml)) return;
    char v[32], what[32];
    snprintf(what, sizeof what, "eval %d line", step);
    // Names are [A-Za-z0-9_.-] (config validation): no JSON escapes needed.
    char *line = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&line, &len);
    TRI_ASSERT(f);
    fprintf(f, "{\"type\":\"eval\",\"step\":%d", step);
    for (int i = 0; i < n; i++) {
        metrics_format_double(v, sizeof v, val_loss[i]);
        if (names) fprintf(f, ",\"val_loss/%s\":%s", names[i], v);
        else fprintf(f, ",\"val_loss\":%s", v);
    }
    fputs("}\n", f);
    TRI_ASSERT(fclose(f) == 0);
    write_line(ml, line, len, what);
    free(line);
}

void metrics_write_checkpoint(metrics_log *ml, int step, const char *dir, double blocked_ms) {
    if (!has_file(ml)) return;
    char what[32];
    snprintf(what, sizeof what, "checkpoint %d line", step);
    char text[4400];
    int n = snprintf(text, sizeof text,
                     "{\"type\":\"checkpoint\",\"step\":%d,\"dir\":\"%s/step_%08d\","
                     "\"blocked_ms\":%.3f}\n",
                     step, dir, step, blocked_ms);
    TRI_ASSERT(n > 0 && (size_t)n < sizeof text);
    write_line(ml, text, (size_t)n, what);
    // A file system that accepts writes and fails only when they reach the disk (NFS, a
    // quota) says so at fsync: once per checkpoint, so that the lines up to a checkpoint
    // are known to be on disk.
    if (!ml->failed && fsync(ml->fd) != 0 && errno != EINVAL && errno != EROFS)
        metrics_fail(ml, errno, what);
}

int metrics_stops_run(const metrics_log *ml) { return ml->failed && ml->required; }

tri_status metrics_close(metrics_log *ml) {
    if (has_file(ml)) {
        if (!ml->failed && fsync(ml->fd) != 0 && errno != EINVAL && errno != EROFS)
            metrics_fail(ml, errno, "final fsync");
        if (close(ml->fd) != 0) metrics_fail(ml, errno, "final close");
        ml->fd = -1;
    }
    return metrics_stops_run(ml) ? TRI_ERR_CKPT : TRI_OK;
}

void metrics_free(metrics_log *ml) {
    if (has_file(ml)) close(ml->fd);
    free(ml->path);
    ml->path = NULL;
    ml->fd = -1;
}

void metrics_describe_failure(const metrics_log *ml, char *out, size_t n) {
    if (!ml->failed || !ml->path) {
        if (n) out[0] = '\0';
        return;
    }
    snprintf(out, n, "metrics file %s is incomplete: writing failed at the %s (%s)", ml->path,
             ml->failed_line, strerror(ml->failed_errno));
}
