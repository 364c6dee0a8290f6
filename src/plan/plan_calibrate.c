// plan_calibrate.c: `trident plan CONFIG --calibrate`: measures what the planner's time model
// needs on this machine, at the shapes CONFIG uses, through the compute backend's own entries
// (backend_matmul_fwd/_bwd, backend_attention_*, the table's pointwise ops and adamw), with the
// threads the trainer gives one rank, and writes a device profile (plan_profile.h).
//
// Each op is run once to warm up (first touch, OpenBLAS's buffers), then repeated until
// CAL_MIN_S has passed, the median repetition counting (a training step's median is what
// the prediction stands beside, and the fastest repetition of a tight loop was up to 25%
// faster than the ops inside a step); an op whose warm-up alone took CAL_SLOW_S is timed by
// it (the LM head
// of a GPT-2-sized model), which bounds the whole to about 20 s for configs/bench-m.yaml on
// two cores.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/launch.h"
#include "comm/mesh.h"
#include "compute/backend_select.h"
#include "plan/plan_profile.h"

#define CAL_MIN_S 0.15
#define CAL_SLOW_S 0.5
#define CAL_MAX_REPS 50
#define CAL_ROUNDS 3                     // each compute measurement, taken in turn (measure_rounds)
#define CAL_ADAM_ELEMS ((size_t)8 << 20) // 8 Mi elements: 128 MB of state, past the caches

typedef struct {
    backend *be;
    void **bufs; // every allocation, freed at the end
    int n_bufs, cap_bufs;
    uint64_t rng;
} cal;

static float *cal_alloc(cal *c, size_t n) {
    float *p = c->be->alloc(c->be, n * sizeof(float) + 64);
    if (!p) tri_out_of_host_memory(n * sizeof(float), "a calibration buffer");
    if (c->n_bufs == c->cap_bufs) {
        c->cap_bufs = c->cap_bufs ? 2 * c->cap_bufs : 64;
        void **grown = xcalloc((size_t)c->cap_bufs, sizeof(void *));
        if (c->n_bufs) memcpy(grown, c->bufs, (size_t)c->n_bufs * sizeof(void *));
        free(c->bufs);
        c->bufs = grown;
    }
    c->bufs[c->n_bufs++] = p;
    // Small random values: no denormals, no zeros a kernel could skip.
    float *host = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        c->rng = c->rng * 6364136223846793005ULL + 1442695040888963407ULL;
        host[i] = (float)((double)(c->rng >> 40) / (double)(1 << 24) - 0.5) * 0.1f;
    }
    c->be->copy_to_device(c->be, p, host, n * sizeof(float));
    free(host);
    return p;
}

// Frees every buffer and the backend.
static void cal_close(cal *c) {
    while (c->n_bufs > 0) c->be->free(c->be, c->bufs[--c->n_bufs]);
    free(c->bufs);
    if (c->be) c->be->destroy(c->be);
}

static uint16_t *cal_alloc16(cal *c, size_t n) {
    float *src = cal_alloc(c, n);
    uint16_t *p = (uint16_t *)cal_alloc(c, (n + 1) / 2);
    c->be->to_bf16(c->be, p, src, n);
    return p;
}

typedef void (*op_fn)(backend *be, void *ctx);

// Seconds per call of fn(ctx): see the file's comment.
static double time_op(backend *be, op_fn fn, void *ctx) {
    double t0 = time_now_s();
    fn(be, ctx);
    be->synchronize(be);
    const double warm = time_now_s() - t0;
    if (warm >= CAL_SLOW_S) return warm;
    double ts[CAL_MAX_REPS], total = 0;
    int reps = 0;
    for (; reps < CAL_MAX_REPS && total < CAL_MIN_S; reps++) {
        t0 = time_now_s();
        fn(be, ctx);
        be->synchronize(be);
        ts[reps] = time_now_s() - t0;
        total += ts[reps];
    }
    return tri_median(ts, reps);
}

// ---- matmuls ----

// One matmul's operands and outputs.
typedef struct {
    operand inp, w, dout;
    float *out, *dinp, *dweight;
} mm_set;

// A training step streams its weights and activations through the caches (a layer's working
// set is evicted by the next layer's before it comes back), so a matmul is timed on cold
// operands: CAL_COLD_BYTES of operand sets, each call taking the next (on bench-pipe with 2
// threads this moved the prediction from 477 to 534 ms, its run's step being 712 ms).
#define CAL_COLD_BYTES ((size_t)64 << 20)
#define CAL_MAX_SETS 16

typedef struct {
    int m, n, k;
    mm_set sets[CAL_MAX_SETS];
    int n_sets, next;
} mm_ctx;

static void mm_run(backend *be, void *p) {
    mm_ctx *x = p;
    const mm_set *o = &x->sets[x->next];
    x->next = (x->next + 1) % x->n_sets;
    backend_matmul_fwd(be, o->out, NULL, o->inp, o->w, NULL, x->m, x->k, x->n);
    backend_matmul_bwd(be, o->dinp, o->dweight, NULL, o->dout, o->inp, o->w, NULL, x->m, x->k,
                       x->n);
}

// The shapes of a config: rows (micro_batch x seq_len), d_model, and this tp rank's widths.
typedef struct {
    int rows, B, T, C, Cl, C3, F, Vpl, NH, NKV, HS;
} shapes;

static shapes shapes_of(const run_config *cfg) {
    const model_config *mc = &cfg->model;
    const int tp = cfg->parallel.tp;
    shapes s = {.B = cfg->train.micro_batch, .T = mc->seq_len, .C = mc->d_model};
    s.rows = s.B * s.T;
    s.HS = mc->d_model / mc->n_head;
    s.NH = mc->n_head / tp;
    s.NKV = (model_arch_is_llama(mc) ? mc->n_kv_head : mc->n_head) / tp;
    if (s.NKV < 1) s.NKV = 1;
    s.Cl = s.NH * s.HS;
    s.C3 = (s.NH + 2 * s.NKV) * s.HS;
    // The MLP's inner width: GPT-2's 4C, Llama's ffn_hidden (its gate and up are two such).
    s.F = (model_arch_is_llama(mc) ? mc->ffn_hidden : 4 * mc->d_model) / tp;
    s.Vpl = config_padded_vocab(cfg) / tp;
    return s;
}

static void measure_point(cal *c, plan_profile *pr, int m, int n, int k, tri_dtype dt) {
    if (pr->n_points == PLAN_PROFILE_MAX_POINTS || m < 1 || n < 1 || k < 1) return;
    mm_ctx x = {.m = m, .n = n, .k = k};
    const size_t mk = (size_t)m * k, nk = (size_t)n * k, mn = (size_t)m * n;
    const size_t set_bytes = 4 * 2 * (mk + nk + mn);
    x.n_sets = (int)((CAL_COLD_BYTES + set_bytes - 1) / set_bytes);
    if (x.n_sets > CAL_MAX_SETS) x.n_sets = CAL_MAX_SETS;
    const int first = c->n_bufs;
    for (int i = 0; i < x.n_sets; i++) {
        mm_set *o = &x.sets[i];
        if (dt == DTYPE_BF16) {
            o->inp = operand_bf16(cal_alloc16(c, mk));
            o->w = operand_bf16(cal_alloc16(c, nk));
            o->dout = operand_bf16(cal_alloc16(c, mn));
        } else {
            o->inp = operand_fp32(cal_alloc(c, mk));
            o->w = operand_fp32(cal_alloc(c, nk));
            o->dout = operand_fp32(cal_alloc(c, mn));
        }
        o->out = cal_alloc(c, mn);
        o->dinp = cal_alloc(c, mk);
        o->dweight = cal_alloc(c, nk);
    }
    const double t = time_op(c->be, mm_run, &x);
    plan_matmul_point *p = &pr->points[pr->n_points++];
    *p = (plan_matmul_point){.m = m, .n = n, .k = k, .dtype = dt, .rate = 6.0 * m * n * k / t};
    // The buffers go now: the next point's may be as large.
    while (c->n_bufs > first) c->be->free(c->be, c->bufs[--c->n_bufs]);
}

static double min3(double a, double b, double d) {
    return a < b ? (a < d ? a : d) : (b < d ? b : d);
}

// Least squares in log space of log r = log R + log s - log(s + h) over the fp32 points:
// for a given h the best log R is the mean residual; h by a log-spaced scan, then a finer one
// around the best.
static void fit_gemm(const plan_profile *pr, double *R, double *h_out) {
    double best_h = 0, best_sse = INFINITY, best_logr = 0;
    double lo = log(0.01), hi = log(1e5);
    for (int pass = 0; pass < 2; pass++) {
        const double step = (hi - lo) / 400;
        for (int i = 0; i <= 400; i++) {
            const double h = exp(lo + step * i);
            double sum = 0, sse = 0;
            int n = 0;
            for (int j = 0; j < pr->n_points; j++) {
                const plan_matmul_point *p = &pr->points[j];
                if (p->dtype != DTYPE_FP32) continue;
                const double s = min3(p->m, p->n, p->k);
                sum += log(p->rate) - log(s) + log(s + h), n++;
            }
            const double logr = sum / n;
            for (int j = 0; j < pr->n_points; j++) {
                const plan_matmul_point *p = &pr->points[j];
                if (p->dtype != DTYPE_FP32) continue;
                const double s = min3(p->m, p->n, p->k);
                const double e = log(p->rate) - (logr + log(s) - log(s + h));
                sse += e * e;
            }
            if (sse < best_sse) best_sse = sse, best_h = h, best_logr = logr;
        }
        lo = log(best_h) - 0.1, hi = log(best_h) + 0.1;
    }
    *R = exp(best_logr), *h_out = best_h;
}

static void measure_matmuls(cal *c, plan_profile *pr, const shapes *s) {
    const int r = s->rows;
    measure_point(c, pr, r, s->C3, s->C, DTYPE_FP32);  // qkv
    measure_point(c, pr, r, s->C, s->Cl, DTYPE_FP32);  // attention projection
    measure_point(c, pr, r, s->F, s->C, DTYPE_FP32);   // MLP up
    measure_point(c, pr, r, s->C, s->F, DTYPE_FP32);   // MLP down
    measure_point(c, pr, r, s->Vpl, s->C, DTYPE_FP32); // LM head
    // The small-dimension fall-off: few rows, few output columns, a short inner dimension.
    static const int small[] = {4, 16, 64, 256};
    for (int i = 0; i < 4; i++) {
        if (small[i] < r) measure_point(c, pr, small[i], s->C, s->C, DTYPE_FP32);
        if (small[i] < s->C) measure_point(c, pr, r, small[i], s->C, DTYPE_FP32);
        if (small[i] < s->C && i % 2) measure_point(c, pr, r, s->C, small[i], DTYPE_FP32);
    }
    // bf16 operands at the two largest layer shapes, against fp32's there.
    measure_point(c, pr, r, s->C3, s->C, DTYPE_BF16);
    measure_point(c, pr, r, s->F, s->C, DTYPE_BF16);
}

// The matmul model of pr's points: R and gemm_half fitted to the fp32 points, the bf16 rate
// as the bf16 points' ratio to fp32's at the same two shapes (points 0 and 2).
static void fit_matmuls(plan_profile *pr) {
    fit_gemm(pr, &pr->matmul_rate, &pr->dev.gemm_half);
    double r16 = 0, r32 = pr->points[0].rate + pr->points[2].rate;
    for (int i = 0; i < pr->n_points; i++)
        if (pr->points[i].dtype == DTYPE_BF16) r16 += pr->points[i].rate;
    pr->dev.matmul_rate_bf16 = pr->matmul_rate * (r16 > 0 && r32 > 0 ? r16 / r32 : 1);
}

// ---- attention, elementwise passes, AdamW ----

typedef struct {
    const shapes *s;
    float *qkv, *out, *dout, *dqkv;
    void *state;
} attn_ctx;

static void attn_run(backend *be, void *p) {
    attn_ctx *a = p;
    const shapes *s = a->s;
    backend_attention_fwd(be, a->out, a->state, operand_fp32(a->qkv), s->B, s->T, s->NH, s->NKV,
                          s->HS, 0.0f);
    backend_attention_bwd(be, a->dqkv, a->dout, operand_fp32(a->qkv), operand_fp32(a->out),
                          a->state, s->B, s->T, s->NH, s->NKV, s->HS, 0.0f);
}

typedef struct {
    const shapes *s;
    float *x, *y, *z, *mean, *rstd, *w, *b, *dw, *db, *f1, *f2;
} elem_ctx;

// The elementwise passes of a layer: bytes moved per call (elem_bytes) in elem_run's order.
static double elem_bytes(const shapes *s) {
    const double nc = (double)s->rows * s->C, nf = (double)s->rows * s->F;
    return 4 * (2 * nc + 3 * nc + 2 * nf + 3 * nf + 4 * nc);
}

static void elem_run(backend *be, void *p) {
    elem_ctx *e = p;
    const shapes *s = e->s;
    const size_t nc = (size_t)s->rows * s->C, nf = (size_t)s->rows * s->F;
    be->layernorm_fwd(be, e->y, e->mean, e->rstd, e->x, e->w, e->b, s->rows, s->C);
    be->residual_fwd(be, e->z, e->x, e->y, nc);
    be->gelu_fwd(be, e->f2, e->f1, nf);
    be->gelu_bwd(be, e->f2, e->f1, e->f2, nf);
    be->layernorm_bwd(be, e->z, NULL, NULL, e->y, e->x, e->w, e->mean, e->rstd, s->rows, s->C);
}

typedef struct {
    float *p, *g, *m, *v;
    size_t n;
} adam_ctx;

static void adam_run(backend *be, void *ctx) {
    adam_ctx *a = ctx;
    const adamw_step st = {.lr = 1e-4f,
                           .beta1 = 0.9f,
                           .beta2 = 0.95f,
                           .eps = 1e-8f,
                           .weight_decay = 0.1f,
                           .grad_scale = 1.0f,
                           .t = 1};
    be->adamw(be, a->p, a->g, a->m, a->v, a->n, &st, NULL);
}

// ---- one layer's F, B and W (the split backward, model.h's model_backward_b / _w) ----

typedef struct {
    const shapes *s;
    float *x, *ln, *mean, *rstd, *qkv, *att, *proj, *x2, *ln2, *mean2, *rstd2, *fcpre, *fcout,
        *proj2, *x3;
    float *lnw, *lnb, *wqkv, *bqkv, *wproj, *bproj, *wfc, *bfc, *wproj2, *bproj2;
    float *dx3, *dfc, *dln2, *dx2, *datt, *dqkv, *dln, *dx;
    float *dlnw, *dlnb, *dwqkv, *dbqkv, *dwproj, *dbproj, *dwfc, *dbfc, *dwproj2, *dbproj2;
    void *state;
} layer_ctx;

static void layer_f(backend *be, void *p) {
    layer_ctx *l = p;
    const shapes *s = l->s;
    const int N = s->rows, C = s->C;
    be->layernorm_fwd(be, l->ln, l->mean, l->rstd, l->x, l->lnw, l->lnb, N, C);
    backend_matmul_fwd(be, l->qkv, NULL, operand_fp32(l->ln), operand_fp32(l->wqkv), l->bqkv, N, C,
                       s->C3);
    backend_attention_fwd(be, l->att, l->state, operand_fp32(l->qkv), s->B, s->T, s->NH, s->NKV,
                          s->HS, 0.0f);
    backend_matmul_fwd(be, l->proj, NULL, operand_fp32(l->att), operand_fp32(l->wproj), l->bproj, N,
                       s->Cl, C);
    be->residual_fwd(be, l->x2, l->x, l->proj, (size_t)N * C);
    be->layernorm_fwd(be, l->ln2, l->mean2, l->rstd2, l->x2, l->lnw, l->lnb, N, C);
    backend_matmul_fwd(be, l->fcout, l->fcpre, operand_fp32(l->ln2), operand_fp32(l->wfc), l->bfc,
                       N, C, s->F);
    backend_matmul_fwd(be, l->proj2, NULL, operand_fp32(l->fcout), operand_fp32(l->wproj2),
                       l->bproj2, N, s->F, C);
    be->residual_fwd(be, l->x3, l->x2, l->proj2, (size_t)N * C);
}

static void layer_b(backend *be, void *p) {
    layer_ctx *l = p;
    const shapes *s = l->s;
    const int N = s->rows, C = s->C;
    backend_matmul_bwd(be, l->dfc, NULL, NULL, operand_fp32(l->dx3), operand_fp32(l->fcout),
                       operand_fp32(l->wproj2), l->fcpre, N, s->F, C);
    backend_matmul_bwd(be, l->dln2, NULL, NULL, operand_fp32(l->dfc), operand_fp32(l->ln2),
                       operand_fp32(l->wfc), NULL, N, C, s->F);
    be->layernorm_bwd(be, l->dx2, NULL, NULL, l->dln2, l->x2, l->lnw, l->mean2, l->rstd2, N, C);
    backend_matmul_bwd(be, l->datt, NULL, NULL, operand_fp32(l->dx2), operand_fp32(l->att),
                       operand_fp32(l->wproj), NULL, N, s->Cl, C);
    backend_attention_bwd(be, l->dqkv, l->datt, operand_fp32(l->qkv), operand_fp32(l->att),
                          l->state, s->B, s->T, s->NH, s->NKV, s->HS, 0.0f);
    backend_matmul_bwd(be, l->dln, NULL, NULL, operand_fp32(l->dqkv), operand_fp32(l->ln),
                       operand_fp32(l->wqkv), NULL, N, C, s->C3);
    be->layernorm_bwd(be, l->dx, NULL, NULL, l->dln, l->x, l->lnw, l->mean, l->rstd, N, C);
}

static void layer_w(backend *be, void *p) {
    layer_ctx *l = p;
    const shapes *s = l->s;
    const int N = s->rows, C = s->C;
    backend_matmul_bwd(be, NULL, l->dwproj2, l->dbproj2, operand_fp32(l->dx3),
                       operand_fp32(l->fcout), operand_fp32(l->wproj2), NULL, N, s->F, C);
    backend_matmul_bwd(be, NULL, l->dwfc, l->dbfc, operand_fp32(l->dfc), operand_fp32(l->ln2),
                       operand_fp32(l->wfc), NULL, N, C, s->F);
    be->layernorm_bwd(be, NULL, l->dlnw, l->dlnb, l->dln2, l->x2, l->lnw, l->mean2, l->rstd2, N, C);
    backend_matmul_bwd(be, NULL, l->dwproj, l->dbproj, operand_fp32(l->dx2), operand_fp32(l->att),
                       operand_fp32(l->wproj), NULL, N, s->Cl, C);
    backend_matmul_bwd(be, NULL, l->dwqkv, l->dbqkv, operand_fp32(l->dqkv), operand_fp32(l->ln),
                       operand_fp32(l->wqkv), NULL, N, C, s->C3);
    be->layernorm_bwd(be, NULL, l->dlnw, l->dlnb, l->dln, l->x, l->lnw, l->mean, l->rstd, N, C);
}

static void measure_layer(cal *c, plan_profile *pr, const shapes *s) {
    const size_t N = (size_t)s->rows, C = (size_t)s->C, F = (size_t)s->F;
    const int first = c->n_bufs; // its buffers go at the end (the rounds measure it again)
    layer_ctx l = {.s = s};
    float **nc[] = {&l.x,  &l.ln,  &l.proj, &l.x2,  &l.ln2, &l.proj2,
                    &l.x3, &l.dx3, &l.dln2, &l.dx2, &l.dln, &l.dx};
    for (size_t i = 0; i < sizeof nc / sizeof *nc; i++) *nc[i] = cal_alloc(c, N * C);
    float **rowv[] = {&l.mean, &l.rstd, &l.mean2, &l.rstd2};
    for (size_t i = 0; i < 4; i++) *rowv[i] = cal_alloc(c, N);
    float **cv[] = {&l.lnw, &l.lnb, &l.bproj, &l.bproj2, &l.dlnw, &l.dlnb, &l.dbproj, &l.dbproj2};
    for (size_t i = 0; i < sizeof cv / sizeof *cv; i++) *cv[i] = cal_alloc(c, C);
    l.qkv = cal_alloc(c, N * s->C3), l.dqkv = cal_alloc(c, N * s->C3);
    l.att = cal_alloc(c, N * s->Cl), l.datt = cal_alloc(c, N * s->Cl);
    l.fcpre = cal_alloc(c, N * F), l.fcout = cal_alloc(c, N * F), l.dfc = cal_alloc(c, N * F);
    l.wqkv = cal_alloc(c, C * s->C3), l.dwqkv = cal_alloc(c, C * s->C3);
    l.bqkv = cal_alloc(c, s->C3), l.dbqkv = cal_alloc(c, s->C3);
    l.wproj = cal_alloc(c, C * s->Cl), l.dwproj = cal_alloc(c, C * s->Cl);
    l.wfc = cal_alloc(c, C * F), l.dwfc = cal_alloc(c, C * F), l.bfc = cal_alloc(c, F);
    l.dbfc = cal_alloc(c, F);
    l.wproj2 = cal_alloc(c, C * F), l.dwproj2 = cal_alloc(c, C * F);
    l.state = cal_alloc(c, attn_state_bytes(c->be->attn_state, s->B, s->T, s->NH) / 4 + 1);
    // The attention forward fills the state the backward reads.
    layer_f(c->be, &l);
    const double tf = time_op(c->be, layer_f, &l);
    const double tb = time_op(c->be, layer_b, &l);
    const double tw = time_op(c->be, layer_w, &l);
    pr->dev.fbw[0] = 1, pr->dev.fbw[1] = tb / tf, pr->dev.fbw[2] = tw / tf;
    pr->dev.fbw_measured = 1;

    // Attention alone, on the same buffers.
    attn_ctx a = {
        .s = s, .qkv = l.qkv, .out = l.att, .dout = l.datt, .dqkv = l.dqkv, .state = l.state};
    const double ta = time_op(c->be, attn_run, &a);
    pr->dev.attn_rate = 12.0 * (double)N * s->T * s->Cl / ta;
    // The elementwise passes: x, y, z (N, C), f1, f2 (N, F).
    elem_ctx e = {.s = s,
                  .x = l.x,
                  .y = l.ln,
                  .z = l.x2,
                  .mean = l.mean,
                  .rstd = l.rstd,
                  .w = l.lnw,
                  .b = l.lnb,
                  .f1 = l.fcpre,
                  .f2 = l.fcout};
    pr->dev.elem_bw = elem_bytes(s) / time_op(c->be, elem_run, &e);
    while (c->n_bufs > first) c->be->free(c->be, c->bufs[--c->n_bufs]);
}

static void measure_adam(cal *c, plan_profile *pr) {
    adam_ctx a = {.n = CAL_ADAM_ELEMS};
    a.p = cal_alloc(c, a.n), a.g = cal_alloc(c, a.n), a.m = cal_alloc(c, a.n);
    a.v = cal_alloc(c, a.n);
    // fp32 AdamW reads p, g, m, v and writes p, m, v: 28 bytes per element, as the planner's
    // optimizer time counts them.
    pr->dev.mem_bw = 28.0 * (double)a.n / time_op(c->be, adam_run, &a);
    for (int i = 0; i < 4; i++) c->be->free(c->be, c->bufs[--c->n_bufs]);
}

// ---- rounds ----

// Every compute measurement CAL_ROUNDS times, in turn, and each rate the median of its rounds
// (then the matmul fit): a machine whose speed drifts for a second (a virtual machine's host
// busy elsewhere: this VM's 2-core throughput swings by 30% between 20 ms windows) moves one
// round, not the profile.
static void measure_rounds(cal *c, plan_profile *pr, const shapes *s) {
    plan_profile *r = xcalloc(CAL_ROUNDS, sizeof *r);
    for (int k = 0; k < CAL_ROUNDS; k++) {
        r[k].dev = pr->dev;
        measure_matmuls(c, &r[k], s);
        measure_layer(c, &r[k], s);
        measure_adam(c, &r[k]);
    }
    double v[CAL_ROUNDS];
#define CAL_MEDIAN(field)                                                                          \
    do {                                                                                           \
        for (int k = 0; k < CAL_ROUNDS; k++) v[k] = r[k].field;                                    \
        pr->field = tri_median(v, CAL_ROUNDS);                                                     \
    } while (0)
    pr->n_points = r[0].n_points;
    for (int i = 0; i < pr->n_points; i++) {
        pr->points[i] = r[0].points[i];
        CAL_MEDIAN(points[i].rate);
    }
    CAL_MEDIAN(dev.attn_rate);
    CAL_MEDIAN(dev.elem_bw);
    CAL_MEDIAN(dev.mem_bw);
    for (int i = 1; i < 3; i++) CAL_MEDIAN(dev.fbw[i]);
#undef CAL_MEDIAN
    pr->dev.fbw[0] = 1, pr->dev.fbw_measured = 1;
    fit_matmuls(pr);
    free(r);
}

// ---- how the rates change with the threads (one rank) ----

// A thread_scaling point: the mean rate of the two largest layer matmuls (qkv, the MLP's up;
// measure_matmuls' points 0 and 2), attention and the elementwise passes of `pr`. With
// `fitted`, the matmul rate is the fit's at those two shapes (R s / (s + gemm_half)), not the
// two measurements: the time model scales the fit's R by these points' ratios, so that a
// rank of t threads then runs those shapes at the rate measured with t threads, whatever
// noise moved the two measurements off the fit at the calibration's count (waking sleeping
// threads makes that noise: README "CPU threads").
static void scale_point_of(plan_calib *cb, int threads, const plan_profile *pr, int qkv, int up,
                           int fitted) {
    const int i = cb->n_scale++;
    cb->scale_threads[i] = threads;
    double mm = 0;
    for (int k = 0; k < 2; k++) {
        const plan_matmul_point *p = &pr->points[k ? up : qkv];
        const double small = min3(p->m, p->n, p->k);
        mm += 0.5 * (fitted ? pr->matmul_rate * small / (small + pr->dev.gemm_half) : p->rate);
    }
    cb->scale_mm[i] = mm;
    cb->scale_attn[i] = pr->dev.attn_rate, cb->scale_elem[i] = pr->dev.elem_bw;
}

// The same at fewer threads (1, 2, 4, ... below `threads`), each through a backend of its
// own: a rank of a layout with fewer threads than the calibration's (one process of a
// node's cores against one of several) runs at these rates, which need not be linear in the
// threads (memory bandwidth, shared caches). Only on one rank: several ranks measuring at
// once would share the cores. Returns TRI_OK, or the backend's error.
static tri_status measure_scaling(const run_config *cfg, const shapes *s, int threads,
                                  plan_profile *pr) {
    plan_calib *cb = &pr->dev.calib;
    cb->n_scale = 0;
    for (int t = 1; t < threads && cb->n_scale < PLAN_SCALE_POINTS - 1; t *= 2) {
        cal c = {.rng = 20240601};
        plan_profile *sub = xcalloc(1, sizeof *sub);
        tri_status rc = backend_create_for(cfg->system.backend, 0, t, &c.be);
        if (rc == TRI_OK) { // in rounds, as measure_rounds: each rate the median of its rounds
            double v[4][CAL_ROUNDS];
            for (int k = 0; k < CAL_ROUNDS; k++) {
                sub->n_points = 0;
                measure_point(&c, sub, s->rows, s->C3, s->C, DTYPE_FP32);
                measure_point(&c, sub, s->rows, s->F, s->C, DTYPE_FP32);
                measure_layer(&c, sub, s);
                v[0][k] = sub->points[0].rate, v[1][k] = sub->points[1].rate;
                v[2][k] = sub->dev.attn_rate, v[3][k] = sub->dev.elem_bw;
            }
            sub->points[0].rate = tri_median(v[0], CAL_ROUNDS);
            sub->points[1].rate = tri_median(v[1], CAL_ROUNDS);
            sub->dev.attn_rate = tri_median(v[2], CAL_ROUNDS);
            sub->dev.elem_bw = tri_median(v[3], CAL_ROUNDS);
            scale_point_of(cb, t, sub, 0, 1, 0);
        }
        cal_close(&c);
        free(sub);
        if (rc != TRI_OK) return rc;
    }
    scale_point_of(cb, threads, pr, 0, 2, 1);
    return TRI_OK;
}

tri_status plan_calibrate(const run_config *cfg, const char *out) {
    const double t0 = time_now_s();
    launch_info li;
    TRI_CHECK(launch_init(&li));
    log_set_rank(li.rank, li.rank, 0, 0);
    // Every rank of this host measures at once, with the threads the trainer gives one rank
    // of that many: the compute rates of a run that fills the cores.
    char why[160];
    const int threads = backend_cpu_fit_threads(cfg->system.threads, li.local_size, why,
                                                sizeof why);
    cal c = {.rng = 20240601};
    comm *cm = NULL;
    plan_profile *pr = xcalloc(1, sizeof *pr);
    tri_status rc = backend_create_for(cfg->system.backend, li.local_rank, threads, &c.be);
    if (rc != TRI_OK) goto done;
    if (c.be->device_name ? plan_device_for_gpu(c.be->device_name, &pr->dev)
                          : plan_device_lookup("cpu", li.world, &pr->dev)) {
        LOG_ERROR("--calibrate: the GPU %s is not in the planner's device table",
                  c.be->device_name);
        LOG_HINT("the table has %s; calibrate on one of them", plan_device_names());
        rc = TRI_ERR_CONFIG;
        goto done;
    }
    if (li.world > 1) { // one group of every rank: its tp group (comm.h)
        const mesh m = {.tp = li.world, .dp = 1, .pp = 1};
        rc = comm_create_for(&cm, &m, cfg->system.comm, &li, c.be, cfg->system.comm_timeout_s);
        if (rc != TRI_OK) goto done;
    }
    plan_device *d = &pr->dev;
    if (!c.be->device_name) { // the table's nominal core, times the threads of a rank
        d->peak_fp32 *= threads, d->peak_bf16 *= threads, d->peak_tf32 *= threads;
    }
    const shapes s = shapes_of(cfg);
    if (li.rank == 0)
        LOG_INFO("calibrating %s with %d thread%s (%s) on %d rank%s at the shapes of %s: rows %d, "
                 "d_model %d, widths %d/%d/%d, vocabulary %d per rank",
                 d->name, c.be->threads, c.be->threads == 1 ? "" : "s", why, li.world,
                 li.world == 1 ? "" : "s", cfg->source_path, s.rows, s.C, s.C3, s.F, s.Cl, s.Vpl);
    measure_rounds(&c, pr, &s);
    plan_calib *cb = &d->calib;
    cb->calibrated = 1;
    cb->threads = c.be->threads > 0 ? c.be->threads : 1;
    cb->ranks = 1;
    cb->intra_measured = 0;
    if (li.world == 1 && cb->threads > 1) {
        rc = measure_scaling(cfg, &s, cb->threads, pr);
        if (rc != TRI_OK) goto done;
    }
    if (cm) { // the ranks finish their compute at different times: start the comm together
        rc = comm_barrier(cm, COMM_GROUP_TP);
        if (rc == TRI_OK) rc = plan_calibrate_comm(cfg, cm, c.be, li.rank, li.world, d);
        if (rc != TRI_OK) goto done;
    }
    if (li.rank != 0) goto done;
    if (gethostname(cb->host, sizeof cb->host)) snprintf(cb->host, sizeof cb->host, "unknown");
    cb->host[sizeof cb->host - 1] = 0;
    for (char *ch = cb->host; *ch; ch++)
        if ((unsigned char)*ch < 0x20 || *ch == '"' || *ch == '\\') *ch = '_';
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(cb->date, sizeof cb->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    plan_omp_wait(cb->omp_wait, sizeof cb->omp_wait);
    pr->config = cfg->source_path;
    pr->seconds = time_now_s() - t0;
    char path[512];
    if (out) snprintf(path, sizeof path, "%s", out);
    else plan_profile_default_path(d->name, path, sizeof path);
    rc = plan_profile_write(pr, path);
    if (rc == TRI_OK) {
        printf("calibrated %s on %s with %d threads in %.1f s: matmul %.4g GFLOP/s (half at %.0f), "
               "attention %.4g GFLOP/s, elementwise %.3g GB/s, AdamW %.3g GB/s, F:B:W "
               "%.3g:%.3g:%.3g\n",
               d->name, cb->host, cb->threads, pr->seconds, pr->matmul_rate / 1e9, d->gemm_half,
               d->attn_rate / 1e9, d->elem_bw / 1e9, d->mem_bw / 1e9, d->fbw[0], d->fbw[1],
               d->fbw[2]);
        for (int i = 0; i + 1 < cb->n_scale; i++)
            printf("at %d thread%s: matmul x%.2f, attention x%.2f, elementwise x%.2f of %d "
                   "threads' rates\n",
                   (int)cb->scale_threads[i], cb->scale_threads[i] == 1 ? "" : "s",
                   cb->scale_mm[i] / cb->scale_mm[cb->n_scale - 1],
                   cb->scale_attn[i] / cb->scale_attn[cb->n_scale - 1],
                   cb->scale_elem[i] / cb->scale_elem[cb->n_scale - 1], cb->threads);
        if (cm)
            printf("communication over %d ranks of this host: %.3g GB/s, %.1f us per call "
                   "(all ops); between nodes: the table's estimate\n",
                   li.world, d->intra_bw / 1e9, d->latency_intra * 1e6);
        else
            printf("communication: not measured (one rank; launch with mpirun -np 2 or more "
                   "to time it)\n");
        printf("wrote %s (use it with --device %s)\n", path, path);
    }
done:
    comm_destroy(cm);
    cal_close(&c);
    free(pr);
    launch_finalize(&li);
    return rc;
}
