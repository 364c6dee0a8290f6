// backend_cuda_internal.cuh: what the files of the CUDA compute backend share and nothing
// else includes: the context, the op-level check macros, the device scratch and the ops
// that live in files of their own.
//
// Files: backend_cuda.cu (memory, workspaces, uploads, creation, the function table),
// backend_cuda_matmul.cu (cuBLASLt), backend_cuda_gemm.cu (the bf16 GEMM where cuBLASLt has
// none), backend_cuda_attn.cu (flash-style causal attention: the dispatch and the fp32
// kernels; _tc.cu the v1 bf16 kernels, _fa2.cu and _fa2_bwd.cu the FlashAttention-2 ones),
// backend_cuda_ops.cu (LayerNorm, pointwise, embeddings, cross-entropy, optimizer and
// reductions).
//
// Streams: every op of a backend is enqueued on the context's one stream (non-blocking with
// respect to the legacy default stream), in call order, so ops see each other's results
// without any host synchronisation. The host waits only where the contract hands it a value
// (copy_to_host, sumsq, synchronize), for a copy from pinned host memory, and when the upload
// ring comes round to a slot whose copy is still queued (the host is that many uploads ahead).
// The NCCL comm backend, on streams of its own, orders its collectives after this stream
// with an event, and comm_wait makes this stream wait for their results on another (comm.h:
// compute_stream), so the model's tp collectives never block the host either.
//
// Errors: an op returns nothing (backend.h), and a failed launch or library call leaves the
// CUDA context unusable, so an op that fails reports the statement, file:line, rank and
// device with CUDA's error string (cuda_common.h's format), then aborts: the broken-invariant
// tier of STYLE.md. Allocation failure is not that: alloc() returns NULL, as on the CPU.
#pragma once

#include <cublasLt.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "../base/cuda_common.h"
#include "compute/cuda_api.h" // backend.h with C linkage
extern "C" {
#include "compute/cuda_workspace.h"
#include "compute/upload_ring.h"
}

// cuBLASLt plans (descriptors, layouts and the chosen algorithm), one per distinct GEMM.
#define CUDA_LT_MAX_PLANS 128

typedef struct cuda_lt_plan cuda_lt_plan; // backend_cuda_matmul.cu

typedef struct {
    int device;
    cudaStream_t stream; // every op runs here, in call order
    // cuBLASLt
    cublasLtHandle_t lt;
    void *lt_workspace; // CUDA_LT_WORKSPACE_BYTES, the backend's own (not in mem_peak_bytes)
    size_t lt_workspace_bytes;
    // The compute type of fp32-operand matmuls: CUBLAS_COMPUTE_32F, or _FAST_TF32 when the
    // backend's tf32 is set (train.precision tf32) or TRIDENT_CUDA_TF32=1 forces it; the
    // matmul entries refresh it from those at every call.
    cublasComputeType_t compute;
    int tf32_forced;     // TRIDENT_CUDA_TF32=1
    int fallback_forced; // TRIDENT_TEST_CUDA_FALLBACK=1: every cuBLASLt fallback taken
    cuda_lt_plan *plans; // CUDA_LT_MAX_PLANS, n_plans used
    int n_plans;
    // Per-op device workspace (bias-gradient rows, LayerNorm partial sums, attention's row
    // deltas, the embedding backward's sort), and the bf16 attention fallback's fp32 copy of
    // qkv: sized by reserve from the run's shapes (compute/cuda_workspace.h), stream-ordered
    // allocations of the device's pool. An op past them grows them in stream order (counted
    // in `allocs`, reported once); the backend's own, so not in mem_peak_bytes.
    void *scratch;
    size_t scratch_bytes;
    void *widened;
    size_t widened_bytes;
    // RoPE's (cos, sin) table (rope_math.h) for positions [0, rope_T) at head size rope_HS and
    // base rope_theta, built on the host in double: what the attention kernels rotate q and k
    // by (backend.attn_rope) and the rope ops too. reserve makes it for the run's shapes.
    float2 *rope_tab;
    int rope_T, rope_HS;
    float rope_theta;
    int reserved; // reserve sized the workspaces for the run
    int grew;     // a workspace grew after that (reported once)
    // Token uploads: a ring of pinned slots (compute/upload_ring.h), one event per slot.
    upload_ring ring;
    void *ring_host;
    cudaEvent_t ring_events[CUDA_UPLOAD_SLOTS];
    std::atomic<uint64_t> allocs; // device (and pinned) allocations: backend.alloc_count
    char name[256];               // the device's name (backend.device_name)
    char bus_id[32];              // its PCI bus id (backend.device_bus_id)
    int att_max_hs;               // largest attention head size the device's shared memory allows
    int att_fa2;                  // TRIDENT_CUDA_ATTN: 1 for the FA2 kernels (default), 0 for v1
    unsigned att_fa2_heads;       // head sizes whose FA2 kernels fit the device (bits HS / 16)
    unsigned atc_heads;           // v1 tensor-core kernels that fit the device (bits DP / 16)
    int gelu_epilogue;   // cuBLASLt's GELU epilogues compute gelu_tanh here (probed at start)
    int bf16_out;        // TRIDENT_CUDA_BF16_PATH: 1 for fused (default), 0 for v1
    int ln_vec;          // TRIDENT_CUDA_LN: 1 for vec (128-bit accesses, default), 0 for v1
    double *host_result; // pinned: where sumsq's result lands for the host
    // alloc()/free() may come from another host thread (a checkpoint writer), hence the lock.
    std::mutex mem_lock;
    std::unordered_map<void *, size_t> *mem_sizes; // bytes of every live alloc()
    size_t mem_current, mem_peak;
} cuda_ctx;

static inline cuda_ctx *cuda_ctx_of(backend *b) { return (cuda_ctx *)b->ctx; }

// Reports and aborts (see the header comment).
[[noreturn]] void cuda_op_fail(const char *what, const char *stmt, const char *file, int line);

static inline void cuda_op_check(cudaError_t err, const char *what, const char *stmt,
                                 const char *file, int line) {
    if (err == cudaSuccess) return;
    cuda_report_cuda_error(err, stmt, file, line);
    cuda_op_fail(what, stmt, file, line);
}

#define CUDA_OP_CHECK(call) cuda_op_check((call), "a CUDA call", #call, __FILE__, __LINE__)

// After every kernel launch: a bad configuration (grid, shared memory) shows here; a fault
// inside the kernel shows at the next synchronising call, which is checked too.
#define CUDA_LAUNCH_CHECK(kernel_name)                                                             \
    cuda_op_check(cudaGetLastError(), "a kernel launch", "launch of " kernel_name, __FILE__,       \
                  __LINE__)

// A device workspace of at least `bytes` (256-byte aligned), valid until the next call;
// `bytes` comes from the op's function of compute/cuda_workspace.h, which reserve sized it
// by. Earlier ops that used it were enqueued before, so stream order protects them; a
// growth frees the old buffer in stream order too (no synchronisation).
void *cuda_scratch(cuda_ctx *x, size_t bytes);
// The same mechanism for the widened workspace (cuda_widened_copy).
void *cuda_widened_space(cuda_ctx *x, size_t bytes);
// Counts a device allocation (backend.alloc_count).
static inline void cuda_count_alloc(cuda_ctx *x) { x->allocs.fetch_add(1); }

// Grid of `threads`-thread blocks for a grid-stride loop over n elements.
static inline unsigned cuda_grid_for(size_t n, int threads) {
    size_t blocks = (n + (size_t)threads - 1) / (size_t)threads;
    if (blocks > 65535u * 16u) blocks = 65535u * 16u;
    return blocks ? (unsigned)blocks : 1u;
}

// Warp-wide reductions (xor butterflies: every lane gets the result, in a fixed order).
__device__ __forceinline__ float cuda_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double cuda_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cuda_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// ---- the elementwise and reduction kernels' helpers (backend_cuda_ops.cu, _optim.cu) ----
#define OPS_THREADS 256

// Block-wide reduction of one value per thread (blockDim.x a multiple of 32, at most 1024):
// warps reduce by butterfly, then warp 0 reduces the warps' results; the same fixed order
// every time. Every thread gets the result.
template <typename V, typename F> __device__ V block_reduce(V v, F combine, V identity) {
    __shared__ V partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads(); // partial[] may still be read by an earlier call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < nwarps ? partial[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

struct op_sum {
    template <typename V> __device__ V operator()(V a, V b) const { return a + b; }
};
struct op_max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

// Launches `kernel` over n elements with OPS_THREADS-thread blocks on x's stream, checked.
#define LAUNCH_N(kernel, x, n, ...)                                                                \
    do {                                                                                           \
        kernel<<<cuda_grid_for((n), OPS_THREADS), OPS_THREADS, 0, (x)->stream>>>(__VA_ARGS__);     \
        CUDA_LAUNCH_CHECK(#kernel);                                                                \
    } while (0)

// Grouped-query attention's layout of qkv (backend.h): rows of (NH + 2 NKV) HS elements, q
// heads, then k heads, then v heads; query head h reads kv head h / (NH / NKV). The offsets
// (in elements) of row 0 of batch b's query head h and of the kv head it reads; ld the row
// stride. GPT-2 (NKV = NH): ld = 3 C, k = q + C, v = q + 2 C, as before GQA.
struct att_heads {
    size_t ld, q, k, v;
};
__host__ __device__ __forceinline__ att_heads att_heads_of(int b, int h, int T, int NH, int NKV,
                                                           int HS) {
    att_heads a;
    a.ld = (size_t)(NH + 2 * NKV) * HS;
    const size_t row0 = (size_t)b * T * a.ld;
    a.q = row0 + (size_t)h * HS;
    a.k = row0 + (size_t)(NH + h / (NH / NKV)) * HS;
    a.v = a.k + (size_t)NKV * HS;
    return a;
}

// ---- cuBLASLt (backend_cuda_matmul.cu) ----
tri_status cuda_matmul_init(cuda_ctx *x);
void cuda_matmul_free(cuda_ctx *x);
// The table's entries (backend.h): fp32 or bf16 operands, the GELU fused where cuBLASLt's
// epilogue computes gelu_tanh.
int cuda_matmul_fwd(backend *b, float *out, float *gelu_pre, operand inp, operand weight,
                    const float *bias, int N, int IC, int OC);
int cuda_matmul_bwd(backend *b, float *dinp, float *dweight, float *dbias, operand dout,
                    operand inp, operand weight, const float *gelu_pre, int N, int IC, int OC);
// The bf16-output entries (backend.h matmul_fwd16 / _bwd16): cuBLASLt writes a bf16 D (and a
// bf16 GELU aux) where it has an algorithm, else the fp32 GEMM and one rounding kernel.
void cuda_matmul_fwd16(backend *b, uint16_t *out16, uint16_t *pre16, operand inp, operand weight,
                       const float *bias, int N, int IC, int OC);
void cuda_matmul_bwd16(backend *b, uint16_t *dinp16, float *dweight, float *dbias, operand dout,
                       operand inp, operand weight, const uint16_t *pre16, int N, int IC, int OC);

// ---- the fallback GEMM (backend_cuda_gemm.cu) ----
// D (m, n) = op(A) (m, k) op(B) (k, n) + beta D, column-major as cuBLASLt's (op: transposed
// when ta / tb), on bf16 A and B read in place, fp32 products summed over k in order: where
// cuBLASLt has no bf16 algorithm. beta 0 never reads D.
void cuda_gemm_bf16_fallback(cuda_ctx *x, int ta, int tb, int m, int n, int k, const uint16_t *A,
                             int lda, const uint16_t *B, int ldb, float *D, int ldd, float beta);

// ---- attention (backend_cuda_attn.cu) ----
// Reads TRIDENT_CUDA_ATTN (TRI_ERR_CONFIG for a value it does not know), sets x->att_max_hs
// from the device's opt-in shared memory per block, and readies the FA2 and the v1
// tensor-core kernels.
tri_status cuda_attention_init(cuda_ctx *x, size_t smem_optin);
// The table's entries (backend.h): fp32 q, k, v here, bf16 ones in the FA2 or the v1
// tensor-core kernels below. state: each row's log-sum-exp (ATTN_STATE_LSE). rope_theta > 0:
// every kernel family reads q and k rotated (the RoPE table, cuda_rope_table), each block
// rotating its own copy of a tile as it loads it (qkv is read by many blocks: never rotated in
// place); the FA2 backward writes dq and dk unrotated from its registers, the others' dq, dk
// are unrotated by one pass of the rope kernel over dqkv after them.
void cuda_attention_fwd(backend *b, float *out, void *state, operand qkv, int B, int T, int NH,
                        int NKV, int HS, float rope_theta);
void cuda_attention_bwd(backend *b, float *dqkv, const float *dout, operand qkv, operand out,
                        const void *state, int B, int T, int NH, int NKV, int HS, float rope_theta);
// The fp32 kernels (also the bf16 ops' fallback, on widened q, k, v). o: the fp32 forward
// output, from which D = rowsum(dO * O) is read, or NULL for v1's sweep over the keys. rope:
// the RoPE table or NULL; with it q and k are rotated as they are loaded, and dq, dk are
// written in the rotated frame (the caller unrotates them: cuda_rope_apply).
void cuda_attention_fwd_f32(backend *b, float *out, void *state, const float *qkv, int B, int T,
                            int NH, int NKV, int HS, const float2 *rope);
void cuda_attention_bwd_f32(backend *b, float *dqkv, const float *dout, const float *qkv,
                            const float *o, const void *state, int B, int T, int NH, int NKV,
                            int HS, const float2 *rope);
// ---- FlashAttention-2 kernels on bf16 q, k, v (backend_cuda_attn_fa2.cu) ----
// Sets x->att_fa2_heads and lets the kernels that fit use the shared memory they need.
tri_status cuda_fa2_init(cuda_ctx *x, size_t smem_optin);
// Each returns 1 when it ran the op: x->att_fa2 set, HS one of 64, 80, 96, 128 with kernels
// that fit this device, and the pointers aligned as the kernels load them; else 0, and the
// caller runs the v1 kernels. rope: the RoPE table or NULL; the backward then writes dq and
// dk unrotated (complete: nothing for the caller to do).
int cuda_fa2_fwd(cuda_ctx *x, float *out, float *lse, const uint16_t *qkv, int B, int T, int NH,
                 int NKV, int HS, const float2 *rope);
int cuda_fa2_bwd(cuda_ctx *x, float *dqkv, const float *dout, const uint16_t *qkv,
                 const uint16_t *o16, const float *lse, int B, int T, int NH, int NKV, int HS,
                 const float2 *rope);
// ---- v1 tensor-core attention on bf16 q, k, v (backend_cuda_attn_tc.cu) ----
// Sets x->atc_heads and lets the kernels that fit use the shared memory they need (once, at
// creation: an attention call then queries and sets nothing).
tri_status cuda_atc_init(cuda_ctx *x, size_t smem_optin);
// rope as cuda_attention_fwd_f32's (dq, dk in the rotated frame).
void cuda_attention_fwd_bf16(backend *b, float *out, void *state, const uint16_t *qkv, int B, int T,
                             int NH, int NKV, int HS, const float2 *rope);
void cuda_attention_bwd_bf16(backend *b, float *dqkv, const float *dout, const uint16_t *qkv,
                             const void *state, int B, int T, int NH, int NKV, int HS,
                             const float2 *rope);

// ---- the other ops (backend_cuda_ops.cu) ----
// dst (n) += src (n), on the context's stream (the bias-gradient epilogue's accumulation).
void cuda_add_inplace(cuda_ctx *x, float *dst, const float *src, size_t n);
// dbias (OC) += column sums of dout (N, OC), rows in order (without the cuBLASLt epilogue).
void cuda_column_sums_add(cuda_ctx *x, float *dbias, const float *dout, int N, int OC);
// An fp32 copy of n bf16 elements (the bf16 attention's fallback to its fp32 form) in the
// widened workspace, which reserve sized when the run's head size needs it: one copy at a
// time, valid until cuda_widened_free, which marks it unused again (nothing to free).
float *cuda_widened_copy(cuda_ctx *x, const uint16_t *src, size_t n);
void cuda_widened_free(cuda_ctx *x, float *p);
// out16 = bf16(pre), or with pre16: pre16 = bf16(pre), out16 = bf16(gelu_tanh(pre)).
void cuda_round_gelu(cuda_ctx *x, uint16_t *out16, uint16_t *pre16, const float *pre, size_t n);
// dinp16 = bf16(dinp * gelu_tanh'(pre16)), the factor only with pre16.
void cuda_gelu_bwd_round(cuda_ctx *x, uint16_t *dinp16, const float *dinp, const uint16_t *pre16,
                         size_t n);
// The temporary storage CUB's radix sort of the embedding backward asks for, for `tokens`
// tokens and V_local rows (reserve sizes the scratch with it).
size_t cuda_embedding_sort_bytes(cuda_ctx *x, int tokens, int V_local);
// The same over bf16 dout (the bf16 matmul's fallback), widened as it is read.
void cuda_column_sums_add_bf16(cuda_ctx *x, float *dbias, const uint16_t *dout, int N, int OC);
// out (N, OC) = bias broadcast over the rows (the matmul's fallback bias path).
void cuda_broadcast_rows(cuda_ctx *x, float *out, const float *bias, int N, int OC);

void cuda_layernorm_fwd(backend *b, float *out, float *mean, float *rstd, const float *inp,
                        const float *weight, const float *bias, int N, int C);
void cuda_layernorm_bwd(backend *b, float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean, const float *rstd,
                        int N, int C);
void cuda_residual_fwd(backend *b, float *out, const float *a, const float *c, size_t n);
void cuda_residual_layernorm_fwd(backend *b, float *res, float *out, float *mean, float *rstd,
                                 const float *a, const float *c, const float *weight,
                                 const float *bias, int N, int C);
void cuda_gelu_fwd(backend *b, float *out, const float *inp, size_t n);
void cuda_gelu_bwd(backend *b, float *dinp, const float *inp, const float *dout, size_t n);
void cuda_embedding_fwd(backend *b, float *out, const int *tokens, const float *wte,
                        const float *wpe, int B, int T, int C, int vocab_start, int V_local,
                        int add_pos);
void cuda_embedding_bwd(backend *b, float *dwte, float *dwpe, const float *dout, const int *tokens,
                        int B, int T, int C, int vocab_start, int V_local);
void cuda_xent_max(backend *b, float *rowmax, const float *logits, int N, int Vp_local,
                   int vocab_start, int V_valid);
void cuda_xent_sumexp(backend *b, float *sumexp, float *target_logit, const float *logits,
                      const float *rowmax, const int *targets, int N, int Vp_local, int vocab_start,
                      int V_valid);
void cuda_xent_loss(backend *b, float *losses, const float *rowmax, const float *sumexp,
                    const float *target_logit, int N);
void cuda_xent_bwd(backend *b, float *logits, const float *rowmax, const float *sumexp,
                   const int *targets, float dloss, int N, int Vp_local, int vocab_start,
                   int V_valid);
// The 128-bit LayerNorm and residual kernels (backend_cuda_ln4.cu), where they apply
// (TRIDENT_CUDA_LN=vec, C % 4 == 0, 16-byte aligned rows): 1 when launched, else 0 and the
// caller runs its scalar kernel. res NULL: the LayerNorm of a; else of res = a + c.
int cuda_ln4_fwd(cuda_ctx *x, float *res, float *out, float *mean, float *rstd, const float *a,
                 const float *c, const float *weight, const float *bias, int N, int C);
int cuda_ln4_bwd_dinp(cuda_ctx *x, float *dinp, const float *dout, const float *inp,
                      const float *weight, const float *mean, const float *rstd, int N, int C);
// out = a + c over the first n / 4 * 4 elements in float4s: returns how many (0: none).
size_t cuda_residual4(cuda_ctx *x, float *out, const float *a, const float *c, size_t n);
// The fused bf16 classifier (backend_cuda_xent16.cu)
void cuda_xent_stats16(backend *b, float *rowmax, float *sumexp, float *target_logit,
                       const uint16_t *logits16, const int *targets, int N, int Vp_local,
                       int vocab_start, int V_valid);
void cuda_xent_rescale(backend *b, float *sumexp, const float *rowmax_local,
                       const float *rowmax_all, int N);
void cuda_xent_bwd16(backend *b, uint16_t *logits16, const float *rowmax, const float *sumexp,
                     const int *targets, float dloss, int N, int Vp_local, int vocab_start,
                     int V_valid);
void cuda_loss_sum(backend *b, double *acc, const float *losses, size_t n);
void cuda_scale(backend *b, float *x, float s, size_t n);
void cuda_to_bf16(backend *b, uint16_t *dst, const float *src, size_t n);
void cuda_from_bf16(backend *b, float *dst, const uint16_t *src, size_t n);
void cuda_add_to_bf16(backend *b, uint16_t *dst, const float *src, size_t n);
// ---- the optimizer's ops (backend_cuda_optim.cu) ----
double cuda_sumsq(backend *b, const float *x, size_t n);
void cuda_sumsq_add(backend *b, double *acc, const float *x, size_t n);
void cuda_adamw(backend *b, float *param, const float *grad, float *m, float *v, size_t n,
                const adamw_step *s, uint16_t *param16);
void cuda_mt_sumsq_add(backend *b, double *acc, const mt_table *t);
void cuda_mt_adamw(backend *b, const mt_table *t, const adamw_step *s);
// Reads TRIDENT_CUDA_OPTIM (TRI_ERR_CONFIG for a value it does not know) into
// b->optim_multi.
tri_status cuda_optim_init(backend *b);
// ---- the Llama ops (backend_cuda_llama.cu) ----
void cuda_rmsnorm_fwd(backend *b, float *out, float *rstd, const float *inp, const float *weight,
                      int N, int C, float eps);
void cuda_rmsnorm_bwd(backend *b, float *dinp, float *dweight, const float *dout, const float *inp,
                      const float *weight, const float *rstd, int N, int C);
void cuda_residual_rmsnorm_fwd(backend *b, float *res, float *out, float *rstd, const float *a,
                               const float *c, const float *weight, int N, int C, float eps);
void cuda_rope_fwd(backend *b, float *qkv, int B, int T, int NH, int NKV, int HS, float theta);
void cuda_rope_bwd(backend *b, float *dqkv, int B, int T, int NH, int NKV, int HS, float theta);
// The RoPE table (x->rope_tab) for at least positions [0, T) at HS and theta: kept while
// those hold, else rebuilt on the host in double (rope_math.h's rope_table_fill) and copied,
// which synchronises the stream and counts an allocation (reserve builds the run's at start;
// past it, a growth is reported once as any workspace's). cuda_ws_rope_table(T, HS) bytes.
const float2 *cuda_rope_table(cuda_ctx *x, int T, int HS, float theta);
// The rotation (dir 1) or its inverse (dir -1) in place on the q and k heads of qkv (B*T rows
// of (NH + 2 NKV) HS floats), by the table (the rope ops; the unrotation of dq and dk after
// the attention kernels that leave them rotated).
void cuda_rope_apply(cuda_ctx *x, float *qkv, int B, int T, int NH, int NKV, int HS,
                     const float2 *tab, float dir);
void cuda_rope_free(cuda_ctx *x);
void cuda_swiglu_fwd(backend *b, float *out, const float *fc, int N, int F);
void cuda_swiglu_bwd(backend *b, float *dfc, const float *dout, const float *fc, int N, int F);
