// rope_math.h: the rotary position embedding's math, written once for the CPU backend
// (backend_cpu_llama.c: its angles), the CUDA attention kernels that rotate q and k as they
// load them (cuda/compute/: the table and the element rule) and the host test that holds the
// two together (tests/test_rope_math.c). Plain C that nvcc also compiles: the element rule is
// __host__ __device__ there.
//
// Hugging Face's rotate_half convention: pair i < HS/2 of a head is the elements (i, i + HS/2),
// turned by angle t * theta^(-2i/HS) at position t:
//   (x_i, x_{i+HS/2}) <- (x_i cos - x_{i+HS/2} sin, x_{i+HS/2} cos + x_i sin).
// The rotation is orthogonal, so the gradient of its output is the inverse rotation (its
// transpose) of the output's gradient: the same rule with sin negated (dir -1).
#pragma once
#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define ROPE_FN static inline __host__ __device__
#else
#define ROPE_FN static inline
#endif

// The angle of pair i at position t, in double; cos and sin of it are rounded to fp32.
static inline double rope_angle(int t, int i, int HS, double theta) {
    return (double)t * pow(theta, -2.0 * i / HS);
}

// A (cos, sin) table of positions [0, T): the fp32 cos of pair i at position t at
// rope_at(t, i, HS), its sin right after (the CUDA kernels read the two as one float2).
ROPE_FN size_t rope_at(int t, int i, int HS) {
    return 2 * ((size_t)t * (size_t)(HS / 2) + (size_t)i);
}
static inline size_t rope_table_floats(int T, int HS) {
    return 2 * (size_t)(T > 0 ? T : 0) * (size_t)(HS / 2);
}
static inline void rope_table_fill(float *tab, int T, int HS, double theta) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HS / 2; i++) {
            const double a = rope_angle(t, i, HS, theta);
            tab[rope_at(t, i, HS)] = (float)cos(a);
            tab[rope_at(t, i, HS) + 1] = (float)sin(a);
        }
}

// Element d < HS of a head: its pair and the other element of that pair.
ROPE_FN int rope_pair(int d, int HS) { return d < HS / 2 ? d : d - HS / 2; }
ROPE_FN int rope_partner(int d, int HS) { return d < HS / 2 ? d + HS / 2 : d - HS / 2; }

// Element d rotated: x its value, y its partner's, (cs, sn) its pair's; dir 1 the rotation,
// -1 the inverse. The operations and their order are the CPU backend's rope_fwd / rope_bwd
// (the product of dir and sn first), so that without FMA contraction the bits are the same.
ROPE_FN float rope_rotated(float x, float y, float cs, float sn, int d, int HS, float dir) {
    const float s = dir * sn;
    return d < HS / 2 ? x * cs - y * s : x * cs + y * s;
}
