// commtest_internal.h: what the files of `trident comm-test` share, and nothing else
// includes: the ops it checks, its state and the formulas of its inputs.
//   src/commtest.c        options, the table of every collective on every group and size,
//                         the in-place, reproducibility and bf16 checks, the verdict
//   src/commtest_async.c  the non-blocking forms (start/wait) against the blocking ones
#pragma once
#include "comm/comm.h"
#include "comm/mesh.h"

typedef enum {
    CT_ALL_REDUCE_SUM = 0,
    CT_ALL_REDUCE_MAX,
    CT_REDUCE_SCATTER,
    CT_ALL_GATHER,
    CT_BROADCAST_FIRST, // root 0
    CT_BROADCAST_LAST,  // root n-1
    CT_SENDRECV,        // ring: send to (r+1)%n, receive from (r-1+n)%n, both in flight
    CT_COUNT
} ct_op;

extern const char *const CT_OP_NAMES[CT_COUNT];

typedef struct {
    comm *c;
    int rank, world;
    mesh_coord me;
    int *members[COMM_GROUP_COUNT]; // world ranks of this rank's group, ascending
    int n_members[COMM_GROUP_COUNT];
    int my_index[COMM_GROUP_COUNT];  // this rank's place in members = its group rank
    int max_size[COMM_GROUP_COUNT];  // the group's size on its largest instance
    int iters, stall_rank, stall_step;
    int next_step;
    long long bad_counters;          // payload counter mismatches on this rank
} ct_state;

// The input element i of global rank r: a small integer, so every sum is exact in float.
static inline float ct_value(int r, size_t i) {
    return (float)((int)(((size_t)r * 37u + i * 11u) % 23u) - 11);
}

// Non-integer inputs: sums of them depend on the order of the additions, so two reductions
// that differ in it differ in their bits.
static inline float ct_fraction(int r, size_t i) {
    return ct_value(r, i) * 0.1f + 1e-3f * (float)r + 1e-7f * (float)i;
}

// The non-blocking forms against the blocking ones on every group this rank is in, at
// `elems` elements per buffer (commtest_async.c). Adds the elements that differ (and one per
// broken request rule) to *wrong, and counter mismatches to s->bad_counters.
tri_status ct_async(ct_state *s, size_t elems, long long *wrong);
