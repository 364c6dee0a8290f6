// test_ops_attn.c: the CPU backend's causal attention under each of its threading policies,
// and the --bench timing table of every op. The attention rows of the op table
// (tests/op_cases.h) run here against the double-precision references with the policies
// HEADS and INNER on 1, 2 and 3 threads (tests/test_ops.c runs them with AUTO); then what the
// table does not see: the probabilities the CPU keeps as its state, and causality. Last, the
// algorithm of the CUDA backend's FlashAttention-2 kernels as a host model (tests/fa2_model.h)
// against the double references and finite differences, since no GPU runs here.
//
//   build/tests/test_ops_attn       the tests
//   build/tests/test_ops_attn --bench [threads]
//                                   a timing table at GPT-2 124M sizes (not a test)
//   build/tests/test_ops_attn --fa2-defect N
//                                   the FA2 model's checks with defect N of fa2_model.h
//                                   built in: they must fail
#include "compute/backend.h"
#include "compute/backend_cpu_internal.h" // attention policy and cblas, for --bench and coverage
#include "fa2_model.h"
#include "op_cases.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *policy_name(cpu_attn_policy p) {
    return p == CPU_ATTN_HEADS ? "heads" : p == CPU_ATTN_INNER ? "inner" : "auto";
}

// ---------------------------------------------------------------------------------------
// The CPU's attention state and causality

// The probabilities kept as the state, against the reference, over a state reused from an
// earlier micro-batch (junk); then causality: new k and v for token t0 of batch 0 leave every
// output before t0 bitwise unchanged (masked probabilities are exactly 0, and 0 * v adds
// nothing).
static void test_attention_state(backend *b, int B, int T, int NH, int HS, cpu_attn_policy policy) {
    ((cpu_ctx *)b->ctx)->attn_policy = policy;
    char tag[96], name[200];
    snprintf(tag, sizeof tag, "attention B=%d T=%d NH=%d HS=%d %s", B, T, NH, HS,
             policy_name(policy));
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    const size_t nP = (size_t)B * NH * T * T;
    TRI_ASSERT(b->attn_state == ATTN_STATE_PROBS &&
               attn_state_bytes(b->attn_state, B, T, NH) == nP * sizeof(float));
    float *qkv = rand_f(nqkv, -2, 2), *junkP = rand_f(nP, 5, 6);
    double *qkv_d = to_d(qkv, nqkv), *ref = xmalloc(nout * sizeof(double));
    double *refP = xmalloc(nP * sizeof(double));
    ref_attention(ref, refP, qkv_d, B, T, NH, HS);
    float *d_qkv = dev_f(b, qkv, nqkv), *d_out = dev_f(b, NULL, nout), *d_P = dev_f(b, junkP, nP);
    backend_attention_fwd(b, d_out, d_P, operand_fp32(d_qkv), B, T, NH, NH, HS, 0.0f);
    float *out = host_of(b, d_out, nout), *P = host_of(b, d_P, nP);
    name_of(name, sizeof name, "probabilities (state)");
    check_rel(tag, name, P, NULL, refP, nP, 1e-5);

    const int t0 = T / 2;
    for (int c = C; c < 3 * C; c++) qkv[(size_t)t0 * 3 * C + c] += 1.5f;
    b->copy_to_device(b, d_qkv, qkv, nqkv * sizeof(float));
    backend_attention_fwd(b, d_out, d_P, operand_fp32(d_qkv), B, T, NH, NH, HS, 0.0f);
    float *out2 = host_of(b, d_out, nout);
    const int same_before = !memcmp(out, out2, (size_t)t0 * C * sizeof(float));
    const int changed_at = memcmp(out + (size_t)t0 * C, out2 + (size_t)t0 * C,
                                  (size_t)C * sizeof(float));
    snprintf(name, sizeof name, "%s causal%s", tag, test_tag);
    TEST_CHECK(same_before && changed_at, name, "outputs before t0=%d %s; output at t0 %s", t0,
               same_before ? "same" : "CHANGED", changed_at ? "changed" : "UNCHANGED");
    b->free(b, d_qkv), b->free(b, d_out), b->free(b, d_P);
    free(qkv), free(junkP), free(qkv_d), free(ref), free(refP), free(out), free(P), free(out2);
    ((cpu_ctx *)b->ctx)->attn_policy = CPU_ATTN_AUTO;
}

// ---------------------------------------------------------------------------------------
// The algorithm of CUDA's FlashAttention-2 kernels, on the host (tests/fa2_model.h)

// Each row's lse in the kernels' units, log2 of sum_k 2^(S'_k) with S' = q k / sqrt(HS) *
// log2(e): (B, NH, T), in double.
static void ref_lse2(double *lse, const double *qkv, int B, int T, int NH, int HS) {
    const int C = NH * HS;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
                double mx = -INFINITY, sum = 0.0, *s = xmalloc((size_t)(t + 1) * sizeof(double));
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * HS;
                    s[j] = 0.0;
                    for (int d = 0; d < HS; d++) s[j] += q[d] * k[d];
                    s[j] /= sqrt((double)HS);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + t] = (mx + log(sum)) / log(2.0);
                free(s);
            }
}

// One shape through the model, fp32 (round 0: the tiling's math, to fp32 rounding) or rounding
// as the kernels do (1: within TOL_BF16_TC, as tests/gpu holds the device to), against the
// double references: out, lse (absolute, in units of max(1, |lse|)) and dqkv. fd: dqkv
// against finite differences of the double forward instead, on every element (FD_ALL) or on
// fd sampled ones. A defect (FA2_DEFECT_*) must make some of these fail (--fa2-defect).
static void test_fa2_model(int B, int T, int NH, int HS, int round, int fd, int defect) {
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    char tag[160], name[240];
    snprintf(tag, sizeof tag, "fa2 model%s B=%d T=%d NH=%d HS=%d%s", round ? " (bf16)" : "", B, T,
             NH, HS, defect ? " [defect]" : "");
    float *qkv = rand_f(nqkv, -2, 2), *dout = rand_f(nout, -1, 1);
    for (size_t i = 0; i < nqkv; i++) qkv[i] = bf16_to_f32(bf16_from_f32(qkv[i])); // bf16 q, k, v
    double *qkv_d = to_d(qkv, nqkv), *dout_d = to_d(dout, nout);
    double *out_d = xmalloc(nout * sizeof(double)), *dqkv_d = xmalloc(nqkv * sizeof(double));
    double *lse_d = xmalloc(nl * sizeof(double));
    ref_attention(out_d, NULL, qkv_d, B, T, NH, HS);
    ref_lse2(lse_d, qkv_d, B, T, NH, HS);
    size_t nfd = nqkv, *idx = NULL; // the elements checked against finite differences
    if (fd > 0 && (size_t)fd < nqkv) {
        nfd = (size_t)fd;
        idx = xmalloc(nfd * sizeof(size_t));
        for (size_t k = 0; k < nfd; k++)
            idx[k] = k * (nqkv / nfd) + (size_t)(k * 7919) % (nqkv / nfd);
    }
    if (fd) {
        attn_args a = {qkv_d, B, T, NH, HS};
        fd_grad(fwd_attn, &a, nout, dout_d, qkv_d, idx, nfd, dqkv_d);
    } else {
        ref_attention_bwd(dqkv_d, dout_d, qkv_d, B, T, NH, HS);
    }
    fa2_model md = {.round_bf16 = round, .defect = defect};
    float *out = xmalloc(nout * sizeof(float)), *lse = xmalloc(nl * sizeof(float));
    float *o = xmalloc(nout * sizeof(float)), *dqkv = xmalloc(nqkv * sizeof(float));
    fa2_model_fwd(&md, out, lse, qkv, B, T, NH, HS);
    for (size_t i = 0; i < nout; i++) o[i] = round ? bf16_to_f32(bf16_from_f32(out[i])) : out[i];
    fa2_model_bwd(&md, dqkv, dout, o, qkv, lse, B, T, NH, HS);
    const double tol = round ? TOL_BF16_TC : TOL_CHAIN;
    snprintf(name, sizeof name, "%s fwd out vs double", tag);
    check_rel(name, "", out, NULL, out_d, nout, tol);
    double e = 0.0;
    for (size_t i = 0; i < nl; i++)
        e = fmax(e, fabs(lse[i] - lse_d[i]) / fmax(1.0, fabs(lse_d[i])));
    snprintf(name, sizeof name, "%s fwd lse vs double", tag);
    TEST_CHECK(e <= TOL_CHAIN, name, "max error %.3g, tolerance %.1g", e, TOL_CHAIN);
    snprintf(name, sizeof name, "%s bwd dqkv vs %s", tag, fd ? "finite differences" : "double");
    if (fd) { // dqkv_d holds the nfd differences
        float *picked = xmalloc(nfd * sizeof(float));
        for (size_t k = 0; k < nfd; k++) picked[k] = dqkv[idx ? idx[k] : k];
        check_rel(name, "", picked, NULL, dqkv_d, nfd, TOL_FD);
        free(picked);
    } else {
        check_rel(name, "", dqkv, NULL, dqkv_d, nqkv, tol);
    }
    // The products the kernels issue: 2 per 16 x 16 block of the causal triangle forward (S,
    // P V), 7 backward (S and dP in each pass, dS K, P^T dO, dS^T Q).
    snprintf(name, sizeof name, "%s products: backward 7, forward 2 per block", tag);
    TEST_CHECK(2 * md.bwd_products == 7 * md.fwd_products, name, "forward %lld, backward %lld",
               md.fwd_products, md.bwd_products);
    free(qkv), free(dout), free(qkv_d), free(dout_d), free(out_d), free(dqkv_d), free(lse_d);
    free(out), free(lse), free(o), free(dqkv), free(idx);
}

// Every FA2 head size; T below, at and across the 64-row tiles (partial last tiles, a tile
// whose warps lie partly and wholly past T).
static const int FA2_SHAPES[][4] = {{1, 1, 1, 64},    {2, 37, 2, 64},  {1, 64, 1, 80},
                                    {1, 150, 2, 80},  {1, 100, 2, 96}, {2, 129, 1, 96},
                                    {1, 200, 1, 128}, {1, 64, 2, 128}, {1, 113, 1, 128}};

static void test_fa2_models(int defect) {
    for (size_t i = 0; i < sizeof FA2_SHAPES / sizeof FA2_SHAPES[0]; i++)
        for (int round = 0; round < 2; round++) {
            const int *d = FA2_SHAPES[i];
            test_fa2_model(d[0], d[1], d[2], d[3], round, 0, defect);
        }
    test_fa2_model(1, 20, 1, 64, 0, FD_ALL, defect);
    test_fa2_model(1, 70, 1, 80, 0, 400, defect);
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

// The fp32 forms of the typed ops, as the bench times them.
static void mm_fwd(backend *b, float *out, const float *inp, const float *w, const float *bias,
                   int N, int IC, int OC) {
    backend_matmul_fwd(b, out, NULL, operand_fp32(inp), operand_fp32(w), bias, N, IC, OC);
}
static void mm_bwd(backend *b, float *dinp, float *dw, float *db, const float *dout,
                   const float *inp, const float *w, int N, int IC, int OC) {
    backend_matmul_bwd(b, dinp, dw, db, operand_fp32(dout), operand_fp32(inp), operand_fp32(w),
                       NULL, N, IC, OC);
}
static void att_fwd(backend *b, float *out, void *state, const float *qkv, int B, int T, int NH,
                    int HS) {
    backend_attention_fwd(b, out, state, operand_fp32(qkv), B, T, NH, NH, HS, 0.0f);
}
// (O: the dout buffer stands in for it; the CPU does not read it.)
static void att_bwd(backend *b, float *dqkv, const float *dout, const float *qkv, const void *state,
                    int B, int T, int NH, int HS) {
    backend_attention_bwd(b, dqkv, dout, operand_fp32(qkv), operand_fp32(dout), state, B, T, NH, NH,
                          HS, 0.0f);
}

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
        BENCH_TIME(s_tiled, 30, mm_fwd(b, Cm, A, W, NULL, N, C, 4 * C));                           \
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
    float *state = b->alloc(b, attn_state_bytes(b->attn_state, B, T, NH));
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
          mm_fwd(b, qkv, ln, qkvw, qkvb, N, C, 3 * C));
    BENCH("matmul_bwd qkv", 15, L, 2 * mm * 3 * C, 1,
          mm_bwd(b, dx, dqkvw, dqkvb, dqkv, ln, qkvw, N, C, 3 * C));
    BENCH("attention_fwd", 15, L, attf, 2, att_fwd(b, att, state, qkv, B, T, NH, HS));
    BENCH("attention_bwd", 15, L, 2 * attf, 2, att_bwd(b, dqkv, datt, qkv, state, B, T, NH, HS));
    BENCH("matmul_fwd attproj 768->768", 15, L, mm * C, 1,
          mm_fwd(b, x, att, projw, projb, N, C, C));
    BENCH("matmul_bwd attproj", 15, L, 2 * mm * C, 1,
          mm_bwd(b, datt, dprojw, dprojb, dx, att, projw, N, C, C));
    BENCH("residual_fwd", 31, 2 * L, 0, 0, b->residual_fwd(b, x, x, ln, (size_t)N * C));
    BENCH("matmul_fwd fc 768->3072", 15, L, mm * 4 * C, 1, mm_fwd(b, h, ln, fcw, fcb, N, C, 4 * C));
    BENCH("matmul_bwd fc", 15, L, 2 * mm * 4 * C, 1,
          mm_bwd(b, dx, dfcw, dfcb, dh, ln, fcw, N, C, 4 * C));
    BENCH("gelu_fwd", 31, L, 0, 0, b->gelu_fwd(b, hg, h, (size_t)N * 4 * C));
    BENCH("gelu_bwd", 31, L, 0, 0, b->gelu_bwd(b, dh, h, dh, (size_t)N * 4 * C));
    BENCH("matmul_fwd fcproj 3072->768", 15, L, mm * 4 * C, 1,
          mm_fwd(b, x, hg, fcpw, fcpb, N, 4 * C, C));
    BENCH("matmul_bwd fcproj", 15, L, 2 * mm * 4 * C, 1,
          mm_bwd(b, dh, dfcpw, dfcpb, dx, hg, fcpw, N, 4 * C, C));
    BENCH("matmul_fwd lm_head 768->50304", 5, 1, mm * V, 1,
          mm_fwd(b, logits, ln, wte, NULL, N, C, V));
    BENCH("xent max+sumexp+loss", 9, 1, 0, 0, {
        b->xent_max(b, rowmax, logits, N, V, 0, Vv);
        b->xent_sumexp(b, sumexp, tgt, logits, rowmax, tokens, N, V, 0, Vv);
        b->xent_loss(b, losses, rowmax, sumexp, tgt, N);
    });
    BENCH("xent_bwd", 9, 1, 0, 0,
          b->xent_bwd(b, logits, rowmax, sumexp, tokens, 1.0f / N, N, V, 0, Vv));
    BENCH("matmul_bwd lm_head", 5, 1, 2 * mm * V, 1,
          mm_bwd(b, ln, dwte, NULL, logits, ln, wte, N, C, V));
    b->free(b, logits);
    b->free(b, dwte);
    float *pp = bench_buf(b, P), *pg = bench_buf(b, P), *pm = b->alloc(b, P * 4),
          *pv = b->alloc(b, P * 4);
    volatile double sink = 0.0;
    BENCH("sumsq (all params)", 5, 1, 0, 0, sink += b->sumsq(b, pg, P));
    BENCH("scale (all params)", 5, 1, 0, 0, b->scale(b, pg, 1.0f, P));
    BENCH("adamw (all params)", 5, 1, 0, 0, b->adamw(b, pp, pg, pm, pv, P, &OPS_BENCH_ADAMW, NULL));
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
        else printf("%-30s %10.3f %8d %12.2f\n", r->name, r->ms, r->per_step, step);
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
        mm_fwd(b, qkv, ln, qkvw, qkvb, N, C, 3 * C);
        att_fwd(b, att, state, qkv, B, T, NH, HS);
        mm_fwd(b, dx, att, projw, projb, N, C, C);
        b->residual_fwd(b, x, x, dx, (size_t)N * C);
        b->layernorm_fwd(b, ln, mean, rstd, x, lnw, lnb, N, C);
        mm_fwd(b, h, ln, fcw, fcb, N, C, 4 * C);
        b->gelu_fwd(b, hg, h, (size_t)N * 4 * C);
        mm_fwd(b, dx, hg, fcpw, fcpb, N, 4 * C, C);
        b->residual_fwd(b, x, x, dx, (size_t)N * C);
        mm_bwd(b, dh, dfcpw, dfcpb, dx, hg, fcpw, N, 4 * C, C);
        b->gelu_bwd(b, dh, h, dh, (size_t)N * 4 * C);
        mm_bwd(b, ln, dfcw, dfcb, dh, ln, fcw, N, C, 4 * C);
        b->layernorm_bwd(b, dx, dlnw, dlnb, ln, x, lnw, mean, rstd, N, C);
        mm_bwd(b, datt, dprojw, dprojb, dx, att, projw, N, C, C);
        att_bwd(b, dqkv, datt, qkv, state, B, T, NH, HS);
        mm_bwd(b, ln, dqkvw, dqkvb, dqkv, ln, qkvw, N, C, 3 * C);
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
        float *cs = b->alloc(b, attn_state_bytes(b->attn_state, cb, ct, cnh));
        for (int pol = CPU_ATTN_HEADS; pol <= CPU_ATTN_INNER; pol++) {
            ctx->attn_policy = (cpu_attn_policy)pol;
            double sf, sb;
            BENCH_TIME(sf, 15, att_fwd(b, co, cs, cq, cb, ct, cnh, chs));
            BENCH_TIME(sb, 15, att_bwd(b, cdq, co, cq, cs, cb, ct, cnh, chs));
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

int main(int argc, char **argv) {
    backend_cpu_prepare_process(argv, 0); // the OpenBLAS kernels trident itself runs with
    log_init();
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench(argc > 2 ? atoi(argv[2]) : 2);
    if (argc > 2 && !strcmp(argv[1], "--fa2-defect")) { // the model's checks with a defect
        test_fa2_models(atoi(argv[2]));
        TEST_EXIT();
    }
    // OpenMP over the heads, and the heads in turn with the GEMMs and rows split, each on 1, 2
    // and 3 threads
    backend *bs[6];
    char tags[6][32];
    const char *tag_of[6];
    for (int i = 0; i < 6; i++) {
        const cpu_attn_policy policy = i < 3 ? CPU_ATTN_HEADS : CPU_ATTN_INNER;
        TRI_ASSERT(backend_cpu_create(&bs[i], i % 3 + 1) == TRI_OK);
        ((cpu_ctx *)bs[i]->ctx)->attn_policy = policy;
        snprintf(tags[i], sizeof tags[i], " %s t%d", policy_name(policy), i % 3 + 1);
        tag_of[i] = tags[i];
    }
    for (size_t i = 0; i < N_OP_CASES; i++)
        if (OP_CASES[i].op == &OP_ATTENTION && !(OP_CASES[i].flags & CASE_TWIN_ONLY))
            op_case_check_ref(&OP_CASES[i], i, bs, tag_of, 6);
    for (int i = 0; i < 3; i++) {
        backend *b = bs[i];
        snprintf(test_tag, sizeof test_tag, " t%d", i + 1);
        test_attention_state(b, 2, 7, 3, 4, CPU_ATTN_HEADS);
        test_attention_state(b, 2, 7, 3, 4, CPU_ATTN_INNER);
        test_attention_state(b, 1, 64, 2, 8, CPU_ATTN_AUTO);
        test_attention_state(b, 1, 150, 2, 8, CPU_ATTN_HEADS); // three row blocks, the last partial
        test_attention_state(b, 1, 150, 2, 8, CPU_ATTN_INNER);
    }
    for (int i = 0; i < 6; i++) bs[i]->destroy(bs[i]);
    test_fa2_models(FA2_DEFECT_NONE);
    TEST_EXIT();
}
