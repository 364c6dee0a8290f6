// op_families_llama.h: the op families of the Llama ops (backend.h rmsnorm_fwd / _bwd,
// residual_rmsnorm_fwd, rope_fwd / _bwd, swiglu_fwd / _bwd), included by tests/op_cases.h
// after op_families.h, so that tests/test_ops.c checks them on the CPU against these double
// references and tests/gpu/test_gpu_ops twins CUDA against the CPU on the same rows. Their
// finite-difference checks are tests/test_ops_llama.c's (on the CPU); the references here are
// the analytic double forms. Grouped-query attention is OP_ATTENTION's d[4] (op_families.h).

#define LLAMA_EPS 1e-5 // model.norm_eps's default

// ---------------------------------------------------------------------------------------
// rmsnorm: d = {N, C}. The forward (rstd saved), then the backward from it: dinp and dweight
// accumulate.

enum { RN_INP, RN_W, RN_OUT, RN_RSTD, RN_DOUT, RN_DINP, RN_DW };

static void rn_declare(op_inst *c) {
    const size_t N = c->row->d[0], C = c->row->d[1];
    snprintf(c->name, sizeof c->name, "rmsnorm N=%zu C=%zu", N, C);
    inst_add(c, RN_INP, TENSOR("inp", ROLE_IN, ELEM_F32, N * C, .lo = -2, .hi = 3));
    inst_add(c, RN_W, TENSOR("weight", ROLE_IN, ELEM_F32, C, .lo = 0.5, .hi = 1.5));
    inst_add(c, RN_OUT,
             TENSOR("fwd out", ROLE_OUT, ELEM_F32, N * C, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    inst_add(c, RN_RSTD,
             TENSOR("fwd rstd", ROLE_OUT, ELEM_F32, N, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    inst_add(c, RN_DOUT, TENSOR("dout", ROLE_IN, ELEM_F32, N * C, .lo = -1, .hi = 1));
    inst_add(c, RN_DINP,
             TENSOR("bwd dinp", ROLE_ACC, ELEM_F32, N * C, .lo = -1, .hi = 1, .grad = 1,
                    .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    inst_add(c, RN_DW,
             TENSOR("bwd dweight", ROLE_ACC, ELEM_F32, C, .lo = -1, .hi = 1, .grad = 1,
                    .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
}

static void rn_run(backend *b, const op_inst *c, void *const *p) {
    const int N = c->row->d[0], C = c->row->d[1];
    b->rmsnorm_fwd(b, p[RN_OUT], p[RN_RSTD], p[RN_INP], p[RN_W], N, C, (float)LLAMA_EPS);
    b->rmsnorm_bwd(b, p[RN_DINP], p[RN_DW], p[RN_DOUT], p[RN_INP], p[RN_W], p[RN_RSTD], N, C);
}

// out = x r w, r = 1 / sqrt(mean(x^2) + eps); with norm = x r and g = dy w:
// dx = r (g - norm mean(g norm)), dw = sum over rows of dy norm.
static void ref_rmsnorm_rows(double *out, double *rstd, double *dx, double *dw, const double *x,
                             const double *w, const double *dy, size_t N, size_t C) {
    if (dw) memset(dw, 0, C * sizeof(double));
    for (size_t n = 0; n < N; n++) {
        const double *xr = x + n * C;
        double ss = 0.0;
        for (size_t i = 0; i < C; i++) ss += xr[i] * xr[i];
        const double r = 1.0 / sqrt(ss / (double)C + LLAMA_EPS);
        if (rstd) rstd[n] = r;
        for (size_t i = 0; i < C; i++) out[n * C + i] = xr[i] * r * w[i];
        if (!dx) continue;
        double dot = 0.0;
        for (size_t i = 0; i < C; i++) dot += dy[n * C + i] * w[i] * xr[i] * r;
        for (size_t i = 0; i < C; i++) {
            dx[n * C + i] = r * (dy[n * C + i] * w[i] - xr[i] * r * dot / (double)C);
            dw[i] += dy[n * C + i] * xr[i] * r;
        }
    }
}

static void rn_reference(op_inst *c) {
    const size_t N = c->row->d[0], C = c->row->d[1];
    case_tensor *t = c->t;
    double *out = xmalloc(N * C * sizeof(double)), *rstd = xmalloc(N * sizeof(double));
    double *dx = xmalloc(N * C * sizeof(double)), *dw = xmalloc(C * sizeof(double));
    ref_rmsnorm_rows(out, rstd, dx, dw, t[RN_INP].val, t[RN_W].val, t[RN_DOUT].val, N, C);
    ref_pick(&t[RN_OUT], out), ref_pick(&t[RN_RSTD], rstd);
    ref_pick(&t[RN_DINP], dx), ref_pick(&t[RN_DW], dw);
    free(out), free(rstd), free(dx), free(dw);
}

static const op_family OP_RMSNORM = {rn_declare, rn_run, rn_reference, NULL};

// ---------------------------------------------------------------------------------------
// residual_rmsnorm: d = {N, C}. res = a + c in place of a (as the model calls it), then its
// RMSNorm.

enum { RR_A, RR_C, RR_W, RR_OUT, RR_RSTD };

static void rr_declare(op_inst *c) {
    const size_t N = c->row->d[0], C = c->row->d[1];
    snprintf(c->name, sizeof c->name, "residual_rmsnorm N=%zu C=%zu", N, C);
    inst_add(c, RR_A,
             TENSOR("res (in place of a)", ROLE_INOUT, ELEM_F32, N * C, .lo = -2, .hi = 3,
                    .tol = TOL_FEW, .tol_cpu = TOL_FEW));
    inst_add(c, RR_C, TENSOR("c", ROLE_IN, ELEM_F32, N * C, .lo = -1, .hi = 1));
    inst_add(c, RR_W, TENSOR("weight", ROLE_IN, ELEM_F32, C, .lo = 0.5, .hi = 1.5));
    inst_add(c, RR_OUT,
             TENSOR("out", ROLE_OUT, ELEM_F32, N * C, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    inst_add(c, RR_RSTD,
             TENSOR("rstd", ROLE_OUT, ELEM_F32, N, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
}

static void rr_run(backend *b, const op_inst *c, void *const *p) {
    b->residual_rmsnorm_fwd(b, p[RR_A], p[RR_OUT], p[RR_RSTD], p[RR_A], p[RR_C], p[RR_W],
                            c->row->d[0], c->row->d[1], (float)LLAMA_EPS);
}

static void rr_reference(op_inst *c) {
    const size_t N = c->row->d[0], C = c->row->d[1];
    case_tensor *t = c->t;
    double *res = xmalloc(N * C * sizeof(double)), *out = xmalloc(N * C * sizeof(double));
    double *rstd = xmalloc(N * sizeof(double));
    // res rounded to float as the backend stores it, then normalised (the backends read it)
    for (size_t i = 0; i < N * C; i++) res[i] = (float)(t[RR_A].val[i] + t[RR_C].val[i]);
    ref_rmsnorm_rows(out, rstd, NULL, NULL, res, t[RR_W].val, NULL, N, C);
    ref_pick(&t[RR_A], res), ref_pick(&t[RR_OUT], out), ref_pick(&t[RR_RSTD], rstd);
    free(res), free(out), free(rstd);
}

static const op_family OP_RESIDUAL_RMSNORM = {rr_declare, rr_run, rr_reference, NULL};

// ---------------------------------------------------------------------------------------
// rope: d = {B, T, NH, NKV, HS, theta (0: 10000)}. rope_fwd on qkv in place, then rope_bwd on
// a gradient in place: the rotation of the q and k heads by +angle, and by -angle; the v
// heads untouched. The reference's angles and their cos and sin in double (the backends
// round cos and sin to float: one rounding more than the rotation's own, TOL_FEW).

enum { RP_QKV, RP_DQKV };

static double rp_theta(const op_case *r) { return r->d[5] ? (double)r->d[5] : 10000.0; }

static void rp_declare(op_inst *c) {
    const op_case *r = c->row;
    const size_t B = r->d[0], T = r->d[1], NH = r->d[2], NKV = r->d[3], HS = r->d[4];
    const size_t n = B * T * (NH + 2 * NKV) * HS;
    snprintf(c->name, sizeof c->name, "rope B=%zu T=%zu NH=%zu NKV=%zu HS=%zu theta=%g", B, T, NH,
             NKV, HS, rp_theta(r));
    inst_add(c, RP_QKV,
             TENSOR("fwd qkv (in place)", ROLE_INOUT, ELEM_F32, n, .lo = -2, .hi = 2,
                    .tol = TOL_FEW, .tol_cpu = TOL_FEW));
    inst_add(c, RP_DQKV,
             TENSOR("bwd dqkv (in place)", ROLE_INOUT, ELEM_F32, n, .lo = -1, .hi = 1,
                    .tol = TOL_FEW, .tol_cpu = TOL_FEW));
}

static void rp_run(backend *b, const op_inst *c, void *const *p) {
    const op_case *r = c->row;
    const float theta = (float)rp_theta(r);
    b->rope_fwd(b, p[RP_QKV], r->d[0], r->d[1], r->d[2], r->d[3], r->d[4], theta);
    b->rope_bwd(b, p[RP_DQKV], r->d[0], r->d[1], r->d[2], r->d[3], r->d[4], theta);
}

static void ref_rope_rows(double *y, const double *x, const op_case *r, double dir) {
    const int B = r->d[0], T = r->d[1], NH = r->d[2], NKV = r->d[3], HS = r->d[4];
    const size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const int half = HS / 2;
    const double theta = (double)(float)rp_theta(r); // the float the op takes
    memcpy(y, x, (size_t)B * T * ld * sizeof(double));
    for (size_t row = 0; row < (size_t)B * T; row++)
        for (int i = 0; i < half; i++) {
            const double a = (double)(row % T) * pow(theta, -2.0 * i / HS);
            const double cs = cos(a), sn = dir * sin(a);
            for (int h = 0; h < NH + NKV; h++) {
                const double *p = x + row * ld + (size_t)h * HS;
                double *q = y + row * ld + (size_t)h * HS;
                q[i] = p[i] * cs - p[i + half] * sn;
                q[i + half] = p[i + half] * cs + p[i] * sn;
            }
        }
}

static void rp_reference(op_inst *c) {
    case_tensor *t = c->t;
    double *y = xmalloc(t[RP_QKV].n * sizeof(double));
    ref_rope_rows(y, t[RP_QKV].val, c->row, 1.0);
    ref_pick(&t[RP_QKV], y);
    ref_rope_rows(y, t[RP_DQKV].val, c->row, -1.0);
    ref_pick(&t[RP_DQKV], y);
    free(y);
}

static const op_family OP_ROPE = {rp_declare, rp_run, rp_reference, NULL};

// ---------------------------------------------------------------------------------------
// swiglu: d = {N, F}. fc (N, 2F) rows [gate | up]; the forward out (N, F) = silu(gate) up,
// then the backward dfc (N, 2F) (overwritten) from dout.

enum { SG_FC, SG_OUT, SG_DOUT, SG_DFC };

static void sg_declare(op_inst *c) {
    const size_t N = c->row->d[0], F = c->row->d[1];
    snprintf(c->name, sizeof c->name, "swiglu N=%zu F=%zu", N, F);
    inst_add(c, SG_FC, TENSOR("fc", ROLE_IN, ELEM_F32, N * 2 * F, .lo = -6, .hi = 6));
    inst_add(c, SG_OUT,
             TENSOR("fwd out", ROLE_OUT, ELEM_F32, N * F, .tol = TOL_CHAIN, .tol_cpu = TOL_CHAIN));
    inst_add(c, SG_DOUT, TENSOR("dout", ROLE_IN, ELEM_F32, N * F, .lo = -1, .hi = 1));
    inst_add(c, SG_DFC,
             TENSOR("bwd dfc", ROLE_OUT, ELEM_F32, N * 2 * F, .grad = 1, .tol = TOL_CHAIN,
                    .tol_cpu = TOL_CHAIN));
}

static void sg_run(backend *b, const op_inst *c, void *const *p) {
    const int N = c->row->d[0], F = c->row->d[1];
    b->swiglu_fwd(b, p[SG_OUT], p[SG_FC], N, F);
    b->swiglu_bwd(b, p[SG_DFC], p[SG_DOUT], p[SG_FC], N, F);
}

static void sg_reference(op_inst *c) {
    const size_t N = c->row->d[0], F = c->row->d[1];
    case_tensor *t = c->t;
    double *out = xmalloc(N * F * sizeof(double)), *dfc = xmalloc(N * 2 * F * sizeof(double));
    for (size_t n = 0; n < N; n++)
        for (size_t i = 0; i < F; i++) {
            const double g = t[SG_FC].val[n * 2 * F + i], u = t[SG_FC].val[n * 2 * F + F + i];
            const double dy = t[SG_DOUT].val[n * F + i], sig = 1.0 / (1.0 + exp(-g));
            out[n * F + i] = g * sig * u;
            dfc[n * 2 * F + i] = dy * u * sig * (1.0 + g * (1.0 - sig));
            dfc[n * 2 * F + F + i] = dy * g * sig;
        }
    ref_pick(&t[SG_OUT], out), ref_pick(&t[SG_DFC], dfc);
    free(out), free(dfc);
}

static const op_family OP_SWIGLU = {sg_declare, sg_run, sg_reference, NULL};
