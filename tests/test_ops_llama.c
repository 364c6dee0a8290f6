// test_ops_llama.c: the Llama ops of the CPU backend (backend.h: rmsnorm, residual_rmsnorm,
// rope, swiglu, and grouped-query attention) against double-precision references written here
// from their definitions (Hugging Face's LlamaRMSNorm, rotate_half RoPE, SiLU-gated MLP, GQA
// with repeat_kv), and every backward against central finite differences of that double
// forward. Tolerances as tests/op_cases.h justifies them: forward and analytic backward 1e-5 of
// the largest reference value (chains of a few dozen float roundings), finite differences 1e-4.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/backend.h"
#include "testlib.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double urand(double lo, double hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}
static float *frand(size_t n, double lo, double hi) {
    float *x = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)urand(lo, hi);
    return x;
}
static double *widen(const float *x, size_t n) {
    double *d = malloc((n + 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
// max |got - ref| / max |ref|
static double rel_err(const float *got, const double *ref, size_t n) {
    double e = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs(got[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    return e / m;
}

// ---- double references ----

typedef struct {
    int N, C, B, T, NH, NKV, HS, F;
    double eps, theta;
    const double *w; // rmsnorm weight
} shape;

static void ref_rmsnorm(const shape *s, const double *x, double *y) {
    for (int n = 0; n < s->N; n++) {
        double ss = 0;
        for (int i = 0; i < s->C; i++) ss += x[(size_t)n * s->C + i] * x[(size_t)n * s->C + i];
        const double r = 1.0 / sqrt(ss / s->C + s->eps);
        for (int i = 0; i < s->C; i++)
            y[(size_t)n * s->C + i] = x[(size_t)n * s->C + i] * r * s->w[i];
    }
}

static void ref_rope(const shape *s, const double *x, double *y) {
    const int ld = (s->NH + 2 * s->NKV) * s->HS, half = s->HS / 2;
    memcpy(y, x, (size_t)s->B * s->T * ld * sizeof(double));
    for (int row = 0; row < s->B * s->T; row++)
        for (int h = 0; h < s->NH + s->NKV; h++)
            for (int i = 0; i < half; i++) {
                const double a = (row % s->T) * pow(s->theta, -2.0 * i / s->HS);
                const double *p = x + (size_t)row * ld + (size_t)h * s->HS;
                double *q = y + (size_t)row * ld + (size_t)h * s->HS;
                q[i] = p[i] * cos(a) - p[i + half] * sin(a);
                q[i + half] = p[i + half] * cos(a) + p[i] * sin(a);
            }
}

static void ref_swiglu(const shape *s, const double *fc, double *y) {
    for (int n = 0; n < s->N; n++)
        for (int i = 0; i < s->F; i++) {
            const double g = fc[(size_t)n * 2 * s->F + i], u = fc[(size_t)n * 2 * s->F + s->F + i];
            y[(size_t)n * s->F + i] = g / (1.0 + exp(-g)) * u;
        }
}

// Causal attention, query head h reading key/value head h / (NH / NKV).
static void ref_gqa(const shape *s, const double *qkv, double *out) {
    const int ld = (s->NH + 2 * s->NKV) * s->HS, C = s->NH * s->HS, G = s->NH / s->NKV;
    double *p = malloc((size_t)s->T * sizeof(double));
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++)
            for (int t = 0; t < s->T; t++) {
                const double *q = qkv + ((size_t)b * s->T + t) * ld + (size_t)h * s->HS;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * s->T + j) * ld + C +
                                      (size_t)(h / G) * s->HS;
                    double d = 0;
                    for (int e = 0; e < s->HS; e++) d += q[e] * k[e];
                    p[j] = d / sqrt((double)s->HS);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int e = 0; e < s->HS; e++) {
                    double o = 0;
                    for (int j = 0; j <= t; j++)
                        o += p[j] / sum *
                             qkv[((size_t)b * s->T + j) * ld + C +
                                 (size_t)(s->NKV + h / G) * s->HS + e];
                    out[((size_t)b * s->T + t) * C + (size_t)h * s->HS + e] = o;
                }
            }
    free(p);
}

typedef void (*ref_fn)(const shape *, const double *, double *);

// Central finite differences of L = sum(f(x) * R) with respect to each element of x (n).
static void fd_grad(ref_fn f, const shape *s, double *x, size_t n, const double *R, size_t nout,
                    double *g) {
    double *y = malloc(nout * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        const double x0 = x[i], h = 1e-4 * fmax(1.0, fabs(x0));
        double lp = 0, lm = 0;
        x[i] = x0 + h;
        f(s, x, y);
        for (size_t k = 0; k < nout; k++) lp += y[k] * R[k];
        x[i] = x0 - h;
        f(s, x, y);
        for (size_t k = 0; k < nout; k++) lm += y[k] * R[k];
        x[i] = x0;
        g[i] = (lp - lm) / (2 * h);
    }
    free(y);
}

// ---- the checks ----

static void check(const char *what, const char *name, double err, double tol) {
    char full[256];
    snprintf(full, sizeof full, "%s %s", what, name);
    TEST_CHECK(err <= tol, full, "max error %.3g of the largest value, tolerance %.0e", err, tol);
}

static void test_rmsnorm(backend *b, int N, int C, double eps, int fd) {
    char name[96];
    snprintf(name, sizeof name, "rmsnorm N=%d C=%d eps=%g", N, C, eps);
    const size_t n = (size_t)N * C;
    float *x = frand(n, -2, 3), *w = frand(C, 0.5, 1.5), *dy = frand(n, -1, 1);
    float *y = calloc(n, sizeof(float)), *rstd = calloc(N, sizeof(float));
    float *dx0 = frand(n, -1, 1), *dw0 = frand(C, -1, 1);
    float *dx = malloc(n * sizeof(float)), *dw = malloc(C * sizeof(float));
    memcpy(dx, dx0, n * sizeof(float)), memcpy(dw, dw0, C * sizeof(float));
    double *xd = widen(x, n), *wd = widen(w, C), *R = widen(dy, n),
           *ref = malloc(n * sizeof(double));
    shape s = {.N = N, .C = C, .eps = eps, .w = wd};
    b->rmsnorm_fwd(b, y, rstd, x, w, N, C, (float)eps);
    ref_rmsnorm(&s, xd, ref);
    check(name, "forward", rel_err(y, ref, n), 1e-5);
    b->rmsnorm_bwd(b, dx, dw, dy, x, w, rstd, N, C);
    for (size_t i = 0; i < n; i++) dx[i] -= dx0[i]; // it accumulates
    for (int i = 0; i < C; i++) dw[i] -= dw0[i];
    if (fd) {
        double *g = malloc(n * sizeof(double)), *gw = malloc(C * sizeof(double));
        fd_grad(ref_rmsnorm, &s, xd, n, R, n, g);
        // the weight's gradient: x fixed, w varies (a closure through s.w)
        double *wv = (double *)s.w;
        for (int i = 0; i < C; i++) {
            const double w0 = wv[i], h = 1e-4;
            double lp = 0, lm = 0;
            wv[i] = w0 + h;
            ref_rmsnorm(&s, xd, ref);
            for (size_t k = 0; k < n; k++) lp += ref[k] * R[k];
            wv[i] = w0 - h;
            ref_rmsnorm(&s, xd, ref);
            for (size_t k = 0; k < n; k++) lm += ref[k] * R[k];
            wv[i] = w0;
            gw[i] = (lp - lm) / (2 * h);
        }
        check(name, "backward dinp (accumulated) vs finite differences", rel_err(dx, g, n), 1e-4);
        check(name, "backward dweight (accumulated) vs finite differences", rel_err(dw, gw, C),
              1e-4);
        free(g), free(gw);
    } else { // analytic, in double: dx = r (dy w - xh mean(dy w xh)), dw = sum dy xh
        double *g = calloc(n, sizeof(double)), *gw = calloc(C, sizeof(double));
        for (int r = 0; r < N; r++) {
            const double *xr = xd + (size_t)r * C, *dr = R + (size_t)r * C;
            double ss = 0, dot = 0;
            for (int i = 0; i < C; i++) ss += xr[i] * xr[i];
            const double rs = 1 / sqrt(ss / C + eps);
            for (int i = 0; i < C; i++) dot += dr[i] * wd[i] * xr[i] * rs;
            for (int i = 0; i < C; i++) {
                g[(size_t)r * C + i] = rs * (dr[i] * wd[i] - xr[i] * rs * dot / C);
                gw[i] += dr[i] * xr[i] * rs;
            }
        }
        check(name, "backward dinp (accumulated) vs the double derivative", rel_err(dx, g, n),
              1e-5);
        check(name, "backward dweight (accumulated) vs the double derivative", rel_err(dw, gw, C),
              1e-5);
        free(g), free(gw);
    }
    // residual_rmsnorm: res = a + c, then the same norm (its out and rstd bitwise rmsnorm's)
    float *a = frand(n, -1, 1), *c = frand(n, -1, 2), *res = malloc(n * sizeof(float));
    float *y2 = malloc(n * sizeof(float)), *r2 = malloc(N * sizeof(float));
    float *y3 = malloc(n * sizeof(float)), *r3 = malloc(N * sizeof(float));
    b->residual_rmsnorm_fwd(b, res, y2, r2, a, c, w, N, C, (float)eps);
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= res[i] == a[i] + c[i];
    b->rmsnorm_fwd(b, y3, r3, res, w, N, C, (float)eps);
    same &= !memcmp(y2, y3, n * sizeof(float)) && !memcmp(r2, r3, N * sizeof(float));
    check(name, "residual_rmsnorm_fwd = residual then rmsnorm (bitwise)", same ? 0 : 1, 0);
    b->residual_rmsnorm_fwd(b, a, y2, r2, a, c, w, N, C, (float)eps); // res aliasing a
    same = !memcmp(a, res, n * sizeof(float));
    check(name, "residual_rmsnorm_fwd with res aliasing a", same ? 0 : 1, 0);
    free(x), free(w), free(dy), free(y), free(rstd), free(dx0), free(dw0), free(dx), free(dw);
    free(xd), free(wd), free(R), free(ref), free(a), free(c), free(res), free(y2), free(r2);
    free(y3), free(r3);
}

static void test_rope(backend *b, int B, int T, int NH, int NKV, int HS, double theta, int fd) {
    char name[128];
    snprintf(name, sizeof name, "rope B=%d T=%d NH=%d NKV=%d HS=%d theta=%g", B, T, NH, NKV, HS,
             theta);
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    float *x = frand(n, -2, 2), *y = malloc(n * sizeof(float)), *d = frand(n, -1, 1);
    float *dx = malloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float)), memcpy(dx, d, n * sizeof(float));
    double *xd = widen(x, n), *ref = malloc(n * sizeof(double)), *R = widen(d, n);
    shape s = {.B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS, .theta = theta};
    b->rope_fwd(b, y, B, T, NH, NKV, HS, (float)theta);
    ref_rope(&s, xd, ref);
    check(name, "forward (v untouched)", rel_err(y, ref, n), 1e-5);
    b->rope_bwd(b, dx, B, T, NH, NKV, HS, (float)theta);
    if (fd) {
        double *g = malloc(n * sizeof(double));
        fd_grad(ref_rope, &s, xd, n, R, n, g);
        check(name, "backward vs finite differences", rel_err(dx, g, n), 1e-4);
        free(g);
    }
    b->rope_bwd(b, y, B, T, NH, NKV, HS, (float)theta); // the inverse rotation: x again
    check(name, "backward of the forward is the identity", rel_err(y, xd, n), 1e-6);
    free(x), free(y), free(d), free(dx), free(xd), free(ref), free(R);
}

static void test_swiglu(backend *b, int N, int F, int fd) {
    char name[96];
    snprintf(name, sizeof name, "swiglu N=%d F=%d", N, F);
    const size_t n = (size_t)N * F;
    float *fc = frand(2 * n, -4, 4), *y = malloc(n * sizeof(float)), *dy = frand(n, -1, 1);
    float *dfc = frand(2 * n, -9, 9); // overwritten
    double *fd_ = widen(fc, 2 * n), *ref = malloc(2 * n * sizeof(double)), *R = widen(dy, n);
    shape s = {.N = N, .F = F};
    b->swiglu_fwd(b, y, fc, N, F);
    ref_swiglu(&s, fd_, ref);
    check(name, "forward", rel_err(y, ref, n), 1e-5);
    b->swiglu_bwd(b, dfc, dy, fc, N, F);
    if (fd) {
        fd_grad(ref_swiglu, &s, fd_, 2 * n, R, n, ref);
        check(name, "backward vs finite differences", rel_err(dfc, ref, 2 * n), 1e-4);
    } else { // analytic, in double
        for (size_t r = 0; r < (size_t)N; r++)
            for (int i = 0; i < F; i++) {
                const double g = fd_[r * 2 * F + i], u = fd_[r * 2 * F + F + i];
                const double sg = 1 / (1 + exp(-g)), d = R[r * F + i];
                ref[r * 2 * F + i] = d * u * sg * (1 + g * (1 - sg));
                ref[r * 2 * F + F + i] = d * g * sg;
            }
        check(name, "backward vs the double derivative", rel_err(dfc, ref, 2 * n), 1e-5);
    }
    free(fc), free(y), free(dy), free(dfc), free(fd_), free(ref), free(R);
}

// GQA: forward against the double reference; backward against finite differences (fd), or
// against multi-head attention (NKV = NH, itself checked by test_ops) on q with each k and v
// head repeated for its group, dk and dv summed back over the group (Hugging Face's repeat_kv).
static void test_gqa(backend *b, int B, int T, int NH, int NKV, int HS, int fd) {
    char name[128];
    snprintf(name, sizeof name, "attention GQA B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    const int ld = (NH + 2 * NKV) * HS, C = NH * HS, G = NH / NKV;
    const size_t n = (size_t)B * T * ld, no = (size_t)B * T * C;
    float *qkv = frand(n, -2, 2), *out = malloc(no * sizeof(float)), *dout = frand(no, -1, 1);
    float *dqkv = frand(n, -9, 9);
    void *state = malloc(attn_state_bytes(b->attn_state, B, T, NH));
    double *qd = widen(qkv, n), *ref = malloc(n * sizeof(double)), *R = widen(dout, no);
    shape s = {.B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS};
    backend_attention_fwd(b, out, state, operand_fp32(qkv), B, T, NH, NKV, HS, 0.0f);
    ref_gqa(&s, qd, ref);
    check(name, "forward", rel_err(out, ref, no), 1e-5);
    backend_attention_bwd(b, dqkv, dout, operand_fp32(qkv), operand_fp32(out), state, B, T, NH, NKV,
                          HS, 0.0f);
    if (fd) {
        fd_grad(ref_gqa, &s, qd, n, R, no, ref);
        check(name, "backward vs finite differences", rel_err(dqkv, ref, n), 1e-4);
    } else {
        const size_t ne = (size_t)B * T * 3 * C;
        float *ex = malloc(ne * sizeof(float)), *dex = malloc(ne * sizeof(float));
        float *o2 = malloc(no * sizeof(float));
        void *st2 = malloc(attn_state_bytes(b->attn_state, B, T, NH));
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int h = 0; h < NH; h++)
                for (int e = 0; e < HS; e++) {
                    const float *src = qkv + r * ld;
                    ex[r * 3 * C + h * HS + e] = src[h * HS + e];
                    ex[r * 3 * C + C + h * HS + e] = src[C + (h / G) * HS + e];
                    ex[r * 3 * C + 2 * C + h * HS + e] = src[C + (NKV + h / G) * HS + e];
                }
        backend_attention_fwd(b, o2, st2, operand_fp32(ex), B, T, NH, NH, HS, 0.0f);
        backend_attention_bwd(b, dex, dout, operand_fp32(ex), operand_fp32(o2), st2, B, T, NH, NH,
                              HS, 0.0f);
        memset(ref, 0, n * sizeof(double));
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int h = 0; h < NH; h++)
                for (int e = 0; e < HS; e++) {
                    double *dst = ref + r * ld;
                    dst[h * HS + e] = dex[r * 3 * C + h * HS + e];
                    dst[C + (h / G) * HS + e] += dex[r * 3 * C + C + h * HS + e];
                    dst[C + (NKV + h / G) * HS + e] += dex[r * 3 * C + 2 * C + h * HS + e];
                }
        check(name, "backward vs multi-head attention on repeated k, v", rel_err(dqkv, ref, n),
              1e-5);
        free(ex), free(dex), free(o2), free(st2);
    }
    free(qkv), free(out), free(dout), free(dqkv), free(state), free(qd), free(ref), free(R);
}

int main(void) {
    backend *b;
    if (backend_cpu_create(&b, 2) != TRI_OK) return 1;
    test_rmsnorm(b, 5, 7, 1e-5, 1);
    test_rmsnorm(b, 3, 16, 1e-6, 1);
    test_rmsnorm(b, 64, 96, 1e-5, 0);
    test_rmsnorm(b, 33, 576, 1e-5, 0);
    test_rope(b, 2, 7, 2, 1, 4, 10000, 1);
    test_rope(b, 1, 9, 4, 2, 6, 500000, 1);
    test_rope(b, 2, 64, 4, 4, 64, 10000, 0);
    test_rope(b, 1, 300, 9, 3, 64, 10000, 0);
    test_swiglu(b, 5, 7, 1);
    test_swiglu(b, 64, 1536, 0);
    test_swiglu(b, 37, 100, 0);
    for (int kv = 1; kv <= 4; kv *= 2) { // NKV in {1, NH/2, NH}
        test_gqa(b, 2, 7, 4, kv, 4, 1);
        test_gqa(b, 2, 150, 4, kv, 64, 0);
    }
    test_gqa(b, 1, 37, 6, 3, 8, 1);
    test_gqa(b, 3, 70, 9, 3, 64, 0);
    b->destroy(b);
    TEST_EXIT();
}
