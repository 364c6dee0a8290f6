// backend_cpu.c: the CPU compute backend (OpenBLAS sgemm + OpenMP loops), fp32 host memory.
//
// Threading: all parallelism is OpenMP with num_threads(ctx->threads); OpenBLAS is set to
// one thread and cpu_gemm splits a GEMM into output tiles, one per OpenMP thread. Measured
// on 2 cores (tests/test_ops_attn --bench): a threaded OpenBLAS called right after an OpenMP
// loop ran ~30% slower than in isolation, because libgomp's workers spin-wait on the cores
// OpenBLAS's own pool needs; the tiled GEMM on the OpenMP pool loses nothing.
//
// Determinism: no result depends on thread timing. Reductions over rows (layernorm
// dweight/dbias, sumsq) use a static partition per thread and combine partials in thread
// order, so they are bitwise reproducible for a given thread count; dbias and the
// embedding backward are partitioned over columns and independent of the thread count.
//
// Attention lives in backend_cpu_attn.c.
#include "compute/backend_cpu_internal.h"

#include <math.h>
#include <omp.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "base/bf16.h"
#include "base/env.h"

static inline cpu_ctx *ctx_of(backend *b) { return (cpu_ctx *)b->ctx; }

// ---------------------------------------------------------------------------------------
// Memory. Each block carries a 64-byte header with its size, so free() can account for it
// and the user pointer stays 64-byte aligned.

#define CPU_ALLOC_ALIGN 64
#define CPU_ALLOC_MAGIC 0x74726964656e7431ULL // "trident1"

typedef struct {
    size_t bytes;
    uint64_t magic;
} alloc_header;

static void *cpu_alloc(backend *b, size_t bytes) {
    void *raw = NULL;
    size_t total = CPU_ALLOC_ALIGN +
                   (bytes + CPU_ALLOC_ALIGN - 1) / CPU_ALLOC_ALIGN * CPU_ALLOC_ALIGN;
    if (posix_memalign(&raw, CPU_ALLOC_ALIGN, total) != 0) return NULL;
    memset(raw, 0, total);
    alloc_header *h = raw;
    h->bytes = bytes;
    h->magic = CPU_ALLOC_MAGIC;
    cpu_ctx *ctx = ctx_of(b);
    atomic_fetch_add(&ctx->allocs, 1);
    size_t now = atomic_fetch_add(&ctx->mem_current, bytes) + bytes;
    size_t peak = atomic_load(&ctx->mem_peak);
    while (now > peak && !atomic_compare_exchange_weak(&ctx->mem_peak, &peak, now)) {
    }
    return (char *)raw + CPU_ALLOC_ALIGN;
}

static void cpu_free(backend *b, void *ptr) {
    if (!ptr) return;
    alloc_header *h = (alloc_header *)((char *)ptr - CPU_ALLOC_ALIGN);
    TRI_ASSERT(h->magic == CPU_ALLOC_MAGIC); // not from this backend, or freed twice
    h->magic = 0;
    atomic_fetch_sub(&ctx_of(b)->mem_current, h->bytes);
    free(h);
}

static size_t cpu_mem_peak_bytes(backend *b) { return atomic_load(&ctx_of(b)->mem_peak); }

// The CPU's workspaces are host memory, grown on demand: growing one synchronises nothing,
// so nothing is sized ahead.
static tri_status cpu_reserve(backend *b, const backend_shapes *s) {
    (void)b, (void)s;
    return TRI_OK;
}

static uint64_t cpu_alloc_count(backend *b) { return atomic_load(&ctx_of(b)->allocs); }

static void cpu_copy(backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_memset_zero(backend *b, void *ptr, size_t bytes) {
    (void)b;
    if (bytes) memset(ptr, 0, bytes);
}

static void cpu_synchronize(backend *b) { (void)b; }

// *buf grown (never shrunk) to at least `floats` floats, 64-byte aligned.
static float *grow(float **buf, size_t *cap, size_t floats) {
    if (floats > *cap) {
        free(*buf);
        void *p = NULL;
        size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
        if (posix_memalign(&p, 64, bytes) != 0) {
            fprintf(stderr, "trident: out of host memory allocating %zu bytes of scratch\n", bytes);
            abort();
        }
        *buf = p;
        *cap = floats;
    }
    return *buf;
}

float *cpu_scratch(cpu_ctx *ctx, size_t floats) {
    return grow(&ctx->scratch, &ctx->scratch_floats, floats);
}

float *cpu_widened(cpu_ctx *ctx, size_t floats) {
    return grow(&ctx->widened, &ctx->widened_floats, floats);
}

float *cpu_out_stage(cpu_ctx *ctx, size_t floats) {
    return grow(&ctx->out_stage, &ctx->out_stage_floats, floats);
}

// ---------------------------------------------------------------------------------------
// GEMM

// Below this many multiply-adds a GEMM runs on the calling thread: a parallel region costs
// a few microseconds, which is about what 2^19 multiply-adds take on one core.
#define CPU_GEMM_SPLIT_MIN ((double)(1 << 19))

// One GEMM C = alpha op(A) op(B) + beta C, split for the threads of a parallel region: a grid
// pm x pn = nt of tiles of C minimising the tile's half-perimeter (what each thread packs of
// A and B; ties go to splitting N, whose blocks are contiguous in B), or one tile (serial)
// below CPU_GEMM_SPLIT_MIN. With `bias`, each tile of C starts as the bias row (beta 1).
typedef struct {
    CBLAS_TRANSPOSE ta, tb;
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B, *bias;
    float *C;
    int pm, pn, serial;
} gemm_job;

static void gemm_plan(gemm_job *g, int nt) {
    g->serial = nt <= 1 || (double)g->M * g->N * g->K < CPU_GEMM_SPLIT_MIN;
    g->pm = 1, g->pn = nt;
    double best = 1e300;
    for (int m = 1; m <= nt && !g->serial; m++) {
        if (nt % m) continue;
        int n = nt / m;
        double cost = ceil((double)g->M / m) + ceil((double)g->N / n);
        if (cost < best || (cost == best && n > g->pn)) best = cost, g->pm = m, g->pn = n;
    }
}

// The tiles of g that thread tid of nth runs (a serial GEMM: thread 0, whole). If the runtime
// gave fewer threads than planned, each thread walks several tiles.
static void gemm_tiles(const gemm_job *g, int tid, int nth) {
    if (g->M <= 0 || g->N <= 0) return;
    const int pm = g->serial ? 1 : g->pm, pn = g->serial ? 1 : g->pn;
    for (int tile = tid; tile < pm * pn; tile += nth) {
        size_t m0, m1;
        int n0, n1;
        row_block((size_t)g->M, tile / pn, pm, &m0, &m1);
        col_block(g->N, tile % pn, pn, &n0, &n1);
        if (m1 <= m0 || n1 <= n0) continue;
        float *c = g->C + m0 * (size_t)g->ldc + n0;
        for (size_t m = m0; g->bias && m < m1; m++)
            memcpy(c + (m - m0) * (size_t)g->ldc, g->bias + n0, (size_t)(n1 - n0) * sizeof(float));
        const float *a = g->ta == CblasNoTrans ? g->A + m0 * (size_t)g->lda : g->A + m0;
        const float *bt = g->tb == CblasNoTrans ? g->B + n0 : g->B + (size_t)n0 * g->ldb;
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, (int)(m1 - m0), n1 - n0, g->K, g->alpha, a, g->lda,
                    bt, g->ldb, g->bias ? 1.0f : g->beta, c, g->ldc);
    }
}

// g planned for the backend's threads and run: on the calling thread when serial (or already
// inside a parallel region), else in one parallel region.
static void gemm_run(cpu_ctx *ctx, gemm_job *g) {
    if (g->M <= 0 || g->N <= 0) return;
    gemm_plan(g, omp_in_parallel() ? 1 : ctx->threads);
    if (g->serial) {
        gemm_tiles(g, 0, 1);
        return;
    }
#pragma omp parallel num_threads(ctx->threads)
    gemm_tiles(g, omp_get_thread_num(), omp_get_num_threads());
}

// The job of cblas_sgemm's arguments (row-major), with no bias.
static gemm_job gemm_of(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                        const float *A, int lda, const float *B, int ldb, float beta, float *C,
                        int ldc) {
    return (gemm_job){.ta = ta,
                      .tb = tb,
                      .M = M,
                      .N = N,
                      .K = K,
                      .lda = lda,
                      .ldb = ldb,
                      .ldc = ldc,
                      .alpha = alpha,
                      .beta = beta,
                      .A = A,
                      .B = B,
                      .C = C};
}

void cpu_gemm(cpu_ctx *ctx, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
              float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
              int ldc) {
    gemm_job g = gemm_of(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm_run(ctx, &g);
}

// fp32 operands. A bias starts each tile of the output (beta = 1: OpenBLAS would otherwise
// spend a pass over `out` zeroing it for beta = 0), inside the GEMM's parallel region: one
// region a call, each waking the idle threads once (README "CPU threads").
static void matmul_fwd_f32(backend *b, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int IC, int OC) {
    gemm_job g = gemm_of(CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out,
                         OC);
    g.bias = bias;
    gemm_run(ctx_of(b), &g);
}

// dbias += the column sums of dout's rows, for the columns of thread tid of nth: each thread
// walks the rows in order, so the result is the same for every thread count.
static void dbias_cols(float *dbias, const float *dout, int N, int OC, int tid, int nth) {
    int c0, c1;
    col_block(OC, tid, nth, &c0, &c1);
    float *restrict db = dbias;
    for (int n = 0; n < N; n++) {
        const float *restrict row = dout + (size_t)n * OC;
#pragma omp simd
        for (int c = c0; c < c1; c++) db[c] += row[c];
    }
}

// Each output has its own GEMM or loop: the input gradient alone (dweight and dbias NULL) or
// the weight gradients alone (dinp NULL) are bitwise the joint call's. The three run in one
// parallel region (they write different outputs), each split as it would be alone.
static void matmul_bwd_f32(backend *b, float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, int N, int IC, int OC) {
    cpu_ctx *ctx = ctx_of(b);
    const int nt = omp_in_parallel() ? 1 : ctx->threads;
    gemm_job gd = gemm_of(CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f,
                          dinp, IC);
    gemm_job gw = gemm_of(CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f,
                          dweight, IC);
    gemm_plan(&gd, nt);
    gemm_plan(&gw, nt);
    if (nt <= 1) {
        if (dinp) gemm_tiles(&gd, 0, 1);
        if (dweight) gemm_tiles(&gw, 0, 1);
        if (dbias) dbias_cols(dbias, dout, N, OC, 0, 1);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        if (dinp) gemm_tiles(&gd, tid, nth);
        if (dweight) gemm_tiles(&gw, tid, nth);
        if (dbias) dbias_cols(dbias, dout, N, OC, tid, nth);
    }
}

// ---------------------------------------------------------------------------------------
// LayerNorm and the residual add: backend_cpu_norm.c

// gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//              = x * sigmoid(2u), since 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)).
#define GELU_K0 0.7978845608028654f // sqrt(2/pi)
#define GELU_K1 0.044715f

static void cpu_gelu_fwd(backend *b, float *out, const float *inp, size_t n) {
    float *restrict y = out;
    const float *restrict x = inp;
#pragma omp parallel for simd schedule(static) num_threads(ctx_of(b)->threads)
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        float u = GELU_K0 * (xi + GELU_K1 * xi * xi * xi);
        y[i] = xi * (1.0f / (1.0f + cpu_expf(-2.0f * u)));
    }
}

static void cpu_gelu_bwd(backend *b, float *dinp, const float *inp, const float *dout, size_t n) {
    // d/dx = s + 2 x s (1 - s) du/dx with s = sigmoid(2u) (from 1 - tanh^2 = 4 s (1 - s)).
    // dinp may alias dout: element i reads dout[i] before writing dinp[i].
    const float *restrict x = inp;
#pragma omp parallel for simd schedule(static) num_threads(ctx_of(b)->threads)
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        float u = GELU_K0 * (xi + GELU_K1 * xi * xi * xi);
        float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * xi * xi);
        float s = 1.0f / (1.0f + cpu_expf(-2.0f * u));
        dinp[i] = (s + 2.0f * xi * s * (1.0f - s) * du) * dout[i];
    }
}

// ---------------------------------------------------------------------------------------
// Embeddings

static void cpu_embedding_fwd(backend *b, float *out, const int *tokens, const float *wte,
                              const float *wpe, int B, int T, int C, int vocab_start, int V_local,
                              int add_pos) {
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (int bt = 0; bt < B * T; bt++) {
        float *restrict y = out + (size_t)bt * C;
        int local = tokens[bt] - vocab_start;
        const float *restrict e = local >= 0 && local < V_local ? wte + (size_t)local * C : NULL;
        const float *restrict p = add_pos ? wpe + (size_t)(bt % T) * C : NULL;
        if (e && p) {
#pragma omp simd
            for (int i = 0; i < C; i++) y[i] = e[i] + p[i];
        } else if (e) {
            memcpy(y, e, (size_t)C * sizeof(float));
        } else if (p) {
            memcpy(y, p, (size_t)C * sizeof(float));
        } else {
            memset(y, 0, (size_t)C * sizeof(float));
        }
    }
}

static void cpu_embedding_bwd(backend *b, float *dwte, float *dwpe, const float *dout,
                              const int *tokens, int B, int T, int C, int vocab_start,
                              int V_local) {
    // Each thread owns a column slice of dwte and dwpe and walks the tokens in order, so
    // repeated tokens add up in one fixed order whatever the thread count.
#pragma omp parallel num_threads(ctx_of(b)->threads)
    {
        int c0, c1;
        col_block(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int bt = 0; bt < B * T; bt++) {
            int local = tokens[bt] - vocab_start;
            if (local < 0 || local >= V_local) continue;
            float *restrict dw = dwte + (size_t)local * C;
            const float *restrict dy = dout + (size_t)bt * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) dw[c] += dy[c];
        }
        if (dwpe) {
            for (int t = 0; t < T; t++) {
                float *restrict dp = dwpe + (size_t)t * C;
                for (int bb = 0; bb < B; bb++) {
                    const float *restrict dy = dout + ((size_t)bb * T + t) * C;
#pragma omp simd
                    for (int c = c0; c < c1; c++) dp[c] += dy[c];
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Vocab-parallel softmax cross-entropy

// Number of this rank's columns that are real vocabulary entries.
static inline int xent_real_cols(int Vp_local, int vocab_start, int V_valid) {
    int n = V_valid - vocab_start;
    return n < 0 ? 0 : n > Vp_local ? Vp_local : n;
}

static void cpu_xent_max(backend *b, float *rowmax, const float *logits, int N, int Vp_local,
                         int vocab_start, int V_valid) {
    const int nreal = xent_real_cols(Vp_local, vocab_start, V_valid);
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (int n = 0; n < N; n++) {
        const float *restrict row = logits + (size_t)n * Vp_local;
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int c = 0; c < nreal; c++) m = row[c] > m ? row[c] : m;
        rowmax[n] = m;
    }
}

// Columns per float partial sum in xent_sumexp: short float runs (summed in SIMD lanes)
// added into a double, so a 50k-column row keeps ~1e-7 relative accuracy.
#define XENT_CHUNK 512

static void cpu_xent_sumexp(backend *b, float *sumexp, float *target_logit, const float *logits,
                            const float *rowmax, const int *targets, int N, int Vp_local,
                            int vocab_start, int V_valid) {
    const int nreal = xent_real_cols(Vp_local, vocab_start, V_valid);
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (int n = 0; n < N; n++) {
        const float *restrict row = logits + (size_t)n * Vp_local;
        const float m = rowmax[n];
        double total = 0.0;
        for (int c0 = 0; c0 < nreal; c0 += XENT_CHUNK) {
            int c1 = c0 + XENT_CHUNK < nreal ? c0 + XENT_CHUNK : nreal;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int c = c0; c < c1; c++) s += cpu_expf(row[c] - m);
            total += s;
        }
        sumexp[n] = (float)total;
        int local = targets[n] - vocab_start;
        target_logit[n] = local >= 0 && local < nreal ? row[local] : 0.0f;
    }
}

static void cpu_xent_loss(backend *b, float *losses, const float *rowmax, const float *sumexp,
                          const float *target_logit, int N) {
    (void)b; // N logs: not worth a parallel region
    for (int n = 0; n < N; n++) losses[n] = logf(sumexp[n]) + rowmax[n] - target_logit[n];
}

static void cpu_xent_bwd(backend *b, float *logits, const float *rowmax, const float *sumexp,
                         const int *targets, float dloss, int N, int Vp_local, int vocab_start,
                         int V_valid) {
    const int nreal = xent_real_cols(Vp_local, vocab_start, V_valid);
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (int n = 0; n < N; n++) {
        float *restrict row = logits + (size_t)n * Vp_local;
        const float m = rowmax[n], scale = dloss / sumexp[n];
#pragma omp simd
        for (int c = 0; c < nreal; c++) row[c] = cpu_expf(row[c] - m) * scale;
        for (int c = nreal; c < Vp_local; c++) row[c] = 0.0f;
        int local = targets[n] - vocab_start;
        if (local >= 0 && local < nreal) row[local] -= dloss;
    }
}

// ---------------------------------------------------------------------------------------
// Optimizer and reductions

// Sum of squares over [i0, i1) in double with four independent accumulators: with one,
// the loop would wait out the add latency (4 cycles) per 4 elements instead of running at
// memory speed. gcc's own vectorisation of this (omp simd reduction, vector types) kept
// one chain or split the float->double conversions, so the AVX path is written out.
static double sumsq_range(const float *restrict x, size_t i0, size_t i1) {
    size_t i = i0;
    double s = 0.0;
#if defined(__AVX__)
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 16 <= i1; i += 16) {
        __m256d d0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        __m256d d1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        __m256d d2 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8));
        __m256d d3 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12));
        a0 = _mm256_add_pd(a0, _mm256_mul_pd(d0, d0));
        a1 = _mm256_add_pd(a1, _mm256_mul_pd(d1, d1));
        a2 = _mm256_add_pd(a2, _mm256_mul_pd(d2, d2));
        a3 = _mm256_add_pd(a3, _mm256_mul_pd(d3, d3));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
    s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#else
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    for (; i + 4 <= i1; i += 4) {
        a0 += (double)x[i] * (double)x[i];
        a1 += (double)x[i + 1] * (double)x[i + 1];
        a2 += (double)x[i + 2] * (double)x[i + 2];
        a3 += (double)x[i + 3] * (double)x[i + 3];
    }
    s = (a0 + a1) + (a2 + a3);
#endif
    for (; i < i1; i++) s += (double)x[i] * (double)x[i];
    return s;
}

static double cpu_sumsq(backend *b, const float *x, size_t n) {
    cpu_ctx *ctx = ctx_of(b);
    // Doubles in the float scratch: the memory has no declared type, so this is allowed.
    double *partial = (double *)(void *)cpu_scratch(ctx, 2 * (size_t)ctx->threads);
    int used = 1;
#pragma omp parallel num_threads(ctx->threads)
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        size_t i0, i1;
        row_block(n, tid, nth, &i0, &i1);
        partial[tid] = sumsq_range(x, i0, i1);
        if (tid == 0) used = nth;
    }
    double total = 0.0;
    for (int t = 0; t < used; t++) total += partial[t];
    return total;
}

static void cpu_sumsq_add(backend *b, double *acc, const float *x, size_t n) {
    *acc += cpu_sumsq(b, x, n);
}

static void cpu_loss_sum(backend *b, double *acc, const float *losses, size_t n) {
    (void)b;
    double s = 0.0; // in order: a few thousand values, once per micro-batch
    for (size_t i = 0; i < n; i++) s += losses[i];
    *acc += s;
}

static void cpu_scale(backend *b, float *x, float s, size_t n) {
    float *restrict xs = x;
#pragma omp parallel for simd schedule(static) num_threads(ctx_of(b)->threads)
    for (size_t i = 0; i < n; i++) xs[i] *= s;
}

static void cpu_to_bf16(backend *b, uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]);
}

static void cpu_from_bf16(backend *b, float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

static void cpu_add_to_bf16(backend *b, uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_f32(bf16_to_f32(dst[i]) + src[i]);
}

// bf16 operands: widened exactly into the backend's scratch, then the fp32 products above
// (backend.h: a product of two bf16 values is exact in fp32, so this is what a bf16 GEMM
// with fp32 accumulation computes, up to the order of the sums).
static void matmul_fwd_bf16(backend *b, float *out, const uint16_t *inp, const uint16_t *weight,
                            const float *bias, int N, int IC, int OC) {
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC;
    float *w_inp = cpu_scratch(ctx_of(b), ni + nw), *w_weight = w_inp + ni;
    cpu_from_bf16(b, w_inp, inp, ni);
    cpu_from_bf16(b, w_weight, weight, nw);
    matmul_fwd_f32(b, out, w_inp, w_weight, bias, N, IC, OC);
}

static void matmul_bwd_bf16(backend *b, float *dinp, float *dweight, float *dbias,
                            const uint16_t *dout, const uint16_t *inp, const uint16_t *weight,
                            int N, int IC, int OC) {
    const size_t no = (size_t)N * OC, ni = (size_t)N * IC, nw = (size_t)OC * IC;
    float *w_dout = cpu_scratch(ctx_of(b), no + ni + nw), *w_inp = w_dout + no,
          *w_weight = w_inp + ni;
    // Only the operands of the outputs asked for (the split forms): the weight for dinp, the
    // input for dweight.
    cpu_from_bf16(b, w_dout, dout, no);
    if (dweight) cpu_from_bf16(b, w_inp, inp, ni);
    if (dinp) cpu_from_bf16(b, w_weight, weight, nw);
    matmul_bwd_f32(b, dinp, dweight, dbias, w_dout, w_inp, w_weight, N, IC, OC);
}

// The table's entries: the GEMMs of the operands' dtype (backend_matmul_fwd / _bwd checked
// that they agree). The GELU is never fused (the CPU gains nothing from it): the GEMM goes to
// gelu_pre, and backend_matmul_fwd / _bwd run the GELU ops after it.
static int cpu_matmul_fwd(backend *b, float *out, float *gelu_pre, operand inp, operand weight,
                          const float *bias, int N, int IC, int OC) {
    float *pre = gelu_pre ? gelu_pre : out;
    if (inp.dtype == DTYPE_BF16) matmul_fwd_bf16(b, pre, inp.ptr, weight.ptr, bias, N, IC, OC);
    else matmul_fwd_f32(b, pre, inp.ptr, weight.ptr, bias, N, IC, OC);
    return 0;
}

static int cpu_matmul_bwd(backend *b, float *dinp, float *dweight, float *dbias, operand dout,
                          operand inp, operand weight, const float *gelu_pre, int N, int IC,
                          int OC) {
    (void)gelu_pre;
    if (dout.dtype == DTYPE_BF16)
        matmul_bwd_bf16(b, dinp, dweight, dbias, dout.ptr, inp.ptr, weight.ptr, N, IC, OC);
    else matmul_bwd_f32(b, dinp, dweight, dbias, dout.ptr, inp.ptr, weight.ptr, N, IC, OC);
    return 0;
}

// bf16 outputs (TRIDENT_TEST_CPU_BF16_OUT): the fp32 op above into the output stage, then
// rounded, which is what the model's fp32 route computes with a to_bf16 after it: the same
// ops on the same values in the same order, so the two routes agree bitwise here (the test
// that the model routes its bf16 outputs right, on a machine without a GPU).
static void cpu_matmul_fwd16(backend *b, uint16_t *out16, uint16_t *pre16, operand inp,
                             operand weight, const float *bias, int N, int IC, int OC) {
    const size_t n = (size_t)N * OC;
    float *pre = cpu_out_stage(ctx_of(b), pre16 ? 2 * n : n), *out = pre16 ? pre + n : pre;
    matmul_fwd_bf16(b, pre, inp.ptr, weight.ptr, bias, N, IC, OC);
    if (pre16) {
        cpu_gelu_fwd(b, out, pre, n);
        cpu_to_bf16(b, pre16, pre, n);
    }
    cpu_to_bf16(b, out16, out, n);
}

static void cpu_matmul_bwd16(backend *b, uint16_t *dinp16, float *dweight, float *dbias,
                             operand dout, operand inp, operand weight, const uint16_t *pre16,
                             int N, int IC, int OC) {
    const size_t n = (size_t)N * IC;
    if (!dinp16) { // the weight gradients only (backend.h)
        matmul_bwd_bf16(b, NULL, dweight, dbias, dout.ptr, inp.ptr, weight.ptr, N, IC, OC);
        return;
    }
    float *dinp = cpu_out_stage(ctx_of(b), pre16 ? 2 * n : n), *pre = dinp + n;
    matmul_bwd_bf16(b, dinp, dweight, dbias, dout.ptr, inp.ptr, weight.ptr, N, IC, OC);
    if (pre16) {
        cpu_from_bf16(b, pre, pre16, n);
        cpu_gelu_bwd(b, dinp, pre, dinp, n);
    }
    cpu_to_bf16(b, dinp16, dinp, n);
}

typedef struct {
    float lr, beta1, beta2, eps, wd, grad_scale, inv_bc1, inv_bc2;
} adamw_coef;

static inline void adamw_scalar(float *p, const float *g, float *m, float *v, size_t i,
                                const adamw_coef *k) {
    float gi = g[i] * k->grad_scale;
    float mi = k->beta1 * m[i] + (1.0f - k->beta1) * gi;
    float vi = k->beta2 * v[i] + (1.0f - k->beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float update = (mi * k->inv_bc1) / (sqrtf(vi * k->inv_bc2) + k->eps);
    p[i] -= k->lr * (update + k->wd * p[i]);
}

// AdamW over [i0, i1). gcc will not vectorise sqrtf without -fno-math-errno (which the
// build does not set, and which an optimize attribute does not reach), so the AVX path is
// written out; it computes the same expression as adamw_scalar, element for element.
static void adamw_range(float *restrict p, const float *restrict g, float *restrict m,
                        float *restrict v, size_t i0, size_t i1, const adamw_coef *k) {
    size_t i = i0;
#if defined(__AVX__)
    const __m256 gs = _mm256_set1_ps(k->grad_scale), b1 = _mm256_set1_ps(k->beta1),
                 b2 = _mm256_set1_ps(k->beta2), ob1 = _mm256_set1_ps(1.0f - k->beta1),
                 ob2 = _mm256_set1_ps(1.0f - k->beta2), ibc1 = _mm256_set1_ps(k->inv_bc1),
                 ibc2 = _mm256_set1_ps(k->inv_bc2), eps = _mm256_set1_ps(k->eps),
                 lr = _mm256_set1_ps(k->lr), wd = _mm256_set1_ps(k->wd);
    for (; i + 8 <= i1; i += 8) {
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gs);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)),
                                  _mm256_mul_ps(ob1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(_mm256_mul_ps(ob2, gi), gi));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, ibc2)), eps);
        __m256 update = _mm256_div_ps(_mm256_mul_ps(mi, ibc1), den);
        __m256 pi = _mm256_loadu_ps(p + i);
        pi = _mm256_sub_ps(pi, _mm256_mul_ps(lr, _mm256_add_ps(update, _mm256_mul_ps(wd, pi))));
        _mm256_storeu_ps(p + i, pi);
    }
#endif
    for (; i < i1; i++) adamw_scalar(p, g, m, v, i, k);
}

static void cpu_adamw(backend *b, float *param, const float *grad, float *m, float *v, size_t n,
                      const adamw_step *s, uint16_t *param16) {
    adamw_coef k = {
        .lr = s->lr,
        .beta1 = s->beta1,
        .beta2 = s->beta2,
        .eps = s->eps,
        .wd = s->weight_decay,
        .grad_scale = s->grad_scale,
        // Bias corrections in double: 1 - beta2^t is ~1e-3 at t = 1, where float's pow
        // and subtraction would lose digits.
        .inv_bc1 = (float)(1.0 / (1.0 - pow((double)s->beta1, (double)s->t))),
        .inv_bc2 = (float)(1.0 / (1.0 - pow((double)s->beta2, (double)s->t))),
    };
#pragma omp parallel num_threads(ctx_of(b)->threads)
    {
        size_t i0, i1;
        row_block(n, omp_get_thread_num(), omp_get_num_threads(), &i0, &i1);
        adamw_range(param, grad, m, v, i0, i1, &k);
        for (size_t i = i0; param16 && i < i1; i++) param16[i] = bf16_from_f32(param[i]);
    }
}

// ---------------------------------------------------------------------------------------
// Creation

static void cpu_destroy(backend *b) {
    if (!b) return;
    cpu_ctx *ctx = ctx_of(b);
    free(ctx->scratch);
    free(ctx->widened);
    free(ctx->out_stage);
    free(ctx);
    free(b);
}

static const backend cpu_backend_table = {
    /* .name                  = */ "cpu",
    /* .ctx                   = */ NULL,
    /* .threads               = */ 0,
    /* .device_memory         = */ 0,
    /* .peak_flops            = */ 0, // measured: no datasheet peak applies
    /* .attn_state            = */ ATTN_STATE_PROBS,
    /* .stream                = */ NULL,
    /* .bf16_out              = */ 0, // set by TRIDENT_TEST_CPU_BF16_OUT=1 (tests)
    /* .device_name           = */ NULL,
    /* .device_bus_id         = */ NULL,
    /* .has_tf32              = */ 0, // fp32 FMA only: train.precision tf32 runs as fp32
    /* .tf32                  = */ 0,
    /* .attn_rope             = */ 0, // rope_fwd / rope_bwd run as their own ops
    /* .alloc                 = */ cpu_alloc,
    /* .free                  = */ cpu_free,
    /* .copy_to_device        = */ cpu_copy,
    /* .copy_to_host          = */ cpu_copy,
    /* .memset_zero           = */ cpu_memset_zero,
    /* .copy                  = */ cpu_copy,
    /* .synchronize           = */ cpu_synchronize,
    /* .mem_peak_bytes        = */ cpu_mem_peak_bytes,
    /* .reserve               = */ cpu_reserve,
    /* .alloc_count           = */ cpu_alloc_count,
    /* .matmul_fwd            = */ cpu_matmul_fwd,
    /* .matmul_bwd            = */ cpu_matmul_bwd,
    /* .matmul_fwd16          = */ cpu_matmul_fwd16,
    /* .matmul_bwd16          = */ cpu_matmul_bwd16,
    /* .layernorm_fwd         = */ cpu_layernorm_fwd,
    /* .layernorm_bwd         = */ cpu_layernorm_bwd,
    /* .residual_fwd          = */ cpu_residual_fwd,
    /* .residual_layernorm_fwd = */ cpu_residual_layernorm_fwd,
    /* .gelu_fwd              = */ cpu_gelu_fwd,
    /* .gelu_bwd              = */ cpu_gelu_bwd,
    /* .attention_fwd         = */ cpu_attention_fwd,
    /* .attention_bwd         = */ cpu_attention_bwd,
    /* .embedding_fwd         = */ cpu_embedding_fwd,
    /* .embedding_bwd         = */ cpu_embedding_bwd,
    /* .xent_max              = */ cpu_xent_max,
    /* .xent_sumexp           = */ cpu_xent_sumexp,
    /* .xent_loss             = */ cpu_xent_loss,
    /* .xent_bwd              = */ cpu_xent_bwd,
    /* .loss_sum              = */ cpu_loss_sum,
    /* .sumsq                 = */ cpu_sumsq,
    /* .sumsq_add             = */ cpu_sumsq_add,
    /* .scale                 = */ cpu_scale,
    /* .to_bf16               = */ cpu_to_bf16,
    /* .from_bf16             = */ cpu_from_bf16,
    /* .add_to_bf16           = */ cpu_add_to_bf16,
    /* .adamw                 = */ cpu_adamw,
    /* .destroy               = */ cpu_destroy,
    /* .xent_stats16          = */ cpu_xent_stats16,
    /* .xent_rescale          = */ cpu_xent_rescale,
    /* .xent_bwd16            = */ cpu_xent_bwd16,
    /* .rmsnorm_fwd           = */ cpu_rmsnorm_fwd,
    /* .rmsnorm_bwd           = */ cpu_rmsnorm_bwd,
    /* .residual_rmsnorm_fwd  = */ cpu_residual_rmsnorm_fwd,
    /* .rope_fwd              = */ cpu_rope_fwd,
    /* .rope_bwd              = */ cpu_rope_bwd,
    /* .swiglu_fwd            = */ cpu_swiglu_fwd,
    /* .swiglu_bwd            = */ cpu_swiglu_bwd,
    /* .mt_sumsq_add          = */ cpu_mt_sumsq_add,
    /* .mt_adamw              = */ cpu_mt_adamw,
    /* .optim_multi           = */ 1, // the per-piece ops in order: the same bits
};

tri_status backend_cpu_create(backend **out, int threads) {
    *out = NULL;
    if (threads < 0) {
        LOG_ERROR("system.threads must be >= 0 (0: fit to the cores), got %d", threads);
        return TRI_ERR_CONFIG;
    }
    if (threads == 0) { // one process (sample): the cores it may use
        char why[512];
        threads = backend_cpu_fit_threads(0, 1, why, sizeof why);
    }
    backend *b = xmalloc(sizeof *b);
    *b = cpu_backend_table;
    cpu_ctx *ctx = xcalloc(1, sizeof *ctx);
    ctx->threads = threads;
    atomic_init(&ctx->mem_current, 0);
    atomic_init(&ctx->mem_peak, 0);
    atomic_init(&ctx->allocs, 0);
    b->ctx = ctx;
    b->threads = threads;
    b->bf16_out = env_flag(ENV_TEST_CPU_BF16_OUT);
    omp_set_num_threads(threads);
    // One thread inside OpenBLAS: parallelism comes from OpenMP (cpu_gemm), see the top.
    openblas_set_num_threads(1);
    backend_cpu_warn_generic_blas();
    *out = b;
    return TRI_OK;
}
