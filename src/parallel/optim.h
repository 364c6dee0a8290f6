// optim.h: learning-rate schedule, the data-parallel gradient reduction, the global gradient
// norm and clipping, and AdamW, with ZeRO stages 0-2 over the dp group.
//
// Every stage works on "pieces": a piece is the part [lo, hi) of one table entry (offsets in
// the flat parameter buffer) whose optimizer state this rank owns, stored at `pos` in this
// rank's shard arrays (moments; the reduced gradient for stages 1 and 2).
//   stage 0: every entry whole; pos = the entry's offset. Gradients are all-reduced bucket
//            by bucket (consecutive layers of a chunk up to parallel.bucket_mb; the
//            embeddings; the final LayerNorm) as soon as the backward of the step's last
//            micro-batch has finished the bucket.
//   stage 1: the flat buffer (padded to a multiple of dp) cut into dp equal shards; the
//            gradient buffer reduce-scattered in place, parameters all-gathered.
//   stage 2: no full gradient buffer. Gradients accumulate in per-bucket workspaces (one
//            for the layer buckets, reused bucket after bucket; the embeddings and the
//            final LayerNorm their own); when the backward has finished a bucket (model's grads_ready), it
//            is reduce-scattered over dp and added to this rank's shard of that bucket.
//   stage 3: as stage 2, and the parameters too live only as this rank's shards: before
//            every forward and every backward of a chunk (model's params_needed) the
//            chunk's buckets are all-gathered into one workspace that all chunks share, so
//            parameters are gathered once per micro-batch and pass, and nothing else of
//            them is kept between passes (parallel.zero3_gather: pass). With
//            zero3_gather: step, each chunk is gathered once per step into a region of its
//            own and kept until the update: 1/m of the gather traffic for the memory of
//            every chunk's parameters.
// parallel.overlap: those reductions and gathers start without waiting (comm.h's *_start)
// and complete when the next one starts or when an op needs their result, so that compute
// goes on while they run (the fields from `overlap` on below).
#pragma once
#include "compute/backend.h"
#include "comm/comm.h"
#include "config/config.h"
#include "compute/mempool.h"
#include "model/params.h"

typedef struct {
    int entry;
    size_t lo, hi;   // flat parameter offsets
    size_t pos;      // offset in the shard arrays
} optim_piece;

typedef struct {
    int first, count;       // table entries [first, first + count)
    int layers, layers_done; // layers in it, and how many the running backward has finished
    size_t begin, numel;    // their flat range
    size_t padded, shard;   // numel rounded up to a multiple of dp; padded / dp
    size_t arena;           // where this rank's shard of the bucket starts in the shard arrays
    void *ws;               // gradient workspace (padded elements); layers share one
} optim_bucket;

typedef struct {
    int zero, dp, dp_rank;
    double bucket_mb;       // parallel.bucket_mb
    int last_micro;         // set by the trainer: the backward running is of the step's
                            // last micro-batch (stage 0 reduces its buckets then)
    float **grad_of;        // the model's gradient pointers
    size_t capacity;        // elements of the padded parameter (and stage 0/1 gradient) buffers
    size_t shard_begin, shard_len; // stage 1: this rank's shard of the flat buffer
    size_t arena_len;       // elements of the shard arrays (m, v, and the stage 2 gradient)
    optim_piece *pieces;
    int n_pieces;
    optim_bucket *buckets;  // stage 2
    int n_buckets;
    int *bucket_of_entry;   // stage 2: (n_entries)
    void *grad_shard;       // stage 2: (arena_len) reduced gradients, accumulated
    void *scratch;          // stage 2: one bucket's shard / a gathered bucket
    void *layer_ws;         // stage 2: the workspace every layer's bucket shares
    // parallel.overlap: each bucket's dp reduction runs while the backward goes on. Stage 0
    // all-reduces in place, stages 2-3 reduce-scatter in place in the bucket's workspace; a
    // reduction is completed (stages 2-3: its shard added to grad_shard, the workspace
    // zeroed) when the next bucket's starts, or at optim_finish_reductions. The layer
    // buckets alternate between layer_ws and layer_ws2, so that the backward fills one
    // while the other is reduced.
    int overlap;
    void *layer_ws2;
    comm_request *red_req;  // (n_buckets) the reduction in flight of each bucket
    void **red_ws;          // (n_buckets) the workspace it reads
    int *red_fifo, n_red;   // buckets with a reduction in flight, oldest first
    // Stage 3 ("pass"): the next pass's gathers start into param_ws2 while a pass computes on
    // param_ws, and the two alternate (cur_ws: the one param_of points into); the trainer
    // names that next pass (next_chunk, -1: none) before each pass; pf_chunk: the pass
    // whose gathers were started ahead.
    void *param_ws2;
    int cur_ws, next_chunk, next_backward, pf_chunk, pf_backward;
    comm_request *gather_req; // stage 3: (2 * n_buckets) each bucket's gather into each workspace
    int overlapped_reductions, overlapped_gathers; // left in flight for compute to go on,
    int prefetched_passes;                         // and passes gathered ahead (counted for
                                                   // the trainer's debug log)
    // train.grad_dtype (= reduce_dtype) bf16: gradient buffers, workspaces, shards and their
    // dp reductions in bf16 (gelem 2, gdt); the norm and AdamW read each piece widened into
    // gtmp (fp32, the largest piece or bucket shard).
    int g16;
    size_t gelem;
    tri_dtype gdt;
    uint16_t **grad16_of;   // the model's bf16 gradient pointers
    float *gtmp;
    // train.reduce_dtype: the dp reduction's dtype (rdt, relem bytes). When it differs from
    // grad_dtype the gradients are converted into rtmp (rtmp_len elements: a bucket, or at
    // stage 1 the whole buffer), reduced there, and converted back.
    tri_dtype rdt;
    size_t relem, rtmp_len;
    void *rtmp;
    void *param_shard;      // stage 3: (arena_len) this rank's parameter shards (pelem bytes each)
    void *param_ws;         // stage 3: one chunk's gathered parameters
    int **chunk_buckets;    // stage 3: (chunks) bucket indices of each chunk, -1 ended
    int *chunk_gathered;    // stage 3, zero3_gather step: (chunks) gathered since the update
    int keep_gathered;      // parallel.zero3_gather == step
    size_t *bucket_ws_offset; // stage 3: where each bucket lands in param_ws
    int chunks;
    size_t *param_entry_offset; // stages 2, 3: each entry's flat offset
    float **param_of;       // the model's parameter pointers (stage 3 repoints them)
    uint16_t **param16_of;  // the same for bf16 parameters (train.precision bf16)
    int bf16;               // mixed precision: bf16 parameters, fp32 master and moments
    size_t pelem;           // bytes of a parameter element: 4, or 2 under bf16
    tri_dtype pdt;         // and its comm dtype (parameter all-gathers)
    float *master;          // bf16: (arena_len) fp32 master weights of this rank's pieces
    size_t workspace_bytes; // stage 2: the gradient workspaces and scratch
    float *m, *v;           // Adam moments (arena_len) on the device
    double *norm_acc;       // the gradient norm's sum of squares, accumulated on the device
    backend *be;
    comm *cm;
    mem_pool *pool;         // where the buffers come from (NULL: the backend)
    int t;                  // optimizer steps taken
} optim_state;

// The chunk (virtual stage c * pp + r) that holds `layer` on this table's pipeline rank.
int optim_layer_chunk(const param_table *pt, int layer);
// Entries in the bucket that starts at entry i: consecutive layers of one chunk merged while
// they fit in bucket_bytes (at least one layer; *layers counts them), the final LayerNorm's
// two entries, any other entry alone. The planner sizes buckets with it too.
int optim_bucket_span(const param_table *pt, int i, double bucket_bytes, int *layers);

// The padded size of parameter/gradient buffers for `local_numel` elements under cfg's
// ZeRO stage and `dp` replicas.
size_t optim_capacity(const run_config *cfg, int dp, size_t local_numel);

// Stage 2 and 3 also point the model's gradients (grad_of, n_entries pointers) at their
// bucket workspaces; stages 0 and 1 leave them in the model's gradient buffer. Stages 0-2
// update the model's parameter buffer `params` (fp32, or bf16 under train.precision bf16,
// whose fp32 master copy the optimizer takes from it). Stage 3 takes its parameter shards
// (and master copy) from `init_host` (host memory: the model's initial local parameters,
// model.init_host, which the caller then frees) and repoints param_of (param16_of under
// bf16) on each gather.
tri_status optim_create(optim_state *o, backend *be, comm *cm, const run_config *cfg,
                        const param_table *pt, int dp, int dp_rank, float **grad_of,
                        const void *params, const float *init_host, float **param_of,
                        uint16_t **param16_of, uint16_t **grad16_of, mem_pool *pool);

// Stage 3: the model's params_needed callback (ctx = the optim_state): starts the gathers of
// the chunk's buckets, in the order the pass needs them (backward: last first); with
// parallel.overlap they complete in optim_params_ready, else before this returns.
tri_status optim_params_needed(void *ctx, int chunk, int backward);
// Stage 3: the model's params_ready callback: the gather of the bucket holding entries
// [first, first + count) is complete.
tri_status optim_params_ready(void *ctx, int first, int count);

// This rank's parameters in table layout (host, table.local_numel floats), whatever the
// stage: a copy of `params`, or for stage 3 every bucket gathered over dp.
tri_status optim_local_params(optim_state *o, const param_table *pt, const void *params,
                              float *host);
void optim_free(optim_state *o);

// Stages 0 (dp > 1), 2 and 3: the model's grads_ready callback (ctx = the optim_state).
tri_status optim_bucket_ready(void *ctx, int first, int count);
// Completes every dp reduction and parameter gather still in flight (parallel.overlap): the
// trainer calls it when the step's backward passes are done, before the gradients are read.
tri_status optim_finish_reductions(optim_state *o);

// Zeroes what accumulates gradients over a step (stage 0/1: the model's buffer `grads`).
void optim_zero_grads(optim_state *o, void *grads);

// Learning rate of step `step` (0-based): linear warmup over warmup_steps from lr/warmup to
// lr, then decay (cosine, linear or constant) from lr to min_lr at the last step.
double optim_lr(const run_config *cfg, int step);

// The dp reduction of the accumulated gradients at the end of a step (stage 1: an in-place
// reduce-scatter; stages 0, 2, 3: already done bucket by bucket), then for stages 2 and 3
// the sums the model leaves to the optimizer: LayerNorm gradients over tp under sequence
// parallelism, the tied embedding's two copies over the embedding group.
tri_status optim_reduce_grads(optim_state *o, const param_table *pt, int sequence_parallel,
                              void *grads);

// Global L2 norm of the reduced gradients: each unique parameter element counted once,
// summed over the shards (dp) and the model-parallel group (tp x pp). Returns
// TRI_ERR_NONFINITE when it is not finite.
tri_status optim_grad_norm(optim_state *o, const param_table *pt, const void *grads,
                           double *norm);

// Clips (grad_clip > 0), applies AdamW to this rank's pieces (weight decay on the table's
// decay entries only), then all-gathers the updated parameters over dp (stages 1, 2).
tri_status optim_step(optim_state *o, const run_config *cfg, const param_table *pt,
                      void *params, const void *grads, double lr, double grad_norm);
