// backend_cuda_xent16.cu: the fused bf16 classifier (backend.h xent_stats16, xent_rescale,
// xent_bwd16): one block per row of bf16 logits, read in 128-bit loads (eight bf16) where
// Vp_local % 8 == 0 and the logits are 16-byte aligned, else one at a time.
//
// xent_stats16 is the online softmax normaliser (Milakov and Gimelshein, 2018): each thread
// keeps (m, s), the maximum of its columns so far and the sum of exp(x - m) over them,
// rescaling s by exp(m_old - m_new) when the maximum grows; the block merges the threads'
// pairs in a fixed tree (warp butterflies, then warp 0 over the warps), so the result
// depends only on the shape. -INFINITY logits add nothing (exp(-inf) = 0; skipping them keeps
// -inf - -inf out of a row that has not seen a finite value yet).
#include "backend_cuda_internal.cuh"

#include <math.h>

#define XENT16_THREADS 512

static inline int real_cols(int Vp_local, int vocab_start, int V_valid) {
    const int n = V_valid - vocab_start;
    return n < 0 ? 0 : n > Vp_local ? Vp_local : n;
}

__device__ __forceinline__ float widen(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t round16(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

struct max_sum {
    float m, s;
};

__device__ __forceinline__ void ms_add(max_sum &a, float x) {
    if (x == -INFINITY) return;
    if (x > a.m) {
        a.s = a.s * expf(a.m - x) + 1.0f; // a.m == -inf: 0 * 0 + 1
        a.m = x;
    } else a.s += expf(x - a.m);
}

__device__ __forceinline__ max_sum ms_merge(max_sum a, max_sum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return a; // neither has seen a finite value: (-inf, 0)
    max_sum r = {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
    return r;
}

// The block's pairs merged in a fixed order; every thread gets the result.
__device__ max_sum block_merge(max_sum v) {
    __shared__ float pm[32], ps[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        max_sum w = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
        v = ms_merge(v, w);
    }
    if (lane == 0) pm[warp] = v.m, ps[warp] = v.s;
    __syncthreads();
    v.m = lane < nwarps ? pm[lane] : -INFINITY;
    v.s = lane < nwarps ? ps[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        max_sum w = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
        v = ms_merge(v, w);
    }
    return v;
}

__global__ void xent_stats16_kernel(float *rowmax, float *sumexp, float *target_logit,
                                    const uint16_t *logits16, const int *targets, int Vp_local,
                                    int nreal, int vocab_start, int vec) {
    const uint16_t *row = logits16 + (size_t)blockIdx.x * Vp_local;
    max_sum a = {-INFINITY, 0.0f};
    const int n8 = vec ? nreal / 8 : 0;
    for (int i = threadIdx.x; i < n8; i += blockDim.x) {
        const uint4 v = ((const uint4 *)row)[i];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 4; k++) {
            ms_add(a, __uint_as_float(w[k] << 16));         // the even column (low half)
            ms_add(a, __uint_as_float(w[k] & 0xffff0000u)); // the odd one
        }
    }
    for (int c = n8 * 8 + threadIdx.x; c < nreal; c += blockDim.x) ms_add(a, widen(row[c]));
    a = block_merge(a);
    if (threadIdx.x == 0) {
        rowmax[blockIdx.x] = a.m;
        sumexp[blockIdx.x] = a.s;
        const int local = targets[blockIdx.x] - vocab_start;
        target_logit[blockIdx.x] = local >= 0 && local < nreal ? widen(row[local]) : 0.0f;
    }
}

static int vec8(const void *p, int Vp_local) {
    return Vp_local % 8 == 0 && ((uintptr_t)p & 15) == 0;
}

void cuda_xent_stats16(backend *b, float *rowmax, float *sumexp, float *target_logit,
                       const uint16_t *logits16, const int *targets, int N, int Vp_local,
                       int vocab_start, int V_valid) {
    if (N <= 0) return;
    xent_stats16_kernel<<<N, XENT16_THREADS, 0, cuda_ctx_of(b)->stream>>>(
        rowmax, sumexp, target_logit, logits16, targets, Vp_local,
        real_cols(Vp_local, vocab_start, V_valid), vocab_start, vec8(logits16, Vp_local));
    CUDA_LAUNCH_CHECK("xent_stats16_kernel");
}

__global__ void xent_rescale_kernel(float *sumexp, const float *rowmax_local,
                                    const float *rowmax_all, int N) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N && sumexp[n] != 0.0f) sumexp[n] *= expf(rowmax_local[n] - rowmax_all[n]);
}

void cuda_xent_rescale(backend *b, float *sumexp, const float *rowmax_local,
                       const float *rowmax_all, int N) {
    if (N <= 0) return;
    xent_rescale_kernel<<<(N + 255) / 256, 256, 0, cuda_ctx_of(b)->stream>>>(sumexp, rowmax_local,
                                                                             rowmax_all, N);
    CUDA_LAUNCH_CHECK("xent_rescale_kernel");
}

// The gradient of column c of a row (xent_bwd's formula), 0 over padding.
__device__ __forceinline__ float xent_grad(float x, int c, int nreal, int local, float m,
                                           float scale, float dloss) {
    if (c >= nreal) return 0.0f;
    float g = expf(x - m) * scale;
    if (c == local) g -= dloss;
    return g;
}

__global__ void xent_bwd16_kernel(uint16_t *logits16, const float *rowmax, const float *sumexp,
                                  const int *targets, float dloss, int Vp_local, int nreal,
                                  int vocab_start, int vec) {
    uint16_t *row = logits16 + (size_t)blockIdx.x * Vp_local;
    const float m = rowmax[blockIdx.x], scale = dloss / sumexp[blockIdx.x];
    const int local = targets[blockIdx.x] - vocab_start;
    const int n8 = vec ? Vp_local / 8 : 0;
    for (int i = threadIdx.x; i < n8; i += blockDim.x) {
        uint4 v = ((const uint4 *)row)[i];
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 4; k++) {
            const int c = i * 8 + 2 * k;
            const float lo = xent_grad(__uint_as_float(w[k] << 16), c, nreal, local, m, scale,
                                       dloss);
            const float hi = xent_grad(__uint_as_float(w[k] & 0xffff0000u), c + 1, nreal, local, m,
                                       scale, dloss);
            w[k] = (uint32_t)round16(lo) | (uint32_t)round16(hi) << 16;
        }
        ((uint4 *)row)[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    for (int c = n8 * 8 + threadIdx.x; c < Vp_local; c += blockDim.x)
        row[c] = round16(xent_grad(widen(row[c]), c, nreal, local, m, scale, dloss));
}

void cuda_xent_bwd16(backend *b, uint16_t *logits16, const float *rowmax, const float *sumexp,
                     const int *targets, float dloss, int N, int Vp_local, int vocab_start,
                     int V_valid) {
    if (N <= 0) return;
    xent_bwd16_kernel<<<N, XENT16_THREADS, 0, cuda_ctx_of(b)->stream>>>(
        logits16, rowmax, sumexp, targets, dloss, Vp_local,
        real_cols(Vp_local, vocab_start, V_valid), vocab_start, vec8(logits16, Vp_local));
    CUDA_LAUNCH_CHECK("xent_bwd16_kernel");
}
