// comm_staged.c: see comm_staged.h.
//
// Every call copies its device inputs into a host buffer of the pool, starts the inner
// backend's call on host memory and keeps the host buffer (and the inner request) in the
// request until `wait`, which completes the inner request and copies the result to the
// device. The copies go through the compute backend, on its stream after the work already
// enqueued there, so the inputs are complete when they are read (no inputs_ready needed).
// The wrapper calls the inner backend's table (comm_backend.h) directly: the layer
// (comm_dispatch.c) has checked, counted and short-circuited the call once, on the wrapper.
#include "comm/comm_staged.h"

#include <string.h>

#include "comm/comm_backend.h"

// A buffer of the host pool: each call in flight holds its own, so that several may be.
typedef struct {
    char *ptr;
    size_t cap;
    int busy;
} staged_host;

// A device buffer's host copy, held from the start of a call to its end.
typedef struct {
    char *host; // a pool buffer
    void *dev;
    size_t offset; // where in `host` the result for `dev` lies
    size_t bytes;  // the result's size
    int copy_back; // the call writes dev: host + offset goes back to it at the end
} staged_copy;

// What comm_request.impl points to.
typedef struct {
    comm_request inner;
    staged_copy *copies; // (n): one for a collective, one per send or receive of a group
    int n;
} staged_request;

typedef struct {
    comm *inner;
    backend *be;
    staged_host *pool; // (n_pool), grown on demand; as many as calls were ever in flight
    int n_pool;
    staged_copy *p2p; // (n_p2p) sends and receives of the open group
    int n_p2p, cap_p2p;
} staged_ctx;

static staged_ctx *ctx_of(comm *c) { return c->ctx; }

static size_t align_up(size_t n) { return (n + 63) & ~(size_t)63; }

// A free pool buffer of at least `bytes`: one large enough, else a free one grown, else new.
static char *host_take(staged_ctx *x, size_t bytes) {
    int pick = -1;
    for (int i = 0; i < x->n_pool; i++) {
        if (x->pool[i].busy) continue;
        if (x->pool[i].cap >= bytes) {
            pick = i;
            break;
        }
        if (pick < 0) pick = i;
    }
    if (pick < 0) {
        x->pool = realloc(x->pool, (size_t)(x->n_pool + 1) * sizeof *x->pool);
        TRI_ASSERT(x->pool);
        pick = x->n_pool++;
        x->pool[pick] = (staged_host){NULL, 0, 0};
    }
    staged_host *h = &x->pool[pick];
    if (h->cap < bytes) {
        free(h->ptr);
        h->ptr = xmalloc(bytes ? bytes : 1);
        h->cap = bytes;
    }
    h->busy = 1;
    return h->ptr;
}

static void host_give(staged_ctx *x, char *ptr) {
    for (int i = 0; i < x->n_pool; i++)
        if (x->pool[i].ptr == ptr) {
            x->pool[i].busy = 0;
            return;
        }
    TRI_ASSERT(!"host_give: not a buffer of the pool");
}

// Ends copies: results go to the device when the call succeeded; the buffers go back.
static void finish_copies(staged_ctx *x, staged_copy *copies, int n, int ok) {
    for (int i = 0; i < n; i++) {
        staged_copy *p = &copies[i];
        if (ok && p->copy_back) x->be->copy_to_device(x->be, p->dev, p->host + p->offset, p->bytes);
        host_give(x, p->host);
    }
}

// The inner backend for a call: its timeout messages name the wrapper's step.
static comm *inner_of(comm *c) {
    comm *in = ctx_of(c)->inner;
    in->step = c->step;
    return in;
}

// After an inner start: a request in flight goes to req; one that failed, or that inner
// completed inside start (an empty group), ends now.
static tri_status staged_begun(comm *c, staged_request *r, tri_status st, comm_request *req) {
    if (st == TRI_OK && r->inner.impl) {
        req->impl = r;
        return TRI_OK;
    }
    finish_copies(ctx_of(c), r->copies, r->n, st == TRI_OK);
    free(r->copies);
    free(r);
    return st;
}

// on_host goes to the inner backend with the request.
static tri_status staged_wait(comm *c, comm_request *req, int on_host) {
    staged_request *r = req->impl;
    req->impl = NULL;
    comm *in = inner_of(c);
    tri_status st = in->iface->wait(in, &r->inner, on_host);
    finish_copies(ctx_of(c), r->copies, r->n, st == TRI_OK);
    free(r->copies);
    free(r);
    return st;
}

static void staged_progress(comm *c) {
    comm *in = inner_of(c);
    in->iface->progress(in);
}

// ---- collectives ----

// all_reduce and broadcast (one buffer, in place), reduce_scatter (all blocks in, this
// rank's block out) and all_gather (the reverse): inputs at the start of one pool buffer,
// the result after them (all_reduce, broadcast: in place), so that the inner call sees no
// overlap.
static tri_status staged_collective_start(comm *c, comm_group_id g, comm_op_id op, const void *send,
                                          void *recv, size_t count, tri_dtype dt,
                                          comm_reduce_op rop, int root, comm_request *req) {
    staged_ctx *x = ctx_of(c);
    const size_t block = count * dtype_size(dt);
    const size_t all = block * (size_t)c->groups[g].size;
    const size_t in_bytes = op == COMM_OP_REDUCE_SCATTER ? all : block;
    const size_t out_bytes = op == COMM_OP_ALL_GATHER ? all : block;
    const int in_place = op == COMM_OP_ALL_REDUCE || op == COMM_OP_BROADCAST;
    const size_t out_at = in_place ? 0 : align_up(in_bytes);
    char *h = host_take(x, out_at + out_bytes);
    staged_request *r = xcalloc(1, sizeof *r);
    r->copies = xmalloc(sizeof *r->copies);
    r->copies[0] = (staged_copy){h, recv, out_at, out_bytes, 1};
    r->n = 1;
    x->be->copy_to_host(x->be, h, send, in_bytes);
    comm *in = inner_of(c);
    const struct comm_iface *f = in->iface;
    tri_status st;
    switch (op) {
    case COMM_OP_ALL_REDUCE: st = f->all_reduce_start(in, g, h, count, dt, rop, &r->inner); break;
    case COMM_OP_REDUCE_SCATTER:
        st = f->reduce_scatter_start(in, g, h, h + out_at, count, dt, &r->inner);
        break;
    case COMM_OP_ALL_GATHER:
        st = f->all_gather_start(in, g, h, h + out_at, count, dt, &r->inner);
        break;
    default: st = f->broadcast_start(in, g, h, count, dt, root, &r->inner); break;
    }
    return staged_begun(c, r, st, req);
}

static tri_status staged_all_reduce_start(comm *c, comm_group_id g, void *buf, size_t count,
                                          tri_dtype dt, comm_reduce_op op, comm_request *req) {
    return staged_collective_start(c, g, COMM_OP_ALL_REDUCE, buf, buf, count, dt, op, 0, req);
}

static tri_status staged_reduce_scatter_start(comm *c, comm_group_id g, const void *send,
                                              void *recv, size_t count, tri_dtype dt,
                                              comm_request *req) {
    return staged_collective_start(c, g, COMM_OP_REDUCE_SCATTER, send, recv, count, dt,
                                   COMM_REDUCE_SUM, 0, req);
}

static tri_status staged_all_gather_start(comm *c, comm_group_id g, const void *send, void *recv,
                                          size_t count, tri_dtype dt, comm_request *req) {
    return staged_collective_start(c, g, COMM_OP_ALL_GATHER, send, recv, count, dt, COMM_REDUCE_SUM,
                                   0, req);
}

static tri_status staged_broadcast_start(comm *c, comm_group_id g, void *buf, size_t count,
                                         tri_dtype dt, int root, comm_request *req) {
    return staged_collective_start(c, g, COMM_OP_BROADCAST, buf, buf, count, dt, COMM_REDUCE_SUM,
                                   root, req);
}

static tri_status staged_barrier_start(comm *c, comm_group_id g, comm_request *req) {
    staged_request *r = xcalloc(1, sizeof *r); // no buffers
    comm *in = inner_of(c);
    return staged_begun(c, r, in->iface->barrier_start(in, g, &r->inner), req);
}

// A group of one: this rank's block to recv, through a host buffer (send and recv may
// overlap), complete before it returns.
static tri_status staged_local_copy(comm *c, comm_group_id g, comm_op_id op, const void *send,
                                    void *recv, size_t bytes) {
    (void)g, (void)op;
    staged_ctx *x = ctx_of(c);
    staged_copy cp = {host_take(x, bytes), recv, 0, bytes, 1};
    x->be->copy_to_host(x->be, cp.host, send, bytes);
    finish_copies(x, &cp, 1, 1);
    return TRI_OK;
}

// ---- point-to-point ----

// A send's or receive's host copy joins the open group's list and stays until the group
// completes.
static tri_status staged_transfer(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                                  int peer, int is_recv) {
    staged_ctx *x = ctx_of(c);
    const size_t n = count * dtype_size(dt);
    staged_copy cp = {host_take(x, n), buf, 0, n, is_recv};
    if (!is_recv) x->be->copy_to_host(x->be, cp.host, buf, n);
    comm *in = inner_of(c);
    tri_status st = is_recv ? in->iface->recv(in, g, cp.host, count, dt, peer)
                            : in->iface->send(in, g, cp.host, count, dt, peer);
    if (st != TRI_OK) {
        finish_copies(x, &cp, 1, 0);
        return st;
    }
    if (x->n_p2p == x->cap_p2p) {
        x->cap_p2p = x->cap_p2p ? 2 * x->cap_p2p : 8;
        x->p2p = realloc(x->p2p, (size_t)x->cap_p2p * sizeof *x->p2p);
        TRI_ASSERT(x->p2p);
    }
    x->p2p[x->n_p2p++] = cp;
    return TRI_OK;
}

static tri_status staged_send(comm *c, comm_group_id g, const void *buf, size_t count, tri_dtype dt,
                              int peer) {
    return staged_transfer(c, g, (void *)buf, count, dt, peer, 0);
}

static tri_status staged_recv(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                              int peer) {
    return staged_transfer(c, g, buf, count, dt, peer, 1);
}

static tri_status staged_group_start(comm *c) {
    comm *in = inner_of(c);
    return in->iface->group_start(in);
}

// Hands the group's copies to the request (inner hands it the transfers).
static tri_status staged_group_end_start(comm *c, comm_request *req) {
    staged_ctx *x = ctx_of(c);
    staged_request *r = xcalloc(1, sizeof *r);
    r->copies = x->p2p;
    r->n = x->n_p2p;
    x->p2p = NULL;
    x->n_p2p = x->cap_p2p = 0;
    comm *in = inner_of(c);
    return staged_begun(c, r, in->iface->group_end_start(in, &r->inner), req);
}

static void staged_destroy(comm *c) {
    if (!c) return;
    staged_ctx *x = ctx_of(c);
    comm_destroy(x->inner);
    // Buffers of requests never waited for (an error ended the run first) go too.
    for (int i = 0; i < x->n_pool; i++) free(x->pool[i].ptr);
    free(x->pool);
    free(x->p2p);
    free(x);
    free(c);
}

static const struct comm_iface staged_iface = {
    /* .all_reduce_start     = */ staged_all_reduce_start,
    /* .reduce_scatter_start = */ staged_reduce_scatter_start,
    /* .all_gather_start     = */ staged_all_gather_start,
    /* .broadcast_start      = */ staged_broadcast_start,
    /* .barrier_start        = */ staged_barrier_start,
    /* .send                 = */ staged_send,
    /* .recv                 = */ staged_recv,
    /* .group_start          = */ staged_group_start,
    /* .group_end_start      = */ staged_group_end_start,
    /* .wait                 = */ staged_wait,
    /* .progress             = */ staged_progress,
    /* .local_copy           = */ staged_local_copy,
    /* .destroy              = */ staged_destroy,
};

tri_status comm_staged_create(comm **out, comm *inner, backend *be) {
    staged_ctx *x = xcalloc(1, sizeof *x);
    x->inner = inner, x->be = be;
    comm *c = xcalloc(1, sizeof *c);
    *c = *inner; // ranks, groups (sizes, ranks, handles), timeout
    c->name = "mpi (staged)";
    c->iface = &staged_iface;
    c->ctx = x;
    comm_counters_reset(c); // the layer counts on the wrapper; inner's counters stay unused
    c->inputs_ready = NULL, c->inputs_ready_ctx = NULL;
    c->compute_stream = NULL;
    c->group_depth = 0;
    *out = c;
    return TRI_OK;
}
