// model.c: GPT-2 (DESIGN.md "Model") forward and backward over one micro-batch, with
// Megatron tensor parallelism and optional sequence parallelism.
//
// Tensor-parallel structure: qkv and fc are column-parallel (split by heads / by output
// columns), attproj and fcproj row-parallel (split by input columns), the embedding and
// the tied LM head vocab-parallel. The conjugate operators:
//   before a column-parallel block: identity forward / all-reduce backward
//     (sequence parallel: all-gather of rows forward / reduce-scatter backward);
//   after a row-parallel block: all-reduce forward / identity backward
//     (sequence parallel: reduce-scatter forward / all-gather backward).
// A row-parallel bias is added once, by tp rank 0, before the reduction.
#include "model/model.h"

#include <math.h>
#include <string.h>

#include "base/bf16.h"
#include "io/llmc.h"
#include "compute/mempool.h"

#define P(m, idx) param_in_f32(m, idx)
#define G(m, idx) ((m)->g16 ? (m)->gstage + (m)->stage_off[idx] : (m)->grad_of[idx])
#define P16(m, idx) ((const uint16_t *)(m)->param16_of[idx])
// A matmul or attention operand: b16 under bf16, else f32 (only that one is evaluated).
#define OPND(m, f32, b16) ((m)->bf16 ? operand_bf16(b16) : operand_fp32(f32))

// The parameters of entries [first, first + count) are about to be read (model.h).
static tri_status params_ready(model *m, int first, int count) {
    return m->params_ready ? m->params_ready(m->params_needed_ctx, first, count) : TRI_OK;
}

static tri_status tp_all_reduce(model *m, float *x, size_t n) {
    if (m->d.tp == 1) return TRI_OK;
    return m->cm->all_reduce(m->cm, COMM_GROUP_TP, x, n, DTYPE_FP32, COMM_REDUCE_SUM);
}

// Forward of "reduce from the tp region": `partial` (N, C) holds this rank's partial sums;
// the reduced rows this rank keeps land in `rows` (Nl, C). Without SP both are the same
// buffer (all-reduce); with SP a reduce-scatter leaves this rank's block of rows.
static tri_status tp_reduce_rows(model *m, float *partial, float *rows) {
    const model_dims *d = &m->d;
    if (!d->sp) {
        TRI_ASSERT(partial == rows);
        return tp_all_reduce(m, partial, (size_t)d->N * d->C);
    }
    return m->cm->reduce_scatter(m->cm, COMM_GROUP_TP, partial, rows, (size_t)d->N_local * d->C,
                                 DTYPE_FP32);
}

// Forward of "copy to the tp region" under SP: `full` (N, C) holds this rank's rows at
// row0; the all-gather fills in every rank's rows. Identity without SP.
static tri_status tp_gather_rows(model *m, float *full) {
    const model_dims *d = &m->d;
    if (!d->sp) return TRI_OK;
    size_t block = (size_t)d->N_local * d->C;
    return m->cm->all_gather(m->cm, COMM_GROUP_TP, full + (size_t)d->row0 * d->C, full, block,
                             DTYPE_FP32);
}

// The residual gradient dres (Nl, C) as all rows (N, C), the input of a row-parallel
// backward.
static tri_status dresidual_all_rows(model *m, float *dres, float **out) {
    const model_dims *d = &m->d;
    if (!d->sp) {
        *out = dres;
        return TRI_OK;
    }
    *out = m->rows_full;
    return m->cm->all_gather(m->cm, COMM_GROUP_TP, dres, m->rows_full,
                             (size_t)d->N_local * d->C, DTYPE_FP32);
}

// A buffer of kind `kind` from the rank's memory pool (or the backend), counted in *total
// as the pool counts it.
static void *alloc_counted(model *m, plan_mem_kind kind, size_t bytes, size_t *total) {
    *total += mem_round(bytes);
    return mem_take(m->pool, m->be, kind, bytes);
}

static tri_status check_allocated(model *m, void **ptrs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (ptrs[i]) continue;
        LOG_ERROR("out of %s memory for activations (%zu bytes so far for micro_batch %d)",
                  m->be->name, m->activation_bytes + m->scratch_bytes, m->d.B);
        LOG_HINT("lower train.micro_batch or model.seq_len");
        return TRI_ERR_INTERNAL;
    }
    return TRI_OK;
}

#define ACT_POINTERS(a)                                                                      \
    (a)->residual, (a)->residual2, (a)->ln1, (a)->ln2, (a)->ln1_mean, (a)->ln1_rstd,          \
        (a)->ln2_mean, (a)->ln2_rstd, (a)->qkv, (a)->att_state, (a)->atty, (a)->fch,          \
        (a)->fch_gelu, (a)->dres, (a)->inputs, (a)->targets
#define ACT16_POINTERS(a)                                                                    \
    (a)->ln1_16, (a)->ln2_16, (a)->qkv16, (a)->atty16, (a)->fch16, (a)->fch_gelu16
#define HEAD_POINTERS(a)                                                                     \
    (a)->lnf, (a)->lnf_mean, (a)->lnf_rstd, (a)->logits, (a)->rowmax, (a)->sumexp,            \
        (a)->target_logit, (a)->losses

// A slot of activations for `layers` layers (Lc; 1 for the recompute work activations),
// or with layers 0 only each layer's input and the chunk's output (a slot under
// recompute); `head`: the LM head's and loss's buffers.
static tri_status alloc_acts(model *m, model_acts *a, int layers, int head) {
    const model_dims *d = &m->d;
    const size_t N = d->N, Nl = d->N_local, L = (size_t)layers, C = d->C, f = sizeof(float);
    size_t total = 0;
    if (!layers) {
        a->residual = alloc_counted(m, PLAN_MEM_ACTIVATION, ((size_t)d->Lc + 1) * Nl * C * f, &total);
        a->output = a->residual ? a->residual + (size_t)d->Lc * Nl * C : NULL;
        a->dres = alloc_counted(m, PLAN_MEM_ACTIVATION, Nl * C * f, &total);
        a->inputs = alloc_counted(m, PLAN_MEM_ACTIVATION, N * sizeof(int), &total);
        a->targets = alloc_counted(m, PLAN_MEM_ACTIVATION, N * sizeof(int), &total);
        void *some[] = {a->residual, a->dres, a->inputs, a->targets};
        TRI_CHECK(check_allocated(m, some, sizeof some / sizeof some[0]));
        goto head_buffers;
    }
    // bf16 without recompute: the work activations are only the wide ones a layer computes
    // in fp32; its residual stream, statistics and attention state stay in the slot.
    const int lean = a == &m->work && !m->recompute;
    if (!lean) {
        a->residual = alloc_counted(m, PLAN_MEM_ACTIVATION, (L + 1) * Nl * C * f, &total);
        a->output = a->residual ? a->residual + L * Nl * C : NULL;
        a->residual2 = alloc_counted(m, PLAN_MEM_ACTIVATION, L * Nl * C * f, &total);
        a->ln1_mean = alloc_counted(m, PLAN_MEM_ACTIVATION, L * Nl * f, &total);
        a->ln1_rstd = alloc_counted(m, PLAN_MEM_ACTIVATION, L * Nl * f, &total);
        a->ln2_mean = alloc_counted(m, PLAN_MEM_ACTIVATION, L * Nl * f, &total);
        a->ln2_rstd = alloc_counted(m, PLAN_MEM_ACTIVATION, L * Nl * f, &total);
        a->att_state = alloc_counted(m, PLAN_MEM_ACTIVATION, L * m->att_state_bytes, &total);
        a->dres = alloc_counted(m, PLAN_MEM_ACTIVATION, Nl * C * f, &total);
        a->inputs = alloc_counted(m, PLAN_MEM_ACTIVATION, N * sizeof(int), &total);
        a->targets = alloc_counted(m, PLAN_MEM_ACTIVATION, N * sizeof(int), &total);
    }
    const size_t wide[6] = {N * C, N * C, N * d->C3_local, N * d->C_local, N * d->C4_local, N * d->C4_local};
    if (m->bf16 && a != &m->work) { // the wide activations as bf16 (the layer computes in work)
        uint16_t **w16[6] = {&a->ln1_16, &a->ln2_16, &a->qkv16, &a->atty16, &a->fch16, &a->fch_gelu16};
        for (int k = 0; k < 6; k++) *w16[k] = alloc_counted(m, PLAN_MEM_ACTIVATION, L * wide[k] * sizeof(uint16_t), &total);
        void *all16[] = {ACT16_POINTERS(a)};
        TRI_CHECK(check_allocated(m, all16, sizeof all16 / sizeof all16[0]));
    } else {
        float **w32[6] = {&a->ln1, &a->ln2, &a->qkv, &a->atty, &a->fch, &a->fch_gelu};
        for (int k = 0; k < 6; k++) *w32[k] = alloc_counted(m, PLAN_MEM_ACTIVATION, L * wide[k] * f, &total);
        void *all[] = {ACT_POINTERS(a)}, *some[] = {a->ln1, a->ln2, a->qkv, a->atty, a->fch, a->fch_gelu};
        if (lean) TRI_CHECK(check_allocated(m, some, sizeof some / sizeof some[0]));
        else TRI_CHECK(check_allocated(m, all, sizeof all / sizeof all[0]));
    }
head_buffers:
    if (head) {
        a->lnf = alloc_counted(m, PLAN_MEM_ACTIVATION, N * C * f, &total);
        a->lnf_mean = alloc_counted(m, PLAN_MEM_ACTIVATION, Nl * f, &total);
        a->lnf_rstd = alloc_counted(m, PLAN_MEM_ACTIVATION, Nl * f, &total);
        a->logits = alloc_counted(m, PLAN_MEM_ACTIVATION, N * d->Vp_local * f, &total);
        a->rowmax = alloc_counted(m, PLAN_MEM_ACTIVATION, N * f, &total);
        a->sumexp = alloc_counted(m, PLAN_MEM_ACTIVATION, N * f, &total);
        a->target_logit = alloc_counted(m, PLAN_MEM_ACTIVATION, N * f, &total);
        a->losses = alloc_counted(m, PLAN_MEM_ACTIVATION, N * f, &total);
        void *head[] = {HEAD_POINTERS(a)};
        TRI_CHECK(check_allocated(m, head, sizeof head / sizeof head[0]));
    }
    m->activation_bytes += total;
    return TRI_OK;
}

// An entry's parameters as fp32 for an op: in place (fp32 training), or widened from bf16
// into its staging region.
static const float *param_in_f32(model *m, int idx) {
    if (!m->bf16) return m->param_of[idx];
    TRI_ASSERT(m->pstage_off[idx] != SIZE_MAX); // a matmul weight: read as bf16 (P16)
    float *dst = m->stage + m->pstage_off[idx];
    m->be->from_bf16(m->be, dst, m->param16_of[idx], (size_t)m->table.entries[idx].local_numel);
    return dst;
}

static tri_status alloc_scratch(model *m) {
    const model_dims *d = &m->d;
    const size_t N = d->N, C = d->C, f = sizeof(float);
    size_t total = 0;
    if (m->bf16) { // what the ops other than the matmuls read in fp32
        m->pstage_off = xcalloc((size_t)m->table.n_entries, sizeof(size_t));
        const size_t staged = params_stage_layout(&m->table, m->pstage_off, 0);
        m->stage = alloc_counted(m, PLAN_MEM_SCRATCH, staged * f, &total);
    }
    if (m->g16) { // every gradient: the backward accumulates all of them in fp32
        m->stage_off = xcalloc((size_t)m->table.n_entries, sizeof(size_t));
        const size_t staged = params_stage_layout(&m->table, m->stage_off, 1);
        m->gstage = alloc_counted(m, PLAN_MEM_SCRATCH, staged * f, &total); // zero-filled
    }
    m->dln = alloc_counted(m, PLAN_MEM_SCRATCH, N * C * f, &total);
    m->dqkv = alloc_counted(m, PLAN_MEM_SCRATCH, N * d->C3_local * f, &total);
    m->datty = alloc_counted(m, PLAN_MEM_SCRATCH, N * d->C_local * f, &total);
    m->dfch = alloc_counted(m, PLAN_MEM_SCRATCH, N * d->C4_local * f, &total);
    if (d->sp) m->rows_full = alloc_counted(m, PLAN_MEM_SCRATCH, N * C * f, &total);
    if (d->has_head) m->loss_acc = alloc_counted(m, PLAN_MEM_SCRATCH, sizeof(double), &total);
    if (m->bf16)
        m->mm16 = alloc_counted(m, PLAN_MEM_SCRATCH, model_mm16_numel(N, C, d->C_local, d->Vp_local, d->has_head) * sizeof(uint16_t), &total);
    m->scratch_bytes = total;
    void *all[] = {m->dln, m->dqkv, m->datty, m->dfch, d->sp ? m->rows_full : m->dln,
                   m->bf16 ? (void *)m->stage : m->dln, m->g16 ? (void *)m->gstage : m->dln,
                   m->bf16 ? (void *)m->mm16 : m->dln, d->has_head ? (void *)m->loss_acc : m->dln};
    return check_allocated(m, all, sizeof all / sizeof all[0]);
}

static void set_dims(model_dims *d, const run_config *cfg, int B, const comm *cm) {
    d->L = cfg->model.n_layer, d->C = cfg->model.d_model, d->NH = cfg->model.n_head;
    d->HS = d->C / d->NH, d->T = cfg->model.seq_len, d->B = B;
    d->V = cfg->model.vocab_size, d->Vp = config_padded_vocab(cfg);
    d->tp = cm->groups[COMM_GROUP_TP].size, d->tp_rank = cm->groups[COMM_GROUP_TP].rank;
    d->sp = cfg->parallel.sequence_parallel && d->tp > 1;
    d->pp = cm->groups[COMM_GROUP_PP].size, d->pp_rank = cm->groups[COMM_GROUP_PP].rank;
    d->chunks = d->pp == 1 ? 1 : cfg->parallel.virtual_stages;
    d->Lc = d->L / (d->pp * d->chunks);
    d->has_embed = d->pp_rank == 0;
    d->has_head = d->pp_rank == d->pp - 1;
    d->N = B * d->T;
    d->N_local = d->sp ? d->N / d->tp : d->N;
    d->row0 = d->sp ? d->tp_rank * d->N_local : 0;
    d->NH_local = d->NH / d->tp;
    d->C_local = d->C / d->tp;
    d->C3_local = 3 * d->C_local;
    d->C4_local = 4 * d->C_local;
    d->Vp_local = d->Vp / d->tp;
    d->vocab_start = d->tp_rank * d->Vp_local;
}

tri_status model_create(model *m, const run_config *cfg, int B, int n_slots, int pad_multiple,
                        int full_grads, int shard_params, backend *be, comm *cm, mem_pool *pool) {
    memset(m, 0, sizeof *m);
    m->be = be;
    m->cm = cm;
    model_dims *d = &m->d;
    set_dims(d, cfg, B, cm);
    TRI_ASSERT(d->N % d->tp == 0); // seq_len % tp == 0 is a config rule under SP

    params_build(&m->table, cfg, d->tp, d->tp_rank, d->pp_rank);
    // The ZeRO shards' padding: a multiple of pad_multiple; without a full gradient buffer
    // (stage 2) plus pad_multiple elements that a bucket's last shard may reach past the end
    // (optim_capacity).
    const size_t pad = (size_t)pad_multiple;
    m->capacity = (m->table.local_numel + pad - 1) / pad * pad + (!full_grads && pad > 1 ? pad : 0);
    size_t bytes = m->table.local_numel * sizeof(float);
    m->bf16 = cfg->train.precision == DTYPE_BF16;
    m->pool = pool;
    if (m->bf16 && !shard_params) m->params16 = mem_take(pool, be, PLAN_MEM_PARAM, m->capacity * sizeof(uint16_t));
    else if (!shard_params) m->params = mem_take(pool, be, PLAN_MEM_PARAM, m->capacity * sizeof(float));
    m->g16 = cfg->train.grad_dtype == DTYPE_BF16;
    if (full_grads && m->g16) m->grads16 = mem_take(pool, be, PLAN_MEM_GRAD, m->capacity * sizeof(uint16_t));
    else if (full_grads) m->grads = mem_take(pool, be, PLAN_MEM_GRAD, m->capacity * sizeof(float));
    m->grad16_of = xcalloc((size_t)m->table.n_entries, sizeof(uint16_t *));
    m->grad_of = xcalloc((size_t)m->table.n_entries, sizeof(float *));
    m->param_of = xcalloc((size_t)m->table.n_entries, sizeof(float *));
    m->param16_of = xcalloc((size_t)m->table.n_entries, sizeof(uint16_t *));
    for (int i = 0; !shard_params && i < m->table.n_entries; i++) {
        if (m->bf16) m->param16_of[i] = m->params16 + m->table.entries[i].offset;
        else m->param_of[i] = m->params + m->table.entries[i].offset;
    }
    for (int i = 0; full_grads && i < m->table.n_entries; i++) {
        if (m->g16) m->grad16_of[i] = m->grads16 + m->table.entries[i].offset;
        else m->grad_of[i] = m->grads + m->table.entries[i].offset;
    }
    if ((!shard_params && !m->params && !m->params16) || (full_grads && !m->grads && !m->grads16)) {
        LOG_ERROR("out of %s memory for %zu parameters", be->name, m->table.local_numel);
        return TRI_ERR_INTERNAL;
    }
    float *host = xmalloc(bytes);
    if (cfg->model.init_from) {
        llmc_model f;
        tri_status rc = llmc_read(cfg->model.init_from, &f);
        if (rc == TRI_OK) rc = llmc_check_config(&f, cfg, cfg->model.init_from);
        if (rc == TRI_OK) llmc_load_params(&f, &m->table, host);
        llmc_free(&f);
        if (rc != TRI_OK) {
            free(host);
            return rc;
        }
    } else {
        params_init_host(&m->table, cfg->run.seed, host);
    }
    if (m->bf16) // every layout starts from the same bf16 model (the master copies too)
        for (size_t i = 0; i < m->table.local_numel; i++) host[i] = bf16_to_f32(bf16_from_f32(host[i]));
    if (shard_params) {
        m->init_host = host; // the optimizer takes its shards from it
    } else if (m->bf16) {
        uint16_t *h16 = xmalloc(m->table.local_numel * sizeof(uint16_t) + 1);
        for (size_t i = 0; i < m->table.local_numel; i++) h16[i] = bf16_from_f32(host[i]);
        be->copy_to_device(be, m->params16, h16, m->table.local_numel * sizeof(uint16_t));
        free(h16);
        free(host);
    } else {
        be->copy_to_device(be, m->params, host, bytes);
        free(host);
    }
    m->att_state_bytes = attn_state_bytes(be->attn_state, d->B, d->T, d->NH_local);
    m->n_slots = n_slots;
    m->slots = xcalloc((size_t)n_slots, sizeof(model_acts));
    m->recompute = cfg->parallel.recompute == RECOMPUTE_FULL;
    for (int s = 0; s < n_slots; s++)
        TRI_CHECK(alloc_acts(m, &m->slots[s], m->recompute ? 0 : d->Lc, d->has_head));
    if (m->recompute || m->bf16) TRI_CHECK(alloc_acts(m, &m->work, 1, 0));
    if (m->recompute && m->bf16) { // the widest activation, rounded through bf16 in place
        size_t widest = (size_t)d->N * (size_t)(d->C4_local > d->C ? d->C4_local : d->C);
        m->round16 = alloc_counted(m, PLAN_MEM_ACTIVATION, widest * sizeof(uint16_t), &m->activation_bytes);
        if (!m->round16) return TRI_ERR_INTERNAL;
    }
    return alloc_scratch(m);
}

void model_free(model *m) {
    backend *be = m->be;
    if (!be) return;
    free(m->init_host);
    for (int s = 0; s <= m->n_slots; s++) {
        model_acts *a = s < m->n_slots ? &m->slots[s] : &m->work;
        void *acts[] = {ACT_POINTERS(a), HEAD_POINTERS(a), ACT16_POINTERS(a)};
        for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
            mem_give(m->pool, be, acts[i]);
    }
    free(m->slots);
    free(m->grad_of);
    free(m->param_of);
    free(m->param16_of);
    free(m->grad16_of);
    free(m->stage_off);
    free(m->pstage_off);
    void *all[] = {m->params, m->params16, m->stage, m->grads, m->grads16, m->gstage, m->dln,
                   m->dqkv, m->datty, m->dfch, m->rows_full, m->round16, m->mm16, m->loss_acc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mem_give(m->pool, be, all[i]);
    params_free(&m->table);
    memset(m, 0, sizeof *m);
}

// Per-layer activation pointers of layer l.
typedef struct {
    float *in, *res2, *out;                  // (Nl, C)
    float *ln1, *ln2;                        // (N, C)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    float *qkv, *atty, *fch, *fch_gelu;
    void *att_state;
} layer_acts;

// Layer activations of local layer i of slot a: all in the slot, or with recompute the
// layer's input and output in the slot and the rest in the one-layer work activations.
static layer_acts layer_acts_in(model *m, model_acts *a, int i);

static layer_acts layer_acts_of(model *m, model_acts *a, int i) {
    if (!m->recompute && !m->bf16) return layer_acts_in(m, a, i);
    const size_t NlC = (size_t)m->d.N_local * m->d.C;
    layer_acts w = layer_acts_in(m, &m->work, 0);
    w.in = a->residual + i * NlC;
    w.out = a->residual + (i + 1) * NlC;
    if (!m->recompute) { // bf16: the fp32 residual stream, LayerNorm statistics and
                         // attention state stay in the slot; the wide ones compute in work
        layer_acts s = layer_acts_in(m, a, i);
        w.res2 = s.res2, w.att_state = s.att_state;
        w.ln1_mean = s.ln1_mean, w.ln1_rstd = s.ln1_rstd, w.ln2_mean = s.ln2_mean, w.ln2_rstd = s.ln2_rstd;
    }
    return w;
}

// The wide activations of a layer, in the order of model_acts' bf16 fields: their sizes,
// the layer's fp32 copies in `w`, and where slot `a` keeps layer i's bf16 rounding.
enum { ACT_LN1 = 0, ACT_LN2, ACT_QKV, ACT_ATTY, ACT_FCH, ACT_FCH_GELU, ACT_WIDE };

static size_t wide_numel(const model *m, int which) {
    const model_dims *d = &m->d;
    const int cols[ACT_WIDE] = {d->C, d->C, d->C3_local, d->C_local, d->C4_local, d->C4_local};
    return (size_t)d->N * (size_t)cols[which];
}

static float *wide_f32(layer_acts *w, int which) {
    float *p[ACT_WIDE] = {w->ln1, w->ln2, w->qkv, w->atty, w->fch, w->fch_gelu};
    return p[which];
}

static uint16_t *wide_bf16(model *m, model_acts *a, int i, int which) {
    if (m->recompute) return m->round16;
    uint16_t *p[ACT_WIDE] = {a->ln1_16, a->ln2_16, a->qkv16, a->atty16, a->fch16, a->fch_gelu16};
    return p[which] + (size_t)i * wide_numel(m, which);
}

// bf16: an activation just computed is kept as its bf16 rounding (in the slot), and the ops
// after it read that rounding: the matmuls and the attention take bf16 operands. Its fp32
// work copy is read no more in the forward.
static void keep_bf16(model *m, model_acts *a, layer_acts *w, int i, int which) {
    if (!m->bf16) return;
    m->be->to_bf16(m->be, wide_bf16(m, a, i, which), wide_f32(w, which), wide_numel(m, which));
}

// bf16 without recompute: the one kept activation the backward reads in fp32, GELU's input,
// back into its work buffer; the others are read as bf16 operands (stored_bf16).
static void load_bf16(model *m, model_acts *a, layer_acts *w, int i) {
    m->be->from_bf16(m->be, wide_f32(w, ACT_FCH), wide_bf16(m, a, i, ACT_FCH),
                     wide_numel(m, ACT_FCH));
}

// bf16, in the backward: layer i's activation `which` as a matmul operand. Without recompute
// the slot's bf16 copy; with it, the work copy rounded again into round16 (the same bits as
// the forward kept).
static const uint16_t *stored_bf16(model *m, model_acts *a, layer_acts *w, int i, int which) {
    uint16_t *p = wide_bf16(m, a, i, which);
    if (m->recompute) m->be->to_bf16(m->be, p, wide_f32(w, which), wide_numel(m, which));
    return p;
}

// A linear layer's forward, out (N, OC) = inp @ W^T + bias with W the parameters of table
// entry `w`: in fp32, or under bf16 on the bf16 operands (inp16, inp's rounding, and the
// bf16 parameters).
static void linear_fwd(model *m, float *out, const float *inp, const uint16_t *inp16, int w,
                       const float *bias, int N, int IC, int OC) {
    backend_matmul_fwd(m->be, out, NULL, OPND(m, inp, inp16), OPND(m, P(m, w), P16(m, w)), bias, N,
                       IC, OC);
}

// The MLP's fc layer and its GELU in one op: pre (N, OC) = inp @ W^T + bias, out =
// gelu(pre).
static void linear_gelu_fwd(model *m, float *out, float *pre, const float *inp,
                            const uint16_t *inp16, int w, const float *bias, int N, int IC,
                            int OC) {
    backend_matmul_fwd(m->be, out, pre, OPND(m, inp, inp16), OPND(m, P(m, w), P16(m, w)), bias, N,
                       IC, OC);
}

// Its backward into dinp and the gradients of entry w (dbias: its bias's, or NULL). Under
// bf16 dout is rounded into mm16 first. gelu_pre: the layer's input is gelu(gelu_pre), and
// dinp is the gradient at gelu_pre (NULL: at the input).
static void linear_bwd(model *m, float *dinp, int w, float *dbias, const float *dout,
                       const float *inp, const uint16_t *inp16, const float *gelu_pre, int N,
                       int IC, int OC) {
    backend *be = m->be;
    if (m->bf16) be->to_bf16(be, m->mm16, dout, (size_t)N * OC);
    backend_matmul_bwd(be, dinp, G(m, w), dbias, OPND(m, dout, m->mm16), OPND(m, inp, inp16),
                       OPND(m, P(m, w), P16(m, w)), gelu_pre, N, IC, OC);
}

// Element n of an activation buffer, or NULL for one a slot does not hold in fp32 (bf16).
#define AT(p, n) ((p) ? (p) + (n) : NULL)

static layer_acts layer_acts_in(model *m, model_acts *a, int l) {
    const model_dims *d = &m->d;
    const size_t N = d->N, Nl = d->N_local, C = d->C;
    return (layer_acts){
        .in = a->residual + l * Nl * C,
        .res2 = a->residual2 + l * Nl * C,
        .out = a->residual + (l + 1) * Nl * C,
        .ln1 = AT(a->ln1, l * N * C),
        .ln2 = AT(a->ln2, l * N * C),
        .ln1_mean = a->ln1_mean + l * Nl,
        .ln1_rstd = a->ln1_rstd + l * Nl,
        .ln2_mean = a->ln2_mean + l * Nl,
        .ln2_rstd = a->ln2_rstd + l * Nl,
        .qkv = AT(a->qkv, l * N * d->C3_local),
        .atty = AT(a->atty, l * N * d->C_local),
        .fch = AT(a->fch, l * N * d->C4_local),
        .fch_gelu = AT(a->fch_gelu, l * N * d->C4_local),
        .att_state = (char *)a->att_state + l * m->att_state_bytes,
    };
}

// LayerNorm of this rank's rows into their place in `full` (N, C), then the rows of every
// rank (SP all-gather; without SP the rows are already all rows).
static tri_status layernorm_to_all_rows(model *m, float *full, float *mean, float *rstd,
                                        const float *in, const float *w, const float *b) {
    const model_dims *d = &m->d;
    m->be->layernorm_fwd(m->be, full + (size_t)d->row0 * d->C, mean, rstd, in, w, b, d->N_local, d->C);
    return tp_gather_rows(m, full);
}

// The LayerNorm that follows a residual add, fused with it (rowpar_residual).
typedef struct {
    float *full, *mean, *rstd; // as layernorm_to_all_rows takes them
    const float *w, *b;
} next_layernorm;

// A row-parallel linear (entry w) whose reduced output is added to the residual stream:
// out (Nl, C) = residual (Nl, C) + reduce_over_tp(inp (N, IC_local) @ w^T) + bias. With ln,
// the LayerNorm of out follows in the same op, into all rows (layernorm_to_all_rows).
static tri_status rowpar_residual(model *m, float *out, const float *residual, const float *inp,
                                  const uint16_t *inp16, int w, const float *bias, int IC_local,
                                  const next_layernorm *ln) {
    const model_dims *d = &m->d;
    float *partial = d->sp ? m->rows_full : out;
    linear_fwd(m, partial, inp, inp16, w, d->tp_rank == 0 ? bias : NULL, d->N, IC_local, d->C);
    TRI_CHECK(tp_reduce_rows(m, partial, out));
    if (!ln) {
        m->be->residual_fwd(m->be, out, out, residual, (size_t)d->N_local * d->C);
        return TRI_OK;
    }
    m->be->residual_layernorm_fwd(m->be, out, ln->full + (size_t)d->row0 * d->C, ln->mean,
                                  ln->rstd, out, residual, ln->w, ln->b, d->N_local, d->C);
    return tp_gather_rows(m, ln->full);
}

// Layer l of the model is local layer i of the slot's chunk.
static tri_status layer_forward(model *m, model_acts *acts, int l, int i) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N, C = d->C;
    layer_acts a = layer_acts_of(m, acts, i);
    const param_table *pt = &m->table;
    TRI_CHECK(params_ready(m, params_layer(pt, l, 0), PARAM_PER_LAYER));
#define LP(which) P(m, params_layer(pt, l, which))
#define LW(which) params_layer(pt, l, which)
// bf16: the matmul input `which` just rounded by keep_bf16 (unused in fp32)
#define IN16(which) (m->bf16 ? wide_bf16(m, acts, i, which) : NULL)
    TRI_CHECK(layernorm_to_all_rows(m, a.ln1, a.ln1_mean, a.ln1_rstd, a.in, LP(PARAM_LN1W), LP(PARAM_LN1B)));
    keep_bf16(m, acts, &a, i, ACT_LN1);
    linear_fwd(m, a.qkv, a.ln1, IN16(ACT_LN1), LW(PARAM_QKVW), LP(PARAM_QKVB), N, C, d->C3_local);
    keep_bf16(m, acts, &a, i, ACT_QKV);
    backend_attention_fwd(be, a.atty, a.att_state, OPND(m, a.qkv, IN16(ACT_QKV)), d->B, d->T,
                          d->NH_local, d->HS);
    keep_bf16(m, acts, &a, i, ACT_ATTY);
    const next_layernorm ln2 = {a.ln2, a.ln2_mean, a.ln2_rstd, LP(PARAM_LN2W), LP(PARAM_LN2B)};
    TRI_CHECK(rowpar_residual(m, a.res2, a.in, a.atty, IN16(ACT_ATTY), LW(PARAM_ATTPROJW),
                              LP(PARAM_ATTPROJB), d->C_local, &ln2));
    keep_bf16(m, acts, &a, i, ACT_LN2);
    linear_gelu_fwd(m, a.fch_gelu, a.fch, a.ln2, IN16(ACT_LN2), LW(PARAM_FCW), LP(PARAM_FCB), N,
                    C, d->C4_local);
    keep_bf16(m, acts, &a, i, ACT_FCH);
    keep_bf16(m, acts, &a, i, ACT_FCH_GELU);
    TRI_CHECK(rowpar_residual(m, a.out, a.res2, a.fch_gelu, IN16(ACT_FCH_GELU), LW(PARAM_FCPROJW),
                              LP(PARAM_FCPROJB), d->C4_local, NULL));
#undef LP
#undef LW
#undef IN16
    return TRI_OK;
}

// Backward of "copy to the tp region" for a LayerNorm output: m->dln (N, C) holds this
// rank's partial gradient of all rows; after the reduction its first Nl rows are the
// gradient of this rank's rows (all-reduce without SP, reduce-scatter with it), which the
// LayerNorm backward accumulates into dres.
static tri_status layernorm_bwd_from_all_rows(model *m, float *dres, const float *in,
                                              const float *w, float *dw, float *db,
                                              const float *mean, const float *rstd) {
    const model_dims *d = &m->d;
    TRI_CHECK(tp_reduce_rows(m, m->dln, m->dln));
    m->be->layernorm_bwd(m->be, dres, dw, db, m->dln, in, w, mean, rstd, d->N_local, d->C);
    return TRI_OK;
}

// acts->dres holds d(loss)/d(layer output) on entry and d(loss)/d(layer input) on exit.
static tri_status layer_backward(model *m, model_acts *acts, int l, int i) {
    if (m->recompute) TRI_CHECK(layer_forward(m, acts, l, i)); // the same bits as before
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N, C = d->C;
    layer_acts a = layer_acts_of(m, acts, i);
    if (m->bf16 && !m->recompute) load_bf16(m, acts, &a, i);
    if (m->bf16 && m->recompute) { // GELU's input as the backward reads it without recompute
        m->be->to_bf16(m->be, m->round16, a.fch, wide_numel(m, ACT_FCH));
        m->be->from_bf16(m->be, a.fch, m->round16, wide_numel(m, ACT_FCH));
    }
    const param_table *pt = &m->table;
    TRI_CHECK(params_ready(m, params_layer(pt, l, 0), PARAM_PER_LAYER));
    float *dout;
#define LP(which) P(m, params_layer(pt, l, which))
#define LG(which) G(m, params_layer(pt, l, which))
#define LW(which) params_layer(pt, l, which)
#define IN16(which) (m->bf16 ? stored_bf16(m, acts, &a, i, which) : NULL)
    // MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))).
    TRI_CHECK(dresidual_all_rows(m, acts->dres, &dout));
    linear_bwd(m, m->dfch, LW(PARAM_FCPROJW), LG(PARAM_FCPROJB), dout, a.fch_gelu,
               IN16(ACT_FCH_GELU), a.fch, N, d->C4_local, C); // dfch: at gelu's input
    linear_bwd(m, m->dln, LW(PARAM_FCW), LG(PARAM_FCB), m->dfch, a.ln2, IN16(ACT_LN2), NULL, N,
               C, d->C4_local);
    TRI_CHECK(layernorm_bwd_from_all_rows(m, acts->dres, a.res2, LP(PARAM_LN2W), LG(PARAM_LN2W), LG(PARAM_LN2B),
                                          a.ln2_mean, a.ln2_rstd));
    // Attention: res2 = in + attproj(attention(qkv(ln1(in)))).
    TRI_CHECK(dresidual_all_rows(m, acts->dres, &dout));
    linear_bwd(m, m->datty, LW(PARAM_ATTPROJW), LG(PARAM_ATTPROJB), dout, a.atty,
               IN16(ACT_ATTY), NULL, N, d->C_local, C);
    backend_attention_bwd(be, m->dqkv, m->datty, OPND(m, a.qkv, IN16(ACT_QKV)), a.att_state, d->B,
                          d->T, d->NH_local, d->HS);
    linear_bwd(m, m->dln, LW(PARAM_QKVW), LG(PARAM_QKVB), m->dqkv, a.ln1, IN16(ACT_LN1), NULL, N,
               C, d->C3_local);
    TRI_CHECK(layernorm_bwd_from_all_rows(m, acts->dres, a.in, LP(PARAM_LN1W), LG(PARAM_LN1W), LG(PARAM_LN1B),
                                          a.ln1_mean, a.ln1_rstd));
#undef LP
#undef LG
#undef LW
#undef IN16
    return TRI_OK;
}

tri_status model_forward(model *m, int slot, int chunk, const int *inputs, const int *targets) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N, C = d->C;
    model_acts *a = &m->slots[slot];
    const param_table *pt = &m->table;
    const int first_layer = params_chunk_first_layer(pt, chunk);
    if (m->params_needed) TRI_CHECK(m->params_needed(m->params_needed_ctx, chunk, 0));

    be->copy_to_device(be, a->inputs, inputs, (size_t)N * sizeof(int));
    if (d->has_embed && chunk == 0) {
        // Vocab-parallel embedding: a masked lookup of this rank's rows, then the sum over tp
        // (a reduce-scatter of rows under SP). Only tp rank 0 adds the position embedding.
        float *partial = d->sp ? m->rows_full : a->residual;
        TRI_CHECK(params_ready(m, params_wte(pt), 1));
        TRI_CHECK(params_ready(m, params_wpe(pt), 1));
        be->embedding_fwd(be, partial, a->inputs, P(m, params_wte(pt)), P(m, params_wpe(pt)),
                          d->B, d->T, C, d->vocab_start, d->Vp_local, d->tp_rank == 0);
        TRI_CHECK(tp_reduce_rows(m, partial, a->residual));
    }
    for (int i = 0; i < d->Lc; i++) TRI_CHECK(layer_forward(m, a, first_layer + i, i));
    if (!(d->has_head && chunk == d->chunks - 1)) return TRI_OK;

    float *res = a->output;
    TRI_CHECK(params_ready(m, params_lnfw(pt), 2));
    TRI_CHECK(params_ready(m, params_wte(pt), 1));
    TRI_CHECK(layernorm_to_all_rows(m, a->lnf, a->lnf_mean, a->lnf_rstd, res,
                                    P(m, params_lnfw(pt)), P(m, params_lnfb(pt))));
    // Tied LM head over this rank's vocabulary rows: logits (N, Vp/tp). Under bf16 the
    // operands are lnf's rounding and the bf16 wte.
    if (m->bf16) be->to_bf16(be, m->mm16, a->lnf, (size_t)N * C);
    linear_fwd(m, a->logits, a->lnf, m->mm16, params_wte(pt), NULL, N, C, d->Vp_local);
    if (!targets) return TRI_OK;

    // Vocab-parallel cross-entropy: no rank ever holds the full-vocabulary logits.
    be->copy_to_device(be, a->targets, targets, (size_t)N * sizeof(int));
    be->xent_max(be, a->rowmax, a->logits, N, d->Vp_local, d->vocab_start, d->V);
    if (d->tp > 1)
        TRI_CHECK(m->cm->all_reduce(m->cm, COMM_GROUP_TP, a->rowmax, N, DTYPE_FP32, COMM_REDUCE_MAX));
    be->xent_sumexp(be, a->sumexp, a->target_logit, a->logits, a->rowmax, a->targets, N,
                    d->Vp_local, d->vocab_start, d->V);
    TRI_CHECK(tp_all_reduce(m, a->sumexp, N));
    TRI_CHECK(tp_all_reduce(m, a->target_logit, N));
    be->xent_loss(be, a->losses, a->rowmax, a->sumexp, a->target_logit, N);
    be->loss_sum(be, m->loss_acc, a->losses, (size_t)N);
    return TRI_OK;
}

double model_take_loss(model *m) {
    if (!m->loss_acc) return 0.0;
    double sum = 0.0;
    m->be->copy_to_host(m->be, &sum, m->loss_acc, sizeof sum);
    m->be->memset_zero(m->be, m->loss_acc, sizeof(double));
    return sum;
}

// bf16 gradients: what the backward accumulated in fp32 staging for entries [first, first +
// count) is added into their bf16 buffers (rounded once per micro-batch), and the staging
// is zeroed for the next.
static void flush_bf16_grads(model *m, int first, int count) {
    for (int e = first; e < first + count; e++) {
        const size_t n = (size_t)m->table.entries[e].local_numel;
        m->be->add_to_bf16(m->be, m->grad16_of[e], m->gstage + m->stage_off[e], n);
        m->be->memset_zero(m->be, m->gstage + m->stage_off[e], n * sizeof(float));
    }
}

static tri_status grads_ready(model *m, int first, int count) {
    if (m->g16) flush_bf16_grads(m, first, count);
    return m->grads_ready ? m->grads_ready(m->grads_ready_ctx, first, count) : TRI_OK;
}

// The LM head's backward: d(lnf) into m->dln, dwte accumulated. Under bf16 in chunks of rows
// (model_head_chunk_rows), each chunk's lnf and d(logits) rounded into mm16 together.
static void head_backward(model *m, model_acts *a) {
    const model_dims *d = &m->d;
    const size_t C = d->C, Vp = d->Vp_local;
    const int wte = params_wte(&m->table);
    if (!m->bf16) {
        backend_matmul_bwd(m->be, m->dln, G(m, wte), NULL, operand_fp32(a->logits),
                           operand_fp32(a->lnf), operand_fp32(P(m, wte)), NULL, d->N, d->C,
                           d->Vp_local);
        return;
    }
    const size_t rows = model_head_chunk_rows((size_t)d->N);
    for (size_t r0 = 0; r0 < (size_t)d->N; r0 += rows) {
        const size_t r = (size_t)d->N - r0 < rows ? (size_t)d->N - r0 : rows;
        uint16_t *lnf16 = m->mm16, *dlogits16 = m->mm16 + r * C;
        m->be->to_bf16(m->be, lnf16, a->lnf + r0 * C, r * C);
        m->be->to_bf16(m->be, dlogits16, a->logits + r0 * Vp, r * Vp);
        backend_matmul_bwd(m->be, m->dln + r0 * C, G(m, wte), NULL, operand_bf16(dlogits16),
                           operand_bf16(lnf16), operand_bf16(P16(m, wte)), NULL, (int)r, d->C,
                           d->Vp_local);
    }
}

tri_status model_backward(model *m, int slot, int chunk, float dloss) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N, C = d->C;
    model_acts *a = &m->slots[slot];
    const param_table *pt = &m->table;
    const int first_layer = params_chunk_first_layer(pt, chunk);
    if (m->params_needed) TRI_CHECK(m->params_needed(m->params_needed_ctx, chunk, 1));

    if (d->has_head && chunk == d->chunks - 1) {
        TRI_CHECK(params_ready(m, params_wte(pt), 1));
        TRI_CHECK(params_ready(m, params_lnfw(pt), 2));
        be->xent_bwd(be, a->logits, a->rowmax, a->sumexp, a->targets, dloss, N, d->Vp_local,
                     d->vocab_start, d->V);
        // LM head: d(lnf) = dlogits @ wte (partial over the vocabulary shards),
        // dwte += dlogits^T lnf.
        head_backward(m, a);
        float *res = a->output;
        be->memset_zero(be, a->dres, (size_t)d->N_local * C * sizeof(float));
        TRI_CHECK(layernorm_bwd_from_all_rows(m, a->dres, res, P(m, params_lnfw(pt)),
                                              G(m, params_lnfw(pt)), G(m, params_lnfb(pt)),
                                              a->lnf_mean, a->lnf_rstd));
        TRI_CHECK(grads_ready(m, params_lnfw(pt), 2));
        if (pt->wte_is_copy) TRI_CHECK(grads_ready(m, params_wte(pt), 1));
    }
    for (int i = d->Lc - 1; i >= 0; i--) {
        TRI_CHECK(layer_backward(m, a, first_layer + i, i));
        TRI_CHECK(grads_ready(m, params_layer(pt, first_layer + i, 0), PARAM_PER_LAYER));
    }
    if (d->has_embed && chunk == 0) {
        // The embedding's gradient is the residual stream's at layer 0, all rows: every rank
        // adds to its own vocabulary rows, and computes the same (replicated) wpe gradient.
        float *dout;
        TRI_CHECK(dresidual_all_rows(m, a->dres, &dout));
        be->embedding_bwd(be, G(m, params_wte(pt)), G(m, params_wpe(pt)), dout, a->inputs, d->B,
                          d->T, C, d->vocab_start, d->Vp_local);
        TRI_CHECK(grads_ready(m, params_wte(pt), 1));
        TRI_CHECK(grads_ready(m, params_wpe(pt), 1));
    }
    return TRI_OK;
}

float *model_chunk_input(model *m, int slot) { return m->slots[slot].residual; }
float *model_chunk_output(model *m, int slot) { return m->slots[slot].output; }
float *model_chunk_grad(model *m, int slot) { return m->slots[slot].dres; }

tri_status model_finish_grads(model *m) {
    const param_table *pt = &m->table;
    if (!m->grads && !m->grads16) return TRI_OK;
    comm *cm = m->cm;
    const tri_dtype dt = m->g16 ? DTYPE_BF16 : DTYPE_FP32;
#define GRADS_AT(e) (m->g16 ? (void *)(m->grads16 + (e)->offset) : (void *)(m->grads + (e)->offset))
    for (int i = 0; m->d.sp && i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        if (e->layernorm && cm->groups[COMM_GROUP_TP].size > 1)
            TRI_CHECK(cm->all_reduce(cm, COMM_GROUP_TP, GRADS_AT(e), (size_t)e->local_numel, dt,
                                     COMM_REDUCE_SUM));
    }
    if (m->d.pp > 1 && pt->wte >= 0) { // first and last stage: the two copies of wte
        const param_entry *e = &pt->entries[pt->wte];
        TRI_CHECK(cm->all_reduce(cm, COMM_GROUP_EMBED, GRADS_AT(e), (size_t)e->local_numel, dt,
                                 COMM_REDUCE_SUM));
    }
#undef GRADS_AT
    return TRI_OK;
}

void model_logits_row(model *m, int slot, int t, float *out) {
    const model_dims *d = &m->d;
    m->be->copy_to_host(m->be, out, m->slots[slot].logits + (size_t)t * d->Vp_local,
                        (size_t)d->Vp_local * sizeof(float));
}

tri_status model_gather_params(model *m, const param_table *full_table, const float *local,
                               float *full) {
    // Each rank of the model-parallel group (tp x pp) places what it alone holds into a
    // zeroed copy of the whole model, and a sum over the group assembles it: replicated
    // entries come from tp rank 0 only, the tied wte from the first stage only, so every
    // element is one rank's value plus zeros, exactly.
    const param_table *pt = &m->table;
    memset(full, 0, full_table->local_numel * sizeof(float));
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        if ((e->split == SPLIT_REPLICATED && pt->tp_rank != 0) || (i == pt->wte && pt->wte_is_copy))
            continue;
        int fi = params_find(full_table, e->name);
        TRI_ASSERT(fi >= 0);
        params_place_into_global(pt, e, local + e->offset, full + full_table->entries[fi].offset);
    }
    if (m->cm->groups[COMM_GROUP_MP].size == 1) return TRI_OK;
    return m->cm->all_reduce(m->cm, COMM_GROUP_MP, full, full_table->local_numel, DTYPE_FP32,
                             COMM_REDUCE_SUM);
}
