// optim.c: AdamW (DESIGN.md "Model"), schedules and the global gradient norm.
#include "optim.h"

#include <math.h>

tri_status optim_create(optim_state *o, backend *be, const param_table *pt) {
    size_t bytes = pt->local_numel * sizeof(float);
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

tri_status optim_grad_norm(backend *be, comm *cm, const param_table *pt, const float *grads,
                           double *norm) {
    // Sum of squares per entry, in table order, so the result does not depend on how the
    // buffer is partitioned. Replicated entries are counted by tp rank 0 only and the tied
    // embedding by the first stage only, so that the sum over the model-parallel group
    // (tp x pp) counts each unique element once.
    double sumsq = 0.0;
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        if (e->split == SPLIT_REPLICATED && pt->tp_rank != 0) continue;
        if (i == pt->wte && pt->wte_is_copy) continue; // the tied embedding counts once
        sumsq += be->sumsq(be, grads + e->offset, (size_t)e->local_numel);
    }
    if (cm->groups[COMM_GROUP_MP].size > 1)
        TRI_CHECK(cm->all_reduce(cm, COMM_GROUP_MP, &sumsq, 1, COMM_DTYPE_F64, COMM_REDUCE_SUM));
    *norm = sqrt(sumsq);
    if (!isfinite(*norm)) return TRI_ERR_NONFINITE;
    return TRI_OK;
}

void optim_step(optim_state *o, backend *be, const run_config *cfg, const param_table *pt,
                float *params, const float *grads, double lr, double grad_norm) {
    double clip = cfg->train.grad_clip;
    float grad_scale = (clip > 0 && grad_norm > clip) ? (float)(clip / grad_norm) : 1.0f;
    o->t++;
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        float wd = e->decay ? (float)cfg->optim.weight_decay : 0.0f;
        be->adamw(be, params + e->offset, grads + e->offset, o->m + e->offset, o->v + e->offset,
                  (size_t)e->local_numel, (float)lr, (float)cfg->optim.beta1,
                  (float)cfg->optim.beta2, (float)cfg->optim.eps, wd, grad_scale, o->t);
    }
}
