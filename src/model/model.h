// model.h: GPT-2 and Llama (model.arch) forward and backward for one micro-batch, through the
// compute backend and the comm interface, with Megatron tensor parallelism over the tp group.
//
// The model computes; it does not own its parameters and gradients. Where each table entry's
// parameters are read and its gradients accumulate, and when they are needed or final, is a
// model_store that the parallel layer's ZeRO storage fills in (parallel/zero.h). The model's
// own buffers (activations and scratch) are described by model_buffers, carved from the
// rank's arenas and summed by the planner from the same specs.
//
// Shapes below are this rank's. N = B*T rows. Column-parallel activations are split over
// tp (3C/tp, 4C/tp, C/tp, Vp/tp columns). With sequence parallelism the residual stream and
// the LayerNorms hold only this rank's block of rows: Nl = N/tp rows [tp_rank*Nl, +Nl);
// without it Nl = N.
#pragma once
#include "comm/comm.h"
#include "compute/backend.h"
#include "compute/mempool.h"
#include "model/model_config.h"
#include "model/params.h"

typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_FULL = 1 } recompute_kind;

// The most activation slots a rank holds: beyond their device memory, each costs host memory
// (its model_acts and its buffer specs, about 1 kB) and its specs count in an int. Only gpipe
// with a huge global batch asks for more (it holds every micro-batch at once); the config's
// size rules refuse that.
#define MODEL_MAX_SLOTS (1 << 20)

// How one rank runs the model: the part it holds, the micro-batch, how many micro-batches
// are in flight at once (the schedule's bound), activation recompute and the precision.
// With model_config, everything the model's buffers depend on.
typedef struct {
    model_shard shard;
    int micro_batch;       // B
    int n_slots;           // activation slots: micro-batches (and chunks) in flight
    int n_wbufs;           // W-buffers: (micro-batch, chunk) pairs between their backward's B
                           // and its W (the schedule's max_w_pending; 0 without the split)
    int sequence_parallel; // parallel.sequence_parallel (in effect only with tp > 1)
    recompute_kind recompute;
    tri_dtype precision;        // parameters and kept activations: DTYPE_FP32 or DTYPE_BF16
    tri_dtype grad_dtype;       // gradient accumulation: DTYPE_FP32 or DTYPE_BF16
    attn_state_kind attn_state; // how the backend keeps attention state for the backward
    int bf16_out;               // the backend's matmuls write bf16 outputs (backend.h)
    int attn_rope; // the backend applies RoPE inside its attention (backend.h): no rope ops
} model_layout;

// Whether the layers' matmuls write their bf16 outputs themselves (backend_matmul_fwd16 /
// _bwd16: qkv, the MLP's GELU output and GELU input, the fc layer's input gradient) instead
// of an fp32 output that a to_bf16 pass rounds: bf16 precision on a backend that offers it,
// without recompute (which re-rounds fp32 work copies in the backward: the previous route).
// The layer's buffers (model_buffers) follow the same answer.
static inline int model_bf16_direct(tri_dtype precision, recompute_kind recompute,
                                    int backend_bf16_out) {
    return precision == DTYPE_BF16 && recompute == RECOMPUTE_NONE && backend_bf16_out;
}

// Whether the classifier runs fused on bf16 logits (backend.h xent_stats16): the LM head
// writes them in bf16, one pass computes the row statistics, one more turns them into their
// gradient in place, the head backward's bf16 operand. bf16 precision on a backend with bf16
// outputs (CUDA unless TRIDENT_CUDA_BF16_PATH=v1), with or without recompute; the slot's
// logits buffer (model_buffers) follows the same answer.
static inline int model_xent16(tri_dtype precision, int backend_bf16_out) {
    return precision == DTYPE_BF16 && backend_bf16_out;
}

typedef struct {
    int L, C, NH, HS, T, B, V, Vp; // global sizes; B = micro-batch
    int tp, tp_rank;
    int sp;                      // sequence parallelism (only when tp > 1)
    int pp, pp_rank, chunks, Lc; // pipeline: this rank holds `chunks` chunks of Lc layers
    int has_embed, has_head;     // pipeline stage 0 / the last stage
    int N, N_local, row0;        // rows: all, this rank's residual-stream rows, first of them
    int NH_local, C_local, C3_local, C4_local, Vp_local, vocab_start;
    // The MLP's widths on this rank: fc_local the fc layer's output (gpt2 4C/tp; llama's gate
    // and up 2F/tp), fh_local the fcproj layer's input (gpt2 4C/tp; llama's SwiGLU output F/tp).
    int fc_local, fh_local;
    // model.arch llama: RMSNorm (norm_eps), RoPE (rope_theta), SwiGLU, NKV key/value heads
    // (NKV_local on this rank; qkv is C3_local = (NH_local + 2 NKV_local) HS wide). gpt2: NKV =
    // NH.
    int llama, NKV, NKV_local;
    float norm_eps, rope_theta;
} model_dims;

// The dims of the model `mc` on the rank `ml` describes.
model_dims model_dims_of(const model_config *mc, const model_layout *ml);

// Activations of one (micro-batch, chunk) that the backward needs: one "slot" per pair in
// flight (the schedule's bound; one without pipelining). Lc = layers of a chunk.
typedef struct {
    float *residual;  // (Lc+1, Nl, C): the chunk's input, each layer's output (with
                      // recompute the only activations a slot keeps of its layers)
    float *output;    // (Nl, C): the chunk's output, the last row of residual
    float *residual2; // (Lc, Nl, C): after the attention block
    float *ln1, *ln2; // (Lc, N, C): LayerNorm outputs, all rows (gathered under SP)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; // (Lc, Nl)
    float *qkv;            // (Lc, N, 3C/tp); llama: (Lc, N, (NH + 2 NKV) HS / tp), after RoPE
    void *att_state;       // Lc * attn_state_bytes(layout.attn_state, B, T, NH/tp)
    float *atty;           // (Lc, N, C/tp)
    float *fch, *fch_gelu; // (Lc, N, 4C/tp); llama: gate|up (Lc, N, 2F/tp), SwiGLU (Lc, N, F/tp)
    float *dres;           // (Nl, C): d(loss)/d(residual stream); d(chunk output) on entry to
                           // the backward (received from the next stage), d(chunk input) after
    // The LM head and loss (last stage only, else NULL):
    float *lnf;                 // (N, C), all rows
    float *lnf_mean, *lnf_rstd; // (Nl)
    float *logits;              // (N, Vp/tp), overwritten by its gradient in the backward
    uint16_t *logits16;         // the same in bf16 instead, under model_xent16 (logits NULL)
    float *rowmax, *sumexp, *target_logit, *losses; // (N)
    int *inputs, *targets;                          // (N) on the device
    // train.precision bf16 (without recompute): ln1, ln2, qkv, atty, fch and fch_gelu are
    // stored here as bf16 (the float pointers above stay NULL); each layer computes in the
    // model's fp32 `work` activations and keeps their bf16 rounding.
    uint16_t *ln1_16, *ln2_16, *qkv16, *atty16, *fch16, *fch_gelu16;
} model_acts;

// The passes of a chunk the store is told of (model_store.pass_begin): a forward, a whole
// backward (model_backward), or the backward split in two for the zero-bubble schedules: B
// (model_backward_b: activation gradients, reads the parameters) and W (model_backward_w:
// the parameter gradients, reads no parameter, finishes the gradients as a backward does).
typedef enum {
    MODEL_PASS_FORWARD = 0,
    MODEL_PASS_BACKWARD = 1,
    MODEL_PASS_B = 2,
    MODEL_PASS_W = 3,
} model_pass;

// Where the model's parameters and gradients live (filled in by the ZeRO layer). An entry's
// parameters are fp32 or bf16 (layout.precision), its gradient accumulator fp32 or bf16
// (layout.grad_dtype); the pointers may change between passes (ZeRO-3 gathers into a
// workspace, ZeRO-2 alternates bucket workspaces), so the model reads them at each use.
typedef struct {
    void *ctx;
    void **param_of; // (table.n_entries)
    void **grad_of;  // (table.n_entries)
    // At the start of every pass of a chunk (ZeRO-3 gathers there for all but W). NULL: none.
    tri_status (*pass_begin)(void *ctx, int chunk, model_pass pass);
    // Before an op reads the parameters of entries [first, first + count) (a layer, the
    // embeddings, the final LayerNorm, the LM head): a gather pass_begin started may be in
    // flight until then. NULL: none.
    tri_status (*params_ready)(void *ctx, int first, int count);
    // When the gradients of entries [first, first + count) of the current micro-batch are
    // final (after each layer's backward, after the LM head, after the embedding), so that
    // they can be reduced while the backward goes on. NULL: none. A split backward calls it
    // from W only, in the same order as model_backward.
    tri_status (*grads_ready)(void *ctx, int first, int count);
} model_store;

typedef struct {
    model_dims d;
    param_table table;
    backend *be;
    comm *cm;
    model_store store;
    mem_specs buffers; // model_buffers of this model: what create carved, free gives back
    mem_pool *pool;    // where they came from (NULL: the backend)
    // train.precision bf16: the parameters are bf16 and widened into `stage` (fp32, one
    // layer's entries plus the embeddings and final LayerNorm, at pstage_off) each time an op
    // other than a matmul reads them. Math stays in fp32.
    int bf16;
    float *stage;
    size_t *pstage_off; // where each entry is staged in `stage` (params_stage_layout without
                        // the matmul weights, which the bf16 matmuls read as they are)
    // train.grad_dtype bf16: the backward adds into fp32 staging (gstage, at stage_off), which
    // each grads_ready point adds into the bf16 accumulators, rounded, and zeroes.
    int g16;
    float *gstage;
    size_t *stage_off;
    model_acts *slots; // one per micro-batch in flight (the schedule's bound)
    int n_slots;
    // The B/W split (model_backward_b / _w): n_wbufs W-buffers, each wbuf_bytes of device
    // memory (model_buffers: model_wbuf_bytes) and the list of W's ops; wcur: the one the
    // running B fills (NULL: the backward computes its weight gradients at once).
    struct model_wbuf *wbufs;
    int n_wbufs;
    size_t wbuf_bytes;
    struct model_wbuf *wcur;
    int bf16_direct;   // model_bf16_direct: the layers' matmuls write their bf16 outputs
    int xent16;        // model_xent16: the fused bf16 classifier (slots hold logits16)
    int recompute;     // parallel.recompute full: slots keep each layer's input only; the
                       // rest of a layer's activations lives in `work` (one layer's worth),
                       // filled by the forward and again, identically, before its backward
    model_acts work;   // also under bf16, where slots keep the wide activations as bf16
    uint16_t *round16; // bf16 with recompute: where activations are rounded through
    uint16_t *mm16;    // bf16: a matmul's operand rounded to bf16 (mm16_numel in model.c): a
                       // backward's dout, the LM head's input and its backward's chunks
    // Scratch shared by all layers and slots:
    float *dln;             // (N, C): d(LayerNorm output), partial over tp before its reduction
    float *dqkv;            // (N, 3C/tp)
    float *datty;           // (N, C/tp)
    float *dfch;            // (N, 4C/tp); NULL under bf16_direct, which uses dfch16
                            // (llama: (N, 2F/tp), d(gate | up))
    float *dswiglu;         // llama: (N, F/tp), d(SwiGLU output); NULL for gpt2
    uint16_t *dfch16;       // (N, 4C/tp) bf16: the fc layer's input gradient (bf16_direct)
    float *rows_full;       // (N, C), SP only: a row-parallel output before its reduce-scatter,
                            // or the residual gradient gathered over tp
    double *loss_acc;       // last stage: the loss sums of the forwards since model_take_loss
    size_t att_state_bytes; // per layer
} model;

// bf16 matmuls on fp32 logits (not model_xent16, whose gradient is bf16 already and runs
// whole): the LM head's backward runs in MODEL_HEAD_CHUNKS chunks of rows, so that its
// bf16 operands (a chunk of d(logits) and of lnf) fit a buffer of about 1/8 of the fp32
// logits. mm16 holds the widest of a layer's dout (N rows of C, 3C/tp or 4C/tp) and, on the
// last stage, a head chunk's two operands (C + Vp/tp per row).
#define MODEL_HEAD_CHUNKS 4
static inline size_t model_head_chunk_rows(size_t N) {
    return (N + MODEL_HEAD_CHUNKS - 1) / MODEL_HEAD_CHUNKS;
}

// The model's buffers on the rank `ml` describes, as specs (mempool.h): a pure function of
// the model, the layout and the rank's parameter table (params_build of ml->shard). With m
// (model_create) each spec's dst is the field of m it fills; with m NULL (the planner) the
// specs only size.
void model_buffers(mem_specs *specs, const model_config *mc, const model_layout *ml,
                   const param_table *pt, model *m);

// The largest operands the model on the rank `ml` describes hands the backend's ops
// (backend.reserve sizes the backend's own workspaces by them; the planner states those).
backend_shapes model_op_shapes(const model_config *mc, const model_layout *ml);

// Builds the table and carves the activations and scratch of `ml` from `pool` (or the backend
// when pool is NULL). The parameters and gradients are the store's: call model_set_store
// before the first forward. The tp group of `cm` is the shard's.
tri_status model_create(model *m, const model_config *mc, const model_layout *ml, backend *be,
                        comm *cm, mem_pool *pool);
void model_free(model *m);
void model_set_store(model *m, const model_store *store);

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
// into the store's. The last chunk of the last stage starts from the loss (dloss is
// d(loss)/d(per-token loss): 1 / tokens in the global batch); any other chunk from
// model_chunk_grad() holding d(output). Leaves d(input) there for the previous stage.
tri_status model_backward(model *m, int slot, int chunk, float dloss);

// The backward split in two (the zero-bubble schedules, sched.h's BWD_B and BWD_W), which
// together give bitwise model_backward's gradients and d(input):
// B: the activation gradients of (slot, chunk) from dloss (the loss chunk) or the slot's
// d(output); leaves d(input) at model_chunk_grad(m, slot). All its tp collectives are here.
// What W needs that B computed (each matmul's output gradient, under bf16 its rounding; each
// norm's output gradient after its tp reduction; the embedding's all-rows gradient) or that
// would be overwritten before W (the work activations under recompute) goes to W-buffer
// `wslot` (0 <= wslot < layout.n_wbufs, free: its last B had its W). Writes no parameter
// gradient and calls no grads_ready.
tri_status model_backward_b(model *m, int slot, int wslot, int chunk, float dloss);
// W: every parameter gradient of (slot, chunk), from the slot (held until now) and W-buffer
// `wslot` only (no parameter, no collective), accumulated in model_backward's order with the
// store's grads_ready calls as it makes them; frees the W-buffer. Any FWD or B of other pairs
// may run between a pair's B and its W.
tri_status model_backward_w(model *m, int slot, int wslot, int chunk);

// Bytes of one W-buffer on the rank `ml` describes (the largest B of any of its chunks
// fills), a pure function of the dims and the layout (model_buffers counts n_wbufs of them).
size_t model_wbuf_bytes(const model_config *mc, const model_layout *ml);

// ---- the op list (model_ops.c) ----
// Every backend call the model makes in one pass of one chunk for one micro-batch (with
// targets: a training or evaluation forward), with its shape, as a pure function of the model
// and the layout: the planner prices a stage's compute by it (plan_time.c) for any size of
// model, with nothing allocated, and tests/test_oplist.c records the calls a real pass makes
// through the CPU backend and holds them equal to it. Ops are the backend table's entries
// (backend.h), named as there; identical calls are merged into one op with a count.
// Not listed: what the store does at its hooks (model_store: ZeRO's gathers, bucket
// reductions) and the bf16 gradients' flush at grads_ready (train.grad_dtype bf16: an
// add_to_bf16 and a memset per parameter entry, per micro-batch).
typedef enum {
    MODEL_OP_MATMUL_FWD, // dims: rows N, in IC, out OC (backend.h's N, IC, OC)
    MODEL_OP_MATMUL_BWD,
    MODEL_OP_MATMUL_FWD16,
    MODEL_OP_MATMUL_BWD16,
    MODEL_OP_ATTENTION_FWD, // dims: B, T, NH, NKV, HS (this rank's heads)
    MODEL_OP_ATTENTION_BWD,
    MODEL_OP_LAYERNORM_FWD, // dims: rows, C (the norms and the fused residual + norm)
    MODEL_OP_LAYERNORM_BWD,
    MODEL_OP_RESIDUAL_LAYERNORM_FWD,
    MODEL_OP_RMSNORM_FWD,
    MODEL_OP_RMSNORM_BWD,
    MODEL_OP_RESIDUAL_RMSNORM_FWD,
    MODEL_OP_RESIDUAL_FWD, // dims: n elements
    MODEL_OP_GELU_FWD,     // n (run by backend.c where the backend does not fuse it: the CPU)
    MODEL_OP_GELU_BWD,
    MODEL_OP_ROPE_FWD, // dims: B, T, NH, NKV, HS
    MODEL_OP_ROPE_BWD,
    MODEL_OP_SWIGLU_FWD, // dims: rows, F
    MODEL_OP_SWIGLU_BWD,
    MODEL_OP_EMBEDDING_FWD, // dims: B, T, C, V_local; parts MODEL_OP_POS: with wpe
    MODEL_OP_EMBEDDING_BWD,
    MODEL_OP_XENT_MAX, // dims: rows, Vp_local
    MODEL_OP_XENT_SUMEXP,
    MODEL_OP_XENT_BWD,
    MODEL_OP_XENT_STATS16,
    MODEL_OP_XENT_BWD16,
    MODEL_OP_XENT_LOSS, // dims: rows
    MODEL_OP_XENT_RESCALE,
    MODEL_OP_LOSS_SUM,
    MODEL_OP_TO_BF16, // dims: n elements
    MODEL_OP_FROM_BF16,
    MODEL_OP_MEMSET_ZERO, // dims: bytes
    MODEL_OP_COPY,
    MODEL_OP_COPY_TO_DEVICE, // the token ids (host to device: no compute, priced at 0)
    MODEL_OP_KIND_COUNT
} model_op_kind;

// Which outputs a call computes (the split forms of backend.h) and its optional operands.
enum {
    MODEL_OP_BIAS = 1,    // matmul_fwd*: a bias
    MODEL_OP_GELU = 2,    // matmul_*: the GELU's pre-activation (gelu_pre / pre16)
    MODEL_OP_DINP = 4,    // the backward ops: the input gradient
    MODEL_OP_DWEIGHT = 8, // the weight gradient (norms: and the bias's, as one)
    MODEL_OP_DBIAS = 16,  // matmul_bwd*: the bias gradient
    MODEL_OP_POS = 32,    // embedding: the position embedding (wpe) too
};

typedef struct {
    model_op_kind kind;
    tri_dtype dtype; // matmul and attention operands; DTYPE_FP32 elsewhere
    unsigned parts;  // MODEL_OP_* flags above
    int64_t dims[5]; // as the kind's comment says; unused ones 0
    int64_t count;   // calls per pass
} model_op;

#define MODEL_OPS_MAX 160
typedef struct {
    model_op ops[MODEL_OPS_MAX];
    int n;
} model_op_list;

// The ops of pass `pass` of chunk `chunk` (0 .. chunks-1) of one micro-batch on the rank `ml`
// describes (its traits: backend bf16 outputs), recompute inside the backward and B as
// model_backward runs it; MODEL_PASS_W: what the B before it recorded.
void model_ops(model_op_list *out, const model_config *mc, const model_layout *ml, int chunk,
               model_pass pass);
// FLOPs of one call (matmuls: 2 N IC OC per computed product; attention: 4 B T^2 NH HS forward,
// twice that backward, PaLM's accounting, causal mask ignored); 0 for the others.
double model_op_flops(const model_op *op);
// Bytes one call of an elementwise op moves: each (rows x columns) operand read or written
// counted once at its element size (the statistics and parameter vectors not counted), as
// plan_calibrate's elementwise bandwidth counts them; 0 for matmuls, attention and uploads.
double model_op_bytes(const model_op *op);
// "matmul_bwd bf16 N=.. IC=.. OC=.. dinp,dweight" into buf (for tests and messages).
void model_op_describe(const model_op *op, char *buf, size_t n);
// The op of a backend call: adds it to `l` (merged with an identical one, count added).
void model_op_add(model_op_list *l, const model_op *op);

// The (Nl, C) buffers a pipeline exchanges for a slot: the chunk's input activation (where
// a received activation goes), its output (what is sent on), and its residual gradient.
float *model_chunk_input(model *m, int slot);
float *model_chunk_output(model *m, int slot);
float *model_chunk_grad(model *m, int slot);

// Logits of position t of batch row 0 after model_forward (host copy of the local shard).
void model_logits_row(model *m, int slot, int t, float *out);

// ---- final saves ----
// The whole model's parameters leave the ranks tensor by tensor, each in pieces of whole rows
// of at most MODEL_SAVE_PIECE_BYTES of fp32 (at least one row), assembled over the
// model-parallel group: no rank holds more of the model than a piece and its staging.
#define MODEL_SAVE_PIECE_BYTES ((size_t)16 << 20)

// Rows per piece of entry `fe` of the whole model's (tp = 1) table.
int64_t model_save_piece_rows(const param_entry *fe);
// Elements of the largest piece of the table `full`: what a piece's buffers hold.
size_t model_save_piece_elems(const param_table *full);

// Values [lo, lo + n) of this rank's table entry `entry` as host fp32 (the ZeRO layer's
// zero_entry_params, which owns the parameters).
typedef tri_status (*model_param_fetch)(void *ctx, int entry, size_t lo, size_t n, float *dst);

// Rows [row0, row0 + rows) of entry `fe` of the whole model (a tp = 1 table entry, every
// column) into `out` (rows x fe->global_cols floats, host) on every rank of the model-parallel
// group: each rank fetches what it alone holds of them (a replicated entry from tp rank 0
// only, the tied embedding from the first stage only) through `stage` (host, as many floats
// as out), and a sum over the group fills in the rest. Collective over the model-parallel
// group when `reduce`; without it the rank only fetches (a ZeRO-3 rank of dp > 0, whose
// fetches take part in its dp group's parameter gathers).
tri_status model_gather_rows(model *m, const param_entry *fe, int64_t row0, int64_t rows,
                             model_param_fetch fetch, void *ctx, int reduce, float *stage,
                             float *out);
