// trainer_internal.h: one process's training state, shared by the files of the trainer and
// nothing else includes:
//   trainer.c  setting it up (backend, comm, data, schedules, memory, model, ZeRO layer,
//              optimizer, executor, checkpoints, metrics) and tearing it down
//   train.c    the training loop, evaluation, checkpoints per step and the final model
//   train_report.c  the step line's progress fields and the end-of-run report
//   train_straggler.c  which rank is slow: gathered at logged steps, a warning on a streak
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
    double *boundary; // (3 + 4 * world) the step boundary's all-reduce buffer
    char *hosts;      // (world, STRAGGLER_HOST_LEN) gathered at the first logged step; NULL before
    int streak_rank;  // the rank over pct at the latest logged steps in a row, -1
    int streak;       // how many logged steps in a row
    int slow_ms;      // TRIDENT_TEST_SLOW_RANK's busy loop for this rank, 0
} straggler_state;

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
// Writes this rank's step, compute and comm-wait seconds and its pipeline stage into its
// slots of `block` (4 * world doubles, zero elsewhere) for a MAX all-reduce; returns the count.
size_t straggler_fill(straggler_state *sg, double *block, double step_s, double wait_s, int stage);
// From the reduced block: the slowest rank into s's straggler fields, and the warning when a
// rank stays over log.straggler_pct for log.straggler_steps logged steps.
void straggler_take(straggler_state *sg, const double *block, int step, metrics_step *s);
// Whether any rank was asked to stop (base/stop.h), agreed over the world; every rank calls
// it at the same point. TRI_STOPPED then (the request is recorded on every rank), else TRI_OK.
tri_status trainer_agree_stop(trainer *tr);
