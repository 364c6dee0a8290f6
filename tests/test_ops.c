// test_ops.c: the CPU backend's memory, cpu_expf, and its ops other than attention and the
// cross-entropy (matmul, layernorm, residual, GELU, embedding, sumsq, scale, AdamW) against
// the double-precision references and finite differences of tests/ops_ref.h, whose header
// says why the tolerances are what they are. Attention, the vocab-parallel cross-entropy
// and the --bench timing table are in tests/test_ops_attn.c.
//
//   build/tests/test_ops            the tests, on backends of 1, 2 and 3 threads
#include "compute/backend.h"
#include "compute/backend_cpu_internal.h" // cpu_expf
#include "ops_ref.h"
#include "testlib.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------
// Linear

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
    backend_matmul_fwd(b, d_out, NULL, operand_fp32(d_inp), operand_fp32(d_w), with_bias ? d_bias : NULL, N, IC, OC);
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
    backend_matmul_bwd(b, d_dinp, d_dw, with_bias ? d_db : NULL, operand_fp32(d_R), operand_fp32(d_inp), operand_fp32(d_w), NULL, N, IC, OC);
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
    backend_matmul_bwd(b, NULL, d_dw, NULL, operand_fp32(d_R), operand_fp32(d_inp), operand_fp32(d_w), NULL, N, IC, OC);
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
// bf16: the same through matmul_fwd_bf16 / matmul_bwd_bf16, inp, w and R rounded to bf16
// first; their products are exact in fp32, so the fp32 tolerance holds.
static void test_matmul_large(backend *b, int bf16) {
    const int N = 128, IC = 96, OC = 70;
    char name[96];
    const char *fwd_name = bf16 ? "matmul_fwd_bf16 tiled" : "matmul_fwd tiled";
    const char *bwd_name = bf16 ? "matmul_bwd_bf16 tiled" : "matmul_bwd tiled";
    float *inp = rand_f((size_t)N * IC, -1, 1), *w = rand_f((size_t)OC * IC, -1, 1);
    float *bias = rand_f(OC, -1, 1), *R = rand_f((size_t)N * OC, -1, 1);
    uint16_t *h_inp = bf16 ? dev_bf16(b, inp, (size_t)N * IC) : NULL;
    uint16_t *h_w = bf16 ? dev_bf16(b, w, (size_t)OC * IC) : NULL;
    uint16_t *h_R = bf16 ? dev_bf16(b, R, (size_t)N * OC) : NULL;
    double *di = to_d(inp, (size_t)N * IC), *dw = to_d(w, (size_t)OC * IC), *db = to_d(bias, OC);
    double *dR = to_d(R, (size_t)N * OC);
    double *ref = xmalloc((size_t)N * OC * sizeof(double));
    ref_matmul(ref, di, dw, db, N, IC, OC);
    float *d_inp = dev_f(b, inp, (size_t)N * IC), *d_w = dev_f(b, w, (size_t)OC * IC);
    float *d_bias = dev_f(b, bias, OC), *d_out = dev_f(b, NULL, (size_t)N * OC);
    if (bf16) backend_matmul_fwd(b, d_out, NULL, operand_bf16(h_inp), operand_bf16(h_w), d_bias, N, IC, OC);
    else backend_matmul_fwd(b, d_out, NULL, operand_fp32(d_inp), operand_fp32(d_w), d_bias, N, IC, OC);
    float *out = host_of(b, d_out, (size_t)N * OC);
    double e = 0.0,
           scale = sqrt((double)IC) * max_abs(di, (size_t)N * IC) * max_abs(dw, (size_t)OC * IC);
    for (size_t i = 0; i < (size_t)N * OC; i++) e = fmax(e, fabs(out[i] - ref[i]));
    name_of(name, sizeof name, fwd_name);
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
    if (bf16) backend_matmul_bwd(b, d_dinp, d_dw, d_db, operand_bf16(h_R), operand_bf16(h_inp), operand_bf16(h_w), NULL, N, IC, OC);
    else backend_matmul_bwd(b, d_dinp, d_dw, d_db, operand_fp32(d_R), operand_fp32(d_inp), operand_fp32(d_w), NULL, N, IC, OC);
    float *h = host_of(b, d_dinp, (size_t)N * IC);
    name_of(name, sizeof name, "dinp");
    check_rel(bwd_name, name, h, NULL, gi, (size_t)N * IC, 1e-5);
    free(h);
    h = host_of(b, d_dw, (size_t)OC * IC);
    name_of(name, sizeof name, "dweight");
    check_rel(bwd_name, name, h, NULL, gw, (size_t)OC * IC, 1e-5);
    free(h);
    h = host_of(b, d_db, OC);
    name_of(name, sizeof name, "dbias");
    check_rel(bwd_name, name, h, NULL, gb, OC, 1e-5);
    free(h);
    if (bf16) b->free(b, h_inp), b->free(b, h_w), b->free(b, h_R);
    b->free(b, d_inp), b->free(b, d_w), b->free(b, d_bias), b->free(b, d_out);
    b->free(b, d_dinp), b->free(b, d_dw), b->free(b, d_db), b->free(b, d_R);
    free(inp), free(w), free(bias), free(R), free(di), free(dw), free(db), free(dR), free(ref);
    free(out), free(gi), free(gw), free(gb);
}

// ---------------------------------------------------------------------------------------
// LayerNorm, residual, GELU

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

// The GELU fused into the GEMMs: the same values as the GEMM and the GELU run apart, bit for
// bit (the CPU composes them; the GPU test holds CUDA's fused epilogues to these).
static void test_matmul_gelu(backend *b) {
    const int N = 48, IC = 40, OC = 56;
    char name[96];
    float *inp = dev_rand(b, (size_t)N * IC, -1, 1);
    float *w = dev_rand(b, (size_t)OC * IC, -1, 1);
    float *bias = dev_rand(b, OC, -1, 1), *pre2 = dev_rand(b, (size_t)N * IC, -3, 3);
    float *dout = dev_rand(b, (size_t)N * OC, -1, 1);
    float *out = dev_f(b, NULL, (size_t)N * OC), *pre = dev_f(b, NULL, (size_t)N * OC);
    float *ref = dev_f(b, NULL, (size_t)N * OC), *ref_pre = dev_f(b, NULL, (size_t)N * OC);
    backend_matmul_fwd(b, out, pre, (operand){inp, 0 ? DTYPE_BF16 : DTYPE_FP32}, (operand){w, 0 ? DTYPE_BF16 : DTYPE_FP32}, bias, N, IC, OC);
    backend_matmul_fwd(b, ref_pre, NULL, operand_fp32(inp), operand_fp32(w), bias, N, IC, OC);
    b->gelu_fwd(b, ref, ref_pre, (size_t)N * OC);
    float *h[4] = {host_of(b, out, (size_t)N * OC), host_of(b, ref, (size_t)N * OC),
                   host_of(b, pre, (size_t)N * OC), host_of(b, ref_pre, (size_t)N * OC)};
    name_of(name, sizeof name, "matmul_gelu_fwd = matmul_fwd then gelu_fwd (bitwise)");
    TEST_CHECK(!memcmp(h[0], h[1], (size_t)N * OC * sizeof(float)) &&
                   !memcmp(h[2], h[3], (size_t)N * OC * sizeof(float)),
               name, "out or pre differ");
    for (int k = 0; k < 4; k++) free(h[k]);
    float *dinp = dev_f(b, NULL, (size_t)N * IC), *dw = dev_f(b, NULL, (size_t)OC * IC);
    float *db = dev_f(b, NULL, OC), *rdinp = dev_f(b, NULL, (size_t)N * IC);
    float *rdw = dev_f(b, NULL, (size_t)OC * IC), *rdb = dev_f(b, NULL, OC);
    backend_matmul_bwd(b, dinp, dw, db, (operand){dout, 0 ? DTYPE_BF16 : DTYPE_FP32}, (operand){inp, 0 ? DTYPE_BF16 : DTYPE_FP32}, (operand){w, 0 ? DTYPE_BF16 : DTYPE_FP32}, pre2, N, IC, OC);
    backend_matmul_bwd(b, rdinp, rdw, rdb, operand_fp32(dout), operand_fp32(inp), operand_fp32(w), NULL, N, IC, OC);
    b->gelu_bwd(b, rdinp, pre2, rdinp, (size_t)N * IC);
    float *g[4] = {host_of(b, dinp, (size_t)N * IC), host_of(b, rdinp, (size_t)N * IC),
                   host_of(b, dw, (size_t)OC * IC), host_of(b, rdw, (size_t)OC * IC)};
    name_of(name, sizeof name, "matmul_bwd_dgelu = matmul_bwd then gelu_bwd (bitwise)");
    TEST_CHECK(!memcmp(g[0], g[1], (size_t)N * IC * sizeof(float)) &&
                   !memcmp(g[2], g[3], (size_t)OC * IC * sizeof(float)),
               name, "dinp or dweight differ");
    for (int k = 0; k < 4; k++) free(g[k]);
    float *bufs[] = {inp, w, bias, pre2, dout, out, pre, ref, ref_pre, dinp, dw, db, rdinp, rdw, rdb};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) b->free(b, bufs[k]);
}

// The residual add fused into the LayerNorm: the same bits as the two ops apart (the CPU
// composes them; the GPU test holds CUDA's fused kernel to these).
static void test_residual_layernorm(backend *b) {
    const int N = 33, C = 40;
    const size_t n = (size_t)N * C;
    float *a = dev_rand(b, n, -2, 3), *c = dev_rand(b, n, -1, 1), *w = dev_rand(b, C, 0.5, 1.5);
    float *bias = dev_rand(b, C, -1, 1), *res = dev_f(b, NULL, n), *out = dev_f(b, NULL, n);
    float *st = dev_f(b, NULL, 4 * (size_t)N), *rres = dev_f(b, NULL, n), *rout = dev_f(b, NULL, n);
    b->residual_layernorm_fwd(b, res, out, st, st + N, a, c, w, bias, N, C);
    b->residual_fwd(b, rres, a, c, n);
    b->layernorm_fwd(b, rout, st + 2 * N, st + 3 * N, rres, w, bias, N, C);
    float *h[4] = {host_of(b, res, n), host_of(b, rres, n), host_of(b, out, n), host_of(b, rout, n)};
    float *hs = host_of(b, st, 4 * (size_t)N);
    char name[96];
    name_of(name, sizeof name, "residual_layernorm_fwd = residual then layernorm");
    TEST_CHECK(!memcmp(h[0], h[1], n * sizeof(float)) && !memcmp(h[2], h[3], n * sizeof(float)) &&
                   !memcmp(hs, hs + 2 * N, 2 * (size_t)N * sizeof(float)),
               name, "res, out, mean or rstd differ");
    for (int k = 0; k < 4; k++) free(h[k]);
    free(hs);
    float *bufs[] = {a, c, w, bias, res, out, st, rres, rout};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) b->free(b, bufs[k]);
}

// Attention on bf16 q, k, v: on the CPU exactly the fp32 op on the widened values (the GPU
// test holds CUDA's tensor-core kernels to it within bf16's tolerance).
static void test_attention_bf16(backend *b) {
    const int B = 2, T = 19, NH = 2, HS = 8;
    const size_t nq = (size_t)B * T * 3 * NH * HS, no = (size_t)B * T * NH * HS;
    float *h = rand_f(nq, -2, 2);
    uint16_t *q16 = dev_bf16(b, h, nq); // h now holds the rounded values
    float *q = dev_f(b, h, nq), *dout = dev_rand(b, no, -1, 1);
    float *o1 = dev_f(b, NULL, no), *o2 = dev_f(b, NULL, no);
    float *g1 = dev_f(b, NULL, nq), *g2 = dev_f(b, NULL, nq);
    void *s1 = b->alloc(b, attn_state_bytes(b->attn_state, B, T, NH));
    void *s2 = b->alloc(b, attn_state_bytes(b->attn_state, B, T, NH));
    backend_attention_fwd(b, o1, s1, operand_bf16(q16), B, T, NH, HS);
    backend_attention_fwd(b, o2, s2, operand_fp32(q), B, T, NH, HS);
    backend_attention_bwd(b, g1, dout, operand_bf16(q16), s1, B, T, NH, HS);
    backend_attention_bwd(b, g2, dout, operand_fp32(q), s2, B, T, NH, HS);
    float *r[4] = {host_of(b, o1, no), host_of(b, o2, no), host_of(b, g1, nq), host_of(b, g2, nq)};
    char name[96];
    name_of(name, sizeof name, "attention_*_bf16 = fp32 on widened qkv");
    TEST_CHECK(!memcmp(r[0], r[1], no * sizeof(float)) && !memcmp(r[2], r[3], nq * sizeof(float)),
               name, "out or dqkv differ");
    for (int k = 0; k < 4; k++) free(r[k]);
    void *bufs[] = {q16, q, dout, o1, o2, g1, g2, s1, s2};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) b->free(b, bufs[k]);
    free(h);
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
// Embeddings

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
    // sumsq_add: the same sums, added into a device accumulator in call order.
    double acc0 = 0.5, acc = 0.0, *d_acc = b->alloc(b, sizeof(double));
    b->copy_to_device(b, d_acc, &acc0, sizeof acc0);
    b->sumsq_add(b, d_acc, d_x, n);
    b->sumsq_add(b, d_acc, d_x + 7, 1000);
    b->sumsq_add(b, d_acc, d_x, 0);
    b->copy_to_host(b, &acc, d_acc, sizeof acc);
    name_of(name, sizeof name, "sumsq_add = sumsq sums in order (bitwise)");
    TEST_CHECK(acc == (0.5 + s1) + b->sumsq(b, d_x + 7, 1000), name, "%.17g", acc);
    b->free(b, d_acc);

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
        b->adamw(b, d_p, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, gs, t, NULL);
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

static void run_all(int threads) {
    backend *b = NULL;
    TRI_ASSERT(backend_cpu_create(&b, threads) == TRI_OK);
    snprintf(test_tag, sizeof test_tag, " t%d", threads);
    test_matmul_small(b, 1);
    test_matmul_small(b, 0);
    test_matmul_large(b, 0);
    test_matmul_large(b, 1);
    test_matmul_gelu(b);
    test_residual_layernorm(b);
    test_attention_bf16(b);
    test_layernorm(b, 7, 10, 1);
    test_layernorm(b, 37, 768, 0);
    test_residual(b);
    test_gelu(b);
    test_embedding(b);
    test_sumsq_scale(b);
    test_adamw(b);
    b->destroy(b);
}

int main(int argc, char **argv) {
    (void)argc;
    backend_cpu_prepare_process(argv); // the OpenBLAS kernels trident itself runs with
    log_init();
    test_memory();
    test_expf();
    for (int threads = 1; threads <= 3; threads++) run_all(threads);
    TEST_EXIT();
}
