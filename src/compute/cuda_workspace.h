// cuda_workspace.h: the CUDA backend's own memory outside the rank's arenas (its op
// workspace, the bf16 attention fallback's widened copy, RoPE's cos/sin table, the pinned
// upload ring and cuBLASLt's workspace), sized by pure host functions that the backend (cuda/compute/)
// and the planner (plan/) share: what `trident plan` states for a GPU is what the backend
// reserves at start-up (backend.reserve), and every op asks for its workspace with the same
// function, so a step never allocates (tests/test_workspace.c checks both on the CPU).
//
// Plain C with no CUDA type, linked in every build (the planner runs without a GPU).
#pragma once
#include "compute/backend.h"

#define CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20) // what cuBLASLt's Hopper kernels ask for
#define CUDA_LN_CHUNK 128                          // rows per partial column sum
#define CUDA_SUMSQ_MAX_BLOCKS 1024                 // blocks of the fixed-order sum of squares
#define CUDA_UPLOAD_SLOTS 8                        // slots of the pinned upload ring
#define CUDA_OUT16_CHUNK_FLOATS ((size_t)2 << 20)  // the bf16-output fallback's fp32 rows

// Rounds up to a multiple of 256 bytes (where a workspace is carved into several arrays);
// saturates at the largest multiple of 256.
static inline size_t cuda_align256(size_t bytes) {
    if (bytes > SIZE_MAX - 255) return SIZE_MAX / 256 * 256;
    return (bytes + 255) / 256 * 256;
}

// ---- each op's workspace: the bytes it asks the backend's scratch for ----
// LayerNorm backward and the bias gradients without cuBLASLt's epilogue: per-chunk partial
// sums of `cols` columns over `rows` rows (two arrays).
size_t cuda_ws_column_sums(size_t rows, size_t cols);
// A matmul backward's bias gradient from cuBLASLt's BGRADB epilogue, added into dbias after.
size_t cuda_ws_bias_grad(size_t cols);
// A bf16-output matmul (matmul_fwd16 / _bwd16) where cuBLASLt has no bf16-D algorithm: the
// fp32 GEMM runs over chunks of cuda_out16_chunk_rows rows into this workspace, and a kernel
// rounds each chunk into the bf16 output (at most CUDA_OUT16_CHUNK_FLOATS floats, or one row
// when a row is wider, however large the model).
size_t cuda_out16_chunk_rows(size_t rows, size_t cols);
size_t cuda_ws_matmul_out16(size_t rows, size_t cols);
// The attention backward's row deltas, D = rowsum(dO * O): (B, NH, T) floats.
size_t cuda_ws_attention_bwd(size_t B, size_t NH, size_t T);
// RoPE's (cos, sin) table for positions [0, T) at head size HS (rope_math.h): T x HS/2 pairs
// of floats, which the attention kernels rotate q and k by (backend.attn_rope).
size_t cuda_ws_rope_table(size_t T, size_t HS);
// The sum of squares' per-block partials and its result.
size_t cuda_ws_sumsq(void);
// The embedding backward: keys and row indices of `tokens` tokens, sorted (four arrays), and
// the sort's own temporary storage.
size_t cuda_ws_embedding_bwd(size_t tokens, size_t sort_bytes);
// An upper bound of that sort's temporary storage (CUB's onesweep radix sort of 32-bit keys
// with 32-bit values: a second key and value buffer, digit bins, look-back per tile of at
// least 3072 keys, counters); the backend takes CUB's own answer when it is larger.
size_t cuda_ws_sort_bound(size_t tokens);

// Does the bf16 attention run natively on q, k, v of head size HS (the tensor-core kernels:
// a multiple of 16, at most 128)? Else it widens qkv into fp32 (the widened workspace).
int cuda_attention_bf16_native(int HS);

typedef struct {
    size_t scratch;     // device: the largest op workspace of the run's shapes
    size_t widened;     // device: the bf16 attention fallback's fp32 qkv (0 when native)
    size_t rope;        // device: RoPE's cos/sin table (llama: shapes.rope_theta > 0; else 0)
    size_t lt;          // device: cuBLASLt's workspace
    size_t upload_slot; // pinned host: bytes of one slot of the upload ring (a micro-batch's
                        // token ids)
    size_t upload;      // pinned host: the ring, CUDA_UPLOAD_SLOTS slots
} cuda_workspace;

// The workspaces of a run whose ops take at most `s`; sort_bytes: the embedding backward's
// sort (CUB's query on a device; cuda_ws_sort_bound where there is none, as in the planner).
cuda_workspace cuda_workspace_for(const backend_shapes *s, size_t sort_bytes);
// Device bytes of w: scratch + widened + rope + lt.
size_t cuda_workspace_device_bytes(const cuda_workspace *w);
