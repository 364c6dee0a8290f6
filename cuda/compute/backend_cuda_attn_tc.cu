// backend_cuda_attn_tc.cu: causal multi-head attention over bf16 q, k, v on tensor cores
// (wmma bf16 16x16x16 fragments, fp32 accumulators), flash-style, for sm_80 and later.
//
// The same attention as backend_cuda_attn.cu (read its header first: scores carried as
// S * log2(e) so that exp2 does the exponentials, the state is lse = m + log2(l) per row,
// (B, NH, T) floats, in the same units, so either file's backward reads either's forward),
// with these numerics:
//   S = Q K^T and dP = dO V^T are tensor-core products of bf16 operands (q, k, v as given;
//   dO rounded to bf16 when staged), accumulated in fp32; max, exp2 and the row sums of the
//   softmax are fp32; P (forward and backward) and dS are rounded to bf16 as the operands of
//   P V, P^T dO, dS K and dS^T Q (as FlashAttention-2 does); D = rowsum(P * dP) is fp32 from
//   fp32 P and dP; every accumulation is fp32, and out and dqkv are written in fp32.
//
// Tiling. A block is 4 warps and owns 64 rows (query rows in the forward and dQ, key rows in
// dK/dV), 16 per warp: one wmma row of fragments. The other side comes in tiles of 64 rows
// staged in shared memory as bf16, rows padded to DP + 8 elements (16 bytes) so that the
// fragment loads of 8 consecutive rows fall in different banks. A warp computes its 16 x 64
// scores (S, and dP in the backward) as 4 column fragments, stores them to its own fp32 slice
// of shared memory (wmma's register layout is opaque), and there two lanes per row apply the
// mask and the softmax and write the bf16 operand (P or dS) for the next products. Causality
// is handled at two granularities: tiles wholly above the diagonal are never visited (tiles
// and blocks are both 64 rows, so the diagonal tile is the last one of a query block and the
// first one of a key block), 16-column fragments wholly masked for a warp are skipped, and
// inside the remaining fragments the mask is per element. Tile rows past T are zero in
// shared memory so that every value an mma reads is finite (0 * NaN would poison a row).
//
//   forward  O (16 x DP per warp) lives in fp32 shared memory, since rescaling it by the
//            online softmax's alpha needs the row of each element: lanes rescale it, then it
//            is loaded into accumulators, P V added, and stored back; divided by l at the end.
//   dq       per block of 64 queries: a first sweep over the key tiles computes D (stored for
//            the dkv kernel), a second accumulates dQ = dS K in registers (fragments).
//   dkv      per block of 64 keys: sweeps the query tiles from the diagonal on, with S^T and
//            dP^T computed directly as K Q^T and V dO^T, and accumulates dK = dS^T Q and
//            dV = P^T dO in registers.
// As in backend_cuda_attn.cu there are no atomics: every output element is written once by
// one warp, and every sum runs in a fixed order, so results are bitwise reproducible.
//
// Head sizes: HS a multiple of 16, at most 128 (kernels for DP = 16, 32, 64, 128, the head
// dimension zero-padded up to DP). Shared memory per block (atc_smem below): HS 64: forward
// 70 KiB, dq 79 KiB, dkv 88.5 KiB; HS 128: 110, 111 and 120.5 KiB. Any other head size, or a
// device whose opt-in shared memory per block is smaller, falls back to the fp32 kernels on
// a widened copy of qkv (the widened workspace, sized at start: compute/cuda_workspace.h).
//
// RoPE (rope: the table, backend.attn_rope): atc_load rotates each 8-element chunk of a Q or K
// row as it stages it, from the chunk and its partner chunk HS / 2 away (both in one side of
// the pair split: HS / 2 is a multiple of 8), widened, rotated in fp32 and rounded to bf16:
// the block's shared copy only. dQ and dK leave in the rotated frame (wmma fragments are
// opaque), and cuda_attention_bwd unrotates them by one pass over dqkv.
#include "backend_cuda_rope.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

#define ATC_WARPS 4
#define ATC_THREADS (ATC_WARPS * 32)
#define ATC_BR 64            // rows per block: 16 per warp
#define ATC_BC 64            // rows per tile of the other side (== ATC_BR, see above)
#define ATC_LDS (ATC_BC + 4) // row stride of fp32 score tiles (S, dP)
#define ATC_LDP (ATC_BC + 8) // row stride of bf16 operand tiles (P, dS)
#define ATC_LOG2E 1.4426950408889634f

typedef __nv_bfloat16 atc_bf16;
namespace atc_wmma = nvcuda::wmma;
typedef atc_wmma::fragment<atc_wmma::matrix_a, 16, 16, 16, atc_bf16, atc_wmma::row_major> atc_a;
// B operand read as the transpose of row-major (rows, DP) tile rows: K^T, Q^T, V^T, dO^T.
typedef atc_wmma::fragment<atc_wmma::matrix_b, 16, 16, 16, atc_bf16, atc_wmma::col_major> atc_bt;
typedef atc_wmma::fragment<atc_wmma::matrix_b, 16, 16, 16, atc_bf16, atc_wmma::row_major> atc_b;
typedef atc_wmma::fragment<atc_wmma::accumulator, 16, 16, 16, float> atc_acc;

// Shared memory of each kernel, in bytes; every region is a multiple of 128 bytes, so every
// fragment pointer is 32-byte aligned as wmma requires (row strides are multiples of 16
// bytes, fragment rows start at multiples of 16 rows and 16 columns).
template <int DP> struct atc_smem {
    static constexpr size_t LDH = DP + 8, LDO = DP + 4;
    static constexpr size_t tile_h = ATC_BR * LDH * 2;     // (64, DP) bf16 rows
    static constexpr size_t tile_s = ATC_BR * ATC_LDS * 4; // (64, 64) fp32 scores
    static constexpr size_t tile_p = ATC_BR * ATC_LDP * 2; // (64, 64) bf16 P or dS
    static constexpr size_t tile_o = ATC_BR * LDO * 4;     // (64, DP) fp32 results
    static constexpr size_t fwd = 3 * tile_h + tile_s + tile_p + tile_o;
    static constexpr size_t dq = 4 * tile_h + 2 * tile_s + tile_p;
    static constexpr size_t dkv = 4 * tile_h + 2 * tile_s + 2 * tile_p + 2 * ATC_BC * 4;
    // The backward kernels stage their results in the two score tiles once the sweep is over.
    static_assert(tile_o <= 2 * tile_s, "result staging must fit in the score tiles");
};
static_assert(ATC_BR == ATC_BC, "the diagonal tile must align with the blocks");

// Tile rows [0, rows) of s (row stride DP + 8) from the bf16 global rows g + r * gstride, the
// first nvalid of them; elements past nvalid or HS are zero. HS is a multiple of 16, so
// 8-element chunks never straddle HS; vec: 16-byte loads (the rows are 16-byte aligned).
__device__ __forceinline__ uint4 atc_load8(const uint16_t *src, int vec) {
    if (vec) return *(const uint4 *)src;
    uint4 v;
    v.x = src[0] | (unsigned)src[1] << 16, v.y = src[2] | (unsigned)src[3] << 16;
    v.z = src[4] | (unsigned)src[5] << 16, v.w = src[6] | (unsigned)src[7] << 16;
    return v;
}

// With rope (the RoPE table, or NULL): row r is position pos0 + r, stored rotated.
template <int DP>
__device__ void atc_load(atc_bf16 *s, const uint16_t *g, size_t gstride, int nvalid, int rows,
                         int HS, int vec, const float2 *rope = nullptr, int pos0 = 0) {
    constexpr int LD = DP + 8, CH = DP / 8;
    for (int idx = threadIdx.x; idx < rows * CH; idx += ATC_THREADS) {
        const int r = idx / CH, d = idx % CH * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (r < nvalid && d < HS) {
            const uint16_t *src = g + (size_t)r * gstride + d;
            if (vec) {
                v = *(const uint4 *)src;
            } else {
                v.x = src[0] | (unsigned)src[1] << 16, v.y = src[2] | (unsigned)src[3] << 16;
                v.z = src[4] | (unsigned)src[5] << 16, v.w = src[6] | (unsigned)src[7] << 16;
            }
            if (rope)
                v = cuda_rope_bf16x8(v, atc_load8(src - d + rope_partner(d, HS), vec), rope,
                                     pos0 + r, d, HS, 1.0f);
        }
        *(uint4 *)(s + r * LD + d) = v;
    }
}

// The same from fp32 rows (dout), rounded to bf16.
template <int DP>
__device__ void atc_load_f32(atc_bf16 *s, const float *g, size_t gstride, int nvalid, int rows,
                             int HS) {
    constexpr int LD = DP + 8;
    for (int idx = threadIdx.x; idx < rows * DP; idx += ATC_THREADS) {
        const int r = idx / DP, d = idx % DP;
        s[r * LD + d] = __float2bfloat16_rn(r < nvalid && d < HS ? g[(size_t)r * gstride + d]
                                                                 : 0.0f);
    }
}

// dst (16 x 64 fp32, row stride ATC_LDS), column fragments [nlo, nhi): A (16 warp rows,
// row stride DP + 8) times the transpose of tile rows B (row stride DP + 8).
template <int DP>
__device__ __forceinline__ void atc_scores(float *dst, const atc_bf16 *A, const atc_bf16 *B,
                                           int nlo, int nhi) {
    constexpr int LDH = DP + 8;
    for (int n = nlo; n < nhi; n++) {
        atc_acc acc;
        atc_wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < DP / 16; kk++) {
            atc_a a;
            atc_bt bt;
            atc_wmma::load_matrix_sync(a, A + kk * 16, LDH);
            atc_wmma::load_matrix_sync(bt, B + n * 16 * LDH + kk * 16, LDH);
            atc_wmma::mma_sync(acc, a, bt, acc);
        }
        atc_wmma::store_matrix_sync(dst + n * 16, acc, ATC_LDS, atc_wmma::mem_row_major);
    }
}

// acc[dn] += P (16 x 64 bf16, row stride ATC_LDP, columns [16 klo, 16 khi)) times the rows
// [16 klo, 16 khi) of the tile B (row stride DP + 8), head-dimension fragment dn.
template <int DP>
__device__ __forceinline__ void atc_accum(atc_acc acc[DP / 16], const atc_bf16 *P,
                                          const atc_bf16 *B, int klo, int khi) {
    constexpr int LDH = DP + 8;
    for (int kk = klo; kk < khi; kk++) {
        atc_a a;
        atc_wmma::load_matrix_sync(a, P + kk * 16, ATC_LDP);
#pragma unroll
        for (int dn = 0; dn < DP / 16; dn++) {
            atc_b b;
            atc_wmma::load_matrix_sync(b, B + kk * 16 * LDH + dn * 16, LDH);
            atc_wmma::mma_sync(acc[dn], a, b, acc[dn]);
        }
    }
}

// Writes the warp's 16 rows of acc * mul to dst rows [row0, ...) (row stride ld), rows < T,
// head dimensions < HS, through stage (16 x DP fp32, row stride DP + 4, the warp's own).
template <int DP>
__device__ __forceinline__ void atc_store(float *dst, size_t ld, atc_acc acc[DP / 16], float mul,
                                          float *stage, int row0, int T, int HS, int lane) {
    constexpr int LDO = DP + 4;
#pragma unroll
    for (int dn = 0; dn < DP / 16; dn++) {
        for (int i = 0; i < acc[dn].num_elements; i++) acc[dn].x[i] *= mul; // element-wise
        atc_wmma::store_matrix_sync(stage + dn * 16, acc[dn], LDO, atc_wmma::mem_row_major);
    }
    __syncwarp();
    for (int i = lane; i < 16 * HS; i += 32) {
        const int rr = i / HS, d = i % HS;
        if (row0 + rr < T) dst[(size_t)(row0 + rr) * ld + d] = stage[rr * LDO + d];
    }
    __syncwarp(); // the stage is free again
}

// ---------------------------------------------------------------------------------------
// Forward. Grid (query blocks, B * NH); the blocks with the most keys start first.

template <int DP, bool ROPE>
__global__ void __launch_bounds__(ATC_THREADS)
    atc_fwd_kernel(float *out, float *lse, const uint16_t *qkv, int T, int NH, int NKV, int HS,
                   float sl2, int vec, const float2 *rope) {
    constexpr int LDH = DP + 8, LDO = DP + 4;
    extern __shared__ __align__(128) unsigned char atc_shared[];
    atc_bf16 *sQ = (atc_bf16 *)atc_shared, *sK = sQ + ATC_BR * LDH, *sV = sK + ATC_BC * LDH;
    float *sS = (float *)(sV + ATC_BC * LDH);
    atc_bf16 *sP = (atc_bf16 *)(sS + ATC_BR * ATC_LDS);
    float *sO = (float *)(sP + ATC_BR * ATC_LDP);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * ATC_BR, bh = blockIdx.y;
    const int C = NH * HS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const att_heads hd = att_heads_of(bh / NH, bh % NH, T, NH, NKV, HS);
    const size_t ld3 = hd.ld;
    const uint16_t *base = qkv + hd.q, *kbase = qkv + hd.k, *vbase = qkv + hd.v;
    const int qn = min(ATC_BR, T - q0), wrow0 = q0 + 16 * warp;
    atc_load<DP>(sQ, base + (size_t)q0 * ld3, ld3, qn, ATC_BR, HS, vec, ROPE ? rope : nullptr, q0);
    const atc_bf16 *sQw = sQ + 16 * warp * LDH;
    float *sSw = sS + 16 * warp * ATC_LDS, *sOw = sO + 16 * warp * LDO;
    atc_bf16 *sPw = sP + 16 * warp * ATC_LDP;
    // Lane 2 r + half owns row r of the warp's 16: score columns [32 half, 32 half + 32) and
    // output columns [half DP / 2, (half + 1) DP / 2).
    const int r = lane / 2, half = lane % 2, row = wrow0 + r;
    float m = -INFINITY, l = 0.0f; // l: this lane's part of the row sum
    for (int d = half * DP / 2; d < (half + 1) * DP / 2; d++) sOw[r * LDO + d] = 0.0f;

    // Key tiles start at multiples of 64 <= q0, so key k0 is unmasked for every row of every
    // tile it visits (rows past T included, which see zero q), and m is finite after the first.
    const int kend = q0 + qn;
    for (int k0 = 0; k0 < kend; k0 += ATC_BC) {
        const int kn = min(ATC_BC, kend - k0);
        __syncthreads(); // the previous tile is consumed
        atc_load<DP>(sK, kbase + (size_t)k0 * ld3, ld3, kn, ATC_BC, HS, vec, ROPE ? rope : nullptr,
                     k0);
        atc_load<DP>(sV, vbase + (size_t)k0 * ld3, ld3, kn, ATC_BC, HS, vec);
        __syncthreads();
        // Columns past the warp's last row (the diagonal tile) or past kn are masked for all
        // of its rows: only the first nt column fragments are computed.
        const int nt = (min(kn, wrow0 + 16 - k0) + 15) / 16;
        atc_scores<DP>(sSw, sQw, sK, 0, nt);
        __syncwarp();
        const int c0 = 32 * half, c1 = min(c0 + 32, 16 * nt);
        float mx = -INFINITY;
        for (int c = c0; c < c1; c++)
            if (c < kn && k0 + c <= row) mx = fmaxf(mx, sSw[r * ATC_LDS + c] * sl2);
        const float mnew = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
        const float alpha = exp2f(m - mnew); // 0 on the first tile (m = -inf)
        float sum = 0.0f;
        for (int c = c0; c < c1; c++) {
            const float p = c < kn && k0 + c <= row ? exp2f(sSw[r * ATC_LDS + c] * sl2 - mnew)
                                                    : 0.0f;
            sum += p;
            sPw[r * ATC_LDP + c] = __float2bfloat16_rn(p);
        }
        l = l * alpha + sum;
        m = mnew;
        for (int d = half * DP / 2; d < (half + 1) * DP / 2; d++) sOw[r * LDO + d] *= alpha;
        __syncwarp();
        atc_acc o[DP / 16];
#pragma unroll
        for (int dn = 0; dn < DP / 16; dn++)
            atc_wmma::load_matrix_sync(o[dn], sOw + dn * 16, LDO, atc_wmma::mem_row_major);
        atc_accum<DP>(o, sPw, sV, 0, nt);
#pragma unroll
        for (int dn = 0; dn < DP / 16; dn++)
            atc_wmma::store_matrix_sync(sOw + dn * 16, o[dn], LDO, atc_wmma::mem_row_major);
    }
    __syncwarp();
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    if (half == 0 && row < T) lse[(size_t)bh * T + row] = m + log2f(l);
    const float inv = 1.0f / l;
    for (int d = half * DP / 2; d < (half + 1) * DP / 2; d++) sOw[r * LDO + d] *= inv;
    __syncwarp();
    float *obase = out + (size_t)(bh / NH) * T * C + (size_t)(bh % NH) * HS;
    for (int i = lane; i < 16 * HS; i += 32) {
        const int rr = i / HS, d = i % HS;
        if (wrow0 + rr < T) obase[(size_t)(wrow0 + rr) * C + d] = sOw[rr * LDO + d];
    }
}

// ---------------------------------------------------------------------------------------
// Backward, pass 1: D and dQ per block of 64 queries.

template <int DP, bool ROPE>
__global__ void __launch_bounds__(ATC_THREADS)
    atc_bwd_dq_kernel(float *dqkv, float *delta, const float *dout, const uint16_t *qkv,
                      const float *lse, int T, int NH, int NKV, int HS, float sl2, float scale,
                      int vec, const float2 *rope) {
    constexpr int LDH = DP + 8;
    extern __shared__ __align__(128) unsigned char atc_shared[];
    atc_bf16 *sQ = (atc_bf16 *)atc_shared, *sdO = sQ + ATC_BR * LDH, *sK = sdO + ATC_BR * LDH;
    atc_bf16 *sV = sK + ATC_BC * LDH;
    float *sS = (float *)(sV + ATC_BC * LDH), *sdP = sS + ATC_BR * ATC_LDS;
    atc_bf16 *sdS = (atc_bf16 *)(sdP + ATC_BR * ATC_LDS);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * ATC_BR, bh = blockIdx.y;
    const int C = NH * HS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const att_heads hd = att_heads_of(bh / NH, bh % NH, T, NH, NKV, HS);
    const size_t ld3 = hd.ld, head = (size_t)(bh / NH) * T, hoff = (size_t)(bh % NH) * HS;
    const uint16_t *base = qkv + hd.q, *kbase = qkv + hd.k, *vbase = qkv + hd.v;
    const int qn = min(ATC_BR, T - q0), wrow0 = q0 + 16 * warp;
    atc_load<DP>(sQ, base + (size_t)q0 * ld3, ld3, qn, ATC_BR, HS, vec, ROPE ? rope : nullptr, q0);
    atc_load_f32<DP>(sdO, dout + (head + q0) * C + hoff, C, qn, ATC_BR, HS);
    const atc_bf16 *sQw = sQ + 16 * warp * LDH, *sdOw = sdO + 16 * warp * LDH;
    float *sSw = sS + 16 * warp * ATC_LDS, *sdPw = sdP + 16 * warp * ATC_LDS;
    atc_bf16 *sdSw = sdS + 16 * warp * ATC_LDP;
    const int r = lane / 2, half = lane % 2, row = wrow0 + r;
    const float rl = row < T ? lse[(size_t)bh * T + row] : 0.0f; // rows past T: zero q, dO
    float rd = 0.0f;                                             // D of the lane's row
    atc_acc dq[DP / 16];
#pragma unroll
    for (int dn = 0; dn < DP / 16; dn++) atc_wmma::fill_fragment(dq[dn], 0.0f);

    const int kend = q0 + qn;
    for (int sweep = 0; sweep < 2; sweep++) { // 0: D, 1: dQ
        for (int k0 = 0; k0 < kend; k0 += ATC_BC) {
            const int kn = min(ATC_BC, kend - k0);
            __syncthreads();
            atc_load<DP>(sK, kbase + (size_t)k0 * ld3, ld3, kn, ATC_BC, HS, vec,
                         ROPE ? rope : nullptr, k0);
            atc_load<DP>(sV, vbase + (size_t)k0 * ld3, ld3, kn, ATC_BC, HS, vec);
            __syncthreads();
            const int nt = (min(kn, wrow0 + 16 - k0) + 15) / 16;
            atc_scores<DP>(sSw, sQw, sK, 0, nt);
            atc_scores<DP>(sdPw, sdOw, sV, 0, nt);
            __syncwarp();
            const int c0 = 32 * half, c1 = min(c0 + 32, 16 * nt);
            for (int c = c0; c < c1; c++) {
                const float p = c < kn && k0 + c <= row ? exp2f(sSw[r * ATC_LDS + c] * sl2 - rl)
                                                        : 0.0f;
                const float dp = sdPw[r * ATC_LDS + c];
                if (sweep == 0) rd += p * dp;
                else sdSw[r * ATC_LDP + c] = __float2bfloat16_rn(p * (dp - rd));
            }
            if (sweep == 1) {
                __syncwarp();
                atc_accum<DP>(dq, sdSw, sK, 0, nt);
            }
        }
        if (sweep == 0) {
            rd += __shfl_xor_sync(0xffffffffu, rd, 1);
            if (half == 0 && row < T) delta[(size_t)bh * T + row] = rd;
        }
    }
    __syncthreads(); // every warp is done with the score tiles: the staging reuses them
    atc_store<DP>(dqkv + hd.q, ld3, dq, scale, sS + 16 * warp * (DP + 4), wrow0, T, HS, lane);
}

// ---------------------------------------------------------------------------------------
// Backward, pass 2: dK and dV per block of 64 keys of one kv head (grid (key blocks, B * NKV)),
// summed over the query heads of its group in head order (no atomics). Block 0 (the most
// queries) starts first.

template <int DP, bool ROPE>
__global__ void __launch_bounds__(ATC_THREADS)
    atc_bwd_dkv_kernel(float *dqkv, const float *dout, const uint16_t *qkv, const float *lse,
                       const float *delta, int T, int NH, int NKV, int HS, float sl2, float scale,
                       int vec, const float2 *rope) {
    constexpr int LDH = DP + 8;
    extern __shared__ __align__(128) unsigned char atc_shared[];
    atc_bf16 *sK = (atc_bf16 *)atc_shared, *sV = sK + ATC_BR * LDH, *sQ = sV + ATC_BR * LDH;
    atc_bf16 *sdO = sQ + ATC_BC * LDH;
    float *sS = (float *)(sdO + ATC_BC * LDH), *sdP = sS + ATC_BR * ATC_LDS;
    atc_bf16 *sP = (atc_bf16 *)(sdP + ATC_BR * ATC_LDS), *sdS = sP + ATC_BR * ATC_LDP;
    float *sL = (float *)(sdS + ATC_BR * ATC_LDP), *sD = sL + ATC_BC;
    const int k0 = blockIdx.x * ATC_BR, bb = blockIdx.y / NKV, group = NH / NKV;
    const int h0 = blockIdx.y % NKV * group; // the group's first query head
    const int C = NH * HS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const att_heads kv = att_heads_of(bb, h0, T, NH, NKV, HS);
    const size_t ld3 = kv.ld, head = (size_t)bb * T;
    const int kn = min(ATC_BR, T - k0), wkey0 = k0 + 16 * warp;
    atc_load<DP>(sK, qkv + kv.k + (size_t)k0 * ld3, ld3, kn, ATC_BR, HS, vec, ROPE ? rope : nullptr,
                 k0);
    atc_load<DP>(sV, qkv + kv.v + (size_t)k0 * ld3, ld3, kn, ATC_BR, HS, vec);
    const atc_bf16 *sKw = sK + 16 * warp * LDH, *sVw = sV + 16 * warp * LDH;
    float *sSw = sS + 16 * warp * ATC_LDS, *sdPw = sdP + 16 * warp * ATC_LDS;
    atc_bf16 *sPw = sP + 16 * warp * ATC_LDP, *sdSw = sdS + 16 * warp * ATC_LDP;
    const int r = lane / 2, half = lane % 2, key = wkey0 + r; // lane: row r of the warp's keys
    atc_acc dk[DP / 16], dv[DP / 16];
#pragma unroll
    for (int dn = 0; dn < DP / 16; dn++) {
        atc_wmma::fill_fragment(dk[dn], 0.0f);
        atc_wmma::fill_fragment(dv[dn], 0.0f);
    }

    for (int h = h0; h < h0 + group; h++) {
        const uint16_t *base = qkv + att_heads_of(bb, h, T, NH, NKV, HS).q;
        const size_t hoff = (size_t)h * HS, bh = (size_t)bb * NH + h;
        for (int q0 = k0; q0 < T; q0 += ATC_BC) {
            const int qn = min(ATC_BC, T - q0);
            __syncthreads();
            atc_load<DP>(sQ, base + (size_t)q0 * ld3, ld3, qn, ATC_BC, HS, vec,
                         ROPE ? rope : nullptr, q0);
            atc_load_f32<DP>(sdO, dout + (head + q0) * C + hoff, C, qn, ATC_BC, HS);
            for (int i = threadIdx.x; i < ATC_BC; i += ATC_THREADS) {
                sL[i] = i < qn ? lse[bh * T + q0 + i] : 0.0f;
                sD[i] = i < qn ? delta[bh * T + q0 + i] : 0.0f;
            }
            __syncthreads();
            // Query fragments wholly before the warp's first key (the diagonal tile) or past qn
            // are masked for all of its keys: only fragments [nlo, nhi) are computed.
            const int nlo = max(0, wkey0 - q0) / 16, nhi = (qn + 15) / 16;
            atc_scores<DP>(sSw, sKw, sQ, nlo, nhi);   // S^T: [key][query]
            atc_scores<DP>(sdPw, sVw, sdO, nlo, nhi); // dP^T
            __syncwarp();
            const int c0 = max(32 * half, 16 * nlo), c1 = min(32 * half + 32, 16 * nhi);
            for (int c = c0; c < c1; c++) {
                const float p = c < qn && q0 + c >= key ? exp2f(sSw[r * ATC_LDS + c] * sl2 - sL[c])
                                                        : 0.0f;
                sPw[r * ATC_LDP + c] = __float2bfloat16_rn(p);
                sdSw[r * ATC_LDP + c] = __float2bfloat16_rn(p * (sdPw[r * ATC_LDS + c] - sD[c]));
            }
            __syncwarp();
            atc_accum<DP>(dv, sPw, sdO, nlo, nhi);
            atc_accum<DP>(dk, sdSw, sQ, nlo, nhi);
        }
    }
    __syncthreads(); // every warp is done with the score tiles: the staging reuses them
    float *stage = sS + 16 * warp * (DP + 4);
    atc_store<DP>(dqkv + kv.k, ld3, dk, scale, stage, wkey0, T, HS, lane);
    atc_store<DP>(dqkv + kv.v, ld3, dv, 1.0f, stage, wkey0, T, HS, lane);
}

// ---------------------------------------------------------------------------------------
// Dispatch

// Can the tensor-core kernels for DP run on this device? When the device's opt-in shared
// memory per block suffices for all three, lets them use it and sets DP's bit of
// x->atc_heads. Called once per device at creation (cuda_atc_init), so that an attention call
// makes no host API call besides its launches: these queries and settings used to run on
// every call (a cudaDeviceGetAttribute and three cudaFuncSetAttribute per forward and per
// backward).
template <int DP, bool ROPE> static tri_status atc_allow_smem(void) {
    CUDA_CHECK(cudaFuncSetAttribute(atc_fwd_kernel<DP, ROPE>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)atc_smem<DP>::fwd));
    CUDA_CHECK(cudaFuncSetAttribute(atc_bwd_dq_kernel<DP, ROPE>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)atc_smem<DP>::dq));
    CUDA_CHECK(cudaFuncSetAttribute(atc_bwd_dkv_kernel<DP, ROPE>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)atc_smem<DP>::dkv));
    return TRI_OK;
}

template <int DP> static tri_status atc_enable(cuda_ctx *x, size_t smem_optin) {
    if (smem_optin < atc_smem<DP>::fwd || smem_optin < atc_smem<DP>::dq ||
        smem_optin < atc_smem<DP>::dkv)
        return TRI_OK;
    TRI_CHECK((atc_allow_smem<DP, false>()));
    TRI_CHECK((atc_allow_smem<DP, true>()));
    x->atc_heads |= 1u << (DP / 16);
    return TRI_OK;
}

tri_status cuda_atc_init(cuda_ctx *x, size_t smem_optin) {
    x->atc_heads = 0;
    TRI_CHECK(atc_enable<16>(x, smem_optin));
    TRI_CHECK(atc_enable<32>(x, smem_optin));
    TRI_CHECK(atc_enable<64>(x, smem_optin));
    TRI_CHECK(atc_enable<128>(x, smem_optin));
    return TRI_OK;
}

// The DP of the kernels for HS, or 0 when HS falls back to the fp32 kernels.
static int atc_head_dp(const cuda_ctx *x, int HS) {
    if (HS <= 0 || HS % 16 != 0 || HS > 128) return 0;
    const int dp = HS <= 16 ? 16 : HS <= 32 ? 32 : HS <= 64 ? 64 : 128;
    return (x->atc_heads >> (dp / 16)) & 1u ? dp : 0;
}

template <int DP>
static void atc_fwd_launch(cuda_ctx *x, float *out, float *lse, const uint16_t *qkv, int B, int T,
                           int NH, int NKV, int HS, const float2 *rope) {
    const float sl2 = 1.0f / sqrtf((float)HS) * ATC_LOG2E;
    const int vec = (uintptr_t)qkv % 16 == 0;
    dim3 grid((T + ATC_BR - 1) / ATC_BR, B * NH);
    // RoPE's instances only with a table: the others compile as they did before it.
    if (rope)
        atc_fwd_kernel<DP, true><<<grid, ATC_THREADS, atc_smem<DP>::fwd, x->stream>>>(
            out, lse, qkv, T, NH, NKV, HS, sl2, vec, rope);
    else
        atc_fwd_kernel<DP, false><<<grid, ATC_THREADS, atc_smem<DP>::fwd, x->stream>>>(
            out, lse, qkv, T, NH, NKV, HS, sl2, vec, rope);
    CUDA_LAUNCH_CHECK("atc_fwd_kernel");
}

template <int DP>
static void atc_bwd_launch(cuda_ctx *x, float *dqkv, float *delta, const float *dout,
                           const uint16_t *qkv, const float *lse, int B, int T, int NH, int NKV,
                           int HS, const float2 *rope) {
    const float scale = 1.0f / sqrtf((float)HS), sl2 = scale * ATC_LOG2E;
    const int vec = (uintptr_t)qkv % 16 == 0;
    dim3 grid((T + ATC_BR - 1) / ATC_BR, B * NH);
    if (rope)
        atc_bwd_dq_kernel<DP, true><<<grid, ATC_THREADS, atc_smem<DP>::dq, x->stream>>>(
            dqkv, delta, dout, qkv, lse, T, NH, NKV, HS, sl2, scale, vec, rope);
    else
        atc_bwd_dq_kernel<DP, false><<<grid, ATC_THREADS, atc_smem<DP>::dq, x->stream>>>(
            dqkv, delta, dout, qkv, lse, T, NH, NKV, HS, sl2, scale, vec, rope);
    CUDA_LAUNCH_CHECK("atc_bwd_dq_kernel");
    dim3 kv_grid((T + ATC_BR - 1) / ATC_BR, B * NKV);
    if (rope)
        atc_bwd_dkv_kernel<DP, true><<<kv_grid, ATC_THREADS, atc_smem<DP>::dkv, x->stream>>>(
            dqkv, dout, qkv, lse, delta, T, NH, NKV, HS, sl2, scale, vec, rope);
    else
        atc_bwd_dkv_kernel<DP, false><<<kv_grid, ATC_THREADS, atc_smem<DP>::dkv, x->stream>>>(
            dqkv, dout, qkv, lse, delta, T, NH, NKV, HS, sl2, scale, vec, rope);
    CUDA_LAUNCH_CHECK("atc_bwd_dkv_kernel");
}

void cuda_attention_fwd_bf16(backend *b, float *out, void *state, const uint16_t *qkv, int B, int T,
                             int NH, int NKV, int HS, const float2 *rope) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (B <= 0 || T <= 0 || NH <= 0) return;
    float *lse = (float *)state;
    switch (atc_head_dp(x, HS)) {
    case 16: atc_fwd_launch<16>(x, out, lse, qkv, B, T, NH, NKV, HS, rope); return;
    case 32: atc_fwd_launch<32>(x, out, lse, qkv, B, T, NH, NKV, HS, rope); return;
    case 64: atc_fwd_launch<64>(x, out, lse, qkv, B, T, NH, NKV, HS, rope); return;
    case 128: atc_fwd_launch<128>(x, out, lse, qkv, B, T, NH, NKV, HS, rope); return;
    default: break;
    }
    float *wide = cuda_widened_copy(x, qkv, (size_t)B * T * (NH + 2 * NKV) * HS);
    cuda_attention_fwd_f32(b, out, state, wide, B, T, NH, NKV, HS, rope);
    cuda_widened_free(x, wide);
}

void cuda_attention_bwd_bf16(backend *b, float *dqkv, const float *dout, const uint16_t *qkv,
                             const void *state, int B, int T, int NH, int NKV, int HS,
                             const float2 *rope) {
    cuda_ctx *x = cuda_ctx_of(b);
    if (B <= 0 || T <= 0 || NH <= 0) return;
    const float *lse = (const float *)state;
    const int dp = atc_head_dp(x, HS);
    if (dp) {
        float *delta = (float *)cuda_scratch(x, (size_t)B * NH * T * sizeof(float));
#define ATC_BWD(d) atc_bwd_launch<d>(x, dqkv, delta, dout, qkv, lse, B, T, NH, NKV, HS, rope)
        if (dp == 16) ATC_BWD(16);
        else if (dp == 32) ATC_BWD(32);
        else if (dp == 64) ATC_BWD(64);
        else ATC_BWD(128);
#undef ATC_BWD
        return;
    }
    float *wide = cuda_widened_copy(x, qkv, (size_t)B * T * (NH + 2 * NKV) * HS);
    cuda_attention_bwd_f32(b, dqkv, dout, wide, NULL, state, B, T, NH, NKV, HS, rope);
    cuda_widened_free(x, wide);
}
