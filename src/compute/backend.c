// backend.c: the typed ops as callers use them (backend.h): the operands' dtype tags are
// checked here once for every backend, and the GELU of the MLP runs here as its own op
// wherever a backend did not fuse it into the GEMM, so that no backend repeats either.
#include "compute/backend.h"

// Every operand of one matmul or attention call is fp32, or every one bf16: the paths the
// backends have. Anything else is a caller's broken invariant, reported with the dtypes.
static void check_operands(const char *op, const operand *ops, const char *const *names, int n) {
    const tri_dtype dt = ops[0].dtype;
    int ok = dt == DTYPE_FP32 || dt == DTYPE_BF16;
    for (int i = 1; i < n; i++) ok &= ops[i].dtype == dt;
    if (ok) return;
    char got[160];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(got + len, sizeof got - len, "%s%s %s", i ? ", " : "", names[i],
                                dtype_name(ops[i].dtype));
    LOG_ERROR("%s: operands %s; a call takes fp32 operands only or bf16 operands only", op, got);
    TRI_ASSERT(!"operand dtypes that no backend path computes");
}

void backend_matmul_fwd(backend *b, float *out, float *gelu_pre, operand inp, operand weight,
                        const float *bias, int N, int IC, int OC) {
    static const char *const names[] = {"inp", "weight"};
    check_operands("matmul_fwd", (const operand[]){inp, weight}, names, 2);
    TRI_ASSERT(N >= 0 && IC >= 0 && OC >= 0);
    if (!b->matmul_fwd(b, out, gelu_pre, inp, weight, bias, N, IC, OC) && gelu_pre)
        b->gelu_fwd(b, out, gelu_pre, (size_t)N * OC);
}

void backend_matmul_bwd(backend *b, float *dinp, float *dweight, float *dbias, operand dout,
                        operand inp, operand weight, const float *gelu_pre, int N, int IC, int OC) {
    static const char *const names[] = {"dout", "inp", "weight"};
    check_operands("matmul_bwd", (const operand[]){dout, inp, weight}, names, 3);
    TRI_ASSERT(N >= 0 && IC >= 0 && OC >= 0);
    TRI_ASSERT(dinp || !gelu_pre); // the gradient at the GELU's input is dinp's
    TRI_ASSERT(dweight || !dbias); // split forms (backend.h): dbias only with dweight
    if (!b->matmul_bwd(b, dinp, dweight, dbias, dout, inp, weight, gelu_pre, N, IC, OC) && gelu_pre)
        b->gelu_bwd(b, dinp, gelu_pre, dinp, (size_t)N * IC);
}

void backend_matmul_fwd16(backend *b, uint16_t *out16, uint16_t *pre16, operand inp, operand weight,
                          const float *bias, int N, int IC, int OC) {
    static const char *const names[] = {"inp", "weight"};
    check_operands("matmul_fwd16", (const operand[]){inp, weight}, names, 2);
    TRI_ASSERT(inp.dtype == DTYPE_BF16 && N >= 0 && IC >= 0 && OC >= 0);
    b->matmul_fwd16(b, out16, pre16, inp, weight, bias, N, IC, OC);
}

void backend_matmul_bwd16(backend *b, uint16_t *dinp16, float *dweight, float *dbias, operand dout,
                          operand inp, operand weight, const uint16_t *pre16, int N, int IC,
                          int OC) {
    static const char *const names[] = {"dout", "inp", "weight"};
    check_operands("matmul_bwd16", (const operand[]){dout, inp, weight}, names, 3);
    TRI_ASSERT(dout.dtype == DTYPE_BF16 && N >= 0 && IC >= 0 && OC >= 0);
    TRI_ASSERT(dweight || !dbias); // split forms (backend.h): dbias only with dweight
    b->matmul_bwd16(b, dinp16, dweight, dbias, dout, inp, weight, pre16, N, IC, OC);
}

void backend_attention_fwd(backend *b, float *out, void *state, operand qkv, int B, int T, int NH,
                           int NKV, int HS, float rope_theta) {
    static const char *const names[] = {"qkv"};
    check_operands("attention_fwd", &qkv, names, 1);
    TRI_ASSERT(NKV >= 1 && NH % NKV == 0);
    TRI_ASSERT(rope_theta == 0.0f || (b->attn_rope && rope_theta > 0.0f && HS % 2 == 0));
    b->attention_fwd(b, out, state, qkv, B, T, NH, NKV, HS, rope_theta);
}

void backend_attention_bwd(backend *b, float *dqkv, const float *dout, operand qkv, operand out,
                           const void *state, int B, int T, int NH, int NKV, int HS,
                           float rope_theta) {
    static const char *const names[] = {"qkv", "out"};
    check_operands("attention_bwd", (const operand[]){qkv, out}, names, 2);
    TRI_ASSERT(NKV >= 1 && NH % NKV == 0);
    TRI_ASSERT(rope_theta == 0.0f || (b->attn_rope && rope_theta > 0.0f && HS % 2 == 0));
    b->attention_bwd(b, dqkv, dout, qkv, out, state, B, T, NH, NKV, HS, rope_theta);
}

int backend_set_tf32(backend *b, int on) {
    b->tf32 = b->has_tf32 && on;
    return b->tf32;
}
