// backend_cuda_rope.cuh: RoPE on bf16 as the attention kernels stage q and k (backend.attn_rope):
// the element rule of src/compute/rope_math.h on eight elements at a time, for the v1
// tensor-core kernels (rotated as loaded) and the FA2 ones (rotated in shared memory after
// cp.async lands a tile). The table is cuda_rope_table's: (cos, sin) of pair i at position t
// is the float2 at rope_at(t, i, HS) / 2.
#pragma once

#include "backend_cuda_internal.cuh"
#include "compute/rope_math.h"

#include <cuda_bf16.h>
#include <stdint.h>

// Elements d .. d + 7 of a head at position t (d a multiple of 8, HS a multiple of 16, so the
// eight lie on one side of HS / 2), as eight bf16 in x, rotated (dir 1) or unrotated (dir -1)
// from their partners' eight bf16 in y (elements rope_partner(d, HS) ..): widened, turned in
// fp32 and rounded to bf16 once.
__device__ __forceinline__ uint4 cuda_rope_bf16x8(uint4 x, uint4 y, const float2 *tab, int t, int d,
                                                  int HS, float dir) {
    const uint32_t *xs = (const uint32_t *)&x, *ys = (const uint32_t *)&y;
    const float2 *cs = tab + rope_at(t, rope_pair(d, HS), HS) / 2;
    uint4 out;
    uint32_t *o = (uint32_t *)&out;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float x0 = __uint_as_float(xs[k] << 16), x1 = __uint_as_float(xs[k] & 0xffff0000u);
        const float y0 = __uint_as_float(ys[k] << 16), y1 = __uint_as_float(ys[k] & 0xffff0000u);
        const float2 c0 = cs[2 * k], c1 = cs[2 * k + 1];
        const __nv_bfloat162 r = __floats2bfloat162_rn(
            rope_rotated(x0, y0, c0.x, c0.y, d, HS, dir),
            rope_rotated(x1, y1, c1.x, c1.y, d, HS, dir));
        o[k] = *reinterpret_cast<const uint32_t *>(&r);
    }
    return out;
}
