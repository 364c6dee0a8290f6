// backend_cuda_attn.cu: causal multi-head attention of the CUDA backend, flash-style, fp32.
//
// Per head (b, h), with Q, K, V the (T, HS) slices of qkv (row stride (NH + 2 NKV) HS; query
// head h reads kv head h / (NH / NKV): grouped-query attention, att_heads_of) and scores
// S = Q K^T / sqrt(HS), P = causal softmax(S):
//   forward   O = P V, computed over tiles of keys with an online softmax (running max m,
//             running sum l); the only state kept for the backward is the log-sum-exp of
//             each row, lse = m + log2(l) in base 2 (scores are carried as S * log2(e), so
//             exp2 does the exponentials): state (B, NH, T) floats.
//   backward  P is recomputed from lse tile by tile; dP = dO V^T; D = rowsum(P * dP);
//             dS = P * (dP - D); dQ = dS K / sqrt(HS), dK = dS^T Q / sqrt(HS), dV = P^T dO.
// No T x T matrix exists anywhere: tiles of at most 64 keys (or queries) live in shared
// memory, scores and probabilities in registers.
//
// Work split. A block is 8 warps; each warp owns 4 rows (query rows in the forward and dQ,
// key rows in dK/dV), so a block owns 32 rows. The other side comes in tiles of 64, and lane
// L of a warp owns tile rows L and L + 32: it computes their scores against the warp's 4 rows
// (dot products over the head dimension, the 4 rows broadcast from shared memory), and the
// P-weighted sums over the tile are accumulated with each lane owning head dimensions
// L, L + 32, ... of the result (the tile's probabilities broadcast by warp shuffles). Shared
// rows are padded to DP + 1 floats so that lanes reading different rows hit different banks.
//
// The backward is two kernels, neither with atomics (deterministic, as every op here):
//   1. dq kernel, per block of 32 queries: D for its rows, then a sweep over the key tiles
//      accumulates dQ. D = rowsum(dO * O) from the forward's output (backend.h's operand),
//      one pass over the rows; with TRIDENT_CUDA_ATTN=v1 (and on bf16 q, k, v widened, whose
//      O is bf16) it is D = rowsum(P * dP) from a first sweep over the key tiles instead, as
//      before the operand existed. D is stored for pass 2;
//   2. dkv kernel, per block of 32 keys of a kv head: for each query head of its group in
//      order, sweeps the query tiles from the diagonal on and accumulates dK and dV (the
//      group's sum stays in registers: no atomics, a fixed order).
// This recomputes S and dP in both kernels (FlashAttention-2 computes them once and adds dQ
// with atomics, which makes results depend on timing: backend_cuda_attn_fa2_bwd.cu says more).
//
// Dispatch (cuda_attention_fwd / _bwd at the end): bf16 q, k, v go to the FlashAttention-2
// kernels (backend_cuda_attn_fa2.cu) where those take them, else to the v1 tensor-core ones
// (backend_cuda_attn_tc.cu), which fall back to these on widened values; fp32 ones come here.
//
// RoPE (rope_theta > 0, backend.attn_rope: a llama's qkv, kept unrotated): att_load stores the
// Q and K rows rotated by RoPE's table (src/compute/rope_math.h; each element from its own
// value and its pair partner's, read from global memory), into the block's shared copy only:
// other blocks read the same K rows. S and everything after it are the rotated q and k's; dQ
// and dK come out in the rotated frame, and cuda_attention_bwd unrotates them with one pass of
// the rope kernel over dqkv (a lane holds head dimensions lane + 32 k, so the two elements of a
// pair are in one lane only when HS / 2 is a multiple of 32).
//
// Head sizes: kernels are instantiated for DP = 32, 64, 128, 256 and run any HS <= DP with
// the head dimension zero-padded in shared memory; larger heads are refused, and so are
// those whose kernels need more shared memory than the device has (DP = 256 needs 194 KiB).
#include "backend_cuda_internal.cuh"
#include "base/env.h"
#include "compute/rope_math.h"

#include <math.h>

#define ATT_WARPS 8
#define ATT_RPW 4                    // rows per warp
#define ATT_BR (ATT_WARPS * ATT_RPW) // rows per block
#define ATT_BC 64                    // rows per tile of the other side: 2 per lane
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_LOG2E 1.4426950408889634f

// Tile rows [0, rows) of s (row stride DP + 1) from global rows g + r * gstride, the first
// nvalid of them; elements past nvalid or past HS are zero, so that every shared value that
// a dot product or a weighted sum reads is finite. rope (the RoPE table, or NULL): row r is
// position pos0 + r of its sequence, and each element is stored rotated (rope_math.h's rule,
// from its own value and its pair partner's): the block's copy, never the global rows.
template <int DP>
__device__ void att_load(float *s, const float *g, size_t gstride, int nvalid, int rows, int HS,
                         const float2 *rope = nullptr, int pos0 = 0) {
    constexpr int LD = DP + 1;
    for (int idx = threadIdx.x; idx < rows * DP; idx += ATT_THREADS) {
        const int r = idx / DP, d = idx % DP;
        float v = 0.0f;
        if (r < nvalid && d < HS) {
            const float *row = g + (size_t)r * gstride;
            v = row[d];
            if (rope) {
                const float2 cs = rope[rope_at(pos0 + r, rope_pair(d, HS), HS) / 2];
                v = rope_rotated(v, row[rope_partner(d, HS)], cs.x, cs.y, d, HS, 1.0f);
            }
        }
        s[r * LD + d] = v;
    }
}

// acc[rr][j2] = sum_d sA[rr][d] * sB[lane + 32 j2][d]: the warp's 4 rows (sA) against the
// two tile rows this lane owns.
template <int DP>
__device__ __forceinline__ void att_dots(float acc[ATT_RPW][2], const float *sA, const float *sB,
                                         int lane) {
    constexpr int LD = DP + 1;
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++) acc[rr][0] = acc[rr][1] = 0.0f;
    const float *b0 = sB + lane * LD, *b1 = sB + (lane + 32) * LD;
#pragma unroll 8
    for (int d = 0; d < DP; d++) {
        const float k0 = b0[d], k1 = b1[d];
#pragma unroll
        for (int rr = 0; rr < ATT_RPW; rr++) {
            const float a = sA[rr * LD + d];
            acc[rr][0] = fmaf(a, k0, acc[rr][0]);
            acc[rr][1] = fmaf(a, k1, acc[rr][1]);
        }
    }
}

// o[rr][k] += sum_{j < kn} p[rr][j] * sB[j][lane + 32 k], where lane j % 32 holds p[rr][j]
// in p[rr][j / 32].
template <int DP>
__device__ __forceinline__ void att_accum(float o[ATT_RPW][DP / 32], const float p[ATT_RPW][2],
                                          const float *sB, int lane, int kn) {
    constexpr int LD = DP + 1;
#pragma unroll
    for (int j2 = 0; j2 < 2; j2++) {
        const int jn = min(32, kn - 32 * j2);
        for (int jl = 0; jl < jn; jl++) {
            float pj[ATT_RPW];
#pragma unroll
            for (int rr = 0; rr < ATT_RPW; rr++) pj[rr] = __shfl_sync(0xffffffffu, p[rr][j2], jl);
            const float *brow = sB + (32 * j2 + jl) * LD + lane;
#pragma unroll
            for (int k = 0; k < DP / 32; k++) {
                const float bv = brow[32 * k];
#pragma unroll
                for (int rr = 0; rr < ATT_RPW; rr++) o[rr][k] = fmaf(pj[rr], bv, o[rr][k]);
            }
        }
    }
}

// Writes the warp's 4 rows of o * mul to dst rows [row0, ...) (row stride ld), rows < T,
// head dimensions < HS.
template <int DP>
__device__ __forceinline__ void att_store(float *dst, size_t ld, const float o[ATT_RPW][DP / 32],
                                          const float mul[ATT_RPW], int row0, int T, int HS,
                                          int lane) {
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++) {
        if (row0 + rr >= T) continue;
#pragma unroll
        for (int k = 0; k < DP / 32; k++) {
            const int d = lane + 32 * k;
            if (d < HS) dst[(size_t)(row0 + rr) * ld + d] = o[rr][k] * mul[rr];
        }
    }
}

// ---------------------------------------------------------------------------------------
// Forward. Grid (query blocks, B * NH); the blocks with the most keys start first.

template <int DP, bool ROPE>
__global__ void __launch_bounds__(ATT_THREADS)
    att_fwd_kernel(float *out, float *lse, const float *qkv, int T, int NH, int NKV, int HS,
                   float sl2, const float2 *rope) {
    constexpr int LD = DP + 1, NK = DP / 32;
    extern __shared__ float smem[];
    float *sQ = smem, *sK = sQ + ATT_BR * LD, *sV = sK + ATT_BC * LD;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * ATT_BR, bh = blockIdx.y;
    const int C = NH * HS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const att_heads hd = att_heads_of(bh / NH, bh % NH, T, NH, NKV, HS);
    const size_t ld3 = hd.ld;
    const float *base = qkv + hd.q, *kbase = qkv + hd.k, *vbase = qkv + hd.v;
    const int qn = min(ATT_BR, T - q0), row0 = q0 + warp * ATT_RPW;
    att_load<DP>(sQ, base + (size_t)q0 * ld3, ld3, qn, ATT_BR, HS, ROPE ? rope : nullptr, q0);
    const float *sQw = sQ + warp * ATT_RPW * LD;

    float m[ATT_RPW], l[ATT_RPW], o[ATT_RPW][NK];
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++) {
        m[rr] = -INFINITY, l[rr] = 0.0f;
#pragma unroll
        for (int k = 0; k < NK; k++) o[rr][k] = 0.0f;
    }
    // Key tiles start at multiples of 64 <= q0 (q0 is a multiple of 32), so every row has an
    // unmasked key in every tile it visits, and m is finite after the first.
    const int kend = q0 + qn;
    for (int k0 = 0; k0 < kend; k0 += ATT_BC) {
        const int kn = min(ATT_BC, kend - k0);
        __syncthreads(); // the previous tile is consumed
        att_load<DP>(sK, kbase + (size_t)k0 * ld3, ld3, kn, ATT_BC, HS, ROPE ? rope : nullptr, k0);
        att_load<DP>(sV, vbase + (size_t)k0 * ld3, ld3, kn, ATT_BC, HS);
        __syncthreads();
        float s[ATT_RPW][2];
        att_dots<DP>(s, sQw, sK, lane);
#pragma unroll
        for (int rr = 0; rr < ATT_RPW; rr++) {
#pragma unroll
            for (int j2 = 0; j2 < 2; j2++) {
                const int j = lane + 32 * j2;
                s[rr][j2] = j < kn && k0 + j <= row0 + rr ? s[rr][j2] * sl2 : -INFINITY;
            }
            const float mnew = fmaxf(m[rr], cuda_warp_max(fmaxf(s[rr][0], s[rr][1])));
            const float alpha = exp2f(m[rr] - mnew); // 0 on the first tile (m = -inf)
            s[rr][0] = exp2f(s[rr][0] - mnew);
            s[rr][1] = exp2f(s[rr][1] - mnew);
            l[rr] = l[rr] * alpha + s[rr][0] + s[rr][1]; // this lane's part of the sum
#pragma unroll
            for (int k = 0; k < NK; k++) o[rr][k] *= alpha;
            m[rr] = mnew;
        }
        att_accum<DP>(o, s, sV, lane, kn);
    }
    float inv[ATT_RPW];
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++) {
        const float lsum = cuda_warp_sum(l[rr]);
        inv[rr] = 1.0f / lsum;
        if (lane == 0 && row0 + rr < T) lse[(size_t)bh * T + row0 + rr] = m[rr] + log2f(lsum);
    }
    float *obase = out + (size_t)(bh / NH) * T * C + (size_t)(bh % NH) * HS;
    att_store<DP>(obase, C, o, inv, row0, T, HS, lane);
}

// ---------------------------------------------------------------------------------------
// Backward, pass 1: D and dQ per block of 32 queries.

template <int DP, bool ROPE>
__global__ void __launch_bounds__(ATT_THREADS)
    att_bwd_dq_kernel(float *dqkv, float *delta, const float *dout, const float *qkv,
                      const float *o, const float *lse, int T, int NH, int NKV, int HS, float sl2,
                      float scale, const float2 *rope) {
    constexpr int LD = DP + 1, NK = DP / 32;
    extern __shared__ float smem[];
    float *sQ = smem, *sdO = sQ + ATT_BR * LD, *sK = sdO + ATT_BR * LD, *sV = sK + ATT_BC * LD;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * ATT_BR, bh = blockIdx.y;
    const int C = NH * HS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const att_heads hd = att_heads_of(bh / NH, bh % NH, T, NH, NKV, HS);
    const size_t ld3 = hd.ld, head = (size_t)(bh / NH) * T, hoff = (size_t)(bh % NH) * HS;
    const float *base = qkv + hd.q, *kbase = qkv + hd.k, *vbase = qkv + hd.v;
    const int qn = min(ATT_BR, T - q0), row0 = q0 + warp * ATT_RPW;
    att_load<DP>(sQ, base + (size_t)q0 * ld3, ld3, qn, ATT_BR, HS, ROPE ? rope : nullptr, q0);
    att_load<DP>(sdO, dout + (head + q0) * C + hoff, C, qn, ATT_BR, HS);
    const float *sQw = sQ + warp * ATT_RPW * LD, *sdOw = sdO + warp * ATT_RPW * LD;
    float rl[ATT_RPW], rd[ATT_RPW]; // lse and D of the warp's rows
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++) {
        rl[rr] = row0 + rr < T ? lse[(size_t)bh * T + row0 + rr] : 0.0f;
        rd[rr] = 0.0f;
    }
    float dq[ATT_RPW][NK];
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++)
#pragma unroll
        for (int k = 0; k < NK; k++) dq[rr][k] = 0.0f;

    if (o) { // D = rowsum(dO * O): lane-strided over the head dimension, then the warp's sum
#pragma unroll
        for (int rr = 0; rr < ATT_RPW; rr++) {
            const int row = row0 + rr;
            if (row < T) {
                const size_t at = (head + row) * C + hoff;
                for (int d = lane; d < HS; d += 32) rd[rr] = fmaf(dout[at + d], o[at + d], rd[rr]);
            }
            rd[rr] = cuda_warp_sum(rd[rr]);
            if (lane == 0 && row < T) delta[(size_t)bh * T + row] = rd[rr];
        }
    }
    const int kend = q0 + qn;
    for (int sweep = o ? 1 : 0; sweep < 2; sweep++) { // 0: D (without o), 1: dQ
        for (int k0 = 0; k0 < kend; k0 += ATT_BC) {
            const int kn = min(ATT_BC, kend - k0);
            __syncthreads();
            att_load<DP>(sK, kbase + (size_t)k0 * ld3, ld3, kn, ATT_BC, HS, ROPE ? rope : nullptr,
                         k0);
            att_load<DP>(sV, vbase + (size_t)k0 * ld3, ld3, kn, ATT_BC, HS);
            __syncthreads();
            float s[ATT_RPW][2], dp[ATT_RPW][2];
            att_dots<DP>(s, sQw, sK, lane);
            att_dots<DP>(dp, sdOw, sV, lane);
#pragma unroll
            for (int rr = 0; rr < ATT_RPW; rr++)
#pragma unroll
                for (int j2 = 0; j2 < 2; j2++) {
                    const int j = lane + 32 * j2;
                    const float p = j < kn && k0 + j <= row0 + rr ? exp2f(s[rr][j2] * sl2 - rl[rr])
                                                                  : 0.0f;
                    if (sweep == 0) rd[rr] += p * dp[rr][j2];
                    else s[rr][j2] = p * (dp[rr][j2] - rd[rr]); // dS
                }
            if (sweep == 1) att_accum<DP>(dq, s, sK, lane, kn);
        }
        if (sweep == 0) {
#pragma unroll
            for (int rr = 0; rr < ATT_RPW; rr++) {
                rd[rr] = cuda_warp_sum(rd[rr]);
                if (lane == 0 && row0 + rr < T) delta[(size_t)bh * T + row0 + rr] = rd[rr];
            }
        }
    }
    const float mul[ATT_RPW] = {scale, scale, scale, scale};
    att_store<DP>(dqkv + hd.q, ld3, dq, mul, row0, T, HS, lane);
}

// ---------------------------------------------------------------------------------------
// Backward, pass 2: dK and dV per block of 32 keys of one kv head, summed over the query
// heads that read it (NH / NKV of them, in head order: deterministic, no atomics). Block 0
// (keys 0..31, the most queries) starts first. Grid (key blocks, B * NKV).

template <int DP, bool ROPE>
__global__ void __launch_bounds__(ATT_THREADS)
    att_bwd_dkv_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                       const float *delta, int T, int NH, int NKV, int HS, float sl2, float scale,
                       const float2 *rope) {
    constexpr int LD = DP + 1, NK = DP / 32;
    extern __shared__ float smem[];
    float *sK = smem, *sV = sK + ATT_BR * LD, *sQ = sV + ATT_BR * LD, *sdO = sQ + ATT_BC * LD;
    float *sL = sdO + ATT_BC * LD, *sD = sL + ATT_BC;
    const int k0 = blockIdx.x * ATT_BR, b = blockIdx.y / NKV, group = NH / NKV;
    const int h0 = blockIdx.y % NKV * group; // the group's first query head
    const int C = NH * HS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const att_heads kv = att_heads_of(b, h0, T, NH, NKV, HS);
    const size_t ld3 = kv.ld, head = (size_t)b * T;
    const int kn = min(ATT_BR, T - k0), key0 = k0 + warp * ATT_RPW;
    att_load<DP>(sK, qkv + kv.k + (size_t)k0 * ld3, ld3, kn, ATT_BR, HS, ROPE ? rope : nullptr, k0);
    att_load<DP>(sV, qkv + kv.v + (size_t)k0 * ld3, ld3, kn, ATT_BR, HS);
    const float *sKw = sK + warp * ATT_RPW * LD, *sVw = sV + warp * ATT_RPW * LD;
    float dk[ATT_RPW][NK], dv[ATT_RPW][NK];
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++)
#pragma unroll
        for (int k = 0; k < NK; k++) dk[rr][k] = dv[rr][k] = 0.0f;

    for (int h = h0; h < h0 + group; h++) {
        const size_t bh = (size_t)b * NH + h;
        const float *qbase = qkv + kv.q + (size_t)(h - h0) * HS;
        const float *obase = dout + head * C + (size_t)h * HS, *lh = lse + bh * T;
        const float *dh = delta + bh * T;
        for (int q0 = k0 / ATT_BC * ATT_BC; q0 < T; q0 += ATT_BC) {
            const int qn = min(ATT_BC, T - q0);
            __syncthreads();
            att_load<DP>(sQ, qbase + (size_t)q0 * ld3, ld3, qn, ATT_BC, HS, ROPE ? rope : nullptr,
                         q0);
            att_load<DP>(sdO, obase + (size_t)q0 * C, C, qn, ATT_BC, HS);
            for (int r = threadIdx.x; r < ATT_BC; r += ATT_THREADS) {
                sL[r] = r < qn ? lh[q0 + r] : 0.0f;
                sD[r] = r < qn ? dh[q0 + r] : 0.0f;
            }
            __syncthreads();
            float s[ATT_RPW][2], dp[ATT_RPW][2];
            att_dots<DP>(s, sKw, sQ, lane); // [key][query]
            att_dots<DP>(dp, sVw, sdO, lane);
#pragma unroll
            for (int rr = 0; rr < ATT_RPW; rr++)
#pragma unroll
                for (int j2 = 0; j2 < 2; j2++) {
                    const int i = lane + 32 * j2; // query q0 + i
                    const float p = i < qn && q0 + i >= key0 + rr ? exp2f(s[rr][j2] * sl2 - sL[i])
                                                                  : 0.0f;
                    s[rr][j2] = p;
                    dp[rr][j2] = p * (dp[rr][j2] - sD[i]); // dS
                }
            att_accum<DP>(dv, s, sdO, lane, qn);
            att_accum<DP>(dk, dp, sQ, lane, qn);
        }
    }
    const float one[ATT_RPW] = {1.0f, 1.0f, 1.0f, 1.0f};
    const float mul[ATT_RPW] = {scale, scale, scale, scale};
    att_store<DP>(dqkv + kv.k, ld3, dk, mul, key0, T, HS, lane);
    att_store<DP>(dqkv + kv.v, ld3, dv, one, key0, T, HS, lane);
}

// ---------------------------------------------------------------------------------------
// Dispatch

template <int DP> struct att_smem {
    static constexpr size_t LD = DP + 1;
    static constexpr size_t fwd = (ATT_BR + 2 * ATT_BC) * LD * sizeof(float);
    static constexpr size_t dq = (2 * ATT_BR + 2 * ATT_BC) * LD * sizeof(float);
    static constexpr size_t dkv = ((2 * ATT_BR + 2 * ATT_BC) * LD + 2 * ATT_BC) * sizeof(float);
};

template <int DP, bool ROPE> static tri_status att_allow_smem(void) {
    CUDA_CHECK(cudaFuncSetAttribute(att_fwd_kernel<DP, ROPE>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)att_smem<DP>::fwd));
    CUDA_CHECK(cudaFuncSetAttribute(att_bwd_dq_kernel<DP, ROPE>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)att_smem<DP>::dq));
    CUDA_CHECK(cudaFuncSetAttribute(att_bwd_dkv_kernel<DP, ROPE>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)att_smem<DP>::dkv));
    return TRI_OK;
}

// Kernels asking for more than 48 KiB of shared memory must say so once per device; head
// sizes whose kernels need more than the device offers (smem_optin) are refused later.
template <int DP> static tri_status att_enable(cuda_ctx *x, size_t smem_optin) {
    if (att_smem<DP>::dkv > smem_optin) return TRI_OK; // the largest of the three
    TRI_CHECK((att_allow_smem<DP, false>()));
    TRI_CHECK((att_allow_smem<DP, true>()));
    x->att_max_hs = DP;
    return TRI_OK;
}

tri_status cuda_attention_init(cuda_ctx *x, size_t smem_optin) {
    static const char *const kernels[] = {"fa2", "v1"};
    const int k = env_choice(ENV_TRIDENT_CUDA_ATTN, kernels, 2, 0);
    if (k < 0) {
        LOG_ERROR("TRIDENT_CUDA_ATTN=%s: the CUDA attention kernels are fa2 or v1",
                  env_get(ENV_TRIDENT_CUDA_ATTN));
        LOG_HINT("unset it for the default (fa2); v1 selects the previous kernels, to bisect "
                 "a failing device run (README \"Environment variables\")");
        return TRI_ERR_CONFIG;
    }
    x->att_fa2 = k == 0;
    TRI_CHECK(cuda_fa2_init(x, smem_optin));
    TRI_CHECK(cuda_atc_init(x, smem_optin));
    x->att_max_hs = 0;
    TRI_CHECK(att_enable<32>(x, smem_optin));
    TRI_CHECK(att_enable<64>(x, smem_optin));
    TRI_CHECK(att_enable<128>(x, smem_optin));
    TRI_CHECK(att_enable<256>(x, smem_optin));
    return TRI_OK;
}

static void att_check_head(const cuda_ctx *x, int HS) {
    if (HS >= 1 && HS <= x->att_max_hs) return;
    LOG_ERROR("attention: head size %d is outside what the CUDA kernels support on this device "
              "(1..%d)",
              HS, x->att_max_hs);
    cuda_op_fail("attention", "head size check", __FILE__, __LINE__);
}

template <int DP>
static void att_fwd_launch(cuda_ctx *x, float *out, float *lse, const float *qkv, int B, int T,
                           int NH, int NKV, int HS, const float2 *rope) {
    const float sl2 = 1.0f / sqrtf((float)HS) * ATT_LOG2E;
    dim3 grid((T + ATT_BR - 1) / ATT_BR, B * NH);
    // RoPE's instances only with a table: the others compile as they did before it.
    if (rope)
        att_fwd_kernel<DP, true><<<grid, ATT_THREADS, att_smem<DP>::fwd, x->stream>>>(
            out, lse, qkv, T, NH, NKV, HS, sl2, rope);
    else
        att_fwd_kernel<DP, false><<<grid, ATT_THREADS, att_smem<DP>::fwd, x->stream>>>(
            out, lse, qkv, T, NH, NKV, HS, sl2, rope);
    CUDA_LAUNCH_CHECK("att_fwd_kernel");
}

template <int DP>
static void att_bwd_launch(cuda_ctx *x, float *dqkv, float *delta, const float *dout,
                           const float *qkv, const float *o, const float *lse, int B, int T, int NH,
                           int NKV, int HS, const float2 *rope) {
    const float scale = 1.0f / sqrtf((float)HS), sl2 = scale * ATT_LOG2E;
    dim3 grid((T + ATT_BR - 1) / ATT_BR, B * NH);
    if (rope)
        att_bwd_dq_kernel<DP, true><<<grid, ATT_THREADS, att_smem<DP>::dq, x->stream>>>(
            dqkv, delta, dout, qkv, o, lse, T, NH, NKV, HS, sl2, scale, rope);
    else
        att_bwd_dq_kernel<DP, false><<<grid, ATT_THREADS, att_smem<DP>::dq, x->stream>>>(
            dqkv, delta, dout, qkv, o, lse, T, NH, NKV, HS, sl2, scale, rope);
    CUDA_LAUNCH_CHECK("att_bwd_dq_kernel");
    dim3 kv_grid((T + ATT_BR - 1) / ATT_BR, B * NKV);
    if (rope)
        att_bwd_dkv_kernel<DP, true><<<kv_grid, ATT_THREADS, att_smem<DP>::dkv, x->stream>>>(
            dqkv, dout, qkv, lse, delta, T, NH, NKV, HS, sl2, scale, rope);
    else
        att_bwd_dkv_kernel<DP, false><<<kv_grid, ATT_THREADS, att_smem<DP>::dkv, x->stream>>>(
            dqkv, dout, qkv, lse, delta, T, NH, NKV, HS, sl2, scale, rope);
    CUDA_LAUNCH_CHECK("att_bwd_dkv_kernel");
}

void cuda_attention_fwd_f32(backend *b, float *out, void *state, const float *qkv, int B, int T,
                            int NH, int NKV, int HS, const float2 *rope) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (B <= 0 || T <= 0 || NH <= 0) return;
    att_check_head(x, HS);
    float *lse = (float *)state;
    if (HS <= 32) att_fwd_launch<32>(x, out, lse, qkv, B, T, NH, NKV, HS, rope);
    else if (HS <= 64) att_fwd_launch<64>(x, out, lse, qkv, B, T, NH, NKV, HS, rope);
    else if (HS <= 128) att_fwd_launch<128>(x, out, lse, qkv, B, T, NH, NKV, HS, rope);
    else att_fwd_launch<256>(x, out, lse, qkv, B, T, NH, NKV, HS, rope);
}

void cuda_attention_bwd_f32(backend *b, float *dqkv, const float *dout, const float *qkv,
                            const float *o, const void *state, int B, int T, int NH, int NKV,
                            int HS, const float2 *rope) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (B <= 0 || T <= 0 || NH <= 0) return;
    att_check_head(x, HS);
    const float *lse = (const float *)state;
    float *delta = (float *)cuda_scratch(x, (size_t)B * NH * T * sizeof(float));
#define ATT_BWD(dp) att_bwd_launch<dp>(x, dqkv, delta, dout, qkv, o, lse, B, T, NH, NKV, HS, rope)
    if (HS <= 32) ATT_BWD(32);
    else if (HS <= 64) ATT_BWD(64);
    else if (HS <= 128) ATT_BWD(128);
    else ATT_BWD(256);
#undef ATT_BWD
}

// The table's entries: the kernels of the operands' dtype (backend_attention_fwd / _bwd
// checked that q, k, v and O are both fp32 or both bf16), q and k rotated by RoPE's table
// when rope_theta > 0 (backend.attn_rope).
void cuda_attention_fwd(backend *b, float *out, void *state, operand qkv, int B, int T, int NH,
                        int NKV, int HS, float rope_theta) {
    cuda_ctx *x = cuda_ctx_of(b);
    TRI_ASSERT(NKV >= 1 && NH % NKV == 0); // the model checked it (grouped-query attention)
    if (B <= 0 || T <= 0 || NH <= 0) return;
    const float2 *rope = rope_theta > 0 ? cuda_rope_table(x, T, HS, rope_theta) : nullptr;
    if (qkv.dtype == DTYPE_BF16) {
        const uint16_t *q16 = (const uint16_t *)qkv.ptr;
        if (!cuda_fa2_fwd(x, out, (float *)state, q16, B, T, NH, NKV, HS, rope))
            cuda_attention_fwd_bf16(b, out, state, q16, B, T, NH, NKV, HS, rope);
    } else {
        cuda_attention_fwd_f32(b, out, state, (const float *)qkv.ptr, B, T, NH, NKV, HS, rope);
    }
}

void cuda_attention_bwd(backend *b, float *dqkv, const float *dout, operand qkv, operand out,
                        const void *state, int B, int T, int NH, int NKV, int HS,
                        float rope_theta) {
    cuda_ctx *x = cuda_ctx_of(b);
    TRI_ASSERT(NKV >= 1 && NH % NKV == 0);
    if (B <= 0 || T <= 0 || NH <= 0) return;
    const float2 *rope = rope_theta > 0 ? cuda_rope_table(x, T, HS, rope_theta) : nullptr;
    if (qkv.dtype == DTYPE_BF16) {
        const uint16_t *q16 = (const uint16_t *)qkv.ptr;
        if (cuda_fa2_bwd(x, dqkv, dout, q16, (const uint16_t *)out.ptr, (const float *)state, B, T,
                         NH, NKV, HS, rope))
            return; // FA2 wrote dq and dk unrotated
        cuda_attention_bwd_bf16(b, dqkv, dout, q16, state, B, T, NH, NKV, HS, rope);
    } else {
        cuda_attention_bwd_f32(b, dqkv, dout, (const float *)qkv.ptr,
                               x->att_fa2 ? (const float *)out.ptr : NULL, state, B, T, NH, NKV, HS,
                               rope);
    }
    // The v1 and fp32 kernels leave dq and dk in the rotated frame (a lane or a wmma fragment
    // does not hold both elements of a pair): one pass of the rope kernel unrotates them.
    if (rope) cuda_rope_apply(x, dqkv, B, T, NH, NKV, HS, rope, -1.0f);
}
