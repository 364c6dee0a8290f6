// optim.h: learning-rate schedule, the data-parallel gradient reduction, the global gradient
// norm and clipping, and AdamW, with ZeRO stage 1 sharding of the Adam state over dp.
#pragma once
#include "backend.h"
#include "comm.h"
#include "config.h"
#include "params.h"

// ZeRO: this rank's flat parameter buffer (table.local_numel elements, padded to
// `capacity`, a multiple of dp) is cut into dp equal shards; dp rank r owns elements
// [r * shard_len, (r + 1) * shard_len). Stage 0: one shard, the whole buffer (dp = 1 too).
typedef struct {
    int zero, dp, dp_rank;
    size_t capacity;      // elements of the padded parameter and gradient buffers
    size_t shard_begin, shard_len;
    float *m, *v;         // Adam moments (shard_len) on the device
    int t;                // optimizer steps taken
} optim_state;

// The padded size of parameter/gradient buffers for `local_numel` elements under cfg's
// ZeRO stage and `dp` replicas.
size_t optim_capacity(const run_config *cfg, int dp, size_t local_numel);

tri_status optim_create(optim_state *o, backend *be, const run_config *cfg, size_t local_numel,
                        int dp, int dp_rank);
void optim_free(optim_state *o, backend *be);

// Learning rate of step `step` (0-based): linear warmup over warmup_steps from lr/warmup to
// lr, then decay (cosine, linear or constant) from lr to min_lr at the last step.
double optim_lr(const run_config *cfg, int step);

// The dp reduction of the accumulated gradients (capacity elements): an all-reduce for
// stage 0; for stage 1 a reduce-scatter that leaves this rank's summed shard in
// grads[0, shard_len).
tri_status optim_reduce_grads(optim_state *o, comm *cm, float *grads);

// Global L2 norm of the reduced gradients: each unique parameter element counted once,
// summed over the shards (dp), the model-parallel group (tp x pp). Returns
// TRI_ERR_NONFINITE when it is not finite.
tri_status optim_grad_norm(optim_state *o, backend *be, comm *cm, const param_table *pt,
                           const float *grads, double *norm);

// Clips (grad_clip > 0), applies AdamW to this rank's shard (weight decay on the table's
// decay entries only), then all-gathers the updated parameters over dp (stage 1).
tri_status optim_step(optim_state *o, backend *be, comm *cm, const run_config *cfg,
                      const param_table *pt, float *params, const float *grads, double lr,
                      double grad_norm);
