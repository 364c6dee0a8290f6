// optim.h: learning-rate schedule, global gradient norm and clipping, AdamW.
#pragma once
#include "backend.h"
#include "comm.h"
#include "config.h"
#include "params.h"

typedef struct {
    float *m, *v;   // Adam moments (table.local_numel) on the device
    int t;          // optimizer steps taken
} optim_state;

tri_status optim_create(optim_state *o, backend *be, const param_table *pt);
void optim_free(optim_state *o, backend *be);

// Learning rate of step `step` (0-based): linear warmup over warmup_steps from lr/warmup to
// lr, then decay (cosine, linear or constant) from lr to min_lr at the last step.
double optim_lr(const run_config *cfg, int step);

// Global L2 norm of the gradients: each unique parameter element counted once, summed over
// the model-parallel group. Returns TRI_ERR_NONFINITE when it is not finite.
tri_status optim_grad_norm(backend *be, comm *cm, const param_table *pt, const float *grads,
                           double *norm);

// Clips (grad_clip > 0) and applies AdamW with decay on the table's decay entries only.
void optim_step(optim_state *o, backend *be, const run_config *cfg, const param_table *pt,
                float *params, const float *grads, double lr, double grad_norm);
