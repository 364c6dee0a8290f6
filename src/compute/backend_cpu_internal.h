// backend_cpu_internal.h: what the files of the CPU backend share and nothing else
// includes: the context, the threaded GEMM and the vectorisable exp.
//
// Threading model (measured, see backend_cpu.c): every parallel loop is an OpenMP loop
// with num_threads(ctx->threads), and OpenBLAS always runs single-threaded inside them.
// Large GEMMs are split into output tiles by cpu_gemm, one single-threaded sgemm per
// OpenMP thread. One pool of threads then does all the work; a threaded OpenBLAS beside
// OpenMP leaves two pools spinning against each other on the same cores.
#pragma once

// The clamps in cpu_expf vectorise only if gcc may evaluate both arms of a float `?:`,
// which -ftrapping-math (the default) forbids. Nothing here reads floating-point
// exception flags, so both CPU backend files are compiled without trapping math; the
// pragma precedes every function definition of the files that include this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "compute/backend.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdint.h>

// How attention spreads over threads: OpenMP over the (b, h) heads with one sgemm per
// thread, or the heads in turn with each GEMM and softmax split over the threads.
// AUTO takes the first when there are at least as many heads as threads.
typedef enum { CPU_ATTN_AUTO = 0, CPU_ATTN_HEADS = 1, CPU_ATTN_INNER = 2 } cpu_attn_policy;

// One per backend. Ops of a backend are called by one host thread at a time (they share
// the scratch); alloc/free may come from any thread.
typedef struct {
    int threads;                 // OpenMP threads of every parallel region
    cpu_attn_policy attn_policy; // CPU_ATTN_AUTO; the others are for tests/test_ops_attn --bench
    // Atomic: alloc() may also be called from another host thread (a checkpoint writer).
    _Atomic size_t mem_current; // bytes handed out by alloc() and not yet freed
    _Atomic size_t mem_peak;    // high-water mark of mem_current
    _Atomic uint64_t allocs;    // alloc() calls (alloc_count)
    float *scratch;             // per-op workspace (per-thread partials, attention dP), 64B aligned
    size_t scratch_floats;
    float *widened; // bf16 attention operands widened to fp32 (cpu_widened)
    size_t widened_floats;
    float *out_stage; // the fp32 results the bf16-output matmuls round (cpu_out_stage)
    size_t out_stage_floats;
} cpu_ctx;

// A workspace of at least `floats` floats, grown (never shrunk) on demand. Not counted
// in mem_peak_bytes: it is the backend's own; the largest user is attention_bwd with
// threads * T * T floats (8 MiB at T = 1024 on 2 threads). Call outside parallel
// regions; the pointer stays valid until the next call.
float *cpu_scratch(cpu_ctx *ctx, size_t floats);
// The same for the bf16 attention ops' widened qkv, which the fp32 attention they call reads
// while it uses the scratch.
float *cpu_widened(cpu_ctx *ctx, size_t floats);
// The same for the fp32 results of matmul_fwd16 / matmul_bwd16 before their rounding (the
// GEMMs they call use the scratch and the widened buffer's neighbour, never this one).
float *cpu_out_stage(cpu_ctx *ctx, size_t floats);

// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major, split into tiles of C over the
// context's threads (K is never split, so each element is summed in one fixed order).
void cpu_gemm(cpu_ctx *ctx, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
              float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
              int ldc);

// Rows [*r0, *r1) of a static partition of n rows over nth threads.
static inline void row_block(size_t n, int tid, int nth, size_t *r0, size_t *r1) {
    *r0 = n * (size_t)tid / (size_t)nth;
    *r1 = n * (size_t)(tid + 1) / (size_t)nth;
}

// Columns [*c0, *c1) of n split over nth threads in units of 16 floats (64 bytes), so no
// two threads write the same cache line of a row.
static inline void col_block(int n, int tid, int nth, int *c0, int *c1) {
    int units = (n + 15) / 16;
    int u0 = (int)((long)units * tid / nth), u1 = (int)((long)units * (tid + 1) / nth);
    *c0 = u0 * 16 < n ? u0 * 16 : n;
    *c1 = u1 * 16 < n ? u1 * 16 : n;
}

// The table's attention entries (backend_cpu_attn.c); bf16 q, k, v are widened into
// cpu_widened's buffer and the fp32 op runs on them. The backward reads no O (out): D comes
// from the probabilities it keeps (backend.h).
// rope_theta: 0 only (attn_rope 0).
void cpu_attention_fwd(backend *b, float *out, void *state, operand qkv, int B, int T, int NH,
                       int NKV, int HS, float rope_theta);
void cpu_attention_bwd(backend *b, float *dqkv, const float *dout, operand qkv, operand out,
                       const void *state, int B, int T, int NH, int NKV, int HS, float rope_theta);

// LayerNorm and the residual add (backend_cpu_norm.c), as backend.h's table states them.
void cpu_layernorm_fwd(backend *b, float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C);
void cpu_layernorm_bwd(backend *b, float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *weight, const float *mean, const float *rstd,
                       int N, int C);
void cpu_residual_fwd(backend *b, float *out, const float *a, const float *c, size_t n);
void cpu_residual_layernorm_fwd(backend *b, float *res, float *out, float *mean, float *rstd,
                                const float *a, const float *c, const float *weight,
                                const float *bias, int N, int C);

// The Llama ops (backend_cpu_llama.c), as backend.h's table states them.
void cpu_rmsnorm_fwd(backend *b, float *out, float *rstd, const float *inp, const float *weight,
                     int N, int C, float eps);
void cpu_rmsnorm_bwd(backend *b, float *dinp, float *dweight, const float *dout, const float *inp,
                     const float *weight, const float *rstd, int N, int C);
void cpu_residual_rmsnorm_fwd(backend *b, float *res, float *out, float *rstd, const float *a,
                              const float *c, const float *weight, int N, int C, float eps);
void cpu_rope_fwd(backend *b, float *qkv, int B, int T, int NH, int NKV, int HS, float theta);
void cpu_rope_bwd(backend *b, float *dqkv, int B, int T, int NH, int NKV, int HS, float theta);
void cpu_swiglu_fwd(backend *b, float *out, const float *fc, int N, int F);
void cpu_swiglu_bwd(backend *b, float *dfc, const float *dout, const float *fc, int N, int F);

// Warns once per process when OpenBLAS runs its generic kernels on an AVX2 CPU
// (backend_cpu_process.c).
void backend_cpu_warn_generic_blas(void);

// The fused bf16 classifier's entries (backend_cpu_xent16.c): the fp32 ops' formulas on the
// widened logits, in the fp32 ops' order.
void cpu_xent_stats16(backend *b, float *rowmax, float *sumexp, float *target_logit,
                      const uint16_t *logits16, const int *targets, int N, int Vp_local,
                      int vocab_start, int V_valid);
void cpu_xent_rescale(backend *b, float *sumexp, const float *rowmax_local, const float *rowmax_all,
                      int N);
void cpu_xent_bwd16(backend *b, uint16_t *logits16, const float *rowmax, const float *sumexp,
                    const int *targets, float dloss, int N, int Vp_local, int vocab_start,
                    int V_valid);

// exp(x) within 2 ulp of expf for x in [-86.9, 88.3]; 0 below (no subnormals), +inf
// above, NaN stays NaN. Cephes' expf: x = n ln2 + r with |r| <= ln2/2, a degree-7
// polynomial for e^r, and 2^n built in the exponent bits. Plain arithmetic, so gcc
// vectorises the loops that call it (glibc's vector expf needs -ffast-math, which the build
// does not use).
//
// Subnormals are avoided on purpose: on x86 each one costs a microcode assist of ~100
// cycles, and a vectorised loop evaluates both arms of the clamps below for every lane. A
// clamp to a finite large value made x / (1 + exp(..)) in GELU subnormal in the discarded
// lanes and the whole loop 5x slower; saturating to exactly 0 and +inf cannot.
static inline float cpu_expf(float x) {
    x = x < -104.0f ? -104.0f : x; // the result is 0 from -87 on; this keeps n in range
    x = x > 89.0f ? 89.0f : x;     // and +inf from 88.4 on
    // Round x / ln2 to nearest: adding 1.5 * 2^23 pushes the fraction bits out.
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f; // ln2 split in two so that n * ln2 is exact
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    // n in [-150, 128]. Below -125, p * 2^n could be subnormal: use 2^-127 encoded as 0.
    // 128 encodes +inf. (A NaN x converts to an unspecified int, but p is NaN already.)
    int32_t e = (int32_t)n;
    e = e < -125 ? -127 : e;
    union {
        float f;
        uint32_t u;
    } pow2n;
    pow2n.u = (uint32_t)(e + 127) << 23;
    return p * pow2n.f;
}

// The multi-tensor optimizer ops (backend_cpu_optim.c): the per-piece ops tensor by tensor.
void cpu_mt_sumsq_add(backend *b, double *acc, const mt_table *t);
void cpu_mt_adamw(backend *b, const mt_table *t, const adamw_step *s);
