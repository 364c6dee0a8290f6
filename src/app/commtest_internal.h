// commtest_internal.h: what the files of `trident comm-test` share, and nothing else
// includes: the ops it checks, its state and the formulas of its inputs.
//   src/app/commtest.c        options, the buffers and counters below, the table of every
//                             collective on every group and size, the barrier, in-place,
//                             reproducibility and bf16 checks, the verdict
//   src/app/commtest_async.c  the non-blocking forms (start/wait) against the blocking ones
#pragma once
#include "comm/comm.h"
#include "comm/mesh.h"
#include "compute/backend.h"

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
    backend *be; // the compute backend c was made for: the buffers c sees live in its memory
    int rank, world;
    mesh mesh;
    mesh_coord me;
    int *members[COMM_GROUP_COUNT]; // world ranks of this rank's group, ascending
    int n_members[COMM_GROUP_COUNT];
    int my_index[COMM_GROUP_COUNT]; // this rank's place in members = its group rank
    int max_size[COMM_GROUP_COUNT]; // the group's size on its largest instance
    int iters, stall_rank, stall_step;
    int next_step;
    long long bad_counters; // payload counter mismatches on this rank
} ct_state;

// Whether a group of `members` ranks is checked as a group (every collective, timed, with the
// in-place, reproducibility and bf16 checks): more than one member, or one whose calls reach
// the comm backend (TRIDENT_TEST_NCCL_ONE_RANK: NCCL's one-rank communicators on one GPU).
// The layer answers other groups of one itself: those are the untimed identity checks.
static inline int ct_collective(const ct_state *s, int members) {
    return members > 1 || (members == 1 && s->c->one_rank_groups);
}

// The input element i of global rank r: a small integer, so every sum is exact in float.
static inline float ct_value(int r, size_t i) {
    return (float)((int)(((size_t)r * 37u + i * 11u) % 23u) - 11);
}

// Non-integer inputs: sums of them depend on the order of the additions, so two reductions
// that differ in it differ in their bits.
static inline float ct_fraction(int r, size_t i) {
    return ct_value(r, i) * 0.1f + 1e-3f * (float)r + 1e-7f * (float)i;
}

// A buffer of the comm under test: the test fills and checks `host`; the comm reads and
// writes `dev`, in the compute backend's memory (the same pointer on a host backend, where
// push and pull do nothing).
typedef struct {
    char *host, *dev;
    size_t bytes;
} ct_buf;

ct_buf ct_buf_new(const ct_state *s, size_t bytes);
void ct_buf_free(const ct_state *s, ct_buf *b);
void ct_buf_push(const ct_state *s, const ct_buf *b); // host -> dev
void ct_buf_pull(const ct_state *s, const ct_buf *b); // dev -> host

// The payload counters of every group: [group][0: bytes, 1: calls][comm_op_id].
typedef struct {
    uint64_t v[COMM_GROUP_COUNT][2][COMM_OP_COUNT];
} ct_counters;

void ct_counters_get(const comm *c, ct_counters *out);
// The counters must have moved from `before` by exactly `want`, on every group and
// collective; each one that did not is logged (naming `what`, the calls made) and counted
// in s->bad_counters.
void ct_counters_expect(ct_state *s, const ct_counters *before, const ct_counters *want,
                        const char *what);

// The non-blocking forms against the blocking ones on every group this rank is in, at
// `elems` elements per buffer (commtest_async.c). Adds the elements that differ (and one per
// broken request rule) to *wrong, and counter mismatches to s->bad_counters.
tri_status ct_async(ct_state *s, size_t elems, long long *wrong);
