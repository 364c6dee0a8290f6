// test_ops.c: every op of the CPU backend against references written plainly here in
// double precision (forward), and against central finite differences of those references
// (backward: L = sum(out * R) for a random R, so dL/dout = R).
//
//   build/tests/test_ops            the tests, on backends of 1, 2 and 3 threads
//   build/tests/test_ops --bench [threads]
//                                   a timing table at GPT-2 124M sizes (not a test)
//
// Tolerances (why these numbers):
// - forward: max |got - ref| / max |ref| <= 1e-5. Float keeps ~6e-8 relative per rounding;
//   the ops here chain at most a few dozen roundings per element (plus cpu_expf's 2 ulp),
//   so 1e-5 has two orders of margin, while any wrong index or formula is O(1) off.
// - matmul forward: max |got - ref| <= 1e-5 * sqrt(K) * max|inp| * max|w|. A float dot
//   product of K terms accumulates rounding like a random walk, ~sqrt(K) * 6e-8 * scale.
// - gradients: max |got - fd| / max |fd| <= 1e-4. The reference FD in double with step
//   h = 1e-4 * max(1, |x|) has truncation error ~h^2 (1e-8) and cancellation ~1e-16 / h
//   (1e-12); the rest is the backend's float rounding (~1e-6 relative).
#include "backend.h"
#include "backend_cpu_internal.h" // attention policy and cblas, for --bench and coverage
#include "testlib.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------
// Helpers

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static double rnd(void) { // uniform in [-1, 1), splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

// A random host array of n floats in [lo, hi), and its exact double copy.
static float *rand_f(size_t n, double lo, double hi) {
    float *x = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * 0.5 * (rnd() + 1.0));
    return x;
}
static double *to_d(const float *x, size_t n) {
    double *d = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float *dev_f(backend *b, const float *host, size_t n) {
    float *d = b->alloc(b, n * sizeof(float));
    TRI_ASSERT(d);
    if (host) b->copy_to_device(b, d, host, n * sizeof(float));
    return d;
}
static int *dev_i(backend *b, const int *host, size_t n) {
    int *d = b->alloc(b, n * sizeof(int));
    TRI_ASSERT(d);
    b->copy_to_device(b, d, host, n * sizeof(int));
    return d;
}
static float *host_of(backend *b, const float *d, size_t n) {
    float *h = xmalloc(n * sizeof(float));
    b->copy_to_host(b, h, d, n * sizeof(float));
    return h;
}
static double max_abs(const double *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}
// max |got - base - ref| / max |ref| (base: the pre-filled values of an accumulating op).
static double rel_err(const float *got, const float *base, const double *ref, size_t n) {
    double e = 0.0, m = max_abs(ref, n);
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i] - (base ? (double)base[i] : 0.0);
        e = fmax(e, fabs(g - ref[i]));
        if (g != g) e = INFINITY;
    }
    return e / (m > 0.0 ? m : 1.0);
}
static void check_rel(const char *name, const char *tag, const float *got, const float *base,
                      const double *ref, size_t n, double tol) {
    char full[200];
    snprintf(full, sizeof full, "%s%s%s", name, *tag ? " " : "", tag);
    double e = rel_err(got, base, ref, n);
    TEST_CHECK(e <= tol, full, "max error %.3g of max |ref| %.3g, tolerance %.1g", e,
               max_abs(ref, n), tol);
}

// Central finite differences of L = sum(forward(args) * R) with respect to x[idx[k]]
// (x belongs to args and is perturbed in place); idx NULL means every element.
typedef void (*ref_forward)(void *args, double *out);
static void fd_grad(ref_forward f, void *args, size_t nout, const double *R, double *x,
                    const size_t *idx, size_t n, double *grad) {
    double *out = xmalloc(nout * sizeof(double));
    for (size_t k = 0; k < n; k++) {
        size_t i = idx ? idx[k] : k;
        double xi = x[i], h = 1e-4 * fmax(1.0, fabs(xi)), lp = 0.0, lm = 0.0;
        x[i] = xi + h;
        f(args, out);
        for (size_t o = 0; o < nout; o++) lp += out[o] * R[o];
        x[i] = xi - h;
        f(args, out);
        for (size_t o = 0; o < nout; o++) lm += out[o] * R[o];
        x[i] = xi;
        grad[k] = (lp - lm) / (2.0 * h);
    }
    free(out);
}

static char test_tag[32]; // " t2": the thread count of the backend under test

static void name_of(char *buf, size_t n, const char *what) {
    snprintf(buf, n, "%s%s", what, test_tag);
}

// ---------------------------------------------------------------------------------------
// Double-precision references

static void ref_matmul(double *out, const double *inp, const double *w, const double *bias, int N,
                       int IC, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < IC; i++) s += inp[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = s;
        }
}

static void ref_layernorm(double *out, double *mean, double *rstd, const double *inp,
                          const double *w, const double *bias, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C;
        double m = 0.0, v = 0.0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int i = 0; i < C; i++) out[(size_t)n * C + i] = (x[i] - m) * s * w[i] + bias[i];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

static double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// out (B, T, NH*HS), P (B, NH, T, T) or NULL
static void ref_attention(double *out, double *P, const double *qkv, int B, int T, int NH, int HS) {
    const int C = NH * HS;
    double *p = xmalloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < T; j++) {
                    p[j] = 0.0;
                    if (j > t) continue;
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * HS;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += q[d] * k[d];
                    p[j] = s / sqrt((double)HS);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int j = 0; j <= t; j++) p[j] /= sum;
                double *o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
                for (int d = 0; d < HS; d++) {
                    double s = 0.0;
                    for (int j = 0; j <= t; j++)
                        s += p[j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * HS + d];
                    o[d] = s;
                }
                if (P)
                    memcpy(P + (((size_t)b * NH + h) * T + t) * T, p, (size_t)T * sizeof(double));
            }
    free(p);
}

static void ref_embedding(double *out, const int *tok, const double *wte, const double *wpe, int B,
                          int T, int C, int vocab_start, int V_local, int add_pos) {
    for (int i = 0; i < B * T; i++)
        for (int c = 0; c < C; c++) {
            int local = tok[i] - vocab_start;
            double e = local >= 0 && local < V_local ? wte[(size_t)local * C + c] : 0.0;
            out[(size_t)i * C + c] = e + (add_pos ? wpe[(size_t)(i % T) * C + c] : 0.0);
        }
}

// losses (N): logsumexp over the V_valid real columns minus the target's logit.
static void ref_xent(double *losses, const double *logits, const int *targets, int N, int Vp,
                     int V_valid) {
    for (int n = 0; n < N; n++) {
        const double *l = logits + (size_t)n * Vp;
        double mx = -INFINITY, s = 0.0;
        for (int c = 0; c < V_valid; c++) mx = fmax(mx, l[c]);
        for (int c = 0; c < V_valid; c++) s += exp(l[c] - mx);
        losses[n] = log(s) + mx - l[targets[n]];
    }
}

// ---------------------------------------------------------------------------------------
// Linear

typedef struct {
    double *inp, *w, *bias;
    int N, IC, OC;
} matmul_args;
static void fwd_matmul(void *a, double *out) {
    matmul_args *m = a;
    ref_matmul(out, m->inp, m->w, m->bias, m->N, m->IC, m->OC);
}

// Small shapes against finite differences, with and without bias; backward accumulates
// into dweight/dbias pre-filled with G0 and overwrites dinp pre-filled with garbage.
static void test_matmul_small(backend *b, int with_bias) {
    const int N = 5, IC = 7, OC = 6;
    char name[96];
    float *inp = rand_f((size_t)N * IC, -1, 1), *w = rand_f((size_t)OC * IC, -1, 1);
    float *bias = rand_f(OC, -1, 1), *R = rand_f((size_t)N * OC, -1, 1);
    float *g0w = rand_f((size_t)OC * IC, -1, 1), *g0b = rand_f(OC, -1, 1);
    matmul_args a = {.inp = to_d(inp, (size_t)N * IC), .w = to_d(w, (size_t)OC * IC),
                     .bias = with_bias ? to_d(bias, OC) : NULL, .N = N, .IC = IC, .OC = OC};
    double *ref = xmalloc((size_t)N * OC * sizeof(double)), *Rd = to_d(R, (size_t)N * OC);
    fwd_matmul(&a, ref);

    float *d_inp = dev_f(b, inp, (size_t)N * IC), *d_w = dev_f(b, w, (size_t)OC * IC);
    float *d_bias = dev_f(b, bias, OC), *d_out = dev_f(b, NULL, (size_t)N * OC);
    b->matmul_fwd(b, d_out, d_inp, d_w, with_bias ? d_bias : NULL, N, IC, OC);
    float *out = host_of(b, d_out, (size_t)N * OC);
    double e = 0.0;
    for (size_t i = 0; i < (size_t)N * OC; i++) e = fmax(e, fabs(out[i] - ref[i]));
    double scale =
        sqrt((double)IC) * max_abs(a.inp, (size_t)N * IC) * max_abs(a.w, (size_t)OC * IC);
    name_of(name, sizeof name, with_bias ? "matmul_fwd bias" : "matmul_fwd nobias");
    TEST_CHECK(e <= 1e-5 * scale, name, "max error %.3g > 1e-5 * sqrt(K) * scale %.3g", e, scale);

    float *junk = rand_f((size_t)N * IC, 100, 200);
    float *d_dinp = dev_f(b, junk, (size_t)N * IC), *d_dw = dev_f(b, g0w, (size_t)OC * IC);
    float *d_db = dev_f(b, g0b, OC), *d_R = dev_f(b, R, (size_t)N * OC);
    b->matmul_bwd(b, d_dinp, d_dw, with_bias ? d_db : NULL, d_R, d_inp, d_w, N, IC, OC);
    double *fd_inp = xmalloc((size_t)N * IC * sizeof(double));
    double *fd_w = xmalloc((size_t)OC * IC * sizeof(double)), *fd_b = xmalloc(OC * sizeof(double));
    fd_grad(fwd_matmul, &a, (size_t)N * OC, Rd, a.inp, NULL, (size_t)N * IC, fd_inp);
    fd_grad(fwd_matmul, &a, (size_t)N * OC, Rd, a.w, NULL, (size_t)OC * IC, fd_w);
    const char *tag = with_bias ? "matmul_bwd bias" : "matmul_bwd nobias";
    char n1[96], n2[96], n3[96];
    name_of(n1, sizeof n1, "dinp (overwritten)");
    name_of(n2, sizeof n2, "dweight (accumulated)");
    float *h = host_of(b, d_dinp, (size_t)N * IC);
    check_rel(tag, n1, h, NULL, fd_inp, (size_t)N * IC, 1e-4);
    free(h);
    h = host_of(b, d_dw, (size_t)OC * IC);
    check_rel(tag, n2, h, g0w, fd_w, (size_t)OC * IC, 1e-4);
    free(h);
    h = host_of(b, d_db, OC);
    if (with_bias) {
        fd_grad(fwd_matmul, &a, (size_t)N * OC, Rd, a.bias, NULL, OC, fd_b);
        name_of(n3, sizeof n3, "dbias (accumulated)");
        check_rel(tag, n3, h, g0b, fd_b, OC, 1e-4);
    } else {
        name_of(n3, sizeof n3, "matmul_bwd dbias NULL leaves dbias alone");
        TEST_CHECK(!memcmp(h, g0b, OC * sizeof(float)), n3, "dbias changed");
    }
    free(h);
    // dinp NULL: dweight still right (accumulating on top of the first call: 2x gradient).
    b->matmul_bwd(b, NULL, d_dw, NULL, d_R, d_inp, d_w, N, IC, OC);
    for (size_t i = 0; i < (size_t)OC * IC; i++) fd_w[i] *= 2.0;
    h = host_of(b, d_dw, (size_t)OC * IC);
    name_of(n1, sizeof n1, "dinp NULL, dweight += twice");
    check_rel(tag, n1, h, g0w, fd_w, (size_t)OC * IC, 1e-4);
    free(h);
    b->free(b, d_inp), b->free(b, d_w), b->free(b, d_bias), b->free(b, d_out);
    b->free(b, d_dinp), b->free(b, d_dw), b->free(b, d_db), b->free(b, d_R);
    free(inp), free(w), free(bias), free(R), free(g0w), free(g0b), free(out), free(junk);
    free(a.inp), free(a.w), free(a.bias), free(ref), free(Rd), free(fd_inp), free(fd_w), free(fd_b);
}

// Shapes large enough for cpu_gemm to tile C over the threads (OC not a multiple of 16),
// against the analytic double gradients dinp = R W, dW = R^T inp, db = column sums of R.
static void test_matmul_large(backend *b) {
    const int N = 128, IC = 96, OC = 70;
    char name[96];
    float *inp = rand_f((size_t)N * IC, -1, 1), *w = rand_f((size_t)OC * IC, -1, 1);
    float *bias = rand_f(OC, -1, 1), *R = rand_f((size_t)N * OC, -1, 1);
    double *di = to_d(inp, (size_t)N * IC), *dw = to_d(w, (size_t)OC * IC), *db = to_d(bias, OC);
    double *dR = to_d(R, (size_t)N * OC);
    double *ref = xmalloc((size_t)N * OC * sizeof(double));
    ref_matmul(ref, di, dw, db, N, IC, OC);
    float *d_inp = dev_f(b, inp, (size_t)N * IC), *d_w = dev_f(b, w, (size_t)OC * IC);
    float *d_bias = dev_f(b, bias, OC), *d_out = dev_f(b, NULL, (size_t)N * OC);
    b->matmul_fwd(b, d_out, d_inp, d_w, d_bias, N, IC, OC);
    float *out = host_of(b, d_out, (size_t)N * OC);
    double e = 0.0,
           scale = sqrt((double)IC) * max_abs(di, (size_t)N * IC) * max_abs(dw, (size_t)OC * IC);
    for (size_t i = 0; i < (size_t)N * OC; i++) e = fmax(e, fabs(out[i] - ref[i]));
    name_of(name, sizeof name, "matmul_fwd tiled");
    TEST_CHECK(e <= 1e-5 * scale, name, "max error %.3g > 1e-5 * sqrt(K) * scale %.3g", e, scale);

    double *gi = xcalloc((size_t)N * IC, sizeof(double)),
           *gw = xcalloc((size_t)OC * IC, sizeof(double));
    double *gb = xcalloc(OC, sizeof(double));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double r = dR[(size_t)n * OC + o];
            gb[o] += r;
            for (int i = 0; i < IC; i++) {
                gi[(size_t)n * IC + i] += r * dw[(size_t)o * IC + i];
                gw[(size_t)o * IC + i] += r * di[(size_t)n * IC + i];
            }
        }
    float *d_dinp = dev_f(b, NULL, (size_t)N * IC), *d_dw = dev_f(b, NULL, (size_t)OC * IC);
    float *d_db = dev_f(b, NULL, OC), *d_R = dev_f(b, R, (size_t)N * OC);
    b->matmul_bwd(b, d_dinp, d_dw, d_db, d_R, d_inp, d_w, N, IC, OC);
    float *h = host_of(b, d_dinp, (size_t)N * IC);
    name_of(name, sizeof name, "dinp");
    check_rel("matmul_bwd tiled", name, h, NULL, gi, (size_t)N * IC, 1e-5);
    free(h);
    h = host_of(b, d_dw, (size_t)OC * IC);
    name_of(name, sizeof name, "dweight");
    check_rel("matmul_bwd tiled", name, h, NULL, gw, (size_t)OC * IC, 1e-5);
    free(h);
    h = host_of(b, d_db, OC);
    name_of(name, sizeof name, "dbias");
    check_rel("matmul_bwd tiled", name, h, NULL, gb, OC, 1e-5);
    free(h);
    b->free(b, d_inp), b->free(b, d_w), b->free(b, d_bias), b->free(b, d_out);
    b->free(b, d_dinp), b->free(b, d_dw), b->free(b, d_db), b->free(b, d_R);
    free(inp), free(w), free(bias), free(R), free(di), free(dw), free(db), free(dR), free(ref);
    free(out), free(gi), free(gw), free(gb);
}

// ---------------------------------------------------------------------------------------
// LayerNorm, residual, GELU

typedef struct {
    double *inp, *w, *bias;
    int N, C;
} ln_args;
static void fwd_ln(void *a, double *out) {
    ln_args *l = a;
    ref_layernorm(out, NULL, NULL, l->inp, l->w, l->bias, l->N, l->C);
}

static void test_layernorm(backend *b, int N, int C, int check_grad) {
    char name[96], tag[64];
    snprintf(tag, sizeof tag, "layernorm N=%d C=%d", N, C);
    size_t n = (size_t)N * C;
    float *inp = rand_f(n, -2, 3), *w = rand_f(C, 0.5, 1.5), *bias = rand_f(C, -1, 1);
    float *R = rand_f(n, -1, 1);
    ln_args a = {to_d(inp, n), to_d(w, C), to_d(bias, C), N, C};
    double *ref = xmalloc(n * sizeof(double)), *rm = xmalloc(N * sizeof(double));
    double *rr = xmalloc(N * sizeof(double));
    ref_layernorm(ref, rm, rr, a.inp, a.w, a.bias, N, C);
    float *d_inp = dev_f(b, inp, n), *d_w = dev_f(b, w, C), *d_b = dev_f(b, bias, C);
    float *d_out = dev_f(b, NULL, n), *d_mean = dev_f(b, NULL, N), *d_rstd = dev_f(b, NULL, N);
    b->layernorm_fwd(b, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    float *h = host_of(b, d_out, n);
    name_of(name, sizeof name, "out");
    check_rel(tag, name, h, NULL, ref, n, 1e-5);
    free(h);
    h = host_of(b, d_mean, N);
    name_of(name, sizeof name, "mean");
    check_rel(tag, name, h, NULL, rm, N, 1e-5);
    free(h);
    h = host_of(b, d_rstd, N);
    name_of(name, sizeof name, "rstd");
    check_rel(tag, name, h, NULL, rr, N, 1e-5);
    free(h);
    if (check_grad) {
        float *g0i = rand_f(n, -1, 1), *g0w = rand_f(C, -1, 1), *g0b = rand_f(C, -1, 1);
        float *d_dinp = dev_f(b, g0i, n), *d_dw = dev_f(b, g0w, C), *d_db = dev_f(b, g0b, C);
        float *d_R = dev_f(b, R, n);
        b->layernorm_bwd(b, d_dinp, d_dw, d_db, d_R, d_inp, d_w, d_mean, d_rstd, N, C);
        double *Rd = to_d(R, n), *fd = xmalloc(n * sizeof(double));
        fd_grad(fwd_ln, &a, n, Rd, a.inp, NULL, n, fd);
        h = host_of(b, d_dinp, n);
        name_of(name, sizeof name, "dinp (accumulated)");
        check_rel(tag, name, h, g0i, fd, n, 1e-4);
        free(h);
        fd_grad(fwd_ln, &a, n, Rd, a.w, NULL, C, fd);
        h = host_of(b, d_dw, C);
        name_of(name, sizeof name, "dweight (accumulated)");
        check_rel(tag, name, h, g0w, fd, C, 1e-4);
        free(h);
        fd_grad(fwd_ln, &a, n, Rd, a.bias, NULL, C, fd);
        h = host_of(b, d_db, C);
        name_of(name, sizeof name, "dbias (accumulated)");
        check_rel(tag, name, h, g0b, fd, C, 1e-4);
        free(h);
        b->free(b, d_dinp), b->free(b, d_dw), b->free(b, d_db), b->free(b, d_R);
        free(g0i), free(g0w), free(g0b), free(Rd), free(fd);
    }
    b->free(b, d_inp), b->free(b, d_w), b->free(b, d_b), b->free(b, d_out);
    b->free(b, d_mean), b->free(b, d_rstd);
    free(inp), free(w), free(bias), free(R), free(a.inp), free(a.w), free(a.bias);
    free(ref), free(rm), free(rr);
}

static void test_residual(backend *b) {
    const size_t n = 1003;
    char name[96];
    float *x = rand_f(n, -1, 1), *y = rand_f(n, -1, 1);
    double *ref = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + y[i];
    float *d_x = dev_f(b, x, n), *d_y = dev_f(b, y, n), *d_out = dev_f(b, NULL, n);
    b->residual_fwd(b, d_out, d_x, d_y, n);
    float *h = host_of(b, d_out, n);
    name_of(name, sizeof name, "out");
    check_rel("residual_fwd", name, h, NULL, ref, n, 1e-6);
    free(h);
    b->residual_fwd(b, d_x, d_x, d_y, n); // out aliases a
    h = host_of(b, d_x, n);
    name_of(name, sizeof name, "out aliasing a");
    check_rel("residual_fwd", name, h, NULL, ref, n, 1e-6);
    free(h);
    b->free(b, d_x), b->free(b, d_y), b->free(b, d_out);
    free(x), free(y), free(ref);
}

typedef struct {
    double *x;
    size_t n;
} gelu_args;
static void fwd_gelu(void *a, double *out) {
    gelu_args *g = a;
    for (size_t i = 0; i < g->n; i++) out[i] = ref_gelu(g->x[i]);
}

static void test_gelu(backend *b) {
    const size_t n = 1001;
    char name[96];
    float *x = rand_f(n, -6, 6), *R = rand_f(n, -1, 1);
    x[0] = 0.0f, x[1] = -1e-3f, x[2] = 1e-3f;
    gelu_args a = {to_d(x, n), n};
    double *ref = xmalloc(n * sizeof(double));
    fwd_gelu(&a, ref);
    float *d_x = dev_f(b, x, n), *d_out = dev_f(b, NULL, n);
    b->gelu_fwd(b, d_out, d_x, n);
    float *h = host_of(b, d_out, n);
    name_of(name, sizeof name, "out");
    check_rel("gelu_fwd", name, h, NULL, ref, n, 1e-5);
    free(h);
    // Saturation far out: gelu(x) -> x for large x, -> 0 for very negative x, no NaN/inf.
    float far[4] = {-100.0f, -12.0f, 12.0f, 100.0f}, far_out[4];
    float *d_far = dev_f(b, far, 4);
    b->gelu_fwd(b, d_far, d_far, 4);
    b->copy_to_host(b, far_out, d_far, sizeof far_out);
    name_of(name, sizeof name, "gelu_fwd saturates");
    TEST_CHECK(fabsf(far_out[0]) < 1e-30f && fabsf(far_out[1]) < 1e-30f && far_out[2] == 12.0f &&
                   far_out[3] == 100.0f,
               name, "gelu(-100, -12, 12, 100) = %g %g %g %g", far_out[0], far_out[1], far_out[2],
               far_out[3]);
    double *Rd = to_d(R, n), *fd = xmalloc(n * sizeof(double));
    fd_grad(fwd_gelu, &a, n, Rd, a.x, NULL, n, fd);
    float *junk = rand_f(n, 100, 200);
    float *d_R = dev_f(b, R, n), *d_dinp = dev_f(b, junk, n);
    b->gelu_bwd(b, d_dinp, d_x, d_R, n);
    h = host_of(b, d_dinp, n);
    name_of(name, sizeof name, "dinp (overwritten)");
    check_rel("gelu_bwd", name, h, NULL, fd, n, 1e-4);
    free(h);
    b->gelu_bwd(b, d_R, d_x, d_R, n); // dinp aliases dout
    h = host_of(b, d_R, n);
    name_of(name, sizeof name, "dinp aliasing dout");
    check_rel("gelu_bwd", name, h, NULL, fd, n, 1e-4);
    free(h);
    b->free(b, d_x), b->free(b, d_out), b->free(b, d_far), b->free(b, d_R), b->free(b, d_dinp);
    free(x), free(R), free(a.x), free(ref), free(Rd), free(fd), free(junk);
}

// ---------------------------------------------------------------------------------------
// Attention

typedef struct {
    double *qkv;
    int B, T, NH, HS;
} attn_args;
static void fwd_attn(void *a, double *out) {
    attn_args *t = a;
    ref_attention(out, NULL, t->qkv, t->B, t->T, t->NH, t->HS);
}

// Forward and probabilities against the reference, causality, and dqkv against finite
// differences (on `nfd` random elements of qkv, all when nfd is 0).
static void test_attention(backend *b, int B, int T, int NH, int HS, cpu_attn_policy policy,
                           size_t nfd) {
    cpu_ctx *ctx = b->ctx;
    ctx->attn_policy = policy;
    char tag[96], name[96];
    snprintf(tag, sizeof tag, "attention B=%d T=%d NH=%d HS=%d %s", B, T, NH, HS,
             policy == CPU_ATTN_HEADS   ? "heads"
             : policy == CPU_ATTN_INNER ? "inner"
                                        : "auto");
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    const size_t nP = (size_t)B * NH * T * T;
    float *qkv = rand_f(nqkv, -2, 2), *R = rand_f(nout, -1, 1);
    attn_args a = {to_d(qkv, nqkv), B, T, NH, HS};
    double *ref = xmalloc(nout * sizeof(double)), *refP = xmalloc(nP * sizeof(double));
    ref_attention(ref, refP, a.qkv, B, T, NH, HS);
    TRI_ASSERT(b->attention_state_bytes(b, B, T, NH) == nP * sizeof(float));
    float *d_qkv = dev_f(b, qkv, nqkv), *d_out = dev_f(b, NULL, nout);
    float *junkP = rand_f(nP, 5, 6); // state reused from an earlier micro-batch
    float *d_P = dev_f(b, junkP, nP);
    b->attention_fwd(b, d_out, d_P, d_qkv, B, T, NH, HS);
    float *out = host_of(b, d_out, nout), *P = host_of(b, d_P, nP);
    name_of(name, sizeof name, "out");
    check_rel(tag, name, out, NULL, ref, nout, 1e-5);
    name_of(name, sizeof name, "probabilities (state)");
    check_rel(tag, name, P, NULL, refP, nP, 1e-5);

    // Causality: new k and v for token t0 of batch 0 leave every output before t0 bitwise
    // unchanged (masked probabilities are exactly 0, and 0 * v adds nothing).
    const int t0 = T / 2;
    float *qkv2 = xmalloc(nqkv * sizeof(float));
    memcpy(qkv2, qkv, nqkv * sizeof(float));
    for (int c = C; c < 3 * C; c++) qkv2[(size_t)t0 * 3 * C + c] += 1.5f;
    b->copy_to_device(b, d_qkv, qkv2, nqkv * sizeof(float));
    b->attention_fwd(b, d_out, d_P, d_qkv, B, T, NH, HS);
    float *out2 = host_of(b, d_out, nout);
    int same_before = !memcmp(out, out2, (size_t)t0 * C * sizeof(float));
    int changed_at = memcmp(out + (size_t)t0 * C, out2 + (size_t)t0 * C, (size_t)C * sizeof(float));
    char cname[200];
    snprintf(cname, sizeof cname, "%s causal%s", tag, test_tag);
    TEST_CHECK(same_before && changed_at, cname, "outputs before t0=%d %s; output at t0 %s", t0,
               same_before ? "same" : "CHANGED", changed_at ? "changed" : "UNCHANGED");
    b->copy_to_device(b, d_qkv, qkv, nqkv * sizeof(float));
    b->attention_fwd(b, d_out, d_P, d_qkv, B, T, NH, HS);

    size_t n = nfd ? nfd : nqkv;
    size_t *idx = xmalloc(n * sizeof(size_t));
    for (size_t k = 0; k < n; k++) idx[k] = nfd ? (size_t)((rnd() + 1.0) * 0.5 * nqkv) % nqkv : k;
    double *Rd = to_d(R, nout), *fd = xmalloc(n * sizeof(double));
    fd_grad(fwd_attn, &a, nout, Rd, a.qkv, idx, n, fd);
    float *junk = rand_f(nqkv, 100, 200);
    float *d_dqkv = dev_f(b, junk, nqkv), *d_R = dev_f(b, R, nout);
    b->attention_bwd(b, d_dqkv, d_R, d_qkv, d_P, B, T, NH, HS);
    float *dq = host_of(b, d_dqkv, nqkv), *picked = xmalloc(n * sizeof(float));
    for (size_t k = 0; k < n; k++) picked[k] = dq[idx[k]];
    name_of(name, sizeof name, nfd ? "dqkv (sampled, overwritten)" : "dqkv (overwritten)");
    check_rel(tag, name, picked, NULL, fd, n, 1e-4);
    b->free(b, d_qkv), b->free(b, d_out), b->free(b, d_P), b->free(b, d_dqkv), b->free(b, d_R);
    free(qkv), free(R), free(a.qkv), free(ref), free(refP), free(junkP), free(out), free(P);
    free(qkv2), free(out2), free(idx), free(Rd), free(fd), free(junk), free(dq), free(picked);
    ctx->attn_policy = CPU_ATTN_AUTO;
}

// ---------------------------------------------------------------------------------------
// Embeddings

typedef struct {
    const int *tok;
    double *wte, *wpe;
    int B, T, C, vocab_start, V_local, add_pos;
} emb_args;
static void fwd_emb(void *a, double *out) {
    emb_args *e = a;
    ref_embedding(out, e->tok, e->wte, e->wpe, e->B, e->T, e->C, e->vocab_start, e->V_local,
                  e->add_pos);
}

// Two vocabulary-parallel "ranks" of V/2 rows each; the masked lookups add up to the full
// embedding, and each rank's gradient lands only in the rows it owns.
static void test_embedding(backend *b) {
    const int B = 2, T = 5, C = 20, V = 10, Vl = V / 2;
    const size_t n = (size_t)B * T * C;
    char name[96], tag[64];
    int tok[2 * 5] = {3, 7, 7, 0, 9, 5, 4, 3, 3, 8}; // repeats within and across rows
    float *wte = rand_f((size_t)V * C, -1, 1), *wpe = rand_f((size_t)T * C, -1, 1);
    float *R = rand_f(n, -1, 1);
    double *Rd = to_d(R, n), *sum = xcalloc(n, sizeof(double)), *ref = xmalloc(n * sizeof(double));
    double *wte_d = to_d(wte, (size_t)V * C), *wpe_d = to_d(wpe, (size_t)T * C);
    int *d_tok = dev_i(b, tok, (size_t)B * T);
    float *d_R = dev_f(b, R, n), *d_out = dev_f(b, NULL, n), *d_sum = dev_f(b, NULL, n);
    float *d_wpe = dev_f(b, wpe, (size_t)T * C);
    for (int rank = 0; rank < 2; rank++) {
        const int vs = rank * Vl, add_pos = rank == 0; // positions added once, on rank 0
        emb_args a = {.tok = tok, .wte = to_d(wte + (size_t)vs * C, (size_t)Vl * C),
                      .wpe = to_d(wpe, (size_t)T * C), .B = B, .T = T, .C = C,
                      .vocab_start = vs, .V_local = Vl, .add_pos = add_pos};
        float *d_wte = dev_f(b, wte + (size_t)vs * C, (size_t)Vl * C);
        for (int ap = 0; ap < 2; ap++) {
            a.add_pos = ap;
            fwd_emb(&a, ref);
            b->embedding_fwd(b, d_out, d_tok, d_wte, d_wpe, B, T, C, vs, Vl, ap);
            float *h = host_of(b, d_out, n);
            snprintf(tag, sizeof tag, "embedding_fwd vocab_start=%d add_pos=%d", vs, ap);
            name_of(name, sizeof name, "out");
            check_rel(tag, name, h, NULL, ref, n, 1e-6);
            free(h);
        }
        a.add_pos = add_pos;
        b->embedding_fwd(b, d_out, d_tok, d_wte, d_wpe, B, T, C, vs, Vl, add_pos);
        b->residual_fwd(b, d_sum, d_sum, d_out, n);

        float *g0e = rand_f((size_t)Vl * C, -1, 1), *g0p = rand_f((size_t)T * C, -1, 1);
        float *d_dwte = dev_f(b, g0e, (size_t)Vl * C), *d_dwpe = dev_f(b, g0p, (size_t)T * C);
        b->embedding_bwd(b, d_dwte, add_pos ? d_dwpe : NULL, d_R, d_tok, B, T, C, vs, Vl);
        double *fd = xmalloc((size_t)Vl * C * sizeof(double));
        fd_grad(fwd_emb, &a, n, Rd, a.wte, NULL, (size_t)Vl * C, fd);
        snprintf(tag, sizeof tag, "embedding_bwd vocab_start=%d", vs);
        float *h = host_of(b, d_dwte, (size_t)Vl * C);
        name_of(name, sizeof name, "dwte (accumulated)");
        check_rel(tag, name, h, g0e, fd, (size_t)Vl * C, 1e-4);
        free(h);
        h = host_of(b, d_dwpe, (size_t)T * C);
        if (add_pos) {
            double *fdp = xmalloc((size_t)T * C * sizeof(double));
            fd_grad(fwd_emb, &a, n, Rd, a.wpe, NULL, (size_t)T * C, fdp);
            name_of(name, sizeof name, "dwpe (accumulated)");
            check_rel(tag, name, h, g0p, fdp, (size_t)T * C, 1e-4);
            free(fdp);
        } else {
            name_of(name, sizeof name, "embedding_bwd dwpe NULL skipped");
            TEST_CHECK(!memcmp(h, g0p, (size_t)T * C * sizeof(float)), name, "dwpe changed");
        }
        free(h);
        b->free(b, d_wte), b->free(b, d_dwte), b->free(b, d_dwpe);
        free(a.wte), free(a.wpe), free(g0e), free(g0p), free(fd);
    }
    emb_args full = {tok, wte_d, wpe_d, B, T, C, 0, V, 1};
    fwd_emb(&full, ref);
    float *h = host_of(b, d_sum, n);
    name_of(name, sizeof name, "embedding_fwd two ranks sum to the full lookup");
    check_rel(name, "", h, NULL, ref, n, 1e-6);
    free(h);
    b->free(b, d_tok), b->free(b, d_R), b->free(b, d_out), b->free(b, d_sum), b->free(b, d_wpe);
    free(wte), free(wpe), free(R), free(Rd), free(sum), free(ref), free(wte_d), free(wpe_d);
}

// ---------------------------------------------------------------------------------------
// Vocab-parallel cross-entropy

// The four xent ops over `nranks` equal column slices of logits (N, Vp), the cross-rank
// reductions done by hand as the tp all-reduces would (max of rowmax; sums of sumexp and
// target_logit). Writes losses (N), the in-place gradient (N, Vp) and each rank's local
// rowmax (nranks, N) before the all-reduce.
static void xent_ranks(backend *b, const float *logits, const int *targets, int N, int Vp,
                       int V_valid, int nranks, float dloss, float *losses, float *grad,
                       float *local_max) {
    const int Vl = Vp / nranks;
    float **d_l = xmalloc(nranks * sizeof(float *));
    float *slice = xmalloc((size_t)N * Vl * sizeof(float)), *h = xmalloc(N * sizeof(float));
    float *gmax = xmalloc(N * sizeof(float)), *gsum = xcalloc(N, sizeof(float));
    float *gtgt = xcalloc(N, sizeof(float)), *h2 = xmalloc(N * sizeof(float));
    float *d_max = dev_f(b, NULL, N), *d_sum = dev_f(b, NULL, N), *d_tgt = dev_f(b, NULL, N);
    int *d_targets = dev_i(b, targets, N);
    for (int n = 0; n < N; n++) gmax[n] = -INFINITY;
    for (int r = 0; r < nranks; r++) {
        for (int n = 0; n < N; n++)
            memcpy(slice + (size_t)n * Vl, logits + (size_t)n * Vp + (size_t)r * Vl,
                   Vl * sizeof(float));
        d_l[r] = dev_f(b, slice, (size_t)N * Vl);
        b->xent_max(b, d_max, d_l[r], N, Vl, r * Vl, V_valid);
        b->copy_to_host(b, local_max + (size_t)r * N, d_max, N * sizeof(float));
        for (int n = 0; n < N; n++) gmax[n] = fmaxf(gmax[n], local_max[(size_t)r * N + n]);
    }
    b->copy_to_device(b, d_max, gmax, N * sizeof(float));
    for (int r = 0; r < nranks; r++) {
        b->xent_sumexp(b, d_sum, d_tgt, d_l[r], d_max, d_targets, N, Vl, r * Vl, V_valid);
        b->copy_to_host(b, h, d_sum, N * sizeof(float));
        b->copy_to_host(b, h2, d_tgt, N * sizeof(float));
        for (int n = 0; n < N; n++) gsum[n] += h[n], gtgt[n] += h2[n];
    }
    b->copy_to_device(b, d_sum, gsum, N * sizeof(float));
    b->copy_to_device(b, d_tgt, gtgt, N * sizeof(float));
    float *d_loss = dev_f(b, NULL, N);
    b->xent_loss(b, d_loss, d_max, d_sum, d_tgt, N);
    b->copy_to_host(b, losses, d_loss, N * sizeof(float));
    for (int r = 0; r < nranks; r++) {
        b->xent_bwd(b, d_l[r], d_max, d_sum, d_targets, dloss, N, Vl, r * Vl, V_valid);
        b->copy_to_host(b, slice, d_l[r], (size_t)N * Vl * sizeof(float));
        for (int n = 0; n < N; n++)
            memcpy(grad + (size_t)n * Vp + (size_t)r * Vl, slice + (size_t)n * Vl,
                   Vl * sizeof(float));
        b->free(b, d_l[r]);
    }
    b->free(b, d_max), b->free(b, d_sum), b->free(b, d_tgt), b->free(b, d_loss);
    b->free(b, d_targets);
    free(d_l), free(slice), free(h), free(h2), free(gmax), free(gsum), free(gtgt);
}

typedef struct {
    double *logits;
    const int *targets;
    int N, Vp, V_valid;
} xent_args;
static void fwd_xent(void *a, double *out) {
    xent_args *x = a;
    ref_xent(out, x->logits, x->targets, x->N, x->Vp, x->V_valid);
}

static void test_xent(backend *b, int V_valid) {
    const int N = 6, Vp = 48;
    const float dloss = 1.0f / N;
    char tag[64], name[200];
    snprintf(tag, sizeof tag, "xent V_valid=%d Vp=%d", V_valid, Vp);
    float *logits = rand_f((size_t)N * Vp, -4, 4);
    int targets[6];
    for (int n = 0; n < N; n++) {
        targets[n] = (int)((rnd() + 1.0) * 0.5 * V_valid) % V_valid;
        for (int c = V_valid; c < Vp; c++) logits[(size_t)n * Vp + c] = 50.0f; // must be ignored
    }
    targets[N - 1] = V_valid - 1; // the last real column
    xent_args a = {to_d(logits, (size_t)N * Vp), targets, N, Vp, V_valid};
    double *ref = xmalloc(N * sizeof(double));
    fwd_xent(&a, ref);
    float loss1[6], *grad1 = xmalloc((size_t)N * Vp * sizeof(float)), max1[6];
    xent_ranks(b, logits, targets, N, Vp, V_valid, 1, dloss, loss1, grad1, max1);
    double refmax[6];
    for (int n = 0; n < N; n++) {
        refmax[n] = -INFINITY;
        for (int c = 0; c < V_valid; c++) refmax[n] = fmax(refmax[n], a.logits[(size_t)n * Vp + c]);
    }
    name_of(name, sizeof name, "rowmax ignores padded columns");
    check_rel(tag, name, max1, NULL, refmax, N, 0.0);
    name_of(name, sizeof name, "losses");
    check_rel(tag, name, loss1, NULL, ref, N, 1e-5);

    // Gradient of L = dloss * sum(losses) over the real columns; padded ones exactly 0.
    size_t nreal = (size_t)N * V_valid, *idx = xmalloc(nreal * sizeof(size_t));
    for (int n = 0; n < N; n++)
        for (int c = 0; c < V_valid; c++) idx[(size_t)n * V_valid + c] = (size_t)n * Vp + c;
    double R[6], *fd = xmalloc(nreal * sizeof(double));
    for (int n = 0; n < N; n++) R[n] = dloss;
    fd_grad(fwd_xent, &a, N, R, a.logits, idx, nreal, fd);
    float *picked = xmalloc(nreal * sizeof(float));
    int pad_zero = 1;
    for (size_t k = 0; k < nreal; k++) picked[k] = grad1[idx[k]];
    for (int n = 0; n < N; n++)
        for (int c = V_valid; c < Vp; c++) pad_zero &= grad1[(size_t)n * Vp + c] == 0.0f;
    name_of(name, sizeof name, "xent_bwd gradient");
    check_rel(tag, name, picked, NULL, fd, nreal, 1e-4);
    snprintf(name, sizeof name, "%s xent_bwd padded columns 0%s", tag, test_tag);
    TEST_CHECK(pad_zero, name, "nonzero gradient in a padded column");

    // Split over 2 and 4 ranks: same losses and gradient as the unsplit run.
    for (int nranks = 2; nranks <= 4; nranks *= 2) {
        float lossk[6], *gradk = xmalloc((size_t)N * Vp * sizeof(float)), maxk[4 * 6];
        xent_ranks(b, logits, targets, N, Vp, V_valid, nranks, dloss, lossk, gradk, maxk);
        double *l1 = to_d(loss1, N), *g1 = to_d(grad1, (size_t)N * Vp);
        char t2[96];
        snprintf(t2, sizeof t2, "%s split over %d ranks", tag, nranks);
        name_of(name, sizeof name, "losses = unsplit");
        check_rel(t2, name, lossk, NULL, l1, N, 1e-6);
        name_of(name, sizeof name, "gradient = unsplit");
        check_rel(t2, name, gradk, NULL, g1, (size_t)N * Vp, 1e-6);
        int empty_rank = (nranks - 1) * (Vp / nranks) >= V_valid;
        if (empty_rank) {
            snprintf(name, sizeof name, "%s rank without real columns has rowmax -inf%s", t2,
                     test_tag);
            int all_inf = 1;
            for (int n = 0; n < N; n++)
                all_inf &= isinf(maxk[(size_t)(nranks - 1) * N + n]) &&
                           maxk[(size_t)(nranks - 1) * N + n] < 0;
            TEST_CHECK(all_inf, name, "rowmax of the last rank is not -inf");
        }
        free(gradk), free(l1), free(g1);
    }
    free(logits), free(a.logits), free(ref), free(grad1), free(idx), free(fd), free(picked);
}

// ---------------------------------------------------------------------------------------
// Optimizer, reductions, memory

static void test_sumsq_scale(backend *b) {
    const size_t n = (1u << 20) + 3;
    char name[96];
    float *x = rand_f(n, -1, 1);
    long double ref = 0.0L;
    for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
    float *d_x = dev_f(b, x, n);
    double s1 = b->sumsq(b, d_x, n), s2 = b->sumsq(b, d_x, n);
    name_of(name, sizeof name, "sumsq value");
    TEST_CHECK(fabs(s1 - (double)ref) <= 1e-12 * (double)ref, name, "%.17g vs %.17g", s1,
               (double)ref);
    name_of(name, sizeof name, "sumsq deterministic");
    TEST_CHECK(s1 == s2, name, "%.17g then %.17g", s1, s2);
    backend *one = NULL;
    TRI_ASSERT(backend_cpu_create(&one, 1) == TRI_OK);
    double s_one = one->sumsq(one, d_x, n); // same host memory: any backend may read it
    name_of(name, sizeof name, "sumsq 1 thread vs this backend");
    TEST_CHECK(fabs(s_one - s1) <= 1e-12 * s1, name, "%.17g vs %.17g", s_one, s1);
    one->destroy(one);
    name_of(name, sizeof name, "sumsq n=0");
    TEST_CHECK(b->sumsq(b, d_x, 0) == 0.0, name, "nonzero");

    double *ref_s = xmalloc(1003 * sizeof(double));
    for (size_t i = 0; i < 1003; i++) ref_s[i] = (double)x[i] * 0.37;
    b->scale(b, d_x, 0.37f, 1003);
    float *h = host_of(b, d_x, 1003);
    name_of(name, sizeof name, "x");
    check_rel("scale", name, h, NULL, ref_s, 1003, 1e-6);
    b->free(b, d_x);
    free(x), free(h), free(ref_s);
}

// Three AdamW steps with weight decay and grad_scale against the documented formula in
// double. Compared: the parameter change (p - p0; |p0| ~ 1 would hide update errors in
// float rounding of p itself), m and v. Tolerance 2e-5: p's float rounding (6e-8 per step
// of |p| <= 1) against a total change of ~3 lr = 0.03 is 6e-6 relative.
static void test_adamw(backend *b) {
    const size_t n = 1003; // not a multiple of the vector width: the tail runs too
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    char name[96];
    float *p0 = rand_f(n, -1, 1);
    double *p = to_d(p0, n), *m = xcalloc(n, sizeof(double)), *v = xcalloc(n, sizeof(double));
    float *d_p = dev_f(b, p0, n), *d_m = dev_f(b, NULL, n), *d_v = dev_f(b, NULL, n);
    float *d_g = dev_f(b, NULL, n);
    for (int t = 1; t <= 3; t++) {
        float *g = rand_f(n, -0.2, 0.2);
        b->copy_to_device(b, d_g, g, n * sizeof(float));
        b->adamw(b, d_p, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, gs, t);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            m[i] = b1 * m[i] + (1.0 - b1) * gi;
            v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
            double mh = m[i] / (1.0 - pow(b1, t)), vh = v[i] / (1.0 - pow(b2, t));
            p[i] -= lr * (mh / (sqrt(vh) + eps) + wd * p[i]);
        }
        free(g);
    }
    double *dp = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) dp[i] = p[i] - p0[i];
    float *h = host_of(b, d_p, n);
    name_of(name, sizeof name, "parameter change after 3 steps");
    check_rel("adamw", name, h, p0, dp, n, 2e-5);
    free(h);
    h = host_of(b, d_m, n);
    name_of(name, sizeof name, "m");
    check_rel("adamw", name, h, NULL, m, n, 1e-5);
    free(h);
    h = host_of(b, d_v, n);
    name_of(name, sizeof name, "v");
    check_rel("adamw", name, h, NULL, v, n, 1e-5);
    free(h);
    b->free(b, d_p), b->free(b, d_m), b->free(b, d_v), b->free(b, d_g);
    free(p0), free(p), free(m), free(v), free(dp);
}

// cpu_expf, the exp under softmax, cross-entropy and GELU: relative error against exp()
// within 2 float ulps (2.4e-7; measured 8.2e-8) over [-86.9, 88.3]; exactly 0 below (no
// subnormals) and +inf above float's range; NaN kept.
static void test_expf(void) {
    double worst = 0.0;
    for (double x = -86.9; x <= 88.3; x += 1.0 / 1024 + 1e-7) {
        float xf = (float)x;
        double e = fabs(cpu_expf(xf) / exp((double)xf) - 1.0);
        worst = fmax(worst, e);
    }
    TEST_CHECK(worst <= 2.4e-7, "cpu_expf relative error over [-86.9, 88.3]", "%.3g", worst);
    volatile float lo = -87.5f, big = 1000.0f, nan = NAN;
    TEST_CHECK(cpu_expf(lo) == 0.0f && cpu_expf(-big) == 0.0f && isinf(cpu_expf(89.0f)) &&
                   isinf(cpu_expf(big)) && isnan(cpu_expf(nan)),
               "cpu_expf saturates to 0 and inf, keeps NaN",
               "exp(-87.5) %g exp(-1000) %g exp(89) %g exp(1000) %g exp(nan) %g", cpu_expf(lo),
               cpu_expf(-big), cpu_expf(89.0f), cpu_expf(big), cpu_expf(nan));
}

static void test_memory(void) {
    backend *b = NULL;
    TRI_ASSERT(backend_cpu_create(&b, 1) == TRI_OK);
    unsigned char *p1 = b->alloc(b, 1000), *p2 = b->alloc(b, 3000);
    int ok = ((uintptr_t)p1 % 64 == 0) && ((uintptr_t)p2 % 64 == 0);
    TEST_CHECK(ok, "alloc 64-byte aligned", "%p %p", (void *)p1, (void *)p2);
    int zero = 1;
    for (int i = 0; i < 3000; i++) zero &= p2[i] == 0;
    TEST_CHECK(zero, "alloc zero-filled", "nonzero byte");
    b->free(b, p1);
    unsigned char *p3 = b->alloc(b, 500);
    TEST_CHECK(b->mem_peak_bytes(b) == 4000, "mem_peak_bytes after free and smaller alloc",
               "%zu, expected 4000", b->mem_peak_bytes(b));
    b->free(b, p2), b->free(b, p3);
    void *p4 = b->alloc(b, 5000);
    TEST_CHECK(b->mem_peak_bytes(b) == 5000, "mem_peak_bytes grows past the old peak",
               "%zu, expected 5000", b->mem_peak_bytes(b));
    float src[37], back[37];
    for (int i = 0; i < 37; i++) src[i] = (float)i - 3.5f;
    b->copy_to_device(b, p4, src, sizeof src);
    b->copy_to_host(b, back, p4, sizeof back);
    TEST_CHECK(!memcmp(src, back, sizeof src), "copy_to_device/copy_to_host round trip", "differ");
    b->memset_zero(b, p4, sizeof src);
    b->synchronize(b);
    b->copy_to_host(b, back, p4, sizeof back);
    zero = 1;
    for (int i = 0; i < 37; i++) zero &= back[i] == 0.0f;
    TEST_CHECK(zero, "memset_zero", "nonzero");
    b->free(b, p4);
    b->free(b, NULL);
    b->destroy(b);

    tri_status rc = backend_cpu_create(&b, 0);
    TEST_CHECK(rc == TRI_OK && b->threads == omp_get_num_procs() && !strcmp(b->name, "cpu"),
               "backend_cpu_create threads 0 = all cores", "status %d, threads %d, cores %d", rc,
               b ? b->threads : -1, omp_get_num_procs());
    if (b) b->destroy(b);
    rc = backend_cpu_create(&b, -1);
    TEST_CHECK(rc == TRI_ERR_CONFIG && !b, "backend_cpu_create rejects -1", "status %d", rc);
}

// ---------------------------------------------------------------------------------------
// --bench: per-op timings at GPT-2 124M sizes (B*T = 512, C = 768, NH = 12, V = 50304)

typedef struct {
    const char *name;
    double ms;    // per call, fastest run
    int per_step; // calls in one training step of one micro-batch
    double flops; // per call, GEMM work only
    int kind;     // 0 other, 1 matmul, 2 attention
} bench_row;

static bench_row bench_rows[64];
static int bench_nrows = 0;

static double min_of(const double *t, int n) {
    double m = t[0];
    for (int i = 1; i < n; i++) m = t[i] < m ? t[i] : m;
    return m;
}
static void bench_add(const char *name, double s, int per_step, double flops, int kind) {
    TRI_ASSERT(bench_nrows < 64);
    bench_rows[bench_nrows++] = (bench_row){name, s * 1e3, per_step, flops, kind};
}

// Fastest of `reps` runs of `call` after one warm-up run: the minimum, not the median,
// because on a shared machine other processes' time slices land in some runs.
#define BENCH_TIME(result, reps, call)                                                             \
    do {                                                                                           \
        double ts_[32];                                                                            \
        call;                                                                                      \
        for (int r_ = 0; r_ < (reps); r_++) {                                                      \
            double t0_ = time_now_s();                                                             \
            call;                                                                                  \
            ts_[r_] = time_now_s() - t0_;                                                          \
        }                                                                                          \
        (result) = min_of(ts_, (reps));                                                            \
    } while (0)

#define BENCH(name, reps, per_step, flops, kind, call)                                             \
    do {                                                                                           \
        double s_;                                                                                 \
        BENCH_TIME(s_, reps, call);                                                                \
        bench_add(name, s_, per_step, flops, kind);                                                \
    } while (0)

static float *bench_buf(backend *b, size_t n) {
    float *p = b->alloc(b, n * sizeof(float));
    TRI_ASSERT(p);
    for (size_t i = 0; i < n; i++) p[i] = (float)(0.02 * rnd()); // host memory: fill in place
    return p;
}

static int bench(int threads) {
    backend *b = NULL;
    if (backend_cpu_create(&b, threads) != TRI_OK) return 1;
    cpu_ctx *ctx = b->ctx;
    const int B = 2, T = 256, C = 768, NH = 12, HS = 64, N = B * T, V = 50304, Vv = 50257, L = 12;
    const size_t P = (size_t)V * C + 1024 * C + (size_t)L * (12 * C * C + 13 * C) + 2 * C;
    printf("trident CPU backend bench: %d threads, OpenBLAS core %s (%s)\n", b->threads,
           openblas_get_corename(), openblas_get_config());
    printf("GPT-2 124M sizes: B=%d T=%d C=%d NH=%d V=%d, %zu parameters\n\n", B, T, C, NH, V, P);

    // Raw sgemm (512 x 768) @ (768 x 3072): OpenBLAS's own threads, then cpu_gemm's tiles.
    // Measured again at the end and the better kept: a VM's clock drifts by 10-20%.
    float *A = bench_buf(b, (size_t)N * C), *W = bench_buf(b, (size_t)4 * C * C);
    float *Cm = bench_buf(b, (size_t)N * 4 * C);
    const double fl = 2.0 * N * C * 4 * C;
    double s_blas1, s_blas, s_tiled;
#define BENCH_RAW_SGEMM()                                                                          \
    do {                                                                                           \
        openblas_set_num_threads(1);                                                               \
        BENCH_TIME(s_blas1, 15,                                                                    \
                   cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, 4 * C, C, 1.0f, A, C,   \
                               W, C, 0.0f, Cm, 4 * C));                                            \
        openblas_set_num_threads(b->threads);                                                      \
        BENCH_TIME(s_blas, 30,                                                                     \
                   cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, 4 * C, C, 1.0f, A, C,   \
                               W, C, 0.0f, Cm, 4 * C));                                            \
        openblas_set_num_threads(1);                                                               \
        BENCH_TIME(s_tiled, 30, b->matmul_fwd(b, Cm, A, W, NULL, N, C, 4 * C));                    \
        printf("sgemm (512x768)@(768x3072): 1 thread %.1f GFLOP/s; OpenBLAS %d threads %.1f "      \
               "GFLOP/s; backend matmul_fwd (OpenMP tiles) %.1f GFLOP/s\n",                        \
               fl / s_blas1 * 1e-9, b->threads, fl / s_blas * 1e-9, fl / s_tiled * 1e-9);          \
    } while (0)
    BENCH_RAW_SGEMM();
    double raw_rate = fl / (s_blas < s_tiled ? s_blas : s_tiled);
    printf("\n");

    // Activations and weights of one layer plus the head.
    float *x = bench_buf(b, (size_t)N * C), *ln = bench_buf(b, (size_t)N * C);
    float *mean = bench_buf(b, N), *rstd = bench_buf(b, N), *lnw = bench_buf(b, C),
          *lnb = bench_buf(b, C);
    float *dlnw = bench_buf(b, C), *dlnb = bench_buf(b, C), *dx = bench_buf(b, (size_t)N * C);
    float *qkv = bench_buf(b, (size_t)N * 3 * C), *dqkv = bench_buf(b, (size_t)N * 3 * C);
    float *qkvw = bench_buf(b, (size_t)3 * C * C), *qkvb = bench_buf(b, 3 * C);
    float *dqkvw = bench_buf(b, (size_t)3 * C * C), *dqkvb = bench_buf(b, 3 * C);
    float *att = bench_buf(b, (size_t)N * C), *datt = bench_buf(b, (size_t)N * C);
    float *projw = bench_buf(b, (size_t)C * C), *projb = bench_buf(b, C);
    float *dprojw = bench_buf(b, (size_t)C * C), *dprojb = bench_buf(b, C);
    float *fcw = bench_buf(b, (size_t)4 * C * C), *fcb = bench_buf(b, 4 * C);
    float *dfcw = bench_buf(b, (size_t)4 * C * C), *dfcb = bench_buf(b, 4 * C);
    float *fcpw = bench_buf(b, (size_t)4 * C * C), *fcpb = bench_buf(b, C);
    float *dfcpw = bench_buf(b, (size_t)4 * C * C), *dfcpb = bench_buf(b, C);
    float *h = bench_buf(b, (size_t)N * 4 * C), *hg = bench_buf(b, (size_t)N * 4 * C);
    float *dh = bench_buf(b, (size_t)N * 4 * C);
    float *state = b->alloc(b, b->attention_state_bytes(b, B, T, NH));
    float *wte = bench_buf(b, (size_t)V * C), *wpe = bench_buf(b, (size_t)T * C);
    float *dwte = bench_buf(b, (size_t)V * C), *dwpe = bench_buf(b, (size_t)T * C);
    float *logits = bench_buf(b, (size_t)N * V), *rowmax = bench_buf(b, N);
    float *sumexp = bench_buf(b, N), *tgt = bench_buf(b, N), *losses = bench_buf(b, N);
    int *tokens = b->alloc(b, N * sizeof(int));
    for (int i = 0; i < N; i++) tokens[i] = (int)((rnd() + 1.0) * 0.5 * Vv) % Vv;
    const double mm = 2.0 * N * C;
    const double attf = 4.0 * B * NH * (double)T * T * HS; // QK^T and PV, full T x T

    BENCH("embedding_fwd", 15, 1, 0, 0, b->embedding_fwd(b, x, tokens, wte, wpe, B, T, C, 0, V, 1));
    BENCH("embedding_bwd", 15, 1, 0, 0, b->embedding_bwd(b, dwte, dwpe, x, tokens, B, T, C, 0, V));
    BENCH("layernorm_fwd", 31, 2 * L + 1, 0, 0,
          b->layernorm_fwd(b, ln, mean, rstd, x, lnw, lnb, N, C));
    BENCH("layernorm_bwd", 31, 2 * L + 1, 0, 0,
          b->layernorm_bwd(b, dx, dlnw, dlnb, ln, x, lnw, mean, rstd, N, C));
    BENCH("matmul_fwd qkv 768->2304", 15, L, mm * 3 * C, 1,
          b->matmul_fwd(b, qkv, ln, qkvw, qkvb, N, C, 3 * C));
    BENCH("matmul_bwd qkv", 15, L, 2 * mm * 3 * C, 1,
          b->matmul_bwd(b, dx, dqkvw, dqkvb, dqkv, ln, qkvw, N, C, 3 * C));
    BENCH("attention_fwd", 15, L, attf, 2, b->attention_fwd(b, att, state, qkv, B, T, NH, HS));
    BENCH("attention_bwd", 15, L, 2 * attf, 2,
          b->attention_bwd(b, dqkv, datt, qkv, state, B, T, NH, HS));
    BENCH("matmul_fwd attproj 768->768", 15, L, mm * C, 1,
          b->matmul_fwd(b, x, att, projw, projb, N, C, C));
    BENCH("matmul_bwd attproj", 15, L, 2 * mm * C, 1,
          b->matmul_bwd(b, datt, dprojw, dprojb, dx, att, projw, N, C, C));
    BENCH("residual_fwd", 31, 2 * L, 0, 0, b->residual_fwd(b, x, x, ln, (size_t)N * C));
    BENCH("matmul_fwd fc 768->3072", 15, L, mm * 4 * C, 1,
          b->matmul_fwd(b, h, ln, fcw, fcb, N, C, 4 * C));
    BENCH("matmul_bwd fc", 15, L, 2 * mm * 4 * C, 1,
          b->matmul_bwd(b, dx, dfcw, dfcb, dh, ln, fcw, N, C, 4 * C));
    BENCH("gelu_fwd", 31, L, 0, 0, b->gelu_fwd(b, hg, h, (size_t)N * 4 * C));
    BENCH("gelu_bwd", 31, L, 0, 0, b->gelu_bwd(b, dh, h, dh, (size_t)N * 4 * C));
    BENCH("matmul_fwd fcproj 3072->768", 15, L, mm * 4 * C, 1,
          b->matmul_fwd(b, x, hg, fcpw, fcpb, N, 4 * C, C));
    BENCH("matmul_bwd fcproj", 15, L, 2 * mm * 4 * C, 1,
          b->matmul_bwd(b, dh, dfcpw, dfcpb, dx, hg, fcpw, N, 4 * C, C));
    BENCH("matmul_fwd lm_head 768->50304", 5, 1, mm * V, 1,
          b->matmul_fwd(b, logits, ln, wte, NULL, N, C, V));
    BENCH("xent max+sumexp+loss", 9, 1, 0, 0, {
        b->xent_max(b, rowmax, logits, N, V, 0, Vv);
        b->xent_sumexp(b, sumexp, tgt, logits, rowmax, tokens, N, V, 0, Vv);
        b->xent_loss(b, losses, rowmax, sumexp, tgt, N);
    });
    BENCH("xent_bwd", 9, 1, 0, 0,
          b->xent_bwd(b, logits, rowmax, sumexp, tokens, 1.0f / N, N, V, 0, Vv));
    BENCH("matmul_bwd lm_head", 5, 1, 2 * mm * V, 1,
          b->matmul_bwd(b, ln, dwte, NULL, logits, ln, wte, N, C, V));
    b->free(b, logits);
    b->free(b, dwte);
    float *pp = bench_buf(b, P), *pg = bench_buf(b, P), *pm = b->alloc(b, P * 4),
          *pv = b->alloc(b, P * 4);
    volatile double sink = 0.0;
    BENCH("sumsq (all params)", 5, 1, 0, 0, sink += b->sumsq(b, pg, P));
    BENCH("scale (all params)", 5, 1, 0, 0, b->scale(b, pg, 1.0f, P));
    BENCH("adamw (all params)", 5, 1, 0, 0,
          b->adamw(b, pp, pg, pm, pv, P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 3));
    (void)sink;

    printf("%-30s %10s %8s %12s %10s\n", "op", "ms/call", "calls", "ms/step", "GFLOP/s");
    double total = 0.0, t_mm = 0.0, t_att = 0.0, f_mm = 0.0, f_att = 0.0;
    for (int i = 0; i < bench_nrows; i++) {
        bench_row *r = &bench_rows[i];
        double step = r->ms * r->per_step;
        total += step;
        if (r->kind == 1) t_mm += step, f_mm += r->flops * r->per_step;
        if (r->kind == 2) t_att += step, f_att += r->flops * r->per_step;
        if (r->flops > 0)
            printf("%-30s %10.3f %8d %12.2f %10.1f\n", r->name, r->ms, r->per_step, step,
                   r->flops / (r->ms * 1e-3) * 1e-9);
        else
            printf("%-30s %10.3f %8d %12.2f\n", r->name, r->ms, r->per_step, step);
    }
    BENCH_RAW_SGEMM(); // again, after the table
    double raw_again = fl / (s_blas < s_tiled ? s_blas : s_tiled);
    raw_rate = raw_again > raw_rate ? raw_again : raw_rate;
    printf("\nstep estimate (sum of isolated ops, one micro-batch of 2x256): %.1f ms\n", total);
    printf("  matmuls %.1f ms (%.0f%%, %.1f GFLOP/s), attention %.1f ms (%.0f%%), other %.1f ms "
           "(%.0f%%)\n",
           t_mm, 100 * t_mm / total, f_mm / (t_mm * 1e-3) * 1e-9, t_att, 100 * t_att / total,
           total - t_mm - t_att, 100 * (total - t_mm - t_att) / total);
    printf("  matmul FLOPs / step time = %.1f GFLOP/s = %.0f%% of the best raw sgemm %.1f GFLOP/s "
           "(with attention's full-T^2 FLOPs: %.0f%%)\n",
           f_mm / (total * 1e-3) * 1e-9, 100 * f_mm / (total * 1e-3) / raw_rate, raw_rate * 1e-9,
           100 * (f_mm + f_att) / (total * 1e-3) / raw_rate);

    // One transformer block forward + backward run back to back, against the sum of its
    // parts measured alone: the difference is what ops cost each other (cache, thread wake-up).
    double s_chain;
    BENCH_TIME(s_chain, 9, {
        b->layernorm_fwd(b, ln, mean, rstd, x, lnw, lnb, N, C);
        b->matmul_fwd(b, qkv, ln, qkvw, qkvb, N, C, 3 * C);
        b->attention_fwd(b, att, state, qkv, B, T, NH, HS);
        b->matmul_fwd(b, dx, att, projw, projb, N, C, C);
        b->residual_fwd(b, x, x, dx, (size_t)N * C);
        b->layernorm_fwd(b, ln, mean, rstd, x, lnw, lnb, N, C);
        b->matmul_fwd(b, h, ln, fcw, fcb, N, C, 4 * C);
        b->gelu_fwd(b, hg, h, (size_t)N * 4 * C);
        b->matmul_fwd(b, dx, hg, fcpw, fcpb, N, 4 * C, C);
        b->residual_fwd(b, x, x, dx, (size_t)N * C);
        b->matmul_bwd(b, dh, dfcpw, dfcpb, dx, hg, fcpw, N, 4 * C, C);
        b->gelu_bwd(b, dh, h, dh, (size_t)N * 4 * C);
        b->matmul_bwd(b, ln, dfcw, dfcb, dh, ln, fcw, N, C, 4 * C);
        b->layernorm_bwd(b, dx, dlnw, dlnb, ln, x, lnw, mean, rstd, N, C);
        b->matmul_bwd(b, datt, dprojw, dprojb, dx, att, projw, N, C, C);
        b->attention_bwd(b, dqkv, datt, qkv, state, B, T, NH, HS);
        b->matmul_bwd(b, ln, dqkvw, dqkvb, dqkv, ln, qkvw, N, C, 3 * C);
        b->layernorm_bwd(b, dx, dlnw, dlnb, ln, x, lnw, mean, rstd, N, C);
    });
    double parts = 0.0;
    for (int i = 0; i < bench_nrows; i++) {
        const char *n = bench_rows[i].name;
        int times = !strncmp(n, "layernorm", 9) || !strncmp(n, "residual", 8) ? 2 : 1;
        if (strstr(n, "lm_head") || strstr(n, "embedding") || strstr(n, "xent") ||
            strstr(n, "params"))
            continue;
        parts += times * bench_rows[i].ms;
    }
    printf("one block fwd+bwd back to back: %.2f ms (its ops alone: %.2f ms)\n\n", s_chain * 1e3,
           parts);

    // Attention threading: OpenMP over heads (one sgemm per thread) vs heads in turn with
    // the GEMMs tiled and softmax rows split over the threads.
    const int cfg[2][4] = {{2, 256, 12, 64}, {8, 256, 4, 32}};
    for (int k = 0; k < 2; k++) {
        int cb = cfg[k][0], ct = cfg[k][1], cnh = cfg[k][2], chs = cfg[k][3], cc = cnh * chs;
        float *cq = bench_buf(b, (size_t)cb * ct * 3 * cc),
              *cdq = bench_buf(b, (size_t)cb * ct * 3 * cc);
        float *co = bench_buf(b, (size_t)cb * ct * cc);
        float *cs = b->alloc(b, b->attention_state_bytes(b, cb, ct, cnh));
        for (int pol = CPU_ATTN_HEADS; pol <= CPU_ATTN_INNER; pol++) {
            ctx->attn_policy = (cpu_attn_policy)pol;
            double sf, sb;
            BENCH_TIME(sf, 15, b->attention_fwd(b, co, cs, cq, cb, ct, cnh, chs));
            BENCH_TIME(sb, 15, b->attention_bwd(b, cdq, co, cq, cs, cb, ct, cnh, chs));
            printf("attention B=%d T=%d NH=%2d HS=%d %-28s fwd %.3f ms  bwd %.3f ms\n", cb, ct, cnh,
                   chs,
                   pol == CPU_ATTN_HEADS ? "OpenMP over heads:" : "heads in turn, tiled:", sf * 1e3,
                   sb * 1e3);
        }
        ctx->attn_policy = CPU_ATTN_AUTO;
        b->free(b, cq), b->free(b, cdq), b->free(b, co), b->free(b, cs);
    }
    printf("\nmem_peak_bytes: %.1f MiB\n", b->mem_peak_bytes(b) / 1048576.0);
    b->destroy(b); // the process exits next: the buffers go with it
    return 0;
}

// ---------------------------------------------------------------------------------------

static void run_all(int threads) {
    backend *b = NULL;
    TRI_ASSERT(backend_cpu_create(&b, threads) == TRI_OK);
    snprintf(test_tag, sizeof test_tag, " t%d", threads);
    test_matmul_small(b, 1);
    test_matmul_small(b, 0);
    test_matmul_large(b);
    test_layernorm(b, 7, 10, 1);
    test_layernorm(b, 37, 768, 0);
    test_residual(b);
    test_gelu(b);
    test_attention(b, 2, 7, 3, 4, CPU_ATTN_HEADS, 0);
    test_attention(b, 2, 7, 3, 4, CPU_ATTN_INNER, 0);
    test_attention(b, 1, 64, 2, 8, CPU_ATTN_AUTO, 600);
    test_attention(b, 1, 150, 2, 8, CPU_ATTN_HEADS, 600); // three row blocks, the last partial
    test_attention(b, 1, 150, 2, 8, CPU_ATTN_INNER, 600);
    test_embedding(b);
    test_xent(b, 37);
    test_xent(b, 20);
    test_sumsq_scale(b);
    test_adamw(b);
    b->destroy(b);
}

int main(int argc, char **argv) {
    backend_cpu_prepare_process(argv); // the OpenBLAS kernels trident itself runs with
    log_init();
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench(argc > 2 ? atoi(argv[2]) : 2);
    test_memory();
    test_expf();
    for (int threads = 1; threads <= 3; threads++) run_all(threads);
    TEST_EXIT();
}
