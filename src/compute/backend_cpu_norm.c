// backend_cpu_norm.c: LayerNorm and the residual add of the CPU backend (backend.h), with the
// split backward the zero-bubble schedules use (dinp, or dweight and dbias, alone: each the
// joint call's bits). Deterministic as the rest of the backend: row loops split statically, the
// parameter gradients summed per thread and then in thread order.
#include "compute/backend_cpu_internal.h"

#include <math.h>
#include <omp.h>
#include <string.h>

static inline cpu_ctx *ctx_of(backend *b) { return (cpu_ctx *)b->ctx; }

// ---------------------------------------------------------------------------------------
// LayerNorm

#define CPU_LN_EPS 1e-5f

void cpu_layernorm_fwd(backend *b, float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C) {
    cpu_ctx *ctx = ctx_of(b);
#pragma omp parallel for schedule(static) num_threads(ctx->threads)
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C;
        float *restrict y = out + (size_t)n * C;
        const float *restrict w = weight, *restrict bi = bias;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < C; i++) sum += x[i];
        float m = sum / (float)C;
        float var = 0.0f; // two passes over a row in L1: exact biased variance
#pragma omp simd reduction(+ : var)
        for (int i = 0; i < C; i++) var += (x[i] - m) * (x[i] - m);
        float s = 1.0f / sqrtf(var / (float)C + CPU_LN_EPS);
#pragma omp simd
        for (int i = 0; i < C; i++) y[i] = (x[i] - m) * s * w[i] + bi[i];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

void cpu_layernorm_bwd(backend *b, float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *weight, const float *mean, const float *rstd,
                       int N, int C) {
    cpu_ctx *ctx = ctx_of(b);
    // Per-thread partial dweight and dbias over a static block of rows, summed in thread
    // order afterwards: deterministic for a given thread count, and no atomics. The split
    // forms (dinp NULL: the parameter gradients only; dweight NULL, then dbias NULL too: dinp
    // only) compute each output with the same expressions over the same rows, so each is
    // bitwise the joint call's.
    const int want_dx = dinp != NULL, want_dw = dweight != NULL;
    TRI_ASSERT(want_dw == (dbias != NULL));
    float *partial = want_dw ? cpu_scratch(ctx, (size_t)ctx->threads * 2 * C) : NULL;
#pragma omp parallel num_threads(ctx->threads)
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        float *restrict pw = want_dw ? partial + (size_t)tid * 2 * C : NULL;
        float *restrict pb = want_dw ? pw + C : NULL;
        if (want_dw) memset(pw, 0, 2 * (size_t)C * sizeof(float));
        size_t r0, r1;
        row_block((size_t)N, tid, nth, &r0, &r1);
        const float *restrict w = weight;
        for (size_t n = r0; n < r1; n++) {
            const float *restrict x = inp + n * C;
            const float *restrict dy = dout + n * C;
            const float m = mean[n], s = rstd[n];
            if (!want_dx) {
#pragma omp simd
                for (int i = 0; i < C; i++) {
                    float norm = (x[i] - m) * s;
                    pb[i] += dy[i];
                    pw[i] += dy[i] * norm;
                }
                continue;
            }
            float *restrict dx = dinp + n * C;
            // dnorm = dy * w; dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
            float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
            for (int i = 0; i < C; i++) {
                float norm = (x[i] - m) * s;
                float dnorm = dy[i] * w[i];
                dnorm_sum += dnorm;
                dnorm_norm_sum += dnorm * norm;
            }
            const float dnorm_mean = dnorm_sum / (float)C;
            const float dnorm_norm_mean = dnorm_norm_sum / (float)C;
            if (!want_dw) {
#pragma omp simd
                for (int i = 0; i < C; i++) {
                    float norm = (x[i] - m) * s;
                    float dnorm = dy[i] * w[i];
                    dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
                }
                continue;
            }
#pragma omp simd
            for (int i = 0; i < C; i++) {
                float norm = (x[i] - m) * s;
                float dnorm = dy[i] * w[i];
                pb[i] += dy[i];
                pw[i] += dy[i] * norm;
                dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
            }
        }
        if (want_dw) {
#pragma omp barrier
            int c0, c1;
            col_block(C, tid, nth, &c0, &c1);
            for (int t = 0; t < nth; t++) {
                const float *restrict tw = partial + (size_t)t * 2 * C;
                const float *restrict tb = tw + C;
                float *restrict dw = dweight, *restrict db = dbias;
#pragma omp simd
                for (int c = c0; c < c1; c++) {
                    dw[c] += tw[c];
                    db[c] += tb[c];
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pointwise

void cpu_residual_fwd(backend *b, float *out, const float *a, const float *c, size_t n) {
    // out may alias a: element i reads a[i] before writing out[i], so no restrict is needed
    // for correctness and gcc vectorises it anyway under omp simd.
#pragma omp parallel for simd schedule(static) num_threads(ctx_of(b)->threads)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + c[i];
}

void cpu_residual_layernorm_fwd(backend *b, float *res, float *out, float *mean, float *rstd,
                                const float *a, const float *c, const float *weight,
                                const float *bias, int N, int C) {
    cpu_residual_fwd(b, res, a, c, (size_t)N * C);
    cpu_layernorm_fwd(b, out, mean, rstd, res, weight, bias, N, C);
}
