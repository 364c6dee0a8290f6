// metrics.h: metrics.jsonl (DESIGN.md "Metrics") and the step lines on stdout.
//
// Every line goes out with one write(2) of the whole line and is checked; a line that could
// not be written whole (a full disk: ENOSPC, EDQUOT, EIO, also found at fsync) is cut off
// again (the file is truncated to its last complete line), and the file is marked failed:
// nothing more is written to it. With log.metrics_required (the default) the trainer then
// stops at the next step boundary, with a checkpoint, and exits 4 (metrics_stops_run); with
// log.metrics_required: false the run goes on without metrics after one loud warning.
#pragma once
#include "comm/comm.h"
#include "config/config.h"

typedef struct {
    int fd;                // valid while path is set and fd >= 0
    char *path;            // NULL: no file (ranks other than 0, a zeroed log)
    int required;          // log.metrics_required
    int failed;            // a write failed: nothing more is written
    int failed_errno;      // what the failed write said
    char failed_line[40];  // what could not be written: "step 12 line", "run record", ...
    int64_t size;          // bytes of the file's complete lines
    int64_t full_at;       // TRIDENT_TEST_METRICS_FULL_BYTES, or -1
    int resumed_eval_miss; // the kept lines have the resumed step's step line but not its
                           // eval line (an evaluation cut short by a stop or a kill)
} metrics_log;

// Opens <log.metrics> (default <out_dir>/metrics.jsonl) and writes the run record.
// `resumed_step` >= 0 (a run resumed from the checkpoint of that step) keeps the lines
// already there up to that step and drops the later ones, which the resumed run writes
// again, and a torn last line (one without its newline: a run killed while writing it);
// -1 starts the file afresh. `extra_json` is appended inside the run object
// (",\"key\":value..." or ""). TRI_ERR_CONFIG when the file cannot be opened, TRI_ERR_CKPT
// when its lines cannot be rewritten or the run record written (log.metrics_required; else
// a warning, TRI_OK and no metrics).
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
    double plan_ratio; // step_ms over the planner's predicted step (the run record's "plan");
                       // 0: no prediction, no field
    double pass_ms[3]; // pipelined: this rank's mean ms per forward, input-gradient (B, or a
                       // whole backward) and weight-gradient (W) action of the step
    // The slowest rank of a multi-rank run at this logged step (timing fields, written as
    // "straggler":{...} when has_straggler is set): the rank whose compute time (step time less
    // the time waiting in communication) is furthest over the median of its pipeline stage.
    int has_straggler; // 0: no straggler field (a world of one, a step logged at a stop)
    int straggler_rank;
    char straggler_host[64];                        // its host
    double straggler_excess_pct;                    // its compute time over the median, in %
    double straggler_step_ms, straggler_compute_ms; // its step and compute time
    double straggler_wait_ms, straggler_median_ms;  // its comm wait, the median compute time
} metrics_step;

void metrics_write_step(metrics_log *ml, const metrics_step *s);
// {"type":"eval","step":N,"val_loss":...} for one unnamed set (names NULL, n 1), or
// {"type":"eval","step":N,"val_loss/NAME":...,...} for the named sets of data.val.
void metrics_write_eval(metrics_log *ml, int step, const char *const *names, const double *val_loss,
                        int n);
// {"type":"checkpoint",...}: a checkpoint started at `step` (timing fields: blocked_ms).
// Also fsyncs the file, so that the lines up to a checkpoint are on disk with it.
void metrics_write_checkpoint(metrics_log *ml, int step, const char *dir, double blocked_ms);
// Whether a failed write must end the run (log.metrics_required): the trainer stops at the
// next step boundary with a checkpoint and exits 4.
int metrics_stops_run(const metrics_log *ml);
// fsync and close at the end of a run; a failure there counts as a failed write. Returns
// metrics_stops_run's verdict as a status (TRI_ERR_CKPT or TRI_OK).
tri_status metrics_close(metrics_log *ml);
// Closes without checks (an error path) and frees; safe on a log never opened (zeroed).
void metrics_free(metrics_log *ml);
// "metrics file PATH is incomplete: writing failed at the step 12 line (No space left on
// device)" for the last messages of a run; "" when nothing failed.
void metrics_describe_failure(const metrics_log *ml, char *out, size_t n);

// Shortest decimal that reads back to the same double ("%.17g" trimmed), for JSON.
void metrics_format_double(char *buf, size_t n, double x);
