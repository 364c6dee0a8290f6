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
// distinct (operation, shape, epilogue, pointer alignment) and cached, so a step costs no
// heuristic queries after the first, and the same GEMM always runs the same algorithm
// (bitwise reproducible). Alignments are part of the key because cuBLASLt's heuristics
// assume 256-byte aligned pointers unless told otherwise, and parameters carved out of one
// buffer are aligned only to their offsets.
//
// Compute type: CUBLAS_COMPUTE_32F (full fp32 FMA) by default; TRIDENT_CUDA_TF32=1 selects
// CUBLAS_COMPUTE_32F_FAST_TF32 (see backend_cuda.cu).
//
// bf16 operands (matmul_fwd_bf16, matmul_bwd_bf16; train.precision bf16): A and B are
// CUDA_R_16BF, D (and C, the accumulated one) stays CUDA_R_32F, with CUBLAS_COMPUTE_32F:
// tensor-core products accumulated in fp32. The bias (BIAS) and the bias gradient (BGRADB)
// are of D's type, fp32, as the fp32 path's are. Where cuBLASLt has no bf16 algorithm at all
// (operands only 2-byte aligned, as ZeRO-3's gathered buckets can leave them, or leading
// dimensions its tensor-core kernels refuse), the op widens its bf16 operands into fp32
// copies (stream-ordered allocations, freed after the GEMM) and runs the fp32 path: the same
// exact products, so only speed differs.
#include "backend_cuda_internal.cuh"

#include <stdint.h>
#include <string.h>

// 32 MiB: what cuBLASLt's Hopper kernels ask for at most.
#define CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20)

struct cuda_lt_plan {
    // key
    cublasOperation_t ta, tb;
    cudaDataType_t ab; // A's and B's element type: CUDA_R_32F or CUDA_R_16BF
    int m, n, k, lda, ldb, ldd;
    cublasLtEpilogue_t epilogue;
    int align_a, align_b, align_d;
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

tri_status cuda_matmul_init(cuda_ctx *x) {
    cublasStatus_t st = cublasLtCreate(&x->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        lt_report(st, "cublasLtCreate(&x->lt)", __FILE__, __LINE__);
        x->lt = NULL;
        return TRI_ERR_INTERNAL;
    }
    CUDA_CHECK(cudaMalloc(&x->lt_workspace, CUDA_LT_WORKSPACE_BYTES));
    x->lt_workspace_bytes = CUDA_LT_WORKSPACE_BYTES;
    x->plans = (cuda_lt_plan *)xcalloc(CUDA_LT_MAX_PLANS, sizeof(cuda_lt_plan));
    x->n_plans = 0;
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
    // bf16 operands accumulate in plain fp32 (TF32 applies to fp32 operands only).
    const cublasComputeType_t compute = p->ab == CUDA_R_16BF ? CUBLAS_COMPUTE_32F : x->compute;
    LT_OP_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
    LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &p->ta,
                                               sizeof p->ta));
    LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &p->tb,
                                               sizeof p->tb));
    LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                               &p->epilogue, sizeof p->epilogue));
    // op(A) is (m, k), op(B) is (k, n), D is (m, n); the stored shapes follow the transposes.
    const int ta = p->ta == CUBLAS_OP_T, tb = p->tb == CUBLAS_OP_T;
    LT_OP_CHECK(cublasLtMatrixLayoutCreate(&p->la, p->ab, ta ? p->k : p->m, ta ? p->m : p->k,
                                           p->lda));
    LT_OP_CHECK(cublasLtMatrixLayoutCreate(&p->lb, p->ab, tb ? p->n : p->k, tb ? p->k : p->n,
                                           p->ldb));
    LT_OP_CHECK(cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_32F, p->m, p->n, p->ldd));

    cublasLtMatmulPreference_t pref;
    LT_OP_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LT_OP_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
                                                     CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
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
                  "%d/%d/%d bytes (%s)", p->ab == CUDA_R_16BF ? "bf16" : "fp32", p->m, p->n, p->k,
                  p->align_a, p->align_b, p->align_d,
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
        if (p->ta == key->ta && p->tb == key->tb && p->ab == key->ab && p->m == key->m && p->n == key->n &&
            p->k == key->k && p->lda == key->lda && p->ldb == key->ldb && p->ldd == key->ldd &&
            p->epilogue == key->epilogue && p->align_a == key->align_a &&
            p->align_b == key->align_b && p->align_d == key->align_d)
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
// (bias: its vector). Returns 0, having done nothing, when cuBLASLt has no algorithm for that
// epilogue.
static int lt_matmul(cuda_ctx *x, cudaDataType_t ab, cublasOperation_t ta, cublasOperation_t tb,
                     int m, int n, int k, const void *A, int lda, const void *B, int ldb, float *D,
                     int ldd, float beta, cublasLtEpilogue_t epilogue, const float *bias) {
    cuda_lt_plan key;
    memset(&key, 0, sizeof key);
    key.ta = ta, key.tb = tb, key.ab = ab, key.m = m, key.n = n, key.k = k;
    key.lda = lda, key.ldb = ldb, key.ldd = ldd, key.epilogue = epilogue;
    key.align_a = ptr_alignment(A), key.align_b = ptr_alignment(B), key.align_d = ptr_alignment(D);
    cuda_lt_plan *p = plan_get(x, &key);
    if (!p->supported) return 0;
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        LT_OP_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias, sizeof bias));
    const float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatmul(x->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D,
                                       p->ld, D, p->ld, &p->algo, x->lt_workspace,
                                       x->lt_workspace_bytes, x->stream);
    // An epilogue refused at launch (checked before anything runs) takes the fallback too.
    if (st == CUBLAS_STATUS_NOT_SUPPORTED && epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        LOG_DEBUG("cuBLASLt: epilogue %d refused at launch for (%d x %d x %d); using the "
                  "fallback", (int)epilogue, m, n, k);
        p->supported = 0;
        return 0;
    }
    LT_OP_CHECK(st);
    return 1;
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
    lt_matmul(x, ab, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC, beta,
              CUBLASLT_EPILOGUE_DEFAULT, NULL);
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
        lt_matmul(x, ab, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC, dout, OC, dinp, IC, 0.0f,
                  CUBLASLT_EPILOGUE_DEFAULT, NULL);
    if (dbias) {
        float *dbias_step = (float *)cuda_scratch(x, (size_t)OC * sizeof(float));
        if (lt_matmul(x, ab, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, dweight, IC,
                      1.0f, CUBLASLT_EPILOGUE_BGRADB, dbias_step)) {
            cuda_add_inplace(x, dbias, dbias_step, (size_t)OC);
            return;
        }
    }
    lt_matmul(x, ab, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, dweight, IC, 1.0f,
              CUBLASLT_EPILOGUE_DEFAULT, NULL);
    if (dbias && ab == CUDA_R_16BF) cuda_column_sums_add_bf16(x, dbias, (const uint16_t *)dout, N, OC);
    else if (dbias) cuda_column_sums_add(x, dbias, (const float *)dout, N, OC);
}

void cuda_matmul_fwd(backend *b, float *out, const float *inp, const float *weight,
                     const float *bias, int N, int IC, int OC) {
    matmul_fwd(cuda_ctx_of(b), CUDA_R_32F, out, inp, weight, bias, N, IC, OC);
}

void cuda_matmul_bwd(backend *b, float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int N, int IC, int OC) {
    matmul_bwd(cuda_ctx_of(b), CUDA_R_32F, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

// Does cuBLASLt have a bf16 algorithm (without epilogue) for a GEMM of this shape and these
// operands? The plan is cached, so asking costs nothing after the first time.
static int bf16_supported(cuda_ctx *x, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                          int k, const void *A, int lda, const void *B, int ldb, const float *D,
                          int ldd) {
    cuda_lt_plan key;
    memset(&key, 0, sizeof key);
    key.ta = ta, key.tb = tb, key.ab = CUDA_R_16BF, key.m = m, key.n = n, key.k = k;
    key.lda = lda, key.ldb = ldb, key.ldd = ldd, key.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    key.align_a = ptr_alignment(A), key.align_b = ptr_alignment(B), key.align_d = ptr_alignment(D);
    return plan_get(x, &key)->supported;
}

// An fp32 copy of n bf16 elements, allocated in stream order (free with widened_free).
static float *widen(cuda_ctx *x, const uint16_t *src, size_t n) {
    float *dst = NULL;
    CUDA_OP_CHECK(cudaMallocAsync((void **)&dst, (n ? n : 1) * sizeof(float), x->stream));
    cuda_bf16_widen(x, dst, src, n);
    return dst;
}
static void widened_free(cuda_ctx *x, float *p) { CUDA_OP_CHECK(cudaFreeAsync(p, x->stream)); }

void cuda_matmul_fwd_bf16(backend *b, float *out, const uint16_t *inp, const uint16_t *weight,
                          const float *bias, int N, int IC, int OC) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (N <= 0 || OC <= 0 || IC <= 0 ||
        bf16_supported(x, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC)) {
        matmul_fwd(x, CUDA_R_16BF, out, inp, weight, bias, N, IC, OC);
        return;
    }
    float *w_inp = widen(x, inp, (size_t)N * IC), *w_weight = widen(x, weight, (size_t)OC * IC);
    matmul_fwd(x, CUDA_R_32F, out, w_inp, w_weight, bias, N, IC, OC);
    widened_free(x, w_inp);
    widened_free(x, w_weight);
}

void cuda_matmul_bwd_bf16(backend *b, float *dinp, float *dweight, float *dbias,
                          const uint16_t *dout, const uint16_t *inp, const uint16_t *weight,
                          int N, int IC, int OC) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (N <= 0 || OC <= 0 || IC <= 0 ||
        ((!dinp || bf16_supported(x, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC, dout, OC, dinp, IC)) &&
         bf16_supported(x, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, dweight, IC))) {
        matmul_bwd(x, CUDA_R_16BF, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
        return;
    }
    float *w_dout = widen(x, dout, (size_t)N * OC), *w_inp = widen(x, inp, (size_t)N * IC);
    float *w_weight = widen(x, weight, (size_t)OC * IC);
    matmul_bwd(x, CUDA_R_32F, dinp, dweight, dbias, w_dout, w_inp, w_weight, N, IC, OC);
    widened_free(x, w_dout);
    widened_free(x, w_inp);
    widened_free(x, w_weight);
}
