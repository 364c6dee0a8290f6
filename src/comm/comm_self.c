// comm_self.c: the single-process backend (a world of one). Every group has one rank, so
// the layer (comm_dispatch.c) short-circuits every collective and refuses every send and
// receive before they reach a backend: what is left here is a group that is always empty
// and the copy of reduce_scatter and all_gather with send != recv.
#include "comm/comm_backend.h"

#include <string.h>

#include "compute/backend.h"

// ctx: the compute backend (NULL: host memory), for the copies.
static tri_status self_local_copy(comm *c, comm_group_id g, comm_op_id op, const void *send,
                                  void *recv, size_t bytes) {
    (void)g, (void)op;
    backend *be = c->ctx;
    if (be && be->device_memory) be->copy(be, recv, send, bytes);
    else if (bytes) memmove(recv, send, bytes); // an empty block may have NULL ends
    return TRI_OK;
}

static tri_status self_group_start(comm *c) {
    (void)c;
    return TRI_OK;
}

// A group here can hold no send or receive (the layer refuses them): it is always empty.
static tri_status self_group_end_start(comm *c, comm_request *req) {
    (void)c;
    req->impl = NULL;
    return TRI_OK;
}

static tri_status self_wait(comm *c, comm_request *req, int on_host) {
    (void)c, (void)on_host;
    TRI_ASSERT(req->impl == NULL); // nothing of this backend is ever in flight
    return TRI_OK;
}

static void self_progress(comm *c) { (void)c; }

static void self_destroy(comm *c) { free(c); }

static const struct comm_iface self_iface = {
    /* .all_reduce_start     = */ NULL, // every group has one rank: never called
    /* .reduce_scatter_start = */ NULL,
    /* .all_gather_start     = */ NULL,
    /* .broadcast_start      = */ NULL,
    /* .barrier_start        = */ NULL,
    /* .send                 = */ NULL,
    /* .recv                 = */ NULL,
    /* .group_start          = */ self_group_start,
    /* .group_end_start      = */ self_group_end_start,
    /* .wait                 = */ self_wait,
    /* .progress             = */ self_progress,
    /* .local_copy           = */ self_local_copy,
    /* .destroy              = */ self_destroy,
};

tri_status comm_self_create(comm **out, backend *be) {
    comm *c = comm_backend_new("self", &self_iface, be, 0, 1, 0);
    for (int g = 0; g < COMM_GROUP_COUNT; g++) c->groups[g] = (comm_group){.size = 1, .rank = 0};
    *out = c;
    return TRI_OK;
}
