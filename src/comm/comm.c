// comm.c: counters shared by every comm backend, and the single-process backend.
#include "comm/comm.h"

#include <string.h>

void comm_count(comm *c, comm_group_id g, comm_op_id op, size_t bytes) {
    c->groups[g].bytes[op] += bytes;
    c->groups[g].calls[op] += 1;
}

uint64_t comm_group_bytes(const comm *c, comm_group_id g) {
    uint64_t total = 0;
    for (int op = 0; op < COMM_OP_COUNT; op++) total += c->groups[g].bytes[op];
    return total;
}

void comm_counters_reset(comm *c) {
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        memset(c->groups[g].bytes, 0, sizeof c->groups[g].bytes);
        memset(c->groups[g].calls, 0, sizeof c->groups[g].calls);
    }
}

const char *comm_group_name(comm_group_id g) {
    static const char *names[COMM_GROUP_COUNT] = {"tp", "dp", "pp", "embed", "mp", "world"};
    return (unsigned)g < COMM_GROUP_COUNT ? names[g] : "?";
}

// ---- the single-process backend ----
// With one rank every collective leaves its data as it is (a gather or scatter over one
// rank is a copy). Payload bytes are still counted, as they would be by any backend: a
// group of one moves nothing over a wire, so the counters stay at zero by convention.

static tri_status self_all_reduce(comm *c, comm_group_id g, void *buf, size_t count,
                                  tri_dtype dt, comm_reduce_op op) {
    (void)c; (void)g; (void)buf; (void)count; (void)dt; (void)op;
    return TRI_OK;
}

static tri_status self_reduce_scatter(comm *c, comm_group_id g, const void *send, void *recv,
                                      size_t count, tri_dtype dt) {
    (void)c; (void)g;
    if (send != recv) memmove(recv, send, count * dtype_size(dt));
    return TRI_OK;
}

static tri_status self_all_gather(comm *c, comm_group_id g, const void *send, void *recv,
                                  size_t count, tri_dtype dt) {
    (void)c; (void)g;
    if (send != recv) memmove(recv, send, count * dtype_size(dt));
    return TRI_OK;
}

static tri_status self_broadcast(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                                 int root) {
    (void)c; (void)g; (void)buf; (void)count; (void)dt; (void)root;
    return TRI_OK;
}

static tri_status self_barrier(comm *c, comm_group_id g) {
    (void)c; (void)g;
    return TRI_OK;
}

// A group of one has no peer to talk to: a send or receive here is a schedule bug.
static tri_status self_p2p(comm *c, comm_group_id g, const void *buf, size_t count, tri_dtype dt,
                           int peer) {
    (void)c; (void)buf; (void)count; (void)dt;
    LOG_ERROR("point-to-point with rank %d of group %s in a single-process run", peer,
              comm_group_name(g));
    return TRI_ERR_INTERNAL;
}

static tri_status self_recv(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                            int peer) {
    return self_p2p(c, g, buf, count, dt, peer);
}

static tri_status self_group(comm *c) {
    (void)c;
    return TRI_OK;
}

// The non-blocking forms complete inside start, as on every group of one.
static tri_status self_all_reduce_start(comm *c, comm_group_id g, void *buf, size_t count,
                                        tri_dtype dt, comm_reduce_op op, comm_request *req) {
    req->impl = NULL;
    return self_all_reduce(c, g, buf, count, dt, op);
}

static tri_status self_reduce_scatter_start(comm *c, comm_group_id g, const void *send,
                                            void *recv, size_t count, tri_dtype dt,
                                            comm_request *req) {
    req->impl = NULL;
    return self_reduce_scatter(c, g, send, recv, count, dt);
}

static tri_status self_all_gather_start(comm *c, comm_group_id g, const void *send, void *recv,
                                        size_t count, tri_dtype dt, comm_request *req) {
    req->impl = NULL;
    return self_all_gather(c, g, send, recv, count, dt);
}

// A group here can hold no send or receive (self_p2p refuses them): it is always empty.
static tri_status self_group_end_start(comm *c, comm_request *req) {
    (void)c;
    req->impl = NULL;
    return TRI_OK;
}

static tri_status self_wait(comm *c, comm_request *req) {
    (void)c;
    TRI_ASSERT(req->impl == NULL); // nothing of this backend is ever in flight
    return TRI_OK;
}

static void self_progress(comm *c) { (void)c; }

static void self_destroy(comm *c) { free(c); }

tri_status comm_self_create(comm **out) {
    comm *c = xcalloc(1, sizeof *c);
    *c = (comm){
        /* .name           = */ "self",
        /* .ctx            = */ NULL,
        /* .world_rank     = */ 0,
        /* .world_size     = */ 1,
        /* .groups         = */ {{0}},
        /* .timeout_s      = */ 0,
        /* .step           = */ 0,
        /* .inputs_ready   = */ NULL,
        /* .inputs_ready_ctx = */ NULL,
        /* .compute_stream = */ NULL,
        /* .all_reduce     = */ self_all_reduce,
        /* .reduce_scatter = */ self_reduce_scatter,
        /* .all_gather     = */ self_all_gather,
        /* .broadcast      = */ self_broadcast,
        /* .barrier        = */ self_barrier,
        /* .send           = */ self_p2p,
        /* .recv           = */ self_recv,
        /* .group_start    = */ self_group,
        /* .group_end      = */ self_group,
        /* .all_reduce_start     = */ self_all_reduce_start,
        /* .reduce_scatter_start = */ self_reduce_scatter_start,
        /* .all_gather_start     = */ self_all_gather_start,
        /* .group_end_start      = */ self_group_end_start,
        /* .wait           = */ self_wait,
        /* .progress       = */ self_progress,
        /* .destroy        = */ self_destroy,
    };
    for (int g = 0; g < COMM_GROUP_COUNT; g++) c->groups[g] = (comm_group){.size = 1, .rank = 0};
    *out = c;
    return TRI_OK;
}
