// model_pass.c: the forward and the backward of one chunk of one micro-batch: the
// embedding (first chunk of stage 0), the chunk's layers (model_layer.c), and the final
// LayerNorm, tied LM head and vocab-parallel cross-entropy (last chunk of the last stage).
#include "model/model_internal.h"

#include <string.h>

#define P(m, idx) model_param(m, idx)
#define G(m, idx) model_grad(m, idx)
#define P16(m, idx) model_param16(m, idx)

// The store begins a pass of the chunk (ZeRO-3 gathers its parameters there).
static tri_status begin_pass(model *m, int chunk, model_pass pass) {
    return m->store.pass_begin ? m->store.pass_begin(m->store.ctx, chunk, pass) : TRI_OK;
}

static int holds_embedding(const model *m, int chunk) { return m->d.has_embed && chunk == 0; }
static int holds_head(const model *m, int chunk) {
    return m->d.has_head && chunk == m->d.chunks - 1;
}

// ---- forward ----

// Vocab-parallel embedding: a masked lookup of this rank's rows, then the sum over tp (a
// reduce-scatter of rows under SP). Only tp rank 0 adds the position embedding.
static tri_status embedding_forward(model *m, model_acts *a) {
    const model_dims *d = &m->d;
    const param_table *pt = &m->table;
    float *partial = d->sp ? m->rows_full : a->residual;
    const int wpe = params_wpe(pt); // -1 for llama: no position embedding
    TRI_CHECK(model_params_ready(m, params_wte(pt), 1));
    if (wpe >= 0) TRI_CHECK(model_params_ready(m, wpe, 1));
    m->be->embedding_fwd(m->be, partial, a->inputs, P(m, params_wte(pt)),
                         wpe >= 0 ? P(m, wpe) : NULL, d->B, d->T, d->C, d->vocab_start, d->Vp_local,
                         d->tp_rank == 0 && wpe >= 0);
    return model_tp_reduce_rows(m, partial, a->residual);
}

// The final LayerNorm and the tied LM head over this rank's vocabulary rows: logits
// (N, Vp/tp). Under bf16 the head's operands are lnf's rounding and the bf16 wte.
// lnf_done: the chunk's last layer computed lnf with its residual add (LAYER_FUSE_LNF).
static tri_status head_forward(model *m, model_acts *a, int lnf_done) {
    if (m->d.llama) return model_llama_head_forward(m, a); // its own final norm
    const model_dims *d = &m->d;
    const param_table *pt = &m->table;
    TRI_CHECK(model_params_ready(m, params_lnfw(pt), 2));
    TRI_CHECK(model_params_ready(m, params_wte(pt), 1));
    if (!lnf_done)
        TRI_CHECK(model_layernorm_to_all_rows(m, a->lnf, a->lnf_mean, a->lnf_rstd, a->output,
                                              P(m, params_lnfw(pt)), P(m, params_lnfb(pt))));
    if (m->bf16) m->be->to_bf16(m->be, m->mm16, a->lnf, (size_t)d->N * d->C);
    if (m->xent16) // the logits straight into bf16: the fused classifier's input
        backend_matmul_fwd16(m->be, a->logits16, NULL, operand_bf16(m->mm16),
                             operand_bf16(P16(m, params_wte(pt))), NULL, d->N, d->C, d->Vp_local);
    else
        model_linear_fwd(m, a->logits, a->lnf, m->mm16, params_wte(pt), NULL, d->N, d->C,
                         d->Vp_local);
    return TRI_OK;
}

// The tp sums of the rows' sums of exp and target logits, both in flight at once.
static tri_status sum_over_tp(model *m, model_acts *a) {
    const int N = m->d.N;
    comm_request sums[2];
    tri_status st = comm_all_reduce_start(m->cm, COMM_GROUP_TP, a->sumexp, N, DTYPE_FP32,
                                          COMM_REDUCE_SUM, &sums[0]);
    sums[1].impl = NULL;
    if (st == TRI_OK)
        st = comm_all_reduce_start(m->cm, COMM_GROUP_TP, a->target_logit, N, DTYPE_FP32,
                                   COMM_REDUCE_SUM, &sums[1]);
    // Both waited for, also after a failed start (comm.h).
    for (int k = 0; k < 2; k++) {
        tri_status w = comm_wait(m->cm, &sums[k]);
        if (st == TRI_OK) st = w;
    }
    return st;
}

// The fused classifier's statistics (model_xent16): one pass over the bf16 logits for each
// row's maximum, sum of exp and target logit. Over tp, the maxima are all-reduced (max) from a
// copy of the local ones kept in `losses` (written only later, by xent_loss), each rank's sums
// rescaled to the global maximum, then summed as on the fp32 path.
static tri_status xent16_stats(model *m, model_acts *a) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N;
    float *local_max = d->tp > 1 ? a->losses : a->rowmax;
    be->xent_stats16(be, local_max, a->sumexp, a->target_logit, a->logits16, a->targets, N,
                     d->Vp_local, d->vocab_start, d->V);
    if (d->tp == 1) return TRI_OK;
    be->copy(be, a->rowmax, local_max, (size_t)N * sizeof(float));
    comm_request req;
    TRI_CHECK(comm_all_reduce_start(m->cm, COMM_GROUP_TP, a->rowmax, N, DTYPE_FP32, COMM_REDUCE_MAX,
                                    &req));
    TRI_CHECK(comm_wait(m->cm, &req));
    be->xent_rescale(be, a->sumexp, local_max, a->rowmax, N);
    return sum_over_tp(m, a);
}

// Vocab-parallel cross-entropy: no rank ever holds the full-vocabulary logits. The sum of
// the per-token losses is added to the loss accumulator. The tp reductions are non-blocking
// (model_internal.h): the row maxima first, then the sums of exp and the target logits
// together, both in flight at once (started in the same order on every rank).
static tri_status loss_forward(model *m, model_acts *a) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    const int N = d->N;
    if (m->xent16) {
        TRI_CHECK(xent16_stats(m, a));
        be->xent_loss(be, a->losses, a->rowmax, a->sumexp, a->target_logit, N);
        be->loss_sum(be, m->loss_acc, a->losses, (size_t)N);
        return TRI_OK;
    }
    be->xent_max(be, a->rowmax, a->logits, N, d->Vp_local, d->vocab_start, d->V);
    if (d->tp > 1) {
        comm_request req;
        TRI_CHECK(comm_all_reduce_start(m->cm, COMM_GROUP_TP, a->rowmax, N, DTYPE_FP32,
                                        COMM_REDUCE_MAX, &req));
        TRI_CHECK(comm_wait(m->cm, &req));
    }
    be->xent_sumexp(be, a->sumexp, a->target_logit, a->logits, a->rowmax, a->targets, N,
                    d->Vp_local, d->vocab_start, d->V);
    if (d->tp > 1) TRI_CHECK(sum_over_tp(m, a));
    be->xent_loss(be, a->losses, a->rowmax, a->sumexp, a->target_logit, N);
    be->loss_sum(be, m->loss_acc, a->losses, (size_t)N);
    return TRI_OK;
}

// The micro-batch's token ids go to the device at the start of its forward, both copies
// together (on CUDA through a pinned ring, queued on the compute stream: nothing waits for
// them): the inputs where the chunk holds the embedding (its backward reads them too), the
// targets where it holds the loss.
tri_status model_forward(model *m, int slot, int chunk, const int *inputs, const int *targets) {
    model_acts *a = &m->slots[slot];
    const size_t tokens = (size_t)m->d.N * sizeof(int);
    const int first_layer = params_chunk_first_layer(&m->table, chunk);
    TRI_CHECK(begin_pass(m, chunk, MODEL_PASS_FORWARD));
    if (holds_embedding(m, chunk)) m->be->copy_to_device(m->be, a->inputs, inputs, tokens);
    const int loss = holds_head(m, chunk) && targets;
    if (loss) m->be->copy_to_device(m->be, a->targets, targets, tokens);
    if (holds_embedding(m, chunk)) TRI_CHECK(embedding_forward(m, a));
    // Each layer's MLP residual add computes the LayerNorm after it: the next layer's ln1
    // within the chunk, lnf after the model's last layer. A chunk's last layer elsewhere hands
    // its output to the next chunk (maybe on another stage), whose first layer computes ln1.
    const int Lc = m->d.Lc, head = holds_head(m, chunk);
    for (int i = 0; i < Lc; i++) {
        const int fuse = (i > 0 ? LAYER_LN1_DONE : 0) | (i + 1 < Lc ? LAYER_FUSE_NEXT_LN1
                                                         : head     ? LAYER_FUSE_LNF
                                                                    : 0);
        TRI_CHECK(model_layer_forward(m, a, first_layer + i, i, fuse));
    }
    if (!head) return TRI_OK;
    TRI_CHECK(head_forward(m, a, Lc > 0));
    return loss ? loss_forward(m, a) : TRI_OK;
}

// ---- backward ----

// The LM head's matmul backward (entry `wte`: the tied embedding, or llama's lm_head): d(lnf)
// into m->dln, the weight's gradient accumulated. Under bf16 in chunks of rows
// (model_head_chunk_rows), each chunk's lnf and d(logits) rounded into mm16 together. Under a
// B the weight's gradient is W's: d(logits) and lnf stay in the slot until then, and W rounds
// them into mm16 again (the same bits), so the head keeps nothing in the W-buffer.
void model_head_matmul_backward(model *m, model_acts *a, int wte) {
    const model_dims *d = &m->d;
    const size_t C = d->C, Vp = d->Vp_local;
    const int defer = model_deferring(m);
    float *dw = defer ? NULL : G(m, wte);
    if (m->xent16) { // d(logits) is bf16 already (xent_bwd16): one call, lnf rounded whole
        m->be->to_bf16(m->be, m->mm16, a->lnf, (size_t)d->N * C);
        backend_matmul_bwd(m->be, m->dln, dw, NULL, operand_bf16(a->logits16),
                           operand_bf16(m->mm16), operand_bf16(P16(m, wte)), NULL, d->N, d->C,
                           d->Vp_local);
        if (defer) {
            model_w_push(
                m, &(model_wop){
                       .kind = WOP_TO_BF16, .dst = m->mm16, .dy = a->lnf, .n = (size_t)d->N * C});
            model_w_push(m, &(model_wop){.kind = WOP_MATMUL,
                                         .w = wte,
                                         .b = -1,
                                         .dout = operand_bf16(a->logits16),
                                         .inp = operand_bf16(m->mm16),
                                         .N = d->N,
                                         .IC = d->C,
                                         .OC = d->Vp_local});
        }
        return;
    }
    if (!m->bf16) {
        backend_matmul_bwd(m->be, m->dln, dw, NULL, operand_fp32(a->logits), operand_fp32(a->lnf),
                           operand_fp32(P(m, wte)), NULL, d->N, d->C, d->Vp_local);
        if (defer)
            model_w_push(m, &(model_wop){.kind = WOP_MATMUL,
                                         .w = wte,
                                         .b = -1,
                                         .dout = operand_fp32(a->logits),
                                         .inp = operand_fp32(a->lnf),
                                         .N = d->N,
                                         .IC = d->C,
                                         .OC = d->Vp_local});
        return;
    }
    const size_t rows = model_head_chunk_rows((size_t)d->N);
    for (size_t r0 = 0; r0 < (size_t)d->N; r0 += rows) {
        const size_t r = (size_t)d->N - r0 < rows ? (size_t)d->N - r0 : rows;
        uint16_t *lnf16 = m->mm16, *dlogits16 = m->mm16 + r * C;
        m->be->to_bf16(m->be, lnf16, a->lnf + r0 * C, r * C);
        m->be->to_bf16(m->be, dlogits16, a->logits + r0 * Vp, r * Vp);
        backend_matmul_bwd(m->be, m->dln + r0 * C, dw, NULL, operand_bf16(dlogits16),
                           operand_bf16(lnf16), operand_bf16(P16(m, wte)), NULL, (int)r, d->C,
                           d->Vp_local);
        if (!defer) continue;
        model_w_push(
            m, &(model_wop){.kind = WOP_TO_BF16, .dst = lnf16, .dy = a->lnf + r0 * C, .n = r * C});
        model_w_push(
            m, &(model_wop){
                   .kind = WOP_TO_BF16, .dst = dlogits16, .dy = a->logits + r0 * Vp, .n = r * Vp});
        model_w_push(m, &(model_wop){.kind = WOP_MATMUL,
                                     .w = wte,
                                     .b = -1,
                                     .dout = operand_bf16(dlogits16),
                                     .inp = operand_bf16(lnf16),
                                     .N = (int)r,
                                     .IC = d->C,
                                     .OC = d->Vp_local});
    }
}

// From the loss to d(chunk output) in a->dres: the cross-entropy's gradient in place of the
// logits, the LM head (partial over the vocabulary shards), the final LayerNorm.
static tri_status head_backward(model *m, model_acts *a, float dloss) {
    const model_dims *d = &m->d;
    const param_table *pt = &m->table;
    TRI_CHECK(model_params_ready(m, params_wte(pt), 1));
    TRI_CHECK(model_params_ready(m, params_lnfw(pt), 2));
    if (m->xent16)
        m->be->xent_bwd16(m->be, a->logits16, a->rowmax, a->sumexp, a->targets, dloss, d->N,
                          d->Vp_local, d->vocab_start, d->V);
    else
        m->be->xent_bwd(m->be, a->logits, a->rowmax, a->sumexp, a->targets, dloss, d->N,
                        d->Vp_local, d->vocab_start, d->V);
    if (d->llama) { // lnfw and the untied lm_head: a ZeRO bucket each (zero_layout.c)
        TRI_CHECK(model_llama_head_backward(m, a));
        TRI_CHECK(model_grads_ready(m, params_lnfw(pt), 1));
        if (pt->lm_head >= 0) TRI_CHECK(model_grads_ready(m, pt->lm_head, 1));
        if (pt->wte_is_copy) TRI_CHECK(model_grads_ready(m, params_wte(pt), 1));
        return TRI_OK;
    }
    model_head_matmul_backward(m, a, params_wte(&m->table));
    m->be->memset_zero(m->be, a->dres, (size_t)d->N_local * d->C * sizeof(float));
    TRI_CHECK(model_layernorm_bwd_from_all_rows(m, a->dres, a->output, params_lnfw(pt),
                                                params_lnfb(pt), a->lnf_mean, a->lnf_rstd, 0));
    TRI_CHECK(model_grads_ready(m, params_lnfw(pt), 2));
    if (pt->wte_is_copy) TRI_CHECK(model_grads_ready(m, params_wte(pt), 1));
    return TRI_OK;
}

// The embedding's gradient is the residual stream's at layer 0, all rows: every rank adds to
// its own vocabulary rows, and computes the same (replicated) wpe gradient. Under a B, W's:
// the all-rows gradient (gathered here under SP) kept for it.
static tri_status embedding_backward(model *m, model_acts *a) {
    const model_dims *d = &m->d;
    const param_table *pt = &m->table;
    float *dout;
    TRI_CHECK(model_dresidual_all_rows(m, a->dres, &dout));
    const int wpe = params_wpe(pt); // -1 for llama
    if (model_deferring(m)) {
        const float *kept = model_w_keep(m, dout, (size_t)d->N * d->C * sizeof(float));
        model_w_push(m, &(model_wop){.kind = WOP_EMBEDDING,
                                     .w = params_wte(pt),
                                     .b = wpe,
                                     .dy = kept,
                                     .tokens = a->inputs});
    } else
        m->be->embedding_bwd(m->be, G(m, params_wte(pt)), wpe >= 0 ? G(m, wpe) : NULL, dout,
                             a->inputs, d->B, d->T, d->C, d->vocab_start, d->Vp_local);
    TRI_CHECK(model_grads_ready(m, params_wte(pt), 1));
    return wpe >= 0 ? model_grads_ready(m, wpe, 1) : TRI_OK;
}

// The backward of (slot, chunk): whole, or under a B (m->wcur set) its activation half.
static tri_status backward_pass(model *m, int slot, int chunk, float dloss) {
    model_acts *a = &m->slots[slot];
    const param_table *pt = &m->table;
    const int first_layer = params_chunk_first_layer(pt, chunk);
    TRI_CHECK(begin_pass(m, chunk, model_deferring(m) ? MODEL_PASS_B : MODEL_PASS_BACKWARD));
    if (holds_head(m, chunk)) TRI_CHECK(head_backward(m, a, dloss));
    for (int i = m->d.Lc - 1; i >= 0; i--) {
        TRI_CHECK(model_layer_backward(m, a, first_layer + i, i));
        TRI_CHECK(model_grads_ready(m, params_layer(pt, first_layer + i, 0), pt->layer_entries));
    }
    if (holds_embedding(m, chunk)) TRI_CHECK(embedding_backward(m, a));
    return TRI_OK;
}

tri_status model_backward(model *m, int slot, int chunk, float dloss) {
    TRI_ASSERT(!model_deferring(m));
    return backward_pass(m, slot, chunk, dloss);
}

tri_status model_backward_b(model *m, int slot, int wslot, int chunk, float dloss) {
    TRI_ASSERT(wslot >= 0 && wslot < m->n_wbufs && slot >= 0 && slot < m->n_slots);
    model_wbuf *wb = &m->wbufs[wslot];
    TRI_ASSERT(wb->slot < 0); // the schedule's W of its last pair ran
    wb->used = 0, wb->n_ops = 0, wb->slot = slot, wb->chunk = chunk;
    m->wcur = wb;
    const tri_status st = backward_pass(m, slot, chunk, dloss);
    m->wcur = NULL;
    return st;
}

tri_status model_backward_w(model *m, int slot, int wslot, int chunk) {
    TRI_ASSERT(wslot >= 0 && wslot < m->n_wbufs && !model_deferring(m));
    model_wbuf *wb = &m->wbufs[wslot];
    TRI_ASSERT(wb->slot == slot && wb->chunk == chunk); // this pair's B filled it
    TRI_CHECK(begin_pass(m, chunk, MODEL_PASS_W));
    wb->slot = -1;
    return model_w_run(m, wb);
}
