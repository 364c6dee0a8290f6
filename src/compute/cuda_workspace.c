// cuda_workspace.c: see cuda_workspace.h. Sizes are saturating products (base/checked.h):
// the planner sizes layouts no device could hold, and must see them as huge, not wrapped.
#include "compute/cuda_workspace.h"

#include "base/checked.h"

size_t cuda_ws_column_sums(size_t rows, size_t cols) {
    const size_t chunks = (rows + CUDA_LN_CHUNK - 1) / CUDA_LN_CHUNK;
    return sat_mul_size(2, cuda_align256(sat_mul3_size(chunks, cols, sizeof(float))));
}

size_t cuda_ws_bias_grad(size_t cols) { return cuda_align256(sat_mul_size(cols, sizeof(float))); }

size_t cuda_out16_chunk_rows(size_t rows, size_t cols) {
    size_t chunk = cols ? CUDA_OUT16_CHUNK_FLOATS / cols : rows;
    if (chunk < 1) chunk = 1;
    return chunk < rows ? chunk : rows;
}

// min(rows * cols, max(CUDA_OUT16_CHUNK_FLOATS, cols)) floats: at least one chunk of the
// op's shape (cuda_out16_chunk_rows * cols), and nondecreasing in rows and cols, so that the
// reservation for the widest shape covers every narrower one.
size_t cuda_ws_matmul_out16(size_t rows, size_t cols) {
    const size_t cap = cols > CUDA_OUT16_CHUNK_FLOATS ? cols : CUDA_OUT16_CHUNK_FLOATS;
    const size_t n = sat_mul_size(rows, cols);
    return cuda_align256(sat_mul_size(n < cap ? n : cap, sizeof(float)));
}

size_t cuda_ws_attention_bwd(size_t B, size_t NH, size_t T) {
    return cuda_align256(sat_mul_size(sat_mul3_size(B, NH, T), sizeof(float)));
}

size_t cuda_ws_rope_table(size_t T, size_t HS) {
    return cuda_align256(sat_mul3_size(T, HS / 2, 2 * sizeof(float)));
}

size_t cuda_ws_sumsq(void) { return (CUDA_SUMSQ_MAX_BLOCKS + 1) * sizeof(double); }

size_t cuda_ws_embedding_bwd(size_t tokens, size_t sort_bytes) {
    return sat_add_size(sat_mul_size(4, cuda_align256(sat_mul_size(tokens, sizeof(int)))),
                        sort_bytes);
}

size_t cuda_ws_sort_bound(size_t tokens) {
    const size_t key = cuda_align256(sat_mul_size(tokens, sizeof(unsigned)));
    const size_t value = cuda_align256(sat_mul_size(tokens, sizeof(int)));
    const size_t bins = cuda_align256(4 * 256 * sizeof(int)); // 4 passes of 8 bits
    const size_t tiles = tokens / 3072 + 1;
    const size_t lookback = cuda_align256(sat_mul_size(tiles, 256 * sizeof(int)));
    const size_t counters = cuda_align256(4 * sizeof(int));
    return sat_add_size(sat_add_size(sat_add_size(key, value), sat_add_size(bins, lookback)),
                        counters + 255);
}

int cuda_attention_bf16_native(int HS) { return HS > 0 && HS % 16 == 0 && HS <= 128; }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

cuda_workspace cuda_workspace_for(const backend_shapes *s, size_t sort_bytes) {
    cuda_workspace w = {0};
    const size_t rows = (size_t)s->rows, C = (size_t)s->C, bias = (size_t)s->bias_cols;
    const size_t widest = max_size(C, bias);
    w.scratch = cuda_ws_column_sums(rows, widest);
    w.scratch = max_size(w.scratch, cuda_ws_bias_grad(bias));
    w.scratch = max_size(w.scratch,
                         cuda_ws_attention_bwd((size_t)s->B, (size_t)s->NH, (size_t)s->T));
    w.scratch = max_size(w.scratch, cuda_ws_sumsq());
    // bf16 runs: the bf16-output matmuls' fallback (outputs and input gradients are at most
    // the widest biased width wide).
    if (s->attn == DTYPE_BF16) w.scratch = max_size(w.scratch, cuda_ws_matmul_out16(rows, widest));
    if (s->V_local > 0) w.scratch = max_size(w.scratch, cuda_ws_embedding_bwd(rows, sort_bytes));
    if (s->attn == DTYPE_BF16 && !cuda_attention_bf16_native(s->HS))
        w.widened = cuda_align256(
            sat_mul_size(sat_mul3_size(rows, 3 * (size_t)s->NH, (size_t)s->HS), sizeof(float)));
    if (s->rope_theta > 0) w.rope = cuda_ws_rope_table((size_t)s->T, (size_t)s->HS);
    w.lt = CUDA_LT_WORKSPACE_BYTES;
    w.upload_slot = cuda_align256(max_size(sat_mul_size(rows, sizeof(int)), 4096));
    w.upload = sat_mul_size(CUDA_UPLOAD_SLOTS, w.upload_slot);
    return w;
}

size_t cuda_workspace_device_bytes(const cuda_workspace *w) {
    return sat_add_size(sat_add_size(w->scratch, w->widened), sat_add_size(w->rope, w->lt));
}
