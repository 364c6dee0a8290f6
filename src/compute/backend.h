// backend.h: the compute backend interface (DESIGN.md "Module boundaries").
//
// A backend is a table of function pointers with a context, filled in as a commented
// table by backend_cpu.c (OpenBLAS + OpenMP threads) and cuda/ (cuBLASLt + kernels). The
// model, pipeline and optimizer call ops only through it and never know which runs.
//
// Conventions (llm.c's): activations are row-major (rows, cols); a linear weight is
// (out, in) and computes out = inp @ weight^T + bias. "N" is a row count, usually B*T.
// Every pointer argument is device memory of the backend. Backward ops ACCUMULATE into
// parameter gradients (+=) so that micro-batches add up; activation gradients are
// overwritten unless stated otherwise.
//
// Precision is data: the matmul and attention operands are dtype-tagged (`operand`), and
// one entry point serves every dtype. Callers use the backend_matmul_* and
// backend_attention_* wrappers at the end of this file, which check the tags and hold the
// fallbacks both backends share (ggml's ggml_backend_tensor_set pattern, backend.c); the
// table entries behind them are what a backend implements.
#pragma once
#include "base/checked.h"
#include "base/common.h"
#include "base/dtype.h"
#include "compute/multi_tensor.h"

// Which compute backend a run asks for (system.backend; backend_select.h chooses).
typedef enum { BACKEND_AUTO = 0, BACKEND_CPU = 1, BACKEND_CUDA = 2 } backend_kind;

// A read-only operand of a matmul or attention: device memory and its element type,
// DTYPE_FP32 or DTYPE_BF16 (bf16.h; train.precision bf16 keeps the parameters and the
// activations the matmuls read in bf16). Outputs and accumulators are always fp32.
typedef struct {
    const void *ptr;
    tri_dtype dtype;
} operand;

// (Written without compound literals: nvcc reads this header as C++.)
static inline operand operand_fp32(const float *p) {
    operand o = {p, DTYPE_FP32};
    return o;
}
static inline operand operand_bf16(const uint16_t *p) {
    operand o = {p, DTYPE_BF16};
    return o;
}

// How attention_fwd keeps, per layer and micro-batch, what attention_bwd reads: a fact about
// a backend (backend.attn_state) that the model sizes its buffers by and the planner counts.
typedef enum {
    ATTN_STATE_PROBS = 0, // the softmax probabilities, (B, NH, T, T) floats (the CPU backend)
    ATTN_STATE_LSE = 1,   // each row's log-sum-exp, (B, NH, T) floats (flash-style kernels: CUDA)
} attn_state_kind;

// Bytes of that state for B sequences of T tokens over NH heads; saturating (base/checked.h):
// T * T passes 64 bits for T values an int holds, and the config's size rules must see that.
static inline size_t attn_state_bytes(attn_state_kind kind, size_t B, size_t T, size_t NH) {
    return sat_mul_size(sat_mul3_size(B, NH, T),
                        sat_mul_size(kind == ATTN_STATE_PROBS ? T : 1, sizeof(float)));
}

typedef struct backend backend;

// What a rank's buffers depend on in the backend it runs on (or the device a plan is for):
// the model sizes its activations by it and the planner sums the same specs.
typedef struct {
    attn_state_kind attn; // backend.attn_state
    int bf16_out;         // backend.bf16_out
    int optim_table;      // the optimizer uploads its multi-tensor table (backend.optim_multi
                          // on a backend with device_memory)
    int attn_rope;        // backend.attn_rope: RoPE inside the attention, no rope ops
} backend_traits;

// The largest operands a run hands the ops (the model's dimensions on this rank,
// model_op_shapes), so that a backend can size its own workspaces once, before the first
// step (backend.reserve), instead of allocating in the middle of one.
typedef struct {
    int rows;         // rows of the activations: B * T (N)
    int B, T;         // micro-batch and sequence length (attention)
    int C;            // d_model: the LayerNorm width
    int NH, HS;       // attention heads on this rank and the head size
    int bias_cols;    // the widest matmul output that has a bias (3C/tp, 4C/tp, C)
    int V_local;      // vocabulary rows on this rank (the embedding backward sorts tokens by row)
    tri_dtype attn;   // the attention's operands: DTYPE_BF16 under train.precision bf16
    float rope_theta; // RoPE's base when q and k are rotated (llama), else 0: a backend that
                      // rotates them in its attention (attn_rope) keeps a table of T x HS/2
} backend_shapes;

// One AdamW step (backend.adamw): its hyperparameters, the clipping scale and the step.
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_scale; // the gradient is multiplied by it first (clipping; 1: none)
    int t;            // the step, counted from 1 (the bias corrections)
} adamw_step;

struct backend {
    const char *name; // "cpu", "cuda"
    void *ctx;
    int threads; // compute threads (cpu) or 0
    // What the trainer needs to know of a backend, so that it never names one:
    int device_memory; // buffers live off the host: MPI must stage them (comm_staged.h),
                       // and the comm backend of choice is NCCL
    double peak_flops; // the MFU denominator: a datasheet peak, or 0 to measure the
                       // backend's matmul rate at start
    // What attention_fwd keeps for the backward; attn_state_bytes(attn_state, ...) sizes it
    // for the model and the planner.
    attn_state_kind attn_state;
    void *stream; // the stream every op runs on, in call order (a cudaStream_t), for
                  // a comm backend that orders itself against it with events; NULL
                  // on the CPU. Set at creation.
    // The matmuls write bf16 outputs themselves (matmul_fwd16 / matmul_bwd16), so the bf16
    // model needs no separate rounding pass after a GEMM nor the fp32 copy it rounds from
    // (model_bf16_direct decides; the model's buffers and the planner follow), and the LM
    // head writes bf16 logits for the fused classifier (model_xent16, xent_stats16). 1 on CUDA
    // (TRIDENT_CUDA_BF16_PATH=fused, the default), 0 on the CPU, whose fp32 reference path
    // stays as it was (TRIDENT_TEST_CPU_BF16_OUT=1 sets it there for the tests).
    int bf16_out;
    // The device, for the comm choice (comm_gpus.h) and the MFU peak (the planner's device
    // table): its name as the driver gives it ("NVIDIA H200") and its PCI bus id
    // ("0000:19:00.0"); NULL on the CPU. Set at creation.
    const char *device_name;
    const char *device_bus_id;
    // train.precision tf32: fp32 matmuls may round their operands to TF32 on tensor cores.
    // has_tf32: the backend can (a fact, in its table); tf32: asked for (backend_set_tf32).
    int has_tf32;
    int tf32;
    // The attention rotates q and k itself (RoPE fused into attention_fwd / _bwd, rope_theta
    // > 0 there): the model then calls neither rope_fwd nor rope_bwd, and keeps qkv unrotated.
    // 1 on CUDA, 0 on the CPU (its attention takes rope_theta 0 only).
    int attn_rope;

    // ---- memory ----
    void *(*alloc)(backend *b, size_t bytes); // zero-filled; NULL on failure
    void (*free)(backend *b, void *ptr);
    void (*copy_to_device)(backend *b, void *dst, const void *host_src, size_t bytes);
    void (*copy_to_host)(backend *b, void *host_dst, const void *src, size_t bytes);
    void (*memset_zero)(backend *b, void *ptr, size_t bytes);
    void (*copy)(backend *b, void *dst, const void *src, size_t bytes); // device to device
    void (*synchronize)(backend *b);
    size_t (*mem_peak_bytes)(backend *b); // high-water mark of alloc()ed bytes
    // Sizes the backend's own workspaces for ops up to `s` (called once the model exists,
    // before the first step), so that no op allocates during a step. An op past them still
    // works (it grows a workspace, counted by alloc_count). TRI_ERR_INTERNAL (reported) when
    // the memory cannot be had.
    tri_status (*reserve)(backend *b, const backend_shapes *s);
    // Device allocations made so far, alloc()'s and the backend's own: the trainer checks
    // that a step makes none (an allocation can synchronise the device in the middle of it).
    uint64_t (*alloc_count)(backend *b);

    // ---- linear layers (called through backend_matmul_fwd / _bwd) ----
    // The operands of a call (inp, weight; dout) are all fp32 or all bf16 (the wrappers
    // check). A product of two bf16 values is exact in fp32 and the products accumulate in
    // fp32, so bf16 differs from fp32 only in what is read, and the backends only in the order
    // of the sums: tensor cores on CUDA, the operands widened into fp32 on the CPU.
    //
    // pre (N, OC) = inp (N, IC) @ weight (OC, IC)^T + bias (OC); bias may be NULL. pre goes to
    // gelu_pre when it is given (the MLP's fc layer), else to out. With gelu_pre, a backend
    // that fuses the GELU into its GEMM (CUDA: cuBLASLt's GELU epilogues, where the device's
    // GELU matches gelu_tanh) also writes out (N, OC) = gelu_tanh(pre) and returns 1; else it
    // returns 0, and backend_matmul_fwd runs gelu_fwd. Returns 0 without gelu_pre.
    int (*matmul_fwd)(backend *b, float *out, float *gelu_pre, operand inp, operand weight,
                      const float *bias, int N, int IC, int OC);
    // dinp (N, IC) = dout (N, OC) @ weight  (overwritten; skipped when dinp is NULL)
    // dweight (OC, IC) += dout^T @ inp;  dbias (OC) += column sums of dout (skipped if NULL)
    // Split forms (the zero-bubble schedules' B and W, model.h): dweight and dbias NULL gives
    // the input gradient alone, dinp NULL the weight gradients alone; dbias only with
    // dweight. Each output is bitwise what the joint call writes (its own GEMM or kernel).
    // gelu_pre (N, IC) fp32, or NULL: this layer's input is gelu_tanh(gelu_pre), and dinp
    // (then not NULL) is wanted at gelu_pre: dinp *= gelu_tanh'(gelu_pre). A backend that
    // fuses that product into its GEMM returns 1; else it returns 0 with dinp = dout @ weight,
    // and backend_matmul_bwd runs gelu_bwd. Returns 0 without gelu_pre.
    int (*matmul_bwd)(backend *b, float *dinp, float *dweight, float *dbias, operand dout,
                      operand inp, operand weight, const float *gelu_pre, int N, int IC, int OC);
    // The same GEMMs with bf16 outputs, for a consumer that reads the bf16 rounding anyway
    // (bf16 operands). Every backend implements them; bf16_out says whether the model routes
    // its bf16 activations through them. The values are matmul_fwd's (and
    // gelu_fwd's) rounded once to nearest even, so an fp32 GEMM followed by to_bf16 gives the
    // same bits up to the order of the GEMM's sums:
    //   pre16 NULL:  out16 (N, OC) = bf16(inp @ weight^T + bias)
    //   pre16 given: pre16 = bf16(pre), out16 = bf16(gelu_tanh(pre)), pre in fp32 as above
    //                (the GELU reads the fp32 pre, not its rounding)
    // Any fallback (no cuBLASLt algorithm for a bf16 D) is the backend's own.
    void (*matmul_fwd16)(backend *b, uint16_t *out16, uint16_t *pre16, operand inp, operand weight,
                         const float *bias, int N, int IC, int OC);
    // dinp16 (N, IC) = bf16((dout @ weight) * gelu_tanh'(pre16 widened)), the factor only
    // when pre16 is given; dweight, dbias as matmul_bwd (fp32, accumulated). Split forms as
    // matmul_bwd's: dinp16 NULL, the weight gradients only (bitwise matmul_bwd's on the same
    // bf16 operands); dweight and dbias NULL, dinp16 only.
    void (*matmul_bwd16)(backend *b, uint16_t *dinp16, float *dweight, float *dbias, operand dout,
                         operand inp, operand weight, const uint16_t *pre16, int N, int IC, int OC);

    // ---- normalisation and pointwise ----
    // out (N, C) = (inp - mean) * rstd * weight + bias; saves mean (N), rstd (N). eps 1e-5.
    void (*layernorm_fwd)(backend *b, float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int N, int C);
    // dinp (N, C) += ... (ACCUMULATES: dinp is the residual stream's gradient);
    // dweight, dbias (C) +=. Split forms, each output bitwise the joint call's: dinp NULL, the
    // parameter gradients only (weight is then not read); dweight and dbias NULL (both), dinp
    // only.
    void (*layernorm_bwd)(backend *b, float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean,
                          const float *rstd, int N, int C);
    // out = a + c, n elements (out may alias a).
    void (*residual_fwd)(backend *b, float *out, const float *a, const float *c, size_t n);
    // residual_fwd then layernorm_fwd in one pass: res (N, C) = a + c (res may alias a); out
    // = LayerNorm(res) with mean and rstd saved, as layernorm_fwd computes them.
    void (*residual_layernorm_fwd)(backend *b, float *res, float *out, float *mean, float *rstd,
                                   const float *a, const float *c, const float *weight,
                                   const float *bias, int N, int C);
    // out = gelu_tanh(inp)
    void (*gelu_fwd)(backend *b, float *out, const float *inp, size_t n);
    // dinp = gelu_tanh'(inp) * dout (overwritten; dinp may alias dout)
    void (*gelu_bwd)(backend *b, float *dinp, const float *inp, const float *dout, size_t n);

    // ---- attention (called through backend_attention_fwd / _bwd) ----
    // qkv (B, T, (NH + 2*NKV)*HS), fp32 or bf16: q heads (NH, HS), then k heads, then v heads
    // (NKV, HS each) per token; query head h reads key/value head h / (NH / NKV) (grouped-query
    // attention; GPT-2: NKV = NH). out (B, T, NH*HS) fp32: causal softmax(q k^T / sqrt(HS)) v,
    // heads concatenated. state: attn_state_bytes(b->attn_state, B, T, NH) bytes, written here and
    // read by attention_bwd. On bf16 q, k, v the probabilities (and dO, dS) may be rounded to
    // bf16 for the tensor cores' products, with fp32 accumulation (CUDA); the CPU widens qkv
    // and runs the fp32 op.
    // rope_theta > 0 (only on a backend with attn_rope): q and k are read rotated as rope_fwd
    // would rotate them (position t of each sequence, theta rope_theta); qkv itself is not
    // changed (other blocks read the same k rows), and state and out are those of the
    // attention of the rotated q, k. 0: as given.
    void (*attention_fwd)(backend *b, float *out, void *state, operand qkv, int B, int T, int NH,
                          int NKV, int HS, float rope_theta);
    // dqkv (B, T, (NH + 2*NKV)*HS) fp32, overwritten (dk, dv summed over each group's query
    // heads in head order: deterministic); dout (B, T, NH*HS) fp32; qkv as the forward's;
    // out: the forward's output O (B, T, NH*HS), in qkv's dtype (its bf16 rounding under
    // bf16), so that a flash-style backward gets D = rowsum(dO * O) in one pass over dO and O
    // instead of a sweep over the keys (FlashAttention-2's trick). The CPU keeps P and gets D
    // as rowsum(P * dP) from the dP it computes anyway: it reads no O (the same value, exact
    // math; its bits stay as before). rope_theta as the forward's (the same qkv, unrotated):
    // q and k read rotated, and dq, dk written as the gradient of the unrotated q, k (the
    // inverse rotation of the rotated ones' gradient, what rope_bwd would do after).
    void (*attention_bwd)(backend *b, float *dqkv, const float *dout, operand qkv, operand out,
                          const void *state, int B, int T, int NH, int NKV, int HS,
                          float rope_theta);

    // ---- embeddings ----
    // out (B*T, C) = wte[tokens - vocab_start] (zero when the token is outside
    //                [vocab_start, vocab_start + V_local)) + (add_pos ? wpe[t] : 0).
    // The masked lookup is what a vocab-parallel embedding needs before its all-reduce.
    void (*embedding_fwd)(backend *b, float *out, const int *tokens, const float *wte,
                          const float *wpe, int B, int T, int C, int vocab_start, int V_local,
                          int add_pos);
    // dwte (V_local, C) += rows of dout at the tokens it owns; dwpe (T, C) += sum over B
    // of dout (skipped when NULL).
    void (*embedding_bwd)(backend *b, float *dwte, float *dwpe, const float *dout,
                          const int *tokens, int B, int T, int C, int vocab_start, int V_local);

    // ---- vocab-parallel softmax cross-entropy ----
    // logits (N, Vp_local): this rank's vocabulary columns [vocab_start, vocab_start +
    // Vp_local); only global columns < V_valid are real (padded columns are ignored).
    // Pass 1: rowmax (N) = max over real local columns (-INFINITY when none).
    void (*xent_max)(backend *b, float *rowmax, const float *logits, int N, int Vp_local,
                     int vocab_start, int V_valid);
    // Pass 2 (after rowmax is all-reduced with max over tp): sumexp (N) = sum over real local
    // columns of exp(logit - rowmax); target_logit (N) = the target's logit when this rank
    // owns it, else 0.
    void (*xent_sumexp)(backend *b, float *sumexp, float *target_logit, const float *logits,
                        const float *rowmax, const int *targets, int N, int Vp_local,
                        int vocab_start, int V_valid);
    // losses (N) = log(sumexp) + rowmax - target_logit (after sumexp and target_logit are
    // all-reduced with sum over tp).
    void (*xent_loss)(backend *b, float *losses, const float *rowmax, const float *sumexp,
                      const float *target_logit, int N);
    // In place: logits <- dloss * (softmax - onehot(target)) over real columns, 0 over
    // padded columns. dloss is the same scalar for every row (1 / tokens in the batch).
    void (*xent_bwd)(backend *b, float *logits, const float *rowmax, const float *sumexp,
                     const int *targets, float dloss, int N, int Vp_local, int vocab_start,
                     int V_valid);

    // ---- optimizer and reductions ----
    // *acc (one double in the backend's memory) += the sum of losses (n floats), summed in
    // double in a fixed order: a micro-batch's loss stays on the device until the step ends.
    void (*loss_sum)(backend *b, double *acc, const float *losses, size_t n);
    // Returns sum of squares of x (n elements) in double precision, computed in a fixed
    // order so the result is deterministic for a given thread count.
    double (*sumsq)(backend *b, const float *x, size_t n);
    // *acc (one double in the backend's memory) += sumsq(x): the same sum, left on the
    // device, so that a norm over many pieces waits for the host once.
    void (*sumsq_add)(backend *b, double *acc, const float *x, size_t n);
    // x *= s
    void (*scale)(backend *b, float *x, float s, size_t n);
    // bf16 storage (bf16.h): dst (n bf16) = src rounded to nearest even; dst (n floats) =
    // src widened exactly. The mixed-precision path keeps parameters in bf16 and computes
    // in fp32.
    void (*to_bf16)(backend *b, uint16_t *dst, const float *src, size_t n);
    void (*from_bf16)(backend *b, float *dst, const uint16_t *src, size_t n);
    // dst (n bf16) = round(dst + src): a bf16 gradient buffer accumulating an fp32 one.
    void (*add_to_bf16)(backend *b, uint16_t *dst, const float *src, size_t n);
    // AdamW over n elements (s: lr, beta1 b1, beta2 b2, eps, weight_decay wd, grad_scale, t):
    // g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    // p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p).
    // param16, when not NULL, receives the updated p rounded to bf16 (mixed precision: p is
    // the fp32 master).
    void (*adamw)(backend *b, float *param, const float *grad, float *m, float *v, size_t n,
                  const adamw_step *s, uint16_t *param16);

    void (*destroy)(backend *b);

    // ---- the fused bf16 classifier (model_xent16: train.precision bf16 on a backend with
    // bf16_out): the LM head writes bf16 logits (matmul_fwd16), read once for the statistics
    // and once more to become their gradient in place, as bf16, the head backward's operand.
    // Columns as xent_max's; the logits are widened exactly. One pass over logits16 (N,
    // Vp_local): rowmax (N) = max over real local columns (-INFINITY when none), sumexp (N) =
    // sum over them of exp(logit - rowmax) (0 when none; the online form, rescaled whenever
    // the maximum grows, on CUDA), target_logit as xent_sumexp's.
    void (*xent_stats16)(backend *b, float *rowmax, float *sumexp, float *target_logit,
                         const uint16_t *logits16, const int *targets, int N, int Vp_local,
                         int vocab_start, int V_valid);
    // tp > 1: rowmax_all (N), the all-reduced (max) rowmax_local: sumexp *= exp(rowmax_local -
    // rowmax_all), so that the sums add over tp (0 stays 0: a rank without real columns).
    void (*xent_rescale)(backend *b, float *sumexp, const float *rowmax_local,
                         const float *rowmax_all, int N);
    // In place: logits16 <- bf16(xent_bwd's gradient of the widened logits), rounded once.
    void (*xent_bwd16)(backend *b, uint16_t *logits16, const float *rowmax, const float *sumexp,
                       const int *targets, float dloss, int N, int Vp_local, int vocab_start,
                       int V_valid);
    // ---- Llama (model.arch llama); NULL on a backend without them (a llama run is refused
    // at start there) ----
    // RMSNorm: out (N, C) = inp * rstd * weight, rstd (N) = 1/sqrt(mean(inp^2) + eps), saved.
    void (*rmsnorm_fwd)(backend *b, float *out, float *rstd, const float *inp, const float *weight,
                        int N, int C, float eps);
    // dinp (N, C) += ... (ACCUMULATES, as layernorm_bwd); dweight (C) +=. Split forms as
    // layernorm_bwd's: dinp NULL (weight not read) or dweight NULL.
    void (*rmsnorm_bwd)(backend *b, float *dinp, float *dweight, const float *dout,
                        const float *inp, const float *weight, const float *rstd, int N, int C);
    // residual_fwd then rmsnorm_fwd in one pass (res may alias a), as residual_layernorm_fwd.
    void (*residual_rmsnorm_fwd)(backend *b, float *res, float *out, float *rstd, const float *a,
                                 const float *c, const float *weight, int N, int C, float eps);
    // RoPE in place on the q and k heads of qkv (B*T rows of (NH + 2*NKV)*HS; v untouched),
    // position t = row % T, Hugging Face's rotate_half: for i < HS/2, angle = t *
    // theta^(-2i/HS), (x_i, x_{i+HS/2}) <- (x_i cos - x_{i+HS/2} sin, x_{i+HS/2} cos + x_i sin).
    // The angles in double, cos and sin rounded to fp32 (compute/rope_math.h). rope_bwd applies
    // the inverse rotation to dqkv in place (the same q and k blocks). The model calls them only
    // on a backend without attn_rope (the attention rotates q and k itself there).
    void (*rope_fwd)(backend *b, float *qkv, int B, int T, int NH, int NKV, int HS, float theta);
    void (*rope_bwd)(backend *b, float *dqkv, int B, int T, int NH, int NKV, int HS, float theta);
    // SwiGLU: fc (N, 2F) rows [gate (F) | up (F)]; out (N, F) = silu(gate) * up, silu(x) = x /
    // (1 + exp(-x)).
    void (*swiglu_fwd)(backend *b, float *out, const float *fc, int N, int F);
    // dfc (N, 2F) overwritten from dout (N, F) and fc.
    void (*swiglu_bwd)(backend *b, float *dfc, const float *dout, const float *fc, int N, int F);
    // ---- multi-tensor optimizer ops (multi_tensor.h) ----
    // The optimizer's pieces in one table built once: the same results as the per-piece
    // entries above, in a handful of launches per step instead of one or two per piece.
    // *acc += the sum of squares of the gradients of the tensors with in_norm, in double,
    // in a fixed order (deterministic; it may differ in the last bits from sumsq_add piece
    // by piece, except on the CPU, which loops exactly so).
    void (*mt_sumsq_add)(backend *b, double *acc, const mt_table *t);
    // adamw over every tensor, with weight decay s->weight_decay on the tensors with decay
    // and none on the others; each tensor's param16 (when not NULL) receives the rounding.
    void (*mt_adamw)(backend *b, const mt_table *t, const adamw_step *s);
    // 1: the optimizer runs its pieces through the two entries above (the CPU; CUDA unless
    // TRIDENT_CUDA_OPTIM=v1), 0: piece by piece through sumsq_add and adamw.
    int optim_multi;
};

static inline backend_traits backend_traits_of(const backend *b) {
    backend_traits t = {b->attn_state, b->bf16_out, b->device_memory && b->optim_multi,
                        b->attn_rope};
    return t;
}

// train.precision tf32: on a backend with TF32 units (has_tf32) its fp32 matmuls run in TF32
// from the next op on; elsewhere nothing changes. Returns b->tf32.
int backend_set_tf32(backend *b, int on);

// Called first thing in main(), before any thread, file or communicator exists
// (backend_cpu_process.c says why). Restarts the process once with the same arguments when
// a library must see a variable as it loads: OPENBLAS_CORETYPE when OpenBLAS picked its
// generic kernels on a CPU with AVX2/AVX-512 (it does not know CPUs newer than itself), and,
// with `passive_wait` (the commands that compute on the CPU), OMP_WAIT_POLICY=passive unless
// OMP_WAIT_POLICY or GOMP_SPINCOUNT is set. Returns when nothing is to be done or the
// restart failed.
void backend_cpu_prepare_process(char **argv, int passive_wait);

// How OpenMP's idle threads wait in this process, for the run record and the start line:
// "OMP_WAIT_POLICY=passive (set by trident)", "GOMP_SPINCOUNT=1000", ... Holds no quote,
// backslash or control character.
void backend_cpu_wait_describe(char *out, size_t n);

// The compute threads of one rank: `requested` (system.threads) when > 0, else the cores
// this process may use (affinity mask, cgroup quota) shared among the `local_ranks` of its
// node that may use them. `why` says how ("2 cores allowed, 1 rank on this node"), for the
// start line and the run record; it holds no quote, backslash or control character.
int backend_cpu_fit_threads(int requested, int local_ranks, char *why, size_t n);

// The rule of backend_cpu_fit_threads as a pure function (for the tests): mask_cpus in the
// affinity mask, node_cpus on the node (cgroup cpuset, else online), quota_cpus the cgroup's
// CPU quota in cores (0: none). At least 1.
int backend_cpu_threads_rule(int mask_cpus, int node_cpus, double quota_cpus, int local_ranks);

// Creates the CPU backend with `threads` compute threads (0: backend_cpu_fit_threads for one
// process).
tri_status backend_cpu_create(backend **out, int threads);

// ---- the typed ops, as callers use them (backend.c) ----
// Each checks its operands' tags (a combination no backend path supports is a broken
// invariant: TRI_ASSERT) and calls the table entry above; for the GELU, it runs gelu_fwd /
// gelu_bwd itself where the backend did not fuse them. Arguments as the table's.
void backend_matmul_fwd(backend *b, float *out, float *gelu_pre, operand inp, operand weight,
                        const float *bias, int N, int IC, int OC);
void backend_matmul_bwd(backend *b, float *dinp, float *dweight, float *dbias, operand dout,
                        operand inp, operand weight, const float *gelu_pre, int N, int IC, int OC);
// The bf16-output forms (table: matmul_fwd16 / matmul_bwd16); bf16 operands.
void backend_matmul_fwd16(backend *b, uint16_t *out16, uint16_t *pre16, operand inp, operand weight,
                          const float *bias, int N, int IC, int OC);
void backend_matmul_bwd16(backend *b, uint16_t *dinp16, float *dweight, float *dbias, operand dout,
                          operand inp, operand weight, const uint16_t *pre16, int N, int IC,
                          int OC);
// rope_theta > 0 only on a backend with attn_rope (asserted).
void backend_attention_fwd(backend *b, float *out, void *state, operand qkv, int B, int T, int NH,
                           int NKV, int HS, float rope_theta);
void backend_attention_bwd(backend *b, float *dqkv, const float *dout, operand qkv, operand out,
                           const void *state, int B, int T, int NH, int NKV, int HS,
                           float rope_theta);
