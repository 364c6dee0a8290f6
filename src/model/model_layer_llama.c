// model_layer_llama.c: a Llama layer (model.arch llama), forward and backward, and its final
// RMSNorm and LM head. Pre-norm as GPT-2, with RMSNorm, rotary embeddings on q and k,
// grouped-query attention and a SwiGLU MLP, and no biases:
//   h   = x + o_proj(attention(rope(qkv(rmsnorm(x)))))
//   out = h + down(swiglu(gate_up(rmsnorm(h))))
// The tensor-parallel structure is GPT-2's (model.c): qkv (q heads, k and v heads, each block
// split by heads) and gate_up column-parallel, o_proj and down row-parallel. The activation
// slots are GPT-2's too (model_internal.h's MODEL_WIDE): ln1, ln2 the norms' outputs, qkv what
// the attention reads (after rope_fwd; on a backend whose attention rotates q and k itself,
// backend.attn_rope, before any rotation: the attention gets rope_theta and no rope op runs),
// fch the gate|up rows, fch_gelu the SwiGLU's output; ln1_rstd, ln2_rstd the norms' statistics
// (the mean slots stay unused).
#include "model/model_internal.h"

#include <string.h>

#define P(m, idx) model_param(m, idx)
#define G(m, idx) model_grad(m, idx)

// RMSNorm of this rank's rows `in` (Nl, C) into their place in `full` (N, C), then every
// rank's rows (the SP all-gather).
static tri_status rmsnorm_to_all_rows(model *m, float *full, float *rstd, const float *in,
                                      const float *w) {
    const model_dims *d = &m->d;
    m->be->rmsnorm_fwd(m->be, full + (size_t)d->row0 * d->C, rstd, in, w, d->N_local, d->C,
                       d->norm_eps);
    return model_tp_gather_rows(m, full);
}

// The backward of rmsnorm_to_all_rows: m->dln (N, C) holds this rank's partial gradient of all
// rows; after the reduction over tp (a reduce-scatter under SP) its first Nl rows are this
// rank's, and the RMSNorm backward adds their input gradient into dres; the gradient of entry
// w now, or in W (model_w_norm: in and rstd kept when `outside`, recompute's work copies).
static tri_status rmsnorm_bwd_from_all_rows(model *m, float *dres, const float *in, int w,
                                            const float *rstd, int outside) {
    const model_dims *d = &m->d;
    TRI_CHECK(model_tp_reduce_rows(m, m->dln, m->dln));
    const int defer = model_deferring(m);
    m->be->rmsnorm_bwd(m->be, dres, defer ? NULL : G(m, w), m->dln, in, P(m, w), rstd, d->N_local,
                       d->C);
    if (defer) model_w_norm(m, w, -1, m->dln, in, NULL, rstd, outside);
    return TRI_OK;
}

// A row-parallel linear (entry w, no bias) added to the residual stream: out (Nl, C) =
// residual + reduce_over_tp(inp (N, IC_local) @ w^T); with norm_w, the RMSNorm of out follows in
// the same op into all rows of norm_full (rmsnorm_to_all_rows).
static tri_status rowpar_residual(model *m, float *out, const float *residual, const float *inp,
                                  const uint16_t *inp16, int w, int IC_local, float *norm_full,
                                  float *norm_rstd, const float *norm_w) {
    const model_dims *d = &m->d;
    float *partial = d->sp ? m->rows_full : out;
    model_linear_fwd(m, partial, inp, inp16, w, NULL, d->N, IC_local, d->C);
    TRI_CHECK(model_tp_reduce_rows(m, partial, out));
    if (!norm_w) {
        m->be->residual_fwd(m->be, out, out, residual, (size_t)d->N_local * d->C);
        return TRI_OK;
    }
    m->be->residual_rmsnorm_fwd(m->be, out, norm_full + (size_t)d->row0 * d->C, norm_rstd, out,
                                residual, norm_w, d->N_local, d->C, d->norm_eps);
    return model_tp_gather_rows(m, norm_full);
}

#define LP(which) P(m, params_layer(pt, l, which))
#define LW(which) params_layer(pt, l, which)

tri_status model_llama_layer_forward(model *m, model_acts *acts, int l, int i) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N, C = d->C;
    layer_acts a = model_layer_acts(m, acts, i);
    const param_table *pt = &m->table;
    TRI_CHECK(model_params_ready(m, params_layer(pt, l, 0), pt->layer_entries));
// bf16: the activation `which` just rounded by model_keep_bf16 (unused in fp32)
#define IN16(which) (m->bf16 ? model_wide_bf16(m, acts, i, which) : NULL)
    TRI_CHECK(rmsnorm_to_all_rows(m, a.ln1, a.ln1_rstd, a.in, LP(LLAMA_LN1W)));
    model_keep_bf16(m, acts, &a, i, ACT_LN1);
    model_linear_fwd(m, a.qkv, a.ln1, IN16(ACT_LN1), LW(LLAMA_QKVW), NULL, N, C, d->C3_local);
    // RoPE: its own op, or inside the attention (theta 0: none there).
    const float fused_theta = be->attn_rope ? d->rope_theta : 0.0f;
    if (!be->attn_rope)
        be->rope_fwd(be, a.qkv, d->B, d->T, d->NH_local, d->NKV_local, d->HS, d->rope_theta);
    model_keep_bf16(m, acts, &a, i, ACT_QKV);
    backend_attention_fwd(be, a.atty, a.att_state, OPND(m, a.qkv, IN16(ACT_QKV)), d->B, d->T,
                          d->NH_local, d->NKV_local, d->HS, fused_theta);
    model_keep_bf16(m, acts, &a, i, ACT_ATTY);
    TRI_CHECK(rowpar_residual(m, a.res2, a.in, a.atty, IN16(ACT_ATTY), LW(LLAMA_ATTPROJW),
                              d->C_local, a.ln2, a.ln2_rstd, LP(LLAMA_LN2W)));
    model_keep_bf16(m, acts, &a, i, ACT_LN2);
    model_linear_fwd(m, a.fch, a.ln2, IN16(ACT_LN2), LW(LLAMA_FCW), NULL, N, C, d->fc_local);
    model_keep_bf16(m, acts, &a, i, ACT_FCH);
    be->swiglu_fwd(be, a.fch_gelu, a.fch, N, d->fh_local);
    model_keep_bf16(m, acts, &a, i, ACT_FCH_GELU);
    TRI_CHECK(rowpar_residual(m, a.out, a.res2, a.fch_gelu, IN16(ACT_FCH_GELU), LW(LLAMA_FCPROJW),
                              d->fh_local, NULL, NULL, NULL));
#undef IN16
    return TRI_OK;
}

tri_status model_llama_layer_backward(model *m, model_acts *acts, int l, int i) {
    if (m->recompute) TRI_CHECK(model_llama_layer_forward(m, acts, l, i)); // the same bits
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N, C = d->C;
    layer_acts a = model_layer_acts(m, acts, i);
    // The SwiGLU backward reads gate|up in fp32: as kept (the bf16 rounding) without recompute,
    // and rounded alike after recompute, as GPT-2 reads its GELU's input.
    const size_t nfc = (size_t)N * d->fc_local;
    if (m->bf16 && !m->recompute)
        be->from_bf16(be, a.fch, model_wide_bf16(m, acts, i, ACT_FCH), nfc);
    if (m->bf16 && m->recompute) {
        be->to_bf16(be, m->round16, a.fch, nfc);
        be->from_bf16(be, a.fch, m->round16, nfc);
    }
    const param_table *pt = &m->table;
    TRI_CHECK(model_params_ready(m, params_layer(pt, l, 0), pt->layer_entries));
#define IN16(which) (m->bf16 ? model_stored_bf16(m, acts, &a, i, which) : NULL)
    float *dout;
    // MLP: out = res2 + down(swiglu(gate_up(rmsnorm(res2)))).
    TRI_CHECK(model_dresidual_all_rows(m, acts->dres, &dout));
    const int r = m->recompute; // the operands are work copies: W keeps them
    model_linear_bwd(m, m->dswiglu, LW(LLAMA_FCPROJW), dout, a.fch_gelu, IN16(ACT_FCH_GELU), r, N,
                     d->fh_local, C);
    be->swiglu_bwd(be, m->dfch, m->dswiglu, a.fch, N, d->fh_local);
    model_linear_bwd(m, m->dln, LW(LLAMA_FCW), m->dfch, a.ln2, IN16(ACT_LN2), r, N, C, d->fc_local);
    TRI_CHECK(rmsnorm_bwd_from_all_rows(m, acts->dres, a.res2, LW(LLAMA_LN2W), a.ln2_rstd, r));
    // Attention: res2 = in + o_proj(attention(rope(qkv(rmsnorm(in))))).
    TRI_CHECK(model_dresidual_all_rows(m, acts->dres, &dout));
    model_linear_bwd(m, m->datty, LW(LLAMA_ATTPROJW), dout, a.atty, IN16(ACT_ATTY), r, N,
                     d->C_local, C);
    backend_attention_bwd(be, m->dqkv, m->datty, OPND(m, a.qkv, IN16(ACT_QKV)),
                          OPND(m, a.atty, m->bf16 ? model_attn_out16(m, acts, &a, i) : NULL),
                          a.att_state, d->B, d->T, d->NH_local, d->NKV_local, d->HS,
                          be->attn_rope ? d->rope_theta : 0.0f);
    if (!be->attn_rope) // else the attention wrote dq, dk unrotated
        be->rope_bwd(be, m->dqkv, d->B, d->T, d->NH_local, d->NKV_local, d->HS, d->rope_theta);
    model_linear_bwd(m, m->dln, LW(LLAMA_QKVW), m->dqkv, a.ln1, IN16(ACT_LN1), r, N, C,
                     d->C3_local);
    TRI_CHECK(rmsnorm_bwd_from_all_rows(m, acts->dres, a.in, LW(LLAMA_LN1W), a.ln1_rstd, r));
#undef IN16
    return TRI_OK;
}

#undef LP
#undef LW

// ---- the final RMSNorm and the LM head ----

tri_status model_llama_head_forward(model *m, model_acts *a) {
    const model_dims *d = &m->d;
    const param_table *pt = &m->table;
    const int head = params_head(pt);
    TRI_CHECK(model_params_ready(m, params_lnfw(pt), 1));
    TRI_CHECK(model_params_ready(m, head, 1));
    TRI_CHECK(rmsnorm_to_all_rows(m, a->lnf, a->lnf_rstd, a->output, P(m, params_lnfw(pt))));
    if (m->bf16) m->be->to_bf16(m->be, m->mm16, a->lnf, (size_t)d->N * d->C);
    model_linear_fwd(m, a->logits, a->lnf, m->mm16, head, NULL, d->N, d->C, d->Vp_local);
    return TRI_OK;
}

tri_status model_llama_head_backward(model *m, model_acts *a) {
    const model_dims *d = &m->d;
    const param_table *pt = &m->table;
    TRI_CHECK(model_params_ready(m, params_head(pt), 1));
    TRI_CHECK(model_params_ready(m, params_lnfw(pt), 1));
    model_head_matmul_backward(m, a, params_head(pt));
    m->be->memset_zero(m->be, a->dres, (size_t)d->N_local * d->C * sizeof(float));
    return rmsnorm_bwd_from_all_rows(m, a->dres, a->output, params_lnfw(pt), a->lnf_rstd, 0);
}
