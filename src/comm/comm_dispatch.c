// comm_dispatch.c: the functions of comm.h over the backend table of comm_backend.h:
// argument checks, payload counting and the short-circuit of a group of one, done once for
// every backend, then a call through the table; every blocking form as its start plus a
// wait on the host. Every operation that reaches a backend passes the flight recorder here
// (comm/flight.h): posted before the backend's start, started after it, completed after the
// wait.
#include "comm/comm.h"

#include <string.h>

#include "comm/comm_backend.h"
#include "comm/flight.h"

// Adds one call's payload to the group's counters: the only place that counts. A group of
// one moves nothing and counts nothing, also where its calls reach the backend.
static void comm_count(comm *c, comm_group_id g, comm_op_id op, size_t bytes) {
    if (c->groups[g].size == 1) return;
    c->groups[g].bytes[op] += bytes;
    c->groups[g].calls[op] += 1;
}

uint64_t comm_group_bytes(const comm *c, comm_group_id g) {
    uint64_t total = 0;
    for (int op = 0; op < COMM_OP_COUNT; op++) total += c->groups[g].bytes[op];
    return total;
}

void comm_counters_reset(comm *c) {
    c->wait_s = 0.0;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        memset(c->groups[g].bytes, 0, sizeof c->groups[g].bytes);
        memset(c->groups[g].calls, 0, sizeof c->groups[g].calls);
    }
}

const char *comm_group_name(comm_group_id g) {
    static const char *names[COMM_GROUP_COUNT] = {"tp", "dp", "pp", "embed", "mp", "world"};
    return (unsigned)g < COMM_GROUP_COUNT ? names[g] : "?";
}

// ---- checks ----

// A known group of which this rank is a member (not the embedding group of a middle
// pipeline stage, which has size 0), and a known dtype; a caller's bug otherwise.
static tri_status check_call(const comm *c, comm_group_id g, tri_dtype dt, const char *what) {
    if ((unsigned)g >= COMM_GROUP_COUNT) {
        LOG_ERROR("%s on an unknown group %d", what, (int)g);
        return TRI_ERR_INTERNAL;
    }
    if (c->groups[g].size == 0) {
        // The pp group's rank is the pipeline stage.
        LOG_ERROR("%s on group %s, of which rank %d (pipeline stage %d) is not a member", what,
                  comm_group_name(g), c->world_rank, c->groups[COMM_GROUP_PP].rank);
        return TRI_ERR_INTERNAL;
    }
    if (dtype_size(dt) == 0) {
        LOG_ERROR("%s on group %s with an unknown dtype %d", what, comm_group_name(g), (int)dt);
        return TRI_ERR_INTERNAL;
    }
    return TRI_OK;
}

// A group of one that the layer answers itself (no backend call): every group of one but
// under the NCCL one-rank test hook (comm.one_rank_groups).
static int alone(const comm *c, comm_group_id g) {
    return c->groups[g].size == 1 && !c->one_rank_groups;
}

// After a backend's start of flight records [first, first + n): started; completed when the
// start completed it inside; else req takes them to its wait.
static tri_status flight_after_start(comm_request *req, uint64_t first, uint64_t n, tri_status st) {
    req->flight_first = req->flight_n = 0;
    if (!first || st != TRI_OK) return st;
    flight_started(first, n);
    if (!req->impl) flight_completed(first, n);
    else req->flight_first = first, req->flight_n = n;
    return st;
}

// The backend's wait of req, between the recorder's marks.
static tri_status wait_recorded(comm *c, comm_request *req, int on_host) {
    const uint64_t first = req->flight_first, n = req->flight_n;
    req->flight_first = req->flight_n = 0;
    flight_waiting(first, n);
    const double t0 = time_now_s();
    tri_status st = c->iface->wait(c, req, on_host);
    c->wait_s += time_now_s() - t0;
    flight_waiting(0, 0);
    if (st == TRI_OK) flight_completed(first, n);
    return st;
}

// The blocking end of what a start left in req.
static tri_status wait_on_host(comm *c, comm_request *req) {
    if (!req->impl) return TRI_OK;
    return wait_recorded(c, req, 1);
}

// reduce_scatter and all_gather on a group of one: this rank's block, where it goes.
static tri_status local_copy(comm *c, comm_group_id g, comm_op_id op, const void *send, void *recv,
                             size_t bytes) {
    if (send == recv) return TRI_OK;
    if (c->iface->local_copy) return c->iface->local_copy(c, g, op, send, recv, bytes);
    if (bytes) memmove(recv, send, bytes); // an empty block may have NULL ends
    return TRI_OK;
}

// ---- non-blocking forms ----

tri_status comm_all_reduce_start(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                                 comm_reduce_op op, comm_request *req) {
    req->impl = NULL;
    TRI_CHECK(check_call(c, g, dt, "all_reduce"));
    if (alone(c, g)) return TRI_OK;
    comm_count(c, g, COMM_OP_ALL_REDUCE, count * dtype_size(dt));
    const uint64_t rec = flight_post(g, COMM_OP_ALL_REDUCE, count * dtype_size(dt), dt, -1);
    return flight_after_start(req, rec, 1,
                              c->iface->all_reduce_start(c, g, buf, count, dt, op, req));
}

// reduce_scatter and all_gather: one block of `count` per rank, counted as the whole (the
// send buffer of the one, the receive buffer of the other); a group of one copies its block.
static tri_status blocks_start(comm *c, comm_group_id g, comm_op_id op, const void *send,
                               void *recv, size_t count, tri_dtype dt, comm_request *req) {
    const int scatter = op == COMM_OP_REDUCE_SCATTER;
    req->impl = NULL;
    TRI_CHECK(check_call(c, g, dt, scatter ? "reduce_scatter" : "all_gather"));
    const int n = c->groups[g].size;
    const size_t block = count * dtype_size(dt);
    if (alone(c, g)) return local_copy(c, g, op, send, recv, block);
    comm_count(c, g, op, block * (size_t)n);
    const uint64_t rec = flight_post(g, op, block * (size_t)n, dt, -1);
    tri_status st = scatter ? c->iface->reduce_scatter_start(c, g, send, recv, count, dt, req)
                            : c->iface->all_gather_start(c, g, send, recv, count, dt, req);
    return flight_after_start(req, rec, 1, st);
}

tri_status comm_reduce_scatter_start(comm *c, comm_group_id g, const void *send, void *recv,
                                     size_t count, tri_dtype dt, comm_request *req) {
    return blocks_start(c, g, COMM_OP_REDUCE_SCATTER, send, recv, count, dt, req);
}

tri_status comm_all_gather_start(comm *c, comm_group_id g, const void *send, void *recv,
                                 size_t count, tri_dtype dt, comm_request *req) {
    return blocks_start(c, g, COMM_OP_ALL_GATHER, send, recv, count, dt, req);
}

tri_status comm_group_end_start(comm *c, comm_request *req) {
    req->impl = NULL;
    if (c->group_depth == 0) {
        LOG_ERROR("group_end without a matching group_start");
        return TRI_ERR_INTERNAL;
    }
    if (--c->group_depth > 0) return TRI_OK; // nested: the outermost takes its operations
    uint64_t first, n;
    flight_p2p_pending(&first, &n);
    return flight_after_start(req, first, n, c->iface->group_end_start(c, req));
}

tri_status comm_wait(comm *c, comm_request *req) {
    if (!req->impl) return TRI_OK;
    return wait_recorded(c, req, 0);
}

void comm_progress(comm *c) { c->iface->progress(c); }

// ---- blocking forms: start + wait ----

tri_status comm_all_reduce(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                           comm_reduce_op op) {
    comm_request req;
    TRI_CHECK(comm_all_reduce_start(c, g, buf, count, dt, op, &req));
    return wait_on_host(c, &req);
}

tri_status comm_reduce_scatter(comm *c, comm_group_id g, const void *send, void *recv, size_t count,
                               tri_dtype dt) {
    comm_request req;
    TRI_CHECK(comm_reduce_scatter_start(c, g, send, recv, count, dt, &req));
    return wait_on_host(c, &req);
}

tri_status comm_all_gather(comm *c, comm_group_id g, const void *send, void *recv, size_t count,
                           tri_dtype dt) {
    comm_request req;
    TRI_CHECK(comm_all_gather_start(c, g, send, recv, count, dt, &req));
    return wait_on_host(c, &req);
}

tri_status comm_broadcast(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                          int root) {
    TRI_CHECK(check_call(c, g, dt, "broadcast"));
    const int n = c->groups[g].size;
    if (root < 0 || root >= n) {
        LOG_ERROR("broadcast on group %s from root %d, outside the group's %d ranks",
                  comm_group_name(g), root, n);
        return TRI_ERR_INTERNAL;
    }
    if (alone(c, g)) return TRI_OK;
    comm_count(c, g, COMM_OP_BROADCAST, count * dtype_size(dt));
    comm_request req = {NULL};
    const uint64_t rec = flight_post(g, COMM_OP_BROADCAST, count * dtype_size(dt), dt, -1);
    TRI_CHECK(flight_after_start(&req, rec, 1,
                                 c->iface->broadcast_start(c, g, buf, count, dt, root, &req)));
    return wait_on_host(c, &req);
}

tri_status comm_barrier(comm *c, comm_group_id g) {
    TRI_CHECK(check_call(c, g, DTYPE_FP32, "barrier"));
    if (alone(c, g)) return TRI_OK;
    comm_request req = {NULL};
    const uint64_t rec = flight_post(g, FLIGHT_OP_BARRIER, 0, DTYPE_FP32, -1);
    TRI_CHECK(flight_after_start(&req, rec, 1, c->iface->barrier_start(c, g, &req)));
    return wait_on_host(c, &req);
}

tri_status comm_group_start(comm *c) {
    if (c->group_depth == 0) TRI_CHECK(c->iface->group_start(c));
    c->group_depth++;
    return TRI_OK;
}

tri_status comm_group_end(comm *c) {
    comm_request req;
    TRI_CHECK(comm_group_end_start(c, &req));
    return wait_on_host(c, &req);
}

// ---- point-to-point ----

// Checks and counts one send or receive and posts it in the open group.
static tri_status post_p2p(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                           int peer, comm_op_id op) {
    const char *what = op == COMM_OP_SEND ? "send" : "recv";
    TRI_CHECK(check_call(c, g, dt, what));
    const int n = c->groups[g].size;
    if (peer < 0 || peer >= n || peer == c->groups[g].rank) {
        // A group of one has no peer; talking to oneself is a schedule bug.
        LOG_ERROR("%s with rank %d of group %s (size %d, this rank %d): no such peer", what, peer,
                  comm_group_name(g), n, c->groups[g].rank);
        return TRI_ERR_INTERNAL;
    }
    comm_count(c, g, op, count * dtype_size(dt));
    flight_post(g, op, count * dtype_size(dt), dt, peer);
    return op == COMM_OP_SEND ? c->iface->send(c, g, buf, count, dt, peer)
                              : c->iface->recv(c, g, buf, count, dt, peer);
}

// Inside a group: posted, started by the outermost group end. Outside: a group of its own,
// complete before it returns.
static tri_status p2p(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt, int peer,
                      comm_op_id op) {
    if (c->group_depth > 0) return post_p2p(c, g, buf, count, dt, peer, op);
    TRI_CHECK(comm_group_start(c));
    tri_status st = post_p2p(c, g, buf, count, dt, peer, op);
    tri_status end = comm_group_end(c); // also after a failed post: the group must close
    return st != TRI_OK ? st : end;
}

tri_status comm_send(comm *c, comm_group_id g, const void *buf, size_t count, tri_dtype dt,
                     int peer) {
    return p2p(c, g, (void *)buf, count, dt, peer, COMM_OP_SEND);
}

tri_status comm_recv(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt, int peer) {
    return p2p(c, g, buf, count, dt, peer, COMM_OP_RECV);
}

comm *comm_backend_new(const char *name, const struct comm_iface *iface, void *ctx, int world_rank,
                       int world_size, double timeout_s) {
    comm *c = xcalloc(1, sizeof *c);
    c->name = name;
    c->iface = iface;
    c->ctx = ctx;
    c->world_rank = world_rank;
    c->world_size = world_size;
    c->timeout_s = timeout_s;
    return c;
}

void comm_destroy(comm *c) {
    if (c) c->iface->destroy(c);
}
