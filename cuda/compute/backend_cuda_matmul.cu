// backend_cuda_matmul.cu: the linear layers of the CUDA backend on cuBLASLt.
//
// backend.h's row-major (rows, cols) arrays are cuBLASLt's column-major (cols, rows), so
// every product is written transposed (^T below is the column-major view):
//   out^T (OC, N)            = W (OC, IC) x inp^T (IC, N)                A = W,    transa T
//             with the BIAS epilogue adding bias (OC) to every column
//   dinp^T (IC, N)           = W^T (IC, OC) x dout^T (OC, N)             A = W,    no trans
//   dweight^T (IC, OC)      += inp^T (IC, N) x dout (N, OC)              B = dout, transb T
//             beta = 1 (backward ops accumulate), with the BGRADB epilogue summing op(B) =
//             dout over the k = N dimension: the bias gradient (OC)
// BGRADB writes its result, so it goes to device scratch and is added into dbias after.
// Where cuBLASLt offers no algorithm for an epilogue (a bias pointer that is not 16-byte
// aligned, or a shape its heuristics refuse), the bias is broadcast into out first and the
// GEMM accumulates on it (beta = 1), and dbias comes from an ordered column-sum kernel.
//
// Plans: descriptors, layouts and the algorithm the heuristic picks are made once per
// distinct (operation, shape, compute type, epilogue, pointer alignments) and cached, so a
// step costs no heuristic queries after the first, and the same GEMM always runs the same
// algorithm (bitwise reproducible). The alignment of every pointer (A, B, D, the bias and
// the GELU aux matrix) is part of the key, and the heuristic is asked with the epilogue's
// pointers already set, because cuBLASLt reads the alignments it may assume off them (its
// heuristics assume 256-byte aligned pointers unless told otherwise, and parameters carved
// out of one buffer are aligned only to their offsets).
//
// Compute type of fp32 operands: CUBLAS_COMPUTE_32F (full fp32 FMA) by default;
// CUBLAS_COMPUTE_32F_FAST_TF32 with train.precision tf32 or TRIDENT_CUDA_TF32=1 (see
// backend_cuda.cu). TRIDENT_TEST_CUDA_FALLBACK=1 refuses every epilogue and every bf16
// algorithm, so that the GPU checks run each fallback below.
//
// bf16 operands (operand tags DTYPE_BF16; train.precision bf16): A and B are
// CUDA_R_16BF, D (and C, the accumulated one) stays CUDA_R_32F, with CUBLAS_COMPUTE_32F:
// tensor-core products accumulated in fp32. The bias (BIAS) and the bias gradient (BGRADB)
// are of D's type, fp32, as the fp32 path's are. Where cuBLASLt has no bf16 algorithm at all
// (operands only 2-byte aligned, as ZeRO-3's gathered buckets can leave them, or leading
// dimensions its tensor-core kernels refuse), that GEMM runs in the fallback kernel of
// backend_cuda_gemm.cu, which reads the bf16 operands in place: the same exact products and
// no extra memory, so only speed differs.
//
// bf16 outputs (matmul_fwd16 / _bwd16, TRIDENT_CUDA_BF16_PATH=fused): D is CUDA_R_16BF, the
// bias stays fp32 (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), and the GELU epilogues' aux takes
// D's type, bf16 (the default of EPILOGUE_AUX_DATA_TYPE): the forward writes bf16(gelu(pre))
// and bf16(pre) from the fp32 accumulator, DGELU reads the bf16 pre. Where cuBLASLt has no
// such algorithm, the fp32-output path above (cuBLASLt, or the fallback GEMM reading the bf16
// operands in place) runs over chunks of rows into the op workspace (cuda_ws_matmul_out16,
// reserved at start) and one kernel rounds each chunk (and applies the GELU or its
// derivative): the same values, one extra pass, no allocation.
#include "backend_cuda_internal.cuh"
#include "base/env.h"

#include <stdint.h>
#include <string.h>

struct cuda_lt_plan {
    // key
    cublasOperation_t ta, tb;
    cudaDataType_t ab; // A's and B's element type: CUDA_R_32F or CUDA_R_16BF
    cudaDataType_t dt; // D's (and the GELU aux's): CUDA_R_32F (0, memset keys) or CUDA_R_16BF
    cublasComputeType_t compute; // _32F, or _32F_FAST_TF32 for fp32 operands in TF32
    int m, n, k, lda, ldb, ldd;
    cublasLtEpilogue_t epilogue;
    int align_a, align_b, align_d;
    int align_aux;  // the GELU epilogues' auxiliary matrix (0: none)
    int align_bias; // the bias (BIAS) or bias-gradient (BGRADB) vector (0: none)
    // Not part of the key: the pointers the heuristic sees at build time (their alignments
    // are in the key); every launch sets the real ones.
    const void *aux, *bias;
    // value
    int supported; // 0: no algorithm for this epilogue (the caller falls back)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};

static void lt_report(cublasStatus_t st, const char *stmt, const char *file, int line) {
    LOG_ERROR("cuBLASLt call '%s' failed at %s:%d on rank %d (device %d): %s [%s]", stmt, file,
              line, cuda_log_rank(), cuda_current_device(), cublasLtGetStatusString(st),
              cublasLtGetStatusName(st));
}

// In an op: report and abort (backend_cuda_internal.cuh).
static void lt_op_check(cublasStatus_t st, const char *stmt, const char *file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    lt_report(st, stmt, file, line);
    cuda_op_fail("a cuBLASLt call", stmt, file, line);
}
#define LT_OP_CHECK(call) lt_op_check((call), #call, __FILE__, __LINE__)

// Largest power of two <= 256 dividing the address (at least 2: a bf16 element's size).
static int ptr_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 2 && a % (uintptr_t)al) al /= 2;
    return al;
}

static void plan_destroy(cuda_lt_plan *p) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
}

static int gelu_epilogue_matches(cuda_ctx *x); // below, with the GELU ops

tri_status cuda_matmul_init(cuda_ctx *x) {
    cublasStatus_t st = cublasLtCreate(&x->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        lt_report(st, "cublasLtCreate(&x->lt)", __FILE__, __LINE__);
        x->lt = NULL;
        return TRI_ERR_INTERNAL;
    }
    cuda_count_alloc(x);
    CUDA_CHECK(cudaMalloc(&x->lt_workspace, CUDA_LT_WORKSPACE_BYTES));
    x->lt_workspace_bytes = CUDA_LT_WORKSPACE_BYTES;
    x->plans = (cuda_lt_plan *)xcalloc(CUDA_LT_MAX_PLANS, sizeof(cuda_lt_plan));
    x->n_plans = 0;
    x->gelu_epilogue = gelu_epilogue_matches(x);
    static const char *const paths[] = {"fused", "v1"};
    const int k = env_choice(ENV_TRIDENT_CUDA_BF16_PATH, paths, 2, 0);
    if (k < 0) {
        LOG_ERROR("TRIDENT_CUDA_BF16_PATH=%s: the CUDA bf16 data paths are fused or v1",
                  env_get(ENV_TRIDENT_CUDA_BF16_PATH));
        LOG_HINT("unset it for the default (fused); v1 selects the previous path (fp32 matmul "
                 "outputs rounded by a separate pass), to bisect a failing device run (README "
                 "\"Environment variables\")");
        return TRI_ERR_CONFIG;
    }
    x->bf16_out = k == 0;
    return TRI_OK;
}

void cuda_matmul_free(cuda_ctx *x) {
    if (x->plans)
        for (int i = 0; i < x->n_plans; i++) plan_destroy(&x->plans[i]);
    free(x->plans);
    x->plans = NULL;
    x->n_plans = 0;
    if (x->lt_workspace) cudaFree(x->lt_workspace);
    x->lt_workspace = NULL;
    if (x->lt) cublasLtDestroy(x->lt);
    x->lt = NULL;
}

// Descriptors of a new plan and the heuristic's choice for it.
static void plan_build(cuda_ctx *x, cuda_lt_plan *p) {
    LT_OP_CHECK(cublasLtMatmulDescCreate(&p->desc, p->compute, CUDA_R_32F));
    LT_OP_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &p->ta, sizeof p->ta));
    LT_OP_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &p->tb, sizeof p->tb));
    LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p->epilogue,
                                               sizeof p->epilogue));
    // op(A) is (m, k), op(B) is (k, n), D is (m, n); the stored shapes follow the transposes.
    const int ta = p->ta == CUBLAS_OP_T, tb = p->tb == CUBLAS_OP_T;
    LT_OP_CHECK(
        cublasLtMatrixLayoutCreate(&p->la, p->ab, ta ? p->k : p->m, ta ? p->m : p->k, p->lda));
    LT_OP_CHECK(
        cublasLtMatrixLayoutCreate(&p->lb, p->ab, tb ? p->n : p->k, tb ? p->k : p->n, p->ldb));
    LT_OP_CHECK(cublasLtMatrixLayoutCreate(&p->ld, p->dt, p->m, p->n, p->ldd));
    if (p->dt != CUDA_R_32F) { // a bf16 D: the bias (and bias gradient) stays fp32
        const int32_t bias_type = CUDA_R_32F;
        LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_type, sizeof bias_type));
    }
    // The epilogue's pointers before the heuristic: cuBLASLt reads their alignment off them
    // (cublasLt.h: routines that do not dereference a pointer still depend on its value).
    if (p->align_bias)
        LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &p->bias, sizeof p->bias));
    if (p->align_aux) { // GELU_AUX(_BIAS) writes, DGELU reads, a matrix of D's type and shape
        const int64_t aux_ld = p->ldd;
        LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &aux_ld, sizeof aux_ld));
        LT_OP_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p->aux, sizeof p->aux));
    }

    cublasLtMatmulPreference_t pref;
    if (x->fallback_forced && (p->epilogue != CUBLASLT_EPILOGUE_DEFAULT || p->ab == CUDA_R_16BF)) {
        p->supported = 0; // TRIDENT_TEST_CUDA_FALLBACK=1: the fallback, as if none existed
        return;
    }
    LT_OP_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LT_OP_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &x->lt_workspace_bytes,
                                                     sizeof x->lt_workspace_bytes));
    const uint32_t al[4] = {(uint32_t)p->align_a, (uint32_t)p->align_b, (uint32_t)p->align_d,
                            (uint32_t)p->align_d};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        LT_OP_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(x->lt, p->desc, p->la, p->lb, p->ld, p->ld,
                                                       pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    p->supported = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->supported) p->algo = result.algo;
    else if (p->epilogue == CUBLASLT_EPILOGUE_DEFAULT && p->ab == CUDA_R_32F) {
        LOG_ERROR("cuBLASLt has no %s algorithm for a (%d x %d x %d) GEMM with alignments "
                  "%d/%d/%d bytes (%s)",
                  p->ab == CUDA_R_16BF ? "bf16" : "fp32", p->m, p->n, p->k, p->align_a, p->align_b,
                  p->align_d,
                  st == CUBLAS_STATUS_SUCCESS ? "no result" : cublasLtGetStatusString(st));
        cuda_op_fail("choosing a GEMM algorithm", "cublasLtMatmulAlgoGetHeuristic", __FILE__,
                     __LINE__);
    } else {
        LOG_DEBUG("cuBLASLt: epilogue %d unsupported for (%d x %d x %d); using the fallback",
                  (int)p->epilogue, p->m, p->n, p->k);
    }
}

static cuda_lt_plan *plan_get(cuda_ctx *x, const cuda_lt_plan *key) {
    for (int i = 0; i < x->n_plans; i++) {
        cuda_lt_plan *p = &x->plans[i];
        if (p->ta == key->ta && p->tb == key->tb && p->ab == key->ab && p->dt == key->dt &&
            p->m == key->m && p->n == key->n && p->k == key->k && p->lda == key->lda &&
            p->ldb == key->ldb && p->ldd == key->ldd && p->epilogue == key->epilogue &&
            p->align_a == key->align_a && p->align_b == key->align_b &&
            p->align_d == key->align_d && p->align_aux == key->align_aux &&
            p->align_bias == key->align_bias && p->compute == key->compute)
            return p;
    }
    if (x->n_plans == CUDA_LT_MAX_PLANS) { // more shapes than any model has: start over
        for (int i = 0; i < x->n_plans; i++) plan_destroy(&x->plans[i]);
        x->n_plans = 0;
    }
    cuda_lt_plan *p = &x->plans[x->n_plans++];
    *p = *key;
    p->desc = NULL, p->la = p->lb = p->ld = NULL;
    plan_build(x, p);
    return p;
}

// D (m, n) = op(A) op(B) + beta D, column-major, A and B of type `ab`, with `epilogue`
// (bias: its vector or bias gradient, NULL for none; aux: the GELU epilogues' matrix, NULL
// for the others). The cached plan of such a GEMM (built on first use): every pointer's
// alignment is in the key, and the heuristic saw pointers of those alignments.
static cuda_lt_plan *plan_for(cuda_ctx *x, cudaDataType_t ab, cublasOperation_t ta,
                              cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                              const void *B, int ldb, const float *D, int ldd,
                              cublasLtEpilogue_t epilogue, const float *bias, const float *aux) {
    cuda_lt_plan key;
    memset(&key, 0, sizeof key);
    key.ta = ta, key.tb = tb, key.ab = ab, key.m = m, key.n = n, key.k = k;
    // bf16 operands accumulate in plain fp32 (TF32 applies to fp32 operands only).
    key.compute = ab == CUDA_R_16BF ? CUBLAS_COMPUTE_32F : x->compute;
    key.lda = lda, key.ldb = ldb, key.ldd = ldd, key.epilogue = epilogue;
    key.align_a = ptr_alignment(A), key.align_b = ptr_alignment(B), key.align_d = ptr_alignment(D);
    key.align_aux = aux ? ptr_alignment(aux) : 0, key.aux = aux;
    key.align_bias = bias ? ptr_alignment(bias) : 0, key.bias = bias;
    return plan_get(x, &key);
}

// Returns 0, having done nothing, when cuBLASLt has no algorithm for that epilogue.
static int lt_matmul_aux(cuda_ctx *x, cudaDataType_t ab, cublasOperation_t ta, cublasOperation_t tb,
                         int m, int n, int k, const void *A, int lda, const void *B, int ldb,
                         float *D, int ldd, float beta, cublasLtEpilogue_t epilogue,
                         const float *bias, const float *aux) {
    cuda_lt_plan *p = plan_for(x, ab, ta, tb, m, n, k, A, lda, B, ldb, D, ldd, epilogue, bias, aux);
    if (!p->supported) return 0;
    if (bias)
        LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias, sizeof bias));
    if (aux)
        LT_OP_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    const float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatmul(x->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->ld,
                                       D, p->ld, &p->algo, x->lt_workspace, x->lt_workspace_bytes,
                                       x->stream);
    // An epilogue refused at launch (checked before anything runs) takes the fallback too.
    if (st == CUBLAS_STATUS_NOT_SUPPORTED && epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        LOG_DEBUG("cuBLASLt: epilogue %d refused at launch for (%d x %d x %d); using the "
                  "fallback",
                  (int)epilogue, m, n, k);
        p->supported = 0;
        return 0;
    }
    LT_OP_CHECK(st);
    return 1;
}

static int lt_matmul(cuda_ctx *x, cudaDataType_t ab, cublasOperation_t ta, cublasOperation_t tb,
                     int m, int n, int k, const void *A, int lda, const void *B, int ldb, float *D,
                     int ldd, float beta, cublasLtEpilogue_t epilogue, const float *bias) {
    return lt_matmul_aux(x, ab, ta, tb, m, n, k, A, lda, B, ldb, D, ldd, beta, epilogue, bias,
                         NULL);
}

// D = op(A) op(B) + beta D without epilogue: cuBLASLt's algorithm, or where it has none for
// bf16 operands (pointers only 2-byte aligned, as ZeRO-3's gathered buckets can leave them,
// or leading dimensions its kernels refuse) the fallback kernel, which reads the bf16
// operands as they are (backend_cuda_gemm.cu): the same exact products, fp32 sums in a fixed
// order, no widened copies. fp32 operands always have an algorithm (plan_build aborts
// otherwise).
static void gemm(cuda_ctx *x, cudaDataType_t ab, cublasOperation_t ta, cublasOperation_t tb, int m,
                 int n, int k, const void *A, int lda, const void *B, int ldb, float *D, int ldd,
                 float beta) {
    if (lt_matmul(x, ab, ta, tb, m, n, k, A, lda, B, ldb, D, ldd, beta, CUBLASLT_EPILOGUE_DEFAULT,
                  NULL))
        return;
    TRI_ASSERT(ab == CUDA_R_16BF);
    cuda_gemm_bf16_fallback(x, ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, (const uint16_t *)A,
                            lda, (const uint16_t *)B, ldb, D, ldd, beta);
}

// The forward for operands of type ab.
static void matmul_fwd(cuda_ctx *x, cudaDataType_t ab, float *out, const void *inp,
                       const void *weight, const float *bias, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) { // an empty product: the bias alone
        if (bias) cuda_broadcast_rows(x, out, bias, N, OC);
        else CUDA_OP_CHECK(cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(float), x->stream));
        return;
    }
    // The epilogue reads the bias with vector loads: only a 16-byte aligned one is offered.
    if (bias && ptr_alignment(bias) >= 16 &&
        lt_matmul(x, ab, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC, 0.0f,
                  CUBLASLT_EPILOGUE_BIAS, bias))
        return;
    float beta = 0.0f;
    if (bias) {
        cuda_broadcast_rows(x, out, bias, N, OC);
        beta = 1.0f;
    }
    gemm(x, ab, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC, beta);
}

// The backward for operands of type ab.
static void matmul_bwd(cuda_ctx *x, cudaDataType_t ab, float *dinp, float *dweight, float *dbias,
                       const void *dout, const void *inp, const void *weight, int N, int IC,
                       int OC) {
    if (N <= 0 || OC <= 0 || IC <= 0) {
        // Nothing accumulates; dinp (overwritten) is all zero when OC is 0.
        if (dinp && N > 0 && IC > 0)
            CUDA_OP_CHECK(cudaMemsetAsync(dinp, 0, (size_t)N * IC * sizeof(float), x->stream));
        return;
    }
    if (dinp)
        gemm(x, ab, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC, dout, OC, dinp, IC, 0.0f);
    // The input gradient alone (backend.h's split form): dbias comes only with dweight.
    if (!dweight) return;
    if (dbias) {
        float *dbias_step = (float *)cuda_scratch(x, cuda_ws_bias_grad((size_t)OC));
        if (lt_matmul(x, ab, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, dweight, IC,
                      1.0f, CUBLASLT_EPILOGUE_BGRADB, dbias_step)) {
            cuda_add_inplace(x, dbias, dbias_step, (size_t)OC);
            return;
        }
    }
    gemm(x, ab, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, dweight, IC, 1.0f);
    if (dbias && ab == CUDA_R_16BF)
        cuda_column_sums_add_bf16(x, dbias, (const uint16_t *)dout, N, OC);
    else if (dbias) cuda_column_sums_add(x, dbias, (const float *)dout, N, OC);
}

// Does cuBLASLt have a bf16 algorithm (without epilogue) for a GEMM of this shape and these
// operands? The plan is cached, so asking costs nothing after the first time. (The GELU
// epilogues are tried only where it does.)
static int bf16_supported(cuda_ctx *x, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                          int k, const void *A, int lda, const void *B, int ldb, const float *D,
                          int ldd) {
    return plan_for(x, CUDA_R_16BF, ta, tb, m, n, k, A, lda, B, ldb, D, ldd,
                    CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL)
        ->supported;
}

// The forward and the backward of the operands' dtype (backend_matmul_fwd / _bwd checked
// that they agree), without GELU.
static void matmul_fwd_typed(cuda_ctx *x, float *out, operand inp, operand weight,
                             const float *bias, int N, int IC, int OC) {
    matmul_fwd(x, inp.dtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F, out, inp.ptr, weight.ptr,
               bias, N, IC, OC);
}

static void matmul_bwd_typed(cuda_ctx *x, float *dinp, float *dweight, float *dbias, operand dout,
                             operand inp, operand weight, int N, int IC, int OC) {
    matmul_bwd(x, dout.dtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F, dinp, dweight, dbias,
               dout.ptr, inp.ptr, weight.ptr, N, IC, OC);
}

// ---- bf16 outputs ----

// D (m, n) bf16 = op(A) op(B) with bf16 A, B and `epilogue` (bias fp32; aux bf16, NULL for
// the epilogues without one), beta 0. Returns 0, having done nothing, without an algorithm.
static int lt_matmul_d16(cuda_ctx *x, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, const void *A, int lda, const void *B, int ldb, uint16_t *D,
                         int ldd, cublasLtEpilogue_t epilogue, const float *bias,
                         const uint16_t *aux) {
    cuda_lt_plan key;
    memset(&key, 0, sizeof key);
    key.ta = ta, key.tb = tb, key.ab = CUDA_R_16BF, key.dt = CUDA_R_16BF;
    key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
    key.epilogue = epilogue;
    key.align_a = ptr_alignment(A), key.align_b = ptr_alignment(B), key.align_d = ptr_alignment(D);
    key.compute = CUBLAS_COMPUTE_32F; // bf16 operands: fp32 accumulation, never TF32
    key.align_aux = aux ? ptr_alignment(aux) : 0, key.aux = aux;
    key.align_bias = bias ? ptr_alignment(bias) : 0, key.bias = bias;
    cuda_lt_plan *p = plan_get(x, &key);
    if (!p->supported) return 0;
    if (bias)
        LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias, sizeof bias));
    if (aux)
        LT_OP_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasLtMatmul(x->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->ld,
                                       D, p->ld, &p->algo, x->lt_workspace, x->lt_workspace_bytes,
                                       x->stream);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) { // refused at launch: the caller's fallback
        LOG_DEBUG("cuBLASLt: bf16 output with epilogue %d refused at launch for (%d x %d x %d); "
                  "using the fallback",
                  (int)epilogue, m, n, k);
        p->supported = 0;
        return 0;
    }
    LT_OP_CHECK(st);
    return 1;
}

void cuda_matmul_fwd16(backend *b, uint16_t *out16, uint16_t *pre16, operand inp, operand weight,
                       const float *bias, int N, int IC, int OC) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (N <= 0 || OC <= 0) return;
    // The epilogue reads the bias with vector loads (16-byte aligned only); the GELU aux
    // needs its leading dimension a multiple of 8 and the GELU probe's match.
    const int can = IC > 0 && (!bias || ptr_alignment(bias) >= 16);
    cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (pre16) epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (can && (!pre16 || (x->gelu_epilogue && OC % 8 == 0)) &&
        lt_matmul_d16(x, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight.ptr, IC, inp.ptr, IC, out16,
                      OC, epi, bias, pre16))
        return;
    // No bf16-D algorithm: the fp32-output path (matmul_fwd: cuBLASLt or the fallback GEMM)
    // a chunk of rows at a time into the op workspace, each rounded (and GELU'd) after it.
    // matmul_fwd itself asks for no workspace, so the chunk may take the scratch.
    const size_t chunk = cuda_out16_chunk_rows((size_t)N, (size_t)OC);
    float *pre = (float *)cuda_scratch(x, cuda_ws_matmul_out16((size_t)N, (size_t)OC));
    const cudaDataType_t ab = inp.dtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const char *in = (const char *)inp.ptr;
    for (size_t r0 = 0; r0 < (size_t)N; r0 += chunk) {
        const size_t rows = (size_t)N - r0 < chunk ? (size_t)N - r0 : chunk;
        const size_t at = r0 * (size_t)OC;
        matmul_fwd(x, ab, pre, in + r0 * IC * dtype_size(inp.dtype), weight.ptr, bias, (int)rows,
                   IC, OC);
        cuda_round_gelu(x, out16 + at, pre16 ? pre16 + at : NULL, pre, rows * (size_t)OC);
    }
}

void cuda_matmul_bwd16(backend *b, uint16_t *dinp16, float *dweight, float *dbias, operand dout,
                       operand inp, operand weight, const uint16_t *pre16, int N, int IC, int OC) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (!dinp16) { // the weight gradients only (backend.h's split form): the same GEMMs
        matmul_bwd_typed(x, NULL, dweight, dbias, dout, inp, weight, N, IC, OC);
        return;
    }
    const cublasLtEpilogue_t epi = pre16 ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
    const int direct = N > 0 && OC > 0 && IC > 0 && (!pre16 || (x->gelu_epilogue && IC % 8 == 0)) &&
                       lt_matmul_d16(x, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight.ptr, IC,
                                     dout.ptr, OC, dinp16, IC, epi, NULL, pre16);
    // The weight and bias gradients (their own workspace, in stream order before the chunks
    // below take it).
    matmul_bwd_typed(x, NULL, dweight, dbias, dout, inp, weight, N, IC, OC);
    if (direct || N <= 0 || IC <= 0) return;
    // No bf16-D algorithm: dinp's fp32 GEMM (cuBLASLt or the fallback GEMM, no workspace of
    // its own) a chunk of rows at a time into the op workspace, each rounded (times
    // gelu_tanh'(pre16)) after it. OC 0: an empty product, zeros.
    const size_t chunk = cuda_out16_chunk_rows((size_t)N, (size_t)IC);
    float *d = (float *)cuda_scratch(x, cuda_ws_matmul_out16((size_t)N, (size_t)IC));
    const cudaDataType_t ab = dout.dtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const char *dptr = (const char *)dout.ptr;
    for (size_t r0 = 0; r0 < (size_t)N; r0 += chunk) {
        const size_t rows = (size_t)N - r0 < chunk ? (size_t)N - r0 : chunk;
        const size_t at = r0 * (size_t)IC;
        if (OC > 0)
            gemm(x, ab, CUBLAS_OP_N, CUBLAS_OP_N, IC, (int)rows, OC, weight.ptr, IC,
                 dptr + r0 * OC * dtype_size(dout.dtype), OC, d, IC, 0.0f);
        else CUDA_OP_CHECK(cudaMemsetAsync(d, 0, rows * IC * sizeof(float), x->stream));
        cuda_gelu_bwd_round(x, dinp16 + at, d, pre16 ? pre16 + at : NULL, rows * (size_t)IC);
    }
}

// ---- the GELU epilogues ----

// gelu_tanh and its derivative (the CPU backend's formulas), in double.
static double gelu_ref(double v) {
    const double u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    return 0.5 * v * (1.0 + tanh(u));
}
static double dgelu_ref(double v) {
    const double u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    const double du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * v * v), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
}

// Are cuBLASLt's GELU epilogues the model's gelu_tanh? cuBLAS documents only "GELU", and the
// exact (erf) form differs by up to ~1e-3: a 64^3 GEMM with GELU_AUX_BIAS must give
// out = gelu_tanh(aux), and one with DGELU must give gelu_tanh'(pre) times the plain GEMM,
// both within 1e-5 of their largest value, checked on the host. Otherwise (or when
// cuBLASLt offers neither epilogue) the GELU runs in its own kernels.
static int gelu_epilogue_matches(cuda_ctx *x) {
    const int n = 64;
    const size_t nn = (size_t)n * n, n_in = 3 * nn + n, n_out = 4 * nn;
    // host: A, B, pre (in [-1, 1)), bias; then the results: out, aux, the DGELU GEMM, plain
    float *h = (float *)xmalloc((n_in + n_out) * sizeof(float)), *dev = NULL;
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < n_in; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    int ok = 0;
    cuda_count_alloc(x);
    if (cudaMalloc((void **)&dev, (n_in + n_out) * sizeof(float)) != cudaSuccess) {
        free(h);
        return 0;
    }
    float *A = dev, *B = A + nn, *pre = B + nn, *bias = pre + nn, *D = bias + n, *aux = D + nn;
    float *D0 = aux + nn;
    const float *h_pre = h + 2 * nn, *hA = h + n_in, *hB = hA + nn, *hD = hB + nn, *hD0 = hD + nn;
    CUDA_OP_CHECK(cudaMemcpyAsync(A, h, n_in * sizeof(float), cudaMemcpyHostToDevice, x->stream));
    if (lt_matmul_aux(x, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, A, n, B, n, D, n, 0.0f,
                      CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, aux) &&
        lt_matmul_aux(x, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, A, n, B, n, D0, n, 0.0f,
                      CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL)) {
        // the forward's out and aux, then the DGELU result over the same GEMM as D0
        CUDA_OP_CHECK(cudaMemcpyAsync((void *)hA, D, 2 * nn * sizeof(float), cudaMemcpyDeviceToHost,
                                      x->stream));
        const int dgelu = lt_matmul_aux(x, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, A, n, B,
                                        n, D, n, 0.0f, CUBLASLT_EPILOGUE_DGELU, NULL, pre);
        CUDA_OP_CHECK(
            cudaMemcpyAsync((void *)hD, D, nn * sizeof(float), cudaMemcpyDeviceToHost, x->stream));
        CUDA_OP_CHECK(cudaMemcpyAsync((void *)hD0, D0, nn * sizeof(float), cudaMemcpyDeviceToHost,
                                      x->stream));
        CUDA_OP_CHECK(cudaStreamSynchronize(x->stream));
        double ef = 0, mf = 0, eb = 0, mb = 0;
        for (size_t i = 0; i < nn; i++) {
            const double f = gelu_ref(hB[i]), g = dgelu_ref(h_pre[i]) * hD0[i];
            ef = fmax(ef, fabs(hA[i] - f)), mf = fmax(mf, fabs(f));
            eb = fmax(eb, fabs(hD[i] - g)), mb = fmax(mb, fabs(g));
        }
        ok = dgelu && ef <= 1e-5 * mf && eb <= 1e-5 * mb;
        LOG_DEBUG("cuBLASLt GELU epilogues against gelu_tanh: forward %.2g, backward %s%.2g "
                  "(relative; fused when both <= 1e-5)",
                  ef / (mf > 0 ? mf : 1), dgelu ? "" : "unsupported ", eb / (mb > 0 ? mb : 1));
    }
    CUDA_OP_CHECK(cudaStreamSynchronize(x->stream));
    cudaFree(dev);
    free(h);
    return ok;
}

// The table's forward. With gelu_pre (the fc layer): one cuBLASLt call writing gelu(pre) and
// pre where the epilogue is available for this shape (aux ld a multiple of 8, a 16-byte
// aligned bias), else the GEMM into gelu_pre, and backend_matmul_fwd runs the GELU kernel.
// The compute type of fp32 operands for this call: TF32 when the trainer asked for it
// (train.precision tf32) or TRIDENT_CUDA_TF32=1 forces it. Part of every plan's key.
static void refresh_compute(backend *b, cuda_ctx *x) {
    x->compute = b->tf32 || x->tf32_forced ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

int cuda_matmul_fwd(backend *b, float *out, float *gelu_pre, operand inp, operand weight,
                    const float *bias, int N, int IC, int OC) {
    cuda_ctx *x = cuda_ctx_of(b);
    refresh_compute(b, x);
    const int bf16 = inp.dtype == DTYPE_BF16;
    const cudaDataType_t ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    if (gelu_pre && x->gelu_epilogue && N > 0 && IC > 0 && OC % 8 == 0 &&
        (!bias || ptr_alignment(bias) >= 16) &&
        (!bf16 || bf16_supported(x, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight.ptr, IC, inp.ptr,
                                 IC, out, OC)) &&
        lt_matmul_aux(x, ab, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight.ptr, IC, inp.ptr, IC, out,
                      OC, 0.0f, bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                      bias, gelu_pre))
        return 1;
    matmul_fwd_typed(x, gelu_pre ? gelu_pre : out, inp, weight, bias, N, IC, OC);
    return 0;
}

// The table's backward. With gelu_pre (the layer after the GELU): its dinp GEMM with the DGELU
// epilogue (reading gelu_pre), then the weight and bias gradients as without it; or the plain
// backward, and backend_matmul_bwd runs the GELU backward kernel.
int cuda_matmul_bwd(backend *b, float *dinp, float *dweight, float *dbias, operand dout,
                    operand inp, operand weight, const float *gelu_pre, int N, int IC, int OC) {
    cuda_ctx *x = cuda_ctx_of(b);
    refresh_compute(b, x);
    const int bf16 = dout.dtype == DTYPE_BF16;
    const cudaDataType_t ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    if (gelu_pre && x->gelu_epilogue && N > 0 && OC > 0 && IC % 8 == 0 && IC > 0 &&
        (!bf16 || bf16_supported(x, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight.ptr, IC, dout.ptr,
                                 OC, dinp, IC)) &&
        lt_matmul_aux(x, ab, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight.ptr, IC, dout.ptr, OC,
                      dinp, IC, 0.0f, CUBLASLT_EPILOGUE_DGELU, NULL, gelu_pre)) {
        matmul_bwd_typed(x, NULL, dweight, dbias, dout, inp, weight, N, IC, OC);
        return 1;
    }
    matmul_bwd_typed(x, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
    return 0;
}
