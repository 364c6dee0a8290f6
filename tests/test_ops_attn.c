// test_ops_attn.c: the CPU backend's causal attention (both threading policies) and the
// vocab-parallel cross-entropy against the double-precision references and finite
// differences of tests/ops_ref.h, whose header says why the tolerances are what they are;
// and the --bench timing table of every op. The other ops are tested in tests/test_ops.c.
//
//   build/tests/test_ops_attn       the tests, on backends of 1, 2 and 3 threads
//   build/tests/test_ops_attn --bench [threads]
//                                   a timing table at GPT-2 124M sizes (not a test)
#include "compute/backend.h"
#include "compute/backend_cpu_internal.h" // attention policy and cblas, for --bench and coverage
#include "ops_ref.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------
// Attention

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
    TRI_ASSERT(attn_state_bytes(b->attn_state, B, T, NH) == nP * sizeof(float));
    float *d_qkv = dev_f(b, qkv, nqkv), *d_out = dev_f(b, NULL, nout);
    float *junkP = rand_f(nP, 5, 6); // state reused from an earlier micro-batch
    float *d_P = dev_f(b, junkP, nP);
    backend_attention_fwd(b, d_out, d_P, operand_fp32(d_qkv), B, T, NH, HS);
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
    backend_attention_fwd(b, d_out, d_P, operand_fp32(d_qkv), B, T, NH, HS);
    float *out2 = host_of(b, d_out, nout);
    int same_before = !memcmp(out, out2, (size_t)t0 * C * sizeof(float));
    int changed_at = memcmp(out + (size_t)t0 * C, out2 + (size_t)t0 * C, (size_t)C * sizeof(float));
    char cname[200];
    snprintf(cname, sizeof cname, "%s causal%s", tag, test_tag);
    TEST_CHECK(same_before && changed_at, cname, "outputs before t0=%d %s; output at t0 %s", t0,
               same_before ? "same" : "CHANGED", changed_at ? "changed" : "UNCHANGED");
    b->copy_to_device(b, d_qkv, qkv, nqkv * sizeof(float));
    backend_attention_fwd(b, d_out, d_P, operand_fp32(d_qkv), B, T, NH, HS);

    size_t n = nfd ? nfd : nqkv;
    size_t *idx = xmalloc(n * sizeof(size_t));
    for (size_t k = 0; k < n; k++) idx[k] = nfd ? (size_t)((rnd() + 1.0) * 0.5 * nqkv) % nqkv : k;
    double *Rd = to_d(R, nout), *fd = xmalloc(n * sizeof(double));
    fd_grad(fwd_attn, &a, nout, Rd, a.qkv, idx, n, fd);
    float *junk = rand_f(nqkv, 100, 200);
    float *d_dqkv = dev_f(b, junk, nqkv), *d_R = dev_f(b, R, nout);
    backend_attention_bwd(b, d_dqkv, d_R, operand_fp32(d_qkv), d_P, B, T, NH, HS);
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
        BENCH_TIME(s_tiled, 30, backend_matmul_fwd(b, Cm, NULL, operand_fp32(A), operand_fp32(W), NULL, N, C, 4 * C));                    \
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
          backend_matmul_fwd(b, qkv, NULL, operand_fp32(ln), operand_fp32(qkvw), qkvb, N, C, 3 * C));
    BENCH("matmul_bwd qkv", 15, L, 2 * mm * 3 * C, 1,
          backend_matmul_bwd(b, dx, dqkvw, dqkvb, operand_fp32(dqkv), operand_fp32(ln), operand_fp32(qkvw), NULL, N, C, 3 * C));
    BENCH("attention_fwd", 15, L, attf, 2, backend_attention_fwd(b, att, state, operand_fp32(qkv), B, T, NH, HS));
    BENCH("attention_bwd", 15, L, 2 * attf, 2,
          backend_attention_bwd(b, dqkv, datt, operand_fp32(qkv), state, B, T, NH, HS));
    BENCH("matmul_fwd attproj 768->768", 15, L, mm * C, 1,
          backend_matmul_fwd(b, x, NULL, operand_fp32(att), operand_fp32(projw), projb, N, C, C));
    BENCH("matmul_bwd attproj", 15, L, 2 * mm * C, 1,
          backend_matmul_bwd(b, datt, dprojw, dprojb, operand_fp32(dx), operand_fp32(att), operand_fp32(projw), NULL, N, C, C));
    BENCH("residual_fwd", 31, 2 * L, 0, 0, b->residual_fwd(b, x, x, ln, (size_t)N * C));
    BENCH("matmul_fwd fc 768->3072", 15, L, mm * 4 * C, 1,
          backend_matmul_fwd(b, h, NULL, operand_fp32(ln), operand_fp32(fcw), fcb, N, C, 4 * C));
    BENCH("matmul_bwd fc", 15, L, 2 * mm * 4 * C, 1,
          backend_matmul_bwd(b, dx, dfcw, dfcb, operand_fp32(dh), operand_fp32(ln), operand_fp32(fcw), NULL, N, C, 4 * C));
    BENCH("gelu_fwd", 31, L, 0, 0, b->gelu_fwd(b, hg, h, (size_t)N * 4 * C));
    BENCH("gelu_bwd", 31, L, 0, 0, b->gelu_bwd(b, dh, h, dh, (size_t)N * 4 * C));
    BENCH("matmul_fwd fcproj 3072->768", 15, L, mm * 4 * C, 1,
          backend_matmul_fwd(b, x, NULL, operand_fp32(hg), operand_fp32(fcpw), fcpb, N, 4 * C, C));
    BENCH("matmul_bwd fcproj", 15, L, 2 * mm * 4 * C, 1,
          backend_matmul_bwd(b, dh, dfcpw, dfcpb, operand_fp32(dx), operand_fp32(hg), operand_fp32(fcpw), NULL, N, 4 * C, C));
    BENCH("matmul_fwd lm_head 768->50304", 5, 1, mm * V, 1,
          backend_matmul_fwd(b, logits, NULL, operand_fp32(ln), operand_fp32(wte), NULL, N, C, V));
    BENCH("xent max+sumexp+loss", 9, 1, 0, 0, {
        b->xent_max(b, rowmax, logits, N, V, 0, Vv);
        b->xent_sumexp(b, sumexp, tgt, logits, rowmax, tokens, N, V, 0, Vv);
        b->xent_loss(b, losses, rowmax, sumexp, tgt, N);
    });
    BENCH("xent_bwd", 9, 1, 0, 0,
          b->xent_bwd(b, logits, rowmax, sumexp, tokens, 1.0f / N, N, V, 0, Vv));
    BENCH("matmul_bwd lm_head", 5, 1, 2 * mm * V, 1,
          backend_matmul_bwd(b, ln, dwte, NULL, operand_fp32(logits), operand_fp32(ln), operand_fp32(wte), NULL, N, C, V));
    b->free(b, logits);
    b->free(b, dwte);
    float *pp = bench_buf(b, P), *pg = bench_buf(b, P), *pm = b->alloc(b, P * 4),
          *pv = b->alloc(b, P * 4);
    volatile double sink = 0.0;
    BENCH("sumsq (all params)", 5, 1, 0, 0, sink += b->sumsq(b, pg, P));
    BENCH("scale (all params)", 5, 1, 0, 0, b->scale(b, pg, 1.0f, P));
    BENCH("adamw (all params)", 5, 1, 0, 0,
          b->adamw(b, pp, pg, pm, pv, P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 3, NULL));
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
        backend_matmul_fwd(b, qkv, NULL, operand_fp32(ln), operand_fp32(qkvw), qkvb, N, C, 3 * C);
        backend_attention_fwd(b, att, state, operand_fp32(qkv), B, T, NH, HS);
        backend_matmul_fwd(b, dx, NULL, operand_fp32(att), operand_fp32(projw), projb, N, C, C);
        b->residual_fwd(b, x, x, dx, (size_t)N * C);
        b->layernorm_fwd(b, ln, mean, rstd, x, lnw, lnb, N, C);
        backend_matmul_fwd(b, h, NULL, operand_fp32(ln), operand_fp32(fcw), fcb, N, C, 4 * C);
        b->gelu_fwd(b, hg, h, (size_t)N * 4 * C);
        backend_matmul_fwd(b, dx, NULL, operand_fp32(hg), operand_fp32(fcpw), fcpb, N, 4 * C, C);
        b->residual_fwd(b, x, x, dx, (size_t)N * C);
        backend_matmul_bwd(b, dh, dfcpw, dfcpb, operand_fp32(dx), operand_fp32(hg), operand_fp32(fcpw), NULL, N, 4 * C, C);
        b->gelu_bwd(b, dh, h, dh, (size_t)N * 4 * C);
        backend_matmul_bwd(b, ln, dfcw, dfcb, operand_fp32(dh), operand_fp32(ln), operand_fp32(fcw), NULL, N, C, 4 * C);
        b->layernorm_bwd(b, dx, dlnw, dlnb, ln, x, lnw, mean, rstd, N, C);
        backend_matmul_bwd(b, datt, dprojw, dprojb, operand_fp32(dx), operand_fp32(att), operand_fp32(projw), NULL, N, C, C);
        backend_attention_bwd(b, dqkv, datt, operand_fp32(qkv), state, B, T, NH, HS);
        backend_matmul_bwd(b, ln, dqkvw, dqkvb, operand_fp32(dqkv), operand_fp32(ln), operand_fp32(qkvw), NULL, N, C, 3 * C);
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
            BENCH_TIME(sf, 15, backend_attention_fwd(b, co, cs, operand_fp32(cq), cb, ct, cnh, chs));
            BENCH_TIME(sb, 15, backend_attention_bwd(b, cdq, co, operand_fp32(cq), cs, cb, ct, cnh, chs));
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
    test_attention(b, 2, 7, 3, 4, CPU_ATTN_HEADS, 0);
    test_attention(b, 2, 7, 3, 4, CPU_ATTN_INNER, 0);
    test_attention(b, 1, 64, 2, 8, CPU_ATTN_AUTO, 600);
    test_attention(b, 1, 150, 2, 8, CPU_ATTN_HEADS, 600); // three row blocks, the last partial
    test_attention(b, 1, 150, 2, 8, CPU_ATTN_INNER, 600);
    test_xent(b, 37);
    test_xent(b, 20);
    b->destroy(b);
}

int main(int argc, char **argv) {
    backend_cpu_prepare_process(argv); // the OpenBLAS kernels trident itself runs with
    log_init();
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench(argc > 2 ? atoi(argv[2]) : 2);
    for (int threads = 1; threads <= 3; threads++) run_all(threads);
    TEST_EXIT();
}
