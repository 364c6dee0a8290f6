// optim.c: the learning-rate schedule, the global gradient norm, clipping and AdamW over
// this rank's ZeRO pieces (optim.h).
#include "parallel/optim.h"

#include <math.h>
#include <string.h>

struct optimizer {
    optim_config cfg;
    double grad_clip;
    zero_state *z;
    const param_table *pt;
    backend *be;
    comm *cm;
    mem_pool *pool;
    mem_specs buffers;
    int bf16;         // bf16 parameters: AdamW updates the fp32 master, rounds it into them
    float *m, *v;     // Adam moments (arena_len)
    float *master;    // bf16: (arena_len) fp32 master weights
    double *norm_acc; // the gradient norm's sum of squares, accumulated on the device
    int t;            // optimizer steps taken
};

double optim_lr(const optim_config *oc, int total_steps, int step) {
    const double lr = oc->lr, min_lr = oc->min_lr;
    const int warmup = oc->warmup_steps, total = total_steps;
    if (step < warmup) return lr * (step + 1) / warmup;
    if (oc->decay == DECAY_CONSTANT || total - 1 <= warmup) return lr;
    double progress = (double)(step - warmup) / (double)(total - 1 - warmup); // 0..1
    if (progress > 1.0) progress = 1.0;
    double coeff = oc->decay == DECAY_COSINE ? 0.5 * (1.0 + cos(M_PI * progress)) : 1.0 - progress;
    return min_lr + coeff * (lr - min_lr);
}

#define DST(field) (o ? (void *)&(o->field) : NULL)

void optim_buffers(mem_specs *s, const zero_layout *zl, tri_dtype param_dtype, optimizer *o) {
    const size_t bytes = zl->arena_len * sizeof(float);
    mem_specs_add(s, "optim.norm_acc", MEM_SCRATCH, sizeof(double), DST(norm_acc));
    mem_specs_add(s, "optim.adam_m", MEM_ADAM, bytes, DST(m));
    mem_specs_add(s, "optim.adam_v", MEM_ADAM, bytes, DST(v));
    if (param_dtype == DTYPE_BF16)
        mem_specs_add(s, "optim.master", MEM_MASTER, bytes ? bytes : sizeof(float), DST(master));
}
#undef DST

tri_status optim_create(optimizer **out, const optim_config *oc, double grad_clip, zero_state *z,
                        backend *be, comm *cm, mem_pool *pool) {
    optimizer *o = xcalloc(1, sizeof *o);
    *out = o;
    o->cfg = *oc, o->grad_clip = grad_clip;
    o->z = z, o->pt = zero_table(z);
    o->be = be, o->cm = cm, o->pool = pool;
    o->bf16 = zero_param_dtype(z) == DTYPE_BF16;
    const zero_layout *zl = zero_layout_of(z);
    optim_buffers(&o->buffers, zl, zero_param_dtype(z), o);
    TRI_CHECK(mem_specs_carve(&o->buffers, pool, be));
    // Mixed precision: the fp32 master copy of this rank's pieces (AdamW updates it; the bf16
    // parameters are its rounding), from the bf16 parameters it starts equal to.
    for (int p = 0; o->bf16 && p < zl->n_pieces; p++) {
        const zero_piece *pc = &zl->pieces[p];
        be->from_bf16(be, o->master + pc->pos, zero_piece_param(z, pc, pc->lo), pc->hi - pc->lo);
    }
    return TRI_OK;
}

void optim_free(optimizer *o) {
    if (!o) return;
    mem_specs_release(&o->buffers, o->pool, o->be);
    free(o);
}

tri_status optim_grad_norm(optimizer *o, double *norm) {
    // Sum of squares per piece, in table order. Replicated entries are counted by tp rank 0
    // only and the tied embedding by the first stage only, so that the sums over the shards
    // (dp) and the model-parallel group (tp x pp) count each unique element once.
    // The pieces' sums stay on the device (norm_acc); the host waits once, for their total.
    const zero_layout *zl = zero_layout_of(o->z);
    const param_table *pt = o->pt;
    o->be->memset_zero(o->be, o->norm_acc, sizeof(double));
    for (int p = 0; p < zl->n_pieces; p++) {
        const zero_piece *pc = &zl->pieces[p];
        const param_entry *e = &pt->entries[pc->entry];
        if (e->split == SPLIT_REPLICATED && pt->tp_rank != 0) continue;
        if (pc->entry == pt->wte && pt->wte_is_copy) continue;
        o->be->sumsq_add(o->be, o->norm_acc, zero_piece_grad(o->z, pc), pc->hi - pc->lo);
    }
    double sumsq = 0.0;
    o->be->copy_to_host(o->be, &sumsq, o->norm_acc, sizeof sumsq);
    comm *cm = o->cm;
    if (zl->stage)
        TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_DP, &sumsq, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    if (cm->groups[COMM_GROUP_MP].size > 1)
        TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_MP, &sumsq, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    *norm = sqrt(sumsq);
    if (!isfinite(*norm)) return TRI_ERR_NONFINITE;
    return TRI_OK;
}

tri_status optim_step(optimizer *o, double lr, double grad_norm) {
    backend *be = o->be;
    const zero_layout *zl = zero_layout_of(o->z);
    const optim_config *oc = &o->cfg;
    const double clip = o->grad_clip;
    const float grad_scale = (clip > 0 && grad_norm > clip) ? (float)(clip / grad_norm) : 1.0f;
    TRI_CHECK(zero_update_begin(o->z));
    o->t++;
    for (int p = 0; p < zl->n_pieces; p++) {
        const zero_piece *pc = &zl->pieces[p];
        const float wd = o->pt->entries[pc->entry].decay ? (float)oc->weight_decay : 0.0f;
        // The weights AdamW updates: the fp32 master, rounded into the bf16 parameters in the
        // same pass, or the fp32 parameters themselves.
        void *param = zero_piece_param(o->z, pc, pc->lo);
        float *w = o->bf16 ? o->master + pc->pos : param;
        const adamw_step step = {.lr = (float)lr,
                                 .beta1 = (float)oc->beta1,
                                 .beta2 = (float)oc->beta2,
                                 .eps = (float)oc->eps,
                                 .weight_decay = wd,
                                 .grad_scale = grad_scale,
                                 .t = o->t};
        be->adamw(be, w, zero_piece_grad(o->z, pc), o->m + pc->pos, o->v + pc->pos, pc->hi - pc->lo,
                  &step, o->bf16 ? param : NULL);
    }
    return zero_update_end(o->z);
}

int optim_steps_taken(const optimizer *o) { return o->t; }
void optim_set_steps_taken(optimizer *o, int t) { o->t = t; }

float *optim_state_at(const optimizer *o, optim_state_kind kind, size_t pos) {
    switch (kind) {
    case OPTIM_MASTER: return o->master + pos;
    case OPTIM_ADAM_M: return o->m + pos;
    case OPTIM_ADAM_V: return o->v + pos;
    }
    TRI_ASSERT(!"unknown optimizer state kind");
    return NULL;
}
