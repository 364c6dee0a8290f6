// backend_cuda_attn_fa2.cuh: what the two files of the FlashAttention-2 kernels share
// (backend_cuda_attn_fa2.cu: the forward, the dispatch and the occupancy table;
// backend_cuda_attn_fa2_bwd.cu: the backward): shared-memory shapes, the warp-level PTX they
// are built from (ldmatrix, mma.sync m16n8k16 bf16 with fp32 accumulators, cp.async; sm_80
// and later), and the tile loaders. The tiling itself is src/compute/attn_fa2_tiles.h.
//
// Fragments (PTX ISA, "Matrix fragments for mma.m16n8k16"; lane = 4 g + t, g = lane / 4,
// t = lane % 4):
//   A (16 x 16, row-major): 4 registers of 2 bf16: rows g (a0, a2) and g + 8 (a1, a3), columns
//     2t, 2t + 1 (a0, a1) and 2t + 8, 2t + 9 (a2, a3);
//   B (16 x 8): 2 registers: column g, rows 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1);
//   C (16 x 8, fp32): c[0], c[1] at row g, columns 2t, 2t + 1; c[2], c[3] at row g + 8.
// So two C fragments side by side (columns [0, 8) and [8, 16)) are, rounded to bf16, exactly
// the A fragment of those 16 columns as the k dimension of the next product (fa2_acc_to_a):
// scores become the operand P (or dS) without leaving registers, FlashAttention-2's way.
#pragma once

#include "backend_cuda_rope.cuh"
#include "compute/attn_fa2_tiles.h"

#include <cuda_bf16.h>
#include <stdint.h>

#define FA2_THREADS (FA2_WARPS * 32)
// bf16 elements of padding per shared row (16 bytes): the 8 row addresses of an ldmatrix then
// fall in 8 different 16-byte bank groups for each head size here (row strides of 144, 176,
// 208 and 272 bytes).
#define FA2_PAD 8

static_assert(FA2_BLOCK == FA2_TILE, "the diagonal tile must align with the blocks");
static_assert(FA2_BLOCK == FA2_WARPS * FA2_WROWS && FA2_WROWS == 16, "one m16 row per warp");
static_assert(FA2_THREADS == 2 * FA2_BLOCK, "the D prologue gives each row two threads");
static_assert(FA2_TILE == 4 * FA2_CHUNK, "a tile is 4 chunks of 16 columns");

typedef __nv_bfloat16 fa2_bf16;

// Sizes for head size HS (a multiple of 16, at most 128). A staged tile is FA2_TILE rows of HS
// bf16 with stride LD; the kernels' shared memory is whole tiles and a few row vectors.
template <int HS> struct fa2_shape {
    static_assert(HS % 16 == 0 && HS >= 16 && HS <= 128, "head sizes: multiples of 16 to 128");
    static constexpr int LD = HS + FA2_PAD; // shared row stride, elements
    static constexpr int KS = HS / 16;      // k-steps of 16 over the head dimension
    static constexpr int NT = HS / 8;       // n8 fragments over the head dimension
    static constexpr int TILE = FA2_TILE * LD;
    static constexpr size_t TILE_BYTES = (size_t)TILE * sizeof(fa2_bf16);
    static constexpr size_t fwd_smem = 5 * TILE_BYTES;                    // Q, 2 x (K, V)
    static constexpr size_t dq_smem = 6 * TILE_BYTES + FA2_BLOCK * 4;     // Q, dO, 2 x (K, V), D
    static constexpr size_t dkv_smem = 5 * TILE_BYTES + 2 * FA2_TILE * 4; // K, V, 2 x Q, dO, L, D
};

// ---------------------------------------------------------------------------------------
// PTX. The asm that reads or writes shared memory is volatile; cp.async's commit and wait
// also clobber "memory", so that no ordinary shared access moves across them.

__device__ __forceinline__ uint32_t fa2_saddr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, which lands in r[i]
// (lane 4g + t holds row g, elements 2t and 2t + 1; .trans: column g, rows 2t and 2t + 1).
__device__ __forceinline__ void fa2_ldsm(uint32_t r[4], const fa2_bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa2_saddr(p)));
}
__device__ __forceinline__ void fa2_ldsm_t(uint32_t r[4], const fa2_bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa2_saddr(p)));
}

// c (16 x 8 fp32) += a (16 x 16 bf16) b (16 x 8 bf16, registers b0, b1).
__device__ __forceinline__ void fa2_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared, asynchronously; when !valid the 16 bytes are zero-filled and
// nothing is read (src-size 0), though src must still be a mapped address.
__device__ __forceinline__ void fa2_cp16(fa2_bf16 *dst, const void *src, int valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fa2_saddr(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void fa2_cp_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are pending.
template <int N> __device__ __forceinline__ void fa2_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Two floats as a bf16 pair, lo in the low half (the lower column index), rounded to nearest.
__device__ __forceinline__ uint32_t fa2_pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}
__device__ __forceinline__ float fa2_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float fa2_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// ---------------------------------------------------------------------------------------
// Fragments from shared tiles (row stride LD elements)

// A: rows [r0, r0 + 16), columns [c0, c0 + 16) of a row-major tile.
template <int LD>
__device__ __forceinline__ void fa2_frag_a(uint32_t a[4], const fa2_bf16 *s, int r0, int c0,
                                           int lane) {
    fa2_ldsm(a, s + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + c0 + (lane >> 4) * 8);
}

// B of two n8 fragments, from a tile stored n-major (row n holds that column of B: K for
// S = Q K^T): n [n0, n0 + 16), k [k0, k0 + 16); b[0], b[1] for columns n0..n0+7, b[2], b[3]
// for n0+8..n0+15.
template <int LD>
__device__ __forceinline__ void fa2_frag_b_nk(uint32_t b[4], const fa2_bf16 *s, int n0, int k0,
                                              int lane) {
    fa2_ldsm(b, s + (n0 + (lane & 7) + (lane >> 4) * 8) * LD + k0 + ((lane >> 3) & 1) * 8);
}

// The same from a tile stored k-major (row k holds that row of B: V for O = P V), through the
// transposing load.
template <int LD>
__device__ __forceinline__ void fa2_frag_b_kn(uint32_t b[4], const fa2_bf16 *s, int k0, int n0,
                                              int lane) {
    fa2_ldsm_t(b, s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8);
}

// The A fragment of 16 columns held as the C fragments lo (columns 0..7) and hi (8..15).
__device__ __forceinline__ void fa2_acc_to_a(uint32_t a[4], const float lo[4], const float hi[4]) {
    a[0] = fa2_pack(lo[0], lo[1]);
    a[1] = fa2_pack(lo[2], lo[3]);
    a[2] = fa2_pack(hi[0], hi[1]);
    a[3] = fa2_pack(hi[2], hi[3]);
}

// ---------------------------------------------------------------------------------------
// Tile loaders (whole block)

// Rows [0, FA2_TILE) of a shared tile from the bf16 global rows g + r * stride, the first
// nvalid of them (>= 1), asynchronously; the others zero-filled, so that every value an MMA
// reads is finite (0 * NaN would poison a whole row of a product). g and stride keep every
// 16-byte chunk aligned (the dispatch checks).
template <int HS>
__device__ __forceinline__ void fa2_load_async(fa2_bf16 *s, const uint16_t *g, size_t stride,
                                               int nvalid) {
    constexpr int CH = HS / 8, LD = fa2_shape<HS>::LD, N = FA2_TILE * CH;
#pragma unroll
    for (int i = 0; i < (N + FA2_THREADS - 1) / FA2_THREADS; i++) {
        const int idx = (int)threadIdx.x + i * FA2_THREADS;
        if (N % FA2_THREADS == 0 || idx < N) {
            const int r = idx / CH, c = idx % CH * 8, ok = r < nvalid;
            fa2_cp16(s + r * LD + c, g + (size_t)(ok ? r : 0) * stride + c, ok);
        }
    }
}

// The same from fp32 rows (dO), rounded to bf16 on the way, synchronously (16-byte loads).
template <int HS>
__device__ __forceinline__ void fa2_load_f32(fa2_bf16 *s, const float *g, size_t stride,
                                             int nvalid) {
    constexpr int C4 = HS / 4, LD = fa2_shape<HS>::LD, N = FA2_TILE * C4;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < N; idx += FA2_THREADS) {
        const int r = idx / C4, c = idx % C4 * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < nvalid) v = *reinterpret_cast<const float4 *>(g + (size_t)r * stride + c);
        *reinterpret_cast<uint2 *>(s + r * LD + c) = make_uint2(fa2_pack(v.x, v.y),
                                                                fa2_pack(v.z, v.w));
    }
}

// RoPE (backend.attn_rope): rows [0, nvalid) of a staged Q or K tile rotated in place in shared
// memory, row r being position pos0 + r; rows past nvalid stay zero. The tile is the block's
// own copy (cp.async brought it from global memory, which other blocks read unrotated). Whole
// block; the caller's barriers make the landed tile visible before and the rotated one after.
// A thread turns both chunks of a pair of 8-element chunks (d, d + HS/2) at once.
template <int HS>
__device__ __forceinline__ void fa2_rope_tile(fa2_bf16 *s, const float2 *rope, int pos0,
                                              int nvalid) {
    constexpr int LD = fa2_shape<HS>::LD, HC = HS / 16, N = FA2_TILE * HC; // HC: pairs of chunks
    for (int idx = threadIdx.x; idx < N; idx += FA2_THREADS) {
        const int r = idx / HC, d = idx % HC * 8;
        if (r >= nvalid) continue;
        uint4 *lo = reinterpret_cast<uint4 *>(s + r * LD + d);
        uint4 *hi = reinterpret_cast<uint4 *>(s + r * LD + d + HS / 2);
        const uint4 x = *lo, y = *hi;
        *lo = cuda_rope_bf16x8(x, y, rope, pos0 + r, d, HS, 1.0f);
        *hi = cuda_rope_bf16x8(y, x, rope, pos0 + r, d + HS / 2, HS, 1.0f);
    }
}

// The inverse rotation of a warp's 16 x HS gradient held as C fragments (acc[dn]: columns
// [8 dn, 8 dn + 8); element i at row g + 8 (i / 2), column 8 dn + 2 t + i % 2): the pair of
// column c < HS/2 is column c + HS/2, fragment dn + HS/16 of the same lane, so the unrotation is
// in registers. row0: the position of the warp's first row; rows at or past T are left as they
// are (never stored).
template <int HS>
__device__ __forceinline__ void fa2_unrope_acc(float acc[HS / 8][4], const float2 *rope, int row0,
                                               int T, int lane) {
    constexpr int NH2 = HS / 16; // fragments per half
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int dn = 0; dn < NH2; dn++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = row0 + g + 8 * (i >> 1), c = 8 * dn + 2 * t + (i & 1);
            if (row >= T) continue;
            const float2 cs = rope[rope_at(row, c, HS) / 2];
            const float u = acc[dn][i], v = acc[dn + NH2][i];
            acc[dn][i] = rope_rotated(u, v, cs.x, cs.y, c, HS, -1.0f);
            acc[dn + NH2][i] = rope_rotated(v, u, cs.x, cs.y, c + HS / 2, HS, -1.0f);
        }
}

// ---- the backward's entry points (backend_cuda_attn_fa2_bwd.cu) ----
// Lets the backward kernels of each head size use the shared memory they need, and clears bit
// HS / 16 of *heads for those whose needs exceed the device's opt-in limit per block.
tri_status fa2_bwd_init(unsigned *heads, size_t smem_optin);
// The backward on bf16 q, k, v and the bf16 O (backend.h) into delta's B * NH * T floats of
// scratch; the caller checked HS (one of FA2_HEADS) and the alignments.
// rope: the RoPE table or NULL (then the kernels without its code run).
void fa2_bwd_run(cuda_ctx *x, int HS, float *dqkv, float *delta, const float *dout,
                 const uint16_t *o16, const uint16_t *qkv, const float *lse, int B, int T, int NH,
                 int NKV, const float2 *rope);

// The head sizes with kernels, as bits HS / 16.
#define FA2_HEAD_BIT(hs) (1u << ((hs) / 16))
#define FA2_HEADS (FA2_HEAD_BIT(64) | FA2_HEAD_BIT(80) | FA2_HEAD_BIT(96) | FA2_HEAD_BIT(128))
