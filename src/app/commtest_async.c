// commtest_async.c: the comm-test of the non-blocking forms of comm.h (all_reduce_start,
// reduce_scatter_start, all_gather_start, group_end_start, wait, progress): each must give
// bitwise the blocking form's result and count the same payload, with many requests in
// flight at once on the same and on different groups. See commtest.c for the whole test.
#include "app/commtest_internal.h"

#include <string.h>

#include "base/bf16.h"

// One collective (or ring of sends and receives) run in both forms. `place` picks the
// buffers: 0 separate; for reduce_scatter 1 is send == recv (result in the first block) and
// 2 is recv = send + rank * count; for all_gather 1 is send = recv + rank * count.
typedef struct {
    comm_group_id g;
    ct_op op;         // CT_ALL_REDUCE_SUM, CT_ALL_REDUCE_MAX, CT_REDUCE_SCATTER, CT_ALL_GATHER
                      // or CT_SENDRECV
    tri_dtype dt;
    int place;
    size_t count;     // as in ct_call
    size_t in_bytes;  // the inputs: the buffer, all blocks (reduce_scatter), one block
    size_t buf_bytes; // the buffer the call writes (holding the inputs when in place)
    size_t cmp_at, cmp_bytes; // the result within it
    char *in, *want, *got;    // inputs; the blocking form's buffer; the non-blocking form's
    comm_request req;
} ct_async_case;

// Runs case k in its blocking form, or starts its non-blocking form into k->req.
static tri_status ct_async_run(ct_state *s, ct_async_case *k, int start) {
    comm *c = s->c;
    const int n = s->n_members[k->g], me = s->my_index[k->g];
    const size_t block = k->count * dtype_size(k->dt);
    char *buf = start ? k->got : k->want;
    memset(buf, 0xA5, k->buf_bytes); // poison where the result goes
    if (k->op == CT_ALL_REDUCE_SUM || k->op == CT_ALL_REDUCE_MAX) {
        comm_reduce_op rop = k->op == CT_ALL_REDUCE_MAX ? COMM_REDUCE_MAX : COMM_REDUCE_SUM;
        memcpy(buf, k->in, block);
        return start ? c->all_reduce_start(c, k->g, buf, k->count, k->dt, rop, &k->req)
                     : c->all_reduce(c, k->g, buf, k->count, k->dt, rop);
    }
    if (k->op == CT_REDUCE_SCATTER) {
        const void *send = k->in;
        void *recv = buf;
        if (k->place) {
            memcpy(buf, k->in, k->in_bytes);
            send = buf;
            recv = k->place == 1 ? buf : buf + (size_t)me * block;
        }
        return start ? c->reduce_scatter_start(c, k->g, send, recv, k->count, k->dt, &k->req)
                     : c->reduce_scatter(c, k->g, send, recv, k->count, k->dt);
    }
    if (k->op == CT_ALL_GATHER) {
        const void *send = k->in;
        if (k->place) {
            memcpy(buf + (size_t)me * block, k->in, block);
            send = buf + (size_t)me * block;
        }
        return start ? c->all_gather_start(c, k->g, send, buf, k->count, k->dt, &k->req)
                     : c->all_gather(c, k->g, send, buf, k->count, k->dt);
    }
    // CT_SENDRECV: ct_call's ring, as one group.
    TRI_CHECK(c->group_start(c));
    TRI_CHECK(c->send(c, k->g, k->in, k->count, k->dt, (me + 1) % n));
    TRI_CHECK(c->recv(c, k->g, buf, k->count, k->dt, (me - 1 + n) % n));
    return start ? c->group_end_start(c, &k->req) : c->group_end(c);
}

// Adds the case of (g, op, dt, place) at `elems` elements per buffer to cases.
static void ct_async_add(ct_state *s, ct_async_case *cases, int *n_cases, comm_group_id g,
                         ct_op op, tri_dtype dt, int place, size_t elems) {
    const int n = s->n_members[g], me = s->my_index[g];
    ct_async_case *k = &cases[*n_cases];
    *k = (ct_async_case){.g = g, .op = op, .dt = dt, .place = place};
    k->count = op == CT_REDUCE_SCATTER || op == CT_ALL_GATHER ? elems / (size_t)s->max_size[g]
                                                               : elems;
    if (k->count == 0) return; // smaller than one element per rank
    const size_t esz = dtype_size(dt), block = k->count * esz;
    k->in_bytes = op == CT_REDUCE_SCATTER ? block * (size_t)n : block;
    k->buf_bytes = (op == CT_REDUCE_SCATTER && place) || op == CT_ALL_GATHER ? block * (size_t)n
                                                                             : block;
    k->cmp_bytes = op == CT_ALL_GATHER ? block * (size_t)n : block;
    k->cmp_at = op == CT_REDUCE_SCATTER && place == 2 ? (size_t)me * block : 0;
    k->in = xmalloc(k->in_bytes);
    k->want = xmalloc(k->buf_bytes);
    k->got = xmalloc(k->buf_bytes);
    for (size_t i = 0; i < k->in_bytes / esz; i++) {
        float v = ct_fraction(s->rank, i);
        if (dt == DTYPE_BF16) ((uint16_t *)k->in)[i] = bf16_from_f32(v);
        else ((float *)k->in)[i] = v;
    }
    (*n_cases)++;
}

// The payload counters of every group: [group][0: bytes, 1: calls][comm_op_id].
typedef struct { uint64_t v[COMM_GROUP_COUNT][2][COMM_OP_COUNT]; } ct_counters;

static const char *const COUNTER_NAMES[COMM_OP_COUNT] = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv",
};

static void ct_counters_get(const comm *c, ct_counters *out) {
    for (int g = 0; g < COMM_GROUP_COUNT; g++)
        for (int op = 0; op < COMM_OP_COUNT; op++) {
            out->v[g][0][op] = c->groups[g].bytes[op];
            out->v[g][1][op] = c->groups[g].calls[op];
        }
}

// The non-blocking forms against the blocking ones on every group this rank is in: every
// collective in f32 and bf16 (all_reduce sum and max; reduce_scatter and all_gather, also in
// place) and, on groups of more than one, a ring of sends and receives (group_end_start).
// All run blocking one after the other; then all start at once (on the same and on different
// groups), `progress` runs, and they are waited for in reverse order. The results must be
// bitwise the same, and both passes must move the payload counters by the same bytes and
// calls (a mismatch counts in s->bad_counters). On a group of one a start must complete
// inside (its request empty), and every wait must empty its request. Returns the elements
// that differ, plus one per broken request rule.
tri_status ct_async(ct_state *s, size_t elems, long long *wrong) {
    comm *c = s->c;
    enum { CASES_PER_GROUP = 2 * 7 + 1 };
    ct_async_case *cases = xcalloc(COMM_GROUP_COUNT * CASES_PER_GROUP, sizeof *cases);
    int n_cases = 0;
    const tri_dtype dts[2] = {DTYPE_FP32, DTYPE_BF16};
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (s->n_members[g] == 0) continue; // a middle stage, in no embedding group
        const comm_group_id gg = (comm_group_id)g;
        for (int d = 0; d < 2; d++) {
            ct_async_add(s, cases, &n_cases, gg, CT_ALL_REDUCE_SUM, dts[d], 0, elems);
            ct_async_add(s, cases, &n_cases, gg, CT_ALL_REDUCE_MAX, dts[d], 0, elems);
            for (int place = 0; place < 3; place++)
                ct_async_add(s, cases, &n_cases, gg, CT_REDUCE_SCATTER, dts[d], place, elems);
            for (int place = 0; place < 2; place++)
                ct_async_add(s, cases, &n_cases, gg, CT_ALL_GATHER, dts[d], place, elems);
        }
        if (s->n_members[g] > 1)
            ct_async_add(s, cases, &n_cases, gg, CT_SENDRECV, DTYPE_FP32, 0, elems);
    }
    ct_counters before, middle, after;
    ct_counters_get(c, &before);
    tri_status st = TRI_OK;
    for (int i = 0; i < n_cases && st == TRI_OK; i++) st = ct_async_run(s, &cases[i], 0);
    ct_counters_get(c, &middle);
    long long bad = 0;
    int started = 0;
    for (; started < n_cases && st == TRI_OK; started++) {
        ct_async_case *k = &cases[started];
        st = ct_async_run(s, k, 1);
        if (st == TRI_OK && s->n_members[k->g] == 1 && k->req.impl) {
            LOG_ERROR("comm-test: the non-blocking %s on group %s (one rank) did not complete "
                      "inside start", CT_OP_NAMES[k->op], comm_group_name(k->g));
            bad++;
        }
    }
    if (st == TRI_OK) c->progress(c);
    // Every request started is waited for, also after a failure.
    for (int i = started - 1; i >= 0; i--) {
        tri_status w = c->wait(c, &cases[i].req);
        if (st == TRI_OK) st = w;
        if (cases[i].req.impl) {
            LOG_ERROR("comm-test: wait left the request of %s on group %s set",
                      CT_OP_NAMES[cases[i].op], comm_group_name(cases[i].g));
            bad++;
        }
    }
    ct_counters_get(c, &after);
    for (int g = 0; st == TRI_OK && g < COMM_GROUP_COUNT; g++)
        for (int op = 0; op < COMM_OP_COUNT; op++) {
            uint64_t blocking[2], started_forms[2];
            for (int w = 0; w < 2; w++) {
                blocking[w] = middle.v[g][w][op] - before.v[g][w][op];
                started_forms[w] = after.v[g][w][op] - middle.v[g][w][op];
            }
            if (blocking[0] == started_forms[0] && blocking[1] == started_forms[1]) continue;
            LOG_ERROR("comm-test: %s counters of group %s: the blocking forms counted %llu "
                      "bytes in %llu calls, the non-blocking forms %llu bytes in %llu calls",
                      COUNTER_NAMES[op], comm_group_name((comm_group_id)g),
                      (unsigned long long)blocking[0], (unsigned long long)blocking[1],
                      (unsigned long long)started_forms[0], (unsigned long long)started_forms[1]);
            s->bad_counters++;
        }
    for (int i = 0; st == TRI_OK && i < n_cases; i++) {
        const ct_async_case *k = &cases[i];
        const size_t esz = dtype_size(k->dt);
        long long diff = 0;
        for (size_t j = 0; j < k->cmp_bytes; j += esz)
            diff += memcmp(k->want + k->cmp_at + j, k->got + k->cmp_at + j, esz) != 0;
        if (diff)
            LOG_ERROR("comm-test: %s (%s, place %d) on group %s: %lld of %zu elements of the "
                      "non-blocking form differ from the blocking form's",
                      CT_OP_NAMES[k->op], k->dt == DTYPE_BF16 ? "bf16" : "f32", k->place,
                      comm_group_name(k->g), diff, k->cmp_bytes / esz);
        bad += diff;
    }
    *wrong += bad;
    for (int i = 0; i < n_cases; i++) free(cases[i].in), free(cases[i].want), free(cases[i].got);
    free(cases);
    return st;
}
