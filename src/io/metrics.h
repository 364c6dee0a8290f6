// metrics.h: metrics.jsonl (DESIGN.md "Metrics") and the step lines on stdout.
#pragma once
#include "comm/comm.h"
#include "config/config.h"

typedef struct {
    FILE *f;
    char *path;
} metrics_log;

// Opens <log.metrics> (default <out_dir>/metrics.jsonl) and writes the run record.
// `resumed_step` >= 0 (a run resumed from the checkpoint of that step) keeps the lines
// already there up to that step and drops the later ones, which the resumed run writes
// again; -1 starts the file afresh. `extra_json` is appended inside the run object
// (",\"key\":value..." or "").
tri_status metrics_open(metrics_log *ml, const run_config *cfg, int world, const char *backend,
                        const char *comm, const char *extra_json, int resumed_step);

typedef struct {
    int step;
    double loss, lr, grad_norm;
    int64_t tokens;
    double step_ms, tokens_per_s, mfu;
    uint64_t mem_peak_bytes;
    uint64_t comm_tp, comm_pp, comm_dp;
    int pipelined;                 // pp > 1: the bubble fields are written
    double bubble, bubble_formula; // measured fraction of the step waiting on other stages
} metrics_step;

void metrics_write_step(metrics_log *ml, const metrics_step *s);
void metrics_write_eval(metrics_log *ml, int step, double val_loss);
// {"type":"checkpoint",...}: a checkpoint started at `step` (timing fields: blocked_ms).
void metrics_write_checkpoint(metrics_log *ml, int step, const char *dir, double blocked_ms);
void metrics_close(metrics_log *ml);

// Shortest decimal that reads back to the same double ("%.17g" trimmed), for JSON.
void metrics_format_double(char *buf, size_t n, double x);
