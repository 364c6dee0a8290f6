// fa2_model.h: a host model of the CUDA backend's FlashAttention-2 kernels
// (cuda/compute/backend_cuda_attn_fa2*.cu), so that the algorithm of their tiling is proven on
// a machine without a GPU (tests/test_ops_attn.c checks it against the double-precision
// references and finite differences). It follows the kernels step by step, with their tiling
// taken from the same header (src/compute/attn_fa2_tiles.h): blocks of 64 rows split into
// warps of 16, key (or query) tiles of 64 in the kernels' order, the 16-column chunks each
// warp computes or skips, the causal mask only where the kernels apply it, the online softmax
// in base 2 (m, alpha, each lane's part of l over its columns 2t, 2t + 1 of every 8, the four
// parts added as the quad's shuffles add them), lse = m + log2(l), D = rowsum(dO * O) in two
// halves per row, the dQ pass per query block over the key tiles, and the dK/dV pass per key
// block over the query tiles from the diagonal. With round_bf16 it rounds where the kernels
// round (P and dS as MMA operands, dO as it is staged; O is read as given); without, it is
// the same tiling in fp32, which must then agree with the references to fp32 rounding.
//
// What it does not model: the order in which a tensor core adds the 16 products of one MMA
// k-step (the hardware's; here they are added in order), and the fragments' lane layout (the
// kernels' own business; only a device run checks that).
#pragma once
#include "base/bf16.h"
#include "compute/attn_fa2_tiles.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Deliberate defects, for showing that the checks catch them (test_ops_attn --fa2-defect N).
enum {
    FA2_DEFECT_NONE = 0,
    FA2_DEFECT_NO_RESCALE,   // O not rescaled by alpha when the running maximum grows
    FA2_DEFECT_SHORT_CHUNKS, // one 16-key chunk too few on the diagonal tile (forward, dQ)
    FA2_DEFECT_D_ZERO,       // D taken as 0 instead of rowsum(dO * O)
    FA2_DEFECT_DKV_LO,       // the dK/dV pass starts one query chunk late on the diagonal
    FA2_DEFECT_MASK,         // the mask hides the diagonal (k < q instead of k <= q)
    FA2_DEFECT_COUNT
};

typedef struct {
    int round_bf16; // round as the kernels do (1), or compute the tiling in fp32 (0)
    int defect;     // FA2_DEFECT_*
    // 16 x 16 x 16 MMA-equivalents of each product, counted as the kernels issue them.
    long long fwd_products, bwd_products;
} fa2_model;

static inline float fa2m_round(const fa2_model *md, float x) {
    return md->round_bf16 ? bf16_to_f32(bf16_from_f32(x)) : x;
}

static inline int fa2m_visible(const fa2_model *md, int q, int k) {
    return md->defect == FA2_DEFECT_MASK ? k < q : fa2_visible(q, k);
}

static inline int fa2m_key_chunks(const fa2_model *md, int row0, int k0) {
    const int n = fa2_key_chunks(row0, k0);
    return md->defect == FA2_DEFECT_SHORT_CHUNKS && k0 + FA2_TILE > row0 && n > 1 ? n - 1 : n;
}

// sum_d a[d] * b[d] over the head dimension, in MMA k-steps of 16; a NULL row is a zero-filled
// shared row (past T).
static inline float fa2m_dot(const float *a, const float *b, int HS) {
    if (!a || !b) return 0.0f;
    float acc = 0.0f;
    for (int d0 = 0; d0 < HS; d0 += 16) {
        float step = 0.0f;
        for (int d = d0; d < d0 + 16 && d < HS; d++) step = fmaf(a[d], b[d], step);
        acc += step;
    }
    return acc;
}

// Forward of one head: q, k, v rows of stride ld (T of them), out rows of stride ldo, lse (T).
static void fa2m_fwd_head(fa2_model *md, float *out, float *lse, const float *q, const float *k,
                          const float *v, size_t ld, size_t ldo, int T, int HS) {
    const float sl2 = 1.0f / sqrtf((float)HS) * FA2_LOG2E;
    float *o = malloc((size_t)FA2_WROWS * HS * sizeof(float));
    for (int q0 = 0; q0 < T; q0 += FA2_BLOCK)
        for (int w = 0; w < FA2_WARPS; w++) {
            const int row0 = q0 + FA2_WROWS * w;
            if (row0 >= T) continue;             // an inactive warp
            float m[FA2_WROWS], l[FA2_WROWS][4]; // l: the parts of the 4 lanes of a row
            for (int r = 0; r < FA2_WROWS; r++)
                m[r] = -INFINITY, l[r][0] = l[r][1] = l[r][2] = l[r][3] = 0;
            memset(o, 0, (size_t)FA2_WROWS * HS * sizeof(float));
            for (int j = 0; j < fa2_key_tiles(q0); j++) {
                const int k0 = j * FA2_TILE, nch = fa2m_key_chunks(md, row0, k0);
                const int ncol = FA2_CHUNK * nch, masked = k0 + ncol - 1 > row0;
                md->fwd_products += 2LL * nch * (HS / 16);
                for (int r = 0; r < FA2_WROWS; r++) {
                    const int row = row0 + r;
                    const float *qr = row < T ? q + (size_t)row * ld : NULL;
                    float s[FA2_TILE], mx = -INFINITY;
                    for (int c = 0; c < ncol; c++) {
                        const int key = k0 + c;
                        s[c] = fa2m_dot(qr, key < T ? k + (size_t)key * ld : NULL, HS);
                        if (masked && !fa2m_visible(md, row, key)) s[c] = -INFINITY;
                        mx = fmaxf(mx, s[c]);
                    }
                    const float mnew = fmaxf(m[r], mx * sl2), alpha = exp2f(m[r] - mnew);
                    m[r] = mnew;
                    for (int t = 0; t < 4; t++) l[r][t] *= alpha;
                    for (int c = 0; c < ncol; c++) { // lane t holds columns 8n + 2t, 8n + 2t + 1
                        s[c] = exp2f(fmaf(s[c], sl2, -m[r]));
                        l[r][(c % 8) / 2] += s[c];
                    }
                    float *orow = o + (size_t)r * HS;
                    if (md->defect != FA2_DEFECT_NO_RESCALE)
                        for (int d = 0; d < HS; d++) orow[d] *= alpha;
                    for (int c = 0; c < ncol; c++) {
                        const int key = k0 + c;
                        const float p = fa2m_round(md, s[c]);
                        if (key < T)
                            for (int d = 0; d < HS; d++)
                                orow[d] = fmaf(p, v[(size_t)key * ld + d], orow[d]);
                    }
                }
            }
            for (int r = 0; r < FA2_WROWS && row0 + r < T; r++) {
                const float lsum = (l[r][0] + l[r][1]) + (l[r][2] + l[r][3]), inv = 1.0f / lsum;
                lse[row0 + r] = m[r] + log2f(lsum);
                for (int d = 0; d < HS; d++)
                    out[(size_t)(row0 + r) * ldo + d] = o[(size_t)r * HS + d] * inv;
            }
        }
    free(o);
}

// Backward of one head: dq, dk, dv rows of stride ld like q, k, v; dout and o rows of stride
// ldo (o: the forward's output as the backward receives it); lse (T); delta (T) written.
static void fa2m_bwd_head(fa2_model *md, float *dq, float *dk, float *dv, float *delta,
                          const float *dout, const float *o, const float *q, const float *k,
                          const float *v, const float *lse, size_t ld, size_t ldo, int T, int HS) {
    const float scale = 1.0f / sqrtf((float)HS), sl2 = scale * FA2_LOG2E;
    float *dO = malloc((size_t)T * HS * sizeof(float)); // dO as staged (rounded to bf16)
    float *acc = malloc((size_t)FA2_WROWS * HS * 2 * sizeof(float)), *acc2 = acc + FA2_WROWS * HS;
    for (int t = 0; t < T; t++)
        for (int d = 0; d < HS; d++)
            dO[(size_t)t * HS + d] = fa2m_round(md, dout[(size_t)t * ldo + d]);
    // D: two threads per row, half the head dimension each, in fp32 from fp32 dO and O.
    for (int t = 0; t < T; t++) {
        float half[2] = {0.0f, 0.0f};
        for (int h = 0; h < 2; h++)
            for (int d = h * HS / 2; d < (h + 1) * HS / 2; d++)
                half[h] = fmaf(dout[(size_t)t * ldo + d], o[(size_t)t * ldo + d], half[h]);
        delta[t] = md->defect == FA2_DEFECT_D_ZERO ? 0.0f : half[0] + half[1];
    }
    // Pass 1: dQ per query block, over the key tiles.
    for (int q0 = 0; q0 < T; q0 += FA2_BLOCK)
        for (int w = 0; w < FA2_WARPS; w++) {
            const int row0 = q0 + FA2_WROWS * w;
            if (row0 >= T) continue;
            memset(acc, 0, (size_t)FA2_WROWS * HS * sizeof(float));
            for (int j = 0; j < fa2_key_tiles(q0); j++) {
                const int k0 = j * FA2_TILE, nch = fa2m_key_chunks(md, row0, k0);
                const int masked = k0 + FA2_CHUNK * nch - 1 > row0;
                md->bwd_products += 3LL * nch * (HS / 16); // S, dP, dS K
                for (int c = 0; c < FA2_CHUNK * nch; c++) {
                    const int key = k0 + c;
                    const float *kr = key < T ? k + (size_t)key * ld : NULL;
                    const float *vr = key < T ? v + (size_t)key * ld : NULL;
                    for (int r = 0; r < FA2_WROWS; r++) {
                        const int row = row0 + r;
                        if (row >= T) continue; // never stored
                        const float s = fa2m_dot(q + (size_t)row * ld, kr, HS);
                        const float dp = fa2m_dot(dO + (size_t)row * HS, vr, HS);
                        const float p = masked && !fa2m_visible(md, row, key)
                                            ? 0.0f
                                            : exp2f(fmaf(s, sl2, -lse[row]));
                        const float ds = fa2m_round(md, p * (dp - delta[row]));
                        if (kr)
                            for (int d = 0; d < HS; d++)
                                acc[(size_t)r * HS + d] = fmaf(ds, kr[d], acc[(size_t)r * HS + d]);
                    }
                }
            }
            for (int r = 0; r < FA2_WROWS && row0 + r < T; r++)
                for (int d = 0; d < HS; d++)
                    dq[(size_t)(row0 + r) * ld + d] = acc[(size_t)r * HS + d] * scale;
        }
    // Pass 2: dK and dV per key block, over the query tiles from the diagonal.
    for (int k0 = 0; k0 < T; k0 += FA2_BLOCK)
        for (int w = 0; w < FA2_WARPS; w++) {
            const int key0 = k0 + FA2_WROWS * w;
            if (key0 >= T) continue;
            memset(acc, 0, (size_t)FA2_WROWS * HS * 2 * sizeof(float)); // dK in acc, dV in acc2
            for (int q0 = fa2_first_query_tile(k0); q0 < T; q0 += FA2_TILE) {
                const int qn = T - q0 < FA2_TILE ? T - q0 : FA2_TILE;
                int lo = fa2_query_chunk_lo(key0, q0);
                const int hi = fa2_query_chunk_hi(q0, T);
                if (md->defect == FA2_DEFECT_DKV_LO && q0 == k0) lo++;
                const int masked = q0 < key0 + FA2_WROWS - 1 || q0 + FA2_TILE > T;
                if (hi > lo) md->bwd_products += 4LL * (hi - lo) * (HS / 16); // S, dP, P dO, dS Q
                for (int c = FA2_CHUNK * lo; c < FA2_CHUNK * hi; c++) {
                    const int qi = q0 + c;
                    const float *qr = c < qn ? q + (size_t)qi * ld : NULL;
                    const float *dor = c < qn ? dO + (size_t)qi * HS : NULL;
                    for (int r = 0; r < FA2_WROWS; r++) {
                        const int key = key0 + r;
                        if (key >= T) continue; // never stored
                        const float s = fa2m_dot(k + (size_t)key * ld, qr, HS);
                        const float dp = fa2m_dot(v + (size_t)key * ld, dor, HS);
                        const float p = masked && (c >= qn || !fa2m_visible(md, qi, key))
                                            ? 0.0f
                                            : exp2f(fmaf(s, sl2, -(c < qn ? lse[qi] : 0.0f)));
                        const float ds = p * (dp - (c < qn ? delta[qi] : 0.0f));
                        const float pr = fa2m_round(md, p), dsr = fa2m_round(md, ds);
                        if (c >= qn) continue; // zero rows of Q and dO add nothing
                        for (int d = 0; d < HS; d++) {
                            acc[(size_t)r * HS + d] = fmaf(dsr, qr[d], acc[(size_t)r * HS + d]);
                            acc2[(size_t)r * HS + d] = fmaf(pr, dor[d], acc2[(size_t)r * HS + d]);
                        }
                    }
                }
            }
            for (int r = 0; r < FA2_WROWS && key0 + r < T; r++)
                for (int d = 0; d < HS; d++) {
                    dk[(size_t)(key0 + r) * ld + d] = acc[(size_t)r * HS + d] * scale;
                    dv[(size_t)(key0 + r) * ld + d] = acc2[(size_t)r * HS + d];
                }
        }
    free(dO), free(acc);
}

// The op over (B, T, 3 NH HS) qkv as the backend's attention takes it (backend.h): out
// (B, T, NH HS), lse (B, NH, T); the backward writes dqkv (B, T, 3 NH HS) and reads the O it is
// given (o: out, or its bf16 rounding).
static void fa2_model_fwd(fa2_model *md, float *out, float *lse, const float *qkv, int B, int T,
                          int NH, int HS) {
    const size_t C = (size_t)NH * HS, ld = 3 * C;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;
            fa2m_fwd_head(md, out + (size_t)b * T * C + (size_t)h * HS,
                          lse + ((size_t)b * NH + h) * T, q, q + C, q + 2 * C, ld, C, T, HS);
        }
}

static void fa2_model_bwd(fa2_model *md, float *dqkv, const float *dout, const float *o,
                          const float *qkv, const float *lse, int B, int T, int NH, int HS) {
    const size_t C = (size_t)NH * HS, ld = 3 * C;
    float *delta = malloc(((size_t)T + 1) * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t qo = (size_t)b * T * ld + (size_t)h * HS,
                         oo = (size_t)b * T * C + (size_t)h * HS;
            fa2m_bwd_head(md, dqkv + qo, dqkv + qo + C, dqkv + qo + 2 * C, delta, dout + oo, o + oo,
                          qkv + qo, qkv + qo + C, qkv + qo + 2 * C, lse + ((size_t)b * NH + h) * T,
                          ld, C, T, HS);
        }
    free(delta);
}
