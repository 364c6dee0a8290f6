// zero_layout.c: what a rank owns under a ZeRO stage (pieces and buckets, zero.h) and the
// specs of the ZeRO layer's buffers: pure functions of the config and the parameter table,
// shared by zero_create and the planner.
#include "parallel/zero_internal.h"

#include <string.h>

// The chunk (virtual stage c * pp + r) that holds `layer` on this table's pipeline rank.
static int layer_chunk(const param_table *pt, int layer) {
    return layer / params_chunk_layers(pt) / pt->pp;
}

int zero_bucket_span(const param_table *pt, int i, double bucket_bytes, int *layers) {
    const param_entry *e = &pt->entries[i];
    *layers = 0;
    if (e->layer < 0) return i == pt->lnfw && pt->lnfb >= 0 ? 2 : 1; // llama: no lnfb
    int n = 0;
    double bytes = 0;
    while (i + n < pt->n_entries && pt->entries[i + n].layer >= 0 &&
           layer_chunk(pt, pt->entries[i + n].layer) == layer_chunk(pt, e->layer)) {
        double layer_bytes = 0;
        for (int k = 0; k < pt->layer_entries; k++)
            layer_bytes += 4.0 * (double)pt->entries[i + n + k].local_numel;
        if (*layers > 0 && bytes + layer_bytes > bucket_bytes) break;
        bytes += layer_bytes;
        n += pt->layer_entries;
        (*layers)++;
    }
    return n;
}

static void add_piece(zero_layout *zl, int entry, size_t lo, size_t hi, size_t pos) {
    zl->pieces[zl->n_pieces++] = (zero_piece){entry, lo, hi, pos};
}

// The part of each of entries [first, end) inside the flat range [begin, begin + len),
// stored from `arena` on.
static void pieces_of_range(zero_layout *zl, const param_table *pt, int first, int end,
                            size_t begin, size_t len, size_t arena) {
    for (int i = first; i < end; i++) {
        const param_entry *e = &pt->entries[i];
        size_t lo = e->offset > begin ? e->offset : begin;
        size_t stop = e->offset + (size_t)e->local_numel;
        size_t hi = stop < begin + len ? stop : begin + len;
        if (lo < hi) add_piece(zl, i, lo, hi, arena + (lo - begin));
    }
}

// Buckets: consecutive layers of one chunk, merged while they fit in parallel.bucket_mb
// (at least one layer each); the final LayerNorm's two entries (llama: its RMSNorm's one);
// wte, wpe, the tied copy of wte and the untied lm_head each alone (so that the two copies of wte shard alike on both stages). A bucket
// never spans chunks, so one backward call finishes it. Stages 2 and 3 own one shard of
// each bucket (their pieces); the shards lie one after the other in the shard arrays.
static void define_buckets(zero_layout *zl, const param_table *pt, double bucket_mb) {
    const size_t dp = (size_t)zl->dp;
    zl->buckets = xcalloc_for((size_t)pt->n_entries, sizeof(zero_bucket), "the ZeRO layout");
    zl->bucket_of_entry = xcalloc((size_t)pt->n_entries, sizeof(int));
    size_t arena = 0;
    for (int i = 0; i < pt->n_entries;) {
        zero_bucket *b = &zl->buckets[zl->n_buckets];
        b->first = i, b->count = zero_bucket_span(pt, i, bucket_mb * 1048576.0, &b->layers);
        const param_entry *e = &pt->entries[i];
        b->chunk = e->layer >= 0                   ? layer_chunk(pt, e->layer)
                   : e->layer == PARAM_LAYER_EMBED ? 0
                                                   : zl->chunks - 1;
        b->also_chunk = -1;
        b->begin = e->offset;
        for (int k = i; k < i + b->count; k++) {
            b->numel += (size_t)pt->entries[k].local_numel;
            zl->bucket_of_entry[k] = zl->n_buckets;
        }
        b->padded = (b->numel + dp - 1) / dp * dp;
        b->shard = b->padded / dp;
        b->arena = arena;
        arena += b->shard;
        size_t own = b->begin + (size_t)zl->dp_rank * b->shard; // this rank's part of it
        if (zl->stage >= 2) pieces_of_range(zl, pt, i, i + b->count, own, b->shard, b->arena);
        i += b->count;
        zl->n_buckets++;
    }
    if (zl->stage >= 2) zl->arena_len = arena;
    // The LM head reads this rank's own wte (no tied copy) from another chunk: zbv's V puts the
    // embedding and the loss both on rank 0.
    if (pt->tied && pt->wte >= 0 && !pt->wte_is_copy && pt->lnfw >= 0 && zl->chunks > 1)
        zl->buckets[zl->bucket_of_entry[pt->wte]].also_chunk = zl->chunks - 1;
}

void zero_layout_build(zero_layout *zl, const zero_config *zc, const param_table *pt) {
    memset(zl, 0, sizeof *zl);
    const int dp = zc->dp;
    zl->stage = dp > 1 ? zc->stage : 0;
    zl->dp = dp, zl->dp_rank = zc->dp_rank;
    zl->chunks = pt->pp == 1 ? 1 : pt->virtual_stages;
    // The flat buffer: a multiple of dp (stage 1's equal shards); stage 2 adds dp elements: a
    // bucket's last shard may reach up to dp - 1 elements past the bucket, and so past the
    // last bucket.
    zl->capacity = pt->local_numel;
    if (zl->stage > 0)
        zl->capacity = (pt->local_numel + (size_t)dp - 1) / (size_t)dp * (size_t)dp +
                       (zl->stage >= 2 ? (size_t)dp : 0);
    zl->pieces = xcalloc_for((size_t)pt->n_entries, sizeof(zero_piece), // at most one per entry
                             "the ZeRO layout");
    if (zl->stage == 0) {
        for (int i = 0; i < pt->n_entries; i++) {
            const param_entry *e = &pt->entries[i];
            add_piece(zl, i, e->offset, e->offset + (size_t)e->local_numel, e->offset);
        }
        zl->arena_len = zl->capacity;
        if (dp > 1) define_buckets(zl, pt, zc->bucket_mb); // all-reduced bucket by bucket
    } else if (zl->stage == 1) {
        zl->shard_len = zl->capacity / (size_t)dp;
        zl->shard_begin = (size_t)zc->dp_rank * zl->shard_len;
        pieces_of_range(zl, pt, 0, pt->n_entries, zl->shard_begin, zl->shard_len, 0);
        zl->arena_len = zl->shard_len;
    } else {
        define_buckets(zl, pt, zc->bucket_mb);
    }
}

void zero_layout_free(zero_layout *zl) {
    free(zl->pieces);
    free(zl->buckets);
    free(zl->bucket_of_entry);
    memset(zl, 0, sizeof *zl);
}

// ---- buffers ----

#define DST(field) (z ? (void *)&(z->field) : NULL)

void zero_buffers(mem_specs *s, const zero_config *zc, const zero_layout *zl, const param_table *pt,
                  zero_state *z) {
    const size_t pelem = dtype_size(zc->param_dtype), gelem = dtype_size(zc->grad_dtype);
    const size_t relem = dtype_size(zc->reduce_dtype);
    const int overlap = zc->overlap && zl->dp > 1;
    if (zl->stage < 3)
        mem_specs_add(s, "zero.params", MEM_PARAM, zl->capacity * pelem, DST(params));
    if (zl->stage < 2) mem_specs_add(s, "zero.grads", MEM_GRAD, zl->capacity * gelem, DST(grads));
    if (zl->stage >= 2) {
        size_t layer_ws = 0, scratch = 0;
        for (int k = 0; k < zl->n_buckets; k++) {
            const zero_bucket *b = &zl->buckets[k];
            if (b->layers) layer_ws = b->padded > layer_ws ? b->padded : layer_ws;
            scratch = b->padded > scratch ? b->padded : scratch;
        }
        if (layer_ws) {
            mem_specs_add(s, "zero.layer_ws", MEM_GRAD_BUCKET, layer_ws * gelem, DST(layer_ws));
            if (overlap) // the second layer workspace, filled while the first is reduced
                mem_specs_add(s, "zero.layer_ws2", MEM_GRAD_BUCKET, layer_ws * gelem,
                              DST(layer_ws2));
        }
        for (int k = 0; k < zl->n_buckets; k++)
            if (!zl->buckets[k].layers)
                mem_specs_add(s, "zero.bucket_ws", MEM_GRAD_BUCKET, zl->buckets[k].padded * gelem,
                              z ? (void *)&z->bucket_ws[k] : NULL);
        mem_specs_add(s, "zero.grad_shard", MEM_GRAD, (zl->arena_len ? zl->arena_len : 1) * gelem,
                      DST(grad_shard));
        // Gradient shards, and (stage 2) the parameter all-gathers: the wider of the two.
        mem_specs_add(s, "zero.scratch", MEM_GRAD_BUCKET, scratch * (gelem > pelem ? gelem : pelem),
                      DST(scratch));
    }
    const int mixed = zc->reduce_dtype != zc->grad_dtype && zl->dp > 1;
    if (mixed) { // the reduction's own buffer, in reduce_dtype
        size_t n = zl->stage == 1 ? zl->capacity : 1;
        for (int k = 0; zl->stage != 1 && k < zl->n_buckets; k++)
            n = zl->buckets[k].padded > n ? zl->buckets[k].padded : n;
        if (z) z->rtmp_len = n;
        mem_specs_add(s, "zero.reduce_tmp", MEM_GRAD_BUCKET, n * relem, DST(rtmp));
    }
    if (zc->grad_dtype == DTYPE_BF16 || mixed) { // a piece or bucket shard widened to fp32: the
        size_t widest = 1;                       // widest entry (stages 0-1) or bucket shard
        for (int i = 0; zl->stage < 2 && i < pt->n_entries; i++)
            widest = (size_t)pt->entries[i].local_numel > widest
                         ? (size_t)pt->entries[i].local_numel
                         : widest;
        for (int k = 0; zl->stage >= 2 && k < zl->n_buckets; k++)
            widest = zl->buckets[k].shard > widest ? zl->buckets[k].shard : widest;
        mem_specs_add(s, "zero.widen_tmp", MEM_GRAD_BUCKET, widest * sizeof(float), DST(gtmp));
    }
    if (zl->stage == 3) { // the largest chunk's buckets ("pass"), or every chunk's ("step")
        size_t most = 0, all = 0;
        const int step = zc->gather == ZERO3_GATHER_STEP;
        for (int c = 0; c < zl->chunks; c++) {
            size_t n = 0; // "pass" gathers a bucket another chunk reads for that one too
            for (int k = 0; k < zl->n_buckets; k++)
                if (zero_bucket_gathered_for(zl, k, c, step)) n += zl->buckets[k].padded;
            most = n > most ? n : most;
            all += n;
        }
        const size_t ws = step ? all : most;
        mem_specs_add(s, "zero.gather_ws", MEM_PARAM_GATHER, (ws ? ws : 1) * pelem, DST(gather.ws));
        if (overlap && !step) // the next pass's gathers go to a second one
            mem_specs_add(s, "zero.gather_ws2", MEM_PARAM_GATHER, (ws ? ws : 1) * pelem,
                          DST(gather.ws2));
        mem_specs_add(s, "zero.param_shard", MEM_PARAM, (zl->arena_len ? zl->arena_len : 1) * pelem,
                      DST(gather.shard));
    }
}
#undef DST
