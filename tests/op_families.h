// op_families.h: the op families of tests/op_cases.h (included there, after its tolerances):
// for each op, the tensors of a case in the order of its slots, how the case runs on a
// backend, its double-precision reference (tests/ops_ref.h), and the op's promises that are
// no comparison with a reference. A family's comment says what the numbers of its rows' d
// are.
#pragma once

// A tensor of a case: its name, role, element kind and count, then any other fields.
#define TENSOR(nm, rl, kd, count, ...)                                                             \
    ((case_tensor){.name = (nm), .role = (rl), .kind = (kd), .n = (count), __VA_ARGS__})

static elem_kind operand_kind(const op_case *r) {
    return r->dtype == DTYPE_BF16 ? ELEM_BF16 : ELEM_F32;
}
static const char *dtype_tag(const op_case *r) { return r->dtype == DTYPE_BF16 ? " bf16" : ""; }

// ---------------------------------------------------------------------------------------
// matmul: d = {N, IC, OC, offset}. The forward, the backward, and (without GELU) the
// backward again with dinp NULL into a second dweight and dbias. offset misaligns the weight,
// the bias and their gradients by that many elements (cuBLASLt's fallbacks). Without
// CASE_BIAS the bias is NULL and dbias must stay untouched. CASE_GELU: pre = the GEMM, out =
// gelu(pre), and the backward of a layer whose input was gelu(gelu_pre).

enum {
    MM_INP,
    MM_W,
    MM_BIAS,
    MM_OUT,
    MM_PRE,
    MM_DOUT,
    MM_PRE2,
    MM_DINP,
    MM_DW,
    MM_DB,
    MM_DW2,
    MM_DB2
};

// A bias gradient summed over more than LONG_SUM_ROWS rows: TOL_LONG_SUM (op_cases.h says why).
static case_tensor long_sum(case_tensor t) {
    t.tol = t.tol_cpu = TOL_LONG_SUM;
    return t;
}

static void mm_declare(op_inst *c) {
    const op_case *r = c->row;
    const size_t N = r->d[0], IC = r->d[1], OC = r->d[2], off = r->d[3];
    const int bias = r->flags & CASE_BIAS, gelu = r->flags & CASE_GELU;
    const elem_kind ek = operand_kind(r);
    TRI_ASSERT(!(gelu && r->fd)); // gelu_pre is no function of the inputs: analytic only
    snprintf(c->name, sizeof c->name, "matmul%s%s N=%zu IC=%zu OC=%zu%s%s", gelu ? "+gelu" : "",
             dtype_tag(r), N, IC, OC, bias ? " bias" : "", off ? " unaligned" : "");
    inst_add(c, MM_INP, TENSOR("inp", ROLE_IN, ek, N * IC, .lo = -1, .hi = 1));
    inst_add(c, MM_W, TENSOR("weight", ROLE_IN, ek, OC * IC, .offset = off, .lo = -1, .hi = 1));
    inst_add(c, MM_BIAS, TENSOR("bias", ROLE_IN, ELEM_F32, OC, .offset = off, .lo = -1, .hi = 1));
    inst_add(c, MM_OUT,
             TENSOR(gelu ? "fwd out = gelu(pre)" : "fwd out", ROLE_OUT, ELEM_F32, N * OC,
                    .sample = 1, .tol_cpu = TOL_CHAIN));
    if (gelu)
        inst_add(c, MM_PRE,
                 TENSOR("fwd pre", ROLE_OUT, ELEM_F32, N * OC, .sample = 1, .tol_cpu = TOL_CHAIN));
    else inst_skip(c, MM_PRE);
    inst_add(c, MM_DOUT, TENSOR("dout", ROLE_IN, ek, N * OC, .lo = -1, .hi = 1));
    if (gelu)
        inst_add(c, MM_PRE2, TENSOR("gelu_pre", ROLE_IN, ELEM_F32, N * IC, .lo = -3, .hi = 3));
    else inst_skip(c, MM_PRE2);
    const case_tensor g = TENSOR("", ROLE_ACC, ELEM_F32, 0, .offset = off, .lo = -1, .hi = 1,
                                 .grad = 1, .sample = 1, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN);
    case_tensor t = g;
    t.name = gelu ? "bwd dinp at the GELU's input" : "bwd dinp", t.role = ROLE_OUT;
    t.n = N * IC, t.offset = 0;
    inst_add(c, MM_DINP, t);
    t = g, t.name = "bwd dweight", t.n = OC * IC;
    inst_add(c, MM_DW, t);
    const case_tensor gb = N > LONG_SUM_ROWS ? long_sum(g) : g; // dbias: a column sum over N
    t = gb, t.name = bias ? "bwd dbias" : "bwd dbias NULL untouched", t.n = OC;
    inst_add(c, MM_DB, t);
    if (gelu) {
        inst_skip(c, MM_DW2), inst_skip(c, MM_DB2);
        return;
    }
    // from the same values as dweight and dbias, so that they can be compared bitwise
    t = g, t.name = "bwd dweight, dinp NULL", t.n = OC * IC;
    memcpy(inst_add(c, MM_DW2, t)->val, c->t[MM_DW].val, OC * IC * sizeof(double));
    t = gb, t.name = bias ? "bwd dbias, dinp NULL" : "bwd dbias NULL untouched, dinp NULL";
    t.n = OC;
    memcpy(inst_add(c, MM_DB2, t)->val, c->t[MM_DB].val, OC * sizeof(double));
}

static void mm_run(backend *b, const op_inst *c, void *const *p) {
    const op_case *r = c->row;
    const int N = r->d[0], IC = r->d[1], OC = r->d[2];
    const operand inp = {p[MM_INP], r->dtype}, w = {p[MM_W], r->dtype},
                  dout = {p[MM_DOUT], r->dtype};
    const int bias = r->flags & CASE_BIAS;
    backend_matmul_fwd(b, p[MM_OUT], p[MM_PRE], inp, w, bias ? p[MM_BIAS] : NULL, N, IC, OC);
    backend_matmul_bwd(b, p[MM_DINP], p[MM_DW], bias ? p[MM_DB] : NULL, dout, inp, w, p[MM_PRE2], N,
                       IC, OC);
    if (!(r->flags & CASE_GELU))
        backend_matmul_bwd(b, NULL, p[MM_DW2], bias ? p[MM_DB2] : NULL, dout, inp, w, NULL, N, IC,
                           OC);
}

// The references element by element (the large cases are checked on a sample).
static void mm_reference(op_inst *c) {
    const op_case *r = c->row;
    const size_t N = r->d[0], IC = r->d[1], OC = r->d[2];
    const int gelu = r->flags & CASE_GELU;
    case_tensor *t = c->t;
    const double *x = t[MM_INP].val, *w = t[MM_W].val, *R = t[MM_DOUT].val;
    const double *bias = r->flags & CASE_BIAS ? t[MM_BIAS].val : NULL;
    const double bound = 1e-5 * sqrt((double)IC) * max_abs(x, N * IC) * max_abs(w, OC * IC);
    for (int k = MM_OUT; k <= MM_PRE; k++) {
        if (t[k].absent) continue;
        for (size_t j = 0; j < t[k].nref; j++) {
            const size_t i = ref_at(&t[k], j), n = i / OC, o = i % OC;
            double s = bias ? bias[o] : 0.0;
            for (size_t q = 0; q < IC; q++) s += x[n * IC + q] * w[o * IC + q];
            t[k].ref[j] = k == MM_OUT && gelu ? ref_gelu(s) : s;
        }
        // gelu' <= 1.13 carries the GEMM's error into out, next to GELU's own rounding
        const double m = max_abs(t[k].ref, t[k].nref);
        t[k].tol = (k == MM_OUT && gelu ? 1.2 * bound : bound) / (m > 0 ? m : 1) +
                   (k == MM_OUT && gelu ? TOL_CHAIN : 0.0);
    }
    if (r->fd) {
        matmul_args a = {t[MM_INP].val, t[MM_W].val, bias ? t[MM_BIAS].val : NULL,
                         (int)N,        (int)IC,     (int)OC};
        inst_fd(&t[MM_DINP], fwd_matmul, &a, N * OC, R, a.inp);
        inst_fd(&t[MM_DW], fwd_matmul, &a, N * OC, R, a.w);
        inst_fd(&t[MM_DW2], fwd_matmul, &a, N * OC, R, a.w);
        if (bias) {
            inst_fd(&t[MM_DB], fwd_matmul, &a, N * OC, R, a.bias);
            inst_fd(&t[MM_DB2], fwd_matmul, &a, N * OC, R, a.bias);
        }
        return; // without a bias the dbias references stay 0: untouched
    }
    for (size_t j = 0; j < t[MM_DINP].nref; j++) {
        const size_t i = ref_at(&t[MM_DINP], j), n = i / IC, q = i % IC;
        double s = 0.0;
        for (size_t o = 0; o < OC; o++) s += R[n * OC + o] * w[o * IC + q];
        t[MM_DINP].ref[j] = gelu ? s * ref_gelu_grad(t[MM_PRE2].val[i]) : s;
    }
    for (int k = MM_DW; k <= MM_DB2; k++) {
        const int is_bias = k == MM_DB || k == MM_DB2;
        if (t[k].absent || (is_bias && !bias)) continue;
        for (size_t j = 0; j < t[k].nref; j++) {
            const size_t i = ref_at(&t[k], j), o = is_bias ? i : i / IC, q = i % IC;
            double s = 0.0;
            for (size_t n = 0; n < N; n++) s += R[n * OC + o] * (is_bias ? 1.0 : x[n * IC + q]);
            t[k].ref[j] = s;
        }
    }
}

// dweight and dbias do not depend on whether dinp is computed (fp32: the same GEMMs; with
// bf16 operands CUDA may take its widened fallback for one call and not the other).
static void mm_check(const op_inst *c, double *const *got, const char *tag) {
    if (c->row->flags & CASE_GELU || c->row->dtype != DTYPE_FP32) return;
    char name[200];
    snprintf(name, sizeof name, "%s dweight, dbias with dinp NULL = with dinp (bitwise)%s", c->name,
             tag);
    TEST_CHECK(!memcmp(got[MM_DW], got[MM_DW2], c->t[MM_DW].n * sizeof(double)) &&
                   !memcmp(got[MM_DB], got[MM_DB2], c->t[MM_DB].n * sizeof(double)),
               name, "they differ");
}

static const op_family OP_MATMUL = {mm_declare, mm_run, mm_reference, mm_check};

// ---------------------------------------------------------------------------------------
// matmul_accumulate: d = {N, IC, OC, micro_batches}. The backward of one layer over
// micro_batches micro-batches of N rows each, as a training step runs it: each call
// overwrites its micro-batch's dinp and adds into the same dweight and dbias (beta = 1 on
// the device), so the weight gradient's reduction runs over micro_batches * N rows in all,
// N of them per call (a model-sized N, B * T = 16K-64K tokens, is the long reduction of a
// real step). Without CASE_BIAS dbias is NULL and must stay untouched.

enum { MA_INP, MA_W, MA_DOUT, MA_DINP, MA_DW, MA_DB };

static void ma_declare(op_inst *c) {
    const op_case *r = c->row;
    const size_t N = r->d[0], IC = r->d[1], OC = r->d[2], M = r->d[3];
    const int bias = r->flags & CASE_BIAS;
    const elem_kind ek = operand_kind(r);
    TRI_ASSERT(M >= 1 && !r->fd); // analytic references only (the large rows are sampled)
    snprintf(c->name, sizeof c->name, "matmul_accumulate%s N=%zu IC=%zu OC=%zu micro_batches=%zu%s",
             dtype_tag(r), N, IC, OC, M, bias ? " bias" : "");
    inst_add(c, MA_INP, TENSOR("inp", ROLE_IN, ek, M * N * IC, .lo = -1, .hi = 1));
    inst_add(c, MA_W, TENSOR("weight", ROLE_IN, ek, OC * IC, .lo = -1, .hi = 1));
    inst_add(c, MA_DOUT, TENSOR("dout", ROLE_IN, ek, M * N * OC, .lo = -1, .hi = 1));
    const case_tensor g = TENSOR("", ROLE_ACC, ELEM_F32, 0, .lo = -1, .hi = 1, .grad = 1,
                                 .sample = 1, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN);
    case_tensor t = g;
    t.name = "bwd dinp of every micro-batch", t.role = ROLE_OUT, t.n = M * N * IC;
    inst_add(c, MA_DINP, t);
    t = g, t.name = "bwd dweight over the micro-batches", t.n = OC * IC;
    inst_add(c, MA_DW, t);
    t = M * N > LONG_SUM_ROWS ? long_sum(g) : g;
    t.name = bias ? "bwd dbias over the micro-batches" : "bwd dbias NULL untouched", t.n = OC;
    inst_add(c, MA_DB, t);
}

static void ma_run(backend *b, const op_inst *c, void *const *p) {
    const op_case *r = c->row;
    const int N = r->d[0], IC = r->d[1], OC = r->d[2], M = r->d[3];
    const size_t es = r->dtype == DTYPE_BF16 ? 2 : 4;
    float *dbias = r->flags & CASE_BIAS ? p[MA_DB] : NULL;
    for (int m = 0; m < M; m++) {
        const size_t rows = (size_t)m * N;
        const operand dout = {(const char *)p[MA_DOUT] + rows * OC * es, r->dtype};
        const operand inp = {(const char *)p[MA_INP] + rows * IC * es, r->dtype};
        const operand w = {p[MA_W], r->dtype};
        backend_matmul_bwd(b, (float *)p[MA_DINP] + rows * IC, p[MA_DW], dbias, dout, inp, w, NULL,
                           N, IC, OC);
    }
}

static void ma_reference(op_inst *c) {
    const op_case *r = c->row;
    const size_t N = r->d[0], IC = r->d[1], OC = r->d[2], rows = (size_t)r->d[3] * N;
    case_tensor *t = c->t;
    const double *x = t[MA_INP].val, *w = t[MA_W].val, *R = t[MA_DOUT].val;
    for (size_t j = 0; j < t[MA_DINP].nref; j++) {
        const size_t i = ref_at(&t[MA_DINP], j), n = i / IC, q = i % IC;
        double s = 0.0;
        for (size_t o = 0; o < OC; o++) s += R[n * OC + o] * w[o * IC + q];
        t[MA_DINP].ref[j] = s;
    }
    for (size_t j = 0; j < t[MA_DW].nref; j++) {
        const size_t i = ref_at(&t[MA_DW], j), o = i / IC, q = i % IC;
        double s = 0.0;
        for (size_t n = 0; n < rows; n++) s += R[n * OC + o] * x[n * IC + q];
        t[MA_DW].ref[j] = s;
    }
    if (!(r->flags & CASE_BIAS)) return; // the dbias references stay 0: untouched
    for (size_t j = 0; j < t[MA_DB].nref; j++) {
        const size_t o = ref_at(&t[MA_DB], j);
        double s = 0.0;
        for (size_t n = 0; n < rows; n++) s += R[n * OC + o];
        t[MA_DB].ref[j] = s;
    }
}

static const op_family OP_MATMUL_ACC = {ma_declare, ma_run, ma_reference, NULL};

// ---------------------------------------------------------------------------------------
// layernorm: d = {N, C}. The forward, then the backward from its mean and rstd.

enum { LN_INP, LN_W, LN_B, LN_OUT, LN_MEAN, LN_RSTD, LN_DOUT, LN_DINP, LN_DW, LN_DB };

static void ln_declare(op_inst *c) {
    const size_t N = c->row->d[0], C = c->row->d[1];
    snprintf(c->name, sizeof c->name, "layernorm N=%zu C=%zu", N, C);
    inst_add(c, LN_INP, TENSOR("inp", ROLE_IN, ELEM_F32, N * C, .lo = -2, .hi = 3));
    inst_add(c, LN_W, TENSOR("weight", ROLE_IN, ELEM_F32, C, .lo = 0.5, .hi = 1.5));
    inst_add(c, LN_B, TENSOR("bias", ROLE_IN, ELEM_F32, C, .lo = -1, .hi = 1));
    const case_tensor f = TENSOR("", ROLE_OUT, ELEM_F32, 0, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN);
    case_tensor t = f;
    t.name = "fwd out", t.n = N * C;
    inst_add(c, LN_OUT, t);
    t = f, t.name = "fwd mean", t.n = N;
    inst_add(c, LN_MEAN, t);
    t = f, t.name = "fwd rstd", t.n = N;
    inst_add(c, LN_RSTD, t);
    inst_add(c, LN_DOUT, TENSOR("dout", ROLE_IN, ELEM_F32, N * C, .lo = -1, .hi = 1));
    const case_tensor g = TENSOR("", ROLE_ACC, ELEM_F32, 0, .lo = -1, .hi = 1, .grad = 1,
                                 .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN);
    t = g, t.name = "bwd dinp", t.n = N * C;
    inst_add(c, LN_DINP, t);
    t = g, t.name = "bwd dweight", t.n = C;
    inst_add(c, LN_DW, t);
    t = g, t.name = "bwd dbias", t.n = C;
    inst_add(c, LN_DB, t);
}

static void ln_run(backend *b, const op_inst *c, void *const *p) {
    const int N = c->row->d[0], C = c->row->d[1];
    b->layernorm_fwd(b, p[LN_OUT], p[LN_MEAN], p[LN_RSTD], p[LN_INP], p[LN_W], p[LN_B], N, C);
    b->layernorm_bwd(b, p[LN_DINP], p[LN_DW], p[LN_DB], p[LN_DOUT], p[LN_INP], p[LN_W], p[LN_MEAN],
                     p[LN_RSTD], N, C);
}

static void ln_reference(op_inst *c) {
    const size_t N = c->row->d[0], C = c->row->d[1];
    case_tensor *t = c->t;
    double *out = xmalloc(N * C * sizeof(double)), *mean = xmalloc(N * sizeof(double));
    double *rstd = xmalloc(N * sizeof(double)), *dw = xmalloc(C * sizeof(double));
    double *db = xmalloc(C * sizeof(double));
    ref_layernorm(out, mean, rstd, t[LN_INP].val, t[LN_W].val, t[LN_B].val, (int)N, (int)C);
    ref_pick(&t[LN_OUT], out), ref_pick(&t[LN_MEAN], mean), ref_pick(&t[LN_RSTD], rstd);
    if (c->row->fd) {
        ln_args a = {t[LN_INP].val, t[LN_W].val, t[LN_B].val, (int)N, (int)C};
        inst_fd(&t[LN_DINP], fwd_ln, &a, N * C, t[LN_DOUT].val, a.inp);
        inst_fd(&t[LN_DW], fwd_ln, &a, N * C, t[LN_DOUT].val, a.w);
        inst_fd(&t[LN_DB], fwd_ln, &a, N * C, t[LN_DOUT].val, a.bias);
    } else {
        ref_layernorm_bwd(out, dw, db, t[LN_DOUT].val, t[LN_INP].val, t[LN_W].val, (int)N, (int)C);
        ref_pick(&t[LN_DINP], out), ref_pick(&t[LN_DW], dw), ref_pick(&t[LN_DB], db);
    }
    free(out), free(mean), free(rstd), free(dw), free(db);
}

static const op_family OP_LAYERNORM = {ln_declare, ln_run, ln_reference, NULL};

// ---------------------------------------------------------------------------------------
// residual_layernorm: d = {N, C}. res = a + c in place of a (as the model calls it), then
// its LayerNorm.

enum { RL_A, RL_C, RL_W, RL_B, RL_OUT, RL_MEAN, RL_RSTD };

static void rl_declare(op_inst *c) {
    const size_t N = c->row->d[0], C = c->row->d[1];
    snprintf(c->name, sizeof c->name, "residual_layernorm N=%zu C=%zu", N, C);
    inst_add(c, RL_A,
             TENSOR("res (in place of a)", ROLE_INOUT, ELEM_F32, N * C, .lo = -2, .hi = 3,
                    .tol = TOL_FEW, .tol_cpu = TOL_FEW));
    inst_add(c, RL_C, TENSOR("c", ROLE_IN, ELEM_F32, N * C, .lo = -1, .hi = 1));
    inst_add(c, RL_W, TENSOR("weight", ROLE_IN, ELEM_F32, C, .lo = 0.5, .hi = 1.5));
    inst_add(c, RL_B, TENSOR("bias", ROLE_IN, ELEM_F32, C, .lo = -1, .hi = 1));
    const case_tensor f = TENSOR("", ROLE_OUT, ELEM_F32, 0, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN);
    case_tensor t = f;
    t.name = "out", t.n = N * C;
    inst_add(c, RL_OUT, t);
    t = f, t.name = "mean", t.n = N;
    inst_add(c, RL_MEAN, t);
    t = f, t.name = "rstd", t.n = N;
    inst_add(c, RL_RSTD, t);
}

static void rl_run(backend *b, const op_inst *c, void *const *p) {
    b->residual_layernorm_fwd(b, p[RL_A], p[RL_OUT], p[RL_MEAN], p[RL_RSTD], p[RL_A], p[RL_C],
                              p[RL_W], p[RL_B], c->row->d[0], c->row->d[1]);
}

static void rl_reference(op_inst *c) {
    const size_t N = c->row->d[0], C = c->row->d[1];
    case_tensor *t = c->t;
    double *res = xmalloc(N * C * sizeof(double)), *out = xmalloc(N * C * sizeof(double));
    double *mean = xmalloc(N * sizeof(double)), *rstd = xmalloc(N * sizeof(double));
    for (size_t i = 0; i < N * C; i++) res[i] = t[RL_A].val[i] + t[RL_C].val[i];
    ref_layernorm(out, mean, rstd, res, t[RL_W].val, t[RL_B].val, (int)N, (int)C);
    ref_pick(&t[RL_A], res), ref_pick(&t[RL_OUT], out);
    ref_pick(&t[RL_MEAN], mean), ref_pick(&t[RL_RSTD], rstd);
    free(res), free(out), free(mean), free(rstd);
}

static const op_family OP_RESIDUAL_LAYERNORM = {rl_declare, rl_run, rl_reference, NULL};

// ---------------------------------------------------------------------------------------
// Pointwise, d = {n}. residual: out = a + c, and again in place of a. gelu: the forward, the
// backward, and the backward in place of dout. scale: x *= 0.37.

enum { RS_A, RS_C, RS_OUT, RS_A2 };

static void rs_declare(op_inst *c) {
    const size_t n = c->row->d[0];
    snprintf(c->name, sizeof c->name, "residual n=%zu", n);
    inst_add(c, RS_A, TENSOR("a", ROLE_IN, ELEM_F32, n, .lo = -6, .hi = 6));
    inst_add(c, RS_C, TENSOR("c", ROLE_IN, ELEM_F32, n, .lo = -1, .hi = 1));
    inst_add(c, RS_OUT, TENSOR("out", ROLE_OUT, ELEM_F32, n, .tol = TOL_FEW, .tol_cpu = TOL_FEW));
    inst_add(c, RS_A2,
             TENSOR("out aliasing a", ROLE_INOUT, ELEM_F32, n, .lo = -6, .hi = 6, .tol = TOL_FEW,
                    .tol_cpu = TOL_FEW));
}
static void rs_run(backend *b, const op_inst *c, void *const *p) {
    const size_t n = c->row->d[0];
    b->residual_fwd(b, p[RS_OUT], p[RS_A], p[RS_C], n);
    b->residual_fwd(b, p[RS_A2], p[RS_A2], p[RS_C], n);
}
static void rs_reference(op_inst *c) {
    case_tensor *t = c->t;
    for (size_t k = 0; k < t[RS_OUT].nref; k++) t[RS_OUT].ref[k] = t[RS_A].val[k] + t[RS_C].val[k];
    for (size_t k = 0; k < t[RS_A2].nref; k++) t[RS_A2].ref[k] = t[RS_A2].val[k] + t[RS_C].val[k];
}
static const op_family OP_RESIDUAL = {rs_declare, rs_run, rs_reference, NULL};

enum { GE_X, GE_OUT, GE_DOUT, GE_DINP, GE_DOUT2 };

static void ge_declare(op_inst *c) {
    const size_t n = c->row->d[0];
    snprintf(c->name, sizeof c->name, "gelu n=%zu", n);
    case_tensor *x = inst_add(c, GE_X, TENSOR("x", ROLE_IN, ELEM_F32, n, .lo = -6, .hi = 6));
    const float near0[3] = {0.0f, -1e-3f, 1e-3f};
    for (size_t i = 0; i < 3 && i < n; i++) x->val[i] = near0[i];
    inst_add(c, GE_OUT,
             TENSOR("fwd out", ROLE_OUT, ELEM_F32, n, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    inst_add(c, GE_DOUT, TENSOR("dout", ROLE_IN, ELEM_F32, n, .lo = -1, .hi = 1));
    inst_add(c, GE_DINP,
             TENSOR("bwd dinp", ROLE_OUT, ELEM_F32, n, .grad = 1, .tol = TOL_CHAIN,
                    .tol_cpu = TOL_CHAIN));
    inst_add(c, GE_DOUT2,
             TENSOR("bwd dinp aliasing dout", ROLE_INOUT, ELEM_F32, n, .lo = -1, .hi = 1, .grad = 1,
                    .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
}
static void ge_run(backend *b, const op_inst *c, void *const *p) {
    const size_t n = c->row->d[0];
    b->gelu_fwd(b, p[GE_OUT], p[GE_X], n);
    b->gelu_bwd(b, p[GE_DINP], p[GE_X], p[GE_DOUT], n);
    b->gelu_bwd(b, p[GE_DOUT2], p[GE_X], p[GE_DOUT2], n);
}
static void ge_reference(op_inst *c) {
    case_tensor *t = c->t;
    const size_t n = c->row->d[0];
    for (size_t k = 0; k < n; k++) t[GE_OUT].ref[k] = ref_gelu(t[GE_X].val[k]);
    if (c->row->fd) {
        gelu_args a = {t[GE_X].val, n};
        inst_fd(&t[GE_DINP], fwd_gelu, &a, n, t[GE_DOUT].val, a.x);
        inst_fd(&t[GE_DOUT2], fwd_gelu, &a, n, t[GE_DOUT2].val, a.x);
        return;
    }
    for (size_t k = 0; k < n; k++) {
        const double d = ref_gelu_grad(t[GE_X].val[k]);
        t[GE_DINP].ref[k] = d * t[GE_DOUT].val[k];
        t[GE_DOUT2].ref[k] = d * t[GE_DOUT2].val[k];
    }
}
static const op_family OP_GELU = {ge_declare, ge_run, ge_reference, NULL};

static void sc_declare(op_inst *c) {
    const size_t n = c->row->d[0];
    snprintf(c->name, sizeof c->name, "scale n=%zu", n);
    inst_add(c, 0,
             TENSOR("x (in place)", ROLE_INOUT, ELEM_F32, n, .lo = -6, .hi = 6, .tol = TOL_FEW,
                    .tol_cpu = TOL_FEW));
}
static void sc_run(backend *b, const op_inst *c, void *const *p) {
    b->scale(b, p[0], 0.37f, c->t[0].n);
}
static void sc_reference(op_inst *c) {
    for (size_t k = 0; k < c->t[0].n; k++) c->t[0].ref[k] = c->t[0].val[k] * (double)0.37f;
}
static const op_family OP_SCALE = {sc_declare, sc_run, sc_reference, NULL};

// ---------------------------------------------------------------------------------------
// attention: d = {B, T, NH, HS, NKV}, qkv of the row's dtype (NKV 0: NH; else grouped-query,
// against the multi-head references on kv heads repeated, ops_ref.h). The forward into a
// state of the backend's kind, then the backward from it.

enum { AT_QKV, AT_OUT, AT_DOUT, AT_DQKV };

static void at_declare(op_inst *c) {
    const op_case *r = c->row;
    const size_t B = r->d[0], T = r->d[1], NH = r->d[2], HS = r->d[3], C = NH * HS;
    const size_t NKV = r->d[4] ? (size_t)r->d[4] : NH, W = (NH + 2 * NKV) * HS;
    const double tol_cpu = r->dtype == DTYPE_BF16 ? TOL_BF16_TC : TOL_CHAIN;
    char kv[32] = "";
    if (NKV != NH) snprintf(kv, sizeof kv, " NKV=%zu", NKV);
    snprintf(c->name, sizeof c->name, "attention%s B=%zu T=%zu NH=%zu%s HS=%zu", dtype_tag(r), B, T,
             NH, kv, HS);
    inst_add(c, AT_QKV, TENSOR("qkv", ROLE_IN, operand_kind(r), B * T * W, .lo = -2, .hi = 2));
    inst_add(
        c, AT_OUT,
        TENSOR("fwd out", ROLE_OUT, ELEM_F32, B * T * C, .tol = TOL_CHAIN, .tol_cpu = tol_cpu));
    inst_add(c, AT_DOUT, TENSOR("dout", ROLE_IN, ELEM_F32, B * T * C, .lo = -1, .hi = 1));
    inst_add(c, AT_DQKV,
             TENSOR("bwd dqkv", ROLE_OUT, ELEM_F32, B * T * W, .grad = 1, .tol = TOL_CHAIN,
                    .tol_cpu = tol_cpu));
}

// The backward reads the forward's output O as the model passes it: fp32, or under bf16 its
// bf16 rounding.
static void at_run(backend *b, const op_inst *c, void *const *p) {
    const int B = c->row->d[0], T = c->row->d[1], NH = c->row->d[2], HS = c->row->d[3];
    const int NKV = c->row->d[4] ? c->row->d[4] : NH;
    const operand qkv = {p[AT_QKV], c->row->dtype};
    const size_t nout = (size_t)B * T * NH * HS;
    void *state = b->alloc(b, attn_state_bytes(b->attn_state, B, T, NH));
    uint16_t *out16 = c->row->dtype == DTYPE_BF16 ? b->alloc(b, nout * sizeof(uint16_t) + 8) : NULL;
    TRI_ASSERT(state && (out16 || c->row->dtype != DTYPE_BF16));
    backend_attention_fwd(b, p[AT_OUT], state, qkv, B, T, NH, NKV, HS, 0.0f);
    operand out = operand_fp32(p[AT_OUT]);
    if (out16) {
        b->to_bf16(b, out16, p[AT_OUT], nout);
        out = operand_bf16(out16);
    }
    backend_attention_bwd(b, p[AT_DQKV], p[AT_DOUT], qkv, out, state, B, T, NH, NKV, HS, 0.0f);
    b->free(b, state);
    if (out16) b->free(b, out16);
}

static void at_reference(op_inst *c) {
    const int B = c->row->d[0], T = c->row->d[1], NH = c->row->d[2], HS = c->row->d[3];
    const int NKV = c->row->d[4] ? c->row->d[4] : NH;
    case_tensor *t = c->t;
    const size_t n3 = (size_t)B * T * 3 * NH * HS;
    double *full = xmalloc(n3 * sizeof(double)), *mha = NULL, *gqa = NULL;
    const double *qkv = t[AT_QKV].val;
    if (NKV != NH) { // no finite differences here (test_ops_llama.c checks the CPU's GQA so)
        TRI_ASSERT(!c->row->fd);
        ref_gqa_expand(mha = xmalloc(n3 * sizeof(double)), qkv, B, T, NH, NKV, HS);
        gqa = xmalloc(t[AT_DQKV].n * sizeof(double));
        qkv = mha;
    }
    ref_attention(full, NULL, qkv, B, T, NH, HS);
    ref_pick(&t[AT_OUT], full);
    if (c->row->fd) {
        attn_args a = {t[AT_QKV].val, B, T, NH, HS};
        inst_fd(&t[AT_DQKV], fwd_attn, &a, t[AT_OUT].n, t[AT_DOUT].val, a.qkv);
    } else {
        ref_attention_bwd(full, t[AT_DOUT].val, qkv, B, T, NH, HS);
        if (gqa) ref_gqa_fold(gqa, full, B, T, NH, NKV, HS);
        ref_pick(&t[AT_DQKV], gqa ? gqa : full);
    }
    free(full), free(mha), free(gqa);
}

static const op_family OP_ATTENTION = {at_declare, at_run, at_reference, NULL};

// ---------------------------------------------------------------------------------------
// embedding: d = {B, T, C, V, ranks, rank}: rank `rank` of `ranks` holding V / ranks rows of
// the vocabulary. The masked lookup (positions added with CASE_POS), then its backward (dwpe
// NULL, and untouched, without CASE_POS).

enum { EM_TOK, EM_WTE, EM_WPE, EM_OUT, EM_DOUT, EM_DWTE, EM_DWPE };

static void em_declare(op_inst *c) {
    const op_case *r = c->row;
    const size_t B = r->d[0], T = r->d[1], C = r->d[2], V = r->d[3], Vl = V / r->d[4];
    const int pos = r->flags & CASE_POS;
    snprintf(c->name, sizeof c->name,
             "embedding B=%zu T=%zu C=%zu V=%zu vocab_start=%zu add_pos=%d", B, T, C, V,
             Vl * r->d[5], pos);
    case_tensor *tok = inst_add(c, EM_TOK, TENSOR("tokens", ROLE_IN, ELEM_I32, B * T));
    for (size_t i = 0; i < B * T; i++) { // rows 0..3 take half of the tokens
        const double u = 0.5 * (rnd() + 1.0);
        tok->val[i] = u < 0.5 ? (int)(u * 8) : (int)(u * V) % (int)V;
    }
    inst_add(c, EM_WTE, TENSOR("wte", ROLE_IN, ELEM_F32, Vl * C, .lo = -1, .hi = 1));
    inst_add(c, EM_WPE, TENSOR("wpe", ROLE_IN, ELEM_F32, T * C, .lo = -1, .hi = 1));
    inst_add(c, EM_OUT,
             TENSOR("fwd out", ROLE_OUT, ELEM_F32, B * T * C, .tol = TOL_FEW, .tol_cpu = TOL_FEW));
    inst_add(c, EM_DOUT, TENSOR("dout", ROLE_IN, ELEM_F32, B * T * C, .lo = -1, .hi = 1));
    const case_tensor g = TENSOR("", ROLE_ACC, ELEM_F32, 0, .lo = -1, .hi = 1, .grad = 1,
                                 .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN);
    case_tensor t = g;
    t.name = "bwd dwte", t.n = Vl * C;
    inst_add(c, EM_DWTE, t);
    t = g, t.name = pos ? "bwd dwpe" : "bwd dwpe NULL untouched", t.n = T * C;
    inst_add(c, EM_DWPE, t);
}

static void em_run(backend *b, const op_inst *c, void *const *p) {
    const op_case *r = c->row;
    const int B = r->d[0], T = r->d[1], C = r->d[2], Vl = r->d[3] / r->d[4], vs = Vl * r->d[5];
    const int pos = r->flags & CASE_POS ? 1 : 0;
    b->embedding_fwd(b, p[EM_OUT], p[EM_TOK], p[EM_WTE], p[EM_WPE], B, T, C, vs, Vl, pos);
    b->embedding_bwd(b, p[EM_DWTE], pos ? p[EM_DWPE] : NULL, p[EM_DOUT], p[EM_TOK], B, T, C, vs,
                     Vl);
}

static void em_reference(op_inst *c) {
    const op_case *r = c->row;
    const int B = r->d[0], T = r->d[1], C = r->d[2], Vl = r->d[3] / r->d[4], vs = Vl * r->d[5];
    const int pos = r->flags & CASE_POS ? 1 : 0;
    case_tensor *t = c->t;
    int *tok = inst_ints(&t[EM_TOK]);
    double *out = xmalloc(t[EM_OUT].n * sizeof(double)),
           *dwpe = xcalloc(t[EM_DWPE].n, sizeof(double));
    double *dwte = xmalloc(t[EM_DWTE].n * sizeof(double));
    emb_args a = {tok, t[EM_WTE].val, t[EM_WPE].val, B, T, C, vs, Vl, pos};
    fwd_emb(&a, out);
    ref_pick(&t[EM_OUT], out);
    if (r->fd) {
        inst_fd(&t[EM_DWTE], fwd_emb, &a, t[EM_OUT].n, t[EM_DOUT].val, a.wte);
        inst_fd(&t[EM_DWPE], fwd_emb, &a, t[EM_OUT].n, t[EM_DOUT].val, a.wpe);
    } else {
        ref_embedding_bwd(dwte, dwpe, t[EM_DOUT].val, tok, B, T, C, vs, Vl, pos);
        ref_pick(&t[EM_DWTE], dwte), ref_pick(&t[EM_DWPE], dwpe);
    }
    free(tok), free(out), free(dwpe), free(dwte);
}

static const op_family OP_EMBEDDING = {em_declare, em_run, em_reference, NULL};

// ---------------------------------------------------------------------------------------
// xent: d = {N, Vp_local, vocab_start, V_valid}: one rank's columns of the vocab-parallel
// cross-entropy, its sums as they are before the tp all-reduces (with every column on one
// rank, the loss itself). xent_max, xent_sumexp, then (where the rank has real columns)
// xent_loss and xent_bwd, which turns the logits into their gradient (dloss = 1 / N).
// Targets cover the whole vocabulary; padded columns hold 50, which must be ignored.

enum { XE_TGT, XE_LOGITS, XE_MAX, XE_SUM, XE_TL, XE_LOSS };

static int xent_real(const op_case *r) { // real columns of this rank
    const int real = r->d[3] - r->d[2];
    return real < 0 ? 0 : real < r->d[1] ? real : r->d[1];
}

static void xe_declare(op_inst *c) {
    const op_case *r = c->row;
    const size_t N = r->d[0], Vp = r->d[1];
    const int real = xent_real(r);
    snprintf(c->name, sizeof c->name, "xent N=%zu Vp_local=%zu vocab_start=%d V_valid=%d", N, Vp,
             r->d[2], r->d[3]);
    case_tensor *tg = inst_add(c, XE_TGT, TENSOR("targets", ROLE_IN, ELEM_I32, N));
    for (size_t n = 0; n < N; n++) tg->val[n] = (int)((rnd() + 1.0) * 0.5 * r->d[3]) % r->d[3];
    tg->val[N - 1] = r->d[3] - 1; // the last real column
    case_tensor *l = inst_add(c, XE_LOGITS,
                              TENSOR("bwd dlogits (in place of the logits)",
                                     real ? ROLE_INOUT : ROLE_IN, ELEM_F32, N * Vp, .lo = -8,
                                     .hi = 8, .grad = 1, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    for (size_t i = 0; i < N * Vp; i++)
        if ((int)(i % Vp) >= real) l->val[i] = 50.0;
    inst_add(c, XE_MAX, TENSOR("rowmax", ROLE_OUT, ELEM_F32, N, .tol = 0.0, .tol_cpu = TOL_FEW));
    inst_add(c, XE_SUM,
             TENSOR("sumexp", ROLE_OUT, ELEM_F32, N, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    inst_add(c, XE_TL,
             TENSOR("target_logit", ROLE_OUT, ELEM_F32, N, .tol = TOL_FEW, .tol_cpu = TOL_FEW));
    if (real)
        inst_add(c, XE_LOSS,
                 TENSOR("losses", ROLE_OUT, ELEM_F32, N, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    else inst_skip(c, XE_LOSS); // log(0): the losses need the all-reduced sums
}

static void xe_run(backend *b, const op_inst *c, void *const *p) {
    const op_case *r = c->row;
    const int N = r->d[0], Vp = r->d[1], vs = r->d[2], V = r->d[3];
    b->xent_max(b, p[XE_MAX], p[XE_LOGITS], N, Vp, vs, V);
    b->xent_sumexp(b, p[XE_SUM], p[XE_TL], p[XE_LOGITS], p[XE_MAX], p[XE_TGT], N, Vp, vs, V);
    if (!xent_real(r)) return;
    b->xent_loss(b, p[XE_LOSS], p[XE_MAX], p[XE_SUM], p[XE_TL], N);
    b->xent_bwd(b, p[XE_LOGITS], p[XE_MAX], p[XE_SUM], p[XE_TGT], 1.0f / (float)N, N, Vp, vs, V);
}

static void xe_reference(op_inst *c) {
    const op_case *r = c->row;
    const int N = r->d[0], Vp = r->d[1], vs = r->d[2], V = r->d[3], real = xent_real(r);
    case_tensor *t = c->t;
    const double *l = t[XE_LOGITS].val;
    int *tg = inst_ints(&t[XE_TGT]);
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < real; j++) mx = fmax(mx, l[(size_t)n * Vp + j]);
        for (int j = 0; j < real; j++) s += exp(l[(size_t)n * Vp + j] - mx);
        const int own = tg[n] - vs;
        t[XE_MAX].ref[n] = mx, t[XE_SUM].ref[n] = s;
        t[XE_TL].ref[n] = own >= 0 && own < Vp ? l[(size_t)n * Vp + own] : 0.0;
    }
    if (real) {
        ref_xent(t[XE_LOSS].ref, l, tg, N, Vp, vs, V);
        const float dloss = 1.0f / (float)N;
        if (r->fd) {
            double *R = xmalloc((size_t)N * sizeof(double));
            for (int n = 0; n < N; n++) R[n] = dloss;
            xent_args a = {t[XE_LOGITS].val, tg, N, Vp, vs, V};
            inst_fd(&t[XE_LOGITS], fwd_xent, &a, (size_t)N, R, a.logits);
            free(R);
        } else {
            double *g = xmalloc(t[XE_LOGITS].n * sizeof(double));
            ref_xent_bwd(g, l, tg, N, Vp, vs, V, dloss);
            ref_pick(&t[XE_LOGITS], g);
            free(g);
        }
    }
    free(tg);
}

// The gradient of a padded column is exactly 0 (its logit never enters the loss).
static void xe_check(const op_inst *c, double *const *got, const char *tag) {
    const int N = c->row->d[0], Vp = c->row->d[1], real = xent_real(c->row);
    if (!real) return;
    int zero = 1;
    for (int n = 0; n < N; n++)
        for (int j = real; j < Vp; j++) zero &= got[XE_LOGITS][(size_t)n * Vp + j] == 0.0;
    char name[200];
    snprintf(name, sizeof name, "%s xent_bwd padded columns 0%s", c->name, tag);
    TEST_CHECK(zero, name, "nonzero gradient in a padded column");
}

static const op_family OP_XENT = {xe_declare, xe_run, xe_reference, xe_check};
