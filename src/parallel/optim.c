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
    // be->optim_multi: the pieces as one multi-tensor table (compute/multi_tensor.h), built
    // once at creation (the pieces never move); with the `optim_table` trait its arrays are
    // also uploaded to the device buffers below.
    int multi;
    mt_table mt;
    mt_tensor *mt_dev_tensors; // (n_pieces)
    uint32_t *mt_dev_starts;   // (2 * (n_pieces + 1)): AdamW's prefix table, the norm's
    double *mt_dev_partial;    // (blocks) the norm's per-block sums
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

void optim_buffers(mem_specs *s, const zero_layout *zl, tri_dtype param_dtype, int optim_table,
                   optimizer *o) {
    const size_t bytes = zl->arena_len * sizeof(float);
    mem_specs_add(s, "optim.norm_acc", MEM_SCRATCH, sizeof(double), DST(norm_acc));
    mem_specs_add(s, "optim.adam_m", MEM_ADAM, bytes, DST(m));
    mem_specs_add(s, "optim.adam_v", MEM_ADAM, bytes, DST(v));
    if (param_dtype == DTYPE_BF16)
        mem_specs_add(s, "optim.master", MEM_MASTER, bytes ? bytes : sizeof(float), DST(master));
    if (!optim_table) return;
    // The multi-tensor table's device copy: the pieces, both prefix tables, and a sum per
    // block of the norm (at most AdamW's blocks, which cover every piece).
    const size_t n = (size_t)zl->n_pieces;
    uint64_t blocks = 0;
    for (int p = 0; p < zl->n_pieces; p++)
        blocks += mt_blocks_of(zl->pieces[p].hi - zl->pieces[p].lo);
    mem_specs_add(s, "optim.mt_tensors", MEM_SCRATCH, (n ? n : 1) * sizeof(mt_tensor),
                  DST(mt_dev_tensors));
    mem_specs_add(s, "optim.mt_starts", MEM_SCRATCH, 2 * (n + 1) * sizeof(uint32_t),
                  DST(mt_dev_starts));
    mem_specs_add(s, "optim.mt_partial", MEM_SCRATCH,
                  sat_mul_size(blocks ? (size_t)blocks : 1, sizeof(double)), DST(mt_dev_partial));
}
#undef DST

// Does piece pc count in the global norm? Replicated entries are counted by tp rank 0 only
// and the tied embedding by the first stage only, so that the sums over the shards (dp) and
// the model-parallel group (tp x pp) count each unique element once.
static int piece_in_norm(const param_table *pt, const zero_piece *pc) {
    const param_entry *e = &pt->entries[pc->entry];
    if (e->split == SPLIT_REPLICATED && pt->tp_rank != 0) return 0;
    if (pc->entry == pt->wte && pt->wte_is_copy) return 0;
    return 1;
}

// The multi-tensor table of the pieces (compute/multi_tensor.h), in piece order, and with
// `upload` its copy in the device buffers carved for it.
static tri_status mt_build(optimizer *o, int upload) {
    const zero_layout *zl = zero_layout_of(o->z);
    const int n = zl->n_pieces;
    mt_table *t = &o->mt;
    t->n_tensors = n;
    t->tensors = xcalloc(n ? (size_t)n : 1, sizeof *t->tensors);
    t->adam_start = xcalloc((size_t)n + 1, sizeof *t->adam_start);
    t->norm_start = xcalloc((size_t)n + 1, sizeof *t->norm_start);
    t->grad_dtype = zero_grad_dtype(o->z);
    t->grad_wide = zero_grad_widen_buffer(o->z);
    for (int p = 0; p < n; p++) {
        const zero_piece *pc = &zl->pieces[p];
        void *param = zero_piece_param(o->z, pc, pc->lo);
        t->tensors[p] = (mt_tensor){.param = o->bf16 ? o->master + pc->pos : param,
                                    .param16 = o->bf16 ? param : NULL,
                                    .grad = zero_piece_grad_stored(o->z, pc),
                                    .m = o->m + pc->pos,
                                    .v = o->v + pc->pos,
                                    .n = pc->hi - pc->lo,
                                    .decay = o->pt->entries[pc->entry].decay,
                                    .in_norm = piece_in_norm(o->pt, pc)};
    }
    TRI_CHECK(mt_prefix_build(t->adam_start, t->tensors, n, 0, &t->adam_blocks));
    TRI_CHECK(mt_prefix_build(t->norm_start, t->tensors, n, 1, &t->norm_blocks));
    if (!upload) return TRI_OK;
    backend *be = o->be;
    const size_t starts = ((size_t)n + 1) * sizeof(uint32_t);
    if (n) be->copy_to_device(be, o->mt_dev_tensors, t->tensors, (size_t)n * sizeof(mt_tensor));
    be->copy_to_device(be, o->mt_dev_starts, t->adam_start, starts);
    be->copy_to_device(be, o->mt_dev_starts + n + 1, t->norm_start, starts);
    t->dev_tensors = o->mt_dev_tensors;
    t->dev_adam_start = o->mt_dev_starts;
    t->dev_norm_start = o->mt_dev_starts + n + 1;
    t->dev_partial = o->mt_dev_partial;
    return TRI_OK;
}

tri_status optim_create(optimizer **out, const optim_config *oc, double grad_clip, zero_state *z,
                        backend *be, comm *cm, mem_pool *pool) {
    optimizer *o = xcalloc(1, sizeof *o);
    *out = o;
    o->cfg = *oc, o->grad_clip = grad_clip;
    o->z = z, o->pt = zero_table(z);
    o->be = be, o->cm = cm, o->pool = pool;
    o->bf16 = zero_param_dtype(z) == DTYPE_BF16;
    const zero_layout *zl = zero_layout_of(z);
    const backend_traits bt = backend_traits_of(be);
    optim_buffers(&o->buffers, zl, zero_param_dtype(z), bt.optim_table, o);
    TRI_CHECK(mem_specs_carve(&o->buffers, pool, be));
    // Mixed precision: the fp32 master copy of this rank's pieces (AdamW updates it; the bf16
    // parameters are its rounding), from the bf16 parameters it starts equal to.
    for (int p = 0; o->bf16 && p < zl->n_pieces; p++) {
        const zero_piece *pc = &zl->pieces[p];
        be->from_bf16(be, o->master + pc->pos, zero_piece_param(z, pc, pc->lo), pc->hi - pc->lo);
    }
    o->multi = be->optim_multi;
    if (o->multi) TRI_CHECK(mt_build(o, bt.optim_table));
    return TRI_OK;
}

void optim_free(optimizer *o) {
    if (!o) return;
    free(o->mt.tensors);
    free(o->mt.adam_start);
    free(o->mt.norm_start);
    mem_specs_release(&o->buffers, o->pool, o->be);
    free(o);
}

tri_status optim_grad_norm(optimizer *o, double *norm) {
    // Sum of squares per piece, in table order, of the pieces that count (piece_in_norm),
    // in one multi-tensor op or piece by piece. The sums stay on the device (norm_acc); the
    // host waits once, for their total.
    const zero_layout *zl = zero_layout_of(o->z);
    o->be->memset_zero(o->be, o->norm_acc, sizeof(double));
    if (o->multi) {
        o->be->mt_sumsq_add(o->be, o->norm_acc, &o->mt);
    } else {
        for (int p = 0; p < zl->n_pieces; p++) {
            const zero_piece *pc = &zl->pieces[p];
            if (!piece_in_norm(o->pt, pc)) continue;
            o->be->sumsq_add(o->be, o->norm_acc, zero_piece_grad(o->z, pc), pc->hi - pc->lo);
        }
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
    adamw_step step = {.lr = (float)lr,
                       .beta1 = (float)oc->beta1,
                       .beta2 = (float)oc->beta2,
                       .eps = (float)oc->eps,
                       .weight_decay = (float)oc->weight_decay,
                       .grad_scale = grad_scale,
                       .t = o->t};
    if (o->multi) {
        be->mt_adamw(be, &o->mt, &step); // weight decay on the tensors with decay only
        return zero_update_end(o->z);
    }
    for (int p = 0; p < zl->n_pieces; p++) {
        const zero_piece *pc = &zl->pieces[p];
        step.weight_decay = o->pt->entries[pc->entry].decay ? (float)oc->weight_decay : 0.0f;
        // The weights AdamW updates: the fp32 master, rounded into the bf16 parameters in the
        // same pass, or the fp32 parameters themselves.
        void *param = zero_piece_param(o->z, pc, pc->lo);
        float *w = o->bf16 ? o->master + pc->pos : param;
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
