// mempool.h: a rank's device memory, one arena per kind, and the buffer specs that size them.
//
// The model, the ZeRO layer and the optimizer describe their buffers as data: a list of
// specs (name, kind, bytes) that a pure function of the layout builds (model_buffers,
// zero_buffers, optim_buffers). Creating a module carves each spec out of the arena of its
// kind; the planner sums the same specs. What a run uses is therefore what `trident plan`
// computes, by construction: a carve past its arena is an error naming the kind. Buffers are
// carved in granules of MEM_GRANULE bytes (aligned for any vector load), which the sums
// count too.
#pragma once
#include "compute/backend.h"

#define MEM_GRANULE 64

// The kinds of a rank's memory; the first MEM_RECORDED are the run record's "memory" fields.
typedef enum {
    MEM_PARAM = 0,    // parameters (ZeRO-3: this rank's shards)
    MEM_GRAD,         // gradient buffer, or ZeRO-2/3's gradient shards
    MEM_MASTER,       // fp32 master weights (bf16 training; fp32: the parameters are)
    MEM_ADAM,         // Adam m and v
    MEM_ACTIVATION,   // activation slots of the micro-batches in flight (+ recompute's layer)
    MEM_GRAD_BUCKET,  // ZeRO-2/3 gradient bucket workspaces and scratch
    MEM_PARAM_GATHER, // ZeRO-3 gathered-parameter workspace
    MEM_SCRATCH,      // the model's backward scratch (not in the run record)
    MEM_KIND_COUNT
} mem_kind;
#define MEM_RECORDED MEM_SCRATCH // kinds [0, this) are the run record's fields

// "param_bytes", "grad_bytes", ... (the run record's and the planner's names)
const char *mem_kind_name(mem_kind k);

// bytes rounded up to whole granules; SIZE_MAX stays SIZE_MAX (a saturated size,
// base/checked.h).
static inline size_t mem_round(size_t bytes) {
    if (bytes > SIZE_MAX - (MEM_GRANULE - 1)) return SIZE_MAX;
    return (bytes + MEM_GRANULE - 1) / MEM_GRANULE * MEM_GRANULE;
}

// ---- buffer specs ----

// One buffer: what it is, where it lives, how big. `dst` is where mem_specs_carve stores the
// buffer's address (a `float **`, `uint16_t **`, ... passed as void *); NULL when the list
// only sizes (the planner).
typedef struct {
    const char *name; // "activation.residual", "zero.layer_ws", ... (static strings)
    mem_kind kind;
    size_t bytes;
    void *dst;
} mem_spec;

typedef struct {
    mem_spec *items;
    int n, cap;
} mem_specs;

void mem_specs_add(mem_specs *s, const char *name, mem_kind kind, size_t bytes, void *dst);
// Bytes per kind as the arenas hold them: every spec rounded to whole granules (a saturating
// sum: UINT64_MAX means "more than 64 bits hold").
void mem_specs_totals(const mem_specs *s, uint64_t total[MEM_KIND_COUNT]);
void mem_specs_free(mem_specs *s);

// ---- the arenas ----

typedef struct {
    backend *be;
    char *base[MEM_KIND_COUNT];
    size_t size[MEM_KIND_COUNT], used[MEM_KIND_COUNT];
} mem_pool;

// One zero-filled arena per kind of `size` bytes (kinds of size 0 get none).
//
// Out of memory is fatal, as for host memory (base/common.h): the message names the memory
// kind and the bytes (or the buffer), then tri_abort_job ends the process with exit 1, and in
// a job of several processes every one of them, so that no rank waits on one that cannot
// go on. mem_pool_create and mem_specs_carve therefore return TRI_OK or do not return.
tri_status mem_pool_create(mem_pool *p, backend *be, const uint64_t size[MEM_KIND_COUNT]);
void mem_pool_free(mem_pool *p);

// `bytes` (zero-filled) of kind `kind`: carved from the pool's arena, or, with no pool
// (sampling, tools), allocated from the backend. NULL when the arena is exhausted (logged)
// or the backend is out of memory.
void *mem_take(mem_pool *p, backend *be, mem_kind kind, size_t bytes);
// Gives back what mem_take returned: a no-op for a pool (its arenas go all at once).
void mem_give(mem_pool *p, backend *be, void *ptr);

// Every spec of `s` that has a dst, in order: *dst = mem_take(...); one that cannot be had
// (an arena too small for it: a planner bug; the backend out of memory) ends the job as
// mem_pool_create does, the buffer named. mem_specs_give returns them (no pool: to the
// backend) and clears each *dst.
tri_status mem_specs_carve(const mem_specs *s, mem_pool *p, backend *be);
void mem_specs_give(const mem_specs *s, mem_pool *p, backend *be);
// mem_specs_give, then mem_specs_free: what a module's free does with its buffers.
void mem_specs_release(mem_specs *s, mem_pool *p, backend *be);
