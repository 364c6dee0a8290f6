// zero_internal.h: the ZeRO layer's state, shared by its files and nothing else.
//   zero_layout.c  pieces, buckets and the buffers' specs (pure)
//   zero.c         creation, the store's gradient side: reductions, finishing, the update
//   zero_gather.c  ZeRO-3: the parameter gathers of each pass, and their prefetch
#pragma once
#include "parallel/zero.h"

// Reductions in flight (parallel.overlap): each bucket's request and the workspace it reads,
// and the buckets with one in flight, oldest first.
typedef struct {
    comm_request *req; // (n_buckets)
    void **ws;         // (n_buckets)
    int *fifo, n;
} zero_reductions;

// ZeRO-3's gathered parameters: passes alternate between two workspaces under overlap
// ("pass"): `cur` is the one param_of points into; the executor names the next pass
// (next_chunk, -1: none) before each pass; pf_chunk is the pass whose gathers were started
// ahead.
typedef struct {
    void *shard;         // (arena_len) this rank's parameter shards (pelem bytes each)
    void *ws, *ws2;      // one chunk's gathered parameters (or, "step", every chunk's)
    size_t *ws_offset;   // (n_buckets) where each bucket lands in a workspace
    int **chunk_buckets; // (chunks) bucket indices of each chunk, -1 ended
    int *gathered;       // "step": (chunks) gathered since the update
    int keep;            // parallel.zero3_gather == step
    comm_request *req;   // (2 * n_buckets) each bucket's gather into each workspace
    int cur, next_chunk, next_backward, pf_chunk, pf_backward;
} zero_gathers;

struct zero_state {
    zero_config cfg;
    zero_layout lay;
    model *m;              // whose store this is
    const param_table *pt; // m's table
    backend *be;
    comm *cm;
    mem_pool *pool;
    mem_specs buffers;          // zero_buffers of this state: what create carved
    size_t pelem, gelem, relem; // bytes of a parameter, gradient and reduction element
    tri_dtype pdt, gdt, rdt;
    int overlap;                // parallel.overlap with dp > 1
    void **param_of, **grad_of; // (n_entries) the store's tables
    void *params;               // stages 0-2: (capacity) the parameter buffer
    void *grads;                // stages 0-1: (capacity) the gradient buffer
    // Stages 2-3: one workspace all layer buckets share (two under overlap), one of its own
    // for every other bucket, the reduced gradient shards and a bucket-sized scratch.
    void *layer_ws, *layer_ws2;
    void **bucket_ws;   // (n_buckets) the workspace each bucket accumulates in now
    int *layers_done;   // (n_buckets) layers the running backward has finished
    void *grad_shard;   // (arena_len)
    void *scratch;      // one bucket's shard, or (stage 2) a gathered bucket
    int scratch_bucket; // stage 3: the bucket zero_entry_params gathered into scratch, or -1
    // reduce_dtype other than grad_dtype: the reduction's own buffer (rtmp_len elements: a
    // bucket, or at stage 1 the whole buffer); then, or with bf16 gradients, an fp32
    // buffer as wide as the widest piece or bucket shard (gtmp).
    void *rtmp;
    size_t rtmp_len;
    float *gtmp;
    zero_reductions red;
    zero_gathers gather;
    int last_micro; // the backward running is of the step's last micro-batch
    int overlapped_reductions, overlapped_gathers, prefetched_passes; // debug counts
};

// Element i of a parameter buffer (fp32, or bf16 in mixed precision).
static inline void *zero_pel(const zero_state *z, const void *base, size_t i) {
    return (char *)base + i * z->pelem;
}

// zero_gather.c (stage 3)
void zero_gather_init(zero_state *z);
void zero_gather_free(zero_state *z);
tri_status zero_pass_begin(void *ctx, int chunk, model_pass pass); // the store's pass_begin
tri_status zero_params_ready(void *ctx, int first, int count);     // the store's params_ready
// Completes every gather in flight (before anything reads or updates the shards they read).
tri_status zero_wait_gathers(zero_state *z);
