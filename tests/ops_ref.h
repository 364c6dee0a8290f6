// ops_ref.h: what the op tests share (tests/op_cases.h and the tests that run its table,
// tests/test_ops.c, tests/test_ops_attn.c, tests/gpu/test_gpu_ops.c): random inputs, backend
// buffer helpers, the relative-error check, central finite differences, and the ops'
// references written plainly here in double precision: the forwards, against which the
// backward passes are checked by finite differences (L = sum(out * R) for a random R, so
// dL/dout = R), and the backwards' analytic gradients, for shapes where finite differences
// (two forwards per element) would take too long. tests/op_cases.h says why each tolerance
// is what it is. Functions are OPS_REF_FN so that each test uses the ones it needs.
#pragma once
#include "compute/backend.h"
#include "base/bf16.h"
#include "testlib.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Each test binary uses only some of these functions: those it leaves unused must not warn
// (-Werror), and the compiler inlines them as it would any static function.
#define OPS_REF_FN static __attribute__((unused))

// ---------------------------------------------------------------------------------------
// Helpers

// The AdamW step the benchmarks time (GPT-2's settings, step 3).
static const adamw_step OPS_BENCH_ADAMW __attribute__((unused)) = {.lr = 1e-4f,
                                                                   .beta1 = 0.9f,
                                                                   .beta2 = 0.95f,
                                                                   .eps = 1e-8f,
                                                                   .weight_decay = 0.1f,
                                                                   .grad_scale = 1.0f,
                                                                   .t = 3};

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
OPS_REF_FN double rnd(void) { // uniform in [-1, 1), splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

// A random host array of n floats in [lo, hi), and its exact double copy.
OPS_REF_FN float *rand_f(size_t n, double lo, double hi) {
    float *x = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * 0.5 * (rnd() + 1.0));
    return x;
}
OPS_REF_FN double *to_d(const float *x, size_t n) {
    double *d = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
OPS_REF_FN float *dev_f(backend *b, const float *host, size_t n) {
    float *d = b->alloc(b, n * sizeof(float));
    TRI_ASSERT(d);
    if (host) b->copy_to_device(b, d, host, n * sizeof(float));
    return d;
}
OPS_REF_FN int *dev_i(backend *b, const int *host, size_t n) {
    int *d = b->alloc(b, n * sizeof(int));
    TRI_ASSERT(d);
    b->copy_to_device(b, d, host, n * sizeof(int));
    return d;
}
// n random floats in [lo, hi) on the device.
OPS_REF_FN float *dev_rand(backend *b, size_t n, double lo, double hi) {
    float *h = rand_f(n, lo, hi), *d = dev_f(b, h, n);
    free(h);
    return d;
}
// The bf16 rounding of n host floats, on the device (the bf16 matmuls' operands); the
// floats are replaced by the values the bf16 copy holds, so references see those.
OPS_REF_FN uint16_t *dev_bf16(backend *b, float *host, size_t n) {
    uint16_t *h16 = xmalloc(n * sizeof(uint16_t) + 1), *d = b->alloc(b, n * sizeof(uint16_t) + 1);
    TRI_ASSERT(d);
    for (size_t i = 0; i < n; i++) {
        h16[i] = bf16_from_f32(host[i]);
        host[i] = bf16_to_f32(h16[i]);
    }
    b->copy_to_device(b, d, h16, n * sizeof(uint16_t));
    free(h16);
    return d;
}
OPS_REF_FN float *host_of(backend *b, const float *d, size_t n) {
    float *h = xmalloc(n * sizeof(float));
    b->copy_to_host(b, h, d, n * sizeof(float));
    return h;
}
OPS_REF_FN double max_abs(const double *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}
// max |got - base - ref| / max |ref| (base: the pre-filled values of an accumulating op).
OPS_REF_FN double rel_err(const float *got, const float *base, const double *ref, size_t n) {
    double e = 0.0, m = max_abs(ref, n);
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i] - (base ? (double)base[i] : 0.0);
        e = fmax(e, fabs(g - ref[i]));
        if (g != g) e = INFINITY;
    }
    return e / (m > 0.0 ? m : 1.0);
}
OPS_REF_FN void check_rel(const char *name, const char *tag, const float *got, const float *base,
                          const double *ref, size_t n, double tol) {
    char full[320];
    snprintf(full, sizeof full, "%s%s%s", name, *tag ? " " : "", tag);
    double e = rel_err(got, base, ref, n);
    TEST_CHECK(e <= tol, full, "max error %.3g of max |ref| %.3g, tolerance %.1g", e,
               max_abs(ref, n), tol);
}

// Central finite differences of L = sum(forward(args) * R) with respect to x[idx[k]]
// (x belongs to args and is perturbed in place); idx NULL means every element.
typedef void (*ref_forward)(void *args, double *out);
OPS_REF_FN void fd_grad(ref_forward f, void *args, size_t nout, const double *R, double *x,
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

OPS_REF_FN void name_of(char *buf, size_t n, const char *what) {
    snprintf(buf, n, "%s%s", what, test_tag);
}

// ---------------------------------------------------------------------------------------
// Double-precision references

OPS_REF_FN void ref_matmul(double *out, const double *inp, const double *w, const double *bias,
                           int N, int IC, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < IC; i++) s += inp[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = s;
        }
}

OPS_REF_FN void ref_layernorm(double *out, double *mean, double *rstd, const double *inp,
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

OPS_REF_FN double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// out (B, T, NH*HS), P (B, NH, T, T) or NULL
OPS_REF_FN void ref_attention(double *out, double *P, const double *qkv, int B, int T, int NH,
                              int HS) {
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

OPS_REF_FN void ref_embedding(double *out, const int *tok, const double *wte, const double *wpe,
                              int B, int T, int C, int vocab_start, int V_local, int add_pos) {
    for (int i = 0; i < B * T; i++)
        for (int c = 0; c < C; c++) {
            int local = tok[i] - vocab_start;
            double e = local >= 0 && local < V_local ? wte[(size_t)local * C + c] : 0.0;
            out[(size_t)i * C + c] = e + (add_pos ? wpe[(size_t)(i % T) * C + c] : 0.0);
        }
}

// One rank's columns [vocab_start, vocab_start + Vp) of the logits (N, Vp), of which global
// columns < V_valid are real: losses (N) = log(sum of exp over the real columns) - the
// target's logit where this rank owns the target (what xent_loss computes from one rank's
// sums; with every column on one rank, the cross-entropy).
OPS_REF_FN void ref_xent(double *losses, const double *logits, const int *targets, int N, int Vp,
                         int vocab_start, int V_valid) {
    const int real = V_valid - vocab_start < Vp ? V_valid - vocab_start : Vp;
    for (int n = 0; n < N; n++) {
        const double *l = logits + (size_t)n * Vp;
        double mx = -INFINITY, s = 0.0;
        for (int c = 0; c < real; c++) mx = fmax(mx, l[c]);
        for (int c = 0; c < real; c++) s += exp(l[c] - mx);
        const int t = targets[n] - vocab_start;
        losses[n] = log(s) + mx - (t >= 0 && t < Vp ? l[t] : 0.0);
    }
}

// ---------------------------------------------------------------------------------------
// Analytic gradients in double precision (each backward op's formula written out plainly)

// gelu_tanh'(x)
OPS_REF_FN double ref_gelu_grad(double x) {
    const double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
    const double t = tanh(u), du = k * (1.0 + 3.0 * 0.044715 * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

// dinp (N, C), dw, db (C) of L = sum(layernorm(inp) * dout), written (not accumulated).
OPS_REF_FN void ref_layernorm_bwd(double *dinp, double *dw, double *db, const double *dout,
                                  const double *inp, const double *w, int N, int C) {
    memset(dw, 0, (size_t)C * sizeof(double));
    memset(db, 0, (size_t)C * sizeof(double));
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        double m = 0.0, v = 0.0, g = 0.0, gx = 0.0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        const double s = 1.0 / sqrt(v / C + 1e-5);
        for (int i = 0; i < C; i++) {
            g += dy[i] * w[i];
            gx += dy[i] * w[i] * (x[i] - m) * s;
        }
        for (int i = 0; i < C; i++) {
            const double xh = (x[i] - m) * s;
            dinp[(size_t)n * C + i] = s * (dy[i] * w[i] - g / C - xh * gx / C);
            dw[i] += dy[i] * xh;
            db[i] += dy[i];
        }
    }
}

// Grouped-query attention on the multi-head references: gqa (B, T, (NH + 2 NKV) HS), query
// head h reading kv head h / (NH / NKV), expanded into mha (B, T, 3 NH HS) with each kv head
// repeated for its group (Hugging Face's repeat_kv); and back, a multi-head gradient folded
// into the grouped layout, dk and dv summed over each group's query heads.
OPS_REF_FN void ref_gqa_expand(double *mha, const double *gqa, int B, int T, int NH, int NKV,
                               int HS) {
    const size_t C = (size_t)NH * HS, ld = (size_t)(NH + 2 * NKV) * HS;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int h = 0; h < NH; h++) {
            const size_t kv = (size_t)(h / (NH / NKV)) * HS, o = (size_t)h * HS;
            memcpy(mha + r * 3 * C + o, gqa + r * ld + o, HS * sizeof(double));
            memcpy(mha + r * 3 * C + C + o, gqa + r * ld + C + kv, HS * sizeof(double));
            memcpy(mha + r * 3 * C + 2 * C + o, gqa + r * ld + C + (size_t)NKV * HS + kv,
                   HS * sizeof(double));
        }
}
OPS_REF_FN void ref_gqa_fold(double *gqa, const double *mha, int B, int T, int NH, int NKV,
                             int HS) {
    const size_t C = (size_t)NH * HS, ld = (size_t)(NH + 2 * NKV) * HS;
    memset(gqa, 0, (size_t)B * T * ld * sizeof(double));
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int h = 0; h < NH; h++) {
            const size_t kv = (size_t)(h / (NH / NKV)) * HS, o = (size_t)h * HS;
            for (int d = 0; d < HS; d++) {
                gqa[r * ld + o + d] = mha[r * 3 * C + o + d];
                gqa[r * ld + C + kv + d] += mha[r * 3 * C + C + o + d];
                gqa[r * ld + C + (size_t)NKV * HS + kv + d] += mha[r * 3 * C + 2 * C + o + d];
            }
        }
}

// dqkv (B, T, 3*NH*HS) of L = sum(attention(qkv) * dout): with P the probabilities,
// dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = dS K / sqrt(HS), dK = dS^T Q / sqrt(HS),
// dV = P^T dO.
OPS_REF_FN void ref_attention_bwd(double *dqkv, const double *dout, const double *qkv, int B, int T,
                                  int NH, int HS) {
    const int C = NH * HS;
    const double scale = 1.0 / sqrt((double)HS);
    double *P = xmalloc((size_t)B * NH * T * T * sizeof(double));
    double *out = xmalloc((size_t)B * T * C * sizeof(double));
    double *dS = xmalloc((size_t)T * sizeof(double));
    ref_attention(out, P, qkv, B, T, NH, HS);
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(double));
#define AT_QKV(b, t, part, h) ((size_t)((b)*T + (t)) * 3 * C + (size_t)(part)*C + (size_t)(h)*HS)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *p = P + (((size_t)b * NH + h) * T + t) * T;
                const double *dO = dout + ((size_t)b * T + t) * C + (size_t)h * HS;
                double dot = 0.0;
                for (int j = 0; j <= t; j++) {
                    double dp = 0.0;
                    for (int d = 0; d < HS; d++) dp += dO[d] * qkv[AT_QKV(b, j, 2, h) + d];
                    dS[j] = dp;
                    dot += p[j] * dp;
                }
                for (int j = 0; j <= t; j++) {
                    const double ds = p[j] * (dS[j] - dot) * scale;
                    for (int d = 0; d < HS; d++) {
                        dqkv[AT_QKV(b, t, 0, h) + d] += ds * qkv[AT_QKV(b, j, 1, h) + d];
                        dqkv[AT_QKV(b, j, 1, h) + d] += ds * qkv[AT_QKV(b, t, 0, h) + d];
                        dqkv[AT_QKV(b, j, 2, h) + d] += p[j] * dO[d];
                    }
                }
            }
#undef AT_QKV
    free(P), free(out), free(dS);
}

// dwte (V_local, C), dwpe (T, C) of L = sum(embedding(...) * dout), written; dwpe only with
// add_pos (else left alone).
OPS_REF_FN void ref_embedding_bwd(double *dwte, double *dwpe, const double *dout, const int *tok,
                                  int B, int T, int C, int vocab_start, int V_local, int add_pos) {
    memset(dwte, 0, (size_t)V_local * C * sizeof(double));
    if (add_pos) memset(dwpe, 0, (size_t)T * C * sizeof(double));
    for (int i = 0; i < B * T; i++) {
        const int local = tok[i] - vocab_start;
        for (int c = 0; c < C; c++) {
            const double g = dout[(size_t)i * C + c];
            if (local >= 0 && local < V_local) dwte[(size_t)local * C + c] += g;
            if (add_pos) dwpe[(size_t)(i % T) * C + c] += g;
        }
    }
}

// dlogits (N, Vp) of L = dloss * sum(ref_xent's losses): dloss * (softmax - onehot(target))
// over the real columns, 0 over the padded ones.
OPS_REF_FN void ref_xent_bwd(double *dlogits, const double *logits, const int *targets, int N,
                             int Vp, int vocab_start, int V_valid, double dloss) {
    const int real = V_valid - vocab_start < Vp ? V_valid - vocab_start : Vp;
    for (int n = 0; n < N; n++) {
        const double *l = logits + (size_t)n * Vp;
        double *g = dlogits + (size_t)n * Vp, mx = -INFINITY, s = 0.0;
        for (int c = 0; c < real; c++) mx = fmax(mx, l[c]);
        for (int c = 0; c < real; c++) s += exp(l[c] - mx);
        for (int c = 0; c < Vp; c++)
            g[c] = c < real ? dloss * (exp(l[c] - mx) / s - (c == targets[n] - vocab_start)) : 0.0;
    }
}

// ---------------------------------------------------------------------------------------
// The references as ref_forward functions of one argument struct, for fd_grad.

typedef struct {
    double *inp, *w, *bias;
    int N, IC, OC;
} matmul_args;
OPS_REF_FN void fwd_matmul(void *a, double *out) {
    matmul_args *m = a;
    ref_matmul(out, m->inp, m->w, m->bias, m->N, m->IC, m->OC);
}

typedef struct {
    double *inp, *w, *bias;
    int N, C;
} ln_args;
OPS_REF_FN void fwd_ln(void *a, double *out) {
    ln_args *l = a;
    ref_layernorm(out, NULL, NULL, l->inp, l->w, l->bias, l->N, l->C);
}

typedef struct {
    double *x;
    size_t n;
} gelu_args;
OPS_REF_FN void fwd_gelu(void *a, double *out) {
    gelu_args *g = a;
    for (size_t i = 0; i < g->n; i++) out[i] = ref_gelu(g->x[i]);
}

typedef struct {
    const int *tok;
    double *wte, *wpe;
    int B, T, C, vocab_start, V_local, add_pos;
} emb_args;
OPS_REF_FN void fwd_emb(void *a, double *out) {
    emb_args *e = a;
    ref_embedding(out, e->tok, e->wte, e->wpe, e->B, e->T, e->C, e->vocab_start, e->V_local,
                  e->add_pos);
}

typedef struct {
    double *qkv;
    int B, T, NH, HS;
} attn_args;
OPS_REF_FN void fwd_attn(void *a, double *out) {
    attn_args *t = a;
    ref_attention(out, NULL, t->qkv, t->B, t->T, t->NH, t->HS);
}

typedef struct {
    double *logits;
    const int *targets;
    int N, Vp, vocab_start, V_valid;
} xent_args;
OPS_REF_FN void fwd_xent(void *a, double *out) {
    xent_args *x = a;
    ref_xent(out, x->logits, x->targets, x->N, x->Vp, x->vocab_start, x->V_valid);
}
