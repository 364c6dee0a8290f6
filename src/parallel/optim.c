// optim.c: AdamW (DESIGN.md "Model"), schedules, the dp gradient reduction and the global
// gradient norm, over ZeRO stages 0-2 (see optim.h for the pieces and buckets).
#include "parallel/optim.h"

#include <math.h>
#include <string.h>

#include "base/bf16.h"

size_t optim_capacity(const run_config *cfg, int dp, size_t local_numel) {
    if (cfg->parallel.zero == 0 || dp == 1) return local_numel;
    // A multiple of dp (stage 1's equal shards); stage 2 adds dp elements: a bucket's last
    // shard may reach up to dp - 1 elements past the bucket, and so past the last bucket.
    size_t padded = (local_numel + (size_t)dp - 1) / (size_t)dp * (size_t)dp;
    return padded + (cfg->parallel.zero >= 2 ? (size_t)dp : 0);
}

static void add_piece(optim_state *o, int entry, size_t lo, size_t hi, size_t pos) {
    o->pieces[o->n_pieces++] = (optim_piece){entry, lo, hi, pos};
}

// The part of each of entries [first, end) inside the flat range [begin, begin + len),
// stored from `arena` on.
static void pieces_of_range(optim_state *o, const param_table *pt, int first, int end,
                            size_t begin, size_t len, size_t arena) {
    for (int i = first; i < end; i++) {
        const param_entry *e = &pt->entries[i];
        size_t lo = e->offset > begin ? e->offset : begin;
        size_t end = e->offset + (size_t)e->local_numel;
        size_t hi = end < begin + len ? end : begin + len;
        if (lo < hi) add_piece(o, i, lo, hi, arena + (lo - begin));
    }
}

// Buckets: consecutive layers of one chunk, merged while they fit in parallel.bucket_mb
// (at least one layer each); the final LayerNorm's two entries; wte, wpe and the tied copy
// of wte each alone (so that the two copies of wte shard alike on both stages). A bucket
// never spans chunks, so one backward call finishes it.
int optim_layer_chunk(const param_table *pt, int layer) {
    return layer / params_chunk_layers(pt) / pt->pp; // virtual stage c * pp + r
}

int optim_bucket_span(const param_table *pt, int i, double bucket_bytes, int *layers) {
    const param_entry *e = &pt->entries[i];
    *layers = 0;
    if (e->layer < 0) return i == pt->lnfw ? 2 : 1;
    int n = 0;
    double bytes = 0;
    while (i + n < pt->n_entries && pt->entries[i + n].layer >= 0 &&
           optim_layer_chunk(pt, pt->entries[i + n].layer) == optim_layer_chunk(pt, e->layer)) {
        double layer_bytes = 0;
        for (int k = 0; k < PARAM_PER_LAYER; k++)
            layer_bytes += 4.0 * (double)pt->entries[i + n + k].local_numel;
        if (*layers > 0 && bytes + layer_bytes > bucket_bytes) break;
        bytes += layer_bytes;
        n += PARAM_PER_LAYER;
        (*layers)++;
    }
    return n;
}

// The buckets' entries and flat ranges (every stage with dp > 1), and for stages 2 and 3
// their shards and this rank's pieces.
static void define_buckets(optim_state *o, const param_table *pt) {
    const size_t dp = (size_t)o->dp;
    o->buckets = xcalloc((size_t)pt->n_entries, sizeof(optim_bucket));
    o->bucket_of_entry = xcalloc((size_t)pt->n_entries, sizeof(int));
    size_t arena = 0;
    for (int i = 0; i < pt->n_entries;) {
        optim_bucket *b = &o->buckets[o->n_buckets];
        b->first = i, b->count = optim_bucket_span(pt, i, o->bucket_mb * 1048576.0, &b->layers);
        b->begin = pt->entries[i].offset;
        for (int k = i; k < i + b->count; k++) {
            b->numel += (size_t)pt->entries[k].local_numel;
            o->bucket_of_entry[k] = o->n_buckets;
        }
        b->padded = (b->numel + dp - 1) / dp * dp;
        b->shard = b->padded / dp;
        b->arena = arena;
        arena += b->shard;
        size_t own = b->begin + (size_t)o->dp_rank * b->shard; // this rank's part of it
        if (o->zero >= 2) pieces_of_range(o, pt, i, i + b->count, own, b->shard, b->arena);
        i += b->count;
        o->n_buckets++;
    }
    if (o->zero >= 2) o->arena_len = arena;
}

// Stages 2 and 3: gradient workspaces (all layers share one) and the shard arrays.
static tri_status create_buckets(optim_state *o, const param_table *pt, float **grad_of) {
    backend *be = o->be;
    define_buckets(o, pt);
    size_t arena = o->arena_len, layer_ws = 0, scratch = 0;
    for (int k = 0; k < o->n_buckets; k++) {
        const optim_bucket *b = &o->buckets[k];
        if (pt->entries[b->first].layer >= 0) layer_ws = b->padded > layer_ws ? b->padded : layer_ws;
        scratch = b->padded > scratch ? b->padded : scratch;
    }
    void *shared = layer_ws ? mem_take(o->pool, be, PLAN_MEM_GRAD_BUCKET, layer_ws * o->gelem) : NULL;
    o->layer_ws = shared;
    o->workspace_bytes = mem_round(layer_ws * o->gelem);
    if (o->overlap && layer_ws) { // the second layer workspace (optim.h)
        o->layer_ws2 = mem_take(o->pool, be, PLAN_MEM_GRAD_BUCKET, layer_ws * o->gelem);
        o->workspace_bytes += mem_round(layer_ws * o->gelem);
        if (!o->layer_ws2) return TRI_ERR_INTERNAL;
    }
    for (int k = 0; k < o->n_buckets; k++) {
        optim_bucket *b = &o->buckets[k];
        if (pt->entries[b->first].layer >= 0) {
            b->ws = shared;
        } else {
            b->ws = mem_take(o->pool, be, PLAN_MEM_GRAD_BUCKET, b->padded * o->gelem);
            o->workspace_bytes += mem_round(b->padded * o->gelem);
        }
        if (!b->ws) return TRI_ERR_INTERNAL;
        for (int e = b->first; e < b->first + b->count; e++) {
            size_t at = pt->entries[e].offset - b->begin;
            if (o->g16) o->grad16_of[e] = (uint16_t *)b->ws + at;
            else grad_of[e] = (float *)b->ws + at;
        }
    }
    o->grad_shard = mem_take(o->pool, be, PLAN_MEM_GRAD, (arena ? arena : 1) * o->gelem);
    // Gradient shards, and (stage 2) the parameter all-gathers: the wider of the two.
    const size_t scratch_elem = o->gelem > o->pelem ? o->gelem : o->pelem;
    o->scratch = mem_take(o->pool, be, PLAN_MEM_GRAD_BUCKET, scratch * scratch_elem);
    o->workspace_bytes += mem_round(scratch * scratch_elem);
    return o->grad_shard && o->scratch ? TRI_OK : TRI_ERR_INTERNAL;
}

// Stage 3: the chunk each bucket belongs to, and one workspace as large as the largest
// chunk's buckets.
static int bucket_chunk(const optim_state *o, const param_table *pt, const optim_bucket *b) {
    const param_entry *e = &pt->entries[b->first];
    if (e->layer >= 0) return optim_layer_chunk(pt, e->layer);
    if (e->layer == PARAM_LAYER_EMBED) return 0;
    return o->chunks - 1;
}

// Element i of a parameter buffer (fp32, or bf16 in mixed precision).
static void *pel(const optim_state *o, const void *base, size_t i) {
    return (char *)base + i * o->pelem;
}

static tri_status create_param_shards(optim_state *o, const param_table *pt, const float *init_host) {
    backend *be = o->be;
    o->chunks = pt->pp == 1 ? 1 : pt->virtual_stages;
    o->chunk_buckets = xcalloc((size_t)o->chunks, sizeof(int *));
    o->chunk_gathered = xcalloc((size_t)o->chunks, sizeof(int));
    o->bucket_ws_offset = xcalloc((size_t)o->n_buckets, sizeof(size_t));
    // "pass": the chunks share one workspace, the largest chunk's size; "step": each chunk
    // keeps its own region until the update.
    size_t ws = 0, total = 0;
    for (int c = 0; c < o->chunks; c++) {
        o->chunk_buckets[c] = xmalloc((size_t)(o->n_buckets + 1) * sizeof(int));
        int n = 0;
        size_t used = o->keep_gathered ? total : 0;
        for (int k = 0; k < o->n_buckets; k++) {
            if (bucket_chunk(o, pt, &o->buckets[k]) != c) continue;
            o->chunk_buckets[c][n++] = k;
            o->bucket_ws_offset[k] = used;
            used += o->buckets[k].padded;
        }
        o->chunk_buckets[c][n] = -1;
        ws = used > ws ? used : ws;
        total = used;
    }
    o->param_ws = mem_take(o->pool, be, PLAN_MEM_PARAM_GATHER, (ws ? ws : 1) * o->pelem);
    if (o->overlap && !o->keep_gathered) { // the next pass's gathers go to a second one
        o->param_ws2 = mem_take(o->pool, be, PLAN_MEM_PARAM_GATHER, (ws ? ws : 1) * o->pelem);
        if (!o->param_ws2) return TRI_ERR_INTERNAL;
    }
    o->param_shard = mem_take(o->pool, be, PLAN_MEM_PARAM, (o->arena_len ? o->arena_len : 1) * o->pelem);
    if (!o->param_ws || !o->param_shard) return TRI_ERR_INTERNAL;
    for (int p = 0; p < o->n_pieces; p++) { // bf16: the master copy from the same values
        const optim_piece *pc = &o->pieces[p];
        const size_t n = pc->hi - pc->lo;
        if (!o->bf16) {
            be->copy_to_device(be, pel(o, o->param_shard, pc->pos), init_host + pc->lo, n * sizeof(float));
            continue;
        }
        be->copy_to_device(be, o->master + pc->pos, init_host + pc->lo, n * sizeof(float));
        be->to_bf16(be, pel(o, o->param_shard, pc->pos), o->master + pc->pos, n);
    }
    return TRI_OK;
}

// Stage 3: gather workspace w (param_ws, or param_ws2), and bucket k's gather into it.
static void *gather_ws(const optim_state *o, int w) { return w ? o->param_ws2 : o->param_ws; }
static comm_request *gather_req(optim_state *o, int w, int k) {
    return &o->gather_req[(size_t)w * (size_t)o->n_buckets + (size_t)k];
}

// Completes the gathers in flight into workspace w (before it is gathered into again).
static tri_status wait_ws(optim_state *o, int w) {
    for (int k = 0; o->gather_req && k < o->n_buckets; k++)
        TRI_CHECK(comm_wait(o->cm, gather_req(o, w, k)));
    return TRI_OK;
}

// Every gather in flight (before anything reads or updates the shards they read).
static tri_status wait_gathers(optim_state *o) {
    TRI_CHECK(wait_ws(o, 0));
    return o->param_ws2 ? wait_ws(o, 1) : TRI_OK;
}

// Starts the gathers of the chunk's buckets into workspace w, in the order the pass reads
// them (backward: last first); without overlap each completes before the next starts.
static tri_status start_gathers(optim_state *o, int chunk, int backward, int w) {
    TRI_CHECK(wait_ws(o, w)); // what a pass before did not read, or a prefetch not used
    int n = 0;
    while (o->chunk_buckets[chunk][n] >= 0) n++;
    for (int i = 0; i < n; i++) {
        const int k = o->chunk_buckets[chunk][backward ? n - 1 - i : i];
        const optim_bucket *b = &o->buckets[k];
        comm_request *req = gather_req(o, w, k);
        TRI_CHECK(comm_all_gather_start(o->cm, COMM_GROUP_DP, pel(o, o->param_shard, b->arena),
                                          pel(o, gather_ws(o, w), o->bucket_ws_offset[k]),
                                          b->shard, o->pdt, req));
        if (!o->overlap) TRI_CHECK(comm_wait(o->cm, req));
        else if (req->impl) o->overlapped_gathers++;
    }
    return TRI_OK;
}

tri_status optim_params_needed(void *ctx, int chunk, int backward) {
    optim_state *o = ctx;
    if (o->chunk_gathered[chunk]) return TRI_OK; // "step": gathered since the last update
    o->chunk_gathered[chunk] = o->keep_gathered;
    // Passes alternate between the two workspaces (overlap, "pass"); this one may have been
    // started already, while the pass before it computed.
    const int w = o->param_ws2 ? 1 - o->cur_ws : 0;
    if (o->param_ws2 && o->pf_chunk == chunk && o->pf_backward == backward)
        o->prefetched_passes++;
    else
        TRI_CHECK(start_gathers(o, chunk, backward, w));
    o->pf_chunk = -1;
    o->cur_ws = w;
    for (const int *k = o->chunk_buckets[chunk]; *k >= 0; k++) {
        const optim_bucket *b = &o->buckets[*k];
        void *dst = pel(o, gather_ws(o, w), o->bucket_ws_offset[*k]);
        for (int e = b->first; e < b->first + b->count; e++) {
            void *at = pel(o, dst, o->param_entry_offset[e] - b->begin);
            if (o->bf16) o->param16_of[e] = at;
            else o->param_of[e] = at;
        }
    }
    // The next pass's gathers (the trainer names it), into the other workspace, while this
    // one computes. Never past the step's last pass: the update changes the shards.
    if (o->param_ws2 && o->next_chunk >= 0) {
        TRI_CHECK(start_gathers(o, o->next_chunk, o->next_backward, 1 - w));
        o->pf_chunk = o->next_chunk, o->pf_backward = o->next_backward;
    }
    return TRI_OK;
}

tri_status optim_params_ready(void *ctx, int first, int count) {
    optim_state *o = ctx;
    (void)count; // a bucket holds whole entries: the first one names it
    if (!o->gather_req) return TRI_OK;
    return comm_wait(o->cm, gather_req(o, o->cur_ws, o->bucket_of_entry[first]));
}

// n parameters from device `src` (fp32 or bf16) into host fp32.
static void params_to_host(const optim_state *o, float *host, const void *src, size_t n) {
    if (!o->bf16) {
        o->be->copy_to_host(o->be, host, src, n * sizeof(float));
        return;
    }
    uint16_t *h16 = xmalloc(n * sizeof(uint16_t) + 1);
    o->be->copy_to_host(o->be, h16, src, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) host[i] = bf16_to_f32(h16[i]);
    free(h16);
}

tri_status optim_local_params(optim_state *o, const param_table *pt, const void *params,
                              float *host) {
    if (o->zero < 3) {
        params_to_host(o, host, params, pt->local_numel);
        return TRI_OK;
    }
    TRI_CHECK(wait_gathers(o));
    for (int k = 0; k < o->n_buckets; k++) {
        const optim_bucket *b = &o->buckets[k];
        TRI_CHECK(comm_all_gather(o->cm, COMM_GROUP_DP, pel(o, o->param_shard, b->arena), o->scratch,
                                    b->shard, o->pdt));
        params_to_host(o, host + b->begin, o->scratch, b->numel);
    }
    return TRI_OK;
}

tri_status optim_create(optim_state *o, backend *be, comm *cm, const run_config *cfg,
                        const param_table *pt, int dp, int dp_rank, float **grad_of,
                        const void *params, const float *init_host, float **param_of,
                        uint16_t **param16_of, uint16_t **grad16_of, mem_pool *pool) {
    memset(o, 0, sizeof *o);
    o->be = be, o->cm = cm, o->pool = pool;
    o->bf16 = cfg->train.precision == DTYPE_BF16;
    o->pelem = o->bf16 ? sizeof(uint16_t) : sizeof(float);
    o->pdt = o->bf16 ? DTYPE_BF16 : DTYPE_FP32;
    o->param_of = param_of, o->param16_of = param16_of;
    o->g16 = cfg->train.grad_dtype == DTYPE_BF16;
    o->gelem = o->g16 ? sizeof(uint16_t) : sizeof(float);
    o->gdt = o->g16 ? DTYPE_BF16 : DTYPE_FP32;
    o->grad16_of = grad16_of;
    const int rd16 = cfg->train.reduce_dtype == DTYPE_BF16;
    o->rdt = rd16 ? DTYPE_BF16 : DTYPE_FP32;
    o->relem = rd16 ? sizeof(uint16_t) : sizeof(float);
    o->zero = dp > 1 ? cfg->parallel.zero : 0;
    o->dp = dp, o->dp_rank = dp_rank;
    o->bucket_mb = cfg->parallel.bucket_mb;
    o->keep_gathered = cfg->parallel.zero3_gather == ZERO3_GATHER_STEP;
    o->overlap = cfg->parallel.overlap && dp > 1;
    o->pf_chunk = o->next_chunk = -1;
    o->capacity = optim_capacity(cfg, dp, pt->local_numel);
    o->pieces = xcalloc((size_t)pt->n_entries, sizeof(optim_piece)); // at most one per entry
    tri_status rc = TRI_OK;
    o->grad_of = grad_of;
    if (o->zero == 0) {
        for (int i = 0; i < pt->n_entries; i++) {
            const param_entry *e = &pt->entries[i];
            add_piece(o, i, e->offset, e->offset + (size_t)e->local_numel, e->offset);
        }
        o->arena_len = o->capacity;
        if (dp > 1) define_buckets(o, pt); // all-reduced bucket by bucket in the backward
    } else if (o->zero == 1) {
        o->shard_len = o->capacity / (size_t)dp;
        o->shard_begin = (size_t)dp_rank * o->shard_len;
        pieces_of_range(o, pt, 0, pt->n_entries, o->shard_begin, o->shard_len, 0);
        o->arena_len = o->shard_len;
    } else {
        rc = create_buckets(o, pt, grad_of);
        o->param_entry_offset = xcalloc((size_t)pt->n_entries, sizeof(size_t));
        for (int i = 0; i < pt->n_entries; i++) o->param_entry_offset[i] = pt->entries[i].offset;
    }
    if (o->n_buckets) {
        o->red_req = xcalloc((size_t)o->n_buckets, sizeof(comm_request));
        o->red_ws = xcalloc((size_t)o->n_buckets, sizeof(void *));
        o->red_fifo = xcalloc((size_t)o->n_buckets, sizeof(int));
        if (o->zero == 3) o->gather_req = xcalloc(2 * (size_t)o->n_buckets, sizeof(comm_request));
    }
    size_t bytes = o->arena_len * sizeof(float);
    o->norm_acc = mem_take(o->pool, be, PLAN_MEM_SCRATCH, sizeof(double));
    if (!o->norm_acc) rc = TRI_ERR_INTERNAL;
    o->m = mem_take(o->pool, be, PLAN_MEM_ADAM, bytes);
    o->v = mem_take(o->pool, be, PLAN_MEM_ADAM, bytes);
    // Mixed precision: the fp32 master copy of this rank's pieces (AdamW updates it; the bf16
    // parameters are its rounding), from the bf16 parameters it starts equal to.
    if (o->bf16) o->master = mem_take(o->pool, be, PLAN_MEM_MASTER, bytes ? bytes : sizeof(float));
    if (o->rdt != o->gdt && dp > 1) { // the reduction's own buffer, in reduce_dtype
        o->rtmp_len = o->zero == 1 ? o->capacity : 1;
        for (int k = 0; o->zero != 1 && k < o->n_buckets; k++)
            o->rtmp_len = o->buckets[k].padded > o->rtmp_len ? o->buckets[k].padded : o->rtmp_len;
        o->rtmp = mem_take(o->pool, be, PLAN_MEM_GRAD_BUCKET, o->rtmp_len * o->relem);
        o->workspace_bytes += mem_round(o->rtmp_len * o->relem);
        if (!o->rtmp) rc = TRI_ERR_INTERNAL;
    }
    if (o->g16 || o->rtmp) { // a piece or bucket shard widened to fp32: the widest entry
        size_t widest = 1; // (stages 0-1) or bucket shard (2-3), the same on every dp rank
        for (int i = 0; o->zero < 2 && i < pt->n_entries; i++)
            widest = (size_t)pt->entries[i].local_numel > widest ? (size_t)pt->entries[i].local_numel : widest;
        for (int k = 0; o->zero >= 2 && k < o->n_buckets; k++)
            widest = o->buckets[k].shard > widest ? o->buckets[k].shard : widest;
        o->gtmp = mem_take(o->pool, be, PLAN_MEM_GRAD_BUCKET, widest * sizeof(float));
        o->workspace_bytes += mem_round(widest * sizeof(float));
        if (!o->gtmp) rc = TRI_ERR_INTERNAL;
    }
    if (rc == TRI_OK && o->zero == 3 && (!o->bf16 || o->master)) rc = create_param_shards(o, pt, init_host);
    for (int p = 0; rc == TRI_OK && o->bf16 && o->master && o->zero < 3 && p < o->n_pieces; p++) {
        const optim_piece *pc = &o->pieces[p];
        be->from_bf16(be, o->master + pc->pos, (const uint16_t *)params + pc->lo, pc->hi - pc->lo);
    }
    if (rc != TRI_OK || !o->m || !o->v || (o->bf16 && !o->master)) {
        LOG_ERROR("out of %s memory for the optimizer state (%zu bytes of Adam moments)",
                  be->name, 2 * bytes);
        return TRI_ERR_INTERNAL;
    }
    return TRI_OK;
}

void optim_free(optim_state *o) {
    backend *be = o->be;
    if (!be) return;
    for (int k = 0; k < o->n_buckets; k++)
        if (o->buckets[k].ws != o->layer_ws && o->buckets[k].ws != o->layer_ws2)
            mem_give(o->pool, be, o->buckets[k].ws);
    void *bufs[] = {o->norm_acc, o->m, o->v, o->master, o->gtmp, o->rtmp, o->grad_shard, o->scratch,
                    o->layer_ws, o->layer_ws2, o->param_shard, o->param_ws, o->param_ws2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mem_give(o->pool, be, bufs[i]);
    for (int c = 0; o->chunk_buckets && c < o->chunks; c++) free(o->chunk_buckets[c]);
    free(o->chunk_buckets);
    free(o->chunk_gathered);
    free(o->bucket_ws_offset);
    free(o->param_entry_offset);
    free(o->red_req);
    free(o->red_ws);
    free(o->red_fifo);
    free(o->gather_req);
    free(o->pieces);
    free(o->buckets);
    free(o->bucket_of_entry);
    memset(o, 0, sizeof *o);
}

// Gradients between their accumulation dtype (gdt) and the reduction's (rdt): n elements.
static void grads_to_reduce(optim_state *o, void *dst, const void *src, size_t n) {
    if (o->gdt == DTYPE_BF16) o->be->from_bf16(o->be, dst, src, n);
    else o->be->to_bf16(o->be, dst, src, n);
}
static void grads_from_reduce(optim_state *o, void *dst, const void *src, size_t n) {
    if (o->gdt == DTYPE_BF16) o->be->to_bf16(o->be, dst, src, n);
    else o->be->from_bf16(o->be, dst, src, n);
}

// Completes the reduction of bucket k: stages 2-3 add its shard (the first block of the
// workspace it reduced in place) into grad_shard, and zero that workspace for the bucket's
// next micro-batch.
static tri_status finish_reduction(optim_state *o, int k) {
    const optim_bucket *b = &o->buckets[k];
    void *ws = o->red_ws[k];
    TRI_CHECK(comm_wait(o->cm, &o->red_req[k]));
    if (o->zero == 0) return TRI_OK;
    if (o->g16) {
        o->be->from_bf16(o->be, o->gtmp, ws, b->shard);
        o->be->add_to_bf16(o->be, (uint16_t *)o->grad_shard + b->arena, o->gtmp, b->shard);
    } else {
        float *acc = (float *)o->grad_shard + b->arena;
        o->be->residual_fwd(o->be, acc, acc, ws, b->shard);
    }
    o->be->memset_zero(o->be, ws, b->padded * o->gelem);
    return TRI_OK;
}

// Completes the reductions in flight, oldest first, all but the newest `keep`.
static tri_status finish_reductions(optim_state *o, int keep) {
    int done = 0;
    for (; o->n_red - done > keep; done++) TRI_CHECK(finish_reduction(o, o->red_fifo[done]));
    memmove(o->red_fifo, o->red_fifo + done, (size_t)(o->n_red - done) * sizeof(int));
    o->n_red -= done;
    return TRI_OK;
}

tri_status optim_finish_reductions(optim_state *o) {
    TRI_CHECK(finish_reductions(o, 0));
    return wait_gathers(o);
}

// The layer buckets move from workspace `in_flight` (being reduced) to the other one, where
// the backward's next layer gradients go.
static void swap_layer_ws(optim_state *o, const void *in_flight) {
    void *next = in_flight == o->layer_ws ? o->layer_ws2 : o->layer_ws;
    for (int k = 0; k < o->n_buckets; k++) {
        optim_bucket *b = &o->buckets[k];
        if (b->ws != in_flight) continue;
        b->ws = next;
        for (int e = b->first; e < b->first + b->count; e++) {
            const size_t at = o->param_entry_offset[e] - b->begin;
            if (o->g16) o->grad16_of[e] = (uint16_t *)next + at;
            else o->grad_of[e] = (float *)next + at;
        }
    }
}

// Starts bucket k's dp reduction of `buf` in place (stage 0: all-reduce; 2-3: reduce-scatter,
// the shard landing in the first block). Without overlap it completes at once; with it the
// previous one completes now, so that a reduction runs while the backward computes the next
// bucket, and the layer buckets switch workspaces.
static tri_status start_reduction(optim_state *o, int k, void *buf) {
    const optim_bucket *b = &o->buckets[k];
    for (int i = 0; i < o->n_red; i++) // its previous micro-batch's, when nothing came between
        if (o->red_fifo[i] == k) TRI_CHECK(finish_reductions(o, 0));
    if (o->zero == 0)
        TRI_CHECK(comm_all_reduce_start(o->cm, COMM_GROUP_DP, buf, b->numel, o->gdt,
                                          COMM_REDUCE_SUM, &o->red_req[k]));
    else
        TRI_CHECK(comm_reduce_scatter_start(o->cm, COMM_GROUP_DP, buf, buf, b->shard, o->gdt,
                                              &o->red_req[k]));
    o->red_ws[k] = buf;
    o->red_fifo[o->n_red++] = k;
    if (!o->overlap) return finish_reductions(o, 0);
    o->overlapped_reductions++;
    comm_progress(o->cm);
    TRI_CHECK(finish_reductions(o, 1));
    if (o->layer_ws2 && (buf == o->layer_ws || buf == o->layer_ws2)) swap_layer_ws(o, buf);
    return TRI_OK;
}

tri_status optim_bucket_ready(void *ctx, int first, int count) {
    optim_state *o = ctx;
    const int k = o->bucket_of_entry[first];
    optim_bucket *b = &o->buckets[k];
    TRI_ASSERT(first >= b->first && first + count <= b->first + b->count);
    // A bucket of several layers is final when the backward has done all of them.
    if (b->layers > 1 && ++b->layers_done < b->layers) return TRI_OK;
    b->layers_done = 0;
    if (o->zero == 0) {
        // The step's gradients of this bucket are final after its last micro-batch: the
        // all-reduce is issued then, while the backward of the other buckets goes on.
        if (!o->last_micro) return TRI_OK;
        void *g = o->g16 ? (void *)o->grad16_of[first] : (void *)o->grad_of[first];
        if (!o->rtmp) return start_reduction(o, k, g);
        grads_to_reduce(o, o->rtmp, g, b->numel);
        TRI_CHECK(comm_all_reduce(o->cm, COMM_GROUP_DP, o->rtmp, b->numel, o->rdt, COMM_REDUCE_SUM));
        grads_from_reduce(o, g, o->rtmp, b->numel);
        return TRI_OK;
    }
    // This micro-batch's gradients of the bucket, summed over dp, into this rank's shard.
    if (o->rtmp) { // reduced in reduce_dtype (in place: the shard lands first), added widened
        grads_to_reduce(o, o->rtmp, b->ws, b->padded);
        TRI_CHECK(comm_reduce_scatter(o->cm, COMM_GROUP_DP, o->rtmp, o->rtmp, b->shard, o->rdt));
        if (o->rdt == DTYPE_FP32) {
            o->be->add_to_bf16(o->be, (uint16_t *)o->grad_shard + b->arena, o->rtmp, b->shard);
        } else {
            float *acc = (float *)o->grad_shard + b->arena;
            o->be->from_bf16(o->be, o->gtmp, o->rtmp, b->shard);
            o->be->residual_fwd(o->be, acc, acc, o->gtmp, b->shard);
        }
        o->be->memset_zero(o->be, b->ws, b->padded * o->gelem);
        return TRI_OK;
    }
    return start_reduction(o, k, b->ws);
}

void optim_zero_grads(optim_state *o, void *grads) {
    if (o->zero >= 2) o->be->memset_zero(o->be, o->grad_shard, o->arena_len * o->gelem);
    else o->be->memset_zero(o->be, grads, o->capacity * o->gelem);
}

double optim_lr(const run_config *cfg, int step) {
    const double lr = cfg->optim.lr, min_lr = cfg->optim.min_lr;
    const int warmup = cfg->optim.warmup_steps, total = cfg->train.steps;
    if (step < warmup) return lr * (step + 1) / warmup;
    if (cfg->optim.decay == DECAY_CONSTANT || total - 1 <= warmup) return lr;
    double progress = (double)(step - warmup) / (double)(total - 1 - warmup); // 0..1
    if (progress > 1.0) progress = 1.0;
    double coeff = cfg->optim.decay == DECAY_COSINE ? 0.5 * (1.0 + cos(M_PI * progress))
                                                    : 1.0 - progress;
    return min_lr + coeff * (lr - min_lr);
}

tri_status optim_reduce_grads(optim_state *o, const param_table *pt, int sequence_parallel,
                              void *grads) {
    comm *cm = o->cm;
    if (o->zero == 0)
        return TRI_OK; // dp == 1, or already all-reduced bucket by bucket (optim_bucket_ready)
    if (o->zero == 1) // in place: the summed shard of this rank lands in the first block
    {
        if (!o->rtmp) return comm_reduce_scatter(cm, COMM_GROUP_DP, grads, grads, o->shard_len, o->gdt);
        grads_to_reduce(o, o->rtmp, grads, o->capacity);
        TRI_CHECK(comm_reduce_scatter(cm, COMM_GROUP_DP, o->rtmp, o->rtmp, o->shard_len, o->rdt));
        grads_from_reduce(o, grads, o->rtmp, o->shard_len);
        return TRI_OK;
    }
    // Stages 2 and 3: the model could not sum these on a full buffer; the pieces line up on every
    // rank of the tp group and of the embedding group (same tables, same dp rank).
    for (int p = 0; p < o->n_pieces; p++) {
        const optim_piece *pc = &o->pieces[p];
        const param_entry *e = &pt->entries[pc->entry];
        void *g = (char *)o->grad_shard + pc->pos * o->gelem;
        if (sequence_parallel && e->layernorm && cm->groups[COMM_GROUP_TP].size > 1)
            TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_TP, g, pc->hi - pc->lo, o->gdt, COMM_REDUCE_SUM));
        if (pt->pp > 1 && pc->entry == pt->wte)
            TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_EMBED, g, pc->hi - pc->lo, o->gdt, COMM_REDUCE_SUM));
    }
    return TRI_OK;
}

// A piece's reduced gradients as fp32: in place, or (bf16 gradients) widened into gtmp.
static const float *piece_grads(const optim_state *o, const void *grads, const optim_piece *pc) {
    const char *base = o->zero >= 2 ? (const char *)o->grad_shard : (const char *)grads;
    const void *g = base + pc->pos * o->gelem;
    if (!o->g16) return g;
    o->be->from_bf16(o->be, o->gtmp, g, pc->hi - pc->lo);
    return o->gtmp;
}

tri_status optim_grad_norm(optim_state *o, const param_table *pt, const void *grads,
                           double *norm) {
    // Sum of squares per piece, in table order. Replicated entries are counted by tp rank 0
    // only and the tied embedding by the first stage only, so that the sums over the shards
    // (dp) and the model-parallel group (tp x pp) count each unique element once.
    // The pieces' sums stay on the device (norm_acc); the host waits once, for their total.
    o->be->memset_zero(o->be, o->norm_acc, sizeof(double));
    for (int p = 0; p < o->n_pieces; p++) {
        const optim_piece *pc = &o->pieces[p];
        const param_entry *e = &pt->entries[pc->entry];
        if (e->split == SPLIT_REPLICATED && pt->tp_rank != 0) continue;
        if (pc->entry == pt->wte && pt->wte_is_copy) continue;
        o->be->sumsq_add(o->be, o->norm_acc, piece_grads(o, grads, pc), pc->hi - pc->lo);
    }
    double sumsq = 0.0;
    o->be->copy_to_host(o->be, &sumsq, o->norm_acc, sizeof sumsq);
    comm *cm = o->cm;
    if (o->zero)
        TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_DP, &sumsq, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    if (cm->groups[COMM_GROUP_MP].size > 1)
        TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_MP, &sumsq, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    *norm = sqrt(sumsq);
    if (!isfinite(*norm)) return TRI_ERR_NONFINITE;
    return TRI_OK;
}

tri_status optim_step(optim_state *o, const run_config *cfg, const param_table *pt,
                      void *params, const void *grads, double lr, double grad_norm) {
    backend *be = o->be;
    comm *cm = o->cm;
    double clip = cfg->train.grad_clip;
    float grad_scale = (clip > 0 && grad_norm > clip) ? (float)(clip / grad_norm) : 1.0f;
    TRI_CHECK(wait_gathers(o)); // they read the shards updated here
    o->pf_chunk = -1;           // and what was gathered ahead is stale after it
    o->t++;
    for (int p = 0; p < o->n_pieces; p++) {
        const optim_piece *pc = &o->pieces[p];
        float wd = pt->entries[pc->entry].decay ? (float)cfg->optim.weight_decay : 0.0f;
        // The weights AdamW updates: the fp32 master, rounded into the bf16 parameters in the
        // same pass, or the fp32 parameters themselves.
        void *param = o->zero == 3 ? pel(o, o->param_shard, pc->pos) : pel(o, params, pc->lo);
        float *w = o->bf16 ? o->master + pc->pos : param;
        be->adamw(be, w, piece_grads(o, grads, pc), o->m + pc->pos, o->v + pc->pos,
                  pc->hi - pc->lo, (float)lr, (float)cfg->optim.beta1, (float)cfg->optim.beta2,
                  (float)cfg->optim.eps, wd, grad_scale, o->t, o->bf16 ? param : NULL);
    }
    for (int c = 0; o->chunk_gathered && c < o->chunks; c++) o->chunk_gathered[c] = 0;
    if (o->zero == 1) // every rank's updated shard to every replica (this rank's in place)
        return comm_all_gather(cm, COMM_GROUP_DP, pel(o, params, o->shard_begin), params,
                              o->shard_len, o->pdt);
    for (int k = 0; o->zero == 2 && k < o->n_buckets; k++) {
        const optim_bucket *b = &o->buckets[k];
        const void *own = pel(o, params, b->begin + (size_t)o->dp_rank * b->shard);
        TRI_CHECK(comm_all_gather(cm, COMM_GROUP_DP, own, o->scratch, b->shard, o->pdt));
        be->copy(be, pel(o, params, b->begin), o->scratch, b->numel * o->pelem);
    }
    return TRI_OK;
}
