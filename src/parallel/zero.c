// zero.c: the ZeRO layer (zero.h): creation, the gradient side of the model's store (bucket
// reductions over dp while the backward goes on), the end of a step's gradients and the
// update's parameter all-gathers. The stage-3 gathers are in zero_gather.c.
#include "parallel/zero_internal.h"

#include <string.h>

#include "base/bf16.h"
#include "comm/flight.h"

// ---- creation ----

// Where entry e's gradient accumulates: the full buffer (stages 0-1), or its bucket's
// workspace (stages 2-3).
static void point_grads(zero_state *z) {
    const param_table *pt = z->pt;
    for (int e = 0; z->lay.stage < 2 && e < pt->n_entries; e++)
        z->grad_of[e] = (char *)z->grads + pt->entries[e].offset * z->gelem;
    for (int k = 0; z->lay.stage >= 2 && k < z->lay.n_buckets; k++) {
        const zero_bucket *b = &z->lay.buckets[k];
        if (b->layers) z->bucket_ws[k] = z->layer_ws;
        for (int e = b->first; e < b->first + b->count; e++)
            z->grad_of[e] = (char *)z->bucket_ws[k] + (pt->entries[e].offset - b->begin) * z->gelem;
    }
}

// The initial parameters into the buffer (stages 0-2) or this rank's shards (stage 3), in
// param_dtype: every layout starts from the same bf16 model, the master copies too. Entry by
// entry through one host buffer as large as the largest entry (and its bf16 rounding): the
// rank never holds a host copy of its whole shard (plan_host.c counts these two).
static tri_status load_params(zero_state *z, zero_init_fn init, void *ctx) {
    backend *be = z->be;
    const param_table *pt = z->pt;
    const int bf16 = z->pdt == DTYPE_BF16;
    size_t most = 1;
    for (int i = 0; i < pt->n_entries; i++)
        most = (size_t)pt->entries[i].local_numel > most ? (size_t)pt->entries[i].local_numel
                                                         : most;
    float *host = xmalloc(most * sizeof(float));
    uint16_t *h16 = bf16 ? xmalloc(most * sizeof(uint16_t)) : NULL;
    tri_status rc = TRI_OK;
    // Stages 0-2: every entry whole; stage 3: each piece (at most one per entry), in order.
    const int n = z->lay.stage < 3 ? pt->n_entries : z->lay.n_pieces;
    for (int k = 0; k < n && rc == TRI_OK; k++) {
        const int i = z->lay.stage < 3 ? k : z->lay.pieces[k].entry;
        const param_entry *e = &pt->entries[i];
        const size_t lo = z->lay.stage < 3 ? 0 : z->lay.pieces[k].lo - e->offset;
        const size_t count = z->lay.stage < 3 ? (size_t)e->local_numel
                                              : z->lay.pieces[k].hi - z->lay.pieces[k].lo;
        void *dst = z->lay.stage < 3 ? zero_pel(z, z->params, e->offset)
                                     : zero_pel(z, z->gather.shard, z->lay.pieces[k].pos);
        rc = init(ctx, i, host);
        if (rc != TRI_OK) break;
        if (!bf16) {
            be->copy_to_device(be, dst, host + lo, count * sizeof(float));
            continue;
        }
        for (size_t j = 0; j < count; j++) h16[j] = bf16_from_f32(host[lo + j]);
        be->copy_to_device(be, dst, h16, count * sizeof(uint16_t));
    }
    be->synchronize(be); // the copies read `host` and `h16`
    free(host);
    free(h16);
    return rc;
}

static tri_status zero_grads_ready(void *ctx, int first, int count);

tri_status zero_create(zero_state **out, const zero_config *zc, model *m, zero_init_fn init,
                       void *init_ctx, backend *be, comm *cm, mem_pool *pool) {
    zero_state *z = xcalloc(1, sizeof *z);
    *out = z;
    z->cfg = *zc;
    z->m = m, z->pt = &m->table;
    z->be = be, z->cm = cm, z->pool = pool;
    z->pdt = zc->param_dtype, z->gdt = zc->grad_dtype, z->rdt = zc->reduce_dtype;
    z->pelem = dtype_size(z->pdt), z->gelem = dtype_size(z->gdt), z->relem = dtype_size(z->rdt);
    z->overlap = zc->overlap && zc->dp > 1;
    z->scratch_bucket = -1;
    zero_layout_build(&z->lay, zc, z->pt);
    const int n_entries = z->pt->n_entries, nb = z->lay.n_buckets;
    z->param_of = xcalloc((size_t)n_entries, sizeof(void *));
    z->grad_of = xcalloc((size_t)n_entries, sizeof(void *));
    z->bucket_ws = xcalloc((size_t)nb + 1, sizeof(void *));
    z->layers_done = xcalloc((size_t)nb + 1, sizeof(int));
    z->red.req = xcalloc((size_t)nb + 1, sizeof(comm_request));
    z->red.ws = xcalloc((size_t)nb + 1, sizeof(void *));
    z->red.fifo = xcalloc((size_t)nb + 1, sizeof(int));
    zero_buffers(&z->buffers, zc, &z->lay, z->pt, z);
    TRI_CHECK(mem_specs_carve(&z->buffers, pool, be));
    for (int e = 0; z->lay.stage < 3 && e < n_entries; e++)
        z->param_of[e] = zero_pel(z, z->params, z->pt->entries[e].offset);
    point_grads(z);
    if (z->lay.stage == 3) zero_gather_init(z);
    TRI_CHECK(load_params(z, init, init_ctx));
    const int reduces = z->lay.stage >= 2 || (z->lay.stage == 0 && zc->dp > 1);
    const model_store store = {
        .ctx = z,
        .param_of = z->param_of,
        .grad_of = z->grad_of,
        .pass_begin = z->lay.stage == 3 ? zero_pass_begin : NULL,
        .params_ready = z->lay.stage == 3 ? zero_params_ready : NULL,
        .grads_ready = reduces ? zero_grads_ready : NULL,
    };
    model_set_store(m, &store);
    return TRI_OK;
}

void zero_free(zero_state *z) {
    if (!z) return;
    mem_specs_release(&z->buffers, z->pool, z->be);
    zero_gather_free(z);
    free(z->param_of);
    free(z->grad_of);
    free(z->bucket_ws);
    free(z->layers_done);
    free(z->red.req);
    free(z->red.ws);
    free(z->red.fifo);
    zero_layout_free(&z->lay);
    free(z);
}

const zero_layout *zero_layout_of(const zero_state *z) { return &z->lay; }
const param_table *zero_table(const zero_state *z) { return z->pt; }

// ---- gradients: the dp reductions ----

// Gradients between their accumulation dtype (gdt) and the reduction's (rdt): n elements.
static void grads_to_reduce(zero_state *z, void *dst, const void *src, size_t n) {
    if (z->gdt == DTYPE_BF16) z->be->from_bf16(z->be, dst, src, n);
    else z->be->to_bf16(z->be, dst, src, n);
}
static void grads_from_reduce(zero_state *z, void *dst, const void *src, size_t n) {
    if (z->gdt == DTYPE_BF16) z->be->to_bf16(z->be, dst, src, n);
    else z->be->from_bf16(z->be, dst, src, n);
}

// Completes the reduction of bucket k: stages 2-3 add its shard (the first block of the
// workspace it reduced in place) into grad_shard, and zero that workspace for the bucket's
// next micro-batch.
static tri_status finish_reduction(zero_state *z, int k) {
    const zero_bucket *b = &z->lay.buckets[k];
    void *ws = z->red.ws[k];
    TRI_CHECK(comm_wait(z->cm, &z->red.req[k]));
    if (z->lay.stage == 0) return TRI_OK;
    if (z->gdt == DTYPE_BF16) {
        z->be->from_bf16(z->be, z->gtmp, ws, b->shard);
        z->be->add_to_bf16(z->be, (uint16_t *)z->grad_shard + b->arena, z->gtmp, b->shard);
    } else {
        float *acc = (float *)z->grad_shard + b->arena;
        z->be->residual_fwd(z->be, acc, acc, ws, b->shard);
    }
    z->be->memset_zero(z->be, ws, b->padded * z->gelem);
    return TRI_OK;
}

// Completes the reductions in flight, oldest first, all but the newest `keep`.
static tri_status finish_reductions(zero_state *z, int keep) {
    zero_reductions *r = &z->red;
    int done = 0;
    for (; r->n - done > keep; done++) TRI_CHECK(finish_reduction(z, r->fifo[done]));
    // fifo is NULL without buckets (dp 1): memmove of NULL is undefined even for 0 bytes.
    if (done > 0 && r->n > done)
        memmove(r->fifo, r->fifo + done, (size_t)(r->n - done) * sizeof(int));
    r->n -= done;
    return TRI_OK;
}

// The layer buckets move from workspace `in_flight` (being reduced) to the other one, where
// the backward's next layer gradients go.
static void swap_layer_ws(zero_state *z, const void *in_flight) {
    void *next = in_flight == z->layer_ws ? z->layer_ws2 : z->layer_ws;
    for (int k = 0; k < z->lay.n_buckets; k++) {
        const zero_bucket *b = &z->lay.buckets[k];
        if (z->bucket_ws[k] != in_flight) continue;
        z->bucket_ws[k] = next;
        for (int e = b->first; e < b->first + b->count; e++)
            z->grad_of[e] = (char *)next + (z->pt->entries[e].offset - b->begin) * z->gelem;
    }
}

// Starts bucket k's dp reduction of `buf` in place (stage 0: all-reduce; 2-3: reduce-scatter,
// the shard landing in the first block). Without overlap it completes at once; with it the
// previous one completes now, so that a reduction runs while the backward computes the next
// bucket, and the layer buckets switch workspaces.
static tri_status start_reduction(zero_state *z, int k, void *buf) {
    const zero_bucket *b = &z->lay.buckets[k];
    zero_reductions *r = &z->red;
    for (int i = 0; i < r->n; i++) // its previous micro-batch's, when nothing came between
        if (r->fifo[i] == k) TRI_CHECK(finish_reductions(z, 0));
    if (z->lay.stage == 0)
        TRI_CHECK(comm_all_reduce_start(z->cm, COMM_GROUP_DP, buf, b->numel, z->gdt,
                                        COMM_REDUCE_SUM, &r->req[k]));
    else
        TRI_CHECK(comm_reduce_scatter_start(z->cm, COMM_GROUP_DP, buf, buf, b->shard, z->gdt,
                                            &r->req[k]));
    r->ws[k] = buf;
    r->fifo[r->n++] = k;
    if (!z->overlap) return finish_reductions(z, 0);
    z->overlapped_reductions++;
    comm_progress(z->cm);
    TRI_CHECK(finish_reductions(z, 1));
    if (z->layer_ws2 && (buf == z->layer_ws || buf == z->layer_ws2)) swap_layer_ws(z, buf);
    return TRI_OK;
}

// Stages 2-3 with a reduce_dtype of its own: this micro-batch's gradients of bucket b,
// converted, reduce-scattered (in place: the shard lands first) and added to this rank's
// shard, widened.
static tri_status reduce_converted(zero_state *z, const zero_bucket *b, void *ws) {
    grads_to_reduce(z, z->rtmp, ws, b->padded);
    TRI_CHECK(comm_reduce_scatter(z->cm, COMM_GROUP_DP, z->rtmp, z->rtmp, b->shard, z->rdt));
    if (z->rdt == DTYPE_FP32) {
        z->be->add_to_bf16(z->be, (uint16_t *)z->grad_shard + b->arena, z->rtmp, b->shard);
    } else {
        float *acc = (float *)z->grad_shard + b->arena;
        z->be->from_bf16(z->be, z->gtmp, z->rtmp, b->shard);
        z->be->residual_fwd(z->be, acc, acc, z->gtmp, b->shard);
    }
    z->be->memset_zero(z->be, ws, b->padded * z->gelem);
    return TRI_OK;
}

// The store's grads_ready: entries [first, first + count) of the running micro-batch's
// backward are final.
static tri_status grads_ready_bucket(zero_state *z, int k, int first, int count);

static tri_status zero_grads_ready(void *ctx, int first, int count) {
    zero_state *z = ctx;
    const int k = z->lay.bucket_of_entry[first];
    flight_set_bucket(k); // what the flight recorder says this reduction moves
    const tri_status rc = grads_ready_bucket(z, k, first, count);
    flight_set_bucket(-1);
    return rc;
}

static tri_status grads_ready_bucket(zero_state *z, int k, int first, int count) {
    const zero_bucket *b = &z->lay.buckets[k];
    TRI_ASSERT(first >= b->first && first + count <= b->first + b->count);
    // A bucket of several layers is final when the backward has done all of them.
    if (b->layers > 1 && ++z->layers_done[k] < b->layers) return TRI_OK;
    z->layers_done[k] = 0;
    if (z->lay.stage == 0) {
        // The step's gradients of this bucket are final after its last micro-batch: the
        // all-reduce is issued then, while the backward of the other buckets goes on.
        if (!z->last_micro) return TRI_OK;
        void *g = z->grad_of[first];
        if (!z->rtmp) return start_reduction(z, k, g);
        grads_to_reduce(z, z->rtmp, g, b->numel);
        TRI_CHECK(
            comm_all_reduce(z->cm, COMM_GROUP_DP, z->rtmp, b->numel, z->rdt, COMM_REDUCE_SUM));
        grads_from_reduce(z, g, z->rtmp, b->numel);
        return TRI_OK;
    }
    // This micro-batch's gradients of the bucket, summed over dp, into this rank's shard.
    if (z->rtmp) return reduce_converted(z, b, z->bucket_ws[k]);
    return start_reduction(z, k, z->bucket_ws[k]);
}

// ---- the step ----

void zero_step_begin(zero_state *z) {
    if (z->lay.stage >= 2) z->be->memset_zero(z->be, z->grad_shard, z->lay.arena_len * z->gelem);
    else z->be->memset_zero(z->be, z->grads, z->lay.capacity * z->gelem);
}

void zero_backward_micro(zero_state *z, int last) { z->last_micro = last; }

void zero_next_pass(zero_state *z, int chunk, model_pass pass) {
    // W gathers nothing (zero_pass_begin): nothing to start ahead for it.
    z->gather.next_chunk = pass == MODEL_PASS_W ? -1 : chunk;
    z->gather.next_backward = pass != MODEL_PASS_FORWARD;
}

void zero_overlap_counts(zero_state *z, int *reductions, int *gathers, int *prefetched) {
    *reductions = z->overlapped_reductions, *gathers = z->overlapped_gathers;
    *prefetched = z->prefetched_passes;
    z->overlapped_reductions = z->overlapped_gathers = z->prefetched_passes = 0;
}

// Stages 0-1: the sums the model leaves to its store on the full gradient buffer: under
// sequence parallelism each tp rank holds the LayerNorm gradients of its own rows only, so
// they are summed over tp; with pipelining the two copies of the tied embedding (first and
// last stage) sum their gradients.
static tri_status finish_full_grads(zero_state *z) {
    const param_table *pt = z->pt;
    comm *cm = z->cm;
    for (int i = 0; z->m->d.sp && i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        if (e->layernorm && cm->groups[COMM_GROUP_TP].size > 1)
            TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_TP, z->grad_of[i], (size_t)e->local_numel,
                                      z->gdt, COMM_REDUCE_SUM));
    }
    if (pt->wte_shared) { // untied (llama), or both ends on one rank: nothing to sum
        const param_entry *e = &pt->entries[pt->wte];
        TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_EMBED, z->grad_of[pt->wte], (size_t)e->local_numel,
                                  z->gdt, COMM_REDUCE_SUM));
    }
    return TRI_OK;
}

tri_status zero_finish_grads(zero_state *z) {
    comm *cm = z->cm;
    const param_table *pt = z->pt;
    TRI_CHECK(finish_reductions(z, 0));
    TRI_CHECK(zero_wait_gathers(z));
    if (z->lay.stage < 2) TRI_CHECK(finish_full_grads(z));
    if (z->lay.stage == 0) return TRI_OK; // dp == 1, or already all-reduced bucket by bucket
    if (z->lay.stage == 1) { // in place: the summed shard of this rank lands in the first block
        const size_t len = z->lay.shard_len;
        if (!z->rtmp)
            return comm_reduce_scatter(cm, COMM_GROUP_DP, z->grads, z->grads, len, z->gdt);
        grads_to_reduce(z, z->rtmp, z->grads, z->lay.capacity);
        TRI_CHECK(comm_reduce_scatter(cm, COMM_GROUP_DP, z->rtmp, z->rtmp, len, z->rdt));
        grads_from_reduce(z, z->grads, z->rtmp, len);
        return TRI_OK;
    }
    // Stages 2 and 3: the same sums as finish_full_grads on this rank's pieces; they line up
    // on every rank of the tp group and of the embedding group (same tables, same dp rank).
    for (int p = 0; p < z->lay.n_pieces; p++) {
        const zero_piece *pc = &z->lay.pieces[p];
        const param_entry *e = &pt->entries[pc->entry];
        void *g = (char *)z->grad_shard + pc->pos * z->gelem;
        if (z->m->d.sp && e->layernorm && cm->groups[COMM_GROUP_TP].size > 1)
            TRI_CHECK(
                comm_all_reduce(cm, COMM_GROUP_TP, g, pc->hi - pc->lo, z->gdt, COMM_REDUCE_SUM));
        if (pt->wte_shared && pc->entry == pt->wte)
            TRI_CHECK(
                comm_all_reduce(cm, COMM_GROUP_EMBED, g, pc->hi - pc->lo, z->gdt, COMM_REDUCE_SUM));
    }
    return TRI_OK;
}

const void *zero_piece_grad_stored(const zero_state *z, const zero_piece *pc) {
    const char *base = z->lay.stage >= 2 ? (const char *)z->grad_shard : (const char *)z->grads;
    return base + pc->pos * z->gelem;
}

float *zero_grad_widen_buffer(const zero_state *z) { return z->gdt == DTYPE_BF16 ? z->gtmp : NULL; }

tri_dtype zero_grad_dtype(const zero_state *z) { return z->gdt; }

const float *zero_piece_grad(zero_state *z, const zero_piece *pc) {
    const void *g = zero_piece_grad_stored(z, pc);
    if (z->gdt != DTYPE_BF16) return g;
    z->be->from_bf16(z->be, z->gtmp, g, pc->hi - pc->lo);
    return z->gtmp;
}

void *zero_piece_param(const zero_state *z, const zero_piece *pc, size_t lo) {
    if (z->lay.stage == 3) return zero_pel(z, z->gather.shard, pc->pos + (lo - pc->lo));
    return zero_pel(z, z->params, lo);
}

tri_dtype zero_param_dtype(const zero_state *z) { return z->pdt; }

void *zero_param_at(const zero_state *z, size_t offset) {
    TRI_ASSERT(z->lay.stage < 3);
    return zero_pel(z, z->params, offset);
}

void *zero_full_grads(const zero_state *z) { return z->lay.stage < 2 ? z->grads : NULL; }

tri_status zero_update_begin(zero_state *z) {
    TRI_CHECK(zero_wait_gathers(z)); // they read the shards updated next
    z->gather.pf_chunk = -1;         // and what was gathered ahead is stale after it
    return TRI_OK;
}

tri_status zero_update_end(zero_state *z) {
    comm *cm = z->cm;
    z->scratch_bucket = -1;
    for (int c = 0; z->gather.gathered && c < z->lay.chunks; c++) z->gather.gathered[c] = 0;
    if (z->lay.stage == 1) // every rank's updated shard to every replica (this rank's in place)
        return comm_all_gather(cm, COMM_GROUP_DP, zero_pel(z, z->params, z->lay.shard_begin),
                               z->params, z->lay.shard_len, z->pdt);
    for (int k = 0; z->lay.stage == 2 && k < z->lay.n_buckets; k++) {
        const zero_bucket *b = &z->lay.buckets[k];
        const void *own = zero_pel(z, z->params, b->begin + (size_t)z->lay.dp_rank * b->shard);
        flight_set_bucket(k);
        const tri_status rc = comm_all_gather(cm, COMM_GROUP_DP, own, z->scratch, b->shard, z->pdt);
        flight_set_bucket(-1);
        TRI_CHECK(rc);
        z->be->copy(z->be, zero_pel(z, z->params, b->begin), z->scratch, b->numel * z->pelem);
    }
    return TRI_OK;
}

// ---- the whole of this rank's parameters ----

// n parameters from device `src` (fp32 or bf16) into host fp32.
static void params_to_host(const zero_state *z, float *host, const void *src, size_t n) {
    if (z->pdt != DTYPE_BF16) {
        z->be->copy_to_host(z->be, host, src, n * sizeof(float));
        return;
    }
    uint16_t *h16 = xmalloc(n * sizeof(uint16_t) + 1);
    z->be->copy_to_host(z->be, h16, src, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) host[i] = bf16_to_f32(h16[i]);
    free(h16);
}

tri_status zero_local_params(zero_state *z, float *host) {
    if (z->lay.stage < 3) {
        params_to_host(z, host, z->params, z->pt->local_numel);
        return TRI_OK;
    }
    TRI_CHECK(zero_wait_gathers(z));
    z->scratch_bucket = -1;
    for (int k = 0; k < z->lay.n_buckets; k++) {
        const zero_bucket *b = &z->lay.buckets[k];
        TRI_CHECK(comm_all_gather(z->cm, COMM_GROUP_DP, zero_pel(z, z->gather.shard, b->arena),
                                  z->scratch, b->shard, z->pdt));
        params_to_host(z, host + b->begin, z->scratch, b->numel);
    }
    return TRI_OK;
}

tri_status zero_entry_params(zero_state *z, int entry, size_t lo, size_t n, float *host) {
    const param_entry *e = &z->pt->entries[entry];
    TRI_ASSERT(lo + n <= (size_t)e->local_numel);
    if (z->lay.stage < 3) {
        params_to_host(z, host, zero_pel(z, z->params, e->offset + lo), n);
        return TRI_OK;
    }
    const int k = z->lay.bucket_of_entry[entry];
    const zero_bucket *b = &z->lay.buckets[k];
    if (z->scratch_bucket != k) {
        TRI_CHECK(zero_wait_gathers(z));
        TRI_CHECK(comm_all_gather(z->cm, COMM_GROUP_DP, zero_pel(z, z->gather.shard, b->arena),
                                  z->scratch, b->shard, z->pdt));
        z->scratch_bucket = k;
    }
    params_to_host(z, host, zero_pel(z, z->scratch, e->offset - b->begin + lo), n);
    return TRI_OK;
}
