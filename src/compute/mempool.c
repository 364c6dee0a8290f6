// mempool.c: see mempool.h.
#include "compute/mempool.h"

#include <string.h>

tri_status mem_pool_create(mem_pool *p, backend *be, const uint64_t size[MEM_KIND_COUNT]) {
    memset(p, 0, sizeof *p);
    p->be = be;
    for (int k = 0; k < MEM_KIND_COUNT; k++) {
        p->size[k] = (size_t)size[k];
        if (!size[k]) continue;
        p->base[k] = be->alloc(be, p->size[k]);
        if (!p->base[k]) {
            LOG_ERROR("out of %s memory: %s needs %zu bytes (%.3g GB)", be->name,
                      mem_kind_name((mem_kind)k), p->size[k], (double)p->size[k] / 1e9);
            LOG_HINT("`trident plan CONFIG --world N` shows each kind; lower train.micro_batch, "
                     "raise parallel.zero, or use parallel.recompute: full");
            tri_abort_job(TRI_ERR_INTERNAL); // every rank: see mempool.h
        }
    }
    return TRI_OK;
}

void mem_pool_free(mem_pool *p) {
    for (int k = 0; k < MEM_KIND_COUNT; k++)
        if (p->base[k]) p->be->free(p->be, p->base[k]);
    memset(p, 0, sizeof *p);
}

void *mem_take(mem_pool *p, backend *be, mem_kind kind, size_t bytes) {
    if (!p) return be->alloc(be, bytes ? bytes : 1);
    const size_t n = mem_round(bytes);
    if (p->used[kind] + n > p->size[kind]) {
        LOG_ERROR("memory: %s needs %zu bytes more than the %zu the planner gave it; please "
                  "report this as a bug",
                  mem_kind_name(kind), p->used[kind] + n - p->size[kind], p->size[kind]);
        return NULL;
    }
    void *ptr = p->base[kind] + p->used[kind];
    p->used[kind] += n;
    return ptr;
}

void mem_give(mem_pool *p, backend *be, void *ptr) {
    if (!p && ptr) be->free(be, ptr);
}

const char *mem_kind_name(mem_kind k) {
    static const char *names[MEM_KIND_COUNT] = {
        "param_bytes",      "grad_bytes",        "master_bytes",       "adam_bytes",
        "activation_bytes", "grad_bucket_bytes", "param_gather_bytes", "scratch_bytes"};
    return (unsigned)k < MEM_KIND_COUNT ? names[k] : "?";
}

void mem_specs_add(mem_specs *s, const char *name, mem_kind kind, size_t bytes, void *dst) {
    s->items = xgrow(s->items, s->n, &s->cap, sizeof *s->items);
    s->items[s->n++] = (mem_spec){name, kind, bytes, dst};
}

void mem_specs_totals(const mem_specs *s, uint64_t total[MEM_KIND_COUNT]) {
    memset(total, 0, MEM_KIND_COUNT * sizeof(uint64_t));
    for (int i = 0; i < s->n; i++)
        total[s->items[i].kind] = sat_add_u64(total[s->items[i].kind],
                                              mem_round(s->items[i].bytes));
}

void mem_specs_free(mem_specs *s) {
    free(s->items);
    memset(s, 0, sizeof *s);
}

tri_status mem_specs_carve(const mem_specs *s, mem_pool *p, backend *be) {
    for (int i = 0; i < s->n; i++) {
        const mem_spec *sp = &s->items[i];
        if (!sp->dst) continue;
        void *ptr = mem_take(p, be, sp->kind, sp->bytes);
        if (!ptr) {
            LOG_ERROR("out of %s memory for %s (%zu bytes, %s)", be->name, sp->name, sp->bytes,
                      mem_kind_name(sp->kind));
            LOG_HINT("`trident plan CONFIG --world N` shows each kind; lower train.micro_batch, "
                     "raise parallel.zero, or use parallel.recompute: full");
            tri_abort_job(TRI_ERR_INTERNAL); // every rank: see mempool.h
        }
        *(void **)sp->dst = ptr;
    }
    return TRI_OK;
}

void mem_specs_give(const mem_specs *s, mem_pool *p, backend *be) {
    for (int i = 0; i < s->n; i++) {
        void **dst = s->items[i].dst;
        if (!dst || !*dst) continue;
        mem_give(p, be, *dst);
        *dst = NULL;
    }
}

void mem_specs_release(mem_specs *s, mem_pool *p, backend *be) {
    mem_specs_give(s, p, be);
    mem_specs_free(s);
}
