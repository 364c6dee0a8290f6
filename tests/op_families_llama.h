// op_families_llama.h: the op families of the Llama ops (backend.h rmsnorm_fwd / _bwd,
// residual_rmsnorm_fwd, rope_fwd / _bwd, swiglu_fwd / _bwd), included by tests/op_cases.h
// after op_families.h, so that tests/test_ops.c checks them on the CPU against these double
// references and tests/gpu/test_gpu_ops twins CUDA against the CPU on the same rows. Their
// finite-difference checks are tests/test_ops_llama.c's (on the CPU); the references here are
// the analytic double forms. Grouped-query attention is OP_ATTENTION's d[4] (op_families.h).

#include "compute/rope_math.h"

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

// y = x with the q and k heads rotated (dir 1) or unrotated (dir -1), in double.
static void ref_rope(double *y, const double *x, int B, int T, int NH, int NKV, int HS,
                     double theta, double dir) {
    const size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const int half = HS / 2;
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

static void ref_rope_rows(double *y, const double *x, const op_case *r, double dir) {
    ref_rope(y, x, r->d[0], r->d[1], r->d[2], r->d[3], r->d[4], (double)(float)rp_theta(r), dir);
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
// attention with RoPE: d = {B, T, NH, HS, NKV (0: NH), theta (0: 10000)}, qkv of the row's dtype
// and unrotated: what a llama layer computes from its qkv activation to dqkv. On a backend whose
// attention rotates q and k itself (backend.attn_rope: CUDA, which fuses the rotation into every
// attention kernel) attention_fwd / _bwd given theta; elsewhere the model's separate ops: the
// rotation (rope_fwd) on a copy of qkv, rounded to bf16 after under bf16 as the model keeps
// it, the attention of that, its backward, then rope_bwd on dqkv. The reference rotates in
// double (under bf16: in float by rope_math.h's table and rule, then rounded, as both backends
// compute what they round), runs the double attention and unrotates its dqkv in double.

enum { AR_QKV, AR_OUT, AR_DOUT, AR_DQKV };

static double ar_theta(const op_case *r) { return r->d[5] ? (double)r->d[5] : 10000.0; }

static void ar_declare(op_inst *c) {
    const op_case *r = c->row;
    const size_t B = r->d[0], T = r->d[1], NH = r->d[2], HS = r->d[3], C = NH * HS;
    const size_t NKV = r->d[4] ? (size_t)r->d[4] : NH, W = (NH + 2 * NKV) * HS;
    const double tol_cpu = r->dtype == DTYPE_BF16 ? TOL_BF16_TC : TOL_CHAIN;
    snprintf(c->name, sizeof c->name, "attention+rope%s B=%zu T=%zu NH=%zu NKV=%zu HS=%zu theta=%g",
             dtype_tag(r), B, T, NH, NKV, HS, ar_theta(r));
    inst_add(c, AR_QKV, TENSOR("qkv", ROLE_IN, operand_kind(r), B * T * W, .lo = -2, .hi = 2));
    inst_add(
        c, AR_OUT,
        TENSOR("fwd out", ROLE_OUT, ELEM_F32, B * T * C, .tol = TOL_CHAIN, .tol_cpu = tol_cpu));
    inst_add(c, AR_DOUT, TENSOR("dout", ROLE_IN, ELEM_F32, B * T * C, .lo = -1, .hi = 1));
    inst_add(c, AR_DQKV,
             TENSOR("bwd dqkv", ROLE_OUT, ELEM_F32, B * T * W, .grad = 1, .tol = TOL_CHAIN,
                    .tol_cpu = tol_cpu));
}

static void ar_run(backend *b, const op_inst *c, void *const *p) {
    const int B = c->row->d[0], T = c->row->d[1], NH = c->row->d[2], HS = c->row->d[3];
    const int NKV = c->row->d[4] ? c->row->d[4] : NH, bf16 = c->row->dtype == DTYPE_BF16;
    const float theta = (float)ar_theta(c->row);
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS;
    void *state = b->alloc(b, attn_state_bytes(b->attn_state, B, T, NH));
    uint16_t *out16 = bf16 ? b->alloc(b, nout * sizeof(uint16_t) + 8) : NULL;
    float *rot = b->attn_rope ? NULL : b->alloc(b, n * sizeof(float));
    uint16_t *rot16 = !b->attn_rope && bf16 ? b->alloc(b, n * sizeof(uint16_t) + 16) : NULL;
    operand qkv = {p[AR_QKV], c->row->dtype};
    if (rot) { // the model's separate rotation, what it keeps rounded under bf16
        if (bf16) b->from_bf16(b, rot, p[AR_QKV], n);
        else b->copy(b, rot, p[AR_QKV], n * sizeof(float));
        b->rope_fwd(b, rot, B, T, NH, NKV, HS, theta);
        qkv = operand_fp32(rot);
        if (rot16) {
            b->to_bf16(b, rot16, rot, n);
            qkv = operand_bf16(rot16);
        }
    }
    const float fused = b->attn_rope ? theta : 0.0f;
    backend_attention_fwd(b, p[AR_OUT], state, qkv, B, T, NH, NKV, HS, fused);
    operand out = operand_fp32(p[AR_OUT]);
    if (out16) {
        b->to_bf16(b, out16, p[AR_OUT], nout);
        out = operand_bf16(out16);
    }
    backend_attention_bwd(b, p[AR_DQKV], p[AR_DOUT], qkv, out, state, B, T, NH, NKV, HS, fused);
    if (rot) b->rope_bwd(b, p[AR_DQKV], B, T, NH, NKV, HS, theta);
    b->free(b, state);
    if (out16) b->free(b, out16);
    if (rot) b->free(b, rot);
    if (rot16) b->free(b, rot16);
}

static void ar_reference(op_inst *c) {
    const int B = c->row->d[0], T = c->row->d[1], NH = c->row->d[2], HS = c->row->d[3];
    const int NKV = c->row->d[4] ? c->row->d[4] : NH;
    const double theta = (double)(float)ar_theta(c->row);
    case_tensor *t = c->t;
    const size_t n = t[AR_QKV].n, n3 = (size_t)B * T * 3 * NH * HS;
    double *rot = xmalloc(n * sizeof(double)), *full = xmalloc(n3 * sizeof(double));
    double *mha = NULL, *grad = xmalloc(n * sizeof(double));
    ref_rope(rot, t[AR_QKV].val, B, T, NH, NKV, HS, theta, 1.0);
    if (c->row->dtype == DTYPE_BF16) { // float rotation of the bf16 values, then rounded
        float *tab = xmalloc(rope_table_floats(T, HS) * sizeof(float));
        rope_table_fill(tab, T, HS, theta);
        const size_t ld = (size_t)(NH + 2 * NKV) * HS;
        for (size_t k = 0; k < n; k++) {
            const int d = (int)(k % ld % HS), h = (int)(k % ld / HS);
            if (h >= NH + NKV) continue; // v
            const float *cs = tab + rope_at((int)(k / ld % T), rope_pair(d, HS), HS);
            const float x = (float)t[AR_QKV].val[k];
            const float y = (float)t[AR_QKV].val[k - d + rope_partner(d, HS)];
            rot[k] = bf16_to_f32(bf16_from_f32(rope_rotated(x, y, cs[0], cs[1], d, HS, 1.0f)));
        }
        free(tab);
    }
    const double *q = rot;
    if (NKV != NH) ref_gqa_expand(mha = xmalloc(n3 * sizeof(double)), rot, B, T, NH, NKV, HS);
    if (mha) q = mha;
    ref_attention(full, NULL, q, B, T, NH, HS);
    ref_pick(&t[AR_OUT], full);
    ref_attention_bwd(full, t[AR_DOUT].val, q, B, T, NH, HS);
    if (mha) ref_gqa_fold(grad, full, B, T, NH, NKV, HS);
    else memcpy(grad, full, n * sizeof(double));
    ref_rope(rot, grad, B, T, NH, NKV, HS, theta, -1.0); // the gradient of the unrotated q, k
    ref_pick(&t[AR_DQKV], rot);
    free(rot), free(full), free(mha), free(grad);
}

static const op_family OP_ATTN_ROPE = {ar_declare, ar_run, ar_reference, NULL};

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
