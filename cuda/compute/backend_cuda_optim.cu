// backend_cuda_optim.cu: the CUDA backend's optimizer ops: the sum of squares of the gradient
// norm and AdamW, piece by piece (sumsq, sumsq_add, adamw) and as multi-tensor launches over
// the optimizer's table (mt_sumsq_add, mt_adamw; compute/multi_tensor.h).
//
// Launches per step for P pieces: piece by piece, the norm takes 2 kernels per piece and
// AdamW 1 (plus a widening kernel per piece and op with bf16 gradients); the multi-tensor
// ops take 2 kernels for the norm (per-block sums, then their total) and 1 for AdamW,
// whatever P, and read bf16 gradients in place.
//
// Determinism: every sum has a fixed shape. Piece by piece, a grid that depends on n alone;
// multi-tensor, one block per MT_SPAN elements of a tensor (the table's prefix), each a fixed
// tree in double, and the blocks' sums added in block order by one block. The two orders
// differ, so the norms may differ in the last bits (the CPU keeps the per-piece order).
// TRIDENT_CUDA_OPTIM=v1 selects the per-piece path (README "Environment variables").
#include "backend_cuda_internal.cuh"
#include "base/env.h"

#include <cuda_bf16.h>
#include <limits.h>
#include <math.h>

#define SUMSQ_MAX_BLOCKS CUDA_SUMSQ_MAX_BLOCKS
#define MT_THREADS 512        // threads per block of the multi-tensor kernels (128 elements each)
#define MT_FINAL_THREADS 1024 // the one block that adds the norm's per-block sums

// ---------------------------------------------------------------------------------------
// Piece by piece

// Per block: the sum of squares, in double, of its grid-stride elements, as a fixed tree.
__global__ void sumsq_partial_kernel(double *partial, const float *x, size_t n) {
    double acc = 0.0;
    GRID_STRIDE(i, n) {
        const double v = x[i];
        acc += v * v;
    }
    acc = block_reduce(acc, op_sum(), 0.0);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// *out = the blocks' total, or (accumulate) *out += it.
__global__ void sumsq_final_kernel(double *out, const double *partial, int nblocks,
                                   int accumulate) {
    double v = (int)threadIdx.x < nblocks ? partial[threadIdx.x] : 0.0;
    v = block_reduce(v, op_sum(), 0.0);
    if (threadIdx.x == 0) *out = accumulate ? *out + v : v;
}

// The two kernels: the sum of squares of xs into *out (device), or added to it; partial
// holds SUMSQ_MAX_BLOCKS doubles.
static void sumsq_to(cuda_ctx *x, double *out, double *partial, const float *xs, size_t n,
                     int accumulate) {
    if (!n) {
        if (!accumulate) CUDA_OP_CHECK(cudaMemsetAsync(out, 0, sizeof(double), x->stream));
        return;
    }
    // The grid depends on n alone, so the order of the additions does too.
    size_t want = (n + (size_t)OPS_THREADS * 16 - 1) / ((size_t)OPS_THREADS * 16);
    const int nblocks = want > SUMSQ_MAX_BLOCKS ? SUMSQ_MAX_BLOCKS : (int)want;
    sumsq_partial_kernel<<<nblocks, OPS_THREADS, 0, x->stream>>>(partial, xs, n);
    CUDA_LAUNCH_CHECK("sumsq_partial_kernel");
    sumsq_final_kernel<<<1, SUMSQ_MAX_BLOCKS, 0, x->stream>>>(out, partial, nblocks, accumulate);
    CUDA_LAUNCH_CHECK("sumsq_final_kernel");
}

double cuda_sumsq(backend *b, const float *xs, size_t n) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (!n) return 0.0;
    double *partial = (double *)cuda_scratch(x, cuda_ws_sumsq());
    double *out = partial + SUMSQ_MAX_BLOCKS;
    sumsq_to(x, out, partial, xs, n, 0);
    CUDA_OP_CHECK(
        cudaMemcpyAsync(x->host_result, out, sizeof(double), cudaMemcpyDeviceToHost, x->stream));
    CUDA_OP_CHECK(cudaStreamSynchronize(x->stream)); // the contract returns a host value
    return *x->host_result;
}

void cuda_sumsq_add(backend *b, double *acc, const float *xs, size_t n) {
    cuda_ctx *x = cuda_ctx_of(b);
    sumsq_to(x, acc, (double *)cuda_scratch(x, cuda_ws_sumsq()), xs, n, 1);
}

struct adamw_coef {
    float lr, beta1, beta2, eps, wd, grad_scale, inv_bc1, inv_bc2;
};

// The expression of backend_cpu.c's adamw_scalar, element for element.
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, adamw_coef k,
                             uint16_t *p16) {
    GRID_STRIDE(i, n) {
        const float gi = g[i] * k.grad_scale;
        const float mi = k.beta1 * m[i] + (1.0f - k.beta1) * gi;
        const float vi = k.beta2 * v[i] + (1.0f - k.beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float update = (mi * k.inv_bc1) / (sqrtf(vi * k.inv_bc2) + k.eps);
        const float pi = p[i] - k.lr * (update + k.wd * p[i]);
        p[i] = pi;
        if (p16) p16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(pi));
    }
}

// The coefficients of one step. Bias corrections in double, as on the CPU: 1 - beta2^t is
// ~1e-3 at t = 1.
static adamw_coef adamw_coef_of(const adamw_step *s) {
    adamw_coef k;
    k.lr = s->lr, k.beta1 = s->beta1, k.beta2 = s->beta2, k.eps = s->eps, k.wd = s->weight_decay;
    k.grad_scale = s->grad_scale;
    k.inv_bc1 = (float)(1.0 / (1.0 - pow((double)s->beta1, (double)s->t)));
    k.inv_bc2 = (float)(1.0 / (1.0 - pow((double)s->beta2, (double)s->t)));
    return k;
}

void cuda_adamw(backend *b, float *param, const float *grad, float *m, float *v, size_t n,
                const adamw_step *s, uint16_t *param16) {
    if (!n) return;
    const adamw_coef k = adamw_coef_of(s);
    LAUNCH_N(adamw_kernel, cuda_ctx_of(b), n, param, grad, m, v, n, k, param16);
}

// ---------------------------------------------------------------------------------------
// Multi-tensor

// bf16 or fp32 gradients, read as fp32 (a bf16 value widens exactly).
template <int BF16> __device__ __forceinline__ float mt_grad(const void *g, uint64_t i) {
    if (BF16) return __bfloat162float(__ushort_as_bfloat16(((const uint16_t *)g)[i]));
    return ((const float *)g)[i];
}

// Thread 0 finds this block's tensor and range (multi_tensor.h) for the whole block.
struct mt_block {
    mt_tensor e;
    uint64_t lo, hi;
};
__device__ __forceinline__ void mt_locate(mt_block *blk, const mt_tensor *tensors,
                                          const uint32_t *start, int count) {
    if (threadIdx.x == 0) {
        const int t = mt_block_tensor(start, count, blockIdx.x);
        blk->e = tensors[t];
        mt_block_range(blockIdx.x, start[t], blk->e.n, &blk->lo, &blk->hi);
    }
    __syncthreads();
}

// partial[b] = the sum of squares, in double, of block b's range: each thread's strided
// elements in order, then block_reduce's fixed tree.
template <int BF16>
__global__ void mt_sumsq_kernel(double *partial, const mt_tensor *tensors, const uint32_t *start,
                                int count) {
    __shared__ mt_block blk;
    mt_locate(&blk, tensors, start, count);
    double acc = 0.0;
    for (uint64_t i = blk.lo + threadIdx.x; i < blk.hi; i += blockDim.x) {
        const double v = mt_grad<BF16>(blk.e.grad, i);
        acc += v * v;
    }
    acc = block_reduce(acc, op_sum(), 0.0);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// *acc += the sum of partial[0, n): each thread's strided sums in order, then a fixed tree.
__global__ void mt_sum_final_kernel(double *acc, const double *partial, uint32_t n) {
    double s = 0.0;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
    s = block_reduce(s, op_sum(), 0.0);
    if (threadIdx.x == 0) *acc += s;
}

// A launch's grid: one block per table block (gridDim.x holds up to 2^31 - 1).
static unsigned mt_grid(uint32_t blocks) {
    if (blocks > (uint32_t)INT_MAX)
        cuda_op_fail("a multi-tensor optimizer launch", "more than 2^31 - 1 blocks", __FILE__,
                     __LINE__);
    return blocks;
}

void cuda_mt_sumsq_add(backend *b, double *acc, const mt_table *t) {
    if (!t->norm_blocks) return;
    cuda_ctx *x = cuda_ctx_of(b);
    TRI_ASSERT(t->dev_tensors && t->dev_norm_start && t->dev_partial);
    const unsigned grid = mt_grid(t->norm_blocks);
    if (t->grad_dtype == DTYPE_BF16)
        mt_sumsq_kernel<1><<<grid, MT_THREADS, 0, x->stream>>>(t->dev_partial, t->dev_tensors,
                                                               t->dev_norm_start, t->n_tensors);
    else
        mt_sumsq_kernel<0><<<grid, MT_THREADS, 0, x->stream>>>(t->dev_partial, t->dev_tensors,
                                                               t->dev_norm_start, t->n_tensors);
    CUDA_LAUNCH_CHECK("mt_sumsq_kernel");
    mt_sum_final_kernel<<<1, MT_FINAL_THREADS, 0, x->stream>>>(acc, t->dev_partial, t->norm_blocks);
    CUDA_LAUNCH_CHECK("mt_sum_final_kernel");
}

// adamw_kernel's expression over block b's range, weight decay k.wd where the tensor has
// decay, the bf16 rounding where it has param16.
template <int BF16>
__global__ void mt_adamw_kernel(const mt_tensor *tensors, const uint32_t *start, int count,
                                adamw_coef k) {
    __shared__ mt_block blk;
    mt_locate(&blk, tensors, start, count);
    const mt_tensor &e = blk.e;
    const float wd = e.decay ? k.wd : 0.0f;
    for (uint64_t i = blk.lo + threadIdx.x; i < blk.hi; i += blockDim.x) {
        const float gi = mt_grad<BF16>(e.grad, i) * k.grad_scale;
        const float mi = k.beta1 * e.m[i] + (1.0f - k.beta1) * gi;
        const float vi = k.beta2 * e.v[i] + (1.0f - k.beta2) * gi * gi;
        e.m[i] = mi;
        e.v[i] = vi;
        const float update = (mi * k.inv_bc1) / (sqrtf(vi * k.inv_bc2) + k.eps);
        const float pi = e.param[i] - k.lr * (update + wd * e.param[i]);
        e.param[i] = pi;
        if (e.param16) e.param16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(pi));
    }
}

void cuda_mt_adamw(backend *b, const mt_table *t, const adamw_step *s) {
    if (!t->adam_blocks) return;
    cuda_ctx *x = cuda_ctx_of(b);
    TRI_ASSERT(t->dev_tensors && t->dev_adam_start);
    const adamw_coef k = adamw_coef_of(s);
    const unsigned grid = mt_grid(t->adam_blocks);
    if (t->grad_dtype == DTYPE_BF16)
        mt_adamw_kernel<1><<<grid, MT_THREADS, 0, x->stream>>>(t->dev_tensors, t->dev_adam_start,
                                                               t->n_tensors, k);
    else
        mt_adamw_kernel<0><<<grid, MT_THREADS, 0, x->stream>>>(t->dev_tensors, t->dev_adam_start,
                                                               t->n_tensors, k);
    CUDA_LAUNCH_CHECK("mt_adamw_kernel");
}

tri_status cuda_optim_init(backend *b) {
    static const char *const paths[] = {"multi", "v1"};
    const int k = env_choice(ENV_TRIDENT_CUDA_OPTIM, paths, 2, 0);
    if (k < 0) {
        LOG_ERROR("TRIDENT_CUDA_OPTIM=%s: the CUDA optimizer paths are multi or v1",
                  env_get(ENV_TRIDENT_CUDA_OPTIM));
        LOG_HINT("unset it for the default (multi); v1 runs the gradient norm and AdamW piece "
                 "by piece, to bisect a failing device run (README \"Environment variables\")");
        return TRI_ERR_CONFIG;
    }
    b->optim_multi = k == 0;
    return TRI_OK;
}
