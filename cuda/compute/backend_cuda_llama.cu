// backend_cuda_llama.cu: the Llama ops of the CUDA backend (backend.h): RMSNorm (alone and
// fused with the residual add), rotary position embeddings and SwiGLU, formula for formula
// those of src/compute/backend_cpu_llama.c.
//
// Widths: every kernel reads and writes 128-bit float4s where the row width allows it (a
// multiple of 4 floats) and every pointer is 16-byte aligned; else the same kernel with
// scalar floats. The choice changes only the order of a row's sums (RMSNorm), never which
// values are combined elementwise (RoPE, SwiGLU).
//
// Determinism (backend_cuda.cu): no atomics. RMSNorm's weight gradient is summed as the
// LayerNorm's: partial column sums over fixed chunks of CUDA_LN_CHUNK rows, then the chunks
// in order by a second kernel.
//
// RoPE's cos and sin: a table of T x HS/2 (cos, sin) pairs in fp32 (x->rope_tab), computed on
// the host in double by rope_math.h's rope_table_fill (the CPU's angles, the same function),
// made once by reserve and counted with the workspaces (cuda_ws_rope_table: T 8192, HS 128 is
// 4 MiB). A table, not device math, because the attention kernels rotate q and k as they load
// each tile (backend.attn_rope) and every key tile is loaded by each of the query blocks after
// it: per element that is one 8-byte read that stays in L2, where the double pow and sincos
// the separate kernel used to compute once per (row, pair) would be repeated T / 64 times; and
// sincospif-class fp32 device math would give other cos and sin than the CPU's (its argument,
// t theta^(-2i/HS) / pi, rounded to fp32, loses the angle's low bits at large t). The rope ops
// below read the same table.
#include "backend_cuda_internal.cuh"
#include "compute/rope_math.h"

#include <math.h>
#include <stdlib.h>

#define RMS_ROWS_PER_BLOCK 8 // one warp per row
#define RMS_CHUNK CUDA_LN_CHUNK
#define LLAMA_THREADS 256

static inline int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// ---- float / float4 helpers: one kernel body for both widths ----
__device__ __forceinline__ float v_sumsq(float v) { return v * v; }
__device__ __forceinline__ float v_sumsq(float4 v) {
    return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
}
__device__ __forceinline__ float v_add(float a, float b) { return a + b; }
__device__ __forceinline__ float4 v_add(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
// x * s * w, in the CPU's order
__device__ __forceinline__ float v_norm(float x, float s, float w) { return x * s * w; }
__device__ __forceinline__ float4 v_norm(float4 x, float s, float4 w) {
    return make_float4(x.x * s * w.x, x.y * s * w.y, x.z * s * w.z, x.w * s * w.w);
}
// sum of dy * w * x * s (the backward's dot product)
__device__ __forceinline__ float v_dot(float dy, float w, float x, float s) {
    return dy * w * x * s;
}
__device__ __forceinline__ float v_dot(float4 dy, float4 w, float4 x, float s) {
    return dy.x * w.x * x.x * s + dy.y * w.y * x.y * s + dy.z * w.z * x.z * s +
           dy.w * w.w * x.w * s;
}
// dx += (dy * w - x * s * m) * s
__device__ __forceinline__ float v_dx(float dx, float dy, float w, float x, float s, float m) {
    return dx + (dy * w - x * s * m) * s;
}
__device__ __forceinline__ float4 v_dx(float4 dx, float4 dy, float4 w, float4 x, float s, float m) {
    return make_float4(dx.x + (dy.x * w.x - x.x * s * m) * s, dx.y + (dy.y * w.y - x.y * s * m) * s,
                       dx.z + (dy.z * w.z - x.z * s * m) * s,
                       dx.w + (dy.w * w.w - x.w * s * m) * s);
}

// ---------------------------------------------------------------------------------------
// RMSNorm: one warp per row. c NULL: out = RMSNorm(a); else res = a + c (res may alias a:
// each lane reads its elements before it writes them) and out = RMSNorm(res). V is float or
// float4; C is in floats, a multiple of the width.

template <typename V>
__global__ void rmsnorm_fwd_kernel(float *res, float *out, float *rstd, const float *a,
                                   const float *c, const float *weight, int N, int C, float eps) {
    const int row = blockIdx.x * RMS_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    constexpr int W = sizeof(V) / sizeof(float);
    const int n = C / W;
    const size_t at = (size_t)row * C;
    const V *x = (const V *)(a + at);
    float ss = 0.0f;
    if (c) {
        const V *y = (const V *)(c + at);
        V *r = (V *)(res + at);
        for (int i = lane; i < n; i += 32) {
            const V v = v_add(x[i], y[i]);
            r[i] = v;
            ss += v_sumsq(v);
        }
        x = r;
    } else {
        for (int i = lane; i < n; i += 32) ss += v_sumsq(x[i]);
    }
    const float s = 1.0f / sqrtf(cuda_warp_sum(ss) / (float)C + eps);
    const V *w = (const V *)weight;
    V *yo = (V *)(out + at);
    for (int i = lane; i < n; i += 32) yo[i] = v_norm(x[i], s, w[i]);
    if (lane == 0 && rstd) rstd[row] = s;
}

// dinp += s (dy w - norm mean(dy w norm)), norm = x s.
template <typename V>
__global__ void rmsnorm_bwd_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                        const float *weight, const float *rstd, int N, int C) {
    const int row = blockIdx.x * RMS_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    constexpr int W = sizeof(V) / sizeof(float);
    const int n = C / W;
    const size_t at = (size_t)row * C;
    const V *x = (const V *)(inp + at), *dy = (const V *)(dout + at), *w = (const V *)weight;
    V *dx = (V *)(dinp + at);
    const float s = rstd[row];
    float dot = 0.0f;
    for (int i = lane; i < n; i += 32) dot += v_dot(dy[i], w[i], x[i], s);
    const float m = cuda_warp_sum(dot) / (float)C;
    for (int i = lane; i < n; i += 32) dx[i] = v_dx(dx[i], dy[i], w[i], x[i], s, m);
}

// pw (chunk, C) = sum over the chunk's rows of dout * inp * rstd: block (32, 8), 32 columns.
__global__ void rmsnorm_dw_partials_kernel(float *pw, const float *dout, const float *inp,
                                           const float *rstd, int N, int C) {
    __shared__ float sw[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    const int r0 = blockIdx.y * RMS_CHUNK, r1 = min(r0 + RMS_CHUNK, N);
    float aw = 0.0f;
    if (c < C)
        for (int r = r0 + ty; r < r1; r += 8) {
            const size_t at = (size_t)r * C + c;
            aw += dout[at] * (inp[at] * rstd[r]);
        }
    sw[ty][tx] = aw;
    __syncthreads();
    if (ty == 0 && c < C) {
        float w = 0.0f;
        for (int k = 0; k < 8; k++) w += sw[k][tx];
        pw[(size_t)blockIdx.y * C + c] = w;
    }
}

// dweight (C) += the chunks' partial sums, in chunk order.
__global__ void rmsnorm_dw_finish_kernel(float *dweight, const float *pw, int nchunks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float w = 0.0f;
    for (int k = 0; k < nchunks; k++) w += pw[(size_t)k * C + c];
    dweight[c] += w;
}

static unsigned rms_blocks(int N) {
    return (unsigned)((N + RMS_ROWS_PER_BLOCK - 1) / RMS_ROWS_PER_BLOCK);
}

static void rms_fwd(cuda_ctx *x, float *res, float *out, float *rstd, const float *a,
                    const float *c, const float *weight, int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    const int vec = C % 4 == 0 && aligned16(out) && aligned16(a) && aligned16(weight) &&
                    (!c || (aligned16(c) && aligned16(res)));
    if (vec) {
        rmsnorm_fwd_kernel<float4><<<rms_blocks(N), 32 * RMS_ROWS_PER_BLOCK, 0, x->stream>>>(
            res, out, rstd, a, c, weight, N, C, eps);
        CUDA_LAUNCH_CHECK("rmsnorm_fwd_kernel<float4>");
    } else {
        rmsnorm_fwd_kernel<float><<<rms_blocks(N), 32 * RMS_ROWS_PER_BLOCK, 0, x->stream>>>(
            res, out, rstd, a, c, weight, N, C, eps);
        CUDA_LAUNCH_CHECK("rmsnorm_fwd_kernel<float>");
    }
}

void cuda_rmsnorm_fwd(backend *b, float *out, float *rstd, const float *inp, const float *weight,
                      int N, int C, float eps) {
    rms_fwd(cuda_ctx_of(b), NULL, out, rstd, inp, NULL, weight, N, C, eps);
}

void cuda_residual_rmsnorm_fwd(backend *b, float *res, float *out, float *rstd, const float *a,
                               const float *c, const float *weight, int N, int C, float eps) {
    rms_fwd(cuda_ctx_of(b), res, out, rstd, a, c, weight, N, C, eps);
}

// The input gradient of cuda_rmsnorm_bwd (vectorised where the rows allow).
static void rmsnorm_bwd_dinp(cuda_ctx *x, float *dinp, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C) {
    const int vec = C % 4 == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) &&
                    aligned16(weight);
    if (vec) {
        rmsnorm_bwd_dinp_kernel<float4><<<rms_blocks(N), 32 * RMS_ROWS_PER_BLOCK, 0, x->stream>>>(
            dinp, dout, inp, weight, rstd, N, C);
        CUDA_LAUNCH_CHECK("rmsnorm_bwd_dinp_kernel<float4>");
    } else {
        rmsnorm_bwd_dinp_kernel<float><<<rms_blocks(N), 32 * RMS_ROWS_PER_BLOCK, 0, x->stream>>>(
            dinp, dout, inp, weight, rstd, N, C);
        CUDA_LAUNCH_CHECK("rmsnorm_bwd_dinp_kernel<float>");
    }
}

void cuda_rmsnorm_bwd(backend *b, float *dinp, float *dweight, const float *dout, const float *inp,
                      const float *weight, const float *rstd, int N, int C) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (N <= 0 || C <= 0) return;
    // The split forms (backend.h): dinp NULL skips its kernel, dweight NULL the partial sums.
    if (dinp) rmsnorm_bwd_dinp(x, dinp, dout, inp, weight, rstd, N, C);
    if (!dweight) return;
    // The LayerNorm's workspace (its dweight half): reserve sized it for these rows.
    const int nchunks = (N + RMS_CHUNK - 1) / RMS_CHUNK;
    float *pw = (float *)cuda_scratch(x, cuda_ws_column_sums((size_t)N, (size_t)C));
    dim3 grid((C + 31) / 32, nchunks), block(32, 8);
    rmsnorm_dw_partials_kernel<<<grid, block, 0, x->stream>>>(pw, dout, inp, rstd, N, C);
    CUDA_LAUNCH_CHECK("rmsnorm_dw_partials_kernel");
    rmsnorm_dw_finish_kernel<<<(C + 255) / 256, 256, 0, x->stream>>>(dweight, pw, nchunks, C);
    CUDA_LAUNCH_CHECK("rmsnorm_dw_finish_kernel");
}

// ---------------------------------------------------------------------------------------
// RoPE: thread k of a row owns pairs i = W k .. W k + W - 1 (i < HS/2) of every q and k head
// of that row: their cos and sin read once from the table, then the heads in turn, each
// element by rope_math.h's rule. dir -1: the inverse rotation.

template <typename V>
__global__ void rope_kernel(float *qkv, int BT, int T, int heads, int ld, int HS, const float2 *tab,
                            float dir) {
    constexpr int W = sizeof(V) / sizeof(float);
    const int half = HS / 2, per_row = half / W;
    const size_t total = (size_t)BT * per_row;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        const int row = (int)(e / per_row), i0 = (int)(e % per_row) * W, t = row % T;
        float2 cs[W];
#pragma unroll
        for (int k = 0; k < W; k++) cs[k] = tab[rope_at(t, i0 + k, HS) / 2];
        float *base = qkv + (size_t)row * ld + i0;
        for (int h = 0; h < heads; h++) {
            V *p0 = (V *)(base + (size_t)h * HS), *p1 = (V *)(base + (size_t)h * HS + half);
            V a = *p0, b = *p1;
            float *x0 = (float *)&a, *x1 = (float *)&b;
#pragma unroll
            for (int k = 0; k < W; k++) {
                const float u = x0[k], v = x1[k];
                x0[k] = rope_rotated(u, v, cs[k].x, cs[k].y, i0 + k, HS, dir);
                x1[k] = rope_rotated(v, u, cs[k].x, cs[k].y, i0 + k + half, HS, dir);
            }
            *p0 = a;
            *p1 = b;
        }
    }
}

void cuda_rope_apply(cuda_ctx *x, float *qkv, int B, int T, int NH, int NKV, int HS,
                     const float2 *tab, float dir) {
    if (B <= 0 || T <= 0 || HS < 2) return;
    const int half = HS / 2, ld = (NH + 2 * NKV) * HS, BT = B * T;
    // float4: the pairs come in fours and every head's halves start 16-byte aligned.
    if (half % 4 == 0 && aligned16(qkv)) {
        const size_t n = (size_t)BT * (half / 4);
        rope_kernel<float4><<<cuda_grid_for(n, LLAMA_THREADS), LLAMA_THREADS, 0, x->stream>>>(
            qkv, BT, T, NH + NKV, ld, HS, tab, dir);
        CUDA_LAUNCH_CHECK("rope_kernel<float4>");
    } else {
        const size_t n = (size_t)BT * half;
        rope_kernel<float><<<cuda_grid_for(n, LLAMA_THREADS), LLAMA_THREADS, 0, x->stream>>>(
            qkv, BT, T, NH + NKV, ld, HS, tab, dir);
        CUDA_LAUNCH_CHECK("rope_kernel<float>");
    }
}

const float2 *cuda_rope_table(cuda_ctx *x, int T, int HS, float theta) {
    if (x->rope_tab && T <= x->rope_T && HS == x->rope_HS && theta == x->rope_theta)
        return x->rope_tab;
    // A longer table serves every shorter T (the angle of position t does not depend on T):
    // past an earlier table, grow to twice its positions so that growing T (sampling) builds
    // a few tables, not one per step.
    const int cap = x->rope_tab && HS == x->rope_HS && theta == x->rope_theta && T < 2 * x->rope_T
                        ? 2 * x->rope_T
                        : T;
    if (x->reserved && !x->grew) {
        x->grew = 1;
        LOG_WARN("the CUDA backend's RoPE table is rebuilt for T %d, head size %d, theta %g in "
                 "the middle of a run (reserve made it for T %d, head size %d, theta %g); "
                 "please report this as a bug",
                 T, HS, (double)theta, x->rope_T, x->rope_HS, (double)x->rope_theta);
    }
    const size_t n = rope_table_floats(cap, HS), bytes = cuda_ws_rope_table(cap, HS);
    float *host = (float *)malloc(n * sizeof(float));
    if (!host) {
        LOG_ERROR("out of host memory: %zu bytes for the RoPE table", n * sizeof(float));
        cuda_op_fail("rope table", "malloc", __FILE__, __LINE__);
    }
    rope_table_fill(host, cap, HS, (double)theta);
    if (x->rope_tab) CUDA_OP_CHECK(cudaFreeAsync(x->rope_tab, x->stream));
    x->rope_tab = NULL;
    cuda_count_alloc(x);
    CUDA_OP_CHECK(cudaMallocAsync((void **)&x->rope_tab, bytes, x->stream));
    CUDA_OP_CHECK(
        cudaMemcpyAsync(x->rope_tab, host, n * sizeof(float), cudaMemcpyHostToDevice, x->stream));
    CUDA_OP_CHECK(cudaStreamSynchronize(x->stream)); // the copy has read `host`
    free(host);
    x->rope_T = cap, x->rope_HS = HS, x->rope_theta = theta;
    return x->rope_tab;
}

void cuda_rope_free(cuda_ctx *x) {
    if (x->rope_tab) cudaFreeAsync(x->rope_tab, x->stream);
    x->rope_tab = NULL;
}

void cuda_rope_fwd(backend *b, float *qkv, int B, int T, int NH, int NKV, int HS, float theta) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (B <= 0 || T <= 0 || HS < 2) return;
    cuda_rope_apply(x, qkv, B, T, NH, NKV, HS, cuda_rope_table(x, T, HS, theta), 1.0f);
}

// The rotation is orthogonal: its gradient is the inverse rotation.
void cuda_rope_bwd(backend *b, float *dqkv, int B, int T, int NH, int NKV, int HS, float theta) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (B <= 0 || T <= 0 || HS < 2) return;
    cuda_rope_apply(x, dqkv, B, T, NH, NKV, HS, cuda_rope_table(x, T, HS, theta), -1.0f);
}

// ---------------------------------------------------------------------------------------
// SwiGLU: one pass each way; element (n, j) of the (N, F) side reads gate fc[n, j] and up
// fc[n, F + j]. V: W consecutive j.

template <typename V> __global__ void swiglu_fwd_kernel(float *out, const float *fc, int N, int F) {
    constexpr int W = sizeof(V) / sizeof(float);
    const int per_row = F / W;
    const size_t total = (size_t)N * per_row;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t n = e / per_row, j = (e % per_row) * W;
        V g = *(const V *)(fc + n * 2 * F + j);
        const V u = *(const V *)(fc + n * 2 * F + F + j);
        float *gg = (float *)&g;
        const float *uu = (const float *)&u;
#pragma unroll
        for (int k = 0; k < W; k++) gg[k] = gg[k] / (1.0f + expf(-gg[k])) * uu[k];
        *(V *)(out + n * F + j) = g;
    }
}

// d gate = dout up sig (1 + gate (1 - sig)), d up = dout silu(gate)
template <typename V>
__global__ void swiglu_bwd_kernel(float *dfc, const float *dout, const float *fc, int N, int F) {
    constexpr int W = sizeof(V) / sizeof(float);
    const int per_row = F / W;
    const size_t total = (size_t)N * per_row;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t n = e / per_row, j = (e % per_row) * W;
        const V g = *(const V *)(fc + n * 2 * F + j), u = *(const V *)(fc + n * 2 * F + F + j);
        const V dy = *(const V *)(dout + n * F + j);
        V dg, du;
        const float *gg = (const float *)&g, *uu = (const float *)&u, *d = (const float *)&dy;
        float *pg = (float *)&dg, *pu = (float *)&du;
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float sig = 1.0f / (1.0f + expf(-gg[k]));
            pg[k] = d[k] * uu[k] * sig * (1.0f + gg[k] * (1.0f - sig));
            pu[k] = d[k] * gg[k] * sig;
        }
        *(V *)(dfc + n * 2 * F + j) = dg;
        *(V *)(dfc + n * 2 * F + F + j) = du;
    }
}

void cuda_swiglu_fwd(backend *b, float *out, const float *fc, int N, int F) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (N <= 0 || F <= 0) return;
    if (F % 4 == 0 && aligned16(out) && aligned16(fc)) {
        const size_t n = (size_t)N * (F / 4);
        swiglu_fwd_kernel<float4>
            <<<cuda_grid_for(n, LLAMA_THREADS), LLAMA_THREADS, 0, x->stream>>>(out, fc, N, F);
        CUDA_LAUNCH_CHECK("swiglu_fwd_kernel<float4>");
    } else {
        const size_t n = (size_t)N * F;
        swiglu_fwd_kernel<float>
            <<<cuda_grid_for(n, LLAMA_THREADS), LLAMA_THREADS, 0, x->stream>>>(out, fc, N, F);
        CUDA_LAUNCH_CHECK("swiglu_fwd_kernel<float>");
    }
}

void cuda_swiglu_bwd(backend *b, float *dfc, const float *dout, const float *fc, int N, int F) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (N <= 0 || F <= 0) return;
    if (F % 4 == 0 && aligned16(dfc) && aligned16(dout) && aligned16(fc)) {
        const size_t n = (size_t)N * (F / 4);
        swiglu_bwd_kernel<float4>
            <<<cuda_grid_for(n, LLAMA_THREADS), LLAMA_THREADS, 0, x->stream>>>(dfc, dout, fc, N, F);
        CUDA_LAUNCH_CHECK("swiglu_bwd_kernel<float4>");
    } else {
        const size_t n = (size_t)N * F;
        swiglu_bwd_kernel<float>
            <<<cuda_grid_for(n, LLAMA_THREADS), LLAMA_THREADS, 0, x->stream>>>(dfc, dout, fc, N, F);
        CUDA_LAUNCH_CHECK("swiglu_bwd_kernel<float>");
    }
}
