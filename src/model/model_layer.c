// model_layer.c: one transformer layer of GPT-2, forward and backward, with its
// tensor-parallel collectives (model.c has the structure) and, under bf16, the keeping of its
// wide activations in bf16.
#include "model/model_internal.h"

#include <string.h>

#define P(m, idx) model_param(m, idx)
#define G(m, idx) model_grad(m, idx)
#define P16(m, idx) model_param16(m, idx)

// The tp collectives of a layer use the non-blocking forms, waited for at once with
// comm_wait: on NCCL the compute stream waits for the collective's event and the host goes
// on enqueueing (nothing drains the GPU); on MPI (host memory) comm_wait completes the
// call as the blocking form would, with bitwise the same result. A failed start leaves
// nothing in flight (req.impl NULL), so every path waits for what it started.
static tri_status tp_finish(model *m, tri_status started, comm_request *req) {
    TRI_CHECK(started);
    return comm_wait(m->cm, req);
}

tri_status model_tp_all_reduce(model *m, float *x, size_t n) {
    if (m->d.tp == 1) return TRI_OK;
    comm_request req;
    return tp_finish(
        m, comm_all_reduce_start(m->cm, COMM_GROUP_TP, x, n, DTYPE_FP32, COMM_REDUCE_SUM, &req),
        &req);
}

tri_status model_tp_reduce_rows(model *m, float *partial, float *rows) {
    const model_dims *d = &m->d;
    if (!d->sp) {
        TRI_ASSERT(partial == rows);
        return model_tp_all_reduce(m, partial, (size_t)d->N * d->C);
    }
    comm_request req;
    return tp_finish(m,
                     comm_reduce_scatter_start(m->cm, COMM_GROUP_TP, partial, rows,
                                               (size_t)d->N_local * d->C, DTYPE_FP32, &req),
                     &req);
}

// Forward of "copy to the tp region" under SP: `full` (N, C) holds this rank's rows at
// row0; the all-gather fills in every rank's rows. Identity without SP.
static tri_status tp_gather_rows(model *m, float *full) {
    const model_dims *d = &m->d;
    if (!d->sp) return TRI_OK;
    size_t block = (size_t)d->N_local * d->C;
    comm_request req;
    return tp_finish(m,
                     comm_all_gather_start(m->cm, COMM_GROUP_TP, full + (size_t)d->row0 * d->C,
                                           full, block, DTYPE_FP32, &req),
                     &req);
}

tri_status model_dresidual_all_rows(model *m, float *dres, float **out) {
    const model_dims *d = &m->d;
    if (!d->sp) {
        *out = dres;
        return TRI_OK;
    }
    *out = m->rows_full;
    comm_request req;
    return tp_finish(m,
                     comm_all_gather_start(m->cm, COMM_GROUP_TP, dres, m->rows_full,
                                           (size_t)d->N_local * d->C, DTYPE_FP32, &req),
                     &req);
}

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
        w.ln1_mean = s.ln1_mean, w.ln1_rstd = s.ln1_rstd, w.ln2_mean = s.ln2_mean,
        w.ln2_rstd = s.ln2_rstd;
    }
    return w;
}

// The wide activations of a layer (model_internal.h): their sizes, the layer's fp32 copies
// in `w`, and where slot `a` keeps layer i's bf16 rounding.
static size_t wide_numel(const model *m, int which) {
    return (size_t)m->d.N * model_wide_cols(&m->d, which);
}

static float *wide_f32(layer_acts *w, int which) {
    float *p[ACT_WIDE] = {w->ln1, w->ln2, w->qkv, w->atty, w->fch, w->fch_gelu};
    return p[which];
}

static uint16_t *wide_bf16(model *m, model_acts *a, int i, int which) {
    if (m->recompute) return m->round16;
    uint16_t *base = *(uint16_t **)((char *)a + MODEL_WIDE[which].bf16);
    return base + (size_t)i * wide_numel(m, which);
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

void model_linear_fwd(model *m, float *out, const float *inp, const uint16_t *inp16, int w,
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

// Its backward into dinp and the gradients of entry w and its bias (entry bias, or -1). Under
// bf16 dout is rounded into mm16 first, unless dout16 holds that rounding already (written
// so by the matmul before: bf16_direct). gelu_pre: the layer's input is gelu(gelu_pre), and
// dinp is the gradient at gelu_pre (NULL: at the input). Under a B (model_deferring) the
// weight gradients are W's, with inp kept when it is recompute's work copy.
static void linear_bwd(model *m, float *dinp, int w, int bias, const float *dout,
                       const uint16_t *dout16, const float *inp, const uint16_t *inp16,
                       const float *gelu_pre, int N, int IC, int OC) {
    backend *be = m->be;
    if (model_deferring(m)) {
        model_w_linear(m, dinp, w, bias, dout, dout16, OPND(m, inp, inp16), m->recompute, gelu_pre,
                       N, IC, OC);
        return;
    }
    if (m->bf16 && !dout16) be->to_bf16(be, m->mm16, dout, (size_t)N * OC);
    backend_matmul_bwd(be, dinp, G(m, w), bias >= 0 ? G(m, bias) : NULL,
                       OPND(m, dout, dout16 ? dout16 : m->mm16), OPND(m, inp, inp16),
                       OPND(m, P(m, w), P16(m, w)), gelu_pre, N, IC, OC);
}

// bf16_direct: the fcproj backward (after the GELU) with its input gradient, times the
// GELU's derivative at the kept bf16 GELU input fch16, written as bf16 into dfch16 (the
// fc backward's dout); dout is rounded into mm16 first, as linear_bwd does (under a B into
// the W-buffer, where W reads it; inp16 is the slot's: no recompute here).
static void linear_gelu_bwd16(model *m, uint16_t *dinp16, int w, int bias, const float *dout,
                              const uint16_t *inp16, const uint16_t *pre16, int N, int IC, int OC) {
    backend *be = m->be;
    const int defer = model_deferring(m);
    uint16_t *d16 = defer ? model_w_take(m, (size_t)N * OC * sizeof(uint16_t)) : m->mm16;
    be->to_bf16(be, d16, dout, (size_t)N * OC);
    backend_matmul_bwd16(be, dinp16, defer ? NULL : G(m, w), defer || bias < 0 ? NULL : G(m, bias),
                         operand_bf16(d16), operand_bf16(inp16), operand_bf16(P16(m, w)), pre16, N,
                         IC, OC);
    if (defer)
        model_w_push(m, &(model_wop){.kind = WOP_MATMUL,
                                     .w = w,
                                     .b = bias,
                                     .dout = operand_bf16(d16),
                                     .inp = operand_bf16(inp16),
                                     .N = N,
                                     .IC = IC,
                                     .OC = OC});
}

// bf16: the attention output O as the attention backward's operand (backend.h), the same bits
// the forward kept: the slot's rounding, or under recompute the recomputed output rounded
// into mm16, which is free between the matmul backwards that use it (each rounds its own dout
// into it first; ops run in call order).
static const uint16_t *attn_out16(model *m, model_acts *a, layer_acts *w, int i) {
    if (!m->recompute) return wide_bf16(m, a, i, ACT_ATTY);
    m->be->to_bf16(m->be, m->mm16, w->atty, wide_numel(m, ACT_ATTY));
    return m->mm16;
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
        .fch = AT(a->fch, l * N * d->fc_local),
        .fch_gelu = AT(a->fch_gelu, l * N * d->fh_local),
        .att_state = (char *)a->att_state + l * m->att_state_bytes,
    };
}

tri_status model_layernorm_to_all_rows(model *m, float *full, float *mean, float *rstd,
                                       const float *in, const float *w, const float *b) {
    const model_dims *d = &m->d;
    m->be->layernorm_fwd(m->be, full + (size_t)d->row0 * d->C, mean, rstd, in, w, b, d->N_local,
                         d->C);
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
    model_linear_fwd(m, partial, inp, inp16, w, d->tp_rank == 0 ? bias : NULL, d->N, IC_local,
                     d->C);
    TRI_CHECK(model_tp_reduce_rows(m, partial, out));
    if (!ln) {
        m->be->residual_fwd(m->be, out, out, residual, (size_t)d->N_local * d->C);
        return TRI_OK;
    }
    m->be->residual_layernorm_fwd(m->be, out, ln->full + (size_t)d->row0 * d->C, ln->mean, ln->rstd,
                                  out, residual, ln->w, ln->b, d->N_local, d->C);
    return tp_gather_rows(m, ln->full);
}

// The LayerNorm that follows the layer's MLP residual add under `fuse` (model_internal.h):
// local layer i + 1's ln1, into the buffers layer_acts_of gives that layer (so that its
// forward finds it where it would have computed it), or the chunk's lnf. NULL: none.
static const next_layernorm *next_of(model *m, model_acts *acts, int l, int i, int fuse,
                                     next_layernorm *out, tri_status *st) {
    const param_table *pt = &m->table;
    if (fuse & LAYER_FUSE_NEXT_LN1) {
        layer_acts b = layer_acts_of(m, acts, i + 1);
        *st = model_params_ready(m, params_layer(pt, l + 1, 0), pt->layer_entries);
        *out = (next_layernorm){b.ln1, b.ln1_mean, b.ln1_rstd,
                                P(m, params_layer(pt, l + 1, PARAM_LN1W)),
                                P(m, params_layer(pt, l + 1, PARAM_LN1B))};
        return out;
    }
    if (fuse & LAYER_FUSE_LNF) {
        *st = model_params_ready(m, params_lnfw(pt), 2);
        *out = (next_layernorm){acts->lnf, acts->lnf_mean, acts->lnf_rstd, P(m, params_lnfw(pt)),
                                P(m, params_lnfb(pt))};
        return out;
    }
    *st = TRI_OK;
    return NULL;
}

tri_status model_layer_forward(model *m, model_acts *acts, int l, int i, int fuse) {
    if (m->d.llama) return model_llama_layer_forward(m, acts, l, i); // its own norms: fuse 0
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N, C = d->C;
    layer_acts a = layer_acts_of(m, acts, i);
    const param_table *pt = &m->table;
    TRI_CHECK(model_params_ready(m, params_layer(pt, l, 0), pt->layer_entries));
#define LP(which) P(m, params_layer(pt, l, which))
#define LW(which) params_layer(pt, l, which)
// bf16: the matmul input `which` just rounded by keep_bf16 (unused in fp32)
#define IN16(which) (m->bf16 ? wide_bf16(m, acts, i, which) : NULL)
    if (!(fuse & LAYER_LN1_DONE)) // else the layer before computed it with its residual add
        TRI_CHECK(model_layernorm_to_all_rows(m, a.ln1, a.ln1_mean, a.ln1_rstd, a.in,
                                              LP(PARAM_LN1W), LP(PARAM_LN1B)));
    keep_bf16(m, acts, &a, i, ACT_LN1);
    if (m->bf16_direct) // qkv straight into the slot's bf16 (its one reader takes bf16)
        backend_matmul_fwd16(be, IN16(ACT_QKV), NULL, operand_bf16(IN16(ACT_LN1)),
                             operand_bf16(P16(m, LW(PARAM_QKVW))), LP(PARAM_QKVB), N, C,
                             d->C3_local);
    else {
        model_linear_fwd(m, a.qkv, a.ln1, IN16(ACT_LN1), LW(PARAM_QKVW), LP(PARAM_QKVB), N, C,
                         d->C3_local);
        keep_bf16(m, acts, &a, i, ACT_QKV);
    }
    backend_attention_fwd(be, a.atty, a.att_state, OPND(m, a.qkv, IN16(ACT_QKV)), d->B, d->T,
                          d->NH_local, d->NH_local, d->HS, 0.0f);
    keep_bf16(m, acts, &a, i, ACT_ATTY);
    const next_layernorm ln2 = {a.ln2, a.ln2_mean, a.ln2_rstd, LP(PARAM_LN2W), LP(PARAM_LN2B)};
    TRI_CHECK(rowpar_residual(m, a.res2, a.in, a.atty, IN16(ACT_ATTY), LW(PARAM_ATTPROJW),
                              LP(PARAM_ATTPROJB), d->C_local, &ln2));
    keep_bf16(m, acts, &a, i, ACT_LN2);
    if (m->bf16_direct) // the GELU output and its input (the backward's aux) as bf16
        backend_matmul_fwd16(be, IN16(ACT_FCH_GELU), IN16(ACT_FCH), operand_bf16(IN16(ACT_LN2)),
                             operand_bf16(P16(m, LW(PARAM_FCW))), LP(PARAM_FCB), N, C, d->C4_local);
    else {
        linear_gelu_fwd(m, a.fch_gelu, a.fch, a.ln2, IN16(ACT_LN2), LW(PARAM_FCW), LP(PARAM_FCB), N,
                        C, d->C4_local);
        keep_bf16(m, acts, &a, i, ACT_FCH);
        keep_bf16(m, acts, &a, i, ACT_FCH_GELU);
    }
    next_layernorm next_ln;
    tri_status st;
    const next_layernorm *next = next_of(m, acts, l, i, fuse, &next_ln, &st);
    TRI_CHECK(st);
    TRI_CHECK(rowpar_residual(m, a.out, a.res2, a.fch_gelu, IN16(ACT_FCH_GELU), LW(PARAM_FCPROJW),
                              LP(PARAM_FCPROJB), d->C4_local, next));
#undef LP
#undef LW
#undef IN16
    return TRI_OK;
}

// model_layernorm_bwd_from_all_rows: after the reduction the first Nl rows of m->dln are
// the gradient of this rank's rows (all-reduce without SP, reduce-scatter with it).
tri_status model_layernorm_bwd_from_all_rows(model *m, float *dres, const float *in, int w, int b,
                                             const float *mean, const float *rstd, int outside) {
    const model_dims *d = &m->d;
    TRI_CHECK(model_tp_reduce_rows(m, m->dln, m->dln));
    if (!model_deferring(m)) {
        m->be->layernorm_bwd(m->be, dres, G(m, w), G(m, b), m->dln, in, P(m, w), mean, rstd,
                             d->N_local, d->C);
        return TRI_OK;
    }
    m->be->layernorm_bwd(m->be, dres, NULL, NULL, m->dln, in, P(m, w), mean, rstd, d->N_local,
                         d->C);
    model_w_norm(m, w, b, m->dln, in, mean, rstd, outside);
    return TRI_OK;
}

tri_status model_layer_backward(model *m, model_acts *acts, int l, int i) {
    if (m->d.llama) return model_llama_layer_backward(m, acts, l, i);
    if (m->recompute) // the same bits as before; unfused: the layer's own ln1 is in work
        TRI_CHECK(model_layer_forward(m, acts, l, i, 0));
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N, C = d->C;
    layer_acts a = layer_acts_of(m, acts, i);
    if (m->bf16 && !m->recompute && !m->bf16_direct) load_bf16(m, acts, &a, i);
    if (m->bf16 && m->recompute) { // GELU's input as the backward reads it without recompute
        m->be->to_bf16(m->be, m->round16, a.fch, wide_numel(m, ACT_FCH));
        m->be->from_bf16(m->be, a.fch, m->round16, wide_numel(m, ACT_FCH));
    }
    const param_table *pt = &m->table;
    TRI_CHECK(model_params_ready(m, params_layer(pt, l, 0), pt->layer_entries));
    float *dout;
#define LW(which) params_layer(pt, l, which)
#define IN16(which) (m->bf16 ? stored_bf16(m, acts, &a, i, which) : NULL)
    // MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))).
    TRI_CHECK(model_dresidual_all_rows(m, acts->dres, &dout));
    if (m->bf16_direct) // dfch16: at gelu's input, already the fc backward's bf16 operand
        linear_gelu_bwd16(m, m->dfch16, LW(PARAM_FCPROJW), LW(PARAM_FCPROJB), dout,
                          IN16(ACT_FCH_GELU), IN16(ACT_FCH), N, d->C4_local, C);
    else
        linear_bwd(m, m->dfch, LW(PARAM_FCPROJW), LW(PARAM_FCPROJB), dout, NULL, a.fch_gelu,
                   IN16(ACT_FCH_GELU), a.fch, N, d->C4_local, C); // dfch: at gelu's input
    linear_bwd(m, m->dln, LW(PARAM_FCW), LW(PARAM_FCB), m->dfch, m->dfch16, a.ln2, IN16(ACT_LN2),
               NULL, N, C, d->C4_local);
    // res2 and the statistics are recompute's work copies (kept for W), else the slot's.
    TRI_CHECK(model_layernorm_bwd_from_all_rows(m, acts->dres, a.res2, LW(PARAM_LN2W),
                                                LW(PARAM_LN2B), a.ln2_mean, a.ln2_rstd,
                                                m->recompute));
    // Attention: res2 = in + attproj(attention(qkv(ln1(in)))).
    TRI_CHECK(model_dresidual_all_rows(m, acts->dres, &dout));
    linear_bwd(m, m->datty, LW(PARAM_ATTPROJW), LW(PARAM_ATTPROJB), dout, NULL, a.atty,
               IN16(ACT_ATTY), NULL, N, d->C_local, C);
    backend_attention_bwd(be, m->dqkv, m->datty, OPND(m, a.qkv, IN16(ACT_QKV)),
                          OPND(m, a.atty, m->bf16 ? attn_out16(m, acts, &a, i) : NULL), a.att_state,
                          d->B, d->T, d->NH_local, d->NH_local, d->HS, 0.0f);
    linear_bwd(m, m->dln, LW(PARAM_QKVW), LW(PARAM_QKVB), m->dqkv, NULL, a.ln1, IN16(ACT_LN1), NULL,
               N, C, d->C3_local);
    // in is the slot's residual stream; under recompute the statistics are work copies (kept
    // whole with it: model_w_norm keeps x, mean and rstd together).
    TRI_CHECK(model_layernorm_bwd_from_all_rows(m, acts->dres, a.in, LW(PARAM_LN1W), LW(PARAM_LN1B),
                                                a.ln1_mean, a.ln1_rstd, m->recompute));
#undef LW
#undef IN16
    return TRI_OK;
}

// ---- the pieces model_layer_llama.c shares (model_internal.h) ----

layer_acts model_layer_acts(model *m, model_acts *a, int i) { return layer_acts_of(m, a, i); }
uint16_t *model_wide_bf16(model *m, model_acts *a, int i, int which) {
    return wide_bf16(m, a, i, which);
}
void model_keep_bf16(model *m, model_acts *a, layer_acts *w, int i, int which) {
    keep_bf16(m, a, w, i, which);
}
const uint16_t *model_stored_bf16(model *m, model_acts *a, layer_acts *w, int i, int which) {
    return stored_bf16(m, a, w, i, which);
}
const uint16_t *model_attn_out16(model *m, model_acts *a, layer_acts *w, int i) {
    return attn_out16(m, a, w, i);
}
void model_linear_bwd(model *m, float *dinp, int w, const float *dout, const float *inp,
                      const uint16_t *inp16, int outside, int N, int IC, int OC) {
    if (model_deferring(m)) {
        model_w_linear(m, dinp, w, -1, dout, NULL, OPND(m, inp, inp16), outside, NULL, N, IC, OC);
        return;
    }
    linear_bwd(m, dinp, w, -1, dout, NULL, inp, inp16, NULL, N, IC, OC);
}
tri_status model_tp_gather_rows(model *m, float *full) { return tp_gather_rows(m, full); }
