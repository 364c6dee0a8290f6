// commtest.c: `trident comm-test`, the comm backend's self-test (nccl-tests style).
//
// For every group of the mesh, every collective and every size: fill the inputs with a
// formula of (global rank, index) whose values are small integers, so that sums are exact
// in float and the expected result is known exactly; run the collective once and count the
// wrong elements; then time `iters` more runs. Each row's wrong count is all-reduced over
// the world and rank 0 prints one line per row: size, count, op, group, time, algorithm
// bandwidth (bytes / time) and bus bandwidth (algbw times 2(n-1)/n for all-reduce, (n-1)/n
// for reduce-scatter and all-gather, 1 for broadcast and send/recv), #wrong.
//
// Group membership is computed here from the rank formula of DESIGN.md, not taken from the
// backend, so a wrong split shows up as wrong elements. The payload counters of comm.h are
// checked after every row and every barrier, over every group and collective at once: the
// row's own counter moves by its documented payload (comm.h's table; nothing for a group of
// one, which the layer short-circuits) and no other moves at all. The non-blocking forms
// (*_start, group_end_start, wait) are checked against the blocking ones: bitwise the same
// results and the same counters, with many requests in flight at once on every group.
//
// The comm is made as the trainer makes it (comm_create_for) for the compute backend of
// --backend (auto: CUDA where a device is visible) and the kind of --comm: MPI on the CPU,
// NCCL on a GPU, the staged backend for --comm mpi on a GPU or TRIDENT_COMM_STAGED=1. The
// buffers the comm sees live in that backend's memory; the test fills and checks host
// copies of them (ct_buf).
#include "app/commtest.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "compute/backend.h"
#include "compute/backend_select.h"
#include "base/bf16.h"
#include "comm/comm.h"
#include "app/commtest_internal.h"
#include "config/config.h"
#include "comm/launch.h"
#include "comm/mesh.h"

const char *const CT_OP_NAMES[CT_COUNT] = {
    "all_reduce_sum", "all_reduce_max",  "reduce_scatter", "all_gather",
    "broadcast_r0",   "broadcast_rlast", "sendrecv_ring",
};

typedef struct {
    struct {
        int tp, pp, dp, set; // set: --world-shape given (else world x 1 x 1)
    } shape;
    struct {
        size_t min, max;
    } bytes;
    int iters;
    double timeout_s;
    int stall_rank, stall_step; // -1: none
    int backend;                // backend_kind
    int comm;                   // comm_kind
} ct_options;

static const float CT_POISON = -999.0f; // what a receive buffer holds before the call

// ---- options ----

// "4096", "64K", "1M", "1G" (powers of 1024).
static int ct_parse_bytes(const char *s, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return 1;
    if (*end == 'K' || *end == 'k') v <<= 10, end++;
    else if (*end == 'M' || *end == 'm') v <<= 20, end++;
    else if (*end == 'G' || *end == 'g') v <<= 30, end++;
    if (*end) return 1;
    *out = (size_t)v;
    return 0;
}

static int ct_parse_shape(const char *v, void *field, char *err, size_t cap) {
    int *shape = field; // tp, pp, dp, set
    char tail;
    if (sscanf(v, "%d,%d,%d%c", &shape[0], &shape[1], &shape[2], &tail) == 3 && shape[0] >= 1 &&
        shape[1] >= 1 && shape[2] >= 1) {
        shape[3] = 1;
        return 0;
    }
    snprintf(err, cap, "TP,PP,DP (three positive integers)");
    return 1;
}

static int ct_parse_byte_range(const char *v, void *field, char *err, size_t cap) {
    size_t *range = field; // min, max
    const char *colon = strchr(v, ':');
    char lo[64];
    size_t n = colon ? (size_t)(colon - v) : strlen(v);
    if (n >= sizeof lo) n = sizeof lo - 1;
    memcpy(lo, v, n);
    lo[n] = '\0';
    if (ct_parse_bytes(lo, &range[0]) || ct_parse_bytes(colon ? colon + 1 : lo, &range[1]) ||
        range[0] < 4 || range[1] < range[0] || range[1] > ((size_t)1 << 32)) {
        snprintf(err, cap, "MIN:MAX with 4 <= MIN <= MAX <= 4G");
        return 1;
    }
    return 0;
}

// Names in backend_kind and comm_kind order.
static const char *const CT_BACKENDS[] = {"auto", "cpu", "cuda", NULL};
static const char *const CT_COMMS[] = {"auto", "mpi", "nccl", NULL};

static const ct_options CT_DEFAULTS = {.bytes = {8, 1 << 20},
                                       .iters = 20,
                                       .timeout_s = 300,
                                       .stall_rank = -1,
                                       .stall_step = -1,
                                       .backend = BACKEND_AUTO,
                                       .comm = COMM_AUTO};
#define CO(field) offsetof(ct_options, field)
static const cli_option CT_OPTIONS[] = {
    {"--world-shape", "TP,PP,DP", CLI_CUSTOM, CO(shape), .parse = ct_parse_shape,
     .help = "the mesh; its product must be the world", .def = "WORLD,1,1"},
    {"--bytes", "MIN:MAX", CLI_CUSTOM, CO(bytes), .parse = ct_parse_byte_range,
     .help = "message sizes from MIN to MAX, doubling (suffixes K, M, G)", .def = "8:1M"},
    {"--iters", "N", CLI_INT, CO(iters), .lo = 1, .hi = 1000000, .help = "timed runs per size"},
    {"--timeout", "S", CLI_NUM, CO(timeout_s), .lo = 0, .lo_open = 1, .hi = INFINITY,
     .help = "comm timeout in seconds, as system.comm_timeout_s"},
    {"--stall-rank", "R", CLI_INT, CO(stall_rank), .lo = 0, .hi = 1 << 30,
     .help = "for the tests of the timeout: rank R stops at --stall-step", .def = "none"},
    {"--stall-step", "S", CLI_INT, CO(stall_step), .lo = 0, .hi = 1 << 30,
     .help = "the step at which --stall-rank stops", .def = "none"},
    {"--backend", NULL, CLI_CHOICE, CO(backend), .choices = CT_BACKENDS,
     .help = "the compute backend the buffers live in, as system.backend (auto: CUDA where a "
             "GPU is visible)"},
    {"--comm", NULL, CLI_CHOICE, CO(comm), .choices = CT_COMMS,
     .help = "the comm backend, as system.comm (auto: NCCL with CUDA, else MPI; mpi with CUDA: "
             "staged through host memory)"},
};
const cli_command COMMTEST_CLI = {
    .name = "comm-test",
    .summary = "every collective on every group of the mesh, checked and timed (nccl-tests "
               "style)",
    .options = CT_OPTIONS,
    .n_options = CLI_N(CT_OPTIONS),
    .defaults = &CT_DEFAULTS,
    .opts_size = sizeof(ct_options),
};

// ---- buffers and counters ----

ct_buf ct_buf_new(const ct_state *s, size_t bytes) {
    ct_buf b = {xcalloc(1, bytes ? bytes : 1), NULL, bytes};
    b.dev = b.host;
    if (!s->be->device_memory) return b;
    b.dev = s->be->alloc(s->be, bytes ? bytes : 1);
    if (!b.dev) { // as xmalloc: the test cannot go on without its buffers
        fprintf(stderr, "comm-test: out of %s memory allocating %zu bytes\n", s->be->name, bytes);
        abort();
    }
    return b;
}

void ct_buf_free(const ct_state *s, ct_buf *b) {
    if (b->dev != b->host) s->be->free(s->be, b->dev);
    free(b->host);
    *b = (ct_buf){NULL, NULL, 0};
}

void ct_buf_push(const ct_state *s, const ct_buf *b) {
    if (b->dev != b->host) s->be->copy_to_device(s->be, b->dev, b->host, b->bytes);
}

void ct_buf_pull(const ct_state *s, const ct_buf *b) {
    if (b->dev != b->host) s->be->copy_to_host(s->be, b->host, b->dev, b->bytes);
}

static const char *const CT_COUNTER_NAMES[COMM_OP_COUNT] = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv",
};

void ct_counters_get(const comm *c, ct_counters *out) {
    for (int g = 0; g < COMM_GROUP_COUNT; g++)
        for (int op = 0; op < COMM_OP_COUNT; op++) {
            out->v[g][0][op] = c->groups[g].bytes[op];
            out->v[g][1][op] = c->groups[g].calls[op];
        }
}

void ct_counters_expect(ct_state *s, const ct_counters *before, const ct_counters *want,
                        const char *what) {
    ct_counters now;
    ct_counters_get(s->c, &now);
    for (int h = 0; h < COMM_GROUP_COUNT; h++)
        for (int op = 0; op < COMM_OP_COUNT; op++) {
            const uint64_t db = now.v[h][0][op] - before->v[h][0][op];
            const uint64_t dc = now.v[h][1][op] - before->v[h][1][op];
            if (db == want->v[h][0][op] && dc == want->v[h][1][op]) continue;
            LOG_ERROR("comm-test: %s: the %s counters of group %s say %llu bytes in %llu "
                      "calls, expected %llu bytes in %llu calls",
                      what, CT_COUNTER_NAMES[op], comm_group_name((comm_group_id)h),
                      (unsigned long long)db, (unsigned long long)dc,
                      (unsigned long long)want->v[h][0][op], (unsigned long long)want->v[h][1][op]);
            s->bad_counters++;
        }
}

// ---- groups, from the rank formula ----

static int ct_same_group(const mesh *m, comm_group_id g, mesh_coord a, mesh_coord b) {
    const int last = m->pp - 1;
    switch (g) {
    case COMM_GROUP_TP: return a.dp == b.dp && a.pp == b.pp;
    case COMM_GROUP_DP: return a.tp == b.tp && a.pp == b.pp;
    case COMM_GROUP_PP: return a.tp == b.tp && a.dp == b.dp;
    case COMM_GROUP_EMBED:
        // First and last stage of one pipeline (one rank when pp == 1); a middle stage is
        // in no embedding group at all.
        if (a.pp != 0 && a.pp != last) return 0;
        return a.tp == b.tp && a.dp == b.dp && (b.pp == 0 || b.pp == last);
    case COMM_GROUP_MP: return a.dp == b.dp;
    case COMM_GROUP_WORLD: return 1;
    case COMM_GROUP_COUNT: break;
    }
    return 0;
}

static void ct_groups_init(ct_state *s) {
    const int TP = s->mesh.tp, DP = s->mesh.dp, PP = s->mesh.pp;
    mesh_coord me = {s->rank % TP, (s->rank / TP) % DP, s->rank / (TP * DP)};
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        s->members[g] = xcalloc((size_t)s->world, sizeof(int));
        s->my_index[g] = -1; // stays -1 where this rank is not a member (size 0)
        for (int r = 0; r < s->world; r++) {
            mesh_coord o = {r % TP, (r / TP) % DP, r / (TP * DP)};
            if (!ct_same_group(&s->mesh, (comm_group_id)g, me, o)) continue;
            if (r == s->rank) s->my_index[g] = s->n_members[g];
            s->members[g][s->n_members[g]++] = r;
        }
    }
    s->max_size[COMM_GROUP_TP] = TP;
    s->max_size[COMM_GROUP_DP] = DP;
    s->max_size[COMM_GROUP_PP] = PP;
    s->max_size[COMM_GROUP_EMBED] = PP > 1 ? 2 : 1;
    s->max_size[COMM_GROUP_MP] = TP * PP;
    s->max_size[COMM_GROUP_WORLD] = s->world;
}

// Checks the backend's size and rank of every group against the formula; returns mismatches.
static int ct_groups_verify(ct_state *s) {
    int bad = 0;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        const comm_group *cg = &s->c->groups[g];
        if (cg->size == s->n_members[g] && cg->rank == s->my_index[g]) continue;
        LOG_ERROR("comm-test: group %s: backend says rank %d of %d, the mesh says %d of %d",
                  comm_group_name((comm_group_id)g), cg->rank, cg->size, s->my_index[g],
                  s->n_members[g]);
        bad++;
    }
    return bad;
}

// ---- one row ----

// Advances the step (the comm's step names it in timeout messages); the stall rank stops here.
static void ct_step(ct_state *s) {
    int step = s->next_step++;
    s->c->step = step;
    if (s->rank == s->stall_rank && step == s->stall_step) {
        fprintf(stderr, "[r%d tp%d dp%d pp%d] comm-test: --stall-rank %d: stalling at step %d\n",
                s->rank, s->me.tp, s->me.dp, s->me.pp, s->rank, step);
        fflush(stderr);
        for (;;) sleep(3600);
    }
}

typedef struct {
    size_t count;     // elements per call: the buffer (all_reduce, broadcast, sendrecv),
                      // the receive block (reduce_scatter), the send block (all_gather)
    size_t payload;   // payload bytes per call as comm.h counts them (0 for a group of one)
    size_t row_bytes; // the size column: payload on a group of n
} ct_shape;

static ct_shape ct_row_shape(const ct_state *s, comm_group_id g, ct_op op, size_t elems) {
    const int n = s->n_members[g];
    ct_shape sh = {elems, elems * sizeof(float), elems * sizeof(float)};
    // (n == 0: a middle stage in no embedding group; it calls nothing, moves nothing.)
    if (op == CT_REDUCE_SCATTER || op == CT_ALL_GATHER) {
        // The block per rank comes from the group's largest size, the same on every rank.
        sh.count = elems / (size_t)s->max_size[g];
        sh.payload = sh.count * (size_t)n * sizeof(float);
        sh.row_bytes = sh.payload;
    }
    if (n <= 1) sh.payload = 0;
    return sh;
}

// One call of `op` on group g, on buffers a and b in the comm's memory.
static tri_status ct_call(ct_state *s, comm_group_id g, ct_op op, void *a, void *b, size_t count) {
    comm *c = s->c;
    const int n = s->n_members[g], k = s->my_index[g];
    switch (op) {
    case CT_ALL_REDUCE_SUM: return comm_all_reduce(c, g, a, count, DTYPE_FP32, COMM_REDUCE_SUM);
    case CT_ALL_REDUCE_MAX: return comm_all_reduce(c, g, a, count, DTYPE_FP32, COMM_REDUCE_MAX);
    case CT_REDUCE_SCATTER: return comm_reduce_scatter(c, g, a, b, count, DTYPE_FP32);
    case CT_ALL_GATHER: return comm_all_gather(c, g, a, b, count, DTYPE_FP32);
    case CT_BROADCAST_FIRST: return comm_broadcast(c, g, a, count, DTYPE_FP32, 0);
    case CT_BROADCAST_LAST: return comm_broadcast(c, g, a, count, DTYPE_FP32, n - 1);
    case CT_SENDRECV:
        if (n == 1) return TRI_OK; // no peer: nothing to exchange
        TRI_CHECK(comm_group_start(c));
        TRI_CHECK(comm_send(c, g, a, count, DTYPE_FP32, (k + 1) % n));
        TRI_CHECK(comm_recv(c, g, b, count, DTYPE_FP32, (k - 1 + n) % n));
        return comm_group_end(c);
    case CT_COUNT: break;
    }
    return TRI_ERR_INTERNAL;
}

// Fills the inputs of `op`, runs it once and returns the number of wrong elements.
static tri_status ct_check(ct_state *s, comm_group_id g, ct_op op, const ct_buf *ab,
                           const ct_buf *bb, size_t count, long long *wrong, int advance_step) {
    const int n = s->n_members[g], k = s->my_index[g], *m = s->members[g];
    const size_t in_count = op == CT_REDUCE_SCATTER ? count * (size_t)n : count;
    const size_t out_count = op == CT_ALL_GATHER ? count * (size_t)n : count;
    const int root = op == CT_BROADCAST_LAST ? n - 1 : 0;
    float *a = (float *)ab->host, *b = (float *)bb->host;
    for (size_t i = 0; i < in_count; i++) a[i] = ct_value(s->rank, i);
    if (op == CT_BROADCAST_FIRST || op == CT_BROADCAST_LAST)
        if (k != root)
            for (size_t i = 0; i < count; i++) a[i] = CT_POISON;
    for (size_t i = 0; i < out_count; i++) b[i] = CT_POISON;
    if (advance_step) ct_step(s);
    if (n == 0) return TRI_OK; // not a member: nothing to call (the step still advances)
    ct_buf_push(s, ab);
    ct_buf_push(s, bb);
    TRI_CHECK(ct_call(s, g, op, ab->dev, bb->dev, count));
    if (op == CT_SENDRECV && n == 1) return TRI_OK;
    ct_buf_pull(s, ab);
    ct_buf_pull(s, bb);
    long long bad = 0;
    for (size_t i = 0; i < out_count; i++) {
        float want = 0, got;
        switch (op) {
        case CT_ALL_REDUCE_SUM:
            for (int j = 0; j < n; j++) want += ct_value(m[j], i);
            got = a[i];
            break;
        case CT_ALL_REDUCE_MAX:
            want = ct_value(m[0], i);
            for (int j = 1; j < n; j++) want = want > ct_value(m[j], i) ? want : ct_value(m[j], i);
            got = a[i];
            break;
        case CT_REDUCE_SCATTER:
            for (int j = 0; j < n; j++) want += ct_value(m[j], (size_t)k * count + i);
            got = b[i];
            break;
        case CT_ALL_GATHER:
            want = ct_value(m[i / count], i % count);
            got = b[i];
            break;
        case CT_BROADCAST_FIRST:
        case CT_BROADCAST_LAST:
            want = ct_value(m[root], i);
            got = a[i];
            break;
        default: // CT_SENDRECV
            want = ct_value(m[(k - 1 + n) % n], i);
            got = b[i];
            break;
        }
        bad += got != want;
    }
    *wrong += bad;
    return TRI_OK;
}

// The payload counters this op moves: every op adds to one counter, sendrecv to two.
static void ct_counter_ids(ct_op op, comm_op_id ids[2], int *n_ids) {
    static const comm_op_id map[CT_COUNT] = {
        COMM_OP_ALL_REDUCE, COMM_OP_ALL_REDUCE, COMM_OP_REDUCE_SCATTER, COMM_OP_ALL_GATHER,
        COMM_OP_BROADCAST,  COMM_OP_BROADCAST,  COMM_OP_SEND,
    };
    ids[0] = map[op];
    ids[1] = COMM_OP_RECV;
    *n_ids = op == CT_SENDRECV ? 2 : 1;
}

// Runs one row: a checked call, then `iters` timed calls (0 for an untimed check). Returns
// this rank's wrong elements and seconds per call; checks the payload counters.
static tri_status ct_row(ct_state *s, comm_group_id g, ct_op op, size_t elems, int iters,
                         long long *wrong, double *sec) {
    const int n = s->n_members[g];
    ct_shape sh = ct_row_shape(s, g, op, elems);
    const size_t cap = sh.count * (size_t)(n > 0 ? n : 1) * sizeof(float);
    ct_buf a = ct_buf_new(s, cap), b = ct_buf_new(s, cap);
    ct_counters before;
    ct_counters_get(s->c, &before);
    tri_status st = ct_check(s, g, op, &a, &b, sh.count, wrong, iters > 0);
    double t0 = time_now_s();
    for (int it = 0; it < iters && st == TRI_OK; it++) {
        ct_step(s);
        if (n > 0) st = ct_call(s, g, op, a.dev, b.dev, sh.count);
    }
    *sec = iters > 0 ? (time_now_s() - t0) / iters : 0;
    // Every call of a group larger than one counts its payload once (comm.h's table); a
    // group of one counts nothing, and no other counter moves.
    const uint64_t calls = sh.payload ? (uint64_t)(1 + iters) : 0;
    comm_op_id ids[2];
    int n_ids;
    ct_counter_ids(op, ids, &n_ids);
    ct_counters want;
    memset(&want, 0, sizeof want);
    for (int j = 0; j < n_ids; j++) {
        want.v[g][0][ids[j]] = calls * sh.payload;
        want.v[g][1][ids[j]] = calls;
    }
    char what[64];
    snprintf(what, sizeof what, "%s on group %s", CT_OP_NAMES[op], comm_group_name(g));
    if (st == TRI_OK) ct_counters_expect(s, &before, &want, what);
    ct_buf_free(s, &a);
    ct_buf_free(s, &b);
    return st;
}

// A barrier on every group this rank is in: it must return (every member joins) and move no
// counter at all.
static tri_status ct_barriers(ct_state *s) {
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (s->n_members[g] == 0) continue; // a middle stage, in no embedding group
        ct_counters before, none;
        memset(&none, 0, sizeof none);
        ct_counters_get(s->c, &before);
        TRI_CHECK(comm_barrier(s->c, (comm_group_id)g));
        char what[64];
        snprintf(what, sizeof what, "barrier on group %s", comm_group_name((comm_group_id)g));
        ct_counters_expect(s, &before, &none, what);
    }
    return TRI_OK;
}

// Sums of non-integer floats depend on the order of the additions: two all-reduces of the
// same inputs must still agree bitwise, on every run and on every rank of the group (the
// replicas of a parameter must stay identical). Returns the elements that differ.
static tri_status ct_determinism(ct_state *s, comm_group_id g, size_t count, long long *wrong) {
    const int n = s->n_members[g];
    if (!ct_collective(s, n) || count == 0) return TRI_OK;
    comm *c = s->c;
    ct_buf bufs[3]; // first run, second run, group rank 0's first result broadcast
    for (int i = 0; i < 3; i++) bufs[i] = ct_buf_new(s, count * sizeof(float));
    const float *first = (float *)bufs[0].host, *again = (float *)bufs[1].host;
    const float *root = (float *)bufs[2].host;
    tri_status st = TRI_OK;
    for (int run = 0; run < 2 && st == TRI_OK; run++) {
        for (size_t i = 0; i < count; i++) ((float *)bufs[run].host)[i] = ct_fraction(s->rank, i);
        ct_buf_push(s, &bufs[run]);
        st = comm_all_reduce(c, g, bufs[run].dev, count, DTYPE_FP32, COMM_REDUCE_SUM);
        if (st == TRI_OK) ct_buf_pull(s, &bufs[run]);
    }
    if (st == TRI_OK) {
        memcpy(bufs[2].host, first, count * sizeof(float));
        ct_buf_push(s, &bufs[2]);
        st = comm_broadcast(c, g, bufs[2].dev, count, DTYPE_FP32, 0);
        if (st == TRI_OK) ct_buf_pull(s, &bufs[2]);
    }
    long long bad = 0;
    for (size_t i = 0; st == TRI_OK && i < count; i++)
        bad += memcmp(&first[i], &again[i], sizeof(float)) != 0 ||
               memcmp(&first[i], &root[i], sizeof(float)) != 0;
    if (bad)
        LOG_ERROR("comm-test: all_reduce on group %s is not bitwise reproducible: %lld of "
                  "%zu elements differ",
                  comm_group_name(g), bad, count);
    *wrong += bad;
    for (int i = 0; i < 3; i++) ct_buf_free(s, &bufs[i]);
    return st;
}

// NCCL's in-place forms, which both backends accept: reduce_scatter with recv = send + rank *
// count, all_gather with send = recv + rank * count. Returns the wrong elements.
static tri_status ct_in_place(ct_state *s, comm_group_id g, size_t count, long long *wrong) {
    const int n = s->n_members[g], k = s->my_index[g], *m = s->members[g];
    if (!ct_collective(s, n) || count == 0) return TRI_OK;
    comm *c = s->c;
    ct_buf bb = ct_buf_new(s, count * (size_t)n * sizeof(float));
    float *buf = (float *)bb.host, *mine = buf + (size_t)k * count;
    float *mine_dev = (float *)bb.dev + (size_t)k * count;
    for (size_t j = 0; j < count * (size_t)n; j++) buf[j] = ct_value(s->rank, j);
    ct_buf_push(s, &bb);
    tri_status st = comm_reduce_scatter(c, g, bb.dev, mine_dev, count, DTYPE_FP32);
    if (st == TRI_OK) ct_buf_pull(s, &bb);
    long long bad = 0;
    for (size_t i = 0; st == TRI_OK && i < count; i++) {
        float want = 0;
        for (int j = 0; j < n; j++) want += ct_value(m[j], (size_t)k * count + i);
        bad += mine[i] != want;
    }
    for (size_t j = 0; j < count * (size_t)n; j++) buf[j] = CT_POISON;
    for (size_t i = 0; i < count; i++) mine[i] = ct_value(s->rank, i);
    ct_buf_push(s, &bb);
    if (st == TRI_OK) st = comm_all_gather(c, g, mine_dev, bb.dev, count, DTYPE_FP32);
    if (st == TRI_OK) ct_buf_pull(s, &bb);
    for (size_t j = 0; st == TRI_OK && j < count * (size_t)n; j++)
        bad += buf[j] != ct_value(m[j / count], j % count);
    if (bad)
        LOG_ERROR("comm-test: in-place reduce_scatter/all_gather on group %s: %lld wrong "
                  "elements",
                  comm_group_name(g), bad);
    *wrong += bad;
    ct_buf_free(s, &bb);
    return st;
}

// bfloat16 (DTYPE_BF16): all_reduce sum and max, and reduce_scatter, of the same small
// integers (exact in bf16 for any world here). Returns the wrong elements.
static tri_status ct_bf16(ct_state *s, comm_group_id g, size_t count, long long *wrong) {
    const int n = s->n_members[g], k = s->my_index[g], *m = s->members[g];
    if (!ct_collective(s, n) || count == 0) return TRI_OK;
    comm *c = s->c;
    const size_t bytes = count * sizeof(uint16_t);
    ct_buf sb = ct_buf_new(s, bytes), xb = ct_buf_new(s, bytes);
    ct_buf ab = ct_buf_new(s, bytes * (size_t)n), mb = ct_buf_new(s, bytes);
    uint16_t *sum = (uint16_t *)sb.host, *max = (uint16_t *)xb.host;
    uint16_t *all = (uint16_t *)ab.host, *mine = (uint16_t *)mb.host;
    for (size_t i = 0; i < count; i++) sum[i] = max[i] = bf16_from_f32(ct_value(s->rank, i));
    for (size_t j = 0; j < count * (size_t)n; j++) all[j] = bf16_from_f32(ct_value(s->rank, j));
    ct_buf_push(s, &sb), ct_buf_push(s, &xb), ct_buf_push(s, &ab);
    tri_status st = comm_all_reduce(c, g, sb.dev, count, DTYPE_BF16, COMM_REDUCE_SUM);
    if (st == TRI_OK) st = comm_all_reduce(c, g, xb.dev, count, DTYPE_BF16, COMM_REDUCE_MAX);
    if (st == TRI_OK) st = comm_reduce_scatter(c, g, ab.dev, mb.dev, count, DTYPE_BF16);
    if (st == TRI_OK) ct_buf_pull(s, &sb), ct_buf_pull(s, &xb), ct_buf_pull(s, &mb);
    long long bad = 0;
    for (size_t i = 0; st == TRI_OK && i < count; i++) {
        float want_sum = 0, want_max = -INFINITY, want_rs = 0;
        for (int j = 0; j < n; j++) {
            want_sum += ct_value(m[j], i);
            want_max = fmaxf(want_max, ct_value(m[j], i));
            want_rs += ct_value(m[j], (size_t)k * count + i);
        }
        bad += (bf16_to_f32(sum[i]) != want_sum) + (bf16_to_f32(max[i]) != want_max) +
               (bf16_to_f32(mine[i]) != want_rs);
    }
    if (bad)
        LOG_ERROR("comm-test: bf16 collectives on group %s: %lld wrong elements",
                  comm_group_name(g), bad);
    *wrong += bad;
    ct_buf_free(s, &sb), ct_buf_free(s, &xb), ct_buf_free(s, &ab), ct_buf_free(s, &mb);
    return st;
}

static double ct_busbw_factor(ct_op op, int n) {
    switch (op) {
    case CT_ALL_REDUCE_SUM:
    case CT_ALL_REDUCE_MAX: return 2.0 * (n - 1) / n;
    case CT_REDUCE_SCATTER:
    case CT_ALL_GATHER: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

// ---- the whole test ----

static tri_status ct_run(ct_state *s, const ct_options *o, long long *total_wrong) {
    comm *c = s->c;
    long long local_wrong = ct_groups_verify(s);
    const int print = s->rank == 0;
    // Groups of one on every rank: the identity paths, checked untimed at both ends.
    char alone[128] = "";
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (ct_collective(s, s->max_size[g])) continue;
        for (int op = 0; op < CT_COUNT; op++) {
            double sec;
            const size_t ends[2] = {o->bytes.min / sizeof(float), o->bytes.max / sizeof(float)};
            for (int e = 0; e < 2; e++)
                TRI_CHECK(ct_row(s, (comm_group_id)g, (ct_op)op, ends[e], 0, &local_wrong, &sec));
        }
        size_t len = strlen(alone);
        snprintf(alone + len, sizeof alone - len, " %s", comm_group_name((comm_group_id)g));
    }
    if (print) {
        printf("# comm-test: world %d = tp %d x pp %d x dp %d, comm %s, backend %s, iters %d, "
               "timeout %.1f s\n",
               s->world, o->shape.tp, o->shape.pp, o->shape.dp, c->name, s->be->name, o->iters,
               o->timeout_s);
        if (alone[0]) printf("# groups of one rank (identity paths, checked untimed):%s\n", alone);
        printf("#\n# %10s %10s %6s %-16s %-6s %5s %11s %11s %11s %8s\n", "size(B)", "count", "type",
               "op", "group", "ranks", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    double busbw_sum = 0;
    int rows = 0;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (!ct_collective(s, s->max_size[g])) continue;
        for (int op = 0; op < CT_COUNT; op++) {
            for (size_t bytes = o->bytes.min; bytes <= o->bytes.max; bytes *= 2) {
                size_t elems = bytes / sizeof(float);
                ct_shape sh = ct_row_shape(s, (comm_group_id)g, (ct_op)op, elems);
                if (sh.count == 0) continue; // smaller than one element per rank
                long long wrong = 0;
                double sec = 0;
                TRI_CHECK(ct_row(s, (comm_group_id)g, (ct_op)op, elems, o->iters, &wrong, &sec));
                local_wrong += wrong;
                // nccl-tests style: the row's wrong count over the world, the slowest rank's time.
                int64_t w64 = wrong;
                TRI_CHECK(
                    comm_all_reduce(c, COMM_GROUP_WORLD, &w64, 1, DTYPE_INT64, COMM_REDUCE_SUM));
                TRI_CHECK(
                    comm_all_reduce(c, COMM_GROUP_WORLD, &sec, 1, DTYPE_FP64, COMM_REDUCE_MAX));
                if (!print) continue;
                const int n = s->n_members[g];
                double algbw = sec > 0 ? (double)sh.row_bytes / sec / 1e9 : 0;
                double busbw = algbw * ct_busbw_factor((ct_op)op, n);
                busbw_sum += busbw;
                rows++;
                printf("  %10zu %10zu %6s %-16s %-6s %5d %11.1f %11.3f %11.3f %8lld\n",
                       sh.row_bytes, sh.row_bytes / sizeof(float), "float", CT_OP_NAMES[op],
                       comm_group_name((comm_group_id)g), n, sec * 1e6, algbw, busbw,
                       (long long)w64);
                fflush(stdout);
            }
        }
    }
    if (print && rows)
        printf("# average bus bandwidth: %.3f GB/s over %d rows\n", busbw_sum / rows, rows);
    // A barrier on every group (untimed; counts nothing).
    TRI_CHECK(ct_barriers(s));
    // In-place forms, and bitwise reproducibility of all_reduce on non-integer floats, at
    // the largest size (untimed; a middle pipeline stage skips the embedding group).
    long long in_place = 0, nondet = 0, bf16 = 0, async = 0;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (!ct_collective(s, s->max_size[g]) || s->n_members[g] == 0) continue;
        size_t elems = o->bytes.max / sizeof(float);
        TRI_CHECK(ct_in_place(s, (comm_group_id)g, elems / (size_t)s->max_size[g], &in_place));
        TRI_CHECK(ct_determinism(s, (comm_group_id)g, elems, &nondet));
        TRI_CHECK(ct_bf16(s, (comm_group_id)g, elems / (size_t)s->max_size[g], &bf16));
    }
    // The non-blocking forms, every group at once (groups of one included): at most 16K
    // elements per buffer, since all buffers of all groups are in flight together.
    const size_t async_elems = o->bytes.max / sizeof(float);
    TRI_CHECK(ct_async(s, async_elems < 16384 ? async_elems : 16384, &async));
    local_wrong += in_place + nondet + bf16 + async;
    int64_t extra[4] = {in_place, nondet, bf16, async};
    TRI_CHECK(comm_all_reduce(c, COMM_GROUP_WORLD, extra, 4, DTYPE_INT64, COMM_REDUCE_SUM));
    if (print && (s->world > 1 || c->one_rank_groups)) {
        printf("# in-place reduce_scatter and all_gather on every group: %lld wrong\n",
               (long long)extra[0]);
        printf("# all_reduce of non-integer floats, twice, on every group: %s\n",
               extra[1] ? "NOT bitwise identical" : "bitwise identical on every rank and run");
        printf("# bf16 all_reduce (sum, max) and reduce_scatter on every group: %lld wrong\n",
               (long long)extra[2]);
        printf("# non-blocking forms (start/wait, all in flight at once) against the blocking "
               "ones on every group: %lld differ\n",
               (long long)extra[3]);
    }
    int64_t totals[2] = {local_wrong, s->bad_counters};
    TRI_CHECK(comm_all_reduce(c, COMM_GROUP_WORLD, totals, 2, DTYPE_INT64, COMM_REDUCE_SUM));
    *total_wrong = totals[0];
    if (totals[1] && print)
        printf("comm-test: %lld payload counter mismatches\n", (long long)totals[1]);
    if (totals[1] && !*total_wrong) *total_wrong = -1; // failed, though every element was right
    return TRI_OK;
}

int commtest_main(int argc, char **argv) {
    // The help needs no launch; a usage error is reported by rank 0 of the job.
    ct_options o;
    char msg[512];
    cli_result parsed = cli_parse(&COMMTEST_CLI, argc, argv, &o, msg, sizeof msg);
    cli_free(&COMMTEST_CLI, &o);
    if (parsed == CLI_HELP) {
        cli_print_help(&COMMTEST_CLI, stdout);
        return 0;
    }
    if (parsed == CLI_PARSED && (o.stall_rank >= 0) != (o.stall_step >= 0)) {
        snprintf(msg, sizeof msg, "--stall-rank and --stall-step go together");
        parsed = CLI_USAGE_ERROR;
    }
    launch_info li;
    tri_status st = launch_init(&li);
    if (st != TRI_OK) return st;
    if (parsed != CLI_PARSED) {
        int rc = TRI_ERR_CONFIG;
        if (li.rank == 0) rc = cli_report(&COMMTEST_CLI, msg);
        launch_finalize(&li);
        return rc;
    }
    if (!o.shape.set) o.shape.tp = li.world, o.shape.pp = 1, o.shape.dp = 1;
    if ((long long)o.shape.tp * o.shape.pp * o.shape.dp != li.world) {
        if (li.rank == 0)
            fprintf(stderr,
                    "comm-test: --world-shape %d,%d,%d (tp,pp,dp) multiplies to %lld, but "
                    "the world has %d ranks\n",
                    o.shape.tp, o.shape.pp, o.shape.dp,
                    (long long)o.shape.tp * o.shape.pp * o.shape.dp, li.world);
        launch_finalize(&li);
        return TRI_ERR_CONFIG;
    }
    if (o.stall_rank >= li.world) {
        if (li.rank == 0)
            fprintf(stderr, "comm-test: --stall-rank %d is not a rank of the world of %d\n",
                    o.stall_rank, li.world);
        launch_finalize(&li);
        return TRI_ERR_CONFIG;
    }

    // The compute backend first (on a GPU it selects the device the comm's buffers and
    // NCCL's communicators belong to), then the comm, as the trainer makes them.
    comm *c = NULL;
    backend *be = NULL;
    int rc = 0;
    const mesh m = {.tp = o.shape.tp, .dp = o.shape.dp, .pp = o.shape.pp};
    ct_state s = {.rank = li.rank,
                  .world = li.world,
                  .mesh = m,
                  .iters = o.iters,
                  .stall_rank = o.stall_rank,
                  .stall_step = o.stall_step};
    s.me = mesh_coord_of(&m, li.rank);
    log_set_rank(li.rank, s.me.tp, s.me.dp, s.me.pp);
    TRI_CHECK_GOTO(backend_create_for((backend_kind)o.backend, li.local_rank, 1, &be), st, done);
    TRI_CHECK_GOTO(comm_create_for(&c, &m, (comm_kind)o.comm, &li, be, o.timeout_s), st, done);
    s.c = c;
    s.be = be;
    ct_groups_init(&s);
    long long wrong = 0;
    TRI_CHECK_GOTO(ct_run(&s, &o, &wrong), st, done);
    if (li.rank == 0) {
        if (wrong > 0) printf("comm-test: %lld wrong elements\n", wrong);
        else if (wrong == 0) printf("comm-test: OK, 0 wrong elements\n");
    }
    rc = wrong ? 1 : 0;
done:
    fflush(stdout);
    fflush(stderr);
    for (int g = 0; g < COMM_GROUP_COUNT; g++) free(s.members[g]);
    comm_destroy(c);
    if (be) be->destroy(be);
    launch_finalize(&li);
    return st != TRI_OK ? (int)st : rc;
}
