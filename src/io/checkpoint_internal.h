// checkpoint_internal.h: what the checkpoint writer (checkpoint.c) and reader
// (checkpoint_read.c) share: the kinds of stored state, regions as rectangles of global
// tensors, the spans of a rank's state in device memory, paths and the agreement of ranks.
#pragma once
#include <stdarg.h>
#include <stdio.h>

#include "io/checkpoint.h"

#define CKPT_FORMAT "trident-checkpoint"
#define PATH_BYTES 4352 // every path buffer here; checkpoint.dir is limited to 4000 bytes
#define CKPT_VERSION 1

typedef enum { KIND_PARAM = 0, KIND_MASTER, KIND_ADAM_M, KIND_ADAM_V, KIND_COUNT } ckpt_kind;
extern const char *const ckpt_kind_names[KIND_COUNT]; // "param", "master", "adam_m", "adam_v"

// A rectangle of a global (rows, cols) tensor.
typedef struct {
    int64_t row, col, rows, cols;
} rect;

// Calls fn for the rectangles that local elements [a, b) of entry e (row-major, relative
// to the entry) cover, in order. Each rectangle's elements are contiguous in local order:
// either one partial row, or whole local rows that map to consecutive global rows at the
// same columns. `at` is the rectangle's first element, relative to a.
typedef void (*rect_fn)(void *ctx, rect r, size_t at);
void ckpt_entry_rects(const param_table *pt, const param_entry *e, size_t a, size_t b, rect_fn fn,
                      void *ctx);

// What this rank stores or needs: a span of (entry, kind) in device memory.
typedef struct {
    int entry;
    size_t lo, hi; // flat local offsets in the table layout
    ckpt_kind kind;
    void *dev;   // device address of element lo
    size_t elem; // its bytes: 4 (fp32), or 2 for bf16 parameters
} span;

// Where elements [lo, hi) of a piece live for `kind`, and their size.
span ckpt_piece_span(const ckpt_state *s, const zero_piece *pc, ckpt_kind kind, size_t lo,
                     size_t hi);

// Every rank's status, agreed: the worst (largest) code over the world.
tri_status ckpt_agree(comm *cm, tri_status rc);

// snprintf into a PATH_BYTES buffer (paths are bounded by the checkpoint.dir limit).
__attribute__((format(printf, 2, 3))) static inline void pathf(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, PATH_BYTES, fmt, ap);
    va_end(ap);
}

static inline void path_join(char *out, const char *dir, const char *name) {
    pathf(out, "%s/%s", dir, name);
}
