// backend_cuda_attn_fa2_bwd.cu: the backward of the FlashAttention-2 kernels
// (backend_cuda_attn_fa2.cu has the forward, the units and the numerics). With P the
// probabilities recomputed from the saved lse, per head:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D) with D = rowsum(dO * O),
//   dK = dS^T Q / sqrt(HS),  dQ = dS K / sqrt(HS).
//
// Two kernels, each output element written by exactly one warp, every sum in a fixed order,
// no atomics (bitwise reproducible, as every op of this backend):
//   1. dq, per block of 64 queries (grid (T / 64, B * NH), the most keys first): its
//      prologue computes D for the block's rows in one pass over dO and O (two threads per
//      row, fp32) and stores it for kernel 2; Q and dO (rounded to bf16) are staged once and
//      held in registers as A fragments; the key tiles K_j, V_j stream through shared memory
//      double-buffered (cp.async). Per tile and 16-key chunk a warp computes S = Q K^T and
//      dP = dO V^T, P = exp2(S' - lse), dS = P * (dP - D), rounds dS into A fragments in
//      registers and adds dQ += dS K_j (K through the transposing ldmatrix).
//   2. dkv, per block of 64 keys (block 0, the most queries, first): K and V staged once; the
//      query tiles from the diagonal on stream through shared memory (Q by cp.async,
//      double-buffered; dO rounded to bf16 as it is staged; lse and D beside them). Per tile
//      and 16-query chunk a warp computes S^T = K Q^T and dP^T = V dO^T (keys on the rows),
//      P^T and dS^T, and adds dV += P^T dO and dK += dS^T Q, FlashAttention-2's inner loop.
//
// Products per (query tile, key tile) pair: S and dP twice (once per kernel), P^T dO, dS^T Q
// and dS K: 7 tile products, against FlashAttention-2's 5 and v1's 9 (v1 also sweeps the keys
// once more for D). FlashAttention-2 gets 5 by adding each key block's dS K into dQ with
// atomicAdd, which makes dQ depend on the order the blocks finish in. The 5 without atomics
// would need one of: dS for every pair kept in memory (B NH T^2 / 2 bf16: at GPT-2 124M sizes
// more time to write and read than the two products it saves), per-key-block partial dQs
// summed afterwards (T / 128 copies of dQ: likewise), a whole head per block (B NH blocks:
// too few to fill the device at small B), or blocks adding into dQ in a fixed order behind
// per-(head, query block) counters with ordered tickets (deterministic, but a spinning wait
// that needs a GPU to prove it cannot stall). The cost of the 2 extra products: the backward
// does 7/5 of FlashAttention-2's tensor work, 2 T C more FLOPs per token and layer (causal),
// about 2.3% of a GPT-2 124M step's FLOPs at T = 1024 (72 C^2 per token and layer in the
// matmuls, 9 T C in attention, the LM head's 6 C V per token).
#include "backend_cuda_attn_fa2.cuh"

#include <math.h>

// ---------------------------------------------------------------------------------------
// Pass 1: D and dQ per block of 64 queries

template <int HS, bool ROPE>
__global__ void __launch_bounds__(FA2_THREADS)
    fa2_bwd_dq_kernel(float *dqkv, float *delta, const float *dout, const uint16_t *o16,
                      const uint16_t *qkv, const float *lse, int T, int NH, int NKV, float sl2,
                      float scale, const float2 *rope) {
    using S = fa2_shape<HS>;
    constexpr int LD = S::LD;
    extern __shared__ __align__(128) unsigned char fa2_dq_smem[];
    fa2_bf16 *sQ = (fa2_bf16 *)fa2_dq_smem, *sdO = sQ + S::TILE, *sK = sdO + S::TILE;
    fa2_bf16 *sV = sK + 2 * S::TILE;
    float *sD = (float *)(sV + 2 * S::TILE);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FA2_BLOCK, bh = blockIdx.y;
    const int C = NH * HS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const att_heads hd = att_heads_of(bh / NH, bh % NH, T, NH, NKV, HS);
    const size_t ld3 = hd.ld, head = (size_t)(bh / NH) * T, hoff = (size_t)(bh % NH) * HS;
    const uint16_t *base = qkv + hd.q, *kbase = qkv + hd.k, *vbase = qkv + hd.v;
    const int qn = min(FA2_BLOCK, T - q0), row0 = q0 + FA2_WROWS * warp;
    const int ntiles = fa2_key_tiles(q0);
    const bool active = row0 < T;

    fa2_load_async<HS>(sQ, base + (size_t)q0 * ld3, ld3, qn);
    fa2_load_async<HS>(sK, kbase, ld3, min(FA2_TILE, T));
    fa2_load_async<HS>(sV, vbase, ld3, min(FA2_TILE, T));
    fa2_cp_commit();
    fa2_load_f32<HS>(sdO, dout + (head + q0) * C + hoff, C, qn);
    { // D = rowsum(dO * O) for row r of the block: threads 2r and 2r + 1, half a row each
        const int r = threadIdx.x / 2, half = threadIdx.x % 2;
        float d = 0.0f;
        if (r < qn) {
            const size_t at = (head + q0 + r) * C + hoff + half * (HS / 2);
#pragma unroll 4
            for (int i = 0; i < HS / 2; i += 4) {
                const float4 a = *reinterpret_cast<const float4 *>(dout + at + i);
                const uint2 b = *reinterpret_cast<const uint2 *>(o16 + at + i);
                d = fmaf(a.x, fa2_lo(b.x), d);
                d = fmaf(a.y, fa2_hi(b.x), d);
                d = fmaf(a.z, fa2_lo(b.y), d);
                d = fmaf(a.w, fa2_hi(b.y), d);
            }
        }
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        if (half == 0) {
            sD[r] = d; // rows past T: 0
            if (r < qn) delta[(size_t)bh * T + q0 + r] = d;
        }
    }
    float rl[2], rd[2]; // lse and D of rows g and g + 8 (rows past T: 0; never stored)
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        rl[r] = row < T ? lse[(size_t)bh * T + row] : 0.0f;
    }
    uint32_t qf[S::KS][4], df[S::KS][4]; // Q and dO as A fragments
    float dq[S::NT][4];
#pragma unroll
    for (int dn = 0; dn < S::NT; dn++) dq[dn][0] = dq[dn][1] = dq[dn][2] = dq[dn][3] = 0.0f;

    for (int j = 0; j < ntiles; j++) {
        const int k0 = j * FA2_TILE, st = j & 1;
        if (j + 1 < ntiles) {
            const int k1 = k0 + FA2_TILE, kn1 = min(FA2_TILE, T - k1);
            fa2_load_async<HS>(sK + (st ^ 1) * S::TILE, kbase + (size_t)k1 * ld3, ld3, kn1);
            fa2_load_async<HS>(sV + (st ^ 1) * S::TILE, vbase + (size_t)k1 * ld3, ld3, kn1);
            fa2_cp_commit();
            fa2_cp_wait<1>();
        } else {
            fa2_cp_wait<0>();
        }
        __syncthreads(); // tile j visible; at j = 0 also Q, dO and D
        if (ROPE) {      // q and k rotated in the block's copies, then visible
            if (j == 0) fa2_rope_tile<HS>(sQ, rope, q0, qn);
            fa2_rope_tile<HS>(sK + st * S::TILE, rope, k0, min(FA2_TILE, T - k0));
            __syncthreads();
        }
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < S::KS; kk++) {
                fa2_frag_a<LD>(qf[kk], sQ, FA2_WROWS * warp, 16 * kk, lane);
                fa2_frag_a<LD>(df[kk], sdO, FA2_WROWS * warp, 16 * kk, lane);
            }
            rd[0] = sD[FA2_WROWS * warp + g];
            rd[1] = sD[FA2_WROWS * warp + g + 8];
        }
        if (active) {
            const fa2_bf16 *k = sK + st * S::TILE, *v = sV + st * S::TILE;
            const int nch = fa2_key_chunks(row0, k0);
            const bool masked = k0 + FA2_CHUNK * nch - 1 > row0;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                if (c >= nch) continue;
                float s[2][4] = {}, dp[2][4] = {}; // keys [16 c, 16 c + 16) of the tile
#pragma unroll
                for (int kk = 0; kk < S::KS; kk++) {
                    uint32_t b[4];
                    fa2_frag_b_nk<LD>(b, k, 16 * c, 16 * kk, lane);
                    fa2_mma(s[0], qf[kk], b[0], b[1]);
                    fa2_mma(s[1], qf[kk], b[2], b[3]);
                    fa2_frag_b_nk<LD>(b, v, 16 * c, 16 * kk, lane);
                    fa2_mma(dp[0], df[kk], b[0], b[1]);
                    fa2_mma(dp[1], df[kk], b[2], b[3]);
                }
#pragma unroll
                for (int e = 0; e < 2; e++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int key = k0 + 16 * c + 8 * e + 2 * t + (i & 1);
                        const int row = row0 + g + 8 * (i >> 1);
                        const float p = masked && !fa2_visible(row, key)
                                            ? 0.0f
                                            : exp2f(fmaf(s[e][i], sl2, -rl[i >> 1]));
                        s[e][i] = p * (dp[e][i] - rd[i >> 1]); // dS
                    }
                uint32_t a[4];
                fa2_acc_to_a(a, s[0], s[1]);
#pragma unroll
                for (int e = 0; e < S::KS; e++) {
                    uint32_t b[4];
                    fa2_frag_b_kn<LD>(b, k, 16 * c, 16 * e, lane);
                    fa2_mma(dq[2 * e], a, b[0], b[1]);
                    fa2_mma(dq[2 * e + 1], a, b[2], b[3]);
                }
            }
        }
        __syncthreads(); // stage st is free for tile j + 2
    }
    if (!active) return;
    if (ROPE) fa2_unrope_acc<HS>(dq, rope, row0, T, lane); // dQ of the unrotated q
    float *dqbase = dqkv + hd.q;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        if (row >= T) continue;
        float *drow = dqbase + (size_t)row * ld3 + 2 * t;
#pragma unroll
        for (int dn = 0; dn < S::NT; dn++) {
            drow[8 * dn] = dq[dn][2 * r] * scale;
            drow[8 * dn + 1] = dq[dn][2 * r + 1] * scale;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pass 2: dK and dV per block of 64 keys of one kv head (grid (key blocks, B * NKV)), summed
// over the NH / NKV query heads that read it: the Q tiles of each head in turn, as one
// pipelined sequence of (head, tile) steps, the sums held in registers throughout (a fixed
// order, no atomics; NKV = NH is the kernel as it was).

template <int HS, bool ROPE>
__global__ void __launch_bounds__(FA2_THREADS)
    fa2_bwd_dkv_kernel(float *dqkv, const float *dout, const uint16_t *qkv, const float *lse,
                       const float *delta, int T, int NH, int NKV, float sl2, float scale,
                       const float2 *rope) {
    using S = fa2_shape<HS>;
    constexpr int LD = S::LD;
    extern __shared__ __align__(128) unsigned char fa2_dkv_smem[];
    fa2_bf16 *sK = (fa2_bf16 *)fa2_dkv_smem, *sV = sK + S::TILE, *sQ = sV + S::TILE;
    fa2_bf16 *sdO = sQ + 2 * S::TILE;
    float *sL = (float *)(sdO + S::TILE), *sD = sL + FA2_TILE;
    const int k0 = blockIdx.x * FA2_BLOCK, bb = blockIdx.y / NKV, group = NH / NKV;
    const int h0 = blockIdx.y % NKV * group; // the group's first query head
    const int C = NH * HS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const att_heads kv = att_heads_of(bb, h0, T, NH, NKV, HS);
    const size_t ld3 = kv.ld, head = (size_t)bb * T;
    const int kn = min(FA2_BLOCK, T - k0), key0 = k0 + FA2_WROWS * warp;
    const int qfirst = fa2_first_query_tile(k0);
    const int ntq = (T - qfirst + FA2_TILE - 1) / FA2_TILE, steps = group * ntq;
    const bool active = key0 < T;

    fa2_load_async<HS>(sK, qkv + kv.k + (size_t)k0 * ld3, ld3, kn);
    fa2_load_async<HS>(sV, qkv + kv.v + (size_t)k0 * ld3, ld3, kn);
    fa2_load_async<HS>(sQ, qkv + kv.q + (size_t)qfirst * ld3, ld3, min(FA2_TILE, T - qfirst));
    fa2_cp_commit();
    float dk[S::NT][4], dv[S::NT][4];
#pragma unroll
    for (int dn = 0; dn < S::NT; dn++)
#pragma unroll
        for (int i = 0; i < 4; i++) dk[dn][i] = dv[dn][i] = 0.0f;

    const uint16_t *qrows = qkv + kv.q - (size_t)h0 * HS; // batch bb's rows
    // step it: query head h, its tile at q0; (h1, q1) the next step's
    for (int it = 0, h = h0, q0 = qfirst; it < steps; it++) {
        const int st = it & 1, qn = min(FA2_TILE, T - q0);
        const size_t hoff = (size_t)h * HS, bh = (size_t)bb * NH + h;
        const bool next = q0 + FA2_TILE < T;
        const int h1 = next ? h : h + 1, q1 = next ? q0 + FA2_TILE : qfirst;
        if (it + 1 < steps) { // the next step's Q tile into the other stage
            fa2_load_async<HS>(sQ + (st ^ 1) * S::TILE, qrows + (size_t)h1 * HS + (size_t)q1 * ld3,
                               ld3, min(FA2_TILE, T - q1));
            fa2_cp_commit();
        }
        // dO, lse and D of this tile (their buffers are free: the previous iteration ended
        // with a barrier), while the Q copies are in flight.
        fa2_load_f32<HS>(sdO, dout + (head + q0) * C + hoff, C, qn);
        for (int i = threadIdx.x; i < FA2_TILE; i += FA2_THREADS) {
            sL[i] = i < qn ? lse[bh * T + q0 + i] : 0.0f;
            sD[i] = i < qn ? delta[bh * T + q0 + i] : 0.0f;
        }
        if (it + 1 < steps) fa2_cp_wait<1>();
        else fa2_cp_wait<0>();
        __syncthreads(); // Q tile (and at it = 0 K, V), dO, lse, D visible
        if (ROPE) {      // q and k rotated in the block's copies, then visible
            if (it == 0) fa2_rope_tile<HS>(sK, rope, k0, kn);
            fa2_rope_tile<HS>(sQ + st * S::TILE, rope, q0, qn);
            __syncthreads();
        }
        if (active) {
            const fa2_bf16 *q = sQ + st * S::TILE;
            const int lo = fa2_query_chunk_lo(key0, q0), hi = fa2_query_chunk_hi(q0, T);
            const bool masked = q0 < key0 + FA2_WROWS - 1 || q0 + FA2_TILE > T;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                if (c < lo || c >= hi) continue;
                float s[2][4] = {}, dp[2][4] = {}; // S^T, dP^T: the warp's 16 keys x 16 queries
#pragma unroll
                for (int kk = 0; kk < S::KS; kk++) {
                    uint32_t a[4], b[4];
                    fa2_frag_a<LD>(a, sK, FA2_WROWS * warp, 16 * kk, lane);
                    fa2_frag_b_nk<LD>(b, q, 16 * c, 16 * kk, lane);
                    fa2_mma(s[0], a, b[0], b[1]);
                    fa2_mma(s[1], a, b[2], b[3]);
                    fa2_frag_a<LD>(a, sV, FA2_WROWS * warp, 16 * kk, lane);
                    fa2_frag_b_nk<LD>(b, sdO, 16 * c, 16 * kk, lane);
                    fa2_mma(dp[0], a, b[0], b[1]);
                    fa2_mma(dp[1], a, b[2], b[3]);
                }
#pragma unroll
                for (int e = 0; e < 2; e++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int qi = 16 * c + 8 * e + 2 * t + (i & 1); // query q0 + qi
                        const int key = key0 + g + 8 * (i >> 1);
                        const float p = masked && (qi >= qn || !fa2_visible(q0 + qi, key))
                                            ? 0.0f
                                            : exp2f(fmaf(s[e][i], sl2, -sL[qi]));
                        s[e][i] = p;
                        dp[e][i] = p * (dp[e][i] - sD[qi]); // dS^T
                    }
                uint32_t ap[4], ads[4];
                fa2_acc_to_a(ap, s[0], s[1]);
                fa2_acc_to_a(ads, dp[0], dp[1]);
#pragma unroll
                for (int e = 0; e < S::KS; e++) {
                    uint32_t b[4];
                    fa2_frag_b_kn<LD>(b, sdO, 16 * c, 16 * e, lane);
                    fa2_mma(dv[2 * e], ap, b[0], b[1]);
                    fa2_mma(dv[2 * e + 1], ap, b[2], b[3]);
                    fa2_frag_b_kn<LD>(b, q, 16 * c, 16 * e, lane);
                    fa2_mma(dk[2 * e], ads, b[0], b[1]);
                    fa2_mma(dk[2 * e + 1], ads, b[2], b[3]);
                }
            }
        }
        __syncthreads(); // stage st, dO, lse and D are free for the next tiles
        h = h1, q0 = q1;
    }
    if (!active) return;
    if (ROPE) fa2_unrope_acc<HS>(dk, rope, key0, T, lane); // dK of the unrotated k
    float *dkbase = dqkv + kv.k, *dvbase = dqkv + kv.v;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key0 + g + 8 * r;
        if (key >= T) continue;
        float *krow = dkbase + (size_t)key * ld3 + 2 * t,
              *vrow = dvbase + (size_t)key * ld3 + 2 * t;
#pragma unroll
        for (int dn = 0; dn < S::NT; dn++) {
            krow[8 * dn] = dk[dn][2 * r] * scale;
            krow[8 * dn + 1] = dk[dn][2 * r + 1] * scale;
            vrow[8 * dn] = dv[dn][2 * r];
            vrow[8 * dn + 1] = dv[dn][2 * r + 1];
        }
    }
}

// ---------------------------------------------------------------------------------------
// Entry points

template <int HS> static tri_status fa2_bwd_enable(unsigned *heads, size_t smem_optin) {
    using S = fa2_shape<HS>;
    if (S::dq_smem > smem_optin || S::dkv_smem > smem_optin) {
        *heads &= ~FA2_HEAD_BIT(HS);
        return TRI_OK;
    }
    CUDA_CHECK(cudaFuncSetAttribute(fa2_bwd_dq_kernel<HS, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::dq_smem));
    CUDA_CHECK(cudaFuncSetAttribute(fa2_bwd_dkv_kernel<HS, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::dkv_smem));
    CUDA_CHECK(cudaFuncSetAttribute(fa2_bwd_dq_kernel<HS, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::dq_smem));
    CUDA_CHECK(cudaFuncSetAttribute(fa2_bwd_dkv_kernel<HS, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::dkv_smem));
    return TRI_OK;
}

tri_status fa2_bwd_init(unsigned *heads, size_t smem_optin) {
    TRI_CHECK(fa2_bwd_enable<64>(heads, smem_optin));
    TRI_CHECK(fa2_bwd_enable<80>(heads, smem_optin));
    TRI_CHECK(fa2_bwd_enable<96>(heads, smem_optin));
    TRI_CHECK(fa2_bwd_enable<128>(heads, smem_optin));
    return TRI_OK;
}

template <int HS, bool ROPE>
static void fa2_bwd_launch(cuda_ctx *x, float *dqkv, float *delta, const float *dout,
                           const uint16_t *o16, const uint16_t *qkv, const float *lse, int B, int T,
                           int NH, int NKV, const float2 *rope) {
    using S = fa2_shape<HS>;
    const float scale = 1.0f / sqrtf((float)HS), sl2 = scale * FA2_LOG2E;
    dim3 grid((T + FA2_BLOCK - 1) / FA2_BLOCK, B * NH);
    fa2_bwd_dq_kernel<HS, ROPE><<<grid, FA2_THREADS, S::dq_smem, x->stream>>>(
        dqkv, delta, dout, o16, qkv, lse, T, NH, NKV, sl2, scale, rope);
    CUDA_LAUNCH_CHECK("fa2_bwd_dq_kernel");
    dim3 kv_grid((T + FA2_BLOCK - 1) / FA2_BLOCK, B * NKV);
    fa2_bwd_dkv_kernel<HS, ROPE><<<kv_grid, FA2_THREADS, S::dkv_smem, x->stream>>>(
        dqkv, dout, qkv, lse, delta, T, NH, NKV, sl2, scale, rope);
    CUDA_LAUNCH_CHECK("fa2_bwd_dkv_kernel");
}

template <int HS>
static void fa2_bwd_pick(cuda_ctx *x, float *dqkv, float *delta, const float *dout,
                         const uint16_t *o16, const uint16_t *qkv, const float *lse, int B, int T,
                         int NH, int NKV, const float2 *rope) {
    if (rope) fa2_bwd_launch<HS, true>(x, dqkv, delta, dout, o16, qkv, lse, B, T, NH, NKV, rope);
    else fa2_bwd_launch<HS, false>(x, dqkv, delta, dout, o16, qkv, lse, B, T, NH, NKV, rope);
}

void fa2_bwd_run(cuda_ctx *x, int HS, float *dqkv, float *delta, const float *dout,
                 const uint16_t *o16, const uint16_t *qkv, const float *lse, int B, int T, int NH,
                 int NKV, const float2 *rope) {
    switch (HS) {
    case 64: fa2_bwd_pick<64>(x, dqkv, delta, dout, o16, qkv, lse, B, T, NH, NKV, rope); break;
    case 80: fa2_bwd_pick<80>(x, dqkv, delta, dout, o16, qkv, lse, B, T, NH, NKV, rope); break;
    case 96: fa2_bwd_pick<96>(x, dqkv, delta, dout, o16, qkv, lse, B, T, NH, NKV, rope); break;
    default: fa2_bwd_pick<128>(x, dqkv, delta, dout, o16, qkv, lse, B, T, NH, NKV, rope); break;
    }
}
