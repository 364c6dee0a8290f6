// model.c: GPT-2 (DESIGN.md "Model") forward and backward over one micro-batch.
//
// Tensor-parallel structure (Megatron): qkv and fc are column-parallel, attproj and
// fcproj row-parallel. The conjugate operators are tp_copy_to_parallel (identity forward,
// all-reduce backward) before a column-parallel block and tp_reduce_from_parallel
// (all-reduce forward, identity backward) after a row-parallel block. With tp = 1 both
// are the identity.
#include "model.h"

#include <math.h>
#include <string.h>

#include "llmc.h"

#define P(m, idx) ((m)->params + (m)->table.entries[idx].offset)
#define G(m, idx) ((m)->grads + (m)->table.entries[idx].offset)

static tri_status tp_all_reduce(model *m, float *x, size_t n) {
    if (m->d.tp == 1) return TRI_OK;
    return m->cm->all_reduce(m->cm, COMM_GROUP_TP, x, n, COMM_DTYPE_F32, COMM_REDUCE_SUM);
}

// Forward of "copy to the tp region" is the identity; its backward all-reduces.
static tri_status tp_copy_to_parallel_bwd(model *m, float *dx, size_t n) {
    return tp_all_reduce(m, dx, n);
}

// Forward of "reduce from the tp region" all-reduces partial sums; its backward is the
// identity.
static tri_status tp_reduce_from_parallel_fwd(model *m, float *x, size_t n) {
    return tp_all_reduce(m, x, n);
}

static void *alloc_or_null(model *m, size_t bytes, size_t *total) {
    *total += bytes;
    return m->be->alloc(m->be, bytes);
}

static tri_status check_allocated(model *m, void **ptrs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (ptrs[i]) continue;
        LOG_ERROR("out of %s memory for activations (%zu bytes so far for micro_batch %d)",
                  m->be->name, m->activation_bytes + m->scratch_bytes, m->d.B);
        LOG_ERROR("HINT: lower train.micro_batch or model.seq_len");
        return TRI_ERR_INTERNAL;
    }
    return TRI_OK;
}

static tri_status alloc_acts(model *m, model_acts *a) {
    const model_dims *d = &m->d;
    const size_t N = (size_t)d->B * d->T, L = d->L, C = d->C, f = sizeof(float);
    size_t total = 0;
    m->att_state_bytes = m->be->attention_state_bytes(m->be, d->B, d->T, d->NH_local);
    a->residual = alloc_or_null(m, (L + 1) * N * C * f, &total);
    a->residual2 = alloc_or_null(m, L * N * C * f, &total);
    a->ln1 = alloc_or_null(m, L * N * C * f, &total);
    a->ln2 = alloc_or_null(m, L * N * C * f, &total);
    a->ln1_mean = alloc_or_null(m, L * N * f, &total);
    a->ln1_rstd = alloc_or_null(m, L * N * f, &total);
    a->ln2_mean = alloc_or_null(m, L * N * f, &total);
    a->ln2_rstd = alloc_or_null(m, L * N * f, &total);
    a->qkv = alloc_or_null(m, L * N * d->C3_local * f, &total);
    a->att_state = alloc_or_null(m, L * m->att_state_bytes, &total);
    a->atty = alloc_or_null(m, L * N * (C / d->tp) * f, &total);
    a->fch = alloc_or_null(m, L * N * d->C4_local * f, &total);
    a->fch_gelu = alloc_or_null(m, L * N * d->C4_local * f, &total);
    a->lnf = alloc_or_null(m, N * C * f, &total);
    a->lnf_mean = alloc_or_null(m, N * f, &total);
    a->lnf_rstd = alloc_or_null(m, N * f, &total);
    a->logits = alloc_or_null(m, N * d->Vp_local * f, &total);
    a->rowmax = alloc_or_null(m, N * f, &total);
    a->sumexp = alloc_or_null(m, N * f, &total);
    a->target_logit = alloc_or_null(m, N * f, &total);
    a->losses = alloc_or_null(m, N * f, &total);
    a->inputs = alloc_or_null(m, N * sizeof(int), &total);
    a->targets = alloc_or_null(m, N * sizeof(int), &total);
    m->activation_bytes += total;
    void *all[] = {a->residual, a->residual2, a->ln1, a->ln2, a->ln1_mean, a->ln1_rstd,
                   a->ln2_mean, a->ln2_rstd, a->qkv, a->att_state, a->atty, a->fch,
                   a->fch_gelu, a->lnf, a->lnf_mean, a->lnf_rstd, a->logits, a->rowmax,
                   a->sumexp, a->target_logit, a->losses, a->inputs, a->targets};
    return check_allocated(m, all, sizeof all / sizeof all[0]);
}

static tri_status alloc_scratch(model *m) {
    const model_dims *d = &m->d;
    const size_t N = (size_t)d->B * d->T, C = d->C, f = sizeof(float);
    size_t total = 0;
    m->dresidual = alloc_or_null(m, N * C * f, &total);
    m->dln = alloc_or_null(m, N * C * f, &total);
    m->dqkv = alloc_or_null(m, N * d->C3_local * f, &total);
    m->datty = alloc_or_null(m, N * (C / d->tp) * f, &total);
    m->dfch = alloc_or_null(m, N * d->C4_local * f, &total);
    m->scratch_bytes = total;
    void *all[] = {m->dresidual, m->dln, m->dqkv, m->datty, m->dfch};
    return check_allocated(m, all, sizeof all / sizeof all[0]);
}

tri_status model_create(model *m, const run_config *cfg, int B, int n_slots, backend *be,
                        comm *cm) {
    memset(m, 0, sizeof *m);
    m->be = be;
    m->cm = cm;
    model_dims *d = &m->d;
    d->L = cfg->model.n_layer, d->C = cfg->model.d_model, d->NH = cfg->model.n_head;
    d->HS = d->C / d->NH, d->T = cfg->model.seq_len, d->B = B;
    d->V = cfg->model.vocab_size, d->Vp = config_padded_vocab(cfg);
    d->tp = cm->groups[COMM_GROUP_TP].size, d->tp_rank = cm->groups[COMM_GROUP_TP].rank;
    d->NH_local = d->NH / d->tp;
    d->C3_local = 3 * d->C / d->tp;
    d->C4_local = 4 * d->C / d->tp;
    d->Vp_local = d->Vp / d->tp;
    d->vocab_start = d->tp_rank * d->Vp_local;

    params_build(&m->table, cfg, d->tp, d->tp_rank);
    size_t bytes = m->table.local_numel * sizeof(float);
    m->params = be->alloc(be, bytes);
    m->grads = be->alloc(be, bytes);
    if (!m->params || !m->grads) {
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
    be->copy_to_device(be, m->params, host, bytes);
    free(host);
    m->n_slots = n_slots;
    m->slots = xcalloc((size_t)n_slots, sizeof(model_acts));
    for (int s = 0; s < n_slots; s++) TRI_CHECK(alloc_acts(m, &m->slots[s]));
    return alloc_scratch(m);
}

void model_free(model *m) {
    backend *be = m->be;
    if (!be) return;
    for (int s = 0; s < m->n_slots; s++) {
        model_acts *a = &m->slots[s];
        void *acts[] = {a->residual, a->residual2, a->ln1, a->ln2, a->ln1_mean, a->ln1_rstd,
                        a->ln2_mean, a->ln2_rstd, a->qkv, a->att_state, a->atty, a->fch,
                        a->fch_gelu, a->lnf, a->lnf_mean, a->lnf_rstd, a->logits, a->rowmax,
                        a->sumexp, a->target_logit, a->losses, a->inputs, a->targets};
        for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
            if (acts[i]) be->free(be, acts[i]);
    }
    free(m->slots);
    void *all[] = {m->params, m->grads, m->dresidual, m->dln, m->dqkv, m->datty, m->dfch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) be->free(be, all[i]);
    params_free(&m->table);
    memset(m, 0, sizeof *m);
}

// Per-layer activation pointers of layer l.
typedef struct {
    float *in, *res2, *out, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_gelu;
    void *att_state;
} layer_acts;

static layer_acts layer_acts_of(model *m, model_acts *a, int l) {
    const model_dims *d = &m->d;
    const size_t N = (size_t)d->B * d->T, C = d->C;
    return (layer_acts){
        .in = a->residual + l * N * C,
        .res2 = a->residual2 + l * N * C,
        .out = a->residual + (l + 1) * N * C,
        .ln1 = a->ln1 + l * N * C,
        .ln1_mean = a->ln1_mean + l * N,
        .ln1_rstd = a->ln1_rstd + l * N,
        .qkv = a->qkv + l * N * d->C3_local,
        .atty = a->atty + l * N * (C / d->tp),
        .ln2 = a->ln2 + l * N * C,
        .ln2_mean = a->ln2_mean + l * N,
        .ln2_rstd = a->ln2_rstd + l * N,
        .fch = a->fch + l * N * d->C4_local,
        .fch_gelu = a->fch_gelu + l * N * d->C4_local,
        .att_state = (char *)a->att_state + l * m->att_state_bytes,
    };
}

static tri_status layer_forward(model *m, model_acts *acts, int l) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->B * d->T, C = d->C, Cl = C / d->tp;
    layer_acts a = layer_acts_of(m, acts, l);
    const param_table *pt = &m->table;
    // A row-parallel layer's bias must be added once, not once per tp rank: rank 0 adds it
    // to its partial sum before the all-reduce.
    const int add_rowpar_bias = d->tp_rank == 0;
#define LP(which) P(m, params_layer(pt, l, which))
    be->layernorm_fwd(be, a.ln1, a.ln1_mean, a.ln1_rstd, a.in, LP(PARAM_LN1W), LP(PARAM_LN1B), N, C);
    be->matmul_fwd(be, a.qkv, a.ln1, LP(PARAM_QKVW), LP(PARAM_QKVB), N, C, d->C3_local);
    be->attention_fwd(be, a.atty, a.att_state, a.qkv, d->B, d->T, d->NH_local, d->HS);
    be->matmul_fwd(be, a.res2, a.atty, LP(PARAM_ATTPROJW), add_rowpar_bias ? LP(PARAM_ATTPROJB) : NULL,
                   N, Cl, C);
    TRI_CHECK(tp_reduce_from_parallel_fwd(m, a.res2, (size_t)N * C));
    be->residual_fwd(be, a.res2, a.res2, a.in, (size_t)N * C);
    be->layernorm_fwd(be, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, LP(PARAM_LN2W), LP(PARAM_LN2B), N, C);
    be->matmul_fwd(be, a.fch, a.ln2, LP(PARAM_FCW), LP(PARAM_FCB), N, C, d->C4_local);
    be->gelu_fwd(be, a.fch_gelu, a.fch, (size_t)N * d->C4_local);
    be->matmul_fwd(be, a.out, a.fch_gelu, LP(PARAM_FCPROJW), add_rowpar_bias ? LP(PARAM_FCPROJB) : NULL,
                   N, d->C4_local, C);
    TRI_CHECK(tp_reduce_from_parallel_fwd(m, a.out, (size_t)N * C));
    be->residual_fwd(be, a.out, a.out, a.res2, (size_t)N * C);
#undef LP
    return TRI_OK;
}

// m->dresidual holds d(loss)/d(layer output) on entry and d(loss)/d(layer input) on exit.
static tri_status layer_backward(model *m, model_acts *acts, int l) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->B * d->T, C = d->C, Cl = C / d->tp;
    layer_acts a = layer_acts_of(m, acts, l);
    const param_table *pt = &m->table;
#define LP(which) P(m, params_layer(pt, l, which))
#define LG(which) G(m, params_layer(pt, l, which))
    // MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))).
    be->matmul_bwd(be, m->dfch, LG(PARAM_FCPROJW), LG(PARAM_FCPROJB), m->dresidual, a.fch_gelu,
                   LP(PARAM_FCPROJW), N, d->C4_local, C);
    be->gelu_bwd(be, m->dfch, a.fch, m->dfch, (size_t)N * d->C4_local);
    be->matmul_bwd(be, m->dln, LG(PARAM_FCW), LG(PARAM_FCB), m->dfch, a.ln2, LP(PARAM_FCW), N, C,
                   d->C4_local);
    TRI_CHECK(tp_copy_to_parallel_bwd(m, m->dln, (size_t)N * C));
    be->layernorm_bwd(be, m->dresidual, LG(PARAM_LN2W), LG(PARAM_LN2B), m->dln, a.res2,
                      LP(PARAM_LN2W), a.ln2_mean, a.ln2_rstd, N, C);
    // Attention: res2 = in + attproj(attention(qkv(ln1(in)))).
    be->matmul_bwd(be, m->datty, LG(PARAM_ATTPROJW), LG(PARAM_ATTPROJB), m->dresidual, a.atty,
                   LP(PARAM_ATTPROJW), N, Cl, C);
    be->attention_bwd(be, m->dqkv, m->datty, a.qkv, a.att_state, d->B, d->T, d->NH_local, d->HS);
    be->matmul_bwd(be, m->dln, LG(PARAM_QKVW), LG(PARAM_QKVB), m->dqkv, a.ln1, LP(PARAM_QKVW), N,
                   C, d->C3_local);
    TRI_CHECK(tp_copy_to_parallel_bwd(m, m->dln, (size_t)N * C));
    be->layernorm_bwd(be, m->dresidual, LG(PARAM_LN1W), LG(PARAM_LN1B), m->dln, a.in,
                      LP(PARAM_LN1W), a.ln1_mean, a.ln1_rstd, N, C);
#undef LP
#undef LG
    return TRI_OK;
}

tri_status model_forward(model *m, int slot, const int *inputs, const int *targets,
                         double *loss_sum) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->B * d->T, C = d->C;
    model_acts *a = &m->slots[slot];
    const param_table *pt = &m->table;

    be->copy_to_device(be, a->inputs, inputs, (size_t)N * sizeof(int));
    // Vocab-parallel embedding: a masked lookup of this rank's rows, then a sum over tp.
    // Only tp rank 0 adds the position embedding so that it counts once.
    be->embedding_fwd(be, a->residual, a->inputs, P(m, params_wte(pt)), P(m, params_wpe(pt)),
                      d->B, d->T, C, d->vocab_start, d->Vp_local, d->tp_rank == 0);
    TRI_CHECK(tp_reduce_from_parallel_fwd(m, a->residual, (size_t)N * C));
    for (int l = 0; l < d->L; l++) TRI_CHECK(layer_forward(m, a, l));

    float *res = a->residual + (size_t)d->L * N * C;
    be->layernorm_fwd(be, a->lnf, a->lnf_mean, a->lnf_rstd, res, P(m, params_lnfw(pt)),
                      P(m, params_lnfb(pt)), N, C);
    // Tied LM head over this rank's vocabulary rows: logits (N, Vp/tp).
    be->matmul_fwd(be, a->logits, a->lnf, P(m, params_wte(pt)), NULL, N, C, d->Vp_local);
    if (!targets) return TRI_OK;

    // Vocab-parallel cross-entropy: no rank ever holds the full-vocabulary logits.
    be->copy_to_device(be, a->targets, targets, (size_t)N * sizeof(int));
    be->xent_max(be, a->rowmax, a->logits, N, d->Vp_local, d->vocab_start, d->V);
    if (d->tp > 1)
        TRI_CHECK(m->cm->all_reduce(m->cm, COMM_GROUP_TP, a->rowmax, N, COMM_DTYPE_F32, COMM_REDUCE_MAX));
    be->xent_sumexp(be, a->sumexp, a->target_logit, a->logits, a->rowmax, a->targets, N,
                    d->Vp_local, d->vocab_start, d->V);
    TRI_CHECK(tp_all_reduce(m, a->sumexp, N));
    TRI_CHECK(tp_all_reduce(m, a->target_logit, N));
    be->xent_loss(be, a->losses, a->rowmax, a->sumexp, a->target_logit, N);

    float *losses = xmalloc((size_t)N * sizeof(float));
    be->copy_to_host(be, losses, a->losses, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += losses[i];
    free(losses);
    *loss_sum = sum;
    return TRI_OK;
}

tri_status model_backward(model *m, int slot, float dloss) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->B * d->T, C = d->C;
    model_acts *a = &m->slots[slot];
    const param_table *pt = &m->table;

    be->xent_bwd(be, a->logits, a->rowmax, a->sumexp, a->targets, dloss, N, d->Vp_local,
                 d->vocab_start, d->V);
    // LM head: d(lnf) = dlogits @ wte (partial over the vocabulary shards), dwte += dlogits^T lnf.
    be->matmul_bwd(be, m->dln, G(m, params_wte(pt)), NULL, a->logits, a->lnf, P(m, params_wte(pt)),
                   N, C, d->Vp_local);
    TRI_CHECK(tp_copy_to_parallel_bwd(m, m->dln, (size_t)N * C));
    float *res = a->residual + (size_t)d->L * N * C;
    be->memset_zero(be, m->dresidual, (size_t)N * C * sizeof(float));
    be->layernorm_bwd(be, m->dresidual, G(m, params_lnfw(pt)), G(m, params_lnfb(pt)), m->dln, res,
                      P(m, params_lnfw(pt)), a->lnf_mean, a->lnf_rstd, N, C);
    for (int l = d->L - 1; l >= 0; l--) TRI_CHECK(layer_backward(m, a, l));
    // The embedding's input gradient is the residual stream's at layer 0; the position
    // embedding is replicated over tp and every rank computes the same gradient for it.
    be->embedding_bwd(be, G(m, params_wte(pt)), G(m, params_wpe(pt)), m->dresidual, a->inputs,
                      d->B, d->T, C, d->vocab_start, d->Vp_local);
    return TRI_OK;
}

void model_logits_row(model *m, int slot, int t, float *out) {
    const model_dims *d = &m->d;
    m->be->copy_to_host(m->be, out, m->slots[slot].logits + (size_t)t * d->Vp_local,
                        (size_t)d->Vp_local * sizeof(float));
}
