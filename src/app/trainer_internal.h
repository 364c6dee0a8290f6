// trainer_internal.h: one process's training state, shared by the files of the trainer and
// nothing else includes:
//   trainer.c  setting it up (backend, comm, data, schedules, memory, model, ZeRO layer,
//              optimizer, executor, checkpoints, metrics) and tearing it down
//   train.c    the training loop, evaluation, checkpoints per step and the final model
#pragma once
#include "comm/launch.h"
#include "comm/mesh.h"
#include "compute/backend.h"
#include "compute/mempool.h"
#include "config/config.h"
#include "io/checkpoint.h"
#include "io/data.h"
#include "io/metrics.h"
#include "io/rundir.h"
#include "model/model.h"
#include "parallel/executor.h"
#include "parallel/optim.h"
#include "parallel/sched.h"
#include "parallel/zero.h"

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
    data_stream train, val;
    sched_table sched;      // the training step's table of this pipeline rank
    sched_table eval_sched; // evaluation's forward-only table
    metrics_log metrics;
    int dp, dp_rank, n_micro;
    int step;       // the optimizer step being run (0-based), for the batch loader
    int eval_batch; // the evaluation batch being run
    double flops_per_token, peak_flops;
    rundir dirs;         // run.out_dir and checkpoint.dir, locked (rank 0)
    ckpt_writer *ckpt;   // NULL without checkpoint.dir
    ckpt_progress start; // where training starts: zero, or the resumed checkpoint's
    int resumed;
} trainer;

// trainer.c
tri_status trainer_init(trainer *tr, run_config *cfg, launch_info *li);
void trainer_free(trainer *tr);
ckpt_state trainer_checkpoint_view(trainer *tr);
