// model.h: GPT-2 forward and backward for one micro-batch, through the compute backend
// and the comm interface, with Megatron tensor parallelism over the tp group.
//
// Shapes below are this rank's. N = B*T rows. Column-parallel activations are split over
// tp (3C/tp, 4C/tp, C/tp, Vp/tp columns). With sequence parallelism the residual stream and
// the LayerNorms hold only this rank's block of rows: Nl = N/tp rows [tp_rank*Nl, +Nl);
// without it Nl = N.
#pragma once
#include "compute/backend.h"
#include "comm/comm.h"
#include "config/config.h"
#include "compute/mempool.h"
#include "model/params.h"

typedef struct {
    int L, C, NH, HS, T, B, V, Vp; // global sizes; B = micro-batch
    int tp, tp_rank;
    int sp;                        // sequence parallelism (only when tp > 1)
    int pp, pp_rank, chunks, Lc;   // pipeline: this rank holds `chunks` chunks of Lc layers
    int has_embed, has_head;       // pipeline stage 0 / the last stage
    int N, N_local, row0;          // rows: all, this rank's residual-stream rows, first of them
    int NH_local, C_local, C3_local, C4_local, Vp_local, vocab_start;
} model_dims;

// Activations of one (micro-batch, chunk) that the backward needs: one "slot" per pair in
// flight (the schedule's bound; one without pipelining). Lc = layers of a chunk.
typedef struct {
    float *residual;   // (Lc+1, Nl, C): the chunk's input, each layer's output (with
                       // recompute the only activations a slot keeps of its layers)
    float *output;     // (Nl, C): the chunk's output, the last row of residual
    float *residual2;  // (Lc, Nl, C): after the attention block
    float *ln1, *ln2;  // (Lc, N, C): LayerNorm outputs, all rows (gathered under SP)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; // (Lc, Nl)
    float *qkv;        // (Lc, N, 3C/tp)
    void *att_state;   // Lc * attn_state_bytes(backend attn_state, B, T, NH/tp)
    float *atty;       // (Lc, N, C/tp)
    float *fch, *fch_gelu; // (Lc, N, 4C/tp)
    float *dres;       // (Nl, C): d(loss)/d(residual stream); d(chunk output) on entry to
                       // the backward (received from the next stage), d(chunk input) after
    // The LM head and loss (last stage only, else NULL):
    float *lnf;        // (N, C), all rows
    float *lnf_mean, *lnf_rstd; // (Nl)
    float *logits;     // (N, Vp/tp), overwritten by its gradient in the backward
    float *rowmax, *sumexp, *target_logit, *losses; // (N)
    int *inputs, *targets; // (N) on the device
    // train.precision bf16 (without recompute): ln1, ln2, qkv, atty, fch and fch_gelu are
    // stored here as bf16 (the float pointers above stay NULL); each layer computes in the
    // model's fp32 `work` activations and keeps their bf16 rounding.
    uint16_t *ln1_16, *ln2_16, *qkv16, *atty16, *fch16, *fch_gelu16;
} model_acts;

typedef struct {
    model_dims d;
    param_table table;
    backend *be;
    comm *cm;
    mem_pool *pool;    // where the buffers come from (NULL: the backend)
    float *params;     // (capacity) on the device: table.local_numel, padded for ZeRO shards;
                       // NULL under ZeRO-3, where the optimizer holds parameter shards
    float *init_host;  // ZeRO-3 (shard_params): the initial local parameters in host memory,
                       // until the optimizer has taken its shards (the caller frees it)
    float **param_of;  // (table.n_entries): where each entry's parameters are read from
    // train.precision bf16: the parameters are stored as bf16 (params16, or the optimizer's
    // shards under ZeRO-3, through param16_of) and widened into `stage` (fp32, one layer's
    // entries plus the embeddings and final LayerNorm, at stage_off) each time an op reads
    // them; params and param_of are unused. Math stays in fp32.
    int bf16;
    uint16_t *params16;
    uint16_t **param16_of;
    float *stage;
    size_t *pstage_off; // where each entry is staged in `stage` (params_stage_layout without
                        // the matmul weights, which the bf16 matmuls read as they are)
    size_t *stage_off;  // where each entry's gradient is staged in gstage (every entry)
    // train.grad_dtype bf16: gradients accumulate in bf16 (grads16, or the optimizer's bucket
    // workspaces under ZeRO-2/3, through grad16_of); the backward adds into fp32 staging
    // (gstage, at stage_off), which each grads_ready point adds into them, rounded, and zeroes.
    int g16;
    uint16_t *grads16;
    uint16_t **grad16_of;
    float *gstage;
    float *grads;      // (capacity), accumulated over micro-batches; NULL when the
                       // optimizer keeps only gradient buckets (ZeRO-2)
    size_t capacity;
    float **grad_of;   // (table.n_entries): where each entry's gradient accumulates
                       // (into grads by default; into a bucket's workspace under ZeRO-2)
    // Called when the gradients of entries [first, first + count) of the current micro-batch
    // are final (after each layer's backward, after the LM head, after the embedding), so
    // that an optimizer can reduce them while the backward goes on. NULL: not called.
    tri_status (*grads_ready)(void *ctx, int first, int count);
    void *grads_ready_ctx;
    // Called at the start of every forward and backward of a chunk: ZeRO-3 gathers the
    // chunk's parameters there and points param_of at them. NULL: not called.
    tri_status (*params_needed)(void *ctx, int chunk, int backward);
    void *params_needed_ctx;
    // Called before an op reads the parameters of entries [first, first + count) (a layer,
    // the embeddings, the final LayerNorm, the LM head): a gather params_needed started may
    // still be in flight until then. NULL: not called. Shares params_needed_ctx.
    tri_status (*params_ready)(void *ctx, int first, int count);
    model_acts *slots; // one per micro-batch in flight (the schedule's bound)
    int n_slots;
    int recompute;     // parallel.recompute full: slots keep each layer's input only; the
                       // rest of a layer's activations lives in `work` (one layer's worth),
                       // filled by the forward and again, identically, before its backward
    model_acts work;   // also under bf16, where slots keep the wide activations as bf16
    uint16_t *round16; // bf16 with recompute: where activations are rounded through
    uint16_t *mm16;    // bf16: a matmul's operand rounded to bf16 (model_mm16_numel): a
                       // backward's dout, the LM head's input and its backward's chunks
    // Scratch shared by all layers and slots:
    float *dln;        // (N, C): d(LayerNorm output), partial over tp before its reduction
    float *dqkv;       // (N, 3C/tp)
    float *datty;      // (N, C/tp)
    float *dfch;       // (N, 4C/tp)
    float *rows_full;  // (N, C), SP only: a row-parallel output before its reduce-scatter,
                       // or the residual gradient gathered over tp
    double *loss_acc;  // last stage: the loss sums of the forwards since model_take_loss
    size_t att_state_bytes; // per layer
    size_t activation_bytes, scratch_bytes;
} model;

// bf16 matmuls: the LM head's backward runs in MODEL_HEAD_CHUNKS chunks of rows, so that its
// bf16 operands (a chunk of d(logits) and of lnf) fit a buffer of about 1/8 of the fp32
// logits. mm16 holds the widest of a layer's dout (N rows of C, 3C/tp or 4C/tp) and, on the
// last stage, a head chunk's two operands (C + Vp/tp per row).
#define MODEL_HEAD_CHUNKS 4
static inline size_t model_head_chunk_rows(size_t N) {
    return (N + MODEL_HEAD_CHUNKS - 1) / MODEL_HEAD_CHUNKS;
}
static inline size_t model_mm16_numel(size_t N, size_t C, size_t C_local, size_t Vp_local,
                                      int head) {
    size_t widest = 4 * C_local > C ? 4 * C_local : C;
    size_t n = N * widest, h = model_head_chunk_rows(N) * (C + Vp_local);
    return head && h > n ? h : n;
}

// Builds the table and allocates parameters, gradients and `n_slots` activation slots for
// micro-batch size B (the backend's memory); the parameter and gradient buffers are padded
// to a multiple of `pad_multiple` elements (the ZeRO shard count). Parameters are
// initialised from run.seed, or loaded from model.init_from when set. The tp and pp groups
// of `cm` set the tensor split and the layers held.
// With full_grads 0 no gradient buffer is allocated: the caller points grad_of elsewhere.
// With shard_params 1 (ZeRO-3) no parameter buffer is allocated on the device either: the
// initial values stay in host memory (init_host) for the optimizer's shards, so that no rank
// ever holds all of its parameters on the device.
// Every device buffer comes from `pool` (the rank's arenas, sized by the planner), or from
// the backend when pool is NULL.
tri_status model_create(model *m, const run_config *cfg, int B, int n_slots, int pad_multiple,
                        int full_grads, int shard_params, backend *be, comm *cm, mem_pool *pool);
void model_free(model *m);

// The parameter buffer the optimizer updates: params (fp32) or params16 (bf16); NULL under
// ZeRO-3, where the optimizer holds the parameters as shards.
static inline void *model_params(model *m) { return m->bf16 ? (void *)m->params16 : (void *)m->params; }
// The full gradient buffer (ZeRO 0-1): grads (fp32) or grads16 (bf16); NULL at ZeRO 2-3.
static inline void *model_grads(model *m) { return m->g16 ? (void *)m->grads16 : (void *)m->grads; }

// Forward of chunk `chunk` (0..chunks-1) of one micro-batch into activation slot `slot`.
// inputs/targets are host (B*T) token ids, the same on every tp rank: the first chunk of
// stage 0 embeds the inputs, any other chunk starts from model_chunk_input() (received from
// the previous stage). The last chunk of the last stage computes the loss: its sum over
// tokens is added to the model's loss accumulator, on the device (model_take_loss reads it).
// With targets NULL only the logits are computed (sampling).
tri_status model_forward(model *m, int slot, int chunk, const int *inputs, const int *targets);

// The sum of the per-token losses of the forwards since the last call (host; 0 on stages
// without the LM head), and the accumulator back to 0. A micro-batch's loss stays on the
// device, so the forward does not wait for it; this waits once.
double model_take_loss(model *m);

// Backward of the (micro-batch, chunk) whose forward filled `slot`; gradients accumulate
// into m->grads. The last chunk of the last stage starts from the loss (dloss is
// d(loss)/d(per-token loss): 1 / tokens in the global batch); any other chunk from
// model_chunk_grad() holding d(output). Leaves d(input) there for the previous stage.
tri_status model_backward(model *m, int slot, int chunk, float dloss);

// The (Nl, C) buffers a pipeline exchanges for a slot: the chunk's input activation (where
// a received activation goes), its output (what is sent on), and its residual gradient.
float *model_chunk_input(model *m, int slot);
float *model_chunk_output(model *m, int slot);
float *model_chunk_grad(model *m, int slot);

// After the last backward of a step: under sequence parallelism each tp rank holds the
// LayerNorm gradients of its own rows only, so they are summed over tp; with pipelining
// the two copies of the tied embedding (first and last stage) sum their gradients.
// Nothing to do when there is no full gradient buffer (ZeRO-2 does it on its shards).
tri_status model_finish_grads(model *m);

// Logits of position t of batch row 0 after model_forward (host copy of the local shard).
void model_logits_row(model *m, int slot, int t, float *out);

// Assembles the whole model's parameters (tp = 1 layout of `full_table`) on every rank of
// the model-parallel group from each rank's `local` (host, table.local_numel floats: this
// rank's parameters in table layout). `full` is host memory of full_table->local_numel.
tri_status model_gather_params(model *m, const param_table *full_table, const float *local,
                               float *full);
