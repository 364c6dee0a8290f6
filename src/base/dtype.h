// dtype.h: the element types of trident's buffers, one enum for every layer: the config's
// precisions (train.precision, grad_dtype, reduce_dtype name the first two), the compute
// backend's dtype-tagged operands and the comm layer's payloads.
#pragma once
#include <stddef.h>

typedef enum {
    DTYPE_FP32 = 0,
    DTYPE_BF16 = 1, // bfloat16 storage (bf16.h); math on it is fp32
    DTYPE_FP64 = 2,
    DTYPE_INT64 = 3,
} tri_dtype;

// Bytes of one element; 0 for a value outside the enum.
static inline size_t dtype_size(tri_dtype dt) {
    switch (dt) {
    case DTYPE_FP32: return 4;
    case DTYPE_BF16: return 2;
    case DTYPE_FP64: return 8;
    case DTYPE_INT64: return 8;
    }
    return 0;
}

// "fp32", "bf16", "fp64", "int64" (the config's names for the first two).
static inline const char *dtype_name(tri_dtype dt) {
    switch (dt) {
    case DTYPE_FP32: return "fp32";
    case DTYPE_BF16: return "bf16";
    case DTYPE_FP64: return "fp64";
    case DTYPE_INT64: return "int64";
    }
    return "?";
}
