// model_wsplit.c: the backward split into B and W (model.h's model_backward_b / _w; the
// zero-bubble schedules). B runs the backward of model_pass.c and model_layer*.c with each
// parameter gradient left out (the backend's split forms, backend.h) and recorded instead as
// an op of the W-buffer, with what the op reads that will not stay put until W copied into the
// W-buffer's device memory; W replays the ops in B's order, which is the joint backward's, so
// every gradient is the same sum of the same terms in the same order: bitwise model_backward's.
//
// What a W-buffer holds, per layer in backward order (e: 4 bytes, 2 under bf16, where the
// matmuls read bf16 operands and B writes the rounding of each output gradient straight here):
//   fcproj:  its dout, the all-rows residual gradient (N, C) x e; its input under recompute
//            (the work copy of fch_gelu, (N, fh_local) x e)
//   fc:      its dout (N, fc_local) x e (dfch, dfch16); its input ln2 under recompute (N, C) x e
//   ln2:     d(ln2) after the tp reduction (Nl, C) x 4; under recompute also res2 (Nl, C) x 4
//            and its statistics (mean and rstd; RMSNorm: rstd) (Nl) x 4 each
//   attproj: dout (N, C) x e; under recompute its input atty (N, C_local) x e
//   qkv:     dout (N, qkv_local) x e; under recompute its input ln1 (N, C) x e
//   ln1:     d(ln1) (Nl, C) x 4; under recompute the layer input (Nl, C) x 4 and statistics
// and on the loss chunk d(lnf) (Nl, C) x 4 (the LM head's d(logits) and lnf stay in the slot),
// on the embedding chunk the all-rows residual gradient (N, C) x 4. Each piece is rounded up to
// MODEL_WBUF_ALIGN bytes. Without recompute every input is the slot's (kept until W).
#include "model/model_internal.h"

#include <string.h>

#include "base/checked.h"

#define MODEL_WBUF_ALIGN ((size_t)256)

static size_t piece(size_t bytes) {
    return sat_add_size(bytes, MODEL_WBUF_ALIGN - 1) / MODEL_WBUF_ALIGN * MODEL_WBUF_ALIGN;
}

size_t model_wbuf_bytes(const model_config *mc, const model_layout *ml) {
    const model_dims d = model_dims_of(mc, ml);
    const int r = ml->recompute == RECOMPUTE_FULL;
    const size_t e = ml->precision == DTYPE_BF16 ? sizeof(uint16_t) : sizeof(float);
    const size_t N = (size_t)d.N, Nl = (size_t)d.N_local, C = (size_t)d.C, f = sizeof(float);
    const size_t stats = d.llama ? 1 : 2;
    // One norm's pieces: d(out), and under recompute its input and statistics.
    const size_t norm = piece(Nl * C * f) + (r ? piece(Nl * C * f) + stats * piece(Nl * f) : 0);
    size_t layer = piece(sat_mul3_size(N, C, e)) + piece(sat_mul3_size(N, (size_t)d.fc_local, e)) +
                   piece(sat_mul3_size(N, C, e)) + piece(sat_mul3_size(N, (size_t)d.C3_local, e)) +
                   2 * norm;
    if (r)
        layer += piece(sat_mul3_size(N, (size_t)d.fh_local, e)) + piece(sat_mul3_size(N, C, e)) +
                 piece(sat_mul3_size(N, (size_t)d.C_local, e)) + piece(sat_mul3_size(N, C, e));
    size_t bytes = sat_mul_size(layer, (size_t)d.Lc);
    if (d.has_head) bytes = sat_add_size(bytes, piece(Nl * C * f));
    if (d.has_embed) bytes = sat_add_size(bytes, piece(sat_mul3_size(N, C, f)));
    return bytes;
}

void *model_w_take(model *m, size_t bytes) {
    model_wbuf *wb = m->wcur;
    TRI_ASSERT(wb && wb->used + piece(bytes) <= m->wbuf_bytes); // model_wbuf_bytes counts it
    void *p = wb->mem + wb->used;
    wb->used += piece(bytes);
    return p;
}

const void *model_w_keep(model *m, const void *src, size_t bytes) {
    void *dst = model_w_take(m, bytes);
    m->be->copy(m->be, dst, src, bytes);
    return dst;
}

void model_w_push(model *m, const model_wop *op) {
    model_wbuf *wb = m->wcur;
    TRI_ASSERT(wb && wb->n_ops < wb->cap_ops); // MODEL_WOPS_PER_LAYER, MODEL_WOPS_ENDS
    wb->ops[wb->n_ops++] = *op;
}

// bf16 gradients: what the backward accumulated in fp32 staging for entries [first, first +
// count) is added into their bf16 buffers (rounded once per micro-batch), and the staging
// is zeroed for the next.
static void flush_bf16_grads(model *m, int first, int count) {
    for (int e = first; e < first + count; e++) {
        const size_t n = (size_t)m->table.entries[e].local_numel;
        m->be->add_to_bf16(m->be, m->store.grad_of[e], m->gstage + m->stage_off[e], n);
        m->be->memset_zero(m->be, m->gstage + m->stage_off[e], n * sizeof(float));
    }
}

tri_status model_grads_ready(model *m, int first, int count) {
    if (model_deferring(m)) {
        model_w_push(m, &(model_wop){.kind = WOP_GRADS_READY, .w = first, .b = count});
        return TRI_OK;
    }
    if (m->g16) flush_bf16_grads(m, first, count);
    return m->store.grads_ready ? m->store.grads_ready(m->store.ctx, first, count) : TRI_OK;
}

void model_w_linear(model *m, float *dinp, int w, int b, const float *dout, const uint16_t *dout16,
                    operand inp, int outside, const float *gelu_pre, int N, int IC, int OC) {
    backend *be = m->be;
    const size_t no = (size_t)N * OC;
    operand d;
    if (m->bf16 && dout16) d = operand_bf16(model_w_keep(m, dout16, no * sizeof(uint16_t)));
    else if (m->bf16) { // the rounding the joint call makes into mm16, here where W reads it
        uint16_t *k = model_w_take(m, no * sizeof(uint16_t));
        be->to_bf16(be, k, dout, no);
        d = operand_bf16(k);
    } else d = operand_fp32(model_w_keep(m, dout, no * sizeof(float)));
    const operand weight = m->bf16 ? operand_bf16(model_param16(m, w))
                                   : operand_fp32(model_param(m, w));
    backend_matmul_bwd(be, dinp, NULL, NULL, d, inp, weight, gelu_pre, N, IC, OC);
    if (outside) inp.ptr = model_w_keep(m, inp.ptr, (size_t)N * IC * dtype_size(inp.dtype));
    model_w_push(
        m,
        &(model_wop){
            .kind = WOP_MATMUL, .w = w, .b = b, .dout = d, .inp = inp, .N = N, .IC = IC, .OC = OC});
}

void model_w_norm(model *m, int w, int b, const float *dy, const float *x, const float *mean,
                  const float *rstd, int outside) {
    const size_t Nl = (size_t)m->d.N_local, C = (size_t)m->d.C, f = sizeof(float);
    model_wop op = {
        .kind = mean ? WOP_LAYERNORM : WOP_RMSNORM, .w = w, .b = b, .N = (int)Nl, .IC = (int)C};
    op.dy = model_w_keep(m, dy, Nl * C * f);
    op.x = x, op.mean = mean, op.rstd = rstd;
    if (outside) {
        op.x = model_w_keep(m, x, Nl * C * f);
        if (mean) op.mean = model_w_keep(m, mean, Nl * f);
        op.rstd = model_w_keep(m, rstd, Nl * f);
    }
    model_w_push(m, &op);
}

#define G(m, idx) model_grad(m, idx)

tri_status model_w_run(model *m, model_wbuf *wb) {
    backend *be = m->be;
    const model_dims *d = &m->d;
    for (int k = 0; k < wb->n_ops; k++) {
        const model_wop *op = &wb->ops[k];
        switch (op->kind) {
        case WOP_MATMUL: { // the weight is not read without dinp (backend.h): no parameter here
            const operand none = {NULL, op->dout.dtype};
            backend_matmul_bwd(be, NULL, G(m, op->w), op->b >= 0 ? G(m, op->b) : NULL, op->dout,
                               op->inp, none, NULL, op->N, op->IC, op->OC);
            break;
        }
        case WOP_LAYERNORM:
            be->layernorm_bwd(be, NULL, G(m, op->w), G(m, op->b), op->dy, op->x, NULL, op->mean,
                              op->rstd, op->N, op->IC);
            break;
        case WOP_RMSNORM:
            be->rmsnorm_bwd(be, NULL, G(m, op->w), op->dy, op->x, NULL, op->rstd, op->N, op->IC);
            break;
        case WOP_EMBEDDING:
            be->embedding_bwd(be, G(m, op->w), op->b >= 0 ? G(m, op->b) : NULL, op->dy, op->tokens,
                              d->B, d->T, d->C, d->vocab_start, d->Vp_local);
            break;
        case WOP_TO_BF16: be->to_bf16(be, op->dst, op->dy, op->n); break;
        case WOP_GRADS_READY: TRI_CHECK(model_grads_ready(m, op->w, op->b)); break;
        }
    }
    return TRI_OK;
}
