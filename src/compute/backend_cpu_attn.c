// backend_cpu_attn.c: causal multi-head attention of the CPU backend, one sgemm per product.
//
// Per head (b, h), with Q, K, V the (T, HS) slices of qkv (row stride (NH + 2 NKV) HS; query
// head h reads key/value head h / (NH / NKV), grouped-query attention; GPT-2: NKV = NH):
//   forward:  S = Q K^T / sqrt(HS), P = causal softmax(S) (saved: state (B, NH, T, T)),
//             O = P V
//   backward: dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dV = P^T dO,
//             dQ = dS K / sqrt(HS), dK = dS^T Q / sqrt(HS); D = rowsum(P * dP) equals
//             rowsum(dO * O), which flash-style backends read O for (backend.h); here P
//             and dP are at hand, so the O operand goes unread
// Causality: rows are taken in blocks of ATTN_BLOCK; row block i only multiplies against
// columns [0, end of block i), so the GEMMs skip most of the masked upper triangle
// (5/8 of the full work at T = 4 blocks instead of 1/2 ideal, in GEMMs large enough to
// run at full rate). P is exactly 0 above the diagonal, so the diagonal blocks can be
// multiplied whole.
//
// Threads: OpenMP over the B * NH heads (each thread its own single-threaded sgemms and
// dP scratch) when there are at least as many heads as threads, else heads in turn with
// the GEMMs tiled and the softmax rows split over the threads. Measured in
// tests/test_ops_attn --bench (B=2 T=256 NH=12 HS=64 and B=8 T=256 NH=4 HS=32 on 2 threads)
// the head-parallel form is the faster one whenever it applies.
#include "compute/backend_cpu_internal.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define ATTN_BLOCK 64

static inline int min_int(int a, int b) { return a < b ? a : b; }

static int attn_heads_parallel(const cpu_ctx *ctx, int heads) {
    if (ctx->attn_policy == CPU_ATTN_HEADS) return 1;
    if (ctx->attn_policy == CPU_ATTN_INNER) return 0;
    return heads >= ctx->threads;
}

// Where head h's q and its group's k and v start in row 0 of sequence b of qkv, and qkv's
// row stride. With NKV = NH (GPT-2) k and v are at +C and +2C of q, as they always were.
typedef struct {
    int ld, C;         // row stride of qkv ((NH + 2 NKV) HS) and of out (NH HS)
    size_t q, k, v, o; // offsets of head (b, h) in qkv and in out
} attn_head_at;

static attn_head_at head_at(int bb, int h, int T, int NH, int NKV, int HS) {
    const int C = NH * HS, ld = (NH + 2 * NKV) * HS, kvh = h / (NH / NKV);
    const size_t row0 = (size_t)bb * T * ld;
    attn_head_at a = {ld,
                      C,
                      row0 + (size_t)h * HS,
                      row0 + (size_t)C + (size_t)kvh * HS,
                      row0 + (size_t)C + (size_t)(NKV + kvh) * HS,
                      (size_t)bb * T * C + (size_t)h * HS};
    return a;
}

// One head, at `at` in qkv and out. P (T, T) is this head's state; `inner` threads split the
// softmax rows (1 inside a head-parallel region).
static void attn_fwd_head(cpu_ctx *ctx, float *out, float *P, const float *qkv, attn_head_at at,
                          int T, int HS, int inner) {
    const int ld = at.ld, C = at.C;
    const float *q = qkv + at.q, *k = qkv + at.k, *v = qkv + at.v;
    out += at.o;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int i0 = 0; i0 < T; i0 += ATTN_BLOCK) {
        const int rows = min_int(ATTN_BLOCK, T - i0), cols = i0 + rows;
        cpu_gemm(ctx, CblasNoTrans, CblasTrans, rows, cols, HS, scale, q + (size_t)i0 * ld, ld, k,
                 ld, 0.0f, P + (size_t)i0 * T, T);
#pragma omp parallel for schedule(static) num_threads(inner) if (inner > 1)
        for (int t = i0; t < i0 + rows; t++) {
            float *restrict p = P + (size_t)t * T;
            float m = -INFINITY;
#pragma omp simd reduction(max : m)
            for (int j = 0; j <= t; j++) m = p[j] > m ? p[j] : m;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j <= t; j++) {
                p[j] = cpu_expf(p[j] - m);
                sum += p[j];
            }
            const float inv = 1.0f / sum;
#pragma omp simd
            for (int j = 0; j <= t; j++) p[j] *= inv;
            memset(p + t + 1, 0, (size_t)(T - t - 1) * sizeof(float)); // the causal mask
        }
        cpu_gemm(ctx, CblasNoTrans, CblasNoTrans, rows, HS, cols, 1.0f, P + (size_t)i0 * T, T, v,
                 ld, 0.0f, out + (size_t)i0 * C, C);
    }
}

// One head's backward. dS (T, T) is scratch; only its causal blocks are written and read.
// dk and dv are overwritten (acc 0) or added to (acc 1: the group's later query heads).
static void attn_bwd_head(cpu_ctx *ctx, float *dqkv, const float *dout, const float *qkv,
                          const float *P, float *dS, attn_head_at at, int T, int HS, int inner,
                          int acc) {
    const int ld = at.ld, C = at.C;
    const float *q = qkv + at.q, *k = qkv + at.k, *v = qkv + at.v;
    float *dq = dqkv + at.q, *dk = dqkv + at.k, *dv = dqkv + at.v;
    const float beta = acc ? 1.0f : 0.0f;
    dout += at.o;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int i0 = 0; i0 < T; i0 += ATTN_BLOCK) {
        const int rows = min_int(ATTN_BLOCK, T - i0), cols = i0 + rows;
        // dP rows of this block
        cpu_gemm(ctx, CblasNoTrans, CblasTrans, rows, cols, HS, 1.0f, dout + (size_t)i0 * C, C, v,
                 ld, 0.0f, dS + (size_t)i0 * T, T);
#pragma omp parallel for schedule(static) num_threads(inner) if (inner > 1)
        for (int t = i0; t < i0 + rows; t++) {
            const float *restrict p = P + (size_t)t * T;
            float *restrict d = dS + (size_t)t * T;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j <= t; j++) dot += p[j] * d[j];
#pragma omp simd
            for (int j = 0; j <= t; j++) d[j] = p[j] * (d[j] - dot);
            // The rest of the diagonal block is read by the GEMMs below.
            for (int j = t + 1; j < cols; j++) d[j] = 0.0f;
        }
        cpu_gemm(ctx, CblasNoTrans, CblasNoTrans, rows, HS, cols, scale, dS + (size_t)i0 * T, T, k,
                 ld, 0.0f, dq + (size_t)i0 * ld, ld);
    }
    // dV and dK by column block j: only rows >= j0 are nonzero in P[:, j] and dS[:, j].
    for (int j0 = 0; j0 < T; j0 += ATTN_BLOCK) {
        const int cb = min_int(ATTN_BLOCK, T - j0), R = T - j0;
        cpu_gemm(ctx, CblasTrans, CblasNoTrans, cb, HS, R, 1.0f, P + (size_t)j0 * T + j0, T,
                 dout + (size_t)j0 * C, C, beta, dv + (size_t)j0 * ld, ld);
        cpu_gemm(ctx, CblasTrans, CblasNoTrans, cb, HS, R, scale, dS + (size_t)j0 * T + j0, T,
                 q + (size_t)j0 * ld, ld, beta, dk + (size_t)j0 * ld, ld);
    }
}

static void attention_fwd_f32(backend *b, float *out, void *state, const float *qkv, int B, int T,
                              int NH, int NKV, int HS) {
    cpu_ctx *ctx = b->ctx;
    const int heads = B * NH;
    float *P = state;
    if (attn_heads_parallel(ctx, heads)) {
#pragma omp parallel for schedule(static) num_threads(ctx->threads)
        for (int bh = 0; bh < heads; bh++)
            attn_fwd_head(ctx, out, P + (size_t)bh * T * T, qkv,
                          head_at(bh / NH, bh % NH, T, NH, NKV, HS), T, HS, 1);
    } else {
        for (int bh = 0; bh < heads; bh++)
            attn_fwd_head(ctx, out, P + (size_t)bh * T * T, qkv,
                          head_at(bh / NH, bh % NH, T, NH, NKV, HS), T, HS, ctx->threads);
    }
}

// The backward goes by key/value head: its group's query heads in turn (in head order, so dk
// and dv sum in one fixed order), the groups of all (b, kv head) in parallel.
static void attention_bwd_f32(backend *b, float *dqkv, const float *dout, const float *qkv,
                              const void *state, int B, int T, int NH, int NKV, int HS) {
    cpu_ctx *ctx = b->ctx;
    const int groups = B * NKV, G = NH / NKV;
    const float *P = state;
    if (attn_heads_parallel(ctx, groups)) {
        float *dS_all = cpu_scratch(ctx, (size_t)ctx->threads * T * T);
#pragma omp parallel num_threads(ctx->threads)
        {
            float *dS = dS_all + (size_t)omp_get_thread_num() * T * T;
#pragma omp for schedule(static)
            for (int bk = 0; bk < groups; bk++) {
                const int bb = bk / NKV;
                for (int g = 0; g < G; g++) {
                    const int h = bk % NKV * G + g;
                    attn_bwd_head(ctx, dqkv, dout, qkv, P + ((size_t)bb * NH + h) * T * T, dS,
                                  head_at(bb, h, T, NH, NKV, HS), T, HS, 1, g > 0);
                }
            }
        }
    } else {
        float *dS = cpu_scratch(ctx, (size_t)T * T);
        for (int bk = 0; bk < groups; bk++) {
            const int bb = bk / NKV;
            for (int g = 0; g < G; g++) {
                const int h = bk % NKV * G + g;
                attn_bwd_head(ctx, dqkv, dout, qkv, P + ((size_t)bb * NH + h) * T * T, dS,
                              head_at(bb, h, T, NH, NKV, HS), T, HS, ctx->threads, g > 0);
            }
        }
    }
}

// The typed entries: bf16 q, k, v widened (exactly) into the backend's own buffer, then the
// fp32 op on them.
static const float *qkv_f32(backend *b, operand qkv, int B, int T, int NH, int NKV, int HS) {
    if (qkv.dtype != DTYPE_BF16) return qkv.ptr;
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    float *wide = cpu_widened(b->ctx, n);
    b->from_bf16(b, wide, qkv.ptr, n);
    return wide;
}

void cpu_attention_fwd(backend *b, float *out, void *state, operand qkv, int B, int T, int NH,
                       int NKV, int HS, float rope_theta) {
    TRI_ASSERT(rope_theta == 0.0f); // attn_rope 0: the model runs rope_fwd itself
    attention_fwd_f32(b, out, state, qkv_f32(b, qkv, B, T, NH, NKV, HS), B, T, NH, NKV, HS);
}

void cpu_attention_bwd(backend *b, float *dqkv, const float *dout, operand qkv, operand out,
                       const void *state, int B, int T, int NH, int NKV, int HS, float rope_theta) {
    TRI_ASSERT(rope_theta == 0.0f);
    (void)out; // D = rowsum(P * dP), from the kept P (backend.h)
    attention_bwd_f32(b, dqkv, dout, qkv_f32(b, qkv, B, T, NH, NKV, HS), state, B, T, NH, NKV, HS);
}
