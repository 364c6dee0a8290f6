// op_families_optim.h: the optimizer's op families of tests/op_cases.h (sumsq, loss_sum,
// adamw), included there after op_families.h, whose helpers (TENSOR, operand_kind) they use.
#pragma once

// ---------------------------------------------------------------------------------------
// Reductions into doubles, d = {n}. sumsq: the value sumsq returns and sumsq_add's
// accumulator. loss_sum: two micro-batches' losses added into an accumulator.

enum { SS_X, SS_SUM, SS_ACC };

static void ss_declare(op_inst *c) {
    const size_t n = c->row->d[0];
    snprintf(c->name, sizeof c->name, "sumsq n=%zu", n);
    inst_add(c, SS_X, TENSOR("x", ROLE_IN, ELEM_F32, n, .lo = -1, .hi = 1));
    inst_add(c, SS_SUM, TENSOR("sumsq", ROLE_OUT, ELEM_F64, 1, .tol = 1e-12, .tol_cpu = 1e-10));
    inst_add(c, SS_ACC,
             TENSOR("sumsq_add", ROLE_ACC, ELEM_F64, 1, .lo = 0, .hi = 1, .tol = 1e-12,
                    .tol_cpu = 1e-10));
}
static void ss_run(backend *b, const op_inst *c, void *const *p) {
    const size_t n = c->row->d[0];
    const double s = b->sumsq(b, p[SS_X], n);
    b->copy_to_device(b, p[SS_SUM], &s, sizeof s);
    b->sumsq_add(b, p[SS_ACC], p[SS_X], n);
}
static void ss_reference(op_inst *c) {
    long double s = 0.0L;
    for (size_t i = 0; i < c->t[SS_X].n; i++)
        s += (long double)c->t[SS_X].val[i] * c->t[SS_X].val[i];
    c->t[SS_SUM].ref[0] = c->t[SS_ACC].ref[0] = (double)s;
}
// sumsq_add adds the very sum sumsq returns.
static void ss_check(const op_inst *c, double *const *got, const char *tag) {
    char name[200];
    snprintf(name, sizeof name, "%s sumsq_add = initial + sumsq (bitwise)%s", c->name, tag);
    TEST_CHECK(got[SS_ACC][0] == c->t[SS_ACC].val[0] + got[SS_SUM][0], name, "%.17g vs %.17g",
               got[SS_ACC][0], c->t[SS_ACC].val[0] + got[SS_SUM][0]);
}
static const op_family OP_SUMSQ = {ss_declare, ss_run, ss_reference, ss_check};

static void ls_declare(op_inst *c) {
    const size_t n = c->row->d[0];
    snprintf(c->name, sizeof c->name, "loss_sum n=%zu", n);
    inst_add(c, 0, TENSOR("losses", ROLE_IN, ELEM_F32, 2 * n, .lo = 0, .hi = 11));
    inst_add(
        c, 1,
        TENSOR("acc", ROLE_ACC, ELEM_F64, 1, .lo = 0, .hi = 1, .tol = 1e-12, .tol_cpu = 1e-12));
}
static void ls_run(backend *b, const op_inst *c, void *const *p) {
    const size_t n = c->row->d[0];
    b->loss_sum(b, p[1], p[0], n);
    b->loss_sum(b, p[1], (const float *)p[0] + n, n);
}
static void ls_reference(op_inst *c) {
    long double s = 0.0L;
    for (size_t i = 0; i < c->t[0].n; i++) s += c->t[0].val[i];
    c->t[1].ref[0] = (double)s;
}
static const op_family OP_LOSS_SUM = {ls_declare, ls_run, ls_reference, NULL};

// ---------------------------------------------------------------------------------------
// adamw: d = {n, t, steps}: `steps` updates from step t on (a gradient each), lr 1e-2,
// betas 0.9 / 0.95, eps 1e-8, weight decay 0.1, grad_scale 0.5; CASE_PARAM16: the bf16
// parameters written in the same pass. The parameter is checked by its change (|p| ~ 1
// would hide errors of the update in p's own rounding).

enum { AD_P, AD_G, AD_M, AD_V, AD_P16 };
#define AD_LR 1e-2f
#define AD_B1 0.9f
#define AD_B2 0.95f
#define AD_EPS 1e-8f
#define AD_WD 0.1f
#define AD_GS 0.5f

static void ad_declare(op_inst *c) {
    const op_case *r = c->row;
    const size_t n = r->d[0];
    snprintf(c->name, sizeof c->name, "adamw%s n=%zu t=%d steps=%d",
             r->flags & CASE_PARAM16 ? " bf16 out" : "", n, r->d[1], r->d[2]);
    inst_add(
        c, AD_P,
        TENSOR("param", ROLE_ACC, ELEM_F32, n, .lo = -1, .hi = 1, .tol = 2e-5, .tol_cpu = TOL_FEW));
    inst_add(c, AD_G, TENSOR("grad", ROLE_IN, ELEM_F32, n * r->d[2], .lo = -1, .hi = 1));
    inst_add(c, AD_M,
             TENSOR("m", ROLE_INOUT, ELEM_F32, n, .lo = -0.1, .hi = 0.1, .tol = TOL_CHAIN,
                    .tol_cpu = TOL_FEW));
    inst_add(c, AD_V,
             TENSOR("v", ROLE_INOUT, ELEM_F32, n, .lo = 0, .hi = 0.01, .tol = TOL_CHAIN,
                    .tol_cpu = TOL_FEW));
    if (r->flags & CASE_PARAM16) inst_add(c, AD_P16, TENSOR("param16", ROLE_OUT, ELEM_BF16, n));
    else inst_skip(c, AD_P16);
}

static void ad_run(backend *b, const op_inst *c, void *const *p) {
    const size_t n = c->row->d[0];
    for (int s = 0; s < c->row->d[2]; s++) {
        const adamw_step step = {.lr = AD_LR,
                                 .beta1 = AD_B1,
                                 .beta2 = AD_B2,
                                 .eps = AD_EPS,
                                 .weight_decay = AD_WD,
                                 .grad_scale = AD_GS,
                                 .t = c->row->d[1] + s};
        b->adamw(b, p[AD_P], (const float *)p[AD_G] + s * n, p[AD_M], p[AD_V], n, &step, p[AD_P16]);
    }
}

// The documented update in double: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p), g scaled by grad_scale.
static void ad_reference(op_inst *c) {
    const size_t n = c->row->d[0];
    case_tensor *t = c->t;
    for (size_t i = 0; i < n; i++) {
        double p = t[AD_P].val[i], m = t[AD_M].val[i], v = t[AD_V].val[i];
        for (int s = 0; s < c->row->d[2]; s++) {
            const int step = c->row->d[1] + s;
            const double g = t[AD_G].val[s * n + i] * AD_GS;
            m = AD_B1 * m + (1.0 - AD_B1) * g;
            v = AD_B2 * v + (1.0 - AD_B2) * g * g;
            const double mh = m / (1.0 - pow(AD_B1, step)), vh = v / (1.0 - pow(AD_B2, step));
            p -= AD_LR * (mh / (sqrt(vh) + AD_EPS) + AD_WD * p);
        }
        t[AD_P].ref[i] = p - t[AD_P].val[i], t[AD_M].ref[i] = m, t[AD_V].ref[i] = v;
        if (!t[AD_P16].absent) t[AD_P16].ref[i] = p;
    }
}

// param16 is the rounding of the backend's own fp32 result.
static void ad_check(const op_inst *c, double *const *got, const char *tag) {
    if (c->t[AD_P16].absent) return;
    size_t bad = 0;
    for (size_t i = 0; i < c->t[AD_P].n; i++)
        bad += bf16_from_f32((float)got[AD_P][i]) != bf16_from_f32((float)got[AD_P16][i]);
    char name[200];
    snprintf(name, sizeof name, "%s param16 = bf16(param)%s", c->name, tag);
    TEST_CHECK(!bad, name, "%zu of %zu differ", bad, c->t[AD_P].n);
}

static const op_family OP_ADAMW = {ad_declare, ad_run, ad_reference, ad_check};
