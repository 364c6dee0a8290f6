// comm_backend.h: what a comm backend implements, and nothing else includes but the
// backends (comm_self.c, comm_mpi.c, comm_staged.c, cuda/comm/) and the layer
// (comm_dispatch.c). Callers use comm.h's functions.
//
// A backend fills in a `comm_iface` as a commented table (`/* .wait = */ mpi_wait,`) and
// points comm.iface at it. Before any entry is called the layer has:
//   - checked the group (known, this rank a member), the dtype, a root or a peer;
//   - counted the payload (comm.h's table), so that no backend counts anything;
//   - short-circuited a group of one: a collective entry is only called for a group of
//     two or more ranks (for every group when comm.one_rank_groups is set: the NCCL
//     backend's one-rank communicators under TRIDENT_TEST_NCCL_ONE_RANK);
//   - set req->impl to NULL before calling an entry that takes a request.
// The blocking forms are start + wait(on_host = 1); send and receive outside a group are
// group_start + send or recv + group_end_start + wait. So every entry that starts something
// leaves it in req->impl (or NULL when it completed inside), and nothing else.
#pragma once
#include "comm/comm.h"

struct comm_iface {
    // The collectives' starts, with comm.h's arguments and in-place rules.
    tri_status (*all_reduce_start)(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                                   comm_reduce_op op, comm_request *req);
    tri_status (*reduce_scatter_start)(comm *c, comm_group_id g, const void *send, void *recv,
                                       size_t count, tri_dtype dt, comm_request *req);
    tri_status (*all_gather_start)(comm *c, comm_group_id g, const void *send, void *recv,
                                   size_t count, tri_dtype dt, comm_request *req);
    tri_status (*broadcast_start)(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                                  int root, comm_request *req);
    tri_status (*barrier_start)(comm *c, comm_group_id g, comm_request *req);

    // Posts a send or receive inside the open group (never outside one): it starts with the
    // group's group_end_start. peer is a rank of g other than this rank's.
    tri_status (*send)(comm *c, comm_group_id g, const void *buf, size_t count, tri_dtype dt,
                       int peer);
    tri_status (*recv)(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt, int peer);
    // The outermost group_start and group_end only (the layer counts the nesting).
    tri_status (*group_start)(comm *c);
    tri_status (*group_end_start)(comm *c, comm_request *req);

    // Completes req (req->impl is set) and resets req->impl to NULL. on_host: the blocking
    // forms, which return only after the operation completed (a device backend waits for it
    // on the host); 0: comm_wait, where a device backend may instead make compute_stream wait
    // for it. Every request started is waited for exactly once.
    tri_status (*wait)(comm *c, comm_request *req, int on_host);
    void (*progress)(comm *c);

    // reduce_scatter or all_gather (op) on a group of one with send != recv: copies `bytes`
    // from send to recv (they may overlap), complete before it returns, as a start that
    // finished inside would be. NULL: memmove (host memory).
    tri_status (*local_copy)(comm *c, comm_group_id g, comm_op_id op, const void *send, void *recv,
                             size_t bytes);

    void (*destroy)(comm *c);
};
// A new comm of a backend: `name`, its table and context, this rank of the world, the
// timeout; groups empty (the backend fills them in), counters zero, no group open.
comm *comm_backend_new(const char *name, const struct comm_iface *iface, void *ctx, int world_rank,
                       int world_size, double timeout_s);

// A backend whose groups all have one rank (comm_self.c) may leave the collective starts,
// send and recv NULL: the layer never calls them there.
