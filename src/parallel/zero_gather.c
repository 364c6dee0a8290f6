// zero_gather.c: ZeRO-3's parameters (zero.h): before every pass of a chunk (the store's
// pass_begin) its buckets are all-gathered over dp into a workspace that the model's
// parameter table then points into; with parallel.overlap the next pass's gathers start
// into a second workspace while this one computes, and each bucket is waited for only when
// an op reads it (the store's params_ready).
#include "parallel/zero_internal.h"

#include <string.h>

#include "comm/flight.h"

void zero_gather_init(zero_state *z) {
    zero_gathers *g = &z->gather;
    const zero_layout *zl = &z->lay;
    g->keep = z->cfg.gather == ZERO3_GATHER_STEP;
    g->pf_chunk = g->next_chunk = -1;
    g->chunk_buckets = xcalloc((size_t)zl->chunks, sizeof(int *));
    g->gathered = xcalloc((size_t)zl->chunks, sizeof(int));
    g->ws_offset = xcalloc((size_t)zl->n_buckets + 1, sizeof(size_t));
    g->req = xcalloc(2 * (size_t)zl->n_buckets + 1, sizeof(comm_request));
    // "pass": the chunks share one workspace (zero_buffers sized it for the largest chunk);
    // "step": each chunk keeps its own region until the update.
    size_t total = 0;
    // A bucket that two chunks read (also_chunk) is gathered for each, at the start of the
    // workspace for both: the embedding bucket is its chunk 0's first (table order) and goes
    // first in the other chunk's list, so its one ws_offset serves both.
    for (int c = 0; c < zl->chunks; c++) {
        g->chunk_buckets[c] = xmalloc((size_t)(zl->n_buckets + 1) * sizeof(int));
        int n = 0;
        size_t used = g->keep ? total : 0;
        for (int pass = 0; pass < 2; pass++)
            for (int k = 0; k < zl->n_buckets; k++) {
                const int shared = zl->buckets[k].chunk != c;
                if (!zero_bucket_gathered_for(zl, k, c, g->keep) || shared != (pass == 0)) continue;
                TRI_ASSERT(!shared || (used == 0 && g->ws_offset[k] == 0));
                g->chunk_buckets[c][n++] = k;
                g->ws_offset[k] = used;
                used += zl->buckets[k].padded;
            }
        g->chunk_buckets[c][n] = -1;
        total = used;
    }
}

void zero_gather_free(zero_state *z) {
    zero_gathers *g = &z->gather;
    for (int c = 0; g->chunk_buckets && c < z->lay.chunks; c++) free(g->chunk_buckets[c]);
    free(g->chunk_buckets);
    free(g->gathered);
    free(g->ws_offset);
    free(g->req);
}

// Gather workspace w (ws, or ws2), and bucket k's gather into it.
static void *gather_ws(const zero_state *z, int w) { return w ? z->gather.ws2 : z->gather.ws; }
static comm_request *gather_req(zero_state *z, int w, int k) {
    return &z->gather.req[(size_t)w * (size_t)z->lay.n_buckets + (size_t)k];
}

// Completes the gathers in flight into workspace w (before it is gathered into again).
static tri_status wait_ws(zero_state *z, int w) {
    for (int k = 0; z->gather.req && k < z->lay.n_buckets; k++)
        TRI_CHECK(comm_wait(z->cm, gather_req(z, w, k)));
    return TRI_OK;
}

tri_status zero_wait_gathers(zero_state *z) {
    TRI_CHECK(wait_ws(z, 0));
    return z->gather.ws2 ? wait_ws(z, 1) : TRI_OK;
}

// Starts the gathers of the chunk's buckets into workspace w, in the order the pass reads
// them (backward: last first); without overlap each completes before the next starts.
static tri_status start_gathers(zero_state *z, int chunk, int backward, int w) {
    TRI_CHECK(wait_ws(z, w)); // what a pass before did not read, or a prefetch not used
    const int *list = z->gather.chunk_buckets[chunk];
    int n = 0;
    while (list[n] >= 0) n++;
    for (int i = 0; i < n; i++) {
        const int k = list[backward ? n - 1 - i : i];
        const zero_bucket *b = &z->lay.buckets[k];
        comm_request *req = gather_req(z, w, k);
        flight_set_bucket(k); // the flight recorder names the bucket a gather moves
        const tri_status rc = comm_all_gather_start(
            z->cm, COMM_GROUP_DP, zero_pel(z, z->gather.shard, b->arena),
            zero_pel(z, gather_ws(z, w), z->gather.ws_offset[k]), b->shard, z->pdt, req);
        flight_set_bucket(-1);
        TRI_CHECK(rc);
        if (!z->overlap) TRI_CHECK(comm_wait(z->cm, req));
        else if (req->impl) z->overlapped_gathers++;
    }
    return TRI_OK;
}

tri_status zero_pass_begin(void *ctx, int chunk, model_pass pass) {
    zero_state *z = ctx;
    zero_gathers *g = &z->gather;
    // W reads no parameter (model.h): no gather, and a prefetch started for the pass after it
    // stays in flight. B gathers as a backward does.
    if (pass == MODEL_PASS_W) return TRI_OK;
    const int backward = pass != MODEL_PASS_FORWARD;
    if (g->gathered[chunk]) return TRI_OK; // "step": gathered since the last update
    g->gathered[chunk] = g->keep;
    // Passes alternate between the two workspaces (overlap, "pass"); this one may have been
    // started already, while the pass before it computed.
    const int w = g->ws2 ? 1 - g->cur : 0;
    if (g->ws2 && g->pf_chunk == chunk && g->pf_backward == backward) z->prefetched_passes++;
    else TRI_CHECK(start_gathers(z, chunk, backward, w));
    g->pf_chunk = -1;
    g->cur = w;
    for (const int *k = g->chunk_buckets[chunk]; *k >= 0; k++) {
        const zero_bucket *b = &z->lay.buckets[*k];
        void *dst = zero_pel(z, gather_ws(z, w), g->ws_offset[*k]);
        for (int e = b->first; e < b->first + b->count; e++)
            z->param_of[e] = zero_pel(z, dst, z->pt->entries[e].offset - b->begin);
    }
    // The next pass's gathers (the executor names it), into the other workspace, while this
    // one computes. Never past the step's last pass: the update changes the shards.
    if (g->ws2 && g->next_chunk >= 0) {
        TRI_CHECK(start_gathers(z, g->next_chunk, g->next_backward, 1 - w));
        g->pf_chunk = g->next_chunk, g->pf_backward = g->next_backward;
    }
    return TRI_OK;
}

tri_status zero_params_ready(void *ctx, int first, int count) {
    zero_state *z = ctx;
    (void)count; // a bucket holds whole entries: the first one names it
    if (!z->gather.req) return TRI_OK;
    return comm_wait(z->cm, gather_req(z, z->gather.cur, z->lay.bucket_of_entry[first]));
}
