// backend_cuda_ln4.cu: the 128-bit forms of the CUDA backend's LayerNorm and residual kernels
// (TRIDENT_CUDA_LN=vec, the default; backend_cuda_ops.cu holds the scalar ones, which run for
// other C, unaligned rows and under TRIDENT_CUDA_LN=v1). Same semantics (backend.h), one warp
// per row as there.
#include "backend_cuda_internal.cuh"

#include <math.h>

#define LN4_ROWS_PER_BLOCK 8 // one warp per row
#define LN4_EPS 1e-5f        // backend_cuda_ops.cu's LN_EPS, the CPU's
#define LN4_THREADS 256      // the residual add's blocks

// 128-bit accesses (TRIDENT_CUDA_LN=vec, the default): where C % 4 == 0 and every row pointer
// is 16-byte aligned (ln_vec), lane k of a row's warp reads and writes the float4s k, k + 32,
// ... of it: a warp's access is 512 contiguous bytes instead of 128, a quarter of the load
// instructions. The sums run over the same elements in another order (each lane adds its four
// in a row), so the values differ from the scalar kernels' by float rounding only.
__device__ __forceinline__ float sum4(float4 v) { return v.x + v.y + v.z + v.w; }

__device__ __forceinline__ void layernorm_row4(float4 *yr, float *mean, float *rstd,
                                               const float4 *xr, float sum, const float4 *weight,
                                               const float4 *bias, int row, int lane, int C) {
    const float m = cuda_warp_sum(sum) / (float)C;
    float var = 0.0f;
    for (int i = lane; i < C / 4; i += 32) {
        const float4 v = xr[i];
        var += (v.x - m) * (v.x - m) + (v.y - m) * (v.y - m) + (v.z - m) * (v.z - m) +
               (v.w - m) * (v.w - m);
    }
    const float s = 1.0f / sqrtf(cuda_warp_sum(var) / (float)C + LN4_EPS);
    for (int i = lane; i < C / 4; i += 32) {
        const float4 v = xr[i], w = weight[i], b = bias[i];
        yr[i] = make_float4((v.x - m) * s * w.x + b.x, (v.y - m) * s * w.y + b.y,
                            (v.z - m) * s * w.z + b.z, (v.w - m) * s * w.w + b.w);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
}

__global__ void layernorm_fwd4_kernel(float *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int N, int C) {
    const int row = blockIdx.x * LN4_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float4 *xr = (const float4 *)(inp + (size_t)row * C);
    float sum = 0.0f;
    for (int i = lane; i < C / 4; i += 32) sum += sum4(xr[i]);
    layernorm_row4((float4 *)(out + (size_t)row * C), mean, rstd, xr, sum, (const float4 *)weight,
                   (const float4 *)bias, row, lane, C);
}

__global__ void residual_layernorm_fwd4_kernel(float *res, float *out, float *mean, float *rstd,
                                               const float *a, const float *c, const float *weight,
                                               const float *bias, int N, int C) {
    const int row = blockIdx.x * LN4_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const size_t at = (size_t)row * C;
    const float4 *a4 = (const float4 *)(a + at), *c4 = (const float4 *)(c + at);
    float4 *r4 = (float4 *)(res + at);
    float sum = 0.0f;
    for (int i = lane; i < C / 4; i += 32) {
        const float4 x = a4[i], y = c4[i];
        const float4 r = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
        r4[i] = r; // res may alias a: each lane reads its float4 before it writes it
        sum += sum4(r);
    }
    layernorm_row4((float4 *)(out + at), mean, rstd, r4, sum, (const float4 *)weight,
                   (const float4 *)bias, row, lane, C);
}

static inline int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// The 128-bit kernels apply: selected, C % 4 == 0 and every row of every pointer aligned
// (row starts are then aligned too).
static int ln_vec(const cuda_ctx *x, int C, const void *p0, const void *p1, const void *p2,
                  const void *p3, const void *p4) {
    return x->ln_vec && C % 4 == 0 && aligned16(p0) && aligned16(p1) && aligned16(p2) &&
           aligned16(p3) && aligned16(p4);
}

// The same with 128-bit accesses (ln_vec); dinp += in the same pass that reads it.
__global__ void layernorm_bwd_dinp4_kernel(float *dinp, const float *dout, const float *inp,
                                           const float *weight, const float *mean,
                                           const float *rstd, int N, int C) {
    const int row = blockIdx.x * LN4_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float4 *xr = (const float4 *)(inp + (size_t)row * C);
    const float4 *dy = (const float4 *)(dout + (size_t)row * C), *w = (const float4 *)weight;
    float4 *dx = (float4 *)(dinp + (size_t)row * C);
    const float m = mean[row], s = rstd[row];
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (int i = lane; i < C / 4; i += 32) {
        const float4 v = xr[i], g = dy[i], ww = w[i];
        const float4 dn = make_float4(g.x * ww.x, g.y * ww.y, g.z * ww.z, g.w * ww.w);
        dnorm_sum += sum4(dn);
        dnorm_norm_sum += dn.x * ((v.x - m) * s) + dn.y * ((v.y - m) * s) + dn.z * ((v.z - m) * s) +
                          dn.w * ((v.w - m) * s);
    }
    const float dm = cuda_warp_sum(dnorm_sum) / (float)C;
    const float dnm = cuda_warp_sum(dnorm_norm_sum) / (float)C;
    for (int i = lane; i < C / 4; i += 32) {
        const float4 v = xr[i], g = dy[i], ww = w[i];
        float4 d = dx[i];
        d.x += (g.x * ww.x - dm - (v.x - m) * s * dnm) * s;
        d.y += (g.y * ww.y - dm - (v.y - m) * s * dnm) * s;
        d.z += (g.z * ww.z - dm - (v.z - m) * s * dnm) * s;
        d.w += (g.w * ww.w - dm - (v.w - m) * s * dnm) * s;
        dx[i] = d;
    }
}

// 128-bit form: float4 i of n / 4 (the scalar kernel takes the n % 4 tail).
__global__ void residual4_kernel(float4 *out, const float4 *a, const float4 *c, size_t n4) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        const float4 x = a[i], y = c[i];
        out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

static unsigned ln4_blocks(int N) {
    return (unsigned)((N + LN4_ROWS_PER_BLOCK - 1) / LN4_ROWS_PER_BLOCK);
}

int cuda_ln4_fwd(cuda_ctx *x, float *res, float *out, float *mean, float *rstd, const float *a,
                 const float *c, const float *weight, const float *bias, int N, int C) {
    if (!ln_vec(x, C, out, a, weight, bias, res ? res : out) || (c && !aligned16(c))) return 0;
    if (res) {
        residual_layernorm_fwd4_kernel<<<ln4_blocks(N), 32 * LN4_ROWS_PER_BLOCK, 0, x->stream>>>(
            res, out, mean, rstd, a, c, weight, bias, N, C);
        CUDA_LAUNCH_CHECK("residual_layernorm_fwd4_kernel");
    } else {
        layernorm_fwd4_kernel<<<ln4_blocks(N), 32 * LN4_ROWS_PER_BLOCK, 0, x->stream>>>(
            out, mean, rstd, a, weight, bias, N, C);
        CUDA_LAUNCH_CHECK("layernorm_fwd4_kernel");
    }
    return 1;
}

int cuda_ln4_bwd_dinp(cuda_ctx *x, float *dinp, const float *dout, const float *inp,
                      const float *weight, const float *mean, const float *rstd, int N, int C) {
    if (!ln_vec(x, C, dinp, dout, inp, weight, dinp)) return 0;
    layernorm_bwd_dinp4_kernel<<<ln4_blocks(N), 32 * LN4_ROWS_PER_BLOCK, 0, x->stream>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    CUDA_LAUNCH_CHECK("layernorm_bwd_dinp4_kernel");
    return 1;
}

size_t cuda_residual4(cuda_ctx *x, float *out, const float *a, const float *c, size_t n) {
    if (!x->ln_vec || n < 4 || !aligned16(out) || !aligned16(a) || !aligned16(c)) return 0;
    const size_t n4 = n / 4;
    residual4_kernel<<<cuda_grid_for(n4, LN4_THREADS), LN4_THREADS, 0, x->stream>>>(
        (float4 *)out, (const float4 *)a, (const float4 *)c, n4);
    CUDA_LAUNCH_CHECK("residual4_kernel");
    return n4 * 4;
}
