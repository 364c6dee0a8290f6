// comm_nccl.cu: the NCCL comm backend (DESIGN.md "Module boundaries", "Launch").
//
// One NCCL communicator per group of the mesh (rank = tp + TP * (dp + DP * pp)):
//   tp     same (dp, pp), ordered by tp
//   dp     same (tp, pp), ordered by dp
//   pp     same (tp, dp), ordered by pp
//   embed  first and last stage of the pipeline of the same (tp, dp) (the tied embedding);
//          a middle stage is in none (size 0), as in the MPI backend
//   mp     same dp (tp x pp, for norms), ordered by tp + TP * pp
//   world  every rank
// Rank 0 makes the world communicator's ncclUniqueId and shares it through launch_exchange
// (PMIx); the groups are split from the world with ncclCommSplit. Groups of one rank never
// touch NCCL (the layer, src/comm/comm_dispatch.c, never calls the backend for them), except
// in a world of one under the test hook TRIDENT_TEST_NCCL_ONE_RANK: there every group is a
// one-rank communicator that the layer calls, so that one GPU checks this backend. Every
// communicator is non-blocking (ncclConfig_t.blocking = 0), so that no NCCL call can hang
// the process: creation, every collective and the final flush are polled against a deadline
// of comm->timeout_s, and a timeout aborts every communicator and returns TRI_ERR_COMM (the
// caller exits with code 5) after naming the group, the collective, the step and the ranks
// waited for.
//
// Each group owns a CUDA stream (cudaStreamNonBlocking). An operation is ordered after the
// compute backend's work (a CUDA event recorded on comm->compute_stream and waited for by
// the group's stream, or without compute_stream the host synchronize of inputs_ready),
// enqueued on its group's stream, polled with ncclCommGetAsyncError until the non-blocking
// communicator has enqueued it (it leaves ncclInProgress), and followed there by a done
// event: together an nccl_request, which a start hands to the caller. `wait` on the host
// (the layer's blocking forms) polls cudaEventQuery and ncclCommGetAsyncError against the
// deadline; comm_wait with compute_stream makes that stream wait for the done event
// (cudaStreamWaitEvent) and returns at once: the request then stays on the handed-off list,
// which `progress` and every later `wait` look at (complete: back to the pool; past the
// deadline, or failed: reported, and every communicator aborted, which also frees
// compute_stream).
//
// Sends and receives posted in a group are collected and issued together by group_end_start,
// inside one ncclGroupStart/ncclGroupEnd; collectives called in between still run outside
// the NCCL group (as in the MPI backend).
//
// Buffers: device memory runs in place on the streams. Host memory (small values the trainer
// reduces from the host) is staged through device scratch and completes inside start (the
// request stays empty). An overlap NCCL has no in-place form for is copied aside with the
// stream-ordered allocator (cudaMallocAsync), freed on the stream after the collective, so
// that several may be in flight. In-place forms are comm.h's: reduce_scatter with
// send == recv (result in the first block) or recv == send + rank * count; all_gather with
// send == recv + rank * count. The layer counts the payload bytes.
//
// Device choice: the caller selects the GPU before comm_nccl_create (cuda_device_select:
// local_rank % device count); the communicators and streams belong to that device.
//
// Files: this one has the operations; cuda/comm/nccl_request.cu their requests and the
// waiting for them; cuda/comm/nccl_init.cu creates and tears down the communicators
// (comm_nccl_create); cuda/comm/comm_nccl_internal.h has the state they share;
// cuda/compute/cuda_device.cu selects the device.
#include "comm_nccl_internal.h"

#include <stdarg.h>
#include <string.h>

// ---- helpers ----

const char *nccl_op_name(int op) {
    static const char *names[COMM_OP_COUNT] = {"all_reduce", "reduce_scatter", "all_gather",
                                               "broadcast",  "send",           "recv"};
    return op >= 0 && op < COMM_OP_COUNT ? names[op] : "barrier";
}

// "0,1,2,3" (at most 16 shown, then "... (N ranks)"); skip < 0 or a rank to leave out.
void nccl_format_ranks(char *buf, size_t cap, const int *ranks, int n, int skip) {
    size_t len = 0;
    int shown = 0, total = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (ranks[i] == skip) continue;
        total++;
        if (shown == 16 || len + 16 > cap) continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", shown ? "," : "", ranks[i]);
        shown++;
    }
    if (shown < total && len + 32 < cap) snprintf(buf + len, cap - len, ",... (%d ranks)", total);
    if (total == 0) snprintf(buf, cap, "none");
}

// Every error of the NCCL backend starts with the full mesh prefix, rank 0 included, so that the
// lines of all ranks can be sorted out of one log.
void nccl_print_prefixed(comm *c, const char *fmt, ...) {
    nccl_ctx *x = ctx_of(c);
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[r%d tp%d dp%d pp%d] %s\n", c->world_rank, x->coord.tp, x->coord.dp,
            x->coord.pp, line);
    fflush(stderr);
}

// An NCCL call on a non-blocking communicator answers ncclSuccess or ncclInProgress when
// the operation was accepted; anything else is a failure, which aborts everything.
static tri_status check_enqueue(comm *c, ncclResult_t res, const char *stmt, int line) {
    if (res == ncclSuccess || res == ncclInProgress) return TRI_OK;
    cuda_report_nccl_error(res, stmt, __FILE__, line);
    nccl_abort_all(c);
    return TRI_ERR_COMM;
}
#define NCCL_ENQUEUE(c, call) TRI_CHECK(check_enqueue((c), (call), #call, __LINE__))
#define NCCL_ENQUEUE_GOTO(c, call, rc, label)                                                      \
    TRI_CHECK_GOTO(check_enqueue((c), (call), #call, __LINE__), rc, label)

// ---- checks ----

// The layer checked group and dtype; what is left is this backend's own state.
static tri_status check_usable(comm *c, comm_group_id g, int op) {
    if (ctx_of(c)->aborted) {
        LOG_ERROR("%s on group %s after the communicators were aborted by an earlier failure",
                  nccl_op_name(op), comm_group_name(g));
        return TRI_ERR_COMM;
    }
    return TRI_OK;
}

static ncclDataType_t nccl_dtype(tri_dtype dt) {
    switch (dt) {
    case DTYPE_FP32: return ncclFloat32;
    case DTYPE_FP64: return ncclFloat64;
    case DTYPE_INT64: return ncclInt64;
    case DTYPE_BF16: return ncclBfloat16;
    }
    return ncclFloat32; // unreachable: the layer rejects other values
}

// Host memory cannot be handed to NCCL: does p point to (pageable or pinned) host memory?
static int is_host_pointer(const void *p) {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost;
}

static size_t align_up(size_t n) { return (n + 255) & ~(size_t)255; }

// ---- collectives ----

typedef struct {
    size_t count;
    tri_dtype dt;
    comm_reduce_op op;
    int root;
} coll_args;

// Enqueues a collective on group g's stream, over device buffers send and recv.
typedef tri_status (*launch_fn)(comm *c, comm_group_id g, const void *send, void *recv,
                                const coll_args *a, nccl_request *r);

// Does [a, a+na) overlap [b, b+nb)?
static int overlaps(const void *a, size_t na, const void *b, size_t nb) {
    const char *pa = (const char *)a, *pb = (const char *)b;
    return pa < pb + nb && pb < pa + na;
}

// A copy of `bytes` of src for an overlap NCCL has no in-place form for: stream-ordered
// memory on the group's stream, held by r and freed there after the collective.
static tri_status copy_aside(comm *c, comm_group_id g, const void *src, size_t bytes,
                             nccl_request *r, const void **copy) {
    cudaStream_t stream = ctx_of(c)->groups[g].stream;
    CUDA_CHECK(cudaMallocAsync(&r->aside, bytes, stream));
    r->aside_g = g;
    CUDA_CHECK(cudaMemcpyAsync(r->aside, src, bytes, cudaMemcpyDeviceToDevice, stream));
    *copy = r->aside;
    return TRI_OK;
}

static tri_status launch_all_reduce(comm *c, comm_group_id g, const void *send, void *recv,
                                    const coll_args *a, nccl_request *r) {
    (void)r;
    nccl_group *grp = &ctx_of(c)->groups[g];
    ncclRedOp_t op = a->op == COMM_REDUCE_MAX ? ncclMax : ncclSum;
    NCCL_ENQUEUE(
        c, ncclAllReduce(send, recv, a->count, nccl_dtype(a->dt), op, grp->nccl, grp->stream));
    return TRI_OK;
}

static tri_status launch_reduce_scatter(comm *c, comm_group_id g, const void *send, void *recv,
                                        const coll_args *a, nccl_request *r) {
    nccl_group *grp = &ctx_of(c)->groups[g];
    const int n = c->groups[g].size, me = c->groups[g].rank;
    const size_t block = a->count * dtype_size(a->dt);
    if (send == recv) {
        // In place as in comm_mpi.c: the result lands in the first block. NCCL's in-place
        // form puts it in block `me`; move it afterwards, in stream order.
        char *mine = (char *)recv + (size_t)me * block;
        NCCL_ENQUEUE(c, ncclReduceScatter(send, mine, a->count, nccl_dtype(a->dt), ncclSum,
                                          grp->nccl, grp->stream));
        if (me != 0)
            CUDA_CHECK(cudaMemcpyAsync(recv, mine, block, cudaMemcpyDeviceToDevice, grp->stream));
        return TRI_OK;
    }
    if (recv != (const char *)send + (size_t)me * block &&
        overlaps(send, block * (size_t)n, recv, block))
        TRI_CHECK(copy_aside(c, g, send, block * (size_t)n, r, &send));
    NCCL_ENQUEUE(c, ncclReduceScatter(send, recv, a->count, nccl_dtype(a->dt), ncclSum, grp->nccl,
                                      grp->stream));
    return TRI_OK;
}

static tri_status launch_all_gather(comm *c, comm_group_id g, const void *send, void *recv,
                                    const coll_args *a, nccl_request *r) {
    nccl_group *grp = &ctx_of(c)->groups[g];
    const int n = c->groups[g].size, me = c->groups[g].rank;
    const size_t block = a->count * dtype_size(a->dt);
    // send == recv + me * block is NCCL's in-place form too; any other overlap is copied.
    if (send != (const char *)recv + (size_t)me * block &&
        overlaps(send, block, recv, block * (size_t)n))
        TRI_CHECK(copy_aside(c, g, send, block, r, &send));
    NCCL_ENQUEUE(c, ncclAllGather(send, recv, a->count, nccl_dtype(a->dt), grp->nccl, grp->stream));
    return TRI_OK;
}

static tri_status launch_broadcast(comm *c, comm_group_id g, const void *send, void *recv,
                                   const coll_args *a, nccl_request *r) {
    (void)r;
    nccl_group *grp = &ctx_of(c)->groups[g];
    NCCL_ENQUEUE(
        c, ncclBroadcast(send, recv, a->count, nccl_dtype(a->dt), a->root, grp->nccl, grp->stream));
    return TRI_OK;
}

// Starts collective `op` on group g (checked and counted by the caller; `payload` names it
// in a timeout message). Device buffers leave the request in flight in req. Host buffers
// are staged through device memory (both in one region for the in-place forms NCCL shares:
// all_reduce, broadcast, reduce_scatter's send == recv; all_gather's send == recv is an
// overlap, two regions) and complete here: copy in, launch, wait, copy out, wait. The region
// is the scratch made at creation when it fits (the trainer's host values: a few words),
// else stream-ordered memory on the group's stream, freed there after the copy out: never a
// cudaMalloc, which would synchronise the device in the middle of a step.
static tri_status start_collective(comm *c, comm_group_id g, int op, const void *send,
                                   size_t send_bytes, void *recv, size_t recv_bytes, size_t payload,
                                   launch_fn launch, const coll_args *a, comm_request *req) {
    nccl_ctx *x = ctx_of(c);
    nccl_group *grp = &x->groups[g];
    nccl_request *r = nccl_request_get(x);
    nccl_request_note(r, g, op, payload, -1);
    tri_status st = TRI_OK;
    void *own = NULL; // stream-ordered staging of host buffers larger than the scratch
    TRI_CHECK_GOTO(nccl_order_inputs(c, 1u << g), st, fail);
    if (!is_host_pointer(send) && !is_host_pointer(recv)) {
        TRI_CHECK_GOTO(launch(c, g, send, recv, a, r), st, fail);
        TRI_CHECK_GOTO(nccl_request_record(c, r), st, fail);
        req->impl = r;
        return TRI_OK;
    }
    LOG_DEBUG("%s on group %s: host buffers, staged through device memory", nccl_op_name(op),
              comm_group_name(g));
    {
        const int in_place = send == recv && op != COMM_OP_ALL_GATHER;
        const size_t larger = send_bytes > recv_bytes ? send_bytes : recv_bytes;
        const size_t need = in_place ? larger : align_up(send_bytes) + recv_bytes;
        char *stage = (char *)x->scratch;
        if (need > x->scratch_bytes) {
            CUDA_CHECK_GOTO(cudaMallocAsync((void **)&own, need, grp->stream), st, fail);
            stage = (char *)own;
        }
        char *dev_send = stage;
        char *dev_recv = in_place ? dev_send : dev_send + align_up(send_bytes);
        CUDA_CHECK_GOTO(cudaMemcpyAsync(dev_send, send, send_bytes, cudaMemcpyDefault, grp->stream),
                        st, fail);
        TRI_CHECK_GOTO(launch(c, g, dev_send, dev_recv, a, r), st, fail);
        TRI_CHECK_GOTO(nccl_request_record(c, r), st, fail);
        TRI_CHECK_GOTO(nccl_request_poll(c, r, 1), st, fail);
        // The stream is idle now, so a copy into pageable memory cannot block on the collective.
        CUDA_CHECK_GOTO(cudaMemcpyAsync(recv, dev_recv, recv_bytes, cudaMemcpyDefault, grp->stream),
                        st, fail);
        if (own) CUDA_CHECK_GOTO(cudaFreeAsync(own, grp->stream), st, fail);
        own = NULL;
        return nccl_request_finish(c, r);
    }
fail:
    if (own) (void)cudaFreeAsync(own, grp->stream);
    nccl_request_put(x, r);
    return st;
}

static tri_status nccl_all_reduce_start(comm *c, comm_group_id g, void *buf, size_t count,
                                        tri_dtype dt, comm_reduce_op op, comm_request *req) {
    TRI_CHECK(check_usable(c, g, COMM_OP_ALL_REDUCE));
    if (count == 0) return TRI_OK;
    const size_t bytes = count * dtype_size(dt);
    coll_args a = {count, dt, op, 0};
    return start_collective(c, g, COMM_OP_ALL_REDUCE, buf, bytes, buf, bytes, bytes,
                            launch_all_reduce, &a, req);
}

static tri_status nccl_reduce_scatter_start(comm *c, comm_group_id g, const void *send, void *recv,
                                            size_t count, tri_dtype dt, comm_request *req) {
    TRI_CHECK(check_usable(c, g, COMM_OP_REDUCE_SCATTER));
    if (count == 0) return TRI_OK;
    const size_t bytes = count * dtype_size(dt), all = bytes * (size_t)c->groups[g].size;
    coll_args a = {count, dt, COMM_REDUCE_SUM, 0};
    return start_collective(c, g, COMM_OP_REDUCE_SCATTER, send, all, recv, bytes, all,
                            launch_reduce_scatter, &a, req);
}

static tri_status nccl_all_gather_start(comm *c, comm_group_id g, const void *send, void *recv,
                                        size_t count, tri_dtype dt, comm_request *req) {
    TRI_CHECK(check_usable(c, g, COMM_OP_ALL_GATHER));
    if (count == 0) return TRI_OK;
    const size_t bytes = count * dtype_size(dt), all = bytes * (size_t)c->groups[g].size;
    coll_args a = {count, dt, COMM_REDUCE_SUM, 0};
    return start_collective(c, g, COMM_OP_ALL_GATHER, send, bytes, recv, all, all,
                            launch_all_gather, &a, req);
}

static tri_status nccl_broadcast_start(comm *c, comm_group_id g, void *buf, size_t count,
                                       tri_dtype dt, int root, comm_request *req) {
    TRI_CHECK(check_usable(c, g, COMM_OP_BROADCAST));
    if (count == 0) return TRI_OK;
    const size_t bytes = count * dtype_size(dt);
    coll_args a = {count, dt, COMM_REDUCE_SUM, root};
    return start_collective(c, g, COMM_OP_BROADCAST, buf, bytes, buf, bytes, bytes,
                            launch_broadcast, &a, req);
}

// NCCL has no barrier: an all-reduce of one word that every rank must join. It uses the
// device scratch, so it completes inside start (req stays empty).
static tri_status nccl_barrier_start(comm *c, comm_group_id g, comm_request *req) {
    (void)req;
    TRI_CHECK(check_usable(c, g, COMM_OP_COUNT));
    nccl_ctx *x = ctx_of(c);
    nccl_group *grp = &x->groups[g]; // the barrier's word: the scratch made at creation
    nccl_request *r = nccl_request_get(x);
    nccl_request_note(r, g, COMM_OP_COUNT, 0, -1);
    tri_status st = TRI_OK;
    CUDA_CHECK_GOTO(cudaMemsetAsync(x->scratch, 0, sizeof(float), grp->stream), st, fail);
    NCCL_ENQUEUE_GOTO(
        c, ncclAllReduce(x->scratch, x->scratch, 1, ncclFloat32, ncclSum, grp->nccl, grp->stream),
        st, fail);
    return nccl_request_finish(c, r);
fail:
    nccl_request_put(x, r);
    return st;
}

// reduce_scatter and all_gather over a group of one: a copy on the group's stream, complete
// before it returns.
static tri_status nccl_local_copy(comm *c, comm_group_id g, comm_op_id op, const void *send,
                                  void *recv, size_t bytes) {
    TRI_CHECK(check_usable(c, g, op));
    if (bytes == 0) return TRI_OK;
    nccl_ctx *x = ctx_of(c);
    nccl_request *r = nccl_request_get(x);
    nccl_request_note(r, g, op, 0, -1);
    tri_status st = TRI_OK;
    TRI_CHECK_GOTO(nccl_order_inputs(c, 1u << g), st, fail);
    CUDA_CHECK_GOTO(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDefault, x->groups[g].stream), st,
                    fail);
    return nccl_request_finish(c, r);
fail:
    nccl_request_put(x, r);
    return st;
}

// ---- point to point ----

// Collected for group_end_start (the layer checked the peer and counted the payload).
static tri_status nccl_p2p(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                           int peer, int op) {
    TRI_CHECK(check_usable(c, g, op));
    nccl_ctx *x = ctx_of(c);
    if (count > 0 && is_host_pointer(buf)) {
        LOG_ERROR("%s on group %s with a host buffer: the NCCL backend sends and receives "
                  "device memory only",
                  nccl_op_name(op), comm_group_name(g));
        return TRI_ERR_INTERNAL;
    }
    if (count == 0) return TRI_OK;
    if (x->n_p2p == x->cap_p2p) {
        x->cap_p2p = x->cap_p2p ? 2 * x->cap_p2p : 16;
        x->p2p = (nccl_p2p_op *)realloc(x->p2p, (size_t)x->cap_p2p * sizeof *x->p2p);
        TRI_ASSERT(x->p2p);
    }
    nccl_p2p_op *o = &x->p2p[x->n_p2p++];
    o->g = g;
    o->op = op;
    o->buf = buf;
    o->count = count;
    o->dt = dt;
    o->peer = peer;
    return TRI_OK;
}

static tri_status nccl_send(comm *c, comm_group_id g, const void *buf, size_t count, tri_dtype dt,
                            int peer) {
    return nccl_p2p(c, g, (void *)buf, count, dt, peer, COMM_OP_SEND);
}

static tri_status nccl_recv(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                            int peer) {
    return nccl_p2p(c, g, buf, count, dt, peer, COMM_OP_RECV);
}

static tri_status nccl_group_start(comm *c) {
    nccl_ctx *x = ctx_of(c);
    if (x->aborted) {
        LOG_ERROR("group_start after the communicators were aborted by an earlier failure");
        return TRI_ERR_COMM;
    }
    x->n_p2p = 0;
    return TRI_OK;
}

// Issues every collected send and receive inside one NCCL group, so that they progress
// together (both directions of a pipeline exchange in flight at once); the request in req
// completes them.
static tri_status nccl_group_end_start(comm *c, comm_request *req) {
    nccl_ctx *x = ctx_of(c);
    if (x->n_p2p == 0) return TRI_OK;
    nccl_request *r = nccl_request_get(x);
    unsigned mask = 0;
    for (int i = 0; i < x->n_p2p; i++) mask |= 1u << x->p2p[i].g;
    tri_status st = TRI_OK;
    if (x->aborted) {
        LOG_ERROR("group_end after the communicators were aborted by an earlier failure");
        st = TRI_ERR_COMM;
        goto fail;
    }
    TRI_CHECK_GOTO(nccl_order_inputs(c, mask), st, fail);
    NCCL_ENQUEUE_GOTO(c, ncclGroupStart(), st, fail);
    for (int i = 0; i < x->n_p2p; i++) {
        const nccl_p2p_op *o = &x->p2p[i];
        nccl_group *grp = &x->groups[o->g];
        nccl_request_note(r, o->g, o->op, o->count * dtype_size(o->dt), grp->world_ranks[o->peer]);
        ncclResult_t res =
            o->op == COMM_OP_SEND
                ? ncclSend(o->buf, o->count, nccl_dtype(o->dt), o->peer, grp->nccl, grp->stream)
                : ncclRecv(o->buf, o->count, nccl_dtype(o->dt), o->peer, grp->nccl, grp->stream);
        if (res != ncclSuccess && res != ncclInProgress) {
            (void)ncclGroupEnd(); // close the NCCL group before giving up
            st = check_enqueue(c, res, o->op == COMM_OP_SEND ? "ncclSend(...)" : "ncclRecv(...)",
                               __LINE__);
            goto fail;
        }
    }
    // ncclInProgress: accepted, still being launched on a non-blocking communicator.
    NCCL_ENQUEUE_GOTO(c, ncclGroupEnd(), st, fail);
    TRI_CHECK_GOTO(nccl_request_record(c, r), st, fail);
    x->n_p2p = 0;
    req->impl = r;
    return TRI_OK;
fail:
    x->n_p2p = 0;
    nccl_request_put(x, r);
    return st;
}

// ---- the table ----

const struct comm_iface nccl_iface = {
    /* .all_reduce_start     = */ nccl_all_reduce_start,
    /* .reduce_scatter_start = */ nccl_reduce_scatter_start,
    /* .all_gather_start     = */ nccl_all_gather_start,
    /* .broadcast_start      = */ nccl_broadcast_start,
    /* .barrier_start        = */ nccl_barrier_start,
    /* .send                 = */ nccl_send,
    /* .recv                 = */ nccl_recv,
    /* .group_start          = */ nccl_group_start,
    /* .group_end_start      = */ nccl_group_end_start,
    /* .wait                 = */ nccl_wait,
    /* .progress             = */ nccl_progress,
    /* .local_copy           = */ nccl_local_copy,
    /* .destroy              = */ nccl_destroy,
};
