// optim.c: AdamW (DESIGN.md "Model"), schedules, the dp gradient reduction and the global
// gradient norm, with ZeRO-1 sharding of the Adam state.
#include "optim.h"

#include <math.h>

size_t optim_capacity(const run_config *cfg, int dp, size_t local_numel) {
    if (cfg->parallel.zero == 0 || dp == 1) return local_numel;
    return (local_numel + (size_t)dp - 1) / (size_t)dp * (size_t)dp;
}

tri_status optim_create(optim_state *o, backend *be, const run_config *cfg, size_t local_numel,
                        int dp, int dp_rank) {
    o->zero = dp > 1 ? cfg->parallel.zero : 0;
    o->dp = dp, o->dp_rank = dp_rank;
    o->capacity = optim_capacity(cfg, dp, local_numel);
    o->shard_len = o->zero ? o->capacity / (size_t)dp : o->capacity;
    o->shard_begin = o->zero ? (size_t)dp_rank * o->shard_len : 0;
    size_t bytes = o->shard_len * sizeof(float);
    o->m = be->alloc(be, bytes);
    o->v = be->alloc(be, bytes);
    o->t = 0;
    if (!o->m || !o->v) {
        LOG_ERROR("out of %s memory for the Adam state (%zu bytes)", be->name, 2 * bytes);
        return TRI_ERR_INTERNAL;
    }
    return TRI_OK;
}

void optim_free(optim_state *o, backend *be) {
    if (o->m) be->free(be, o->m);
    if (o->v) be->free(be, o->v);
    o->m = o->v = NULL;
}

double optim_lr(const run_config *cfg, int step) {
    const double lr = cfg->optim.lr, min_lr = cfg->optim.min_lr;
    const int warmup = cfg->optim.warmup_steps, total = cfg->train.steps;
    if (step < warmup) return lr * (step + 1) / warmup;
    if (cfg->optim.decay == DECAY_CONSTANT || total - 1 <= warmup) return lr;
    double progress = (double)(step - warmup) / (double)(total - 1 - warmup); // 0..1
    if (progress > 1.0) progress = 1.0;
    double coeff = cfg->optim.decay == DECAY_COSINE ? 0.5 * (1.0 + cos(M_PI * progress))
                                                    : 1.0 - progress;
    return min_lr + coeff * (lr - min_lr);
}

tri_status optim_reduce_grads(optim_state *o, comm *cm, float *grads) {
    if (o->dp == 1) return TRI_OK;
    if (o->zero == 0)
        return cm->all_reduce(cm, COMM_GROUP_DP, grads, o->capacity, COMM_DTYPE_F32, COMM_REDUCE_SUM);
    // In place: the summed shard of this rank lands in the buffer's first block.
    return cm->reduce_scatter(cm, COMM_GROUP_DP, grads, grads, o->shard_len, COMM_DTYPE_F32);
}

// The part [lo, hi) of entry e (offsets in the flat buffer) inside this rank's shard.
static int shard_piece(const optim_state *o, const param_entry *e, size_t *lo, size_t *hi) {
    size_t b = e->offset, end = e->offset + (size_t)e->local_numel;
    *lo = b > o->shard_begin ? b : o->shard_begin;
    *hi = end < o->shard_begin + o->shard_len ? end : o->shard_begin + o->shard_len;
    return *lo < *hi;
}

tri_status optim_grad_norm(optim_state *o, backend *be, comm *cm, const param_table *pt,
                           const float *grads, double *norm) {
    // Sum of squares per entry piece, in table order. Replicated entries are counted by tp
    // rank 0 only and the tied embedding by the first stage only, so that the sums over the
    // shards (dp) and the model-parallel group (tp x pp) count each unique element once.
    double sumsq = 0.0;
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        size_t lo, hi;
        if (e->split == SPLIT_REPLICATED && pt->tp_rank != 0) continue;
        if (i == pt->wte && pt->wte_is_copy) continue;
        if (!shard_piece(o, e, &lo, &hi)) continue;
        sumsq += be->sumsq(be, grads + (lo - o->shard_begin), hi - lo);
    }
    if (o->zero)
        TRI_CHECK(cm->all_reduce(cm, COMM_GROUP_DP, &sumsq, 1, COMM_DTYPE_F64, COMM_REDUCE_SUM));
    if (cm->groups[COMM_GROUP_MP].size > 1)
        TRI_CHECK(cm->all_reduce(cm, COMM_GROUP_MP, &sumsq, 1, COMM_DTYPE_F64, COMM_REDUCE_SUM));
    *norm = sqrt(sumsq);
    if (!isfinite(*norm)) return TRI_ERR_NONFINITE;
    return TRI_OK;
}

tri_status optim_step(optim_state *o, backend *be, comm *cm, const run_config *cfg,
                      const param_table *pt, float *params, const float *grads, double lr,
                      double grad_norm) {
    double clip = cfg->train.grad_clip;
    float grad_scale = (clip > 0 && grad_norm > clip) ? (float)(clip / grad_norm) : 1.0f;
    o->t++;
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        size_t lo, hi;
        if (!shard_piece(o, e, &lo, &hi)) continue;
        size_t s = lo - o->shard_begin; // position in the shard's moments and gradients
        float wd = e->decay ? (float)cfg->optim.weight_decay : 0.0f;
        be->adamw(be, params + lo, grads + s, o->m + s, o->v + s, hi - lo, (float)lr,
                  (float)cfg->optim.beta1, (float)cfg->optim.beta2, (float)cfg->optim.eps, wd,
                  grad_scale, o->t);
    }
    if (!o->zero) return TRI_OK;
    // Every rank's updated shard to every replica (in place: this rank's block is in place).
    return cm->all_gather(cm, COMM_GROUP_DP, params + o->shard_begin, params, o->shard_len,
                          COMM_DTYPE_F32);
}
