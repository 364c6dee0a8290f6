// zero.h: the ZeRO layer: where a rank's parameters and gradients live over the dp group,
// and the communication that keeps them right (Megatron-Core's distributed/ beside
// optim.h's optimizer/). It is the model's store (model.h's model_store): it owns the
// parameter and gradient buffers, the tables that point the model at them, the gradient
// buckets and their dp reductions, the ZeRO-3 parameter gathers and their prefetch, and the
// dtype conversions of the reduction.
//
// Every stage works on "pieces": a piece is the part [lo, hi) of one table entry (offsets in
// the flat parameter buffer) whose optimizer state this rank owns, stored at `pos` in this
// rank's shard arrays (the optimizer's moments and master weights; the reduced gradient for
// stages 2 and 3).
//   stage 0: every entry whole; pos = the entry's offset. Gradients are all-reduced bucket
//            by bucket (consecutive layers of a chunk up to parallel.bucket_mb; the
//            embeddings; the final LayerNorm) as soon as the backward of the step's last
//            micro-batch has finished the bucket.
//   stage 1: the flat buffer (padded to a multiple of dp) cut into dp equal shards; the
//            gradient buffer reduce-scattered in place, parameters all-gathered.
//   stage 2: no full gradient buffer. Gradients accumulate in per-bucket workspaces (one
//            for the layer buckets, reused bucket after bucket; the embeddings and the
//            final LayerNorm their own); when the backward has finished a bucket (the
//            store's grads_ready), it is reduce-scattered over dp and added to this rank's
//            shard of that bucket.
//   stage 3: as stage 2, and the parameters too live only as this rank's shards: before
//            every forward and every backward (or B) of a chunk (the store's pass_begin) the
//            chunk's buckets are all-gathered into one workspace that all chunks share, so
//            parameters are gathered once per micro-batch and pass, and nothing else of
//            them is kept between passes (parallel.zero3_gather: pass). With
//            zero3_gather: step, each chunk is gathered once per step into a region of its
//            own and kept until the update: 1/m of the gather traffic for the memory of
//            every chunk's parameters.
// parallel.overlap: those reductions and gathers start without waiting (comm.h's *_start)
// and complete when the next one starts or when an op needs their result, so that compute
// goes on while they run. The layer buckets then alternate between two workspaces (the
// backward fills one while the other is reduced), and ZeRO-3 gathers the next pass (named
// by the executor, zero_next_pass) into a second gather workspace while a pass computes.
#pragma once
#include "comm/comm.h"
#include "compute/mempool.h"
#include "model/model.h"

// ZeRO-3 with several micro-batches: gather a chunk's parameters before every pass (forward
// or backward) of every micro-batch, or once per step and keep them until the update.
typedef enum { ZERO3_GATHER_PASS = 0, ZERO3_GATHER_STEP = 1 } zero3_gather_kind;

typedef struct {
    int stage; // parallel.zero, 0..3 (in effect only with dp > 1)
    int dp, dp_rank;
    double bucket_mb;         // parallel.bucket_mb: layers merged into a bucket up to it
    zero3_gather_kind gather; // parallel.zero3_gather
    int overlap;              // parallel.overlap
    tri_dtype param_dtype;    // train.precision: DTYPE_FP32, or DTYPE_BF16 (bf16 parameters,
                              // fp32 master weights in the optimizer)
    tri_dtype grad_dtype;     // train.grad_dtype: gradient buffers, workspaces and shards
    tri_dtype reduce_dtype;   // train.reduce_dtype: the dp reduction's
} zero_config;

typedef struct {
    int entry;
    size_t lo, hi; // flat parameter offsets
    size_t pos;    // offset in the shard arrays
} zero_piece;

typedef struct {
    int first, count;     // table entries [first, first + count)
    int layers;           // transformer layers in it (0: the embeddings or final LayerNorm)
    int chunk;            // the model chunk whose passes read and finish it
    int also_chunk;       // another chunk whose passes read it, or -1: on zbv's rank 0 the tied
                          // wte, read by the embedding (chunk 0) and the LM head (chunk 1);
                          // ZeRO-3 "pass" gathers it for both, first in each chunk's workspace
    size_t begin, numel;  // their flat range
    size_t padded, shard; // numel rounded up to a multiple of dp; padded / dp
    size_t arena;         // where this rank's shard of the bucket starts in the shard arrays
} zero_bucket;

// What a rank holds and owns under a ZeRO stage, without any buffer: a pure function of the
// config and the rank's parameter table, which zero_create and the planner both build.
typedef struct {
    int stage; // in effect: 0 when dp == 1
    int dp, dp_rank;
    size_t capacity;               // elements of a full parameter (and stage 0/1 gradient) buffer,
                                   // padded for the shards
    size_t shard_begin, shard_len; // stage 1: this rank's shard of the flat buffer
    size_t arena_len;              // elements of the shard arrays
    zero_piece *pieces;            // in table order
    int n_pieces;
    zero_bucket *buckets; // dp > 1: every entry in exactly one
    int n_buckets;
    int *bucket_of_entry; // (n_entries) when there are buckets
    int chunks;           // model chunks on this rank
} zero_layout;

void zero_layout_build(zero_layout *zl, const zero_config *zc, const param_table *pt);
// Whether ZeRO-3 gathers bucket k before a pass of chunk c: its own chunk's, and under "pass"
// (not `step`, which keeps every chunk's region) also the chunk in also_chunk.
static inline int zero_bucket_gathered_for(const zero_layout *zl, int k, int c, int step) {
    return zl->buckets[k].chunk == c || (!step && zl->buckets[k].also_chunk == c);
}
void zero_layout_free(zero_layout *zl);
// Entries in the bucket that starts at entry i: consecutive layers of one chunk merged while
// they fit in bucket_bytes (at least one layer; *layers counts them), the final LayerNorm's
// two entries, any other entry alone.
int zero_bucket_span(const param_table *pt, int i, double bucket_bytes, int *layers);

typedef struct zero_state zero_state;

// The ZeRO layer's buffers (mempool.h specs): parameters or their shards, gradients or their
// buckets and shards, gather workspaces, and the dtype-conversion buffers. With z
// (zero_create) each spec fills a field of z; with z NULL (the planner) they only size.
void zero_buffers(mem_specs *specs, const zero_config *zc, const zero_layout *zl,
                  const param_table *pt, zero_state *z);

// Fills dst (entry i's table.local_numel floats, local row-major shape) with the entry's
// initial values on this rank. A failure (a model file's, named) ends zero_create with it.
typedef tri_status (*zero_init_fn)(void *ctx, int entry, float *dst);

// Builds the layout of m's table, carves the buffers from `pool` (the backend's memory when
// NULL), fills the parameters entry by entry from `init` (rounded to bf16 under a bf16
// param_dtype) and becomes m's store (model_set_store). ZeRO-3 keeps only this rank's shards
// of them. On an error *out is still the state to zero_free.
tri_status zero_create(zero_state **out, const zero_config *zc, model *m, zero_init_fn init,
                       void *init_ctx, backend *be, comm *cm, mem_pool *pool);
void zero_free(zero_state *z);
const zero_layout *zero_layout_of(const zero_state *z);
const param_table *zero_table(const zero_state *z); // the model's, whose entries the pieces name

// ---- the step ----

// Zeroes what accumulates gradients over a step.
void zero_step_begin(zero_state *z);
// The executor, before each pass that makes gradients (a whole backward, or a split one's W;
// not before a B, which makes none): whether it is of the step's last micro-batch (stage 0
// reduces its buckets after it).
void zero_backward_micro(zero_state *z, int last);
// The executor, before each pass: the pass that follows it (chunk -1: none, e.g. evaluation),
// whose ZeRO-3 gathers may start while this one computes. A W pass reads no parameter and
// gathers nothing: name the next pass that does (a forward, backward or B), or -1. B gathers
// as a backward does (last bucket first).
void zero_next_pass(zero_state *z, int chunk, model_pass pass);
// After the step's last backward: completes the reductions and gathers in flight, sums what
// the model leaves to the store (the LayerNorm gradients over tp under sequence parallelism,
// the tied embedding's two copies over the embedding group), and does the rest of the dp
// reduction (stage 1: an in-place reduce-scatter). The pieces' gradients are then final.
tri_status zero_finish_grads(zero_state *z);
// Debug counts of work left in flight for compute to go on since the last call (overlap).
void zero_overlap_counts(zero_state *z, int *reductions, int *gathers, int *prefetched);

// A piece's reduced gradients as fp32: in place, or (bf16 gradients) widened into a buffer
// that the next call reuses.
const float *zero_piece_grad(zero_state *z, const zero_piece *pc);
// The same gradients as stored (grad_dtype elements), and the buffer zero_piece_grad widens
// bf16 ones into (as many floats as the widest piece; NULL with fp32 gradients): for the
// optimizer's multi-tensor table (compute/multi_tensor.h), built once.
const void *zero_piece_grad_stored(const zero_state *z, const zero_piece *pc);
float *zero_grad_widen_buffer(const zero_state *z);
tri_dtype zero_grad_dtype(const zero_state *z);
// The device address of element `lo` of a piece's parameters (zero_param_dtype elements).
void *zero_piece_param(const zero_state *z, const zero_piece *pc, size_t lo);
tri_dtype zero_param_dtype(const zero_state *z);
// Stages 0-2: the parameters of table offset `offset` in the full parameter buffer.
void *zero_param_at(const zero_state *z, size_t offset);
// Stages 0-1: the full gradient buffer (table layout, grad_dtype); NULL at stages 2-3.
void *zero_full_grads(const zero_state *z);
// Around the optimizer's update of the pieces: begin completes the gathers that read the
// shards; end all-gathers the updated parameters over dp (stages 1 and 2) and drops what
// ZeRO-3 kept gathered.
tri_status zero_update_begin(zero_state *z);
tri_status zero_update_end(zero_state *z);

// This rank's parameters in table layout (host, table.local_numel floats), whatever the
// stage: a copy of the buffer, or for stage 3 every bucket gathered over dp (collective).
tri_status zero_local_params(zero_state *z, float *host);
// Values [lo, lo + n) of this rank's table entry `entry` (host fp32), whatever the stage: a
// bounded piece of the above. Stage 3: collective over dp: the bucket holding the entry is
// all-gathered into the scratch workspace unless the previous call gathered it, so every dp
// rank makes the same calls in the same order (going through the table in order gathers
// each bucket once).
tri_status zero_entry_params(zero_state *z, int entry, size_t lo, size_t n, float *host);
