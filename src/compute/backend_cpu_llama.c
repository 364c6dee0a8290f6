// backend_cpu_llama.c: the Llama ops of the CPU backend (backend.h): RMSNorm, rotary position
// embeddings and SwiGLU. Deterministic as the rest of the backend: row loops split statically,
// the weight gradient summed per thread and then in thread order.
#include "compute/backend_cpu_internal.h"
#include "compute/rope_math.h"

#include <math.h>
#include <omp.h>
#include <string.h>

static inline cpu_ctx *ctx_of(backend *b) { return (cpu_ctx *)b->ctx; }

// ---- RMSNorm ----

void cpu_rmsnorm_fwd(backend *b, float *out, float *rstd, const float *inp, const float *weight,
                     int N, int C, float eps) {
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C;
        float *restrict y = out + (size_t)n * C;
        const float *restrict w = weight;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < C; i++) ss += x[i] * x[i];
        const float s = 1.0f / sqrtf(ss / (float)C + eps);
#pragma omp simd
        for (int i = 0; i < C; i++) y[i] = x[i] * s * w[i];
        if (rstd) rstd[n] = s;
    }
}

// norm = x * s, dnorm = dy * w: dx = s * (dnorm - norm * mean(dnorm * norm)), dw += dy * norm.
void cpu_rmsnorm_bwd(backend *b, float *dinp, float *dweight, const float *dout, const float *inp,
                     const float *weight, const float *rstd, int N, int C) {
    cpu_ctx *ctx = ctx_of(b);
    // The split forms (dinp NULL: dweight only; dweight NULL: dinp only) compute each output
    // with the joint call's expressions over the same rows: bitwise its values.
    const int want_dx = dinp != NULL, want_dw = dweight != NULL;
    float *partial = want_dw ? cpu_scratch(ctx, (size_t)ctx->threads * C) : NULL;
#pragma omp parallel num_threads(ctx->threads)
    {
        const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        float *restrict pw = want_dw ? partial + (size_t)tid * C : NULL;
        if (want_dw) memset(pw, 0, (size_t)C * sizeof(float));
        size_t r0, r1;
        row_block((size_t)N, tid, nth, &r0, &r1);
        const float *restrict w = weight;
        for (size_t n = r0; n < r1; n++) {
            const float *restrict x = inp + n * C;
            const float *restrict dy = dout + n * C;
            const float s = rstd[n];
            if (!want_dx) {
#pragma omp simd
                for (int i = 0; i < C; i++) {
                    const float norm = x[i] * s;
                    pw[i] += dy[i] * norm;
                }
                continue;
            }
            float *restrict dx = dinp + n * C;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int i = 0; i < C; i++) dot += dy[i] * w[i] * x[i] * s;
            const float mean_dot = dot / (float)C;
            if (!want_dw) {
#pragma omp simd
                for (int i = 0; i < C; i++) {
                    const float norm = x[i] * s;
                    dx[i] += (dy[i] * w[i] - norm * mean_dot) * s;
                }
                continue;
            }
#pragma omp simd
            for (int i = 0; i < C; i++) {
                const float norm = x[i] * s;
                pw[i] += dy[i] * norm;
                dx[i] += (dy[i] * w[i] - norm * mean_dot) * s;
            }
        }
        if (want_dw) {
#pragma omp barrier
            int c0, c1;
            col_block(C, tid, nth, &c0, &c1);
            for (int t = 0; t < nth; t++) {
                const float *restrict tw = partial + (size_t)t * C;
                float *restrict dw = dweight;
#pragma omp simd
                for (int c = c0; c < c1; c++) dw[c] += tw[c];
            }
        }
    }
}

void cpu_residual_rmsnorm_fwd(backend *b, float *res, float *out, float *rstd, const float *a,
                              const float *c, const float *weight, int N, int C, float eps) {
    const size_t n = (size_t)N * C;
#pragma omp parallel for simd schedule(static) num_threads(ctx_of(b)->threads)
    for (size_t i = 0; i < n; i++) res[i] = a[i] + c[i];
    cpu_rmsnorm_fwd(b, out, rstd, res, weight, N, C, eps);
}

// ---- RoPE ----

// cos and sin of every (t, i), t < T, i < HS/2, into the scratch: (T, HS/2) each. The angle
// t * theta^(-2i/HS) in double (rope_math.h's, which the CUDA table shares; positions up to
// 2^20 keep ~1e-10 of it), rounded to fp32 once.
static const float *rope_table(cpu_ctx *ctx, int T, int HS, float theta) {
    const int half = HS / 2;
    float *tab = cpu_scratch(ctx, (size_t)2 * T * half);
#pragma omp parallel for schedule(static) num_threads(ctx->threads)
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const double angle = rope_angle(t, i, HS, theta);
            tab[(size_t)t * half + i] = (float)cos(angle);
            tab[(size_t)(T + t) * half + i] = (float)sin(angle);
        }
    return tab;
}

// Rotates the NH + NKV q and k heads of every row by +angle (dir 1) or -angle (dir -1).
static void rope_apply(backend *b, float *qkv, int B, int T, int NH, int NKV, int HS, float theta,
                       float dir) {
    cpu_ctx *ctx = ctx_of(b);
    const float *tab = rope_table(ctx, T, HS, theta);
    const int half = HS / 2, heads = NH + NKV, ld = (NH + 2 * NKV) * HS;
#pragma omp parallel for schedule(static) num_threads(ctx->threads)
    for (int row = 0; row < B * T; row++) {
        const int t = row % T;
        const float *restrict cs = tab + (size_t)t * half;
        const float *restrict sn = tab + (size_t)(T + t) * half;
        for (int h = 0; h < heads; h++) {
            float *restrict x = qkv + (size_t)row * ld + (size_t)h * HS;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                const float x0 = x[i], x1 = x[i + half], s = dir * sn[i];
                x[i] = x0 * cs[i] - x1 * s;
                x[i + half] = x1 * cs[i] + x0 * s;
            }
        }
    }
}

void cpu_rope_fwd(backend *b, float *qkv, int B, int T, int NH, int NKV, int HS, float theta) {
    rope_apply(b, qkv, B, T, NH, NKV, HS, theta, 1.0f);
}

// The rotation is orthogonal: its gradient is the inverse rotation.
void cpu_rope_bwd(backend *b, float *dqkv, int B, int T, int NH, int NKV, int HS, float theta) {
    rope_apply(b, dqkv, B, T, NH, NKV, HS, theta, -1.0f);
}

// ---- SwiGLU ----

void cpu_swiglu_fwd(backend *b, float *out, const float *fc, int N, int F) {
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (int n = 0; n < N; n++) {
        const float *restrict g = fc + (size_t)n * 2 * F, *restrict u = g + F;
        float *restrict y = out + (size_t)n * F;
#pragma omp simd
        for (int i = 0; i < F; i++) y[i] = g[i] / (1.0f + cpu_expf(-g[i])) * u[i];
    }
}

// d gate = dout * up * sig * (1 + gate * (1 - sig)), d up = dout * silu(gate).
void cpu_swiglu_bwd(backend *b, float *dfc, const float *dout, const float *fc, int N, int F) {
#pragma omp parallel for schedule(static) num_threads(ctx_of(b)->threads)
    for (int n = 0; n < N; n++) {
        const float *restrict g = fc + (size_t)n * 2 * F, *restrict u = g + F;
        const float *restrict dy = dout + (size_t)n * F;
        float *restrict dg = dfc + (size_t)n * 2 * F, *restrict du = dg + F;
#pragma omp simd
        for (int i = 0; i < F; i++) {
            const float sig = 1.0f / (1.0f + cpu_expf(-g[i]));
            dg[i] = dy[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
            du[i] = dy[i] * g[i] * sig;
        }
    }
}
