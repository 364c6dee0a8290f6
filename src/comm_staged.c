// comm_staged.c: see comm_staged.h.
#include "comm_staged.h"

#include <string.h>

// A send or receive posted inside a group: its host copy lives until group_end.
typedef struct {
    void *dev, *host;
    size_t bytes;
    int is_recv;
} staged_p2p;

typedef struct {
    comm *inner;
    backend *be;
    char *stage[2];     // host staging, grown on demand
    size_t cap[2];
    staged_p2p *p2p;    // inside a group
    int n_p2p, cap_p2p, in_group;
} staged_ctx;

static staged_ctx *ctx_of(comm *c) { return c->ctx; }

static void *stage(staged_ctx *x, int which, size_t bytes) {
    if (bytes > x->cap[which]) {
        free(x->stage[which]);
        x->stage[which] = xmalloc(bytes);
        x->cap[which] = bytes;
    }
    return x->stage[which];
}

// Runs an inner call with the wrapper's step, and adds what inner counted to the wrapper's
// counters (which the trainer resets and reads).
#define INNER(c, g, call)                                                                     \
    do {                                                                                      \
        staged_ctx *x_ = ctx_of(c);                                                           \
        uint64_t before_[COMM_OP_COUNT];                                                      \
        memcpy(before_, x_->inner->groups[g].bytes, sizeof before_);                          \
        uint64_t calls_[COMM_OP_COUNT];                                                       \
        memcpy(calls_, x_->inner->groups[g].calls, sizeof calls_);                            \
        x_->inner->step = (c)->step;                                                          \
        tri_status rc_ = (call);                                                              \
        for (int op_ = 0; op_ < COMM_OP_COUNT; op_++) {                                       \
            (c)->groups[g].bytes[op_] += x_->inner->groups[g].bytes[op_] - before_[op_];      \
            (c)->groups[g].calls[op_] += x_->inner->groups[g].calls[op_] - calls_[op_];       \
        }                                                                                     \
        TRI_CHECK(rc_);                                                                       \
    } while (0)

// all_reduce (root < 0) and broadcast: one buffer staged in and back out.
static tri_status staged_in_place(comm *c, comm_group_id g, void *buf, size_t count,
                                  comm_dtype dt, comm_reduce_op op, int root) {
    staged_ctx *x = ctx_of(c);
    const size_t n = count * comm_dtype_size(dt);
    void *h = stage(x, 0, n);
    x->be->copy_to_host(x->be, h, buf, n);
    if (root < 0) INNER(c, g, x->inner->all_reduce(x->inner, g, h, count, dt, op));
    else INNER(c, g, x->inner->broadcast(x->inner, g, h, count, dt, root));
    x->be->copy_to_device(x->be, buf, h, n);
    return TRI_OK;
}

static tri_status staged_all_reduce(comm *c, comm_group_id g, void *buf, size_t count,
                                    comm_dtype dt, comm_reduce_op op) {
    return staged_in_place(c, g, buf, count, dt, op, -1);
}

// reduce_scatter (all blocks in, this rank's block out) and all_gather (the reverse).
static tri_status staged_blocks(comm *c, comm_group_id g, const void *send, void *recv,
                                size_t count, comm_dtype dt, int gather) {
    staged_ctx *x = ctx_of(c);
    const size_t block = count * comm_dtype_size(dt);
    const size_t all = block * (size_t)(c->groups[g].size > 0 ? c->groups[g].size : 1);
    const size_t in_bytes = gather ? block : all, out_bytes = gather ? all : block;
    void *in = stage(x, 0, in_bytes), *out = stage(x, 1, out_bytes);
    x->be->copy_to_host(x->be, in, send, in_bytes);
    if (gather) INNER(c, g, x->inner->all_gather(x->inner, g, in, out, count, dt));
    else INNER(c, g, x->inner->reduce_scatter(x->inner, g, in, out, count, dt));
    x->be->copy_to_device(x->be, recv, out, out_bytes);
    return TRI_OK;
}

static tri_status staged_reduce_scatter(comm *c, comm_group_id g, const void *send, void *recv,
                                        size_t count, comm_dtype dt) {
    return staged_blocks(c, g, send, recv, count, dt, 0);
}

static tri_status staged_all_gather(comm *c, comm_group_id g, const void *send, void *recv,
                                    size_t count, comm_dtype dt) {
    return staged_blocks(c, g, send, recv, count, dt, 1);
}

static tri_status staged_broadcast(comm *c, comm_group_id g, void *buf, size_t count,
                                   comm_dtype dt, int root) {
    return staged_in_place(c, g, buf, count, dt, COMM_REDUCE_SUM, root);
}

static tri_status staged_barrier(comm *c, comm_group_id g) {
    INNER(c, g, ctx_of(c)->inner->barrier(ctx_of(c)->inner, g));
    return TRI_OK;
}

// Sends and receives: outside a group each completes in the inner call; inside one the host
// copies stay until group_end, where received data goes to the device.
static tri_status staged_transfer(comm *c, comm_group_id g, void *buf, size_t count, comm_dtype dt,
                             int peer, int is_recv) {
    staged_ctx *x = ctx_of(c);
    const size_t n = count * comm_dtype_size(dt);
    void *h = x->in_group ? xmalloc(n ? n : 1) : stage(x, 0, n);
    if (x->in_group) {
        if (x->n_p2p == x->cap_p2p) {
            x->cap_p2p = x->cap_p2p ? 2 * x->cap_p2p : 8;
            x->p2p = realloc(x->p2p, (size_t)x->cap_p2p * sizeof *x->p2p);
        }
        x->p2p[x->n_p2p++] = (staged_p2p){buf, h, n, is_recv};
    }
    if (!is_recv) x->be->copy_to_host(x->be, h, buf, n);
    if (is_recv) INNER(c, g, x->inner->recv(x->inner, g, h, count, dt, peer));
    else INNER(c, g, x->inner->send(x->inner, g, h, count, dt, peer));
    if (is_recv && !x->in_group) x->be->copy_to_device(x->be, buf, h, n);
    return TRI_OK;
}

static tri_status staged_send(comm *c, comm_group_id g, const void *buf, size_t count,
                              comm_dtype dt, int peer) {
    return staged_transfer(c, g, (void *)buf, count, dt, peer, 0);
}

static tri_status staged_recv(comm *c, comm_group_id g, void *buf, size_t count, comm_dtype dt,
                              int peer) {
    return staged_transfer(c, g, buf, count, dt, peer, 1);
}

static tri_status staged_group_start(comm *c) {
    staged_ctx *x = ctx_of(c);
    x->in_group = 1;
    return x->inner->group_start(x->inner);
}

static tri_status staged_group_end(comm *c) {
    staged_ctx *x = ctx_of(c);
    tri_status rc = x->inner->group_end(x->inner);
    for (int i = 0; i < x->n_p2p; i++) {
        staged_p2p *p = &x->p2p[i];
        if (rc == TRI_OK && p->is_recv) x->be->copy_to_device(x->be, p->dev, p->host, p->bytes);
        free(p->host);
    }
    x->n_p2p = 0;
    x->in_group = 0;
    return rc;
}

static void staged_destroy(comm *c) {
    if (!c) return;
    staged_ctx *x = ctx_of(c);
    x->inner->destroy(x->inner);
    free(x->stage[0]);
    free(x->stage[1]);
    free(x->p2p);
    free(x);
    free(c);
}

tri_status comm_staged_create(comm **out, comm *inner, backend *be) {
    staged_ctx *x = xcalloc(1, sizeof *x);
    x->inner = inner, x->be = be;
    comm *c = xcalloc(1, sizeof *c);
    *c = *inner; // name, ranks, groups (sizes, ranks, handles), timeout
    c->name = "mpi (staged)";
    c->ctx = x;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        memset(c->groups[g].bytes, 0, sizeof c->groups[g].bytes);
        memset(c->groups[g].calls, 0, sizeof c->groups[g].calls);
    }
    c->inputs_ready = NULL, c->inputs_ready_ctx = NULL;
    c->all_reduce = staged_all_reduce;
    c->reduce_scatter = staged_reduce_scatter;
    c->all_gather = staged_all_gather;
    c->broadcast = staged_broadcast;
    c->barrier = staged_barrier;
    c->send = staged_send;
    c->recv = staged_recv;
    c->group_start = staged_group_start;
    c->group_end = staged_group_end;
    c->destroy = staged_destroy;
    *out = c;
    return TRI_OK;
}
