// backend_cuda_attn_fa2.cu: causal attention on bf16 q, k, v in the FlashAttention-2
// structure (Dao, 2023), for head sizes 64, 80, 96 and 128: the forward and the dispatch here,
// the backward in backend_cuda_attn_fa2_bwd.cu, what both share in backend_cuda_attn_fa2.cuh,
// the tiling in src/compute/attn_fa2_tiles.h. TRIDENT_CUDA_ATTN=v1 selects the kernels before
// these (backend_cuda_attn_tc.cu's wmma ones), and so does any other head size.
//
// Units and state as every attention kernel here (backend_cuda_attn.cu's header): scores are
// carried as S' = Q K^T / sqrt(HS) * log2(e), so exp2 does the exponentials, and the state kept
// for the backward is lse = m + log2(l) per row, (B, NH, T) floats.
//
// Forward, per block of 64 queries of one head (4 warps of 16 rows, grid (T / 64, B * NH),
// the blocks with the most keys first):
//   Q is staged once and held in registers as A fragments; the key tiles K_j, V_j (64 rows)
//   stream through shared memory, double-buffered with cp.async so that tile j + 1 loads
//   while tile j computes. Per tile a warp computes S = Q K_j^T (mma.sync m16n8k16, fp32
//   accumulators), masks it on the diagonal tile, and updates the online softmax in
//   registers: m (row maximum) and l (this lane's part of the row sum, the quad's parts
//   added at the end), rescales O by alpha = exp2(m_old - m_new), rounds P = exp2(S' - m) to
//   bf16 straight from the accumulators into A fragments (no shared-memory round trip) and
//   adds P V_j. At the end O / l is written in fp32 and lse = m + log2(l).
//   Causality skips work at two sizes: key tiles past the block (never loaded) and, on the
//   diagonal tile, the 16-key chunks past a warp's last row (fa2_key_chunks).
//
// Backward (backend_cuda_attn_fa2_bwd.cu): D = rowsum(dO * O) from the O the model keeps, in
// the prologue of the dQ pass (one pass over dO and O instead of v1's sweep over the keys);
// then per key block the FlashAttention-2 loop over the query tiles for dK and dV, and a
// separate pass over the key tiles per query block for dQ, so that no output is written by
// two blocks and nothing needs atomics: the results are bitwise reproducible. The price of
// that is S and dP computed twice, 7 tile products per (query tile, key tile) pair in the
// backward instead of FlashAttention-2's 5 (its dQ += dS K is an atomicAdd from every key
// block), and 9 in v1; that file's header says why and what the 5 would take.
//
// RoPE (a llama's unrotated qkv, backend.attn_rope; the kernels' ROPE = true instances): once a
// Q or K tile has landed in shared memory, the block rotates it there (fa2_rope_tile: widened,
// turned by RoPE's fp32 table, rounded to bf16 again), behind one more barrier per tile; the
// global rows stay unrotated, since every later query block loads the same key tiles. The
// backward rotates its Q and K tiles the same way and unrotates dQ and dK in registers before
// storing them (fa2_unrope_acc: the two elements of a pair are fragments dn and dn + HS/16 of
// one lane), so dqkv is the unrotated q, k's gradient with no pass after.
//
// Numerics: S, dP and all sums in fp32 on the tensor cores; P and dS rounded to bf16 as the
// operands of P V, P^T dO, dS K and dS^T Q (as FlashAttention-2 does); dO rounded to bf16 as
// it is staged; O read as the bf16 the model keeps; the softmax statistics, D and every
// accumulator fp32. Every sum runs in a fixed order, so results are bitwise reproducible.
//
// Registers, shared memory and occupancy (nvcc 13.0 -O2 -Xptxas -v: registers per thread on
// sm_90 / sm_80 of the plain kernels and of their RoPE instances, no spill and no stack frame
// in any; the shared memory is the dynamic fa2_shape<HS> sizes, the same for both; blocks per
// multiprocessor on sm_90 from 64K registers (allocated per warp in units of 256), 228 KB of
// shared memory (1 KB reserved per block) and 64 warps, blocks of 4 warps; estimated, not
// measured):
//   kernel   HS  registers  with RoPE  shared bytes  blocks/SM (limit)  with RoPE
//   fwd      64  128 / 128  163 / 162         46080  4 (both)           3 (registers)
//   fwd      80  158 / 158  168 / 168         56320  3 (registers)      3 (registers)
//   fwd      96  168 / 168  168 / 198         66560  3 (both)           3 (both)
//   fwd     128  238 / 238  236 / 238         87040  2 (both)           2 (both)
//   dq       64  128 / 128  127 / 153         55552  4 (both)           4 (both)
//   dq       80  158 / 158  168 / 168         67840  3 (both)           3 (both)
//   dq       96  168 / 168  168 / 196         80128  2 (shared memory)  2 (shared memory)
//   dq      128  240 / 242  240 / 244        104704  2 (both)           2 (both)
//   dkv      64  168 / 163  168 / 166         46592  3 (registers)      3 (registers)
//   dkv      80  166 / 166  164 / 168         56832  3 (registers)      3 (registers)
//   dkv      96  224 / 218  223 / 217         67072  2 (registers)      2 (registers)
//   dkv     128  253 / 255  255 / 255         87552  2 (both)           2 (both)
// RoPE costs the HS 64 forward a block per multiprocessor (the rotation's loads and the table
// reads are live beside Q's fragments); elsewhere the occupancy stays.
// Few warps per multiprocessor is this structure's trade: registers hold Q (or dQ, dK, dV)
// and the softmax state, each warp keeps many independent MMAs in flight, and the next tile's
// copy overlaps this tile's products. Whether that hides the latency here is for a device run
// to measure (test_gpu_ops --bench-attn).
#include "backend_cuda_attn_fa2.cuh"

#include <math.h>

// ---------------------------------------------------------------------------------------
// Forward

template <int HS, bool ROPE>
__global__ void __launch_bounds__(FA2_THREADS)
    fa2_fwd_kernel(float *out, float *lse, const uint16_t *qkv, int T, int NH, int NKV, float sl2,
                   const float2 *rope) {
    using S = fa2_shape<HS>;
    constexpr int LD = S::LD;
    extern __shared__ __align__(128) unsigned char fa2_fwd_smem[];
    fa2_bf16 *sQ = (fa2_bf16 *)fa2_fwd_smem, *sK = sQ + S::TILE, *sV = sK + 2 * S::TILE;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FA2_BLOCK, bh = blockIdx.y;
    const int C = NH * HS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const att_heads hd = att_heads_of(bh / NH, bh % NH, T, NH, NKV, HS);
    const size_t ld3 = hd.ld;
    const uint16_t *base = qkv + hd.q, *kbase = qkv + hd.k, *vbase = qkv + hd.v;
    const int qn = min(FA2_BLOCK, T - q0), row0 = q0 + FA2_WROWS * warp;
    const int ntiles = fa2_key_tiles(q0);
    // A warp whose rows all lie past T (the last block) computes nothing, but loads its share.
    const bool active = row0 < T;

    fa2_load_async<HS>(sQ, base + (size_t)q0 * ld3, ld3, qn);
    fa2_load_async<HS>(sK, kbase, ld3, min(FA2_TILE, T));
    fa2_load_async<HS>(sV, vbase, ld3, min(FA2_TILE, T));
    fa2_cp_commit();

    uint32_t qf[S::KS][4]; // Q as A fragments, held for the whole kernel
    float o[S::NT][4];     // O (16 x HS) as C fragments
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // rows g and g + 8
#pragma unroll
    for (int dn = 0; dn < S::NT; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;

    for (int j = 0; j < ntiles; j++) {
        const int k0 = j * FA2_TILE, st = j & 1;
        if (j + 1 < ntiles) { // the next tile into the other stage, while this one computes
            const int k1 = k0 + FA2_TILE, kn1 = min(FA2_TILE, T - k1);
            fa2_load_async<HS>(sK + (st ^ 1) * S::TILE, kbase + (size_t)k1 * ld3, ld3, kn1);
            fa2_load_async<HS>(sV + (st ^ 1) * S::TILE, vbase + (size_t)k1 * ld3, ld3, kn1);
            fa2_cp_commit();
            fa2_cp_wait<1>();
        } else {
            fa2_cp_wait<0>();
        }
        __syncthreads(); // tile j (and at j = 0 Q) visible to every warp
        if (ROPE) {      // q and k rotated in the block's copies (fa2_rope_tile), then visible
            if (j == 0) fa2_rope_tile<HS>(sQ, rope, q0, qn);
            fa2_rope_tile<HS>(sK + st * S::TILE, rope, k0, min(FA2_TILE, T - k0));
            __syncthreads();
        }
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < S::KS; kk++)
                fa2_frag_a<LD>(qf[kk], sQ, FA2_WROWS * warp, 16 * kk, lane);
        }
        if (active) {
            const fa2_bf16 *k = sK + st * S::TILE, *v = sV + st * S::TILE;
            const int nch = fa2_key_chunks(row0, k0);
            float s[8][4]; // S (16 x 64) as C fragments; chunk c is s[2c], s[2c + 1]
#pragma unroll
            for (int c = 0; c < 4; c++) {
                if (c >= nch) continue;
#pragma unroll
                for (int e = 0; e < 8; e++) s[2 * c + e / 4][e % 4] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < S::KS; kk++) {
                    uint32_t b[4];
                    fa2_frag_b_nk<LD>(b, k, 16 * c, 16 * kk, lane);
                    fa2_mma(s[2 * c], qf[kk], b[0], b[1]);
                    fa2_mma(s[2 * c + 1], qf[kk], b[2], b[3]);
                }
            }
            // The causal mask (only where a computed key can pass a row: the diagonal tile),
            // then the row maxima over the quad (the 4 lanes of a row).
            const bool masked = k0 + FA2_CHUNK * nch - 1 > row0;
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < 8; n++) {
                if (n / 2 >= nch) continue;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int key = k0 + 8 * n + 2 * t + (i & 1), row = row0 + g + 8 * (i >> 1);
                    if (masked && !fa2_visible(row, key)) s[n][i] = -INFINITY;
                    mx[i >> 1] = fmaxf(mx[i >> 1], s[n][i]);
                }
            }
            float alpha[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                // finite: every row sees the tile's first key (attn_fa2_tiles.h)
                const float mnew = fmaxf(m[r], mx[r] * sl2);
                alpha[r] = exp2f(m[r] - mnew); // 0 on the first tile (m = -inf)
                m[r] = mnew;
                l[r] *= alpha[r];
            }
#pragma unroll
            for (int n = 0; n < 8; n++) {
                if (n / 2 >= nch) continue;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    s[n][i] = exp2f(fmaf(s[n][i], sl2, -m[i >> 1])); // masked: exp2(-inf) = 0
                    l[i >> 1] += s[n][i];
                }
            }
#pragma unroll
            for (int dn = 0; dn < S::NT; dn++)
#pragma unroll
                for (int i = 0; i < 4; i++) o[dn][i] *= alpha[i >> 1];
                    // O += P V_j: P as bf16 A fragments straight from the accumulators.
#pragma unroll
            for (int c = 0; c < 4; c++) {
                if (c >= nch) continue;
                uint32_t a[4];
                fa2_acc_to_a(a, s[2 * c], s[2 * c + 1]);
#pragma unroll
                for (int e = 0; e < S::KS; e++) {
                    uint32_t b[4];
                    fa2_frag_b_kn<LD>(b, v, 16 * c, 16 * e, lane);
                    fa2_mma(o[2 * e], a, b[0], b[1]);
                    fa2_mma(o[2 * e + 1], a, b[2], b[3]);
                }
            }
        }
        __syncthreads(); // every warp is done with stage st before tile j + 2 refills it
    }
    if (!active) return;
    float *obase = out + (size_t)(bh / NH) * T * C + (size_t)(bh % NH) * HS;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lsum = l[r] + __shfl_xor_sync(0xffffffffu, l[r], 1);
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
        const int row = row0 + g + 8 * r;
        if (t == 0 && row < T) lse[(size_t)bh * T + row] = m[r] + log2f(lsum);
        const float inv = 1.0f / lsum;
        if (row >= T) continue;
        float *orow = obase + (size_t)row * C + 2 * t;
#pragma unroll
        for (int dn = 0; dn < S::NT; dn++) {
            orow[8 * dn] = o[dn][2 * r] * inv;
            orow[8 * dn + 1] = o[dn][2 * r + 1] * inv;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Dispatch

// As fa2_bwd_init: clears the head size's bit when its forward needs more shared memory than
// the device's opt-in limit per block.
template <int HS> static tri_status fa2_fwd_enable(unsigned *heads, size_t smem_optin) {
    if (fa2_shape<HS>::fwd_smem > smem_optin) {
        *heads &= ~FA2_HEAD_BIT(HS);
        return TRI_OK;
    }
    CUDA_CHECK(cudaFuncSetAttribute(fa2_fwd_kernel<HS, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)fa2_shape<HS>::fwd_smem));
    CUDA_CHECK(cudaFuncSetAttribute(fa2_fwd_kernel<HS, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)fa2_shape<HS>::fwd_smem));
    return TRI_OK;
}

tri_status cuda_fa2_init(cuda_ctx *x, size_t smem_optin) {
    unsigned heads = FA2_HEADS;
    x->att_fa2_heads = 0;
    TRI_CHECK(fa2_fwd_enable<64>(&heads, smem_optin));
    TRI_CHECK(fa2_fwd_enable<80>(&heads, smem_optin));
    TRI_CHECK(fa2_fwd_enable<96>(&heads, smem_optin));
    TRI_CHECK(fa2_fwd_enable<128>(&heads, smem_optin));
    TRI_CHECK(fa2_bwd_init(&heads, smem_optin));
    x->att_fa2_heads = heads;
    return TRI_OK;
}

// Whether the FA2 kernels take this call: selected (TRIDENT_CUDA_ATTN), a head size with
// kernels that fit this device, and 16-byte aligned rows of q, k, v for cp.async (row stride
// (NH + 2 NKV) HS bf16, HS a multiple of 16: the base pointer decides).
static int fa2_takes(const cuda_ctx *x, const uint16_t *qkv, int HS) {
    if (!x->att_fa2 || HS <= 0 || HS > 128 || HS % 16 || !(x->att_fa2_heads & FA2_HEAD_BIT(HS)))
        return 0;
    return (uintptr_t)qkv % 16 == 0;
}

template <int HS>
static void fa2_fwd_launch(cuda_ctx *x, float *out, float *lse, const uint16_t *qkv, int B, int T,
                           int NH, int NKV, const float2 *rope) {
    const float sl2 = 1.0f / sqrtf((float)HS) * FA2_LOG2E;
    dim3 grid((T + FA2_BLOCK - 1) / FA2_BLOCK, B * NH);
    constexpr size_t smem = fa2_shape<HS>::fwd_smem;
    if (rope)
        fa2_fwd_kernel<HS, true>
            <<<grid, FA2_THREADS, smem, x->stream>>>(out, lse, qkv, T, NH, NKV, sl2, rope);
    else
        fa2_fwd_kernel<HS, false>
            <<<grid, FA2_THREADS, smem, x->stream>>>(out, lse, qkv, T, NH, NKV, sl2, rope);
    CUDA_LAUNCH_CHECK("fa2_fwd_kernel");
}

int cuda_fa2_fwd(cuda_ctx *x, float *out, float *lse, const uint16_t *qkv, int B, int T, int NH,
                 int NKV, int HS, const float2 *rope) {
    if (!fa2_takes(x, qkv, HS)) return 0;
    switch (HS) {
    case 64: fa2_fwd_launch<64>(x, out, lse, qkv, B, T, NH, NKV, rope); break;
    case 80: fa2_fwd_launch<80>(x, out, lse, qkv, B, T, NH, NKV, rope); break;
    case 96: fa2_fwd_launch<96>(x, out, lse, qkv, B, T, NH, NKV, rope); break;
    default: fa2_fwd_launch<128>(x, out, lse, qkv, B, T, NH, NKV, rope); break;
    }
    return 1;
}

int cuda_fa2_bwd(cuda_ctx *x, float *dqkv, const float *dout, const uint16_t *qkv,
                 const uint16_t *o16, const float *lse, int B, int T, int NH, int NKV, int HS,
                 const float2 *rope) {
    // dO rows are read as float4 and O rows as 4 bf16 (C and HS / 2 multiples of 4).
    if (!fa2_takes(x, qkv, HS) || (uintptr_t)dout % 16 || (uintptr_t)o16 % 8) return 0;
    float *delta = (float *)cuda_scratch(x, (size_t)B * NH * T * sizeof(float));
    fa2_bwd_run(x, HS, dqkv, delta, dout, o16, qkv, lse, B, T, NH, NKV, rope);
    return 1;
}
