// executor.h: the pipeline executor (DESIGN.md "How one step flows"): runs one rank's
// schedule table (sched.h) on the model, with the pipeline's sends and receives between the
// forward and backward actions and the ZeRO layer told what runs next. Training runs the
// step's table; evaluation runs a forward-only table (sched_build_forward) through the same
// code.
#pragma once
#include "comm/comm.h"
#include "model/model.h"
#include "parallel/sched.h"
#include "parallel/zero.h"

// Where the forward actions' tokens come from: fills the host token ids (B*T each) of
// micro-batch `micro` of the table being run.
typedef struct {
    void (*load)(void *ctx, int micro, int *inputs, int *targets);
    void *ctx;
} exec_batches;

// Pipeline transfers in flight: the schedule's comm actions [first, end), their request.
typedef struct {
    int first, end;
    comm_request req;
} exec_flight;

typedef struct {
    model *m;
    zero_state *z;
    comm *cm;
    int overlap;           // parallel.overlap: pipeline transfers stay in flight under compute
    int *inputs, *targets; // host (B*T): one micro-batch's tokens
    exec_flight *flight;   // (cap) transfers in flight
    int cap;
    int overlapped_p2p; // transfers left in flight under a forward or backward
    // Seconds and counts of the training tables' compute actions (not a forward-only table's)
    // since executor_take_pass_ms: forwards,
    // input gradients (BWD_B, or a whole BWD), weight gradients (BWD_W). Host time: on a GPU
    // the time to enqueue, not to run.
    double pass_s[3];
    int pass_n[3];
} executor;

void executor_init(executor *ex, model *m, zero_state *z, comm *cm, int overlap);
void executor_free(executor *ex);

// Runs table `t` once. Each forward loads its micro-batch from `batches`; each backward starts
// from dloss (d(loss)/d(per-token loss)). With `prefetch` each pass names the one after it to
// the ZeRO layer (its gathers may start early); evaluation passes 0. Adds the seconds spent
// waiting on other stages to *waited.
tri_status executor_run(executor *ex, const sched_table *t, exec_batches batches, float dloss,
                        int prefetch, double *waited);
// The sum of the per-token losses of the forwards since the last call, on every pipeline
// stage (only the last one computes it).
tri_status executor_take_loss(executor *ex, double *loss_sum);
// Transfers left in flight under compute since the last call (a debug count).
int executor_overlap_count(executor *ex);
// The mean milliseconds per forward, input-gradient and weight-gradient action since the last
// call (0 for a kind that did not run), as the step line's pass_ms shows them.
void executor_take_pass_ms(executor *ex, double out[3]);
