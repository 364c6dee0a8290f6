// op_families_xent16.h: the op family of the fused bf16 classifier (backend.h xent_stats16,
// xent_rescale, xent_bwd16), included by tests/op_cases.h after op_families.h.
//
// xent16: d = {N, Vp_local, vocab_start, V_valid} as xent's (op_families.h), on bf16 logits:
// xent_stats16 (one pass: the row maximum, the sum of exp and the target logit), then where
// the rank has real columns xent_loss and xent_bwd16, which turns the logits into their bf16
// gradient in place (dloss = 1 / N); and xent_rescale of N random sums from random local
// maxima to larger global ones (row 0 a zero sum, row 1 a rank without real columns: -inf
// maxima and a 0 sum, which must stay 0). Against the double reference: the statistics,
// the loss, and the gradient to one bf16 unit. CASE_XENT_EXTREME shapes the rows against the
// online maximum: rows 4k a ramp whose maximum is always the latest column (a rescale at
// every step), 4k + 1 -inf in every third column and a huge logit (1e4: exp overflows
// unless the maximum is subtracted) at the last real one, 4k + 2 a jump of +30 at the last
// real column (the maximum changes once, late), 4k + 3 as drawn.

#define CASE_XENT_EXTREME (1u << 5)

enum { X16_TGT, X16_LOGITS, X16_MAX, X16_SUM, X16_TL, X16_LOSS, X16_SUM2, X16_LMAX, X16_GMAX };

static double as_bf16(double v) { return bf16_to_f32(bf16_from_f32((float)v)); }

// The extreme rows' logits (their targets never on a -inf or the huge column).
static void x16_extreme(double *l, int *tg, size_t N, size_t Vp, int real) {
    for (size_t n = 0; n < N && real >= 4; n++) {
        double *row = l + n * Vp;
        const int last = real - 1;
        switch (n % 4) {
        case 0:
            for (int j = 0; j < real; j++) row[j] = as_bf16(-8.0 + 16.0 * j / real);
            break;
        case 1:
            for (int j = 0; j < real; j += 3) row[j] = -INFINITY;
            row[last] = 1e4; // bf16 holds 9984 + ...: as_bf16 below
            row[last] = as_bf16(row[last]);
            if (tg[n] % 3 == 0 || tg[n] == last) tg[n] = 1; // a finite, ordinary column
            break;
        case 2: row[last] = as_bf16(row[last] + 30.0); break;
        default: break;
        }
    }
}

static void x16_declare(op_inst *c) {
    const op_case *r = c->row;
    const size_t N = r->d[0], Vp = r->d[1];
    const int real = xent_real(r), vs = r->d[2];
    snprintf(c->name, sizeof c->name, "xent16%s N=%zu Vp_local=%zu vocab_start=%d V_valid=%d",
             r->flags & CASE_XENT_EXTREME ? " extreme" : "", N, Vp, vs, r->d[3]);
    case_tensor *tg = inst_add(c, X16_TGT, TENSOR("targets", ROLE_IN, ELEM_I32, N));
    for (size_t n = 0; n < N; n++) tg->val[n] = (int)((rnd() + 1.0) * 0.5 * r->d[3]) % r->d[3];
    tg->val[N - 1] = r->d[3] - 1; // the last real column
    case_tensor *l = inst_add(c, X16_LOGITS,
                              TENSOR("bwd dlogits16 (in place of the bf16 logits)",
                                     real ? ROLE_INOUT : ROLE_IN, ELEM_BF16, N * Vp, .lo = -8,
                                     .hi = 8, .grad = 1, .sample = 1));
    for (size_t i = 0; i < N * Vp; i++)
        if ((int)(i % Vp) >= real) l->val[i] = 50.0;
    if (r->flags & CASE_XENT_EXTREME) { // targets local to the rank's columns, as ints
        int *t = inst_ints(tg);
        for (size_t n = 0; n < N; n++) t[n] -= vs;
        x16_extreme(l->val, t, N, Vp, real);
        for (size_t n = 0; n < N; n++) tg->val[n] = t[n] + vs;
        free(t);
    }
    inst_add(c, X16_MAX, TENSOR("rowmax", ROLE_OUT, ELEM_F32, N, .tol = 0.0, .tol_cpu = 0.0));
    inst_add(
        c, X16_SUM,
        TENSOR("sumexp (online)", ROLE_OUT, ELEM_F32, N, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    inst_add(c, X16_TL, TENSOR("target_logit", ROLE_OUT, ELEM_F32, N, .tol = 0.0, .tol_cpu = 0.0));
    if (real)
        inst_add(c, X16_LOSS,
                 TENSOR("losses", ROLE_OUT, ELEM_F32, N, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    else inst_skip(c, X16_LOSS);
    case_tensor *s2 = inst_add(c, X16_SUM2,
                               TENSOR("rescaled sumexp", ROLE_INOUT, ELEM_F32, N, .lo = 0.5,
                                      .hi = 2, .tol = TOL_FEW, .tol_cpu = TOL_FEW));
    case_tensor *lm = inst_add(c, X16_LMAX,
                               TENSOR("local max", ROLE_IN, ELEM_F32, N, .lo = -8, .hi = 8));
    case_tensor *gm = inst_add(c, X16_GMAX,
                               TENSOR("global max", ROLE_IN, ELEM_F32, N, .lo = 0, .hi = 4));
    for (size_t n = 0; n < N; n++) gm->val[n] = (double)(float)(lm->val[n] + gm->val[n]);
    s2->val[0] = 0.0;
    if (N > 1) s2->val[1] = 0.0, lm->val[1] = -INFINITY, gm->val[1] = -INFINITY;
}

static void x16_run(backend *b, const op_inst *c, void *const *p) {
    const op_case *r = c->row;
    const int N = r->d[0], Vp = r->d[1], vs = r->d[2], V = r->d[3];
    b->xent_stats16(b, p[X16_MAX], p[X16_SUM], p[X16_TL], p[X16_LOGITS], p[X16_TGT], N, Vp, vs, V);
    b->xent_rescale(b, p[X16_SUM2], p[X16_LMAX], p[X16_GMAX], N);
    if (!xent_real(r)) return;
    b->xent_loss(b, p[X16_LOSS], p[X16_MAX], p[X16_SUM], p[X16_TL], N);
    b->xent_bwd16(b, p[X16_LOGITS], p[X16_MAX], p[X16_SUM], p[X16_TGT], 1.0f / (float)N, N, Vp, vs,
                  V);
}

static void x16_reference(op_inst *c) {
    const op_case *r = c->row;
    const int N = r->d[0], Vp = r->d[1], vs = r->d[2], V = r->d[3], real = xent_real(r);
    case_tensor *t = c->t;
    const double *l = t[X16_LOGITS].val;
    int *tg = inst_ints(&t[X16_TGT]);
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < real; j++) mx = fmax(mx, l[(size_t)n * Vp + j]);
        for (int j = 0; j < real; j++) s += exp(l[(size_t)n * Vp + j] - mx);
        const int own = tg[n] - vs;
        t[X16_MAX].ref[n] = mx, t[X16_SUM].ref[n] = s;
        t[X16_TL].ref[n] = own >= 0 && own < real ? l[(size_t)n * Vp + own] : 0.0;
        const double s2 = t[X16_SUM2].val[n];
        t[X16_SUM2].ref[n] = s2 == 0.0 ? 0.0 : s2 * exp(t[X16_LMAX].val[n] - t[X16_GMAX].val[n]);
    }
    if (real) {
        ref_xent(t[X16_LOSS].ref, l, tg, N, Vp, vs, V);
        double *g = xmalloc(t[X16_LOGITS].n * sizeof(double));
        ref_xent_bwd(g, l, tg, N, Vp, vs, V, 1.0f / (float)N);
        ref_pick(&t[X16_LOGITS], g);
        free(g);
    }
    free(tg);
}

// The gradient of a padded column is exactly +0 in bf16.
static void x16_check(const op_inst *c, double *const *got, const char *tag) {
    const int N = c->row->d[0], Vp = c->row->d[1], real = xent_real(c->row);
    if (!real) return;
    int zero = 1;
    for (int n = 0; n < N; n++)
        for (int j = real; j < Vp; j++) zero &= got[X16_LOGITS][(size_t)n * Vp + j] == 0.0;
    char name[200];
    snprintf(name, sizeof name, "%s xent_bwd16 padded columns 0%s", c->name, tag);
    TEST_CHECK(zero, name, "nonzero gradient in a padded column");
}

static const op_family OP_XENT16 = {x16_declare, x16_run, x16_reference, x16_check};
