// model_internal.h: what the files of the model share and nothing else includes.
//   model.c        dims, buffers (model_buffers), create/free, the store, accessors
//   model_layer.c  a transformer layer forward and backward, its tp collectives, bf16 keeping
//   model_layer_llama.c  the Llama layer and its final norm and head (model.arch llama)
//   model_pass.c   the forward and backward of a chunk: embedding, layers, LM head and loss
//   model_wsplit.c the backward's B/W split: W-buffers, the ops W replays, their sizes
#pragma once
#include <stddef.h>

#include "model/model.h"

// The wide activations of a layer (those with one value per row and column of a matmul's
// input or output), in model_acts' order: written once here for the buffers (model.c) and
// the layer (model_layer.c).
enum { ACT_LN1 = 0, ACT_LN2, ACT_QKV, ACT_ATTY, ACT_FCH, ACT_FCH_GELU, ACT_WIDE };

typedef struct {
    const char *name, *name16; // the spec names of the fp32 and the bf16 buffer
    size_t f32, bf16;          // offsetof the float * and the uint16_t * field in model_acts
} model_wide;

extern const model_wide MODEL_WIDE[ACT_WIDE];

// Columns of wide activation `which` on this rank (its rows: N): C for the LayerNorm
// outputs, the rank's share of 3C, C and 4C for qkv, the attention output and the MLP's (llama:
// of qkv's (NH + 2 NKV) HS, C, and the MLP's 2F (gate | up) and F (the SwiGLU's output)).
static inline size_t model_wide_cols(const model_dims *d, int which) {
    const int cols[ACT_WIDE] = {d->C, d->C, d->C3_local, d->C_local, d->fc_local, d->fh_local};
    return (size_t)cols[which];
}

// An entry's parameters as fp32 for an op: in place (fp32 training), or widened from bf16
// into its staging region. Not for the matmul weights under bf16 (model_param16).
const float *model_param(model *m, int idx);
static inline const uint16_t *model_param16(const model *m, int idx) {
    return (const uint16_t *)m->store.param_of[idx];
}
// An operand of a matmul or attention: its fp32 or its bf16 form, as the model computes.
#define OPND(m, f32, b16) ((m)->bf16 ? operand_bf16(b16) : operand_fp32(f32))

// Where an op accumulates an entry's gradient: the store's fp32 accumulator, or under bf16
// gradients the entry's fp32 staging (flushed at each grads_ready point).
static inline float *model_grad(model *m, int idx) {
    return m->g16 ? m->gstage + m->stage_off[idx] : (float *)m->store.grad_of[idx];
}
// The parameters of entries [first, first + count) are about to be read (model_store).
static inline tri_status model_params_ready(model *m, int first, int count) {
    return m->store.params_ready ? m->store.params_ready(m->store.ctx, first, count) : TRI_OK;
}

// ---- tensor-parallel collectives (model_layer.c) ----
// Forward of "reduce from the tp region": `partial` (N, C) holds this rank's partial sums;
// the reduced rows this rank keeps land in `rows` (Nl, C). Without SP both are the same
// buffer (all-reduce); with SP a reduce-scatter leaves this rank's block of rows.
tri_status model_tp_reduce_rows(model *m, float *partial, float *rows);
// The residual gradient dres (Nl, C) as all rows (N, C), the input of a row-parallel
// backward.
tri_status model_dresidual_all_rows(model *m, float *dres, float **out);
// In-place sum over tp of n floats (nothing when tp == 1).
tri_status model_tp_all_reduce(model *m, float *x, size_t n);

// ---- pieces of a layer that the chunk's ends use too (model_layer.c) ----
// out (N, OC) = inp @ W^T + bias with W the parameters of table entry `w`: in fp32, or under
// bf16 on the bf16 operands (inp16, inp's rounding, and the bf16 parameters).
void model_linear_fwd(model *m, float *out, const float *inp, const uint16_t *inp16, int w,
                      const float *bias, int N, int IC, int OC);
// LayerNorm of this rank's rows into their place in `full` (N, C), then the rows of every
// rank (SP all-gather; without SP the rows are already all rows).
tri_status model_layernorm_to_all_rows(model *m, float *full, float *mean, float *rstd,
                                       const float *in, const float *w, const float *b);
// Backward of "copy to the tp region" for a LayerNorm output: m->dln (N, C) holds this
// rank's partial gradient of all rows; after the reduction the LayerNorm backward
// accumulates the gradient of this rank's rows into dres, and the gradients of entries w and b
// (its weight and bias), now or in W (model_w_norm: `in` and the statistics kept when
// `outside`, the one-layer work activations of recompute).
tri_status model_layernorm_bwd_from_all_rows(model *m, float *dres, const float *in, int w, int b,
                                             const float *mean, const float *rstd, int outside);

// How a layer's forward meets the LayerNorms next to it (`fuse`, model_forward decides): its
// MLP residual add fused with the LayerNorm that reads the sum, as the attention's is with
// ln2 (residual_layernorm_fwd: one pass over the residual stream instead of two).
enum {
    LAYER_LN1_DONE = 1,      // the layer before computed this layer's ln1 (FUSE_NEXT_LN1)
    LAYER_FUSE_NEXT_LN1 = 2, // compute local layer i + 1's ln1 with the residual add
    LAYER_FUSE_LNF = 4,      // compute the chunk's lnf with it (last layer of the head chunk)
};
// One layer's activations, where the layer computes them (model_layer_acts).
typedef struct {
    float *in, *res2, *out; // (Nl, C)
    float *ln1, *ln2;       // (N, C)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    float *qkv, *atty, *fch, *fch_gelu;
    void *att_state;
} layer_acts;

// ---- what model_layer.c shares with the Llama layer (model_layer_llama.c) ----
// Local layer i's activations in slot a: the slot's own, or under recompute and bf16 the
// one-layer work activations (with the slot's residual stream, statistics, attention state).
layer_acts model_layer_acts(model *m, model_acts *a, int i);
// bf16: where slot a keeps layer i's wide activation `which`; keeping it (the rounding of
// w's fp32 copy); reading it back as a matmul operand in the backward (model_layer.c says how
// recompute re-rounds); the attention output O as the attention backward's operand.
uint16_t *model_wide_bf16(model *m, model_acts *a, int i, int which);
void model_keep_bf16(model *m, model_acts *a, layer_acts *w, int i, int which);
const uint16_t *model_stored_bf16(model *m, model_acts *a, layer_acts *w, int i, int which);
const uint16_t *model_attn_out16(model *m, model_acts *a, layer_acts *w, int i);
// The backward of a bias-free linear layer (entry w): dinp (N, IC) = dout @ W, dW += dout^T
// inp, under bf16 on dout's rounding and inp16; dW now or in W (inp kept when `outside`).
void model_linear_bwd(model *m, float *dinp, int w, const float *dout, const float *inp,
                      const uint16_t *inp16, int outside, int N, int IC, int OC);
// SP: the all-gather of every rank's rows of `full` (N, C), this rank's at row0.
tri_status model_tp_gather_rows(model *m, float *full);

// The LM head's matmul backward over entry `head` (model_pass.c): d(lnf) into m->dln, the
// head weight's gradient accumulated; GPT-2's and Llama's heads share it.
void model_head_matmul_backward(model *m, model_acts *a, int head);

// The Llama layer, and the final RMSNorm with the LM head (model_layer_llama.c); as
// model_layer_forward / _backward, and the head's forward and backward of model_pass.c.
tri_status model_llama_layer_forward(model *m, model_acts *acts, int l, int i);
tri_status model_llama_layer_backward(model *m, model_acts *acts, int l, int i);
tri_status model_llama_head_forward(model *m, model_acts *a);
// From d(logits) (in a->logits) to d(chunk output) in a->dres; the head's weight gradient
// and the final norm's.
tri_status model_llama_head_backward(model *m, model_acts *a);

// Layer l of the model is local layer i of the slot's chunk. The backward reads acts->dres
// as d(loss)/d(layer output) and leaves d(loss)/d(layer input) there; its recompute runs the
// forward with fuse 0 (the next layer's buffers are not this one's to write then).
tri_status model_layer_forward(model *m, model_acts *acts, int l, int i, int fuse);
tri_status model_layer_backward(model *m, model_acts *acts, int l, int i);

// ---- the B/W split (model_wsplit.c) ----
// What W does, recorded by B in the order a joint backward would have done it: the parameter
// gradients of a matmul (dweight of entry w, dbias of entry b or -1, from dout and inp), of a
// norm (LayerNorm: w, b; RMSNorm: w, b -1, mean NULL), of the embedding (w = wte, b = wpe or
// -1), a rounding into mm16 (the LM head's bf16 operands), and the store's grads_ready.
typedef enum {
    WOP_MATMUL,
    WOP_LAYERNORM,
    WOP_RMSNORM,
    WOP_EMBEDDING,
    WOP_TO_BF16,
    WOP_GRADS_READY,
} model_wop_kind;

typedef struct {
    model_wop_kind kind;
    int w, b;                     // gradient entries; GRADS_READY: first, count
    operand dout, inp;            // MATMUL
    const float *dy;              // norms and EMBEDDING: the output gradient; TO_BF16: the source
    const float *x, *mean, *rstd; // norms: the input and its statistics
    const int *tokens;            // EMBEDDING
    uint16_t *dst;                // TO_BF16
    size_t n;                     // TO_BF16: elements
    int N, IC, OC;                // MATMUL (N, IC, OC); norms (N, C = IC)
} model_wop;

// The most ops a B records: per layer 6 matmuls and norms and a grads_ready; at the chunk's
// ends the LM head (3 per bf16 row chunk), the final norm, the embedding and 5 grads_ready.
#define MODEL_WOPS_PER_LAYER 7
#define MODEL_WOPS_ENDS (3 * MODEL_HEAD_CHUNKS + 8)

// One W-buffer: its device memory (wbuf_bytes, carved from the model's specs), the part B
// used, W's ops, and the pair it holds (slot -1: free).
typedef struct model_wbuf {
    char *mem;
    size_t used;
    model_wop *ops;
    int n_ops, cap_ops;
    int slot, chunk;
} model_wbuf;

// Whether a B is running (its weight gradients go to W).
static inline int model_deferring(const model *m) { return m->wcur != NULL; }
// B: `bytes` of the running W-buffer (aligned for any kernel), or a copy of `src` into them.
void *model_w_take(model *m, size_t bytes);
const void *model_w_keep(model *m, const void *src, size_t bytes);
void model_w_push(model *m, const model_wop *op);
// The store's grads_ready for entries [first, first + count): now (after flushing bf16
// gradients' staging), or recorded for W while a B runs.
tri_status model_grads_ready(model *m, int first, int count);
// The linear layers' backward under B: dinp only, with W's op recorded (dout kept, or its
// bf16 rounding written straight into the W-buffer; inp kept when `outside`). dout16: dout's
// bf16 rounding already made (NULL: made here under bf16). gelu_pre as backend_matmul_bwd's.
void model_w_linear(model *m, float *dinp, int w, int b, const float *dout, const uint16_t *dout16,
                    operand inp, int outside, const float *gelu_pre, int N, int IC, int OC);
// A norm's parameter gradients for W: dy (Nl, C; m->dln after the reduction) kept, and x, mean,
// rstd when `outside` (mean NULL: RMSNorm, b -1).
void model_w_norm(model *m, int w, int b, const float *dy, const float *x, const float *mean,
                  const float *rstd, int outside);
// W: the ops of a W-buffer, in order.
tri_status model_w_run(model *m, model_wbuf *wb);
