// backend_cuda_gemm.cu: the GEMM that bf16 matmuls fall back to where cuBLASLt has no bf16
// algorithm (backend_cuda_matmul.cu's gemm): operands only 2-byte aligned, leading
// dimensions its kernels refuse. It reads the bf16 operands in place, so the fallback needs
// no fp32 copies of them (which no workspace could size ahead: they would be as large as
// the LM head's weight); it is a plain shared-memory tiled kernel, slow next to the tensor
// cores, but a fallback runs rarely and only has to be right.
//
// Column-major as cuBLASLt: D (m, n), op(A) (m, k), op(B) (k, n); A stored (m, k) with
// leading dimension lda, or (k, m) when transposed; B likewise. Each thread owns one
// element of D and adds its k products in order of k (exact products of bf16 values, fp32
// sums), so the result does not depend on the launch: bitwise reproducible, as cuBLASLt's.
#include "backend_cuda_internal.cuh"

#define GF_TILE 16 // D tile (GF_TILE x GF_TILE) per block, k in steps of GF_TILE

__device__ __forceinline__ float gf_widen(uint16_t v) { return __uint_as_float((unsigned)v << 16); }

// op(A)(i, l) and op(B)(l, j), 0 outside the matrices (the last tiles' padding).
template <bool TA>
__device__ __forceinline__ float gf_a(const uint16_t *A, int lda, int m, int k, int i, int l) {
    if (i >= m || l >= k) return 0.0f;
    return gf_widen(TA ? A[(size_t)i * lda + l] : A[(size_t)l * lda + i]);
}
template <bool TB>
__device__ __forceinline__ float gf_b(const uint16_t *B, int ldb, int k, int n, int l, int j) {
    if (l >= k || j >= n) return 0.0f;
    return gf_widen(TB ? B[(size_t)l * ldb + j] : B[(size_t)j * ldb + l]);
}

// Block (GF_TILE, GF_TILE): thread (tx, ty) computes D(i0 + tx, j0 + ty); the tiles of
// columns j0 step over gridDim.y (more than 65535 tiles of n).
template <bool TA, bool TB>
__global__ void gemm_bf16_fallback_kernel(int m, int n, int k, const uint16_t *A, int lda,
                                          const uint16_t *B, int ldb, float *D, int ldd,
                                          float beta) {
    __shared__ float As[GF_TILE][GF_TILE + 1]; // As[l][i] = op(A)(i0 + i, l0 + l)
    __shared__ float Bs[GF_TILE][GF_TILE + 1]; // Bs[j][l] = op(B)(l0 + l, j0 + j)
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int i0 = blockIdx.x * GF_TILE, i = i0 + tx;
    const int n_tiles = (n + GF_TILE - 1) / GF_TILE;
    for (int jt = blockIdx.y; jt < n_tiles; jt += gridDim.y) {
        const int j0 = jt * GF_TILE, j = j0 + ty;
        float acc = 0.0f;
        for (int l0 = 0; l0 < k; l0 += GF_TILE) {
            As[ty][tx] = gf_a<TA>(A, lda, m, k, i0 + tx, l0 + ty);
            Bs[ty][tx] = gf_b<TB>(B, ldb, k, n, l0 + tx, j0 + ty);
            __syncthreads();
#pragma unroll
            for (int l = 0; l < GF_TILE; l++) acc = fmaf(As[l][tx], Bs[ty][l], acc);
            __syncthreads();
        }
        if (i < m && j < n) {
            float *d = D + (size_t)j * ldd + i;
            *d = beta == 0.0f ? acc : acc + beta * *d;
        }
    }
}

void cuda_gemm_bf16_fallback(cuda_ctx *x, int ta, int tb, int m, int n, int k, const uint16_t *A,
                             int lda, const uint16_t *B, int ldb, float *D, int ldd, float beta) {
    if (m <= 0 || n <= 0) return;
    const int n_tiles = (n + GF_TILE - 1) / GF_TILE;
    dim3 grid((unsigned)((m + GF_TILE - 1) / GF_TILE),
              (unsigned)(n_tiles < 65535 ? n_tiles : 65535));
    dim3 block(GF_TILE, GF_TILE);
    if (ta && tb)
        gemm_bf16_fallback_kernel<true, true>
            <<<grid, block, 0, x->stream>>>(m, n, k, A, lda, B, ldb, D, ldd, beta);
    else if (ta)
        gemm_bf16_fallback_kernel<true, false>
            <<<grid, block, 0, x->stream>>>(m, n, k, A, lda, B, ldb, D, ldd, beta);
    else if (tb)
        gemm_bf16_fallback_kernel<false, true>
            <<<grid, block, 0, x->stream>>>(m, n, k, A, lda, B, ldb, D, ldd, beta);
    else
        gemm_bf16_fallback_kernel<false, false>
            <<<grid, block, 0, x->stream>>>(m, n, k, A, lda, B, ldb, D, ldd, beta);
    CUDA_LAUNCH_CHECK("gemm_bf16_fallback_kernel");
}
