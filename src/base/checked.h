// checked.h: size arithmetic that cannot wrap around.
//
// A size derived from user values (config keys, file headers) is a product of several ints;
// even in 64 bits such a product can overflow, and a wrapped size allocates a small buffer
// that is then written past its end. Every such product goes through these helpers.
//   ck_*   exact: 0 when the result does not fit (the caller refuses the input);
//   sat_*  saturating, for sizes of non-negative values: an overflowed result is the type's
//          maximum, which stays the maximum through later sums and products, so that a
//          limit check further on refuses it instead of seeing a small wrapped value.
#pragma once
#include <stddef.h>
#include <stdint.h>

// Written without compiler builtins: nvcc reads headers that include this one as C++.

// *out = a * b for a, b >= 0; 1 when it fits in int64_t, 0 when not (*out then INT64_MAX).
static inline int ck_mul_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0 || (b != 0 && a > INT64_MAX / b)) {
        *out = INT64_MAX;
        return 0;
    }
    *out = a * b;
    return 1;
}
// *out = a + b for a, b >= 0; 1 when it fits in int64_t, 0 when not (*out then INT64_MAX).
static inline int ck_add_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0 || a > INT64_MAX - b) {
        *out = INT64_MAX;
        return 0;
    }
    *out = a + b;
    return 1;
}

static inline uint64_t sat_mul_u64(uint64_t a, uint64_t b) {
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}
static inline uint64_t sat_add_u64(uint64_t a, uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}
static inline size_t sat_mul_size(size_t a, size_t b) {
    return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}
static inline size_t sat_add_size(size_t a, size_t b) {
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}
// a * b * c, saturating.
static inline size_t sat_mul3_size(size_t a, size_t b, size_t c) {
    return sat_mul_size(sat_mul_size(a, b), c);
}
