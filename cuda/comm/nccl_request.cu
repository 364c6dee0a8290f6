// nccl_request.cu: the requests of the NCCL comm backend: what one operation left running on
// its groups' streams, its done events, and the waiting for them (on the host against the
// timeout, or by compute_stream with the handed-off list watched by progress). The design is
// described at the top of cuda/comm/comm_nccl.cu; the shared state is in
// cuda/comm/comm_nccl_internal.h.
#include "comm_nccl_internal.h"

#include <string.h>
#include <time.h>

// ---- timeouts ----

// The timeout line for `p`, which runs on group g's stream, and its HINT.
static void report_timeout(comm *c, comm_group_id g, const nccl_pending *p, double waited) {
    nccl_ctx *x = ctx_of(c);
    nccl_group *grp = &x->groups[g];
    char ops[96] = "", ranks[256], waiting[256];
    size_t len = 0;
    for (int op = 0; op <= COMM_OP_COUNT; op++)
        if (p->ops & (1u << op))
            len += (size_t)snprintf(ops + len, sizeof ops - len, "%s%s", len ? "+" : "",
                                    nccl_op_name(op));
    nccl_format_ranks(ranks, sizeof ranks, grp->world_ranks, grp->n_world_ranks, -1);
    if (p->collective)
        nccl_format_ranks(waiting, sizeof waiting, grp->world_ranks, grp->n_world_ranks,
                          c->world_rank);
    else nccl_format_ranks(waiting, sizeof waiting, p->peers, p->n_peers, -1);
    nccl_print_prefixed(c,
                        "error: comm timeout after %.1f s: %s of %llu bytes on group %s (ranks %s) "
                        "at step %d; waiting for ranks %s",
                        waited, ops[0] ? ops : "operation", (unsigned long long)p->bytes,
                        comm_group_name(g), ranks, c->step, waiting);
    nccl_print_prefixed(c, "HINT: a rank waited for has died, is stuck, or issued a different "
                           "collective; its own log says which. NCCL_DEBUG=WARN shows NCCL's view; "
                           "system.comm_timeout_s sets the limit");
}

// Sleeps a little between polls: spin for the first millisecond (short collectives), then
// back off so that a long wait does not burn a core.
void nccl_poll_pause(double elapsed) {
    if (elapsed < 1e-3) return;
    struct timespec ts = {0, elapsed < 1.0 ? 50 * 1000L : 1000 * 1000L};
    nanosleep(&ts, NULL);
}

// Adds an operation to what p names in a timeout message.
static void note_pending(nccl_pending *p, int op, size_t bytes, int peer_world_rank) {
    p->ops |= 1u << op;
    p->bytes += bytes;
    if (peer_world_rank < 0) {
        p->collective = 1;
        return;
    }
    for (int i = 0; i < p->n_peers; i++)
        if (p->peers[i] == peer_world_rank) return;
    if (p->n_peers < MAX_PENDING_PEERS) p->peers[p->n_peers++] = peer_world_rank;
}

// ---- requests ----

nccl_request *nccl_request_get(nccl_ctx *x) {
    nccl_request *r = x->free_requests;
    if (r) {
        x->free_requests = r->next;
    } else {
        r = (nccl_request *)xcalloc(1, sizeof *r);
        r->all_next = x->all_requests;
        x->all_requests = r;
    }
    r->mask = 0;
    memset(r->what, 0, sizeof r->what);
    r->aside = NULL;
    r->next = NULL;
    return r;
}

// Back to the pool. An aside copy still held (its collective failed before it was enqueued)
// is freed on its stream.
void nccl_request_put(nccl_ctx *x, nccl_request *r) {
    if (r->aside) {
        cudaError_t err = cudaFreeAsync(r->aside, x->groups[r->aside_g].stream);
        if (err != cudaSuccess)
            cuda_report_cuda_error(err, "cudaFreeAsync(r->aside, stream)", __FILE__, __LINE__);
        r->aside = NULL;
    }
    r->next = x->free_requests;
    x->free_requests = r;
}

void nccl_free_requests(nccl_ctx *x) {
    while (x->all_requests) {
        nccl_request *r = x->all_requests;
        x->all_requests = r->all_next;
        for (int g = 0; g < COMM_GROUP_COUNT; g++)
            if (r->done[g]) (void)cudaEventDestroy(r->done[g]);
        free(r);
    }
    x->free_requests = x->handed_off = NULL;
}

void nccl_request_note(nccl_request *r, comm_group_id g, int op, size_t bytes,
                       int peer_world_rank) {
    r->mask |= 1u << g;
    note_pending(&r->what[g], op, bytes, peer_world_rank);
}

// Orders what is enqueued next on the streams of the groups in `mask` after the compute
// backend's work: on the device with compute_stream (an event recorded there, which those
// streams wait for; the event can be recorded again at once), else by inputs_ready (the
// compute backend's synchronize).
tri_status nccl_order_inputs(comm *c, unsigned mask) {
    nccl_ctx *x = ctx_of(c);
    if (!c->compute_stream) {
        if (c->inputs_ready) c->inputs_ready(c->inputs_ready_ctx);
        return TRI_OK;
    }
    CUDA_CHECK(cudaEventRecord(x->inputs_event, (cudaStream_t)c->compute_stream));
    for (int g = 0; g < COMM_GROUP_COUNT; g++)
        if (mask & (1u << g))
            CUDA_CHECK(cudaStreamWaitEvent(x->groups[g].stream, x->inputs_event, 0));
    return TRI_OK;
}

// One look at r's groups: *busy is a group still running it, or -1 when NCCL has enqueued
// its work everywhere (the communicator left ncclInProgress) and, with `completed`, its done
// events have fired. A failure is reported and aborts every communicator.
static tri_status request_test(comm *c, const nccl_request *r, int completed, int *busy) {
    nccl_ctx *x = ctx_of(c);
    *busy = -1;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (!(r->mask & (1u << g))) continue;
        if (completed) {
            cudaError_t err = cudaEventQuery(r->done[g]);
            if (err == cudaSuccess) continue;
            if (err != cudaErrorNotReady) {
                cuda_report_cuda_error(err, "cudaEventQuery(r->done[g])", __FILE__, __LINE__);
                nccl_abort_all(c);
                return TRI_ERR_COMM;
            }
        }
        nccl_group *grp = &x->groups[g];
        if (grp->nccl) {
            ncclResult_t state = ncclSuccess;
            ncclResult_t res = ncclCommGetAsyncError(grp->nccl, &state);
            if (res != ncclSuccess) state = res;
            if (state != ncclSuccess && state != ncclInProgress) {
                const char *detail = ncclGetLastError(grp->nccl);
                nccl_print_prefixed(c,
                                    "error: NCCL failed on group %s at step %d (device %d): "
                                    "%s%s%s",
                                    comm_group_name((comm_group_id)g), c->step, x->device,
                                    ncclGetErrorString(state), detail && detail[0] ? ": " : "",
                                    detail ? detail : "");
                nccl_abort_all(c);
                return TRI_ERR_COMM;
            }
            if (state == ncclInProgress) *busy = g;
        }
        if (completed) *busy = g; // its done event has not fired
    }
    return TRI_OK;
}

// Polls r (request_test) until it is enqueued or, with `completed`, done; a wait longer than
// comm->timeout_s is reported (naming the group, what runs there, the step and the ranks
// waited for) and aborts every communicator.
tri_status nccl_request_poll(comm *c, const nccl_request *r, int completed) {
    if (ctx_of(c)->aborted) {
        LOG_ERROR("waiting for an operation after the communicators were aborted by an earlier "
                  "failure");
        return TRI_ERR_COMM;
    }
    const double start = time_now_s();
    for (;;) {
        int busy;
        TRI_CHECK(request_test(c, r, completed, &busy));
        if (busy < 0) return TRI_OK;
        double elapsed = time_now_s() - start;
        if (c->timeout_s > 0 && elapsed > c->timeout_s) {
            report_timeout(c, (comm_group_id)busy, &r->what[busy], elapsed);
            flight_stall(elapsed); // the verdict (comm/flight.h), before the job ends
            nccl_abort_all(c);
            return TRI_ERR_COMM;
        }
        nccl_poll_pause(elapsed);
    }
}

// Once NCCL has enqueued r's work, records its done events after it on every stream of its
// mask, and frees an aside copy there, in stream order after the collective that reads it.
tri_status nccl_request_record(comm *c, nccl_request *r) {
    nccl_ctx *x = ctx_of(c);
    TRI_CHECK(nccl_request_poll(c, r, 0));
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (!(r->mask & (1u << g))) continue;
        if (!r->done[g]) CUDA_CHECK(cudaEventCreateWithFlags(&r->done[g], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(r->done[g], x->groups[g].stream));
    }
    if (r->aside) {
        CUDA_CHECK(cudaFreeAsync(r->aside, x->groups[r->aside_g].stream));
        r->aside = NULL;
    }
    return TRI_OK;
}

// The blocking end of an operation: records r's done events, waits for them on the host and
// puts r back in the pool.
tri_status nccl_request_finish(comm *c, nccl_request *r) {
    tri_status st = nccl_request_record(c, r);
    if (st == TRI_OK) st = nccl_request_poll(c, r, 1);
    nccl_request_put(ctx_of(c), r);
    return st;
}

// Completes a started request on the host (the blocking forms; wait without compute_stream).
static tri_status nccl_wait_on_host(comm *c, comm_request *req) {
    nccl_request *r = (nccl_request *)req->impl;
    if (!r) return TRI_OK;
    req->impl = NULL;
    tri_status st = nccl_request_poll(c, r, 1);
    nccl_request_put(ctx_of(c), r);
    return st;
}

// The requests handed to compute_stream are still watched: a complete one goes back to the
// pool; one past comm->timeout_s since its hand-off, or whose communicator failed, is
// reported and aborts every communicator (NCCL's kernels then end, and compute_stream with
// them), so that a lost peer cannot hang the compute backend. Quiet after an abort, which was
// reported when it happened.
static tri_status reap_handed_off(comm *c) {
    nccl_ctx *x = ctx_of(c);
    if (x->aborted) return TRI_ERR_COMM;
    const double now = time_now_s();
    nccl_request **link = &x->handed_off;
    while (*link) {
        nccl_request *r = *link;
        int busy;
        TRI_CHECK(request_test(c, r, 1, &busy));
        if (busy < 0) {
            *link = r->next;
            nccl_request_put(x, r);
            continue;
        }
        if (c->timeout_s > 0 && now - r->handed_at > c->timeout_s) {
            report_timeout(c, (comm_group_id)busy, &r->what[busy], now - r->handed_at);
            nccl_abort_all(c);
            return TRI_ERR_COMM;
        }
        link = &r->next;
    }
    return TRI_OK;
}

tri_status nccl_wait(comm *c, comm_request *req, int on_host) {
    nccl_request *r = (nccl_request *)req->impl;
    if (!r || on_host || !c->compute_stream) return nccl_wait_on_host(c, req);
    nccl_ctx *x = ctx_of(c);
    req->impl = NULL;
    tri_status st = TRI_OK;
    if (x->aborted) {
        LOG_ERROR("waiting for an operation after the communicators were aborted by an earlier "
                  "failure");
        st = TRI_ERR_COMM;
        goto fail;
    }
    for (int g = 0; g < COMM_GROUP_COUNT; g++)
        if (r->mask & (1u << g))
            CUDA_CHECK_GOTO(cudaStreamWaitEvent((cudaStream_t)c->compute_stream, r->done[g], 0), st,
                            fail);
    r->handed_at = time_now_s();
    r->next = x->handed_off;
    x->handed_off = r;
    return reap_handed_off(c);
fail:
    nccl_request_put(x, r);
    return st;
}

// A failure found here was reported, and fails every later call.
void nccl_progress(comm *c) { (void)reap_handed_off(c); }
