// plan_internal.h: what plan.c (memory, communication, the schedule) and plan_time.c (the
// time of a stage's compute and communication) share; nothing else includes it.
#pragma once
#include "model/model.h"
#include "model/params.h"
#include "parallel/zero.h"
#include "plan/plan.h"

// Bytes per element of each kind of buffer and message under the config's precision (the
// dtypes the modules use): bf16 parameters (and their dp all-gathers) with an fp32 master
// copy; the residual stream and the tp and pipeline messages in fp32; gradients, their
// workspaces and SP/embedding sums in train.grad_dtype; the dp reduction in
// train.reduce_dtype.
typedef struct {
    size_t param;  // parameters (and their dp all-gathers)
    size_t grad;   // gradient buffers, shards and bucket workspaces
    size_t master; // fp32 master weights: none in fp32 training
    size_t adam;   // m and v together
    size_t act;    // the tp and pipeline messages that carry activations
    size_t reduce; // the dp reduction of the gradients
} elem_sizes;

static inline elem_sizes elem_sizes_of(const run_config *cfg) {
    const int bf16 = cfg->train.precision == DTYPE_BF16;
    return (elem_sizes){
        .param = dtype_size(cfg->train.precision),
        .grad = dtype_size(cfg->train.grad_dtype),
        .master = bf16 ? 4 : 0,
        .adam = 8,
        .act = 4,
        .reduce = dtype_size(cfg->train.reduce_dtype),
    };
}

// One layout being planned.
typedef struct {
    const run_config *cfg;
    const plan_device *dev;
    elem_sizes es;
    int world, tp, pp, dp, v, zero, m, recompute;
} layout;

// What one stage holds: its parameter table (tp rank 0), its ZeRO layout (dp rank 0) and the
// model's dims (the same on every tp and dp rank of the stage, and on every middle stage).
typedef struct {
    const param_table *pt;
    zero_layout zl;
    model_dims d;
} stage_tables;

// A stage's compute, communication and optimizer seconds per step into s (its comm counts
// filled in): matmuls at `rate` FLOP/s scaled by the device's small-dimension fall-off,
// attention, the elementwise passes, the collectives, and what parallel.overlap hides.
void plan_stage_time(plan_stage *s, const layout *lo, const stage_tables *st, double rate);
