// trainer_internal.h: one process's training state, shared by the files of the trainer and
// nothing else includes:
//   trainer.c  setting it up (backend, comm, data, schedules, memory, model, ZeRO layer,
//              optimizer, executor, checkpoints, metrics) and tearing it down
//   train.c    the training loop, evaluation, checkpoints per step and the final model
//   train_report.c  the step line's progress fields and the end-of-run report
//   train_straggler.c  which rank is slow: gathered at logged steps, a warning on a streak
//   train_timing.c  each pipeline stage's measured times in timing.json (plan RUN_DIR)
#pragma once
#include "comm/launch.h"
#include "comm/mesh.h"
#include "compute/backend.h"
#include "compute/mempool.h"
#include "config/config.h"
#include "io/checkpoint.h"
#include "io/data.h"
#include "io/data_order.h"
#include "io/metrics.h"
#include "io/tensorboard.h"
#include "io/rundir.h"
#include "model/model.h"
#include "parallel/executor.h"
#include "parallel/optim.h"
#include "parallel/sched.h"
#include "parallel/zero.h"
#include "plan/plan.h"

#define STRAGGLER_HOST_LEN 64 // bytes per host name gathered (a multiple of 8)

// train_straggler.c's state: every rank keeps the same (all of it comes from collectives).
typedef struct {
    int world, rank;
    double pct;       // log.straggler_pct
    int steps;        // log.straggler_steps
    double *boundary; // (3 + 5 * world) the step boundary's all-reduce buffer
    char *hosts;      // (world, STRAGGLER_HOST_LEN) gathered at the first logged step; NULL before
    int streak_rank;  // the rank over pct at the latest logged steps in a row, -1
    int streak;       // how many logged steps in a row
    int slow_ms;      // TRIDENT_TEST_SLOW_RANK's busy loop for this rank, 0
} straggler_state;

// One pipeline stage's step at a logged step, in seconds (train_timing.c keeps them): of each
// part, the median over the stage's ranks; the spread (max - min) of their compute.
//   compute  the step less the time waiting in communication
//   waits    the time in pipeline sends and receives (the bubble and the transfers)
//   comm     the time waiting in every other collective (tp, dp, embedding, norms)
typedef struct {
    double compute, waits, comm, step, spread;
    int ranks; // the stage's ranks (tp x dp)
} stage_times;

// train_timing.c's state (rank 0): the stages' times at the latest logged steps, a ring, and
// <run.out_dir>/timing.json, rewritten from them at every logged step.
typedef struct {
    int pp;
    int cap, n, next;   // the ring: cap logged steps, n held, next the slot to fill
    int *steps;         // (cap) the step of each slot
    stage_times *times; // (cap, pp)
    int first_step;     // this process's first step: it and the next are warm-up
    int logged;         // logged steps seen
    int world, tp, dp;
    char *path; // <run.out_dir>/timing.json; NULL: none (ranks other than 0)
    int warned; // a write failed and was reported
} run_timing;

typedef struct {
    run_config *cfg;
    launch_info *li;
    mesh_coord coord; // this rank's (tp, dp, pp)
    backend *be;
    comm *cm;
    mem_pool pool; // this rank's device memory: one arena per kind, sized by the planner
    model model;
    zero_state *zero;
    optimizer *optim;
    executor exec;
    data_order train;       // data.train: its sources, blend schedule and shuffled order
    data_stream *val;       // (n_val) data.val's sets, read in plain order
    const char **val_names; // (n_val) their names, or NULL for the single glob (val_loss)
    int n_val;
    int eval_set;           // the set being evaluated
    double *last_val;       // (n_val, at least 1) the latest evaluation's losses, NaN before one
    sched_table sched;      // the training step's table of this pipeline rank
    sched_table eval_sched; // evaluation's forward-only table
    metrics_log metrics;
    tb_log tb;             // rank 0 with log.tensorboard set; closed otherwise
    double loop_start;     // when the training loop began (the step line's elapsed time)
    char threads_why[256]; // how the CPU threads were chosen (backend_cpu_fit_threads)
    int dp, dp_rank, n_micro;
    int step;       // the optimizer step being run (0-based), for the batch loader
    int eval_batch; // the evaluation batch being run
    double flops_per_token, peak_flops;
    // The planner's prediction for this run's layout on the device it runs on (plan_compute,
    // issue 21): its step seconds, 0 when the device has no planner entry.
    double plan_step_s;
    char plan_device[32];
    plan_device profile;  // system.device_profile, loaded at start (profile.calib.calibrated 1)
    uint64_t step_allocs; // device allocations the training steps made (backend.alloc_count):
                          // none is expected (a step sized everything at start-up)
    rundir dirs;          // run.out_dir and checkpoint.dir, locked (rank 0)
    ckpt_writer *ckpt;    // NULL without checkpoint.dir
    ckpt_progress start;  // where training starts: zero, or the resumed checkpoint's
    int resumed;
    char *resume_json; // the run record's `,"resume_changes":[...]` of a resume (resume_diff.h)
    int eval_first;    // resumed at an evaluation step whose evaluation metrics.jsonl lacks (a
                       // stop or a kill cut it short): the loop runs it before the first step
    int metrics_lost;  // rank 0 could not write metrics.jsonl (log.metrics_required): the run
                       // stops at the step boundary and exits 4, on every rank
    straggler_state straggler;
    run_timing timing;
} trainer;

// trainer.c
tri_status trainer_init(trainer *tr, run_config *cfg, launch_info *li);
void trainer_free(trainer *tr);
ckpt_state trainer_checkpoint_view(trainer *tr);

// train_report.c
// The step line's tail: " | MFU 12.3% | 1:02 elapsed, ETA 4:10" (no MFU when mfu is NaN), the
// ETA from this process's wall time per step since first_step.
void train_progress(char *buf, size_t n, double mfu, double elapsed_s, int step, int first_step,
                    int steps);
// After training (rank 0 prints): where the model, metrics, event files and last checkpoint
// are, and the exact commands that sample, export and resume the run. stopped_at: the step a
// run stopped early (by a signal, or lost metrics) reached; -1 for a run that finished.
void train_report_outputs(const trainer *tr, int stopped_at);
// train_straggler.c
void straggler_init(straggler_state *sg, const run_config *cfg, const launch_info *li);
void straggler_free(straggler_state *sg);
// TRIDENT_TEST_SLOW_RANK: this rank's busy loop at the start of a step (nothing when unset).
void straggler_test_delay(const straggler_state *sg);
// Whether logged steps gather the per-rank times (a world of more than one).
int straggler_wanted(const straggler_state *sg);
// The host names of every rank, once (a collective over the world; later calls do nothing).
tri_status straggler_gather_hosts(straggler_state *sg, comm *cm, const char *host);
// Writes this rank's step, compute, comm-wait and pipeline-transfer seconds and its pipeline
// stage into its slots of `block` (5 * world doubles, zero elsewhere) for a MAX all-reduce;
// returns the count.
size_t straggler_fill(straggler_state *sg, double *block, double step_s, double wait_s,
                      double pipe_s, int stage);
// From the reduced block: each of the pp stages' times (the medians over its ranks).
void straggler_stage_times(const straggler_state *sg, const double *block, int pp,
                           stage_times *out);
// One rank's parts of its step: step_s seconds, wait_s of them in comm waits, pipe_s in its
// pipeline sends and receives (the executor's count).
stage_times stage_times_of_rank(double step_s, double wait_s, double pipe_s);
// train_timing.c
// Rank 0: <run.out_dir>/timing.json, written now with no step (a file of an earlier run
// there is replaced); other ranks keep nothing.
void timing_init(run_timing *t, const trainer *tr);
// Rank 0 at logged step `step`: the stages' times (pp of them) into the ring, and
// timing.json rewritten (tmp + rename). A failed write is reported once; the run goes on.
void timing_log_step(run_timing *t, int step, const stage_times *stages);
void timing_free(run_timing *t);
// From the reduced block: the slowest rank into s's straggler fields, and the warning when a
// rank stays over log.straggler_pct for log.straggler_steps logged steps.
void straggler_take(straggler_state *sg, const double *block, int step, metrics_step *s);
// Whether any rank was asked to stop (base/stop.h), agreed over the world; every rank calls
// it at the same point. TRI_STOPPED then (the request is recorded on every rank), else TRI_OK.
tri_status trainer_agree_stop(trainer *tr);
