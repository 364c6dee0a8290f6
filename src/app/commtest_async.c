// commtest_async.c: the comm-test of the non-blocking forms of comm.h (comm_all_reduce_start,
// comm_reduce_scatter_start, comm_all_gather_start, comm_group_end_start, comm_wait,
// comm_progress): each must give bitwise the blocking form's result and count the same
// payload, comm.h's, with many requests in flight at once on the same and on different
// groups. See commtest.c for the whole test.
#include "app/commtest_internal.h"

#include <string.h>

#include "base/bf16.h"

// One collective (or ring of sends and receives) run in both forms. `place` picks the
// buffers: 0 separate; for reduce_scatter 1 is send == recv (result in the first block) and
// 2 is recv = send + rank * count; for all_gather 1 is send = recv + rank * count.
typedef struct {
    comm_group_id g;
    ct_op op; // CT_ALL_REDUCE_SUM, CT_ALL_REDUCE_MAX, CT_REDUCE_SCATTER, CT_ALL_GATHER
              // or CT_SENDRECV
    tri_dtype dt;
    int place;
    size_t count;             // as in ct_call
    size_t in_bytes;          // the inputs: the buffer, all blocks (reduce_scatter), one block
    size_t buf_bytes;         // the buffer the call writes (holding the inputs when in place)
    size_t cmp_at, cmp_bytes; // the result within it
    ct_buf in, want, got;     // inputs; the blocking form's buffer; the non-blocking form's
    comm_request req;
} ct_async_case;

// Runs case k in its blocking form, or starts its non-blocking form into k->req.
static tri_status ct_async_run(ct_state *s, ct_async_case *k, int start) {
    comm *c = s->c;
    const int n = s->n_members[k->g], me = s->my_index[k->g];
    const size_t block = k->count * dtype_size(k->dt);
    const ct_buf *b = start ? &k->got : &k->want;
    char *host = b->host, *buf = b->dev; // where the test writes; what the comm sees
    memset(host, 0xA5, k->buf_bytes);    // poison where the result goes
    const void *send = k->in.dev;
    void *recv = buf;
    if (k->op == CT_ALL_REDUCE_SUM || k->op == CT_ALL_REDUCE_MAX) {
        memcpy(host, k->in.host, block);
    } else if (k->op == CT_REDUCE_SCATTER && k->place) {
        memcpy(host, k->in.host, k->in_bytes);
        send = buf;
        recv = k->place == 1 ? buf : buf + (size_t)me * block;
    } else if (k->op == CT_ALL_GATHER && k->place) {
        memcpy(host + (size_t)me * block, k->in.host, block);
        send = buf + (size_t)me * block;
    }
    ct_buf_push(s, b);
    if (k->op == CT_ALL_REDUCE_SUM || k->op == CT_ALL_REDUCE_MAX) {
        comm_reduce_op rop = k->op == CT_ALL_REDUCE_MAX ? COMM_REDUCE_MAX : COMM_REDUCE_SUM;
        return start ? comm_all_reduce_start(c, k->g, buf, k->count, k->dt, rop, &k->req)
                     : comm_all_reduce(c, k->g, buf, k->count, k->dt, rop);
    }
    if (k->op == CT_REDUCE_SCATTER)
        return start ? comm_reduce_scatter_start(c, k->g, send, recv, k->count, k->dt, &k->req)
                     : comm_reduce_scatter(c, k->g, send, recv, k->count, k->dt);
    if (k->op == CT_ALL_GATHER)
        return start ? comm_all_gather_start(c, k->g, send, buf, k->count, k->dt, &k->req)
                     : comm_all_gather(c, k->g, send, buf, k->count, k->dt);
    // CT_SENDRECV: ct_call's ring, as one group.
    TRI_CHECK(comm_group_start(c));
    TRI_CHECK(comm_send(c, k->g, k->in.dev, k->count, k->dt, (me + 1) % n));
    TRI_CHECK(comm_recv(c, k->g, buf, k->count, k->dt, (me - 1 + n) % n));
    return start ? comm_group_end_start(c, &k->req) : comm_group_end(c);
}

// Adds the case of (g, op, dt, place) at `elems` elements per buffer to cases.
static void ct_async_add(ct_state *s, ct_async_case *cases, int *n_cases, comm_group_id g, ct_op op,
                         tri_dtype dt, int place, size_t elems) {
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
    k->in = ct_buf_new(s, k->in_bytes);
    k->want = ct_buf_new(s, k->buf_bytes);
    k->got = ct_buf_new(s, k->buf_bytes);
    for (size_t i = 0; i < k->in_bytes / esz; i++) {
        float v = ct_fraction(s->rank, i);
        if (dt == DTYPE_BF16) ((uint16_t *)k->in.host)[i] = bf16_from_f32(v);
        else ((float *)k->in.host)[i] = v;
    }
    ct_buf_push(s, &k->in);
    (*n_cases)++;
}

// Adds what case k counts, by comm.h's table, to want: nothing on a group of one.
static void ct_async_payload(const ct_state *s, const ct_async_case *k, ct_counters *want) {
    const int n = s->n_members[k->g];
    if (n <= 1) return;
    const size_t block = k->count * dtype_size(k->dt);
    const comm_op_id ids[2] = {k->op == CT_REDUCE_SCATTER ? COMM_OP_REDUCE_SCATTER
                               : k->op == CT_ALL_GATHER   ? COMM_OP_ALL_GATHER
                               : k->op == CT_SENDRECV     ? COMM_OP_SEND
                                                          : COMM_OP_ALL_REDUCE,
                               COMM_OP_RECV};
    const size_t bytes = k->op == CT_REDUCE_SCATTER || k->op == CT_ALL_GATHER ? block * (size_t)n
                                                                              : block;
    for (int j = 0; j < (k->op == CT_SENDRECV ? 2 : 1); j++) {
        want->v[k->g][0][ids[j]] += bytes;
        want->v[k->g][1][ids[j]] += 1;
    }
}

// The non-blocking forms against the blocking ones on every group this rank is in: every
// collective in f32 and bf16 (all_reduce sum and max; reduce_scatter and all_gather, also in
// place) and, on groups of more than one, a ring of sends and receives (group_end_start).
// All run blocking one after the other; then all start at once (on the same and on different
// groups), `progress` runs, and they are waited for in reverse order. The results must be
// bitwise the same, and each pass must move the payload counters by what comm.h's table
// says, on every group and collective (a mismatch counts in s->bad_counters). On a group of
// one a start must complete inside (its request empty), and every wait must empty its
// request. Returns the elements that differ, plus one per broken request rule.
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
    ct_counters want, before, middle;
    memset(&want, 0, sizeof want);
    for (int i = 0; i < n_cases; i++) ct_async_payload(s, &cases[i], &want);
    ct_counters_get(c, &before);
    tri_status st = TRI_OK;
    for (int i = 0; i < n_cases && st == TRI_OK; i++) st = ct_async_run(s, &cases[i], 0);
    if (st == TRI_OK) ct_counters_expect(s, &before, &want, "the blocking forms");
    ct_counters_get(c, &middle);
    long long bad = 0;
    int started = 0;
    for (; started < n_cases && st == TRI_OK; started++) {
        ct_async_case *k = &cases[started];
        st = ct_async_run(s, k, 1);
        if (st == TRI_OK && s->n_members[k->g] == 1 && k->req.impl) {
            LOG_ERROR("comm-test: the non-blocking %s on group %s (one rank) did not complete "
                      "inside start",
                      CT_OP_NAMES[k->op], comm_group_name(k->g));
            bad++;
        }
    }
    if (st == TRI_OK) comm_progress(c);
    // Every request started is waited for, also after a failure.
    for (int i = started - 1; i >= 0; i--) {
        tri_status w = comm_wait(c, &cases[i].req);
        if (st == TRI_OK) st = w;
        if (cases[i].req.impl) {
            LOG_ERROR("comm-test: wait left the request of %s on group %s set",
                      CT_OP_NAMES[cases[i].op], comm_group_name(cases[i].g));
            bad++;
        }
    }
    if (st == TRI_OK) ct_counters_expect(s, &middle, &want, "the non-blocking forms");
    for (int i = 0; st == TRI_OK && i < n_cases; i++) {
        const ct_async_case *k = &cases[i];
        ct_buf_pull(s, &k->want);
        ct_buf_pull(s, &k->got);
        const size_t esz = dtype_size(k->dt);
        long long diff = 0;
        for (size_t j = 0; j < k->cmp_bytes; j += esz)
            diff += memcmp(k->want.host + k->cmp_at + j, k->got.host + k->cmp_at + j, esz) != 0;
        if (diff)
            LOG_ERROR("comm-test: %s (%s, place %d) on group %s: %lld of %zu elements of the "
                      "non-blocking form differ from the blocking form's",
                      CT_OP_NAMES[k->op], k->dt == DTYPE_BF16 ? "bf16" : "f32", k->place,
                      comm_group_name(k->g), diff, k->cmp_bytes / esz);
        bad += diff;
    }
    *wrong += bad;
    for (int i = 0; i < n_cases; i++)
        ct_buf_free(s, &cases[i].in), ct_buf_free(s, &cases[i].want), ct_buf_free(s, &cases[i].got);
    free(cases);
    return st;
}
