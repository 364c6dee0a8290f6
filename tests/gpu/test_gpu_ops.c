// test_gpu_ops.c: every op of the CUDA backend against the CPU backend on the same random
// inputs, and its backward passes against finite differences of the double-precision
// references of tests/ops_ref.h. Needs a GPU: it is not one of the tests/test_*.c that
// `make test` runs; `make test-gpu` runs it (tests/gpu/run.sh).
//
//   build/tests/gpu/test_gpu_ops               the checks, then a table of the largest error
//                                              of each op against the CPU
//   build/tests/gpu/test_gpu_ops --bench       op timings at GPT-2 124M sizes (not a test)
//   build/tests/gpu/test_gpu_ops --self-test   the same checks with a 1-thread CPU backend in
//                                              place of CUDA: proves the harness without a GPU
//
// Tolerances. Against the CPU: max |cuda - cpu| / max |cpu| <= 1e-5 per tensor (fp32: both
// round at ~6e-8 per operation, and the backends sum in different orders, which moves a sum
// of K terms by ~sqrt(K) roundings; the shapes here keep that two orders below 1e-5, while a
// wrong index or formula is O(1) off). sumsq is double on both: 1e-10. Against finite
// differences: 1e-4, as tests/ops_ref.h explains. The accumulating ops run on buffers
// pre-filled with random values (+=), the overwriting ones on buffers pre-filled with junk.
// Backward ops also run twice on the device, which must give bitwise the same result.
// TRIDENT_CUDA_TF32=1 must be unset: TF32 matmuls are ~1e-3 off by design.
#include "../ops_ref.h"
#include "compute/backend.h"
#include "compute/cuda_api.h"
#include "../testlib.h"
#include "gpu_bench.h"
#include "gpu_twin.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int self_test;

// ---------------------------------------------------------------------------------------
// Memory

static void test_memory(void) {
    const size_t n = 1 << 20;
    size_t peak0 = dut->mem_peak_bytes(dut);
    float *p = dut->alloc(dut, n * sizeof(float) + 12);
    TEST_CHECK(p != NULL, "alloc 4 MiB", "NULL");
    if (!p) return;
    float *h = host_of(dut, p, n);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= h[i] == 0.0f;
    TEST_CHECK(zero, "alloc zero-fills", "nonzero bytes in a fresh block");
    TEST_CHECK(dut->mem_peak_bytes(dut) >= peak0 + n * sizeof(float) + 12, "mem_peak_bytes counts",
               "peak %zu after %zu + %zu", dut->mem_peak_bytes(dut), peak0, n * sizeof(float) + 12);
    float *src = rand_f(n, -1, 1), *q = dut->alloc(dut, n * sizeof(float));
    dut->copy_to_device(dut, p, src, n * sizeof(float));
    dut->copy(dut, q, p, n * sizeof(float));
    dut->memset_zero(dut, q + 100, 50 * sizeof(float));
    free(h);
    h = host_of(dut, q, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= h[i] == (i >= 100 && i < 150 ? 0.0f : src[i]);
    TEST_CHECK(ok, "copy_to_device, copy, memset_zero, copy_to_host", "round trip differs");
    size_t peak1 = dut->mem_peak_bytes(dut);
    dut->free(dut, p), dut->free(dut, q);
    float *z = dut->alloc(dut, 0);
    TEST_CHECK(z != NULL, "alloc 0 bytes", "NULL");
    dut->free(dut, z);
    TEST_CHECK(dut->mem_peak_bytes(dut) == peak1, "free keeps the high-water mark", "changed");
    free(h), free(src);
}

// ---------------------------------------------------------------------------------------
// Linear. `offset` shifts the weight and bias pointers by that many floats, off the 16-byte
// alignment the cuBLASLt epilogues want (the CUDA fallback paths).

static void test_matmul(int N, int IC, int OC, int with_bias, int offset) {
    char op[96];
    snprintf(op, sizeof op, "matmul N=%d IC=%d OC=%d%s%s", N, IC, OC, with_bias ? " bias" : "",
             offset ? " unaligned" : "");
    twin inp = twin_rand((size_t)N * IC, -1, 1), w = twin_rand((size_t)OC * IC + offset, -1, 1);
    twin bias = twin_rand((size_t)OC + offset, -1, 1), out = twin_new(NULL, (size_t)N * OC);
    backend_matmul_fwd(dut, out.d, NULL, operand_fp32(inp.d), operand_fp32(w.d + offset), with_bias ? bias.d + offset : NULL, N, IC, OC);
    backend_matmul_fwd(cpu, out.c, NULL, operand_fp32(inp.c), operand_fp32(w.c + offset), with_bias ? bias.c + offset : NULL, N, IC, OC);
    compare(op, "fwd out", out, 1e-5);

    float *junk = rand_f((size_t)N * IC, 100, 200);
    twin dout = twin_rand((size_t)N * OC, -1, 1), dinp = twin_new(junk, (size_t)N * IC);
    twin dw = twin_rand((size_t)OC * IC + offset, -1, 1);
    twin db = twin_rand((size_t)OC + offset, -1, 1);
    float *dw0 = save(dw), *db0 = save(db);
    float *dbias_d = with_bias ? db.d + offset : NULL, *dbias_c = with_bias ? db.c + offset : NULL;
    backend_matmul_bwd(dut, dinp.d, dw.d + offset, dbias_d, operand_fp32(dout.d), operand_fp32(inp.d), operand_fp32(w.d + offset), NULL, N, IC, OC);
    backend_matmul_bwd(cpu, dinp.c, dw.c + offset, dbias_c, operand_fp32(dout.c), operand_fp32(inp.c), operand_fp32(w.c + offset), NULL, N, IC, OC);
    compare(op, "bwd dinp (overwritten)", dinp, 1e-5);
    compare(op, "bwd dweight (accumulated)", dw, 1e-5);
    compare(op, with_bias ? "bwd dbias (accumulated)" : "bwd dbias untouched", db, 1e-5);
    // Again from the same state, without dinp: the same dweight and dbias, bitwise.
    float *dw1 = save(dw), *db1 = save(db);
    twin dw_again = twin_new(dw0, dw.n), db_again = twin_new(db0, db.n);
    backend_matmul_bwd(dut, NULL, dw_again.d + offset, with_bias ? db_again.d + offset : NULL, operand_fp32(dout.d), operand_fp32(inp.d), operand_fp32(w.d + offset), NULL, N, IC, OC);
    float *dw2 = save(dw_again), *db2 = save(db_again);
    TEST_CHECK(!memcmp(dw1, dw2, dw.n * sizeof(float)) && !memcmp(db1, db2, db.n * sizeof(float)),
               "matmul_bwd repeatable (bitwise), dinp NULL", "dweight or dbias differ");
    twin_free(inp), twin_free(w), twin_free(bias), twin_free(out), twin_free(dout);
    twin_free(dinp), twin_free(dw), twin_free(db), twin_free(dw_again), twin_free(db_again);
    free(junk), free(dw0), free(db0), free(dw1), free(db1), free(dw2), free(db2);
}

// The bf16-operand matmuls: the same random operands rounded to bf16 on both backends. A
// product of two bf16 values is exact in fp32 and both accumulate in fp32, so the fp32
// tolerance is the bf16 one too (the tensor cores' accumulation order differs from the CPU's,
// as cuBLASLt's fp32 kernels' does).
static uint16_t *twin_bf16(float *host, size_t n, uint16_t **on_cpu) {
    *on_cpu = dev_bf16(cpu, host, n);
    return dev_bf16(dut, host, n);
}

static void test_matmul_bf16(int N, int IC, int OC, int with_bias, int offset) {
    char op[96];
    snprintf(op, sizeof op, "matmul_bf16 N=%d IC=%d OC=%d%s%s", N, IC, OC,
             with_bias ? " bias" : "", offset ? " unaligned" : "");
    float *h_inp = rand_f((size_t)N * IC, -1, 1), *h_w = rand_f((size_t)OC * IC + offset, -1, 1);
    float *h_dout = rand_f((size_t)N * OC, -1, 1);
    uint16_t *inp_c, *w_c, *dout_c;
    uint16_t *inp_d = twin_bf16(h_inp, (size_t)N * IC, &inp_c);
    uint16_t *w_d = twin_bf16(h_w, (size_t)OC * IC + offset, &w_c);
    uint16_t *dout_d = twin_bf16(h_dout, (size_t)N * OC, &dout_c);
    twin bias = twin_rand((size_t)OC + offset, -1, 1), out = twin_new(NULL, (size_t)N * OC);
    backend_matmul_fwd(dut, out.d, NULL, operand_bf16(inp_d), operand_bf16(w_d + offset), with_bias ? bias.d + offset : NULL, N, IC, OC);
    backend_matmul_fwd(cpu, out.c, NULL, operand_bf16(inp_c), operand_bf16(w_c + offset), with_bias ? bias.c + offset : NULL, N, IC, OC);
    compare(op, "fwd out", out, 1e-5);
    float *junk = rand_f((size_t)N * IC, 100, 200);
    twin dinp = twin_new(junk, (size_t)N * IC), dw = twin_rand((size_t)OC * IC, -1, 1);
    twin db = twin_rand((size_t)OC, -1, 1);
    backend_matmul_bwd(dut, dinp.d, dw.d, with_bias ? db.d : NULL, operand_bf16(dout_d), operand_bf16(inp_d), operand_bf16(w_d + offset), NULL, N, IC, OC);
    backend_matmul_bwd(cpu, dinp.c, dw.c, with_bias ? db.c : NULL, operand_bf16(dout_c), operand_bf16(inp_c), operand_bf16(w_c + offset), NULL, N, IC, OC);
    compare(op, "bwd dinp (overwritten)", dinp, 1e-5);
    compare(op, "bwd dweight (accumulated)", dw, 1e-5);
    compare(op, with_bias ? "bwd dbias (accumulated)" : "bwd dbias untouched", db, 1e-5);
    uint16_t *bufs[] = {inp_d, w_d, dout_d}, *cbufs[] = {inp_c, w_c, dout_c};
    for (int k = 0; k < 3; k++) dut->free(dut, bufs[k]), cpu->free(cpu, cbufs[k]);
    twin_free(bias), twin_free(out), twin_free(dinp), twin_free(dw), twin_free(db);
    free(h_inp), free(h_w), free(h_dout), free(junk);
}

// The GELU fused into the fc GEMM and into the next layer's backward (cuBLASLt epilogues
// where the probe at start found them equal to gelu_tanh, else the separate kernels), fp32 and
// bf16, against the CPU's GEMM-then-GELU. OC or IC not a multiple of 8 takes the fallback.
static void test_matmul_gelu(int N, int IC, int OC, int with_bias, int bf16) {
    char op[96];
    snprintf(op, sizeof op, "matmul_gelu%s N=%d IC=%d OC=%d%s", bf16 ? "_bf16" : "", N, IC, OC,
             with_bias ? " bias" : "");
    float *h_inp = rand_f((size_t)N * IC, -1, 1), *h_w = rand_f((size_t)OC * IC, -1, 1);
    float *h_dout = rand_f((size_t)N * OC, -1, 1);
    uint16_t *inp_c = NULL, *w_c = NULL, *dout_c = NULL, *inp16 = NULL, *w16 = NULL, *dout16 = NULL;
    if (bf16) {
        inp16 = twin_bf16(h_inp, (size_t)N * IC, &inp_c);
        w16 = twin_bf16(h_w, (size_t)OC * IC, &w_c);
        dout16 = twin_bf16(h_dout, (size_t)N * OC, &dout_c);
    }
    twin inp = twin_new(h_inp, (size_t)N * IC), w = twin_new(h_w, (size_t)OC * IC);
    twin dout = twin_new(h_dout, (size_t)N * OC), bias = twin_rand(OC, -1, 1);
    twin out = twin_new(NULL, (size_t)N * OC), pre = twin_new(NULL, (size_t)N * OC);
#define OPND(t16, t16c, tw, side) (bf16 ? (const void *)(side ? t16 : t16c) : (const void *)(side ? tw.d : tw.c))
    backend_matmul_fwd(dut, out.d, pre.d, (operand){OPND(inp16, inp_c, inp, 1), bf16 ? DTYPE_BF16 : DTYPE_FP32}, (operand){OPND(w16, w_c, w, 1), bf16 ? DTYPE_BF16 : DTYPE_FP32}, with_bias ? bias.d : NULL, N, IC, OC);
    backend_matmul_fwd(cpu, out.c, pre.c, (operand){OPND(inp16, inp_c, inp, 0), bf16 ? DTYPE_BF16 : DTYPE_FP32}, (operand){OPND(w16, w_c, w, 0), bf16 ? DTYPE_BF16 : DTYPE_FP32}, with_bias ? bias.c : NULL, N, IC, OC);
    compare(op, "fwd out", out, 1e-5);
    compare(op, "fwd pre", pre, 1e-5);
    // Backward of a layer (OC -> IC) whose input was gelu(pre2), pre2 (N, IC).
    twin pre2 = twin_rand((size_t)N * IC, -3, 3), dinp = twin_new(NULL, (size_t)N * IC);
    twin dw = twin_rand((size_t)OC * IC, -1, 1), db = twin_rand(OC, -1, 1);
    backend_matmul_bwd(dut, dinp.d, dw.d, with_bias ? db.d : NULL, (operand){OPND(dout16, dout_c, dout, 1), bf16 ? DTYPE_BF16 : DTYPE_FP32}, (operand){OPND(inp16, inp_c, inp, 1), bf16 ? DTYPE_BF16 : DTYPE_FP32}, (operand){OPND(w16, w_c, w, 1), bf16 ? DTYPE_BF16 : DTYPE_FP32}, pre2.d, N, IC, OC);
    backend_matmul_bwd(cpu, dinp.c, dw.c, with_bias ? db.c : NULL, (operand){OPND(dout16, dout_c, dout, 0), bf16 ? DTYPE_BF16 : DTYPE_FP32}, (operand){OPND(inp16, inp_c, inp, 0), bf16 ? DTYPE_BF16 : DTYPE_FP32}, (operand){OPND(w16, w_c, w, 0), bf16 ? DTYPE_BF16 : DTYPE_FP32}, pre2.c, N, IC, OC);
#undef OPND
    compare(op, "bwd dinp at the GELU's input", dinp, 1e-5);
    compare(op, "bwd dweight (accumulated)", dw, 1e-5);
    compare(op, with_bias ? "bwd dbias (accumulated)" : "bwd dbias untouched", db, 1e-5);
    if (bf16) {
        uint16_t *bufs[] = {inp16, w16, dout16}, *cbufs[] = {inp_c, w_c, dout_c};
        for (int k = 0; k < 3; k++) dut->free(dut, bufs[k]), cpu->free(cpu, cbufs[k]);
    }
    twin all[] = {inp, w, dout, bias, out, pre, pre2, dinp, dw, db};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) twin_free(all[k]);
    free(h_inp), free(h_w), free(h_dout);
}

// ---------------------------------------------------------------------------------------
// LayerNorm and pointwise

// The residual add fused into the LayerNorm, in place (res aliases a, as the model calls it).
static void test_residual_layernorm(int N, int C) {
    char op[64];
    snprintf(op, sizeof op, "residual_layernorm N=%d C=%d", N, C);
    const size_t n = (size_t)N * C;
    twin a = twin_rand(n, -2, 3), c = twin_rand(n, -1, 1), w = twin_rand(C, 0.5, 1.5);
    twin bias = twin_rand(C, -1, 1), out = twin_new(NULL, n), mean = twin_new(NULL, N);
    twin rstd = twin_new(NULL, N);
    dut->residual_layernorm_fwd(dut, a.d, out.d, mean.d, rstd.d, a.d, c.d, w.d, bias.d, N, C);
    cpu->residual_layernorm_fwd(cpu, a.c, out.c, mean.c, rstd.c, a.c, c.c, w.c, bias.c, N, C);
    compare(op, "res (in place)", a, 1e-6);
    compare(op, "out", out, 1e-5);
    compare(op, "mean", mean, 1e-5);
    compare(op, "rstd", rstd, 1e-5);
    twin all[] = {a, c, w, bias, out, mean, rstd};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) twin_free(all[k]);
}

static void test_layernorm(int N, int C) {
    char op[64];
    snprintf(op, sizeof op, "layernorm N=%d C=%d", N, C);
    const size_t n = (size_t)N * C;
    twin inp = twin_rand(n, -2, 3), w = twin_rand(C, 0.5, 1.5), bias = twin_rand(C, -1, 1);
    twin out = twin_new(NULL, n), mean = twin_new(NULL, N), rstd = twin_new(NULL, N);
    dut->layernorm_fwd(dut, out.d, mean.d, rstd.d, inp.d, w.d, bias.d, N, C);
    cpu->layernorm_fwd(cpu, out.c, mean.c, rstd.c, inp.c, w.c, bias.c, N, C);
    compare(op, "fwd out", out, 1e-5);
    compare(op, "fwd mean", mean, 1e-5);
    compare(op, "fwd rstd", rstd, 1e-5);
    twin dout = twin_rand(n, -1, 1), dinp = twin_rand(n, -1, 1);
    twin dw = twin_rand(C, -1, 1), db = twin_rand(C, -1, 1);
    float *dinp0 = save(dinp), *dw0 = save(dw), *db0 = save(db);
    dut->layernorm_bwd(dut, dinp.d, dw.d, db.d, dout.d, inp.d, w.d, mean.d, rstd.d, N, C);
    cpu->layernorm_bwd(cpu, dinp.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c, N, C);
    compare(op, "bwd dinp (accumulated)", dinp, 1e-5);
    compare(op, "bwd dweight (accumulated)", dw, 1e-5);
    compare(op, "bwd dbias (accumulated)", db, 1e-5);
    twin dinp2 = twin_new(dinp0, n), dw2 = twin_new(dw0, C), db2 = twin_new(db0, C);
    dut->layernorm_bwd(dut, dinp2.d, dw2.d, db2.d, dout.d, inp.d, w.d, mean.d, rstd.d, N, C);
    check_same("layernorm_bwd dinp", dinp.d, dinp2.d, n);
    check_same("layernorm_bwd dweight", dw.d, dw2.d, C);
    check_same("layernorm_bwd dbias", db.d, db2.d, C);
    twin_free(inp), twin_free(w), twin_free(bias), twin_free(out), twin_free(mean);
    twin_free(rstd), twin_free(dout), twin_free(dinp), twin_free(dw), twin_free(db);
    twin_free(dinp2), twin_free(dw2), twin_free(db2);
    free(dinp0), free(dw0), free(db0);
}

static void test_pointwise(size_t n) {
    twin a = twin_rand(n, -6, 6), c = twin_rand(n, -1, 1), out = twin_new(NULL, n);
    dut->residual_fwd(dut, out.d, a.d, c.d, n);
    cpu->residual_fwd(cpu, out.c, a.c, c.c, n);
    compare("residual_fwd", "out", out, 1e-6);
    dut->gelu_fwd(dut, out.d, a.d, n);
    cpu->gelu_fwd(cpu, out.c, a.c, n);
    compare("gelu_fwd", "out", out, 1e-5);
    dut->gelu_bwd(dut, c.d, a.d, c.d, n); // dinp aliases dout
    cpu->gelu_bwd(cpu, c.c, a.c, c.c, n);
    compare("gelu_bwd", "dinp aliasing dout", c, 1e-5);
    dut->residual_fwd(dut, a.d, a.d, c.d, n); // out aliases a
    cpu->residual_fwd(cpu, a.c, a.c, c.c, n);
    compare("residual_fwd", "out aliasing a", a, 1e-6);
    dut->scale(dut, a.d, 0.37f, n);
    cpu->scale(cpu, a.c, 0.37f, n);
    compare("scale", "x", a, 1e-6);
    twin_free(a), twin_free(c), twin_free(out);
}

// ---------------------------------------------------------------------------------------
// Attention. Each backend keeps its own state (probabilities on the CPU, log-sum-exp rows
// on CUDA), so only out and dqkv are compared.

static void test_attention(int B, int T, int NH, int HS) {
    char op[96];
    snprintf(op, sizeof op, "attention B=%d T=%d NH=%d HS=%d", B, T, NH, HS);
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    if (!self_test) {
        char name[128];
        snprintf(name, sizeof name, "%s state is B*NH*T floats", op);
        size_t got = attn_state_bytes(dut->attn_state, B, T, NH);
        TEST_CHECK(got == (size_t)B * NH * T * sizeof(float), name, "%zu bytes", got);
    }
    void *st_d = dut->alloc(dut, attn_state_bytes(dut->attn_state, B, T, NH));
    void *st_c = cpu->alloc(cpu, attn_state_bytes(cpu->attn_state, B, T, NH));
    twin qkv = twin_rand(nqkv, -2, 2), out = twin_new(NULL, nout);
    backend_attention_fwd(dut, out.d, st_d, operand_fp32(qkv.d), B, T, NH, HS);
    backend_attention_fwd(cpu, out.c, st_c, operand_fp32(qkv.c), B, T, NH, HS);
    compare(op, "fwd out", out, 1e-5);
    float *junk = rand_f(nqkv, 100, 200);
    twin dout = twin_rand(nout, -1, 1), dqkv = twin_new(junk, nqkv);
    backend_attention_bwd(dut, dqkv.d, dout.d, operand_fp32(qkv.d), st_d, B, T, NH, HS);
    backend_attention_bwd(cpu, dqkv.c, dout.c, operand_fp32(qkv.c), st_c, B, T, NH, HS);
    compare(op, "bwd dqkv (overwritten)", dqkv, 1e-5);
    float *again = dev_f(dut, junk, nqkv);
    backend_attention_bwd(dut, again, dout.d, operand_fp32(qkv.d), st_d, B, T, NH, HS);
    check_same("attention_bwd dqkv", dqkv.d, again, nqkv);
    dut->free(dut, again), dut->free(dut, st_d), cpu->free(cpu, st_c);
    twin_free(qkv), twin_free(out), twin_free(dout), twin_free(dqkv);
    free(junk);
}

// bf16 q, k, v (tensor cores on CUDA) against the CPU, which widens them and runs the fp32
// op. CUDA rounds the probabilities, dO and dS to bf16 for its products (8 bits of
// mantissa: 2^-9 relative per element), and sums of T such terms average those errors, so
// 1e-2 of the largest value bounds them with room while a wrong index or mask is O(1) off.
// Each backend keeps its own state (the CPU's probabilities, CUDA's lse rows).
static void test_attention_bf16(int B, int T, int NH, int HS) {
    char op[96];
    snprintf(op, sizeof op, "attention_bf16 B=%d T=%d NH=%d HS=%d", B, T, NH, HS);
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    float *h_qkv = rand_f(nqkv, -2, 2);
    uint16_t *qkv_c, *qkv_d = twin_bf16(h_qkv, nqkv, &qkv_c);
    void *st_d = dut->alloc(dut, attn_state_bytes(dut->attn_state, B, T, NH));
    void *st_c = cpu->alloc(cpu, attn_state_bytes(cpu->attn_state, B, T, NH));
    twin out = twin_new(NULL, nout);
    backend_attention_fwd(dut, out.d, st_d, operand_bf16(qkv_d), B, T, NH, HS);
    backend_attention_fwd(cpu, out.c, st_c, operand_bf16(qkv_c), B, T, NH, HS);
    compare(op, "fwd out", out, 1e-2);
    float *junk = rand_f(nqkv, 100, 200);
    twin dout = twin_rand(nout, -1, 1), dqkv = twin_new(junk, nqkv);
    backend_attention_bwd(dut, dqkv.d, dout.d, operand_bf16(qkv_d), st_d, B, T, NH, HS);
    backend_attention_bwd(cpu, dqkv.c, dout.c, operand_bf16(qkv_c), st_c, B, T, NH, HS);
    compare(op, "bwd dqkv (overwritten)", dqkv, 1e-2);
    float *again = dev_f(dut, junk, nqkv);
    backend_attention_bwd(dut, again, dout.d, operand_bf16(qkv_d), st_d, B, T, NH, HS);
    check_same("attention_bwd_bf16 dqkv", dqkv.d, again, nqkv);
    dut->free(dut, again), dut->free(dut, qkv_d), cpu->free(cpu, qkv_c);
    dut->free(dut, st_d), cpu->free(cpu, st_c);
    twin_free(out), twin_free(dout), twin_free(dqkv);
    free(junk), free(h_qkv);
}

// ---------------------------------------------------------------------------------------
// Embeddings: two vocabulary-parallel "ranks" of V/2 rows; tokens repeat a lot (a few rows
// hold most of them), some fall outside each rank's rows.

static void test_embedding(int B, int T, int C, int V) {
    const int n = B * T, Vl = V / 2;
    int *tok = xmalloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        double u = 0.5 * (rnd() + 1.0);
        tok[i] = u < 0.5 ? (int)(u * 8) : (int)(u * V) % V; // rows 0..3 take half the tokens
    }
    twin_i t = twin_ints(tok, n);
    twin wpe = twin_rand((size_t)T * C, -1, 1), out = twin_new(NULL, (size_t)n * C);
    twin dout = twin_rand((size_t)n * C, -1, 1);
    for (int rank = 0; rank < 2; rank++) {
        const int vs = rank * Vl;
        twin wte = twin_rand((size_t)Vl * C, -1, 1);
        char op[96];
        for (int ap = 0; ap < 2; ap++) {
            snprintf(op, sizeof op, "embedding B=%d T=%d C=%d vocab_start=%d add_pos=%d", B, T, C,
                     vs, ap);
            dut->embedding_fwd(dut, out.d, t.d, wte.d, wpe.d, B, T, C, vs, Vl, ap);
            cpu->embedding_fwd(cpu, out.c, t.c, wte.c, wpe.c, B, T, C, vs, Vl, ap);
            compare(op, "fwd out", out, 1e-6);
        }
        snprintf(op, sizeof op, "embedding B=%d T=%d C=%d vocab_start=%d", B, T, C, vs);
        twin dwte = twin_rand((size_t)Vl * C, -1, 1), dwpe = twin_rand((size_t)T * C, -1, 1);
        float *dwte0 = save(dwte), *dwpe0 = save(dwpe);
        float *dwpe_d = rank == 0 ? dwpe.d : NULL, *dwpe_c = rank == 0 ? dwpe.c : NULL;
        dut->embedding_bwd(dut, dwte.d, dwpe_d, dout.d, t.d, B, T, C, vs, Vl);
        cpu->embedding_bwd(cpu, dwte.c, dwpe_c, dout.c, t.c, B, T, C, vs, Vl);
        compare(op, "bwd dwte (accumulated)", dwte, 1e-5);
        compare(op, rank == 0 ? "bwd dwpe (accumulated)" : "bwd dwpe NULL", dwpe, 1e-5);
        twin dwte2 = twin_new(dwte0, dwte.n), dwpe2 = twin_new(dwpe0, dwpe.n);
        dut->embedding_bwd(dut, dwte2.d, rank == 0 ? dwpe2.d : NULL, dout.d, t.d, B, T, C, vs, Vl);
        check_same("embedding_bwd dwte", dwte.d, dwte2.d, dwte.n);
        check_same("embedding_bwd dwpe", dwpe.d, dwpe2.d, dwpe.n);
        twin_free(wte), twin_free(dwte), twin_free(dwpe), twin_free(dwte2), twin_free(dwpe2);
        free(dwte0), free(dwpe0);
    }
    dut->free(dut, t.d), cpu->free(cpu, t.c);
    twin_free(wpe), twin_free(out), twin_free(dout);
    free(tok);
}

// ---------------------------------------------------------------------------------------
// Vocab-parallel cross-entropy on one "rank" holding columns [vocab_start, vocab_start +
// Vp_local) of a vocabulary with V_valid real entries. Targets cover the whole vocabulary,
// so some are owned here and some are not.

static void test_xent(int N, int Vp_local, int vocab_start, int V_valid) {
    char op[96];
    snprintf(op, sizeof op, "xent N=%d Vp_local=%d vocab_start=%d V_valid=%d", N, Vp_local,
             vocab_start, V_valid);
    int *tg = xmalloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tg[i] = (int)((0.5 * (rnd() + 1.0)) * V_valid) % V_valid;
    twin_i t = twin_ints(tg, N);
    twin logits = twin_rand((size_t)N * Vp_local, -8, 8);
    twin rowmax = twin_new(NULL, N), sumexp = twin_new(NULL, N), tl = twin_new(NULL, N);
    twin losses = twin_new(NULL, N);
    dut->xent_max(dut, rowmax.d, logits.d, N, Vp_local, vocab_start, V_valid);
    cpu->xent_max(cpu, rowmax.c, logits.c, N, Vp_local, vocab_start, V_valid);
    compare(op, "rowmax", rowmax, 1e-6);
    dut->xent_sumexp(dut, sumexp.d, tl.d, logits.d, rowmax.d, t.d, N, Vp_local, vocab_start,
                     V_valid);
    cpu->xent_sumexp(cpu, sumexp.c, tl.c, logits.c, rowmax.c, t.c, N, Vp_local, vocab_start,
                     V_valid);
    compare(op, "sumexp", sumexp, 1e-5);
    compare(op, "target_logit", tl, 1e-6);
    if (vocab_start < V_valid) { // a rank with real columns (else log(0))
        dut->xent_loss(dut, losses.d, rowmax.d, sumexp.d, tl.d, N);
        cpu->xent_loss(cpu, losses.c, rowmax.c, sumexp.c, tl.c, N);
        compare(op, "losses", losses, 1e-5);
        const float dloss = 1.0f / (float)N;
        dut->xent_bwd(dut, logits.d, rowmax.d, sumexp.d, t.d, dloss, N, Vp_local, vocab_start,
                      V_valid);
        cpu->xent_bwd(cpu, logits.c, rowmax.c, sumexp.c, t.c, dloss, N, Vp_local, vocab_start,
                      V_valid);
        compare(op, "bwd dlogits (in place)", logits, 1e-5);
    }
    dut->free(dut, t.d), cpu->free(cpu, t.c);
    twin_free(logits), twin_free(rowmax), twin_free(sumexp), twin_free(tl), twin_free(losses);
    free(tg);
}

// ---------------------------------------------------------------------------------------
// Optimizer and reductions

static void test_sumsq(size_t n) {
    float *x = rand_f(n, -1, 1);
    twin t = twin_new(x, n);
    double a = dut->sumsq(dut, t.d, n), b = cpu->sumsq(cpu, t.c, n), a2 = dut->sumsq(dut, t.d, n);
    double e = fabs(a - b) / (b > 0.0 ? b : 1.0);
    char name[96];
    snprintf(name, sizeof name, "sumsq n=%zu", n);
    record(name, e, 1e-10);
    TEST_CHECK(e <= 1e-10, name, "dut %.17g cpu %.17g", a, b);
    snprintf(name, sizeof name, "sumsq n=%zu repeatable (bitwise)", n);
    TEST_CHECK(a == a2, name, "%.17g then %.17g", a, a2);
    // sumsq_add into a device accumulator: the same sum as sumsq, added, bitwise.
    double init = 0.25, acc = 0.0, *d_acc = dut->alloc(dut, sizeof(double));
    dut->copy_to_device(dut, d_acc, &init, sizeof init);
    dut->sumsq_add(dut, d_acc, t.d, n);
    dut->copy_to_host(dut, &acc, d_acc, sizeof acc);
    snprintf(name, sizeof name, "sumsq_add n=%zu = 0.25 + sumsq (bitwise)", n);
    TEST_CHECK(acc == init + a, name, "%.17g vs %.17g", acc, init + a);
    dut->free(dut, d_acc);
    twin_free(t), free(x);
}

// loss_sum: two micro-batches' losses added into a device accumulator (starting from 0.25),
// in double on both backends: within 1e-12, and bitwise the same on a rerun.
static void test_loss_sum(size_t n) {
    float *x = rand_f(2 * n, 0, 11);
    twin t = twin_new(x, 2 * n);
    double r[3], init = 0.25;
    double *acc[2] = {dut->alloc(dut, sizeof(double)), cpu->alloc(cpu, sizeof(double))};
    for (int k = 0; k < 3; k++) {
        backend *be = k == 1 ? cpu : dut;
        double *a = acc[k == 1];
        be->copy_to_device(be, a, &init, sizeof init);
        be->loss_sum(be, a, k == 1 ? t.c : t.d, n);
        be->loss_sum(be, a, (k == 1 ? t.c : t.d) + n, n);
        be->copy_to_host(be, &r[k], a, sizeof(double));
    }
    double e = fabs(r[0] - r[1]) / fabs(r[1]);
    char name[96];
    snprintf(name, sizeof name, "loss_sum n=%zu", n);
    record(name, e, 1e-12);
    TEST_CHECK(e <= 1e-12, name, "dut %.17g cpu %.17g", r[0], r[1]);
    snprintf(name, sizeof name, "loss_sum n=%zu repeatable (bitwise)", n);
    TEST_CHECK(r[0] == r[2], name, "%.17g then %.17g", r[0], r[2]);
    dut->free(dut, acc[0]), cpu->free(cpu, acc[1]);
    twin_free(t), free(x);
}

// bf16: the master weights p also rounded into bf16 parameters in the same pass; the bf16
// copies may differ where p's last-bit difference crosses a rounding boundary (counted, at
// most one bf16 unit apart).
static void test_adamw(size_t n, int t, int bf16) {
    char op[64];
    snprintf(op, sizeof op, "adamw%s n=%zu t=%d", bf16 ? " bf16 out" : "", n, t);
    twin p = twin_rand(n, -1, 1), g = twin_rand(n, -1, 1), m = twin_rand(n, -0.1, 0.1);
    twin v = twin_rand(n, 0, 0.01);
    uint16_t *p16_d = bf16 ? dut->alloc(dut, n * 2 + 2) : NULL;
    uint16_t *p16_c = bf16 ? cpu->alloc(cpu, n * 2 + 2) : NULL;
    dut->adamw(dut, p.d, g.d, m.d, v.d, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t, p16_d);
    cpu->adamw(cpu, p.c, g.c, m.c, v.c, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t, p16_c);
    compare(op, "param", p, 1e-6);
    compare(op, "m", m, 1e-6);
    compare(op, "v", v, 1e-6);
    if (bf16) {
        uint16_t *a = xmalloc(n * 2 + 2), *c = xmalloc(n * 2 + 2);
        dut->copy_to_host(dut, a, p16_d, n * 2);
        cpu->copy_to_host(cpu, c, p16_c, n * 2);
        float *pd = host_of(dut, p.d, n);
        size_t differ = 0, bad = 0;
        for (size_t i = 0; i < n; i++) {
            differ += a[i] != c[i];
            bad += a[i] != bf16_from_f32(pd[i]) || abs((int)a[i] - (int)c[i]) > 1;
        }
        char name[96];
        snprintf(name, sizeof name, "%s param16 = bf16(param)", op);
        TEST_CHECK(!bad, name, "%zu of %zu not the rounding of the device's own fp32 result, or "
                   "more than one unit from the CPU's", bad, n);
        printf("# %s: %zu of %zu bf16 parameters differ from the CPU's by one unit\n", op,
               differ, n);
        free(a), free(c), free(pd);
        dut->free(dut, p16_d), cpu->free(cpu, p16_c);
    }
    twin_free(p), twin_free(g), twin_free(m), twin_free(v);
}

// ---------------------------------------------------------------------------------------
// Gradient checks on the device under test: finite differences of the double references.

// The device's gradient (minus base, for accumulating ops) against finite differences of
// L = sum(f(args) * R) with respect to x (n elements).
static void fd_check(const char *name, const float *d_grad, const float *base, ref_forward f,
                     void *args, size_t nout, const double *R, double *x, size_t n) {
    double *fd = xmalloc(n * sizeof(double));
    fd_grad(f, args, nout, R, x, NULL, n, fd);
    float *h = host_of(dut, d_grad, n);
    char tag[64];
    name_of(tag, sizeof tag, "vs finite differences");
    check_rel(name, tag, h, base, fd, n, 1e-4);
    free(h), free(fd);
}

static void test_gradients(void) {
    { // matmul
        const int N = 5, IC = 7, OC = 6;
        float *inp = rand_f((size_t)N * IC, -1, 1), *w = rand_f((size_t)OC * IC, -1, 1);
        float *bias = rand_f(OC, -1, 1), *R = rand_f((size_t)N * OC, -1, 1);
        float *g0w = rand_f((size_t)OC * IC, -1, 1), *g0b = rand_f(OC, -1, 1);
        matmul_args a = {to_d(inp, (size_t)N * IC), to_d(w, (size_t)OC * IC), to_d(bias, OC),
                         N, IC, OC};
        double *Rd = to_d(R, (size_t)N * OC);
        float *d_inp = dev_f(dut, inp, (size_t)N * IC), *d_w = dev_f(dut, w, (size_t)OC * IC);
        float *d_R = dev_f(dut, R, (size_t)N * OC), *d_dinp = dev_f(dut, NULL, (size_t)N * IC);
        float *d_dw = dev_f(dut, g0w, (size_t)OC * IC), *d_db = dev_f(dut, g0b, OC);
        backend_matmul_bwd(dut, d_dinp, d_dw, d_db, operand_fp32(d_R), operand_fp32(d_inp), operand_fp32(d_w), NULL, N, IC, OC);
        fd_check("grad matmul dinp", d_dinp, NULL, fwd_matmul, &a, (size_t)N * OC, Rd, a.inp,
                 (size_t)N * IC);
        fd_check("grad matmul dweight", d_dw, g0w, fwd_matmul, &a, (size_t)N * OC, Rd, a.w,
                 (size_t)OC * IC);
        fd_check("grad matmul dbias", d_db, g0b, fwd_matmul, &a, (size_t)N * OC, Rd, a.bias, OC);
        dut->free(dut, d_inp), dut->free(dut, d_w), dut->free(dut, d_R), dut->free(dut, d_dinp);
        dut->free(dut, d_dw), dut->free(dut, d_db);
        free(inp), free(w), free(bias), free(R), free(g0w), free(g0b);
        free(a.inp), free(a.w), free(a.bias), free(Rd);
    }
    { // layernorm
        const int N = 4, C = 10;
        const size_t n = (size_t)N * C;
        float *inp = rand_f(n, -2, 3), *w = rand_f(C, 0.5, 1.5), *bias = rand_f(C, -1, 1);
        float *R = rand_f(n, -1, 1), *g0i = rand_f(n, -1, 1), *g0w = rand_f(C, -1, 1);
        float *g0b = rand_f(C, -1, 1);
        ln_args a = {to_d(inp, n), to_d(w, C), to_d(bias, C), N, C};
        double *Rd = to_d(R, n);
        float *d_inp = dev_f(dut, inp, n), *d_w = dev_f(dut, w, C), *d_b = dev_f(dut, bias, C);
        float *d_out = dev_f(dut, NULL, n), *d_m = dev_f(dut, NULL, N), *d_r = dev_f(dut, NULL, N);
        float *d_R = dev_f(dut, R, n), *d_di = dev_f(dut, g0i, n), *d_dw = dev_f(dut, g0w, C);
        float *d_db = dev_f(dut, g0b, C);
        dut->layernorm_fwd(dut, d_out, d_m, d_r, d_inp, d_w, d_b, N, C);
        dut->layernorm_bwd(dut, d_di, d_dw, d_db, d_R, d_inp, d_w, d_m, d_r, N, C);
        fd_check("grad layernorm dinp", d_di, g0i, fwd_ln, &a, n, Rd, a.inp, n);
        fd_check("grad layernorm dweight", d_dw, g0w, fwd_ln, &a, n, Rd, a.w, C);
        fd_check("grad layernorm dbias", d_db, g0b, fwd_ln, &a, n, Rd, a.bias, C);
        float *all[] = {d_inp, d_w, d_b, d_out, d_m, d_r, d_R, d_di, d_dw, d_db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dut->free(dut, all[i]);
        free(inp), free(w), free(bias), free(R), free(g0i), free(g0w), free(g0b);
        free(a.inp), free(a.w), free(a.bias), free(Rd);
    }
    { // gelu
        const size_t n = 101;
        float *x = rand_f(n, -6, 6), *R = rand_f(n, -1, 1);
        gelu_args a = {to_d(x, n), n};
        double *Rd = to_d(R, n);
        float *d_x = dev_f(dut, x, n), *d_R = dev_f(dut, R, n), *d_di = dev_f(dut, NULL, n);
        dut->gelu_bwd(dut, d_di, d_x, d_R, n);
        fd_check("grad gelu dinp", d_di, NULL, fwd_gelu, &a, n, Rd, a.x, n);
        dut->free(dut, d_x), dut->free(dut, d_R), dut->free(dut, d_di);
        free(x), free(R), free(a.x), free(Rd);
    }
    { // attention: a T that is not a multiple of the tiles, HS below the padded width
        const int B = 2, T = 37, NH = 2, HS = 5, C = NH * HS;
        const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
        float *qkv = rand_f(nqkv, -2, 2), *R = rand_f(nout, -1, 1);
        attn_args a = {to_d(qkv, nqkv), B, T, NH, HS};
        double *Rd = to_d(R, nout);
        float *d_qkv = dev_f(dut, qkv, nqkv), *d_out = dev_f(dut, NULL, nout);
        float *d_R = dev_f(dut, R, nout), *d_dqkv = dev_f(dut, NULL, nqkv);
        void *st = dut->alloc(dut, attn_state_bytes(dut->attn_state, B, T, NH));
        backend_attention_fwd(dut, d_out, st, operand_fp32(d_qkv), B, T, NH, HS);
        backend_attention_bwd(dut, d_dqkv, d_R, operand_fp32(d_qkv), st, B, T, NH, HS);
        fd_check("grad attention dqkv", d_dqkv, NULL, fwd_attn, &a, nout, Rd, a.qkv, nqkv);
        dut->free(dut, d_qkv), dut->free(dut, d_out), dut->free(dut, d_R);
        dut->free(dut, d_dqkv), dut->free(dut, st);
        free(qkv), free(R), free(a.qkv), free(Rd);
    }
    { // embedding
        const int B = 2, T = 5, C = 6, V = 7;
        int tok[10] = {3, 6, 6, 0, 2, 5, 4, 3, 3, 1};
        const size_t n = (size_t)B * T * C;
        float *wte = rand_f((size_t)V * C, -1, 1), *wpe = rand_f((size_t)T * C, -1, 1);
        float *R = rand_f(n, -1, 1), *g0e = rand_f((size_t)V * C, -1, 1);
        float *g0p = rand_f((size_t)T * C, -1, 1);
        emb_args a = {tok, to_d(wte, (size_t)V * C), to_d(wpe, (size_t)T * C), B, T, C, 0, V, 1};
        double *Rd = to_d(R, n);
        int *d_tok = dev_i(dut, tok, (size_t)B * T);
        float *d_R = dev_f(dut, R, n), *d_dwte = dev_f(dut, g0e, (size_t)V * C);
        float *d_dwpe = dev_f(dut, g0p, (size_t)T * C);
        dut->embedding_bwd(dut, d_dwte, d_dwpe, d_R, d_tok, B, T, C, 0, V);
        fd_check("grad embedding dwte", d_dwte, g0e, fwd_emb, &a, n, Rd, a.wte, (size_t)V * C);
        fd_check("grad embedding dwpe", d_dwpe, g0p, fwd_emb, &a, n, Rd, a.wpe, (size_t)T * C);
        dut->free(dut, d_tok), dut->free(dut, d_R), dut->free(dut, d_dwte);
        dut->free(dut, d_dwpe);
        free(wte), free(wpe), free(R), free(g0e), free(g0p), free(a.wte), free(a.wpe), free(Rd);
    }
    { // cross-entropy over one rank: 11 columns, 9 of them real
        const int N = 3, Vp = 11, V = 9;
        int tg[3] = {0, 8, 4};
        float *lg = rand_f((size_t)N * Vp, -3, 3);
        xent_args a = {to_d(lg, (size_t)N * Vp), tg, N, Vp, V};
        const float dloss = 1.0f / 3.0f;
        double Rd[3] = {dloss, dloss, dloss};
        int *d_t = dev_i(dut, tg, N);
        float *d_l = dev_f(dut, lg, (size_t)N * Vp), *d_m = dev_f(dut, NULL, N);
        float *d_s = dev_f(dut, NULL, N), *d_tl = dev_f(dut, NULL, N);
        dut->xent_max(dut, d_m, d_l, N, Vp, 0, V);
        dut->xent_sumexp(dut, d_s, d_tl, d_l, d_m, d_t, N, Vp, 0, V);
        dut->xent_bwd(dut, d_l, d_m, d_s, d_t, dloss, N, Vp, 0, V);
        fd_check("grad xent dlogits", d_l, NULL, fwd_xent, &a, N, Rd, a.logits, (size_t)N * Vp);
        dut->free(dut, d_t), dut->free(dut, d_l), dut->free(dut, d_m), dut->free(dut, d_s);
        dut->free(dut, d_tl);
        free(lg), free(a.logits);
    }
}

// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    backend_cpu_prepare_process(argv); // OpenBLAS's fast kernels for the CPU reference
    log_init();
    int do_bench = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) do_bench = 1;
        else if (!strcmp(argv[i], "--bench-small")) do_bench = 2;
        else if (!strcmp(argv[i], "--self-test")) self_test = 1;
        else {
            fprintf(stderr, "usage: %s [--bench | --bench-small] [--self-test]\n", argv[0]);
            return 2;
        }
    }
    if (backend_cpu_create(&cpu, 0) != TRI_OK) return 1;
    if (self_test) {
        if (backend_cpu_create(&dut, 1) != TRI_OK) return 1;
        snprintf(test_tag, sizeof test_tag, " (cpu 1 thread)");
    } else {
        int device = -1;
        if (cuda_device_count() <= 0 || cuda_device_select(0, &device) != TRI_OK ||
            backend_cuda_create(&dut, device) != TRI_OK) {
            printf("FAIL test_gpu_ops: no usable CUDA device (this test needs a GPU; "
                   "--self-test runs the harness on the CPU)\n");
            return 1;
        }
        snprintf(test_tag, sizeof test_tag, " (cuda)");
        if (getenv("TRIDENT_CUDA_TF32"))
            printf("note: TRIDENT_CUDA_TF32 is set; fp32 tolerances will not hold\n");
    }
    if (do_bench) {
        bench(dut, do_bench == 2);
        dut->destroy(dut), cpu->destroy(cpu);
        return 0;
    }
    test_memory();
    test_matmul(512, 768, 2304, 1, 0);
    test_matmul(256, 3072, 768, 1, 0);
    test_matmul(300, 768, 1000, 0, 0);
    test_matmul(37, 29, 53, 1, 0);
    test_matmul(37, 29, 53, 1, 1);
    test_matmul(64, 96, 80, 1, 3);
    test_matmul_bf16(512, 768, 2304, 1, 0);
    test_matmul_bf16(256, 3072, 768, 1, 0);
    test_matmul_bf16(300, 768, 1000, 0, 0);
    test_matmul_bf16(37, 29, 53, 1, 0);
    test_matmul_bf16(64, 96, 80, 1, 3);
    test_matmul_gelu(512, 768, 3072, 1, 0);
    test_matmul_gelu(512, 768, 3072, 1, 1);
    test_matmul_gelu(300, 96, 200, 0, 1);
    test_matmul_gelu(37, 29, 53, 1, 0); // fallback: no multiple of 8
    test_matmul_gelu(37, 29, 53, 1, 1);
    test_layernorm(1000, 768);
    test_layernorm(77, 33);
    test_residual_layernorm(1000, 768);
    test_residual_layernorm(77, 33);
    test_pointwise(1000003);
    test_attention(2, 256, 4, 64);
    test_attention(1, 100, 3, 32);
    test_attention(2, 77, 2, 80);
    test_attention(1, 130, 2, 128);
    test_attention(1, 70, 1, 256);
    test_attention(3, 19, 2, 7);
    test_attention_bf16(2, 256, 4, 64);
    test_attention_bf16(1, 100, 3, 64);
    test_attention_bf16(2, 77, 2, 128);
    test_attention_bf16(1, 130, 2, 32);
    test_attention_bf16(1, 70, 1, 16);
    test_attention_bf16(3, 19, 2, 7); // not a multiple of 16: the fp32 fallback
    test_attention_bf16(1, 1, 1, 64);
    test_embedding(4, 64, 96, 300);
    test_embedding(2, 33, 130, 10);
    test_xent(64, 384, 0, 700);
    test_xent(64, 384, 384, 700);
    test_xent(16, 384, 768, 700); // no real column on this rank
    test_xent(8, 50304, 0, 50257);
    test_sumsq(1000003);
    test_sumsq(5);
    test_sumsq(0);
    test_loss_sum(8192);
    test_loss_sum(37);
    test_adamw(100003, 1, 0);
    test_adamw(100003, 7, 0);
    test_adamw(100003, 3, 1);
    test_gradients();

    printf("\n%-80s %10s %9s\n", "max |dut - cpu| / max |cpu|", "error", "tolerance");
    for (int i = 0; i < nrows; i++)
        printf("%-80s %10.3g %9.1g%s\n", rows[i].name, rows[i].err, rows[i].tol,
               rows[i].err <= rows[i].tol ? "" : "  FAIL");
    dut->destroy(dut), cpu->destroy(cpu);
    TEST_EXIT();
}
