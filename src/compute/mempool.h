// mempool.h: a rank's device memory, one arena per kind (plan.h's plan_mem_kind), sized by
// the planner before the model and optimizer exist; they carve every buffer out of them.
// What a run uses is therefore what `trident plan` computed, by construction: a carve past
// its arena is an error naming the kind. Buffers are carved in granules of MEM_GRANULE
// bytes (aligned for any vector load), which the planner counts too.
#pragma once
#include "compute/backend.h"
#include "plan/plan.h"

#define MEM_GRANULE 64

typedef struct {
    backend *be;
    char *base[PLAN_MEM_COUNT];
    size_t size[PLAN_MEM_COUNT], used[PLAN_MEM_COUNT];
} mem_pool;

// bytes rounded up to whole granules.
static inline size_t mem_round(size_t bytes) {
    return (bytes + MEM_GRANULE - 1) / MEM_GRANULE * MEM_GRANULE;
}

// One zero-filled arena per kind of `size` bytes (kinds of size 0 get none).
tri_status mem_pool_create(mem_pool *p, backend *be, const uint64_t size[PLAN_MEM_COUNT]);
void mem_pool_free(mem_pool *p);

// `bytes` (zero-filled) of kind `kind`: carved from the pool's arena, or, with no pool
// (sampling, tools), allocated from the backend. NULL when the arena is exhausted (logged)
// or the backend is out of memory.
void *mem_take(mem_pool *p, backend *be, plan_mem_kind kind, size_t bytes);
// Gives back what mem_take returned: a no-op for a pool (its arenas go all at once).
void mem_give(mem_pool *p, backend *be, void *ptr);
