// model.c: GPT-2 and Llama (DESIGN.md "Model") on one rank: their dimensions, buffers as specs,
// creation, the store of the parameters and gradients, and the accessors. The compute is in
// model_layer.c (model_layer_llama.c) and model_pass.c.
//
// Tensor-parallel structure: qkv and fc are column-parallel (split by heads / by output
// columns), attproj and fcproj row-parallel (split by input columns), the embedding and
// the tied LM head vocab-parallel. The conjugate operators:
//   before a column-parallel block: identity forward / all-reduce backward
//     (sequence parallel: all-gather of rows forward / reduce-scatter backward);
//   after a row-parallel block: all-reduce forward / identity backward
//     (sequence parallel: reduce-scatter forward / all-gather backward).
// A row-parallel bias is added once, by tp rank 0, before the reduction.
#include "model/model_internal.h"

#include <limits.h>
#include <string.h>

#include "base/bf16.h"
#include "base/checked.h"

// Narrows a size the config's rules keep in int range (config_rules.c: rows per micro-batch,
// 4 * d_model and the padded vocabulary at most INT_MAX); past it is a caller's bug.
static int dim_int(int64_t v) {
    TRI_ASSERT(v >= 0 && v <= INT_MAX);
    return (int)v;
}

static void set_dims(model_dims *d, const model_config *mc, const model_layout *ml) {
    const model_shard *sh = &ml->shard;
    d->L = mc->n_layer, d->C = mc->d_model, d->NH = mc->n_head;
    d->HS = d->C / d->NH, d->T = mc->seq_len, d->B = ml->micro_batch;
    d->V = mc->vocab_size, d->Vp = dim_int(model_padded_vocab_ll(mc, sh->tp));
    d->tp = sh->tp, d->tp_rank = sh->tp_rank;
    d->sp = ml->sequence_parallel && d->tp > 1;
    d->pp = sh->pp, d->pp_rank = sh->pp_rank;
    d->chunks = d->pp == 1 ? 1 : sh->virtual_stages;
    d->Lc = d->L / (d->pp * d->chunks);
    d->has_embed = model_shard_first(sh);
    d->has_head = model_shard_last(sh);
    d->N = dim_int((int64_t)d->B * d->T);
    d->N_local = d->sp ? d->N / d->tp : d->N;
    d->row0 = d->sp ? d->tp_rank * d->N_local : 0;
    d->NH_local = d->NH / d->tp;
    d->C_local = d->C / d->tp;
    d->C3_local = dim_int(3 * (int64_t)d->C_local);
    d->C4_local = dim_int(4 * (int64_t)d->C_local);
    d->Vp_local = d->Vp / d->tp;
    d->vocab_start = d->tp_rank * d->Vp_local;
    d->fc_local = d->fh_local = d->C4_local;
    d->NKV = d->NH;
    d->llama = model_arch_is_llama(mc);
    if (d->llama) { // the config resolved n_kv_head and ffn_hidden (config_resolve_model)
        d->NKV = mc->n_kv_head;
        d->C3_local = dim_int((int64_t)(d->NH + 2 * d->NKV) / d->tp * d->HS);
        d->fh_local = mc->ffn_hidden / d->tp;
        d->fc_local = dim_int(2 * (int64_t)d->fh_local);
        d->norm_eps = (float)mc->norm_eps;
        d->rope_theta = (float)mc->rope_theta;
    }
    d->NKV_local = d->NKV / d->tp;
}

model_dims model_dims_of(const model_config *mc, const model_layout *ml) {
    model_dims d;
    set_dims(&d, mc, ml);
    return d;
}

backend_shapes model_op_shapes(const model_config *mc, const model_layout *ml) {
    model_dims d;
    set_dims(&d, mc, ml);
    backend_shapes s = {0};
    s.rows = d.N, s.B = d.B, s.T = d.T, s.C = d.C;
    s.NH = d.NH_local, s.HS = d.HS;
    // Biased matmuls: qkv (3C/tp), fc (4C/tp), and the row-parallel projections (C).
    s.bias_cols = d.C4_local > d.C3_local ? d.C4_local : d.C3_local;
    if (d.C > s.bias_cols) s.bias_cols = d.C;
    s.V_local = d.has_embed ? d.Vp_local : 0; // only the first stage's backward embeds
    s.attn = ml->precision;
    s.rope_theta = d.llama ? d.rope_theta : 0.0f;
    return s;
}

// ---- buffers ----

#define WIDE(field, name)                                                                          \
    {                                                                                              \
        "activation." name, "activation." name "16", offsetof(model_acts, field),                  \
            offsetof(model_acts, field##16)                                                        \
    }
const model_wide MODEL_WIDE[ACT_WIDE] = {
    [ACT_LN1] = {"activation.ln1", "activation.ln1_16", offsetof(model_acts, ln1),
                 offsetof(model_acts, ln1_16)},
    [ACT_LN2] = {"activation.ln2", "activation.ln2_16", offsetof(model_acts, ln2),
                 offsetof(model_acts, ln2_16)},
    [ACT_QKV] = WIDE(qkv, "qkv"),
    [ACT_ATTY] = WIDE(atty, "atty"),
    [ACT_FCH] = WIDE(fch, "fch"),
    [ACT_FCH_GELU] = WIDE(fch_gelu, "fch_gelu"),
};
#undef WIDE

// Elements of mm16: the widest of a layer's dout (N rows of C, 3C/tp or 4C/tp) and, on the
// last stage, a head chunk's two operands (C + Vp/tp per row), unless the logits' gradient is
// bf16 already (xent16: the head backward rounds only lnf, N rows of C).
static size_t mm16_numel(const model_dims *d, int xent16) {
    const size_t N = (size_t)d->N, C = (size_t)d->C;
    size_t widest = (size_t)d->fc_local > C ? (size_t)d->fc_local : C; // gpt2: 4C/tp >= 3C/tp
    if ((size_t)d->C3_local > widest) widest = (size_t)d->C3_local;    // llama's qkv may be wider
    size_t n = sat_mul_size(N, widest);
    size_t h = sat_mul_size(model_head_chunk_rows(N), C + (size_t)d->Vp_local);
    return d->has_head && !xent16 && h > n ? h : n;
}

// The field of `m` that a spec fills, or NULL when only sizing.
#define DST(field) (m ? (void *)&(field) : NULL)
// A buffer's bytes as a saturating product (base/checked.h): the config's size rules sum
// these specs to refuse a layout too large for any rank, so they must not wrap first.
#define SZ(a, b, c) sat_mul3_size((size_t)(a), (size_t)(b), (size_t)(c))
#define SZ4(a, b, c, e) sat_mul_size(SZ(a, b, c), (size_t)(e))

// One activation slot (`a` points into m, or is NULL when sizing): `layers` layers (Lc; 1
// for the recompute and bf16 work activations) with everything the backward reads, or with
// layers 0 (a slot under recompute) only each layer's input and the chunk's output; `head`:
// the LM head's and loss's buffers (2: with the logits in bf16, model_xent16). The work activations under bf16 without recompute are
// lean: only the wide ones a layer computes in fp32 (its residual stream, statistics and
// attention state stay in the slot), and with the matmuls writing bf16 outputs (direct:
// model_bf16_direct) not even qkv, fch and fch_gelu, which then exist only as bf16.
static void slot_buffers(mem_specs *s, const model_dims *d, size_t att_bytes, int layers, int head,
                         int work, int bf16, int recompute, int direct, model *m, model_acts *a) {
    const size_t N = (size_t)d->N, Nl = (size_t)d->N_local, L = (size_t)layers, C = (size_t)d->C;
    const size_t f = sizeof(float);
#define ADD(name, bytes, field)                                                                    \
    mem_specs_add(s, name, MEM_ACTIVATION, bytes, m ? (void *)&a->field : NULL)
    if (!layers) {
        ADD("activation.residual", SZ4((size_t)d->Lc + 1, Nl, C, f), residual);
        ADD("activation.dres", SZ(Nl, C, f), dres);
        ADD("activation.inputs", N * sizeof(int), inputs);
        ADD("activation.targets", N * sizeof(int), targets);
    } else {
        if (!(work && !recompute)) {
            ADD("activation.residual", SZ4(L + 1, Nl, C, f), residual);
            ADD("activation.residual2", SZ4(L, Nl, C, f), residual2);
            ADD("activation.ln1_mean", SZ(L, Nl, f), ln1_mean);
            ADD("activation.ln1_rstd", SZ(L, Nl, f), ln1_rstd);
            ADD("activation.ln2_mean", SZ(L, Nl, f), ln2_mean);
            ADD("activation.ln2_rstd", SZ(L, Nl, f), ln2_rstd);
            ADD("activation.att_state", sat_mul_size(L, att_bytes), att_state);
            ADD("activation.dres", SZ(Nl, C, f), dres);
            ADD("activation.inputs", N * sizeof(int), inputs);
            ADD("activation.targets", N * sizeof(int), targets);
        }
        // ln1, ln2, qkv, atty, fch, fch_gelu: as bf16 in a slot under bf16 (the layer computes
        // in the work activations), else fp32.
        const int as16 = bf16 && !work;
        for (int k = 0; k < ACT_WIDE; k++) {
            const model_wide *w = &MODEL_WIDE[k];
            if (work && direct && (k == ACT_QKV || k == ACT_FCH || k == ACT_FCH_GELU)) continue;
            const size_t elem = as16 ? sizeof(uint16_t) : f;
            mem_specs_add(s, as16 ? w->name16 : w->name, MEM_ACTIVATION,
                          SZ4(L, N, model_wide_cols(d, k), elem),
                          m ? (char *)a + (as16 ? w->bf16 : w->f32) : NULL);
        }
    }
    if (head) {
        ADD("activation.lnf", SZ(N, C, f), lnf);
        ADD("activation.lnf_mean", Nl * f, lnf_mean);
        ADD("activation.lnf_rstd", Nl * f, lnf_rstd);
        if (head == 2) ADD("activation.logits16", SZ(N, d->Vp_local, sizeof(uint16_t)), logits16);
        else ADD("activation.logits", SZ(N, d->Vp_local, f), logits);
        ADD("activation.rowmax", N * f, rowmax);
        ADD("activation.sumexp", N * f, sumexp);
        ADD("activation.target_logit", N * f, target_logit);
        ADD("activation.losses", N * f, losses);
    }
#undef ADD
}

// Sizing (m NULL): the n_slots identical slots as one spec, so that the planner's cost does
// not grow with the slots (gpipe holds m * v of them). The bytes are the n_slots-fold sum of
// one slot's specs, each rounded to granules as the arena carves them, so the totals equal
// n_slots separate slots'.
static void sized_slots(mem_specs *s, const model_dims *d, size_t att, int n_slots, int recompute,
                        int bf16, int head) {
    mem_specs one = {0};
    uint64_t kinds[MEM_KIND_COUNT];
    slot_buffers(&one, d, att, recompute ? 0 : d->Lc, head, 0, bf16, recompute, 0, NULL, NULL);
    mem_specs_totals(&one, kinds);
    mem_specs_free(&one);
    mem_specs_add(s, "activation.slots", MEM_ACTIVATION,
                  sat_mul_size((size_t)kinds[MEM_ACTIVATION], (size_t)n_slots), NULL);
}

void model_buffers(mem_specs *s, const model_config *mc, const model_layout *ml,
                   const param_table *pt, model *m) {
    model_dims d;
    set_dims(&d, mc, ml);
    const int bf16 = ml->precision == DTYPE_BF16, g16 = ml->grad_dtype == DTYPE_BF16;
    const int recompute = ml->recompute == RECOMPUTE_FULL;
    const size_t N = (size_t)d.N, C = (size_t)d.C, f = sizeof(float);
    const size_t att = attn_state_bytes(ml->attn_state, (size_t)d.B, (size_t)d.T,
                                        (size_t)d.NH_local);
    const int head = d.has_head ? 1 + (model_xent16(ml->precision, ml->bf16_out) && !d.llama) : 0;
    if (!m && ml->n_slots > 0) sized_slots(s, &d, att, ml->n_slots, recompute, bf16, head);
    // The W-buffers of the B/W split (model_wsplit.c): sized as one spec when only sizing, the
    // n_wbufs-fold of one spec rounded as the arena carves it (as sized_slots does).
    const size_t wbuf = ml->n_wbufs > 0 ? model_wbuf_bytes(mc, ml) : 0;
    if (!m && ml->n_wbufs > 0) {
        mem_specs one = {0};
        uint64_t kinds[MEM_KIND_COUNT];
        mem_specs_add(&one, "activation.wbuf", MEM_ACTIVATION, wbuf, NULL);
        mem_specs_totals(&one, kinds);
        mem_specs_free(&one);
        mem_specs_add(s, "activation.wbufs", MEM_ACTIVATION,
                      sat_mul_size((size_t)kinds[MEM_ACTIVATION], (size_t)ml->n_wbufs), NULL);
    }
    for (int k = 0; m && k < ml->n_wbufs; k++)
        mem_specs_add(s, "activation.wbuf", MEM_ACTIVATION, wbuf, &m->wbufs[k].mem);
    for (int k = 0; m && k < ml->n_slots; k++)
        slot_buffers(s, &d, att, recompute ? 0 : d.Lc, head, 0, bf16, recompute, 0, m,
                     &m->slots[k]);
    // Llama rotates qkv and gates the MLP in fp32 after their matmuls: no bf16 outputs.
    const int direct = model_bf16_direct(ml->precision, ml->recompute, ml->bf16_out) && !d.llama;
    if (recompute || bf16)
        slot_buffers(s, &d, att, 1, 0, 1, bf16, recompute, direct, m, m ? &m->work : NULL);
    if (recompute && bf16) { // the widest activation, rounded through bf16 in place
        size_t widest = (size_t)(d.fc_local > d.C ? d.fc_local : d.C);
        if ((size_t)d.C3_local > widest) widest = (size_t)d.C3_local; // llama's qkv
        mem_specs_add(s, "activation.round16", MEM_ACTIVATION, SZ(N, widest, sizeof(uint16_t)),
                      DST(m->round16));
    }
    // Scratch. bf16: the fp32 staging of the parameters the ops other than the matmuls read;
    // bf16 gradients: the fp32 staging the backward accumulates every gradient into.
    if (bf16)
        mem_specs_add(s, "scratch.param_stage", MEM_SCRATCH,
                      sat_mul_size(params_stage_layout(pt, NULL, 0), f), DST(m->stage));
    if (g16)
        mem_specs_add(s, "scratch.grad_stage", MEM_SCRATCH,
                      sat_mul_size(params_stage_layout(pt, NULL, 1), f), DST(m->gstage));
    mem_specs_add(s, "scratch.dln", MEM_SCRATCH, SZ(N, C, f), DST(m->dln));
    mem_specs_add(s, "scratch.dqkv", MEM_SCRATCH, SZ(N, d.C3_local, f), DST(m->dqkv));
    mem_specs_add(s, "scratch.datty", MEM_SCRATCH, SZ(N, d.C_local, f), DST(m->datty));
    if (direct) // the fc layer's input gradient, written as bf16 by the fcproj backward
        mem_specs_add(s, "scratch.dfch16", MEM_SCRATCH, SZ(N, d.C4_local, sizeof(uint16_t)),
                      DST(m->dfch16));
    else mem_specs_add(s, "scratch.dfch", MEM_SCRATCH, SZ(N, d.fc_local, f), DST(m->dfch));
    if (d.llama) // d(SwiGLU output), between the fcproj and the fc backward
        mem_specs_add(s, "scratch.dswiglu", MEM_SCRATCH, SZ(N, d.fh_local, f), DST(m->dswiglu));
    if (d.sp) mem_specs_add(s, "scratch.rows_full", MEM_SCRATCH, SZ(N, C, f), DST(m->rows_full));
    if (d.has_head)
        mem_specs_add(s, "scratch.loss_acc", MEM_SCRATCH, sizeof(double), DST(m->loss_acc));
    if (bf16)
        mem_specs_add(s, "scratch.mm16", MEM_SCRATCH,
                      sat_mul_size(mm16_numel(&d, head == 2), sizeof(uint16_t)), DST(m->mm16));
}
#undef SZ4
#undef SZ
#undef DST

// ---- lifecycle ----

tri_status model_create(model *m, const model_config *mc, const model_layout *ml, backend *be,
                        comm *cm, mem_pool *pool) {
    memset(m, 0, sizeof *m);
    m->be = be;
    m->cm = cm;
    m->pool = pool;
    model_dims *d = &m->d;
    set_dims(d, mc, ml);
    TRI_ASSERT(d->N % d->tp == 0); // seq_len % tp == 0 is a config rule under SP
    TRI_ASSERT(cm->groups[COMM_GROUP_TP].size == d->tp &&
               cm->groups[COMM_GROUP_TP].rank == d->tp_rank);
    params_build(&m->table, mc, &ml->shard);
    m->bf16 = ml->precision == DTYPE_BF16;
    m->g16 = ml->grad_dtype == DTYPE_BF16;
    m->recompute = ml->recompute == RECOMPUTE_FULL;
    m->bf16_direct = model_bf16_direct(ml->precision, ml->recompute, ml->bf16_out) && !d->llama;
    TRI_ASSERT(!m->bf16_direct || be->bf16_out); // the layout's traits are this backend's
    m->xent16 = model_xent16(ml->precision, ml->bf16_out) && !d->llama; // llama: fp32 logits
    TRI_ASSERT(!m->xent16 || be->bf16_out);
    m->att_state_bytes = attn_state_bytes(ml->attn_state, (size_t)d->B, (size_t)d->T,
                                          (size_t)d->NH_local);
    TRI_ASSERT(ml->n_slots >= 1 && ml->n_slots <= MODEL_MAX_SLOTS); // config_sizes.c
    m->n_slots = ml->n_slots;
    m->slots = xcalloc_for((size_t)ml->n_slots, sizeof(model_acts), "the activation slots' table");
    TRI_ASSERT(ml->n_wbufs >= 0 && ml->n_wbufs <= MODEL_MAX_SLOTS); // at most one per pair
    m->n_wbufs = ml->n_wbufs;
    m->wbuf_bytes = ml->n_wbufs > 0 ? model_wbuf_bytes(mc, ml) : 0;
    m->wbufs = ml->n_wbufs > 0 ? xcalloc((size_t)ml->n_wbufs, sizeof(model_wbuf)) : NULL;
    for (int k = 0; k < m->n_wbufs; k++) {
        model_wbuf *wb = &m->wbufs[k];
        wb->slot = wb->chunk = -1;
        wb->cap_ops = MODEL_WOPS_PER_LAYER * d->Lc + MODEL_WOPS_ENDS;
        wb->ops = xcalloc((size_t)wb->cap_ops, sizeof(model_wop));
    }
    if (m->bf16) {
        m->pstage_off = xcalloc((size_t)m->table.n_entries, sizeof(size_t));
        params_stage_layout(&m->table, m->pstage_off, 0);
    }
    if (m->g16) {
        m->stage_off = xcalloc((size_t)m->table.n_entries, sizeof(size_t));
        params_stage_layout(&m->table, m->stage_off, 1);
    }
    model_buffers(&m->buffers, mc, ml, &m->table, m);
    TRI_CHECK(mem_specs_carve(&m->buffers, pool, be));
    // A chunk's output is the last layer's row block of its residual stream.
    const size_t NlC = (size_t)d->N_local * d->C;
    for (int k = 0; k < m->n_slots; k++)
        m->slots[k].output = m->slots[k].residual + (size_t)d->Lc * NlC;
    if (m->work.residual) m->work.output = m->work.residual + NlC;
    return TRI_OK;
}

void model_free(model *m) {
    if (!m->be) return;
    mem_specs_release(&m->buffers, m->pool, m->be);
    free(m->slots);
    for (int k = 0; k < m->n_wbufs; k++) free(m->wbufs[k].ops);
    free(m->wbufs);
    free(m->stage_off);
    free(m->pstage_off);
    params_free(&m->table);
    memset(m, 0, sizeof *m);
}

void model_set_store(model *m, const model_store *store) { m->store = *store; }

const float *model_param(model *m, int idx) {
    if (!m->bf16) return m->store.param_of[idx];
    TRI_ASSERT(m->pstage_off[idx] != SIZE_MAX); // a matmul weight: read as bf16 (model_param16)
    float *dst = m->stage + m->pstage_off[idx];
    m->be->from_bf16(m->be, dst, model_param16(m, idx), (size_t)m->table.entries[idx].local_numel);
    return dst;
}

// ---- accessors ----

float *model_chunk_input(model *m, int slot) { return m->slots[slot].residual; }
float *model_chunk_output(model *m, int slot) { return m->slots[slot].output; }
float *model_chunk_grad(model *m, int slot) { return m->slots[slot].dres; }

double model_take_loss(model *m) {
    if (!m->loss_acc) return 0.0;
    double sum = 0.0;
    m->be->copy_to_host(m->be, &sum, m->loss_acc, sizeof sum);
    m->be->memset_zero(m->be, m->loss_acc, sizeof(double));
    return sum;
}

void model_logits_row(model *m, int slot, int t, float *out) {
    const model_dims *d = &m->d;
    const size_t Vp = (size_t)d->Vp_local;
    if (m->xent16) { // the bf16 row, widened exactly
        uint16_t *h = xmalloc(Vp * sizeof(uint16_t));
        m->be->copy_to_host(m->be, h, m->slots[slot].logits16 + (size_t)t * Vp,
                            Vp * sizeof(uint16_t));
        for (size_t j = 0; j < Vp; j++) out[j] = bf16_to_f32(h[j]);
        free(h);
        return;
    }
    m->be->copy_to_host(m->be, out, m->slots[slot].logits + (size_t)t * Vp, Vp * sizeof(float));
}

int64_t model_save_piece_rows(const param_entry *fe) {
    const int64_t per = (int64_t)(MODEL_SAVE_PIECE_BYTES / sizeof(float)) / fe->global_cols;
    const int64_t rows = per > 1 ? per : 1;
    return rows < fe->global_rows ? rows : fe->global_rows;
}

size_t model_save_piece_elems(const param_table *full) {
    size_t most = 1;
    for (int i = 0; i < full->n_entries; i++) {
        const param_entry *e = &full->entries[i];
        const size_t n = (size_t)(model_save_piece_rows(e) * e->global_cols);
        most = n > most ? n : most;
    }
    return most;
}

tri_status model_gather_rows(model *m, const param_entry *fe, int64_t row0, int64_t rows,
                             model_param_fetch fetch, void *ctx, int reduce, float *stage,
                             float *out) {
    // Each rank of the model-parallel group places what it alone holds of the rows into a
    // zeroed piece, and a sum over the group assembles it: replicated entries come from tp
    // rank 0 only, the tied wte from the first stage only, so every element is one rank's
    // value plus zeros, exactly.
    const param_table *pt = &m->table;
    const int64_t gc = fe->global_cols;
    memset(out, 0, (size_t)(rows * gc) * sizeof(float));
    const int i = params_find(pt, fe->name);
    const param_entry *e = i >= 0 ? &pt->entries[i] : NULL;
    const int holds = e && !(e->split == SPLIT_REPLICATED && pt->tp_rank != 0) &&
                      !(i == pt->wte && pt->wte_is_copy);
    const int64_t lc = holds ? e->local_cols : 0;
    for (int64_t r = 0; holds && r < e->local_rows;) {
        // The run of local rows that are consecutive global rows inside the piece.
        const int64_t g = params_global_index(pt, e, r, 0), row = g / gc, col = g % gc;
        if (row < row0 || row >= row0 + rows) {
            r++;
            continue;
        }
        int64_t n = 1;
        while (r + n < e->local_rows && row + n < row0 + rows &&
               params_global_index(pt, e, r + n, 0) == (row + n) * gc + col)
            n++;
        TRI_CHECK(fetch(ctx, i, (size_t)(r * lc), (size_t)(n * lc), stage));
        for (int64_t k = 0; k < n; k++)
            memcpy(out + (row - row0 + k) * gc + col, stage + k * lc, (size_t)lc * sizeof(float));
        r += n;
    }
    if (!reduce || m->cm->groups[COMM_GROUP_MP].size == 1) return TRI_OK;
    return comm_all_reduce(m->cm, COMM_GROUP_MP, out, (size_t)(rows * gc), DTYPE_FP32,
                           COMM_REDUCE_SUM);
}
