// multi_tensor.h: the optimizer's pieces as one table, so that the gradient norm and AdamW
// run as a handful of launches per step instead of one (or two) per piece (apex's
// multi_tensor_apply, llm.c's single AdamW launch over one flat buffer).
//
// A launch covers every tensor of the table: block b of its grid works on the elements
// [lo, lo + MT_SPAN) of one tensor, found through a prefix table of blocks: tensor t owns
// blocks [start[t], start[t + 1]), so block b belongs to the last t with start[t] <= b (an
// empty tensor owns no block and shares its start with the next one). Every element of
// every tensor is covered by exactly one block (tests/test_multi_tensor.c), and the split
// depends on the tensors' sizes alone: the norm's per-block sums and their total run in the
// same order every step and every run (deterministic bits).
//
// The pieces do not move between steps (the ZeRO layer carves its buffers once), so the
// optimizer builds the table once, at creation, and a device backend reads a copy uploaded
// then (mt_table.dev_*; the planner counts it: optim_buffers).
#pragma once
#include "base/common.h"
#include "base/dtype.h"

#include <stdint.h>

#if defined(__CUDACC__)
#define MT_HD __host__ __device__
#else
#define MT_HD
#endif

// Elements per block of a launch: 64 Ki (apex's chunk size). Large enough that a block's
// fixed costs (the lookup, a tree reduction) vanish, small enough that a 124M-parameter
// model gives ~1900 blocks, several waves on any GPU.
#define MT_SPAN 65536u

// One piece of the optimizer: n elements of each array. Written by the host, read by the
// kernels as it is (the same layout in C and CUDA C++).
typedef struct {
    float *param;      // the fp32 weights AdamW updates (the fp32 master under bf16 parameters)
    uint16_t *param16; // NULL, or the bf16 parameters that receive their rounding
    const void *grad;  // the reduced gradients, in the table's grad_dtype
    float *m, *v;      // the Adam moments
    uint64_t n;
    int decay;   // weight decay applies (matrices and embeddings: the parameter table's)
    int in_norm; // counted by the global gradient norm (each unique element once over ranks)
} mt_tensor;

typedef struct {
    int n_tensors;
    mt_tensor *tensors;   // host, in the optimizer's piece order
    tri_dtype grad_dtype; // DTYPE_FP32 or DTYPE_BF16 (train.grad_dtype)
    // bf16 gradients on a backend that widens tensor by tensor (the CPU): a buffer of the
    // widest tensor's n floats in its memory (the ZeRO layer's widening buffer); else NULL.
    float *grad_wide;
    // (n_tensors + 1) prefix tables of blocks, host: AdamW's over every tensor, the norm's
    // over the tensors with in_norm (0 blocks for the others).
    uint32_t *adam_start, *norm_start;
    uint32_t adam_blocks, norm_blocks;
    // The device copies (backend memory, uploaded once), for a backend whose kernels read the
    // table; NULL where the backend loops over the host table (the CPU).
    const mt_tensor *dev_tensors;
    const uint32_t *dev_adam_start, *dev_norm_start;
    double *dev_partial; // (>= norm_blocks) the norm's per-block sums
} mt_table;

// Blocks of a tensor of n elements: ceil(n / MT_SPAN), 0 for an empty one.
static inline MT_HD uint64_t mt_blocks_of(uint64_t n) { return (n + MT_SPAN - 1) / MT_SPAN; }

// Fills start (count + 1 entries) with the prefix sums of the blocks of tensors[i].n, the
// tensors with in_norm only when `norm` (the others get 0 blocks). Returns the total, or
// TRI_ERR_INTERNAL (reported) when it passes UINT32_MAX blocks (2^48 elements on a rank).
tri_status mt_prefix_build(uint32_t *start, const mt_tensor *tensors, int count, int norm,
                           uint32_t *total);

// The tensor that owns block b (b < start[count]): the last t with start[t] <= b, by binary
// search (count >= 1). The kernels and the tests share it.
static inline MT_HD int mt_block_tensor(const uint32_t *start, int count, uint32_t b) {
    int lo = 0, hi = count - 1; // start[lo] <= b holds (start[0] == 0); the answer is in [lo, hi]
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (start[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The elements [*lo, *hi) of its tensor (of n elements) that block b covers, given the
// tensor's first block.
static inline MT_HD void mt_block_range(uint32_t b, uint32_t first, uint64_t n, uint64_t *lo,
                                        uint64_t *hi) {
    *lo = (uint64_t)(b - first) * MT_SPAN;
    *hi = *lo + MT_SPAN < n ? *lo + MT_SPAN : n;
}
