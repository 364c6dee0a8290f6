// test_ops.c: the CPU backend against the double-precision references: every row of the op
// table (tests/op_cases.h, which says why each tolerance is what it is) on backends of 1, 2
// and 3 threads (attention with the AUTO threading policy; tests/test_ops_attn.c runs its
// rows with each policy). Then what the table's rows do not say: the backend's memory,
// cpu_expf, ops the CPU composes from others equal to their parts bit for bit, GELU's
// saturation, sumsq's determinism, and the vocab-parallel ops adding up over ranks.
//
//   build/tests/test_ops
#include "compute/backend.h"
#include "compute/backend_cpu_internal.h" // cpu_expf
#include "op_cases.h"
#include "testlib.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------
// Memory and cpu_expf

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

// ---------------------------------------------------------------------------------------
// What the CPU composes: the same bits as the parts (the GPU test holds CUDA's fused and
// tensor-core forms to these within the table's tolerances).

static int same_on_host(backend *b, const float *x, const float *y, size_t n) {
    float *hx = host_of(b, x, n), *hy = host_of(b, y, n);
    const int same = !memcmp(hx, hy, n * sizeof(float));
    free(hx), free(hy);
    return same;
}

// The GELU with the GEMMs (gelu_pre), and bf16 operands, which the CPU widens exactly.
static void test_matmul_composed(backend *b) {
    const int N = 48, IC = 40, OC = 56;
    char name[128];
    float *inp = dev_rand(b, (size_t)N * IC, -1, 1), *w = dev_rand(b, (size_t)OC * IC, -1, 1);
    float *bias = dev_rand(b, OC, -1, 1), *pre2 = dev_rand(b, (size_t)N * IC, -3, 3);
    float *dout = dev_rand(b, (size_t)N * OC, -1, 1);
    float *out = dev_f(b, NULL, (size_t)N * OC), *pre = dev_f(b, NULL, (size_t)N * OC);
    float *ref = dev_f(b, NULL, (size_t)N * OC), *ref_pre = dev_f(b, NULL, (size_t)N * OC);
    const operand x = operand_fp32(inp), wt = operand_fp32(w), dy = operand_fp32(dout);
    backend_matmul_fwd(b, out, pre, x, wt, bias, N, IC, OC);
    backend_matmul_fwd(b, ref_pre, NULL, x, wt, bias, N, IC, OC);
    b->gelu_fwd(b, ref, ref_pre, (size_t)N * OC);
    name_of(name, sizeof name, "matmul_fwd with gelu_pre = matmul_fwd then gelu_fwd (bitwise)");
    TEST_CHECK(same_on_host(b, out, ref, (size_t)N * OC) &&
                   same_on_host(b, pre, ref_pre, (size_t)N * OC),
               name, "out or pre differ");
    float *dinp = dev_f(b, NULL, (size_t)N * IC), *dw = dev_f(b, NULL, (size_t)OC * IC);
    float *db = dev_f(b, NULL, OC), *rdinp = dev_f(b, NULL, (size_t)N * IC);
    float *rdw = dev_f(b, NULL, (size_t)OC * IC), *rdb = dev_f(b, NULL, OC);
    backend_matmul_bwd(b, dinp, dw, db, dy, x, wt, pre2, N, IC, OC);
    backend_matmul_bwd(b, rdinp, rdw, rdb, dy, x, wt, NULL, N, IC, OC);
    b->gelu_bwd(b, rdinp, pre2, rdinp, (size_t)N * IC);
    name_of(name, sizeof name, "matmul_bwd with gelu_pre = matmul_bwd then gelu_bwd (bitwise)");
    TEST_CHECK(same_on_host(b, dinp, rdinp, (size_t)N * IC) &&
                   same_on_host(b, dw, rdw, (size_t)OC * IC),
               name, "dinp or dweight differ");

    // bf16 operands: the fp32 matmul on their widened values
    float *h = host_of(b, inp, (size_t)N * IC), *hw = host_of(b, w, (size_t)OC * IC);
    float *hd = host_of(b, dout, (size_t)N * OC);
    uint16_t *x16 = dev_bf16(b, h, (size_t)N * IC), *w16 = dev_bf16(b, hw, (size_t)OC * IC);
    uint16_t *d16 = dev_bf16(b, hd, (size_t)N * OC); // h, hw, hd now hold the rounded values
    b->copy_to_device(b, inp, h, (size_t)N * IC * sizeof(float));
    b->copy_to_device(b, w, hw, (size_t)OC * IC * sizeof(float));
    b->copy_to_device(b, dout, hd, (size_t)N * OC * sizeof(float));
    backend_matmul_fwd(b, out, NULL, operand_bf16(x16), operand_bf16(w16), bias, N, IC, OC);
    backend_matmul_fwd(b, ref, NULL, x, wt, bias, N, IC, OC);
    b->memset_zero(b, dw, (size_t)OC * IC * sizeof(float));
    b->memset_zero(b, rdw, (size_t)OC * IC * sizeof(float));
    backend_matmul_bwd(b, dinp, dw, db, operand_bf16(d16), operand_bf16(x16), operand_bf16(w16),
                       NULL, N, IC, OC);
    backend_matmul_bwd(b, rdinp, rdw, db, dy, x, wt, NULL, N, IC, OC);
    name_of(name, sizeof name, "matmul with bf16 operands = fp32 on the widened ones (bitwise)");
    TEST_CHECK(same_on_host(b, out, ref, (size_t)N * OC) &&
                   same_on_host(b, dinp, rdinp, (size_t)N * IC) &&
                   same_on_host(b, dw, rdw, (size_t)OC * IC),
               name, "out, dinp or dweight differ");
    float *bufs[] = {inp,     w,    bias, pre2, dout,  out, pre, ref,
                     ref_pre, dinp, dw,   db,   rdinp, rdw, rdb};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) b->free(b, bufs[k]);
    b->free(b, x16), b->free(b, w16), b->free(b, d16);
    free(h), free(hw), free(hd);
}

// The split backward forms (backend.h; the zero-bubble schedules' B and W): the input
// gradient alone and the parameter gradients alone, each bitwise the joint call's, for the
// matmul (fp32, bf16 operands, bf16 outputs) and both norms. Accumulators start from the
// same nonzero values, so an op that overwrote instead of adding would show.
static void test_bwd_split(backend *b) {
    const int N = 37, IC = 40, OC = 24, C = 40;
    char name[128];
    float *inp = dev_rand(b, (size_t)N * IC, -1, 1), *w = dev_rand(b, (size_t)OC * IC, -1, 1);
    float *dout = dev_rand(b, (size_t)N * OC, -1, 1), *pre2 = dev_rand(b, (size_t)N * IC, -3, 3);
    float *h0 = rand_f((size_t)OC * IC + OC, -1, 1); // the accumulators' start
    float *jd = dev_f(b, NULL, (size_t)N * IC), *sd = dev_f(b, NULL, (size_t)N * IC);
    float *jw = dev_f(b, h0, (size_t)OC * IC + OC), *sw = dev_f(b, h0, (size_t)OC * IC + OC);
    for (int k = 0; k < 3; k++) { // fp32; fp32 with gelu_pre; bf16 operands
        operand x = operand_fp32(inp), wt = operand_fp32(w), dy = operand_fp32(dout);
        uint16_t *x16 = NULL, *w16 = NULL, *d16 = NULL;
        if (k == 2) {
            float *h = host_of(b, inp, (size_t)N * IC), *hw = host_of(b, w, (size_t)OC * IC);
            float *hd = host_of(b, dout, (size_t)N * OC);
            x16 = dev_bf16(b, h, (size_t)N * IC), w16 = dev_bf16(b, hw, (size_t)OC * IC);
            d16 = dev_bf16(b, hd, (size_t)N * OC);
            x = operand_bf16(x16), wt = operand_bf16(w16), dy = operand_bf16(d16);
            free(h), free(hw), free(hd);
        }
        const float *gp = k == 1 ? pre2 : NULL;
        b->copy_to_device(b, jw, h0, ((size_t)OC * IC + OC) * sizeof(float));
        b->copy_to_device(b, sw, h0, ((size_t)OC * IC + OC) * sizeof(float));
        backend_matmul_bwd(b, jd, jw, jw + (size_t)OC * IC, dy, x, wt, gp, N, IC, OC);
        backend_matmul_bwd(b, sd, NULL, NULL, dy, x, wt, gp, N, IC, OC);
        backend_matmul_bwd(b, NULL, sw, sw + (size_t)OC * IC, dy, x, wt, NULL, N, IC, OC);
        const char *what[3] = {"fp32", "fp32 gelu_pre", "bf16"};
        char what_k[96];
        snprintf(what_k, sizeof what_k,
                 "matmul_bwd split (dinp only, dweight+dbias only) = joint, %s", what[k]);
        name_of(name, sizeof name, what_k);
        TEST_CHECK(same_on_host(b, sd, jd, (size_t)N * IC) &&
                       same_on_host(b, sw, jw, (size_t)OC * IC + OC),
                   name, "dinp or dweight/dbias differ");
        if (k == 2) { // bf16 outputs: matmul_bwd16 with dinp16 NULL / dweight NULL
            uint16_t *j16 = b->alloc(b, (size_t)N * IC * 2), *s16 = b->alloc(b, (size_t)N * IC * 2);
            uint16_t *p16 = b->alloc(b, (size_t)N * IC * 2);
            b->to_bf16(b, p16, pre2, (size_t)N * IC);
            b->copy_to_device(b, jw, h0, ((size_t)OC * IC + OC) * sizeof(float));
            b->copy_to_device(b, sw, h0, ((size_t)OC * IC + OC) * sizeof(float));
            backend_matmul_bwd16(b, j16, jw, jw + (size_t)OC * IC, dy, x, wt, p16, N, IC, OC);
            backend_matmul_bwd16(b, s16, NULL, NULL, dy, x, wt, p16, N, IC, OC);
            backend_matmul_bwd16(b, NULL, sw, sw + (size_t)OC * IC, dy, x, wt, p16, N, IC, OC);
            uint16_t *hj = xmalloc((size_t)N * IC * 2), *hs = xmalloc((size_t)N * IC * 2);
            b->copy_to_host(b, hj, j16, (size_t)N * IC * 2);
            b->copy_to_host(b, hs, s16, (size_t)N * IC * 2);
            name_of(name, sizeof name, "matmul_bwd16 split = joint (bitwise)");
            TEST_CHECK(!memcmp(hj, hs, (size_t)N * IC * 2) &&
                           same_on_host(b, sw, jw, (size_t)OC * IC + OC),
                       name, "dinp16 or dweight/dbias differ");
            free(hj), free(hs);
            b->free(b, j16), b->free(b, s16), b->free(b, p16);
            b->free(b, x16), b->free(b, w16), b->free(b, d16);
        }
    }
    // The norms: dinp accumulates too, so it starts from the same values as well.
    const size_t n = (size_t)N * C;
    float *x = dev_rand(b, n, -2, 3), *dy = dev_rand(b, n, -1, 1), *nw = dev_rand(b, C, 0.5, 1.5);
    float *nb = dev_rand(b, C, -1, 1), *out = dev_f(b, NULL, n),
          *st = dev_f(b, NULL, 2 * (size_t)N);
    float *hx0 = rand_f(n, -1, 1);
    float *jx = dev_f(b, hx0, n), *sx = dev_f(b, hx0, n);
    float *jp = dev_f(b, h0, 2 * (size_t)C), *sp = dev_f(b, h0, 2 * (size_t)C);
    b->layernorm_fwd(b, out, st, st + N, x, nw, nb, N, C);
    b->layernorm_bwd(b, jx, jp, jp + C, dy, x, nw, st, st + N, N, C);
    b->layernorm_bwd(b, sx, NULL, NULL, dy, x, nw, st, st + N, N, C);
    b->layernorm_bwd(b, NULL, sp, sp + C, dy, x, NULL, st, st + N, N, C);
    name_of(name, sizeof name, "layernorm_bwd split (dinp only, dweight+dbias only) = joint");
    TEST_CHECK(same_on_host(b, sx, jx, n) && same_on_host(b, sp, jp, 2 * (size_t)C), name,
               "dinp or dweight/dbias differ");
    b->copy_to_device(b, jx, hx0, n * sizeof(float)),
        b->copy_to_device(b, sx, hx0, n * sizeof(float));
    b->copy_to_device(b, jp, h0, C * sizeof(float)),
        b->copy_to_device(b, sp, h0, C * sizeof(float));
    b->rmsnorm_fwd(b, out, st, x, nw, N, C, 1e-5f);
    b->rmsnorm_bwd(b, jx, jp, dy, x, nw, st, N, C);
    b->rmsnorm_bwd(b, sx, NULL, dy, x, nw, st, N, C);
    b->rmsnorm_bwd(b, NULL, sp, dy, x, NULL, st, N, C);
    name_of(name, sizeof name, "rmsnorm_bwd split (dinp only, dweight only) = joint");
    TEST_CHECK(same_on_host(b, sx, jx, n) && same_on_host(b, sp, jp, (size_t)C), name,
               "dinp or dweight differ");
    float *bufs[] = {inp, w, dout, pre2, jd, sd, jw, sw, x, dy, nw, nb, out, st, jx, sx, jp, sp};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) b->free(b, bufs[k]);
    free(h0), free(hx0);
}

// The residual add fused into the LayerNorm.
static void test_residual_layernorm(backend *b) {
    const int N = 33, C = 40;
    const size_t n = (size_t)N * C;
    float *a = dev_rand(b, n, -2, 3), *c = dev_rand(b, n, -1, 1), *w = dev_rand(b, C, 0.5, 1.5);
    float *bias = dev_rand(b, C, -1, 1), *res = dev_f(b, NULL, n), *out = dev_f(b, NULL, n);
    float *st = dev_f(b, NULL, 4 * (size_t)N), *rres = dev_f(b, NULL, n), *rout = dev_f(b, NULL, n);
    b->residual_layernorm_fwd(b, res, out, st, st + N, a, c, w, bias, N, C);
    b->residual_fwd(b, rres, a, c, n);
    b->layernorm_fwd(b, rout, st + 2 * N, st + 3 * N, rres, w, bias, N, C);
    char name[96];
    name_of(name, sizeof name, "residual_layernorm_fwd = residual then layernorm");
    TEST_CHECK(same_on_host(b, res, rres, n) && same_on_host(b, out, rout, n) &&
                   same_on_host(b, st, st + 2 * N, 2 * (size_t)N),
               name, "res, out, mean or rstd differ");
    float *bufs[] = {a, c, w, bias, res, out, st, rres, rout};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) b->free(b, bufs[k]);
}

// Attention on bf16 q, k, v: exactly the fp32 op on the widened values.
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
    backend_attention_fwd(b, o1, s1, operand_bf16(q16), B, T, NH, NH, HS, 0.0f);
    backend_attention_fwd(b, o2, s2, operand_fp32(q), B, T, NH, NH, HS, 0.0f);
    uint16_t *o16 = b->alloc(b, no * sizeof(uint16_t));
    b->to_bf16(b, o16, o1, no);
    backend_attention_bwd(b, g1, dout, operand_bf16(q16), operand_bf16(o16), s1, B, T, NH, NH, HS,
                          0.0f);
    backend_attention_bwd(b, g2, dout, operand_fp32(q), operand_fp32(o2), s2, B, T, NH, NH, HS,
                          0.0f);
    char name[96];
    name_of(name, sizeof name, "attention on bf16 qkv = fp32 on the widened qkv (bitwise)");
    TEST_CHECK(same_on_host(b, o1, o2, no) && same_on_host(b, g1, g2, nq), name,
               "out or dqkv differ");
    void *bufs[] = {q16, q, dout, o1, o2, o16, g1, g2, s1, s2};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) b->free(b, bufs[k]);
    free(h);
}

// ---------------------------------------------------------------------------------------
// GELU far out, sumsq's determinism

// gelu(x) -> x for large x, -> 0 for very negative x, with no NaN or inf.
static void test_gelu_saturates(backend *b) {
    float far[4] = {-100.0f, -12.0f, 12.0f, 100.0f}, far_out[4];
    float *d_far = dev_f(b, far, 4);
    b->gelu_fwd(b, d_far, d_far, 4);
    b->copy_to_host(b, far_out, d_far, sizeof far_out);
    char name[96];
    name_of(name, sizeof name, "gelu_fwd saturates");
    TEST_CHECK(fabsf(far_out[0]) < 1e-30f && fabsf(far_out[1]) < 1e-30f && far_out[2] == 12.0f &&
                   far_out[3] == 100.0f,
               name, "gelu(-100, -12, 12, 100) = %g %g %g %g", far_out[0], far_out[1], far_out[2],
               far_out[3]);
    b->free(b, d_far);
}

// The same sum on every call, within 1e-12 of one thread's, and sumsq_add adding the sums in
// call order.
static void test_sumsq_order(backend *b) {
    const size_t n = (1u << 20) + 3;
    char name[96];
    float *d_x = dev_rand(b, n, -1, 1);
    double s1 = b->sumsq(b, d_x, n), s2 = b->sumsq(b, d_x, n);
    name_of(name, sizeof name, "sumsq deterministic");
    TEST_CHECK(s1 == s2, name, "%.17g then %.17g", s1, s2);
    backend *one = NULL;
    TRI_ASSERT(backend_cpu_create(&one, 1) == TRI_OK);
    double s_one = one->sumsq(one, d_x, n); // same host memory: any backend may read it
    name_of(name, sizeof name, "sumsq 1 thread vs this backend");
    TEST_CHECK(fabs(s_one - s1) <= 1e-12 * s1, name, "%.17g vs %.17g", s_one, s1);
    one->destroy(one);
    double acc0 = 0.5, acc = 0.0, *d_acc = b->alloc(b, sizeof(double));
    b->copy_to_device(b, d_acc, &acc0, sizeof acc0);
    b->sumsq_add(b, d_acc, d_x, n);
    b->sumsq_add(b, d_acc, d_x + 7, 1000);
    b->sumsq_add(b, d_acc, d_x, 0);
    b->copy_to_host(b, &acc, d_acc, sizeof acc);
    name_of(name, sizeof name, "sumsq_add = sumsq sums in order (bitwise)");
    TEST_CHECK(acc == (0.5 + s1) + b->sumsq(b, d_x + 7, 1000), name, "%.17g", acc);
    b->free(b, d_acc), b->free(b, d_x);
}

// ---------------------------------------------------------------------------------------
// The vocab-parallel ops over ranks

// Two "ranks" of V/2 rows each: the masked lookups add up to the full embedding.
static void test_embedding_ranks(backend *b) {
    const int B = 2, T = 5, C = 20, V = 10, Vl = V / 2;
    const size_t n = (size_t)B * T * C;
    int tok[2 * 5] = {3, 7, 7, 0, 9, 5, 4, 3, 3, 8}; // repeats within and across rows
    float *wte = rand_f((size_t)V * C, -1, 1), *wpe = rand_f((size_t)T * C, -1, 1);
    int *d_tok = dev_i(b, tok, (size_t)B * T);
    float *d_out = dev_f(b, NULL, n), *d_sum = dev_f(b, NULL, n),
          *d_wpe = dev_f(b, wpe, (size_t)T * C);
    for (int rank = 0; rank < 2; rank++) { // positions added once, on rank 0
        float *d_wte = dev_f(b, wte + (size_t)rank * Vl * C, (size_t)Vl * C);
        b->embedding_fwd(b, d_out, d_tok, d_wte, d_wpe, B, T, C, rank * Vl, Vl, rank == 0);
        b->residual_fwd(b, d_sum, d_sum, d_out, n);
        b->free(b, d_wte);
    }
    double *wte_d = to_d(wte, (size_t)V * C), *wpe_d = to_d(wpe, (size_t)T * C);
    double *ref = xmalloc(n * sizeof(double));
    emb_args full = {tok, wte_d, wpe_d, B, T, C, 0, V, 1};
    fwd_emb(&full, ref);
    float *h = host_of(b, d_sum, n);
    char name[96];
    name_of(name, sizeof name, "embedding_fwd two ranks sum to the full lookup");
    check_rel(name, "", h, NULL, ref, n, 1e-6);
    b->free(b, d_tok), b->free(b, d_out), b->free(b, d_sum), b->free(b, d_wpe);
    free(wte), free(wpe), free(wte_d), free(wpe_d), free(ref), free(h);
}

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

// Split over 2 and 4 ranks: the same losses and gradient as on one (the table checks one
// rank's ops against the reference); a rank without real columns has rowmax -inf.
static void test_xent_ranks(backend *b, int V_valid) {
    const int N = 6, Vp = 48;
    const float dloss = 1.0f / N;
    char tag[96], name[200];
    float *logits = rand_f((size_t)N * Vp, -4, 4);
    int targets[6];
    for (int n = 0; n < N; n++) targets[n] = (int)((rnd() + 1.0) * 0.5 * V_valid) % V_valid;
    float loss1[6], max1[6], *grad1 = xmalloc((size_t)N * Vp * sizeof(float));
    xent_ranks(b, logits, targets, N, Vp, V_valid, 1, dloss, loss1, grad1, max1);
    double *l1 = to_d(loss1, N), *g1 = to_d(grad1, (size_t)N * Vp);
    for (int nranks = 2; nranks <= 4; nranks *= 2) {
        float lossk[6], *gradk = xmalloc((size_t)N * Vp * sizeof(float)), maxk[4 * 6];
        xent_ranks(b, logits, targets, N, Vp, V_valid, nranks, dloss, lossk, gradk, maxk);
        snprintf(tag, sizeof tag, "xent V_valid=%d Vp=%d split over %d ranks", V_valid, Vp, nranks);
        name_of(name, sizeof name, "losses = unsplit");
        check_rel(tag, name, lossk, NULL, l1, N, 1e-6);
        name_of(name, sizeof name, "gradient = unsplit");
        check_rel(tag, name, gradk, NULL, g1, (size_t)N * Vp, 1e-6);
        if ((nranks - 1) * (Vp / nranks) >= V_valid) { // the last rank holds only padding
            snprintf(name, sizeof name, "%s rank without real columns has rowmax -inf%s", tag,
                     test_tag);
            int all_inf = 1;
            for (int n = 0; n < N; n++)
                all_inf &= isinf(maxk[(size_t)(nranks - 1) * N + n]) &&
                           maxk[(size_t)(nranks - 1) * N + n] < 0;
            TEST_CHECK(all_inf, name, "rowmax of the last rank is not -inf");
        }
        free(gradk);
    }
    free(logits), free(grad1), free(l1), free(g1);
}

// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    (void)argc;
    backend_cpu_prepare_process(argv, 0); // the OpenBLAS kernels trident itself runs with
    log_init();
    test_memory();
    test_expf();
    backend *bs[3];
    const char *tags[3] = {" t1", " t2", " t3"};
    for (int i = 0; i < 3; i++) TRI_ASSERT(backend_cpu_create(&bs[i], i + 1) == TRI_OK);
    for (size_t i = 0; i < N_OP_CASES; i++)
        if (!(OP_CASES[i].flags & CASE_TWIN_ONLY)) op_case_check_ref(&OP_CASES[i], i, bs, tags, 3);
    for (int i = 0; i < 3; i++) {
        backend *b = bs[i];
        snprintf(test_tag, sizeof test_tag, "%s", tags[i]);
        test_matmul_composed(b);
        test_bwd_split(b);
        test_residual_layernorm(b);
        test_attention_bf16(b);
        test_gelu_saturates(b);
        test_sumsq_order(b);
        test_embedding_ranks(b);
        test_xent_ranks(b, 37);
        test_xent_ranks(b, 20);
        b->destroy(b);
    }
    TEST_EXIT();
}
