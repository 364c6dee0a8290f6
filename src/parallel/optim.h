// optim.h: the optimizer (Megatron-Core's optimizer/ beside the ZeRO layer's distributed/):
// the learning-rate schedule, the global gradient norm, clipping and AdamW (DESIGN.md
// "Model") over the pieces that this rank owns under its ZeRO stage (zero.h). It holds the
// Adam moments and, in mixed precision, the fp32 master weights of those pieces, in the shard
// arrays' order (zero_layout.arena_len elements).
#pragma once
#include "compute/mempool.h"
#include "parallel/zero.h"

typedef enum { DECAY_COSINE = 0, DECAY_LINEAR = 1, DECAY_CONSTANT = 2 } decay_kind;

// The YAML's `optim` section (config.h's run_config.optim).
typedef struct {
    double lr, min_lr;
    int warmup_steps;
    decay_kind decay;
    double beta1, beta2, eps, weight_decay;
} optim_config;

// Learning rate of step `step` (0-based) of `total_steps`: linear warmup over warmup_steps
// from lr/warmup to lr, then decay (cosine, linear or constant) from lr to min_lr at the
// last step.
double optim_lr(const optim_config *oc, int total_steps, int step);

// What the optimizer keeps of each kind, per piece position: the checkpoint's names.
typedef enum { OPTIM_MASTER = 0, OPTIM_ADAM_M, OPTIM_ADAM_V } optim_state_kind;

typedef struct optimizer optimizer;

// The optimizer's buffers (mempool.h specs) for the layout `zl` and parameter dtype: the
// moments, the master weights (bf16 parameters), the norm's accumulator, and with
// optim_table (backend_traits: a device backend's multi-tensor ops) the device copy of the
// multi-tensor table. With o (optim_create) each spec fills a field of o; with o NULL (the
// planner) they only size.
void optim_buffers(mem_specs *specs, const zero_layout *zl, tri_dtype param_dtype, int optim_table,
                   optimizer *o);

// Carves the buffers from `pool` (the backend's memory when NULL) and, in mixed precision,
// starts the master weights from z's bf16 parameters. grad_clip 0 turns clipping off.
tri_status optim_create(optimizer **out, const optim_config *oc, double grad_clip, zero_state *z,
                        backend *be, comm *cm, mem_pool *pool);
void optim_free(optimizer *o);

// Global L2 norm of the reduced gradients (after zero_finish_grads): each unique parameter
// element counted once, summed over the shards (dp) and the model-parallel group (tp x pp).
// TRI_ERR_NONFINITE when it is not finite.
tri_status optim_grad_norm(optimizer *o, double *norm);
// Clips (to grad_clip, given the norm), applies AdamW with learning rate lr to this rank's
// pieces (weight decay on the table's decay entries only), then the ZeRO layer all-gathers
// the updated parameters where its stage needs it. On a backend with optim_multi the norm
// and AdamW each run as one multi-tensor op over the table built at creation, else piece
// by piece (the same values; the CPU's bits are the same either way).
tri_status optim_step(optimizer *o, double lr, double grad_norm);

// AdamW's step counter (bias correction): steps taken; a resume sets it.
int optim_steps_taken(const optimizer *o);
void optim_set_steps_taken(optimizer *o, int t);
// The device address of element `pos` of the shard arrays of `kind` (fp32).
float *optim_state_at(const optimizer *o, optim_state_kind kind, size_t pos);
