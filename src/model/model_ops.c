// model_ops.c: the op list of a chunk's pass (model.h's model_ops): the backend calls of
// model_pass.c, model_layer.c, model_layer_llama.c and model_wsplit.c written out with their
// shapes, in the same branches as the code that makes them (precision, recompute, the bf16
// output route, the B/W split, sequence parallelism), so that the planner prices what the
// backend runs. tests/test_oplist.c holds this list equal to the calls a real pass makes.
#include "model/model_internal.h"

#include <stdio.h>
#include <string.h>

// What the emitters read: the dims and the run's choices, as model_create sets them.
typedef struct {
    model_dims d;
    int bf16, recompute, direct, xent16, defer;
    int rope;      // the model calls rope_fwd / rope_bwd (not fused into the backend's attention)
    tri_dtype dt;  // the matmul and attention operands
    int64_t count; // multiplicity of what is emitted now (identical layers)
    model_op_list *l;
} ops_ctx;

void model_op_add(model_op_list *l, const model_op *op) {
    for (int i = 0; i < l->n; i++) {
        model_op *o = &l->ops[i];
        if (o->kind == op->kind && o->dtype == op->dtype && o->parts == op->parts &&
            !memcmp(o->dims, op->dims, sizeof o->dims)) {
            o->count += op->count;
            return;
        }
    }
    TRI_ASSERT(l->n < MODEL_OPS_MAX); // MODEL_OPS_MAX bounds the distinct calls of a pass
    l->ops[l->n++] = *op;
}

static void emit(ops_ctx *c, model_op_kind kind, tri_dtype dt, unsigned parts, int64_t a, int64_t b,
                 int64_t cc, int64_t d, int64_t e) {
    if (c->count <= 0) return;
    const model_op op = {kind, dt, parts, {a, b, cc, d, e}, c->count};
    model_op_add(c->l, &op);
}
#define E1(c, kind, a) emit(c, kind, DTYPE_FP32, 0, a, 0, 0, 0, 0)
#define E2(c, kind, a, b) emit(c, kind, DTYPE_FP32, 0, a, b, 0, 0, 0)

// A non-matmul parameter vector read under bf16 (model_param: widened into its staging).
static void param(ops_ctx *c, int64_t numel) {
    if (c->bf16) E1(c, MODEL_OP_FROM_BF16, numel);
}
static void to16(ops_ctx *c, int64_t n) { E1(c, MODEL_OP_TO_BF16, n); }
static void copy(ops_ctx *c, int64_t bytes) { E1(c, MODEL_OP_COPY, bytes); }
static void attn(ops_ctx *c, model_op_kind kind) {
    const model_dims *d = &c->d;
    emit(c, kind, c->dt, 0, d->B, d->T, d->NH_local, d->llama ? d->NKV_local : d->NH_local, d->HS);
}

// ---- forward ----

// model_linear_fwd / linear_gelu_fwd (backend_matmul_fwd: the GELU after it, unfused).
static void linear_fwd(ops_ctx *c, int64_t IC, int64_t OC, int bias, int gelu) {
    const unsigned p = (bias ? MODEL_OP_BIAS : 0) | (gelu ? MODEL_OP_GELU : 0);
    emit(c, MODEL_OP_MATMUL_FWD, c->dt, p, c->d.N, IC, OC, 0, 0);
    if (gelu) E1(c, MODEL_OP_GELU_FWD, c->d.N * OC);
}
static void keep16(ops_ctx *c, int64_t cols) {
    if (c->bf16) to16(c, c->d.N * cols);
}

// GPT-2's model_layer_forward with `fuse` (model_internal.h).
static void gpt2_layer_fwd(ops_ctx *c, int fuse) {
    const model_dims *d = &c->d;
    const int64_t N = d->N, Nl = d->N_local, C = d->C;
    if (!(fuse & LAYER_LN1_DONE)) {
        param(c, C), param(c, C);
        E2(c, MODEL_OP_LAYERNORM_FWD, Nl, C);
    }
    keep16(c, C);
    param(c, d->C3_local); // qkvb
    if (c->direct)
        emit(c, MODEL_OP_MATMUL_FWD16, DTYPE_BF16, MODEL_OP_BIAS, N, C, d->C3_local, 0, 0);
    else {
        linear_fwd(c, C, d->C3_local, 1, 0);
        keep16(c, d->C3_local);
    }
    attn(c, MODEL_OP_ATTENTION_FWD);
    keep16(c, d->C_local);
    param(c, C), param(c, C), param(c, C); // ln2w, ln2b, attprojb
    linear_fwd(c, d->C_local, C, d->tp_rank == 0, 0);
    E2(c, MODEL_OP_RESIDUAL_LAYERNORM_FWD, Nl, C);
    keep16(c, C);
    param(c, d->C4_local); // fcb
    if (c->direct)
        emit(c, MODEL_OP_MATMUL_FWD16, DTYPE_BF16, MODEL_OP_BIAS | MODEL_OP_GELU, N, C, d->C4_local,
             0, 0);
    else {
        linear_fwd(c, C, d->C4_local, 1, 1);
        keep16(c, d->C4_local); // fch, then fch_gelu
        keep16(c, d->C4_local);
    }
    const int next = fuse & (LAYER_FUSE_NEXT_LN1 | LAYER_FUSE_LNF);
    if (next) { // the next norm's weight and bias
        param(c, C);
        param(c, C);
    }
    param(c, C); // fcprojb
    linear_fwd(c, d->C4_local, C, d->tp_rank == 0, 0);
    if (next) E2(c, MODEL_OP_RESIDUAL_LAYERNORM_FWD, Nl, C);
    else E1(c, MODEL_OP_RESIDUAL_FWD, Nl * C);
}

static void llama_layer_fwd(ops_ctx *c) {
    const model_dims *d = &c->d;
    const int64_t Nl = d->N_local, C = d->C;
    param(c, C);
    E2(c, MODEL_OP_RMSNORM_FWD, Nl, C);
    keep16(c, C);
    linear_fwd(c, C, d->C3_local, 0, 0);
    if (c->rope)
        emit(c, MODEL_OP_ROPE_FWD, DTYPE_FP32, 0, d->B, d->T, d->NH_local, d->NKV_local, d->HS);
    keep16(c, d->C3_local);
    attn(c, MODEL_OP_ATTENTION_FWD);
    keep16(c, d->C_local);
    param(c, C);
    linear_fwd(c, d->C_local, C, 0, 0);
    E2(c, MODEL_OP_RESIDUAL_RMSNORM_FWD, Nl, C);
    keep16(c, C);
    linear_fwd(c, C, d->fc_local, 0, 0);
    keep16(c, d->fc_local);
    E2(c, MODEL_OP_SWIGLU_FWD, d->N, d->fh_local);
    keep16(c, d->fh_local);
    linear_fwd(c, d->fh_local, C, 0, 0);
    E1(c, MODEL_OP_RESIDUAL_FWD, Nl * C);
}

static void layer_fwd(ops_ctx *c, int fuse) {
    if (c->d.llama) llama_layer_fwd(c);
    else gpt2_layer_fwd(c, fuse);
}

// model_forward's layers: the first computes its ln1, the others get it fused into the
// residual add before them; the last fuses the chunk's lnf (head chunk) or none. Identical
// layers are emitted once with their count.
static void layers_fwd(ops_ctx *c, int head) {
    const int Lc = c->d.Lc;
    const int64_t saved = c->count;
    for (int i = 0; i < Lc; i++) {
        if (i > 0 && i < Lc - 1 && i != 1) continue; // the middle ones: once, counted
        const int fuse = (i > 0 ? LAYER_LN1_DONE : 0) | (i + 1 < Lc ? LAYER_FUSE_NEXT_LN1
                                                         : head     ? LAYER_FUSE_LNF
                                                                    : 0);
        c->count = saved * (i > 0 && i < Lc - 1 ? Lc - 2 : 1);
        layer_fwd(c, fuse);
    }
    c->count = saved;
}

static void head_fwd(ops_ctx *c, int lnf_done) {
    const model_dims *d = &c->d;
    const int64_t N = d->N, C = d->C;
    if (d->llama) {
        param(c, C);
        E2(c, MODEL_OP_RMSNORM_FWD, d->N_local, C);
        if (c->bf16) to16(c, N * C);
        linear_fwd(c, C, d->Vp_local, 0, 0);
    } else {
        if (!lnf_done) {
            param(c, C), param(c, C);
            E2(c, MODEL_OP_LAYERNORM_FWD, d->N_local, C);
        }
        if (c->bf16) to16(c, N * C);
        if (c->xent16) emit(c, MODEL_OP_MATMUL_FWD16, DTYPE_BF16, 0, N, C, d->Vp_local, 0, 0);
        else linear_fwd(c, C, d->Vp_local, 0, 0);
    }
    // loss_forward
    if (c->xent16) {
        E2(c, MODEL_OP_XENT_STATS16, N, d->Vp_local);
        if (d->tp > 1) { // the local maxima kept, the sums rescaled to the global one
            copy(c, N * 4);
            E1(c, MODEL_OP_XENT_RESCALE, N);
        }
    } else {
        E2(c, MODEL_OP_XENT_MAX, N, d->Vp_local);
        E2(c, MODEL_OP_XENT_SUMEXP, N, d->Vp_local);
    }
    E1(c, MODEL_OP_XENT_LOSS, N);
    E1(c, MODEL_OP_LOSS_SUM, N);
}

static void embedding_fwd(ops_ctx *c) {
    const model_dims *d = &c->d;
    param(c, (int64_t)d->Vp_local * d->C); // wte, widened whole under bf16
    if (!d->llama) param(c, (int64_t)d->T * d->C);
    const unsigned pos = !d->llama && d->tp_rank == 0 ? MODEL_OP_POS : 0;
    emit(c, MODEL_OP_EMBEDDING_FWD, DTYPE_FP32, pos, d->B, d->T, d->C, d->Vp_local, 0);
}

// ---- backward (joint, or B: c->defer) and W ----

// The W-op of a deferred matmul, added to the W list (`w`, NULL: none kept).
static void w_matmul(ops_ctx *w, tri_dtype dt, unsigned parts, int64_t N, int64_t IC, int64_t OC) {
    if (w) emit(w, MODEL_OP_MATMUL_BWD, dt, parts, N, IC, OC, 0, 0);
}

// linear_bwd / model_linear_bwd / model_w_linear (model_layer.c, model_wsplit.c): dout rounded
// to bf16 (dout16: already rounded by the op before), the call, the W-buffer's copies under a B.
static void linear_bwd(ops_ctx *c, ops_ctx *w, int64_t IC, int64_t OC, int bias, int gelu,
                       int dout16) {
    const int64_t N = c->d.N;
    const unsigned g = gelu ? MODEL_OP_GELU : 0,
                   wp = MODEL_OP_DWEIGHT | (bias ? MODEL_OP_DBIAS : 0);
    if (c->defer) {
        if (c->bf16 && dout16) copy(c, N * OC * 2);
        else if (c->bf16) to16(c, N * OC);
        else copy(c, N * OC * 4);
        emit(c, MODEL_OP_MATMUL_BWD, c->dt, MODEL_OP_DINP | g, N, IC, OC, 0, 0);
        if (gelu) E1(c, MODEL_OP_GELU_BWD, N * IC);
        if (c->recompute) copy(c, N * IC * (c->bf16 ? 2 : 4)); // recompute's work copy
        w_matmul(w, c->dt, wp, N, IC, OC);
        return;
    }
    if (c->bf16 && !dout16) to16(c, N * OC);
    emit(c, MODEL_OP_MATMUL_BWD, c->dt, MODEL_OP_DINP | g | wp, N, IC, OC, 0, 0);
    if (gelu) E1(c, MODEL_OP_GELU_BWD, N * IC);
}

// A norm's backward from all rows (model_layernorm_bwd_from_all_rows, rmsnorm_bwd_from_all_rows):
// `outside` its input and statistics are recompute's work copies, kept for W.
static void norm_bwd(ops_ctx *c, ops_ctx *w, int outside) {
    const model_dims *d = &c->d;
    const int64_t Nl = d->N_local, C = d->C;
    const model_op_kind k = d->llama ? MODEL_OP_RMSNORM_BWD : MODEL_OP_LAYERNORM_BWD;
    param(c, C);
    if (!c->defer) {
        emit(c, k, DTYPE_FP32, MODEL_OP_DINP | MODEL_OP_DWEIGHT, Nl, C, 0, 0, 0);
        return;
    }
    emit(c, k, DTYPE_FP32, MODEL_OP_DINP, Nl, C, 0, 0, 0);
    copy(c, Nl * C * 4);
    if (outside) { // x, rstd, and LayerNorm's mean
        copy(c, Nl * C * 4);
        copy(c, Nl * 4);
        if (!d->llama) copy(c, Nl * 4);
    }
    if (w) emit(w, k, DTYPE_FP32, MODEL_OP_DWEIGHT, Nl, C, 0, 0, 0);
}

static void gpt2_layer_bwd(ops_ctx *c, ops_ctx *w) {
    const model_dims *d = &c->d;
    const int64_t N = d->N, C = d->C, C4 = d->C4_local;
    const int r = c->recompute;
    if (r) layer_fwd(c, 0);
    if (c->bf16 && !r && !c->direct) E1(c, MODEL_OP_FROM_BF16, N * C4);
    if (c->bf16 && r) { // GELU's input rounded as the backward reads it without recompute
        to16(c, N * C4);
        E1(c, MODEL_OP_FROM_BF16, N * C4);
    }
    // stored_bf16 under recompute: each bf16 operand rounded again from its work copy
#define IN16(cols) ((c->bf16 && r) ? to16(c, N * (cols)) : (void)0)
    if (c->direct) { // linear_gelu_bwd16 (no recompute here)
        to16(c, N * C);
        const unsigned p = MODEL_OP_DINP | MODEL_OP_GELU;
        const unsigned wp = MODEL_OP_DWEIGHT | MODEL_OP_DBIAS;
        emit(c, MODEL_OP_MATMUL_BWD16, DTYPE_BF16, c->defer ? p : p | wp, N, C4, C, 0, 0);
        if (c->defer) w_matmul(w, DTYPE_BF16, wp, N, C4, C);
    } else {
        IN16(C4);
        linear_bwd(c, w, C4, C, 1, 1, 0);
    }
    IN16(C);
    linear_bwd(c, w, C, C4, 1, 0, c->direct);
    norm_bwd(c, w, r);
    IN16(d->C_local);
    linear_bwd(c, w, d->C_local, C, 1, 0, 0);
    IN16(d->C3_local);                         // the attention's qkv operand
    if (c->bf16 && r) to16(c, N * d->C_local); // attn_out16
    attn(c, MODEL_OP_ATTENTION_BWD);
    IN16(C);
    linear_bwd(c, w, C, d->C3_local, 1, 0, 0);
    norm_bwd(c, w, r);
#undef IN16
}

static void llama_layer_bwd(ops_ctx *c, ops_ctx *w) {
    const model_dims *d = &c->d;
    const int64_t N = d->N, C = d->C;
    const int r = c->recompute;
    if (r) llama_layer_fwd(c);
    if (c->bf16 && !r) E1(c, MODEL_OP_FROM_BF16, N * d->fc_local);
    if (c->bf16 && r) { // gate|up rounded as the backward reads it without recompute
        to16(c, N * d->fc_local);
        E1(c, MODEL_OP_FROM_BF16, N * d->fc_local);
    }
#define IN16(cols) ((c->bf16 && r) ? to16(c, N * (cols)) : (void)0)
    IN16(d->fh_local);
    linear_bwd(c, w, d->fh_local, C, 0, 0, 0);
    E2(c, MODEL_OP_SWIGLU_BWD, N, d->fh_local);
    IN16(C);
    linear_bwd(c, w, C, d->fc_local, 0, 0, 0);
    norm_bwd(c, w, r);
    IN16(d->C_local);
    linear_bwd(c, w, d->C_local, C, 0, 0, 0);
    IN16(d->C3_local);
    if (c->bf16 && r) to16(c, N * d->C_local);
    attn(c, MODEL_OP_ATTENTION_BWD);
    if (c->rope)
        emit(c, MODEL_OP_ROPE_BWD, DTYPE_FP32, 0, d->B, d->T, d->NH_local, d->NKV_local, d->HS);
    IN16(C);
    linear_bwd(c, w, C, d->C3_local, 0, 0, 0);
    norm_bwd(c, w, r);
#undef IN16
}

// model_head_matmul_backward: the LM head's matmul backward, in row chunks under bf16 with
// fp32 logits.
static void head_matmul_bwd(ops_ctx *c, ops_ctx *w) {
    const model_dims *d = &c->d;
    const int64_t N = d->N, C = d->C, Vp = d->Vp_local;
    const unsigned p = MODEL_OP_DINP | (c->defer ? 0 : MODEL_OP_DWEIGHT);
    if (c->xent16 || !c->bf16) {
        if (c->xent16) {
            to16(c, N * C);
            if (w) E1(w, MODEL_OP_TO_BF16, N * C);
        }
        emit(c, MODEL_OP_MATMUL_BWD, c->dt, p, N, C, Vp, 0, 0);
        if (c->defer) w_matmul(w, c->dt, MODEL_OP_DWEIGHT, N, C, Vp);
        return;
    }
    const int64_t rows = (int64_t)model_head_chunk_rows((size_t)N);
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
        const int64_t r = N - r0 < rows ? N - r0 : rows;
        to16(c, r * C), to16(c, r * Vp);
        emit(c, MODEL_OP_MATMUL_BWD, DTYPE_BF16, p, r, C, Vp, 0, 0);
        if (!c->defer || !w) continue;
        E1(w, MODEL_OP_TO_BF16, r * C), E1(w, MODEL_OP_TO_BF16, r * Vp);
        w_matmul(w, DTYPE_BF16, MODEL_OP_DWEIGHT, r, C, Vp);
    }
}

static void head_bwd(ops_ctx *c, ops_ctx *w) {
    const model_dims *d = &c->d;
    E2(c, c->xent16 ? MODEL_OP_XENT_BWD16 : MODEL_OP_XENT_BWD, d->N, d->Vp_local);
    head_matmul_bwd(c, w);
    E1(c, MODEL_OP_MEMSET_ZERO, (int64_t)d->N_local * d->C * 4);
    norm_bwd(c, w, 0);
}

static void embedding_bwd(ops_ctx *c, ops_ctx *w) {
    const model_dims *d = &c->d;
    ops_ctx *at = c;
    if (c->defer) {
        copy(c, (int64_t)d->N * d->C * 4);
        at = w;
    }
    if (at)
        emit(at, MODEL_OP_EMBEDDING_BWD, DTYPE_FP32, d->llama ? 0 : MODEL_OP_POS, d->B, d->T, d->C,
             d->Vp_local, 0);
}

// ---- a pass ----

void model_ops(model_op_list *out, const model_config *mc, const model_layout *ml, int chunk,
               model_pass pass) {
    ops_ctx c = {.d = model_dims_of(mc, ml), .count = 1, .l = out};
    const model_dims *d = &c.d;
    TRI_ASSERT(chunk >= 0 && chunk < d->chunks);
    out->n = 0;
    c.bf16 = ml->precision == DTYPE_BF16;
    c.rope = !ml->attn_rope;
    c.dt = ml->precision;
    c.recompute = ml->recompute == RECOMPUTE_FULL;
    c.direct = model_bf16_direct(ml->precision, ml->recompute, ml->bf16_out) && !d->llama;
    c.xent16 = model_xent16(ml->precision, ml->bf16_out) && !d->llama;
    const int embed = d->has_embed && chunk == 0, head = d->has_head && chunk == d->chunks - 1;
    if (pass == MODEL_PASS_FORWARD) {
        if (embed) E1(&c, MODEL_OP_COPY_TO_DEVICE, (int64_t)d->N * (int64_t)sizeof(int));
        if (head) E1(&c, MODEL_OP_COPY_TO_DEVICE, (int64_t)d->N * (int64_t)sizeof(int));
        if (embed) embedding_fwd(&c);
        layers_fwd(&c, head);
        if (head) head_fwd(&c, d->Lc > 0);
        return;
    }
    // The backward and B emit into `c`; W's ops (what B records) into `w`, kept only for W.
    model_op_list wl = {.n = 0}, b_own = {.n = 0};
    ops_ctx w = c;
    w.l = &wl;
    c.defer = pass != MODEL_PASS_BACKWARD;
    ops_ctx *wp = c.defer ? &w : NULL;
    if (pass == MODEL_PASS_W) c.l = &b_own; // B's own ops: not W's
    if (head) head_bwd(&c, wp);
    c.count = w.count = d->Lc;
    if (d->llama) llama_layer_bwd(&c, wp);
    else gpt2_layer_bwd(&c, wp);
    c.count = w.count = 1;
    if (embed) embedding_bwd(&c, wp);
    if (pass == MODEL_PASS_W) *out = wl;
}

// ---- pricing and names ----

static const char *const OP_NAMES[MODEL_OP_KIND_COUNT] = {
    "matmul_fwd",     "matmul_bwd",    "matmul_fwd16",
    "matmul_bwd16",   "attention_fwd", "attention_bwd",
    "layernorm_fwd",  "layernorm_bwd", "residual_layernorm_fwd",
    "rmsnorm_fwd",    "rmsnorm_bwd",   "residual_rmsnorm_fwd",
    "residual_fwd",   "gelu_fwd",      "gelu_bwd",
    "rope_fwd",       "rope_bwd",      "swiglu_fwd",
    "swiglu_bwd",     "embedding_fwd", "embedding_bwd",
    "xent_max",       "xent_sumexp",   "xent_bwd",
    "xent_stats16",   "xent_bwd16",    "xent_loss",
    "xent_rescale",   "loss_sum",      "to_bf16",
    "from_bf16",      "memset_zero",   "copy",
    "copy_to_device",
};

double model_op_flops(const model_op *op) {
    const int64_t *x = op->dims;
    const double mnk = 2.0 * (double)x[0] * (double)x[1] * (double)x[2];
    const double att = 4.0 * (double)x[0] * (double)x[1] * (double)x[1] * (double)x[2] *
                       (double)x[4];
    switch (op->kind) {
    case MODEL_OP_MATMUL_FWD:
    case MODEL_OP_MATMUL_FWD16: return mnk;
    case MODEL_OP_MATMUL_BWD:
    case MODEL_OP_MATMUL_BWD16:
        return mnk * (!!(op->parts & MODEL_OP_DINP) + !!(op->parts & MODEL_OP_DWEIGHT));
    case MODEL_OP_ATTENTION_FWD: return att;
    case MODEL_OP_ATTENTION_BWD: return 2 * att;
    default: return 0;
    }
}

double model_op_bytes(const model_op *op) {
    const double a = (double)op->dims[0], b = (double)op->dims[1];
    const double nc = a * b, f = 4, h = 2;
    switch (op->kind) {
    case MODEL_OP_LAYERNORM_FWD:
    case MODEL_OP_RMSNORM_FWD: return 2 * nc * f; // read x, write y
    case MODEL_OP_LAYERNORM_BWD:
    case MODEL_OP_RMSNORM_BWD: // dy, x, and dinp read and written; the weight's sums alone
        return (op->parts & MODEL_OP_DINP ? 4 : 2) * nc * f;
    case MODEL_OP_RESIDUAL_LAYERNORM_FWD:
    case MODEL_OP_RESIDUAL_RMSNORM_FWD: return 4 * nc * f; // a, c; res, y
    case MODEL_OP_RESIDUAL_FWD: return 3 * a * f;
    case MODEL_OP_GELU_FWD: return 2 * a * f;
    case MODEL_OP_GELU_BWD: return 3 * a * f;
    case MODEL_OP_ROPE_FWD:
    case MODEL_OP_ROPE_BWD: // q and k read and written in place
        return 2 * a * b * (double)(op->dims[2] + op->dims[3]) * (double)op->dims[4] * f;
    case MODEL_OP_SWIGLU_FWD: return 3 * nc * f; // gate, up; out
    case MODEL_OP_SWIGLU_BWD: return 5 * nc * f; // dout, gate, up; dgate, dup
    case MODEL_OP_EMBEDDING_FWD:                 // rows gathered (and wpe's), out
    case MODEL_OP_EMBEDDING_BWD:                 // dout; the rows read and written
        return (op->kind == MODEL_OP_EMBEDDING_FWD ? 2 : 3) * nc * (double)op->dims[2] * f +
               (op->parts & MODEL_OP_POS ? nc * (double)op->dims[2] * f : 0);
    case MODEL_OP_XENT_MAX:
    case MODEL_OP_XENT_SUMEXP: return nc * f;
    case MODEL_OP_XENT_BWD: return 2 * nc * f;
    case MODEL_OP_XENT_STATS16: return nc * h;
    case MODEL_OP_XENT_BWD16: return 2 * nc * h;
    case MODEL_OP_XENT_LOSS: return 4 * a * f;
    case MODEL_OP_XENT_RESCALE: return 3 * a * f;
    case MODEL_OP_LOSS_SUM: return a * f;
    case MODEL_OP_TO_BF16:
    case MODEL_OP_FROM_BF16: return a * (f + h);
    case MODEL_OP_MEMSET_ZERO: return a;
    case MODEL_OP_COPY: return 2 * a;
    default: return 0; // matmuls, attention (FLOPs), the token upload
    }
}

void model_op_describe(const model_op *op, char *buf, size_t n) {
    static const char *const flags[] = {"bias", "gelu", "dinp", "dweight", "dbias", "pos"};
    int len = snprintf(buf, n, "%s %s", op->kind < MODEL_OP_KIND_COUNT ? OP_NAMES[op->kind] : "?",
                       dtype_name(op->dtype));
    for (int i = 0; i < 5 && op->dims[i] && len >= 0 && (size_t)len < n; i++)
        len += snprintf(buf + len, n - (size_t)len, " %lld", (long long)op->dims[i]);
    for (int i = 0; i < 6 && len >= 0 && (size_t)len < n; i++)
        if (op->parts >> i & 1) len += snprintf(buf + len, n - (size_t)len, " %s", flags[i]);
}
