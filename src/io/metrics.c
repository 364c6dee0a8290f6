// metrics.c: the JSONL metrics file. Every line is one JSON object; two runs of the same
// config, layout and backend write identical lines apart from the timing fields.
#include "io/metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>

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

// Drops the lines of `path` that belong to steps after `step` (a resumed run writes them
// again); the run records stay.
static void keep_lines_until(const char *path, int step) {
    FILE *in = fopen(path, "r");
    if (!in) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
        const char *s = strstr(line, "\"step\":");
        if (!strstr(line, "\"type\":\"run\"") && s && atoi(s + 7) > step) continue;
        fputs(line, out);
    }
    free(line);
    fclose(in);
    if (fclose(out) == 0) rename(tmp, path);
}

tri_status metrics_open(metrics_log *ml, const run_config *cfg, int world, const char *backend,
                        const char *comm, const char *extra_json, int resumed_step) {
    char path[4096];
    if (cfg->log.metrics) snprintf(path, sizeof path, "%s", cfg->log.metrics);
    else snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->run.out_dir);
    ml->path = xstrdup(path);
    if (resumed_step >= 0) keep_lines_until(path, resumed_step);
    ml->f = fopen(path, resumed_step >= 0 ? "a" : "w");
    if (!ml->f) {
        LOG_ERROR("cannot write metrics file %s: %s", path, strerror(errno));
        LOG_HINT("check log.metrics and run.out_dir");
        free(ml->path);
        ml->path = NULL;
        return TRI_ERR_CONFIG;
    }
    fprintf(ml->f,
            "{\"type\":\"run\",\"version\":\"%s\",\"world\":%d,"
            "\"mesh\":{\"tp\":%d,\"pp\":%d,\"dp\":%d},\"backend\":\"%s\",\"comm\":\"%s\","
            "\"config\":",
            TRIDENT_VERSION, world, cfg->parallel.tp, cfg->parallel.pp, cfg->parallel.dp, backend,
            comm);
    config_print_json(cfg, ml->f);
    fprintf(ml->f, "%s}\n", extra_json ? extra_json : "");
    fflush(ml->f);
    return TRI_OK;
}

void metrics_write_step(metrics_log *ml, const metrics_step *s) {
    if (!ml->f) return;
    char loss[32], lr[32], norm[32], mfu[32];
    metrics_format_double(loss, sizeof loss, s->loss);
    metrics_format_double(lr, sizeof lr, s->lr);
    metrics_format_double(norm, sizeof norm, s->grad_norm);
    metrics_format_double(mfu, sizeof mfu, s->mfu);
    fprintf(ml->f,
            "{\"type\":\"step\",\"step\":%d,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,\"tokens\":%lld,"
            "\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"mfu\":%s,\"mem_peak_bytes\":%llu,"
            "\"comm_bytes\":{\"tp\":%llu,\"pp\":%llu,\"dp\":%llu}",
            s->step, loss, lr, norm, (long long)s->tokens, s->step_ms, s->tokens_per_s, mfu,
            (unsigned long long)s->mem_peak_bytes, (unsigned long long)s->comm_tp,
            (unsigned long long)s->comm_pp, (unsigned long long)s->comm_dp);
    if (s->pipelined)
        fprintf(ml->f, ",\"bubble\":%.4f,\"bubble_formula\":%.4f", s->bubble, s->bubble_formula);
    fprintf(ml->f, "}\n");
    fflush(ml->f);
}

void metrics_write_eval(metrics_log *ml, int step, double val_loss) {
    if (!ml->f) return;
    char v[32];
    metrics_format_double(v, sizeof v, val_loss);
    fprintf(ml->f, "{\"type\":\"eval\",\"step\":%d,\"val_loss\":%s}\n", step, v);
    fflush(ml->f);
}

void metrics_write_checkpoint(metrics_log *ml, int step, const char *dir, double blocked_ms) {
    if (!ml->f) return;
    fprintf(ml->f,
            "{\"type\":\"checkpoint\",\"step\":%d,\"dir\":\"%s/step_%08d\",\"blocked_ms\":%.3f}\n",
            step, dir, step, blocked_ms);
    fflush(ml->f);
}

void metrics_close(metrics_log *ml) {
    if (ml->f) fclose(ml->f);
    free(ml->path);
    ml->f = NULL;
    ml->path = NULL;
}
