// gpu_bench.h: `test_gpu_ops --bench`: op timings of a backend at GPT-2 124M sizes (B 8,
// T 1024, C 768, 12 heads, vocabulary 50304), or tiny ones (--bench-small). Included by
// tests/gpu/test_gpu_ops.c after tests/op_cases.h; bench(be, small) is the entry point.
#pragma once
#include "../ops_ref.h"

#include <stdio.h>
#include <stdlib.h>

static backend *bench_be; // the backend bench() times

static double time_op(void (*op)(void *), void *args) {
    op(args); // warm-up (plans, workspace)
    bench_be->synchronize(bench_be);
    int reps = 0;
    double t0 = time_now_s(), t;
    do {
        op(args);
        bench_be->synchronize(bench_be);
        reps++;
        t = time_now_s() - t0;
    } while (t < 0.2 && reps < 50);
    return t / reps;
}

// The buffers and sizes of one timed op (each op uses those it names). dt: the dtype of the
// matmul and attention operands; bf16 ones are read from the first half of the same buffers.
typedef struct {
    float *inp, *w, *bias, *out, *dinp, *dw, *db, *mean, *rstd;
    int *tok;
    void *state;
    int N, IC, OC, B, T, NH, HS;
    tri_dtype dt;
} bench_args;

static operand bench_operand(const float *p, tri_dtype dt) {
    operand o = {p, dt};
    return o;
}

// The bf16 forward writes dinp: its backward reads out as bf16 dout.
static void b_mm_fwd(void *p) {
    bench_args *x = p;
    backend_matmul_fwd(bench_be, x->dt == DTYPE_BF16 ? x->dinp : x->out, NULL,
                       bench_operand(x->inp, x->dt), bench_operand(x->w, x->dt), x->bias, x->N,
                       x->IC, x->OC);
}
static void b_mm_bwd(void *p) {
    bench_args *x = p;
    backend_matmul_bwd(bench_be, x->dinp, x->dw, x->db, bench_operand(x->out, x->dt),
                       bench_operand(x->inp, x->dt), bench_operand(x->w, x->dt), NULL, x->N, x->IC,
                       x->OC);
}
// qkv: inp in fp32, w in bf16.
static void b_att_fwd(void *p) {
    bench_args *x = p;
    const float *qkv = x->dt == DTYPE_BF16 ? x->w : x->inp;
    backend_attention_fwd(bench_be, x->out, x->state, bench_operand(qkv, x->dt), x->B, x->T, x->NH,
                          x->NH, x->HS, 0.0f);
}
// O: out itself, or under bf16 its rounding, kept in w after the bf16 qkv.
static void b_att_bwd(void *p) {
    bench_args *x = p;
    const float *qkv = x->dt == DTYPE_BF16 ? x->w : x->inp;
    const operand o = x->dt == DTYPE_BF16 ? operand_bf16((const uint16_t *)x->w +
                                                         (size_t)x->B * x->T * 3 * x->NH * x->HS)
                                          : operand_fp32(x->out);
    backend_attention_bwd(bench_be, x->dinp, x->out, bench_operand(qkv, x->dt), o, x->state, x->B,
                          x->T, x->NH, x->NH, x->HS, 0.0f);
}
static void b_ln_fwd(void *p) {
    bench_args *x = p;
    bench_be->layernorm_fwd(bench_be, x->out, x->mean, x->rstd, x->inp, x->w, x->bias, x->N, x->IC);
}
static void b_ln_bwd(void *p) {
    bench_args *x = p;
    bench_be->layernorm_bwd(bench_be, x->dinp, x->dw, x->db, x->out, x->inp, x->w, x->mean, x->rstd,
                            x->N, x->IC);
}
static void b_gelu(void *p) {
    bench_args *x = p;
    bench_be->gelu_fwd(bench_be, x->out, x->inp, (size_t)x->N * x->OC);
}
static void b_xent(void *p) { // inp: logits; mean, rstd, db, out: rowmax, sumexp, target, losses
    bench_args *x = p;
    const int V_valid = x->OC - 47;
    bench_be->xent_max(bench_be, x->mean, x->inp, x->N, x->OC, 0, V_valid);
    bench_be->xent_sumexp(bench_be, x->rstd, x->db, x->inp, x->mean, x->tok, x->N, x->OC, 0,
                          V_valid);
    bench_be->xent_loss(bench_be, x->out, x->mean, x->rstd, x->db, x->N);
    bench_be->xent_bwd(bench_be, x->inp, x->mean, x->rstd, x->tok, 1e-4f, x->N, x->OC, 0, V_valid);
}
// The fused bf16 classifier on the same shape: dinp holds the logits as bf16.
static void b_xent16(void *p) {
    bench_args *x = p;
    const int V_valid = x->OC - 47;
    uint16_t *l16 = (uint16_t *)x->dinp;
    bench_be->xent_stats16(bench_be, x->mean, x->rstd, x->db, l16, x->tok, x->N, x->OC, 0, V_valid);
    bench_be->xent_loss(bench_be, x->out, x->mean, x->rstd, x->db, x->N);
    bench_be->xent_bwd16(bench_be, l16, x->mean, x->rstd, x->tok, 1e-4f, x->N, x->OC, 0, V_valid);
}
static void b_emb_bwd(void *p) {
    bench_args *x = p;
    bench_be->embedding_bwd(bench_be, x->dw, x->db, x->out, x->tok, x->B, x->T, x->IC, 0, x->OC);
}
static void b_adamw(void *p) { // inp, dinp, mean, rstd: param, grad, m, v
    bench_args *x = p;
    bench_be->adamw(bench_be, x->inp, x->dinp, x->mean, x->rstd, (size_t)x->N, &OPS_BENCH_ADAMW,
                    NULL);
}
static void b_sumsq(void *p) {
    bench_args *x = p;
    (void)bench_be->sumsq(bench_be, x->dinp, (size_t)x->N);
}

// A device buffer of n random floats in [-1, 1).
static float *bench_buf(size_t n) {
    float *h = rand_f(n, -1, 1), *d = dev_f(bench_be, h, n);
    free(h);
    return d;
}

static void bench_free(bench_args *a) {
    float *bufs[] = {a->inp, a->w, a->bias, a->out, a->dinp, a->dw, a->db, a->mean, a->rstd};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        if (bufs[k]) bench_be->free(bench_be, bufs[k]);
    if (a->tok) bench_be->free(bench_be, a->tok);
    if (a->state) bench_be->free(bench_be, a->state);
}

// Attention forward and backward on fp32 and on bf16 q, k, v; returns the fp32 pair's time.
// (TRIDENT_CUDA_ATTN picks the CUDA kernels when the backend is created.)
static double bench_attention(int B, int T, int NH, int HS) {
    const int C = NH * HS, N = B * T;
    const char *kernels = getenv("TRIDENT_CUDA_ATTN");
    const size_t state_bytes = attn_state_bytes(bench_be->attn_state, B, T, NH);
    bench_args a = {.inp = bench_buf((size_t)N * 3 * C),
                    .out = bench_buf((size_t)N * C),
                    .dinp = bench_buf((size_t)N * 3 * C),
                    .state = bench_be->alloc(bench_be, state_bytes),
                    .B = B,
                    .T = T,
                    .NH = NH,
                    .HS = HS};
    double tf = time_op(b_att_fwd, &a), tb = time_op(b_att_bwd, &a);
    double fl = 2.0 * B * NH * (double)T * T * HS; // causal half of 2 products of 2 T^2 HS
    printf("bench: attention B=%d T=%d NH=%d HS=%d (kernels %s): fwd %.3f ms %.1f TFLOP/s, bwd "
           "%.3f ms %.1f TFLOP/s (causal FLOPs, backward counted as 2.5x forward)\n",
           B, T, NH, HS, kernels ? kernels : "default", tf * 1e3, fl / tf / 1e12, tb * 1e3,
           2.5 * fl / tb / 1e12);
    // The bf16 qkv in the first half of w, then O's rounding (b_att_bwd).
    a.w = bench_buf((size_t)N * 3 * C);
    bench_be->to_bf16(bench_be, (uint16_t *)a.w, a.inp, (size_t)N * 3 * C);
    a.dt = DTYPE_BF16;
    const double tf16 = time_op(b_att_fwd, &a);
    bench_be->to_bf16(bench_be, (uint16_t *)a.w + (size_t)N * 3 * C, a.out, (size_t)N * C);
    const double tb16 = time_op(b_att_bwd, &a);
    printf("bench: attention B=%d T=%d NH=%d HS=%d bf16 qkv (tensor cores, kernels %s): fwd %.3f "
           "ms %.1f TFLOP/s, bwd %.3f ms %.1f TFLOP/s\n",
           B, T, NH, HS, kernels ? kernels : "default", tf16 * 1e3, fl / tf16 / 1e12, tb16 * 1e3,
           2.5 * fl / tb16 / 1e12);
    bench_free(&a);
    return tf + tb;
}

// --bench-attn: attention alone, at GPT-2 124M's shape and at each head size of the FA2
// kernels at T 1024 and 2048 (scripts/gpu-check.sh runs it once per TRIDENT_CUDA_ATTN).
static void bench_attention_only(backend *be, int small) {
    bench_be = be;
    static const int shapes[][4] = {{8, 1024, 12, 64}, {8, 1024, 8, 80},  {8, 1024, 8, 96},
                                    {8, 1024, 6, 128}, {4, 2048, 12, 64}, {4, 2048, 6, 128}};
    for (size_t i = 0; i < (small ? 1 : sizeof shapes / sizeof shapes[0]); i++) {
        const int *d = shapes[i];
        bench_attention(small ? 2 : d[0], small ? 64 : d[1], small ? 2 : d[2], d[3]);
    }
}

// small: tiny sizes, to run the bench code itself quickly (--self-test --bench-small).
static void bench(backend *be, int small) {
    bench_be = be;
    const int B = small ? 2 : 8, T = small ? 64 : 1024, C = small ? 64 : 768, NH = small ? 2 : 12;
    const int HS = C / NH, V = small ? 512 : 50304, N = B * T;
    printf("bench: %s sizes, B=%d T=%d C=%d NH=%d Vp=%d on %s (%s)\n",
           small ? "small" : "GPT-2 124M", B, T, C, NH, V, bench_be->name,
           getenv("TRIDENT_CUDA_TF32") ? "TRIDENT_CUDA_TF32 set" : "fp32 matmuls");
    const struct {
        const char *name;
        int IC, OC, per_step; // per_step: how many of these one 12-layer step runs
    } lin[] = {{"qkv", C, 3 * C, 12},
               {"attproj", C, C, 12},
               {"fc", C, 4 * C, 12},
               {"fcproj", 4 * C, C, 12},
               {"lm head", C, V, 1}};
    double total = 0.0; // estimated time of the ops of one step
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        const int IC = lin[i].IC, OC = lin[i].OC, has_bias = lin[i].per_step > 1;
        bench_args a = {.inp = bench_buf((size_t)N * IC),
                        .w = bench_buf((size_t)OC * IC),
                        .bias = has_bias ? bench_buf(OC) : NULL,
                        .out = bench_buf((size_t)N * OC),
                        .dinp = bench_buf((size_t)N * IC),
                        .dw = bench_buf((size_t)OC * IC),
                        .db = has_bias ? bench_buf(OC) : NULL,
                        .N = N,
                        .IC = IC,
                        .OC = OC};
        double tf = time_op(b_mm_fwd, &a), tb = time_op(b_mm_bwd, &a);
        double fl = 2.0 * N * IC * OC;
        printf("bench: matmul %-8s (%d x %d x %d): fwd %.3f ms %.1f TFLOP/s, bwd %.3f ms %.1f "
               "TFLOP/s\n",
               lin[i].name, N, IC, OC, tf * 1e3, fl / tf / 1e12, tb * 1e3, 2 * fl / tb / 1e12);
        // The bf16-operand forms on the same buffers (their first half read as bf16; dinp
        // takes the forward's fp32 output, which is N x IC floats or more).
        bench_args a16 = a;
        a16.dt = DTYPE_BF16;
        a16.dinp = bench_buf((size_t)N * (IC > OC ? IC : OC));
        double tf16 = time_op(b_mm_fwd, &a16), tb16 = time_op(b_mm_bwd, &a16);
        bench_be->free(bench_be, a16.dinp);
        printf("bench: matmul %-8s bf16 operands: fwd %.3f ms %.1f TFLOP/s, bwd %.3f ms %.1f "
               "TFLOP/s\n",
               lin[i].name, tf16 * 1e3, fl / tf16 / 1e12, tb16 * 1e3, 2 * fl / tb16 / 1e12);
        total += lin[i].per_step * (tf + tb);
        bench_free(&a);
    }
    total += 12.0 * bench_attention(B, T, NH, HS);
    {
        bench_args a = {.inp = bench_buf((size_t)N * C),
                        .w = bench_buf(C),
                        .bias = bench_buf(C),
                        .out = bench_buf((size_t)N * C),
                        .dinp = bench_buf((size_t)N * C),
                        .dw = bench_buf(C),
                        .db = bench_buf(C),
                        .mean = bench_buf(N),
                        .rstd = bench_buf(N),
                        .N = N,
                        .IC = C};
        double tf = time_op(b_ln_fwd, &a), tb = time_op(b_ln_bwd, &a);
        printf("bench: layernorm N=%d C=%d: fwd %.3f ms %.0f GB/s, bwd %.3f ms %.0f GB/s\n", N, C,
               tf * 1e3, (double)N * C * 8 / tf / 1e9, tb * 1e3, (double)N * C * 16 / tb / 1e9);
        total += 25.0 * (tf + tb);
        bench_free(&a);
    }
    {
        bench_args a = {.inp = bench_buf((size_t)N * 4 * C),
                        .out = bench_buf((size_t)N * 4 * C),
                        .N = N,
                        .OC = 4 * C};
        double t = time_op(b_gelu, &a);
        printf("bench: gelu_fwd n=%d: %.3f ms %.0f GB/s\n", N * 4 * C, t * 1e3,
               (double)N * 4 * C * 8 / t / 1e9);
        total += 12.0 * 2.5 * t; // the backward moves 1.5 times the bytes
        bench_free(&a);
    }
    {
        int *tg = xmalloc((size_t)N * sizeof(int));
        for (int i = 0; i < N; i++) tg[i] = (int)((0.5 * (rnd() + 1.0)) * (V - 47)) % (V - 47);
        bench_args a = {.inp = bench_buf((size_t)N * V),
                        .out = bench_buf(N),
                        .db = bench_buf(N),
                        .mean = bench_buf(N),
                        .rstd = bench_buf(N),
                        .tok = dev_i(bench_be, tg, N),
                        .N = N,
                        .OC = V};
        double t = time_op(b_xent, &a);
        printf("bench: cross-entropy, 4 passes, N=%d V=%d: %.3f ms %.0f GB/s\n", N, V, t * 1e3,
               (double)N * V * 4 * 4 / t / 1e9);
        total += t;
        a.dinp = bench_buf((size_t)N * V / 2 + 1); // the logits' bf16 rounding
        bench_be->to_bf16(bench_be, (uint16_t *)a.dinp, a.inp, (size_t)N * V);
        t = time_op(b_xent16, &a);
        printf("bench: cross-entropy fused bf16, 2 passes, N=%d V=%d: %.3f ms %.0f GB/s\n", N, V,
               t * 1e3, (double)N * V * 2 * 3 / t / 1e9);
        bench_free(&a);
        for (int i = 0; i < N; i++) tg[i] = (int)((0.5 * (rnd() + 1.0)) * 256) % 256;
        bench_args e = {.out = bench_buf((size_t)N * C),
                        .dw = bench_buf((size_t)V * C),
                        .db = bench_buf((size_t)T * C),
                        .tok = dev_i(bench_be, tg, N),
                        .B = B,
                        .T = T,
                        .IC = C,
                        .OC = V};
        t = time_op(b_emb_bwd, &e);
        printf("bench: embedding_bwd B=%d T=%d C=%d (byte-level tokens): %.3f ms\n", B, T, C,
               t * 1e3);
        total += t;
        bench_free(&e);
        free(tg);
    }
    {
        const int P = small ? 1000 * 1000 : 124 * 1000 * 1000;
        bench_args a = {.inp = bench_buf(P),
                        .dinp = bench_buf(P),
                        .mean = bench_buf(P),
                        .rstd = dev_f(bench_be, NULL, P),
                        .N = P};
        double t = time_op(b_adamw, &a), ts = time_op(b_sumsq, &a);
        printf("bench: adamw n=%d: %.3f ms %.0f GB/s; sumsq: %.3f ms %.0f GB/s\n", P, t * 1e3,
               (double)P * 28 / t / 1e9, ts * 1e3, (double)P * 4 / ts / 1e9);
        total += t + ts;
        bench_free(&a);
    }
    printf("bench: these ops of one 12-layer step of B=%d (no residuals, no comm): %.1f ms, "
           "%.0f tokens/s\n",
           B, total * 1e3, N / total);
}
