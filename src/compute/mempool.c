// mempool.c: see mempool.h.
#include "compute/mempool.h"

#include <string.h>

tri_status mem_pool_create(mem_pool *p, backend *be, const uint64_t size[PLAN_MEM_COUNT]) {
    memset(p, 0, sizeof *p);
    p->be = be;
    for (int k = 0; k < PLAN_MEM_COUNT; k++) {
        p->size[k] = (size_t)size[k];
        if (!size[k]) continue;
        p->base[k] = be->alloc(be, p->size[k]);
        if (!p->base[k]) {
            LOG_ERROR("out of %s memory: %s needs %zu bytes", be->name, plan_mem_name(k), p->size[k]);
            LOG_HINT("`trident plan CONFIG --world N` shows each kind; lower train.micro_batch, "
                     "raise parallel.zero, or use parallel.recompute: full");
            mem_pool_free(p);
            return TRI_ERR_INTERNAL;
        }
    }
    return TRI_OK;
}

void mem_pool_free(mem_pool *p) {
    for (int k = 0; k < PLAN_MEM_COUNT; k++)
        if (p->base[k]) p->be->free(p->be, p->base[k]);
    memset(p, 0, sizeof *p);
}

void *mem_take(mem_pool *p, backend *be, plan_mem_kind kind, size_t bytes) {
    if (!p) return be->alloc(be, bytes ? bytes : 1);
    const size_t n = mem_round(bytes);
    if (p->used[kind] + n > p->size[kind]) {
        LOG_ERROR("memory: %s needs %zu bytes more than the %zu the planner gave it; please "
                  "report this as a bug", plan_mem_name(kind), p->used[kind] + n - p->size[kind],
                  p->size[kind]);
        return NULL;
    }
    void *ptr = p->base[kind] + p->used[kind];
    p->used[kind] += n;
    return ptr;
}

void mem_give(mem_pool *p, backend *be, void *ptr) {
    if (!p && ptr) be->free(be, ptr);
}
