// comm_nccl.cu: the NCCL comm backend (DESIGN.md "Module boundaries", "Launch").
//
// One NCCL communicator per group of the mesh (rank = tp + TP * (dp + DP * pp)):
//   tp     same (dp, pp), ordered by tp
//   dp     same (tp, pp), ordered by dp
//   pp     same (tp, dp), ordered by pp
//   embed  first and last stage of the pipeline of the same (tp, dp) (the tied embedding);
//          a middle stage sees a group of one (itself), as in the MPI backend, so that a
//          collective on it is the identity on every rank
//   mp     same dp (tp x pp, for norms), ordered by tp + TP * pp
//   world  every rank
// Rank 0 makes the world communicator's ncclUniqueId and shares it through launch_exchange
// (PMIx); the groups are split from the world with ncclCommSplit. Groups of one rank never
// touch NCCL. Every communicator is non-blocking (ncclConfig_t.blocking = 0), so that no
// NCCL call can hang the process: creation, every collective and the final flush are polled
// against a deadline of comm->timeout_s, and a timeout aborts every communicator and
// returns TRI_ERR_COMM (the caller exits with code 5) after naming the group, the
// collective, the step and the ranks waited for.
//
// Each group owns a CUDA stream (cudaStreamNonBlocking). A collective is enqueued on its
// group's stream and waited for before the call returns, polling ncclCommGetAsyncError (is
// the operation enqueued, or did it fail?) and then cudaStreamQuery (has it completed on the
// device?). Sends and receives between group_start and group_end are collected and issued
// together by the outermost group_end, inside one ncclGroupStart/ncclGroupEnd, then waited
// for; collectives called in between still complete before they return (as in the MPI
// backend), since they run outside the NCCL group.
//
// Payload bytes (comm_count) are those of comm_mpi.c: all_reduce and broadcast count * size,
// reduce_scatter the send buffer (count * group size * size), all_gather the receive buffer
// (count * group size * size), send and recv count * size, barrier nothing. Groups of one
// are short-circuited (identity, or a copy for reduce_scatter and all_gather) and count
// nothing. In-place forms, as in comm_mpi.c: reduce_scatter with send == recv (result in the
// first block) or recv == send + rank * count; all_gather with send == recv + rank * count.
//
// Device choice: the caller selects the GPU before comm_nccl_create (cuda_device_select:
// local_rank % device count); the communicators and streams belong to that device.
//
// Files: this one has the operations and the waiting for them; cuda/nccl_init.cu creates
// and tears down the communicators (comm_nccl_create); cuda/comm_nccl_internal.h has the
// state they share; cuda/cuda_device.cu selects the device.
#include "comm_nccl_internal.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

// ---- helpers ----

static const char *op_name(int op) {
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
    if (shown < total && len + 32 < cap)
        snprintf(buf + len, cap - len, ",... (%d ranks)", total);
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

static void report_timeout(comm *c, comm_group_id g, double waited) {
    nccl_ctx *x = ctx_of(c);
    nccl_group *grp = &x->groups[g];
    const nccl_pending *p = &grp->pending;
    char ops[96] = "", ranks[256], waiting[256];
    size_t len = 0;
    for (int op = 0; op <= COMM_OP_COUNT; op++)
        if (p->ops & (1u << op))
            len += (size_t)snprintf(ops + len, sizeof ops - len, "%s%s", len ? "+" : "",
                                    op_name(op));
    nccl_format_ranks(ranks, sizeof ranks, grp->world_ranks, grp->n_world_ranks, -1);
    if (p->collective)
        nccl_format_ranks(waiting, sizeof waiting, grp->world_ranks, grp->n_world_ranks,
                          c->world_rank);
    else
        nccl_format_ranks(waiting, sizeof waiting, p->peers, p->n_peers, -1);
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

// Waits until every group in `mask` has finished its pending work: NCCL has enqueued it
// (the non-blocking communicator's state leaves ncclInProgress) and the stream has run it.
static tri_status wait_groups(comm *c, unsigned mask) {
    nccl_ctx *x = ctx_of(c);
    const double start = time_now_s();
    for (;;) {
        int busy_group = -1;
        for (int g = 0; g < COMM_GROUP_COUNT; g++) {
            if (!(mask & (1u << g))) continue;
            nccl_group *grp = &x->groups[g];
            if (grp->nccl) {
                ncclResult_t state = ncclSuccess;
                ncclResult_t res = ncclCommGetAsyncError(grp->nccl, &state);
                if (res != ncclSuccess) state = res;
                if (state == ncclInProgress) {
                    busy_group = g;
                    continue;
                }
                if (state != ncclSuccess) {
                    const char *detail = ncclGetLastError(grp->nccl);
                    nccl_print_prefixed(c, "error: NCCL failed on group %s at step %d (device %d): "
                                           "%s%s%s",
                                        comm_group_name((comm_group_id)g), c->step, x->device,
                                        ncclGetErrorString(state), detail && detail[0] ? ": " : "",
                                        detail ? detail : "");
                    nccl_abort_all(c);
                    return TRI_ERR_COMM;
                }
            }
            cudaError_t err = cudaStreamQuery(grp->stream);
            if (err == cudaErrorNotReady) {
                busy_group = g;
            } else if (err != cudaSuccess) {
                cuda_report_cuda_error(err, "cudaStreamQuery(group stream)", __FILE__, __LINE__);
                nccl_abort_all(c);
                return TRI_ERR_COMM;
            } else {
                mask &= ~(1u << g);
                memset(&grp->pending, 0, sizeof grp->pending);
            }
        }
        if (busy_group < 0) return TRI_OK;
        double elapsed = time_now_s() - start;
        if (c->timeout_s > 0 && elapsed > c->timeout_s) {
            report_timeout(c, (comm_group_id)busy_group, elapsed);
            nccl_abort_all(c);
            return TRI_ERR_COMM;
        }
        nccl_poll_pause(elapsed);
    }
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

static void note_pending(nccl_group *grp, int op, size_t bytes, int peer_world_rank) {
    nccl_pending *p = &grp->pending;
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

static tri_status finish(comm *c, comm_group_id g) { return wait_groups(c, 1u << g); }

static tri_status check_call(comm *c, comm_group_id g, int op, comm_dtype dt) {
    nccl_ctx *x = ctx_of(c);
    if (c->inputs_ready) c->inputs_ready(c->inputs_ready_ctx); // the compute stream is done
    if (x->aborted) {
        LOG_ERROR("%s on group %s after the communicators were aborted by an earlier failure",
                  op_name(op), comm_group_name(g));
        return TRI_ERR_COMM;
    }
    if ((unsigned)g >= COMM_GROUP_COUNT) {
        LOG_ERROR("%s on an unknown group %d", op_name(op), (int)g);
        return TRI_ERR_INTERNAL;
    }
    if (comm_dtype_size(dt) == 0) {
        LOG_ERROR("%s on group %s with an unknown dtype %d", op_name(op), comm_group_name(g),
                  (int)dt);
        return TRI_ERR_INTERNAL;
    }
    return TRI_OK;
}

static ncclDataType_t nccl_dtype(comm_dtype dt) {
    switch (dt) {
    case COMM_DTYPE_F32: return ncclFloat32;
    case COMM_DTYPE_F64: return ncclFloat64;
    case COMM_DTYPE_I64: return ncclInt64;
    case COMM_DTYPE_BF16: return ncclBfloat16;
    }
    return ncclFloat32; // unreachable: check_call rejects other values
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

// The device staging buffer holds at least `bytes` (grown by reallocation; only outside a
// group, when no operation is in flight).
static tri_status scratch_reserve(nccl_ctx *x, size_t bytes) {
    if (x->scratch_bytes >= bytes) return TRI_OK;
    if (x->scratch) CUDA_CHECK(cudaFree(x->scratch));
    x->scratch = NULL;
    x->scratch_bytes = 0;
    size_t want = bytes < 4096 ? 4096 : bytes;
    CUDA_CHECK(cudaMalloc(&x->scratch, want));
    x->scratch_bytes = want;
    return TRI_OK;
}

static size_t align_up(size_t n) { return (n + 255) & ~(size_t)255; }

// A collective whose buffers may live on the host. If either does, both are staged in
// device scratch (one region when send == recv): copy in, run `launch` on the device
// copies, wait, copy out, wait.
typedef tri_status (*launch_fn)(comm *c, comm_group_id g, const void *send, void *recv,
                                const void *arg);

static tri_status run_staged(comm *c, comm_group_id g, int op, const void *send,
                             size_t send_bytes, void *recv, size_t recv_bytes, launch_fn launch,
                             const void *arg) {
    nccl_ctx *x = ctx_of(c);
    nccl_group *grp = &x->groups[g];
    if (!is_host_pointer(send) && !is_host_pointer(recv)) {
        TRI_CHECK(launch(c, g, send, recv, arg));
        return finish(c, g);
    }
    LOG_DEBUG("%s on group %s: host buffers, staged through device memory", op_name(op),
              comm_group_name(g));
    // One region for the in-place forms that NCCL shares (all_reduce, broadcast, and
    // reduce_scatter's send == recv); all_gather's send == recv is an overlap: two regions.
    const int in_place = send == recv && op != COMM_OP_ALL_GATHER;
    const size_t larger = send_bytes > recv_bytes ? send_bytes : recv_bytes;
    TRI_CHECK(scratch_reserve(x, in_place ? larger : align_up(send_bytes) + recv_bytes));
    char *dev_send = (char *)x->scratch;
    char *dev_recv = in_place ? dev_send : dev_send + align_up(send_bytes);
    CUDA_CHECK(cudaMemcpyAsync(dev_send, send, send_bytes, cudaMemcpyDefault, grp->stream));
    TRI_CHECK(launch(c, g, dev_send, dev_recv, arg));
    TRI_CHECK(wait_groups(c, 1u << g));
    // The stream is idle now, so a copy into pageable memory cannot block on the collective.
    note_pending(grp, op, 0, -1);
    CUDA_CHECK(cudaMemcpyAsync(recv, dev_recv, recv_bytes, cudaMemcpyDefault, grp->stream));
    return wait_groups(c, 1u << g);
}

// ---- collectives ----

typedef struct { size_t count; comm_dtype dt; comm_reduce_op op; int root; } coll_args;

// Does [a, a+na) overlap [b, b+nb)?
static int overlaps(const void *a, size_t na, const void *b, size_t nb) {
    const char *pa = (const char *)a, *pb = (const char *)b;
    return pa < pb + nb && pb < pa + na;
}

// A device copy of `bytes` of src in scratch, on the group's stream (for an overlap NCCL has
// no in-place form for). Only called on device buffers, so scratch is not staging them.
static tri_status copy_to_scratch(comm *c, comm_group_id g, const void *src, size_t bytes,
                                  const void **copy) {
    nccl_ctx *x = ctx_of(c);
    TRI_CHECK(scratch_reserve(x, bytes));
    CUDA_CHECK(cudaMemcpyAsync(x->scratch, src, bytes, cudaMemcpyDeviceToDevice,
                               x->groups[g].stream));
    *copy = x->scratch;
    return TRI_OK;
}

static tri_status launch_all_reduce(comm *c, comm_group_id g, const void *send, void *recv,
                                    const void *arg) {
    const coll_args *a = (const coll_args *)arg;
    nccl_group *grp = &ctx_of(c)->groups[g];
    ncclRedOp_t op = a->op == COMM_REDUCE_MAX ? ncclMax : ncclSum;
    NCCL_ENQUEUE(c, ncclAllReduce(send, recv, a->count, nccl_dtype(a->dt), op, grp->nccl,
                                  grp->stream));
    return TRI_OK;
}

static tri_status launch_reduce_scatter(comm *c, comm_group_id g, const void *send, void *recv,
                                        const void *arg) {
    const coll_args *a = (const coll_args *)arg;
    nccl_group *grp = &ctx_of(c)->groups[g];
    const int n = c->groups[g].size, me = c->groups[g].rank;
    const size_t block = a->count * comm_dtype_size(a->dt);
    if (send == recv) {
        // In place as in comm_mpi.c: the result lands in the first block. NCCL's in-place
        // form puts it in block `me`; move it afterwards, in stream order.
        char *mine = (char *)recv + (size_t)me * block;
        NCCL_ENQUEUE(c, ncclReduceScatter(send, mine, a->count, nccl_dtype(a->dt), ncclSum,
                                          grp->nccl, grp->stream));
        if (me != 0)
            CUDA_CHECK(cudaMemcpyAsync(recv, mine, block, cudaMemcpyDeviceToDevice,
                                       grp->stream));
        return TRI_OK;
    }
    if (recv != (const char *)send + (size_t)me * block &&
        overlaps(send, block * (size_t)n, recv, block))
        TRI_CHECK(copy_to_scratch(c, g, send, block * (size_t)n, &send));
    NCCL_ENQUEUE(c, ncclReduceScatter(send, recv, a->count, nccl_dtype(a->dt), ncclSum,
                                      grp->nccl, grp->stream));
    return TRI_OK;
}

static tri_status launch_all_gather(comm *c, comm_group_id g, const void *send, void *recv,
                                    const void *arg) {
    const coll_args *a = (const coll_args *)arg;
    nccl_group *grp = &ctx_of(c)->groups[g];
    const int n = c->groups[g].size, me = c->groups[g].rank;
    const size_t block = a->count * comm_dtype_size(a->dt);
    // send == recv + me * block is NCCL's in-place form too; any other overlap is copied.
    if (send != (const char *)recv + (size_t)me * block &&
        overlaps(send, block, recv, block * (size_t)n))
        TRI_CHECK(copy_to_scratch(c, g, send, block, &send));
    NCCL_ENQUEUE(c, ncclAllGather(send, recv, a->count, nccl_dtype(a->dt), grp->nccl,
                                  grp->stream));
    return TRI_OK;
}

static tri_status launch_broadcast(comm *c, comm_group_id g, const void *send, void *recv,
                                   const void *arg) {
    const coll_args *a = (const coll_args *)arg;
    nccl_group *grp = &ctx_of(c)->groups[g];
    NCCL_ENQUEUE(c, ncclBroadcast(send, recv, a->count, nccl_dtype(a->dt), a->root, grp->nccl,
                                  grp->stream));
    return TRI_OK;
}

static tri_status nccl_all_reduce(comm *c, comm_group_id g, void *buf, size_t count,
                                  comm_dtype dt, comm_reduce_op op) {
    TRI_CHECK(check_call(c, g, COMM_OP_ALL_REDUCE, dt));
    if (c->groups[g].size == 1) return TRI_OK;
    const size_t bytes = count * comm_dtype_size(dt);
    comm_count(c, g, COMM_OP_ALL_REDUCE, bytes);
    if (count == 0) return TRI_OK;
    note_pending(&ctx_of(c)->groups[g], COMM_OP_ALL_REDUCE, bytes, -1);
    coll_args a = {count, dt, op, 0};
    return run_staged(c, g, COMM_OP_ALL_REDUCE, buf, bytes, buf, bytes, launch_all_reduce, &a);
}

// A copy on the group's stream: reduce-scatter and all-gather over a group of one.
static tri_status local_copy(comm *c, comm_group_id g, int op, const void *send, void *recv,
                             size_t bytes) {
    if (send == recv || bytes == 0) return TRI_OK;
    nccl_group *grp = &ctx_of(c)->groups[g];
    note_pending(grp, op, 0, -1);
    CUDA_CHECK(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDefault, grp->stream));
    return finish(c, g);
}

static tri_status nccl_reduce_scatter(comm *c, comm_group_id g, const void *send, void *recv,
                                      size_t count, comm_dtype dt) {
    TRI_CHECK(check_call(c, g, COMM_OP_REDUCE_SCATTER, dt));
    const int size = c->groups[g].size;
    const size_t bytes = count * comm_dtype_size(dt);
    if (size == 1) return local_copy(c, g, COMM_OP_REDUCE_SCATTER, send, recv, bytes);
    comm_count(c, g, COMM_OP_REDUCE_SCATTER, bytes * (size_t)size);
    if (count == 0) return TRI_OK;
    note_pending(&ctx_of(c)->groups[g], COMM_OP_REDUCE_SCATTER, bytes * (size_t)size, -1);
    coll_args a = {count, dt, COMM_REDUCE_SUM, 0};
    return run_staged(c, g, COMM_OP_REDUCE_SCATTER, send, bytes * (size_t)size, recv, bytes,
                      launch_reduce_scatter, &a);
}

static tri_status nccl_all_gather(comm *c, comm_group_id g, const void *send, void *recv,
                                  size_t count, comm_dtype dt) {
    TRI_CHECK(check_call(c, g, COMM_OP_ALL_GATHER, dt));
    const int size = c->groups[g].size;
    const size_t bytes = count * comm_dtype_size(dt);
    if (size == 1) return local_copy(c, g, COMM_OP_ALL_GATHER, send, recv, bytes);
    comm_count(c, g, COMM_OP_ALL_GATHER, bytes * (size_t)size);
    if (count == 0) return TRI_OK;
    note_pending(&ctx_of(c)->groups[g], COMM_OP_ALL_GATHER, bytes * (size_t)size, -1);
    coll_args a = {count, dt, COMM_REDUCE_SUM, 0};
    return run_staged(c, g, COMM_OP_ALL_GATHER, send, bytes, recv, bytes * (size_t)size,
                      launch_all_gather, &a);
}

static tri_status nccl_broadcast(comm *c, comm_group_id g, void *buf, size_t count,
                                 comm_dtype dt, int root) {
    TRI_CHECK(check_call(c, g, COMM_OP_BROADCAST, dt));
    const int size = c->groups[g].size;
    TRI_ASSERT(root >= 0 && root < size);
    if (size == 1) return TRI_OK;
    const size_t bytes = count * comm_dtype_size(dt);
    comm_count(c, g, COMM_OP_BROADCAST, bytes);
    if (count == 0) return TRI_OK;
    note_pending(&ctx_of(c)->groups[g], COMM_OP_BROADCAST, bytes, -1);
    coll_args a = {count, dt, COMM_REDUCE_SUM, root};
    return run_staged(c, g, COMM_OP_BROADCAST, buf, bytes, buf, bytes, launch_broadcast, &a);
}

// NCCL has no barrier: an all-reduce of one word that every rank must join.
static tri_status nccl_barrier(comm *c, comm_group_id g) {
    TRI_CHECK(check_call(c, g, COMM_OP_COUNT, COMM_DTYPE_F32));
    nccl_ctx *x = ctx_of(c);
    if (c->groups[g].size == 1) return TRI_OK;
    TRI_CHECK(scratch_reserve(x, sizeof(float)));
    nccl_group *grp = &x->groups[g];
    note_pending(grp, COMM_OP_COUNT, 0, -1);
    CUDA_CHECK(cudaMemsetAsync(x->scratch, 0, sizeof(float), grp->stream));
    NCCL_ENQUEUE(c, ncclAllReduce(x->scratch, x->scratch, 1, ncclFloat32, ncclSum, grp->nccl,
                                  grp->stream));
    return wait_groups(c, 1u << g);
}

// ---- point to point ----

// Outside a group: issued and completed now. Inside: checked, counted and collected for the
// outermost group_end.
static tri_status nccl_p2p(comm *c, comm_group_id g, void *buf, size_t count, comm_dtype dt,
                           int peer, int op) {
    TRI_CHECK(check_call(c, g, op, dt));
    nccl_ctx *x = ctx_of(c);
    nccl_group *grp = &x->groups[g];
    const int size = c->groups[g].size;
    if (peer < 0 || peer >= size || peer == c->groups[g].rank) {
        // A group of one has no peer; talking to oneself is a schedule bug (as in comm_self).
        LOG_ERROR("%s with rank %d of group %s (size %d, this rank %d): no such peer",
                  op_name(op), peer, comm_group_name(g), size, c->groups[g].rank);
        return TRI_ERR_INTERNAL;
    }
    if (count > 0 && is_host_pointer(buf)) {
        LOG_ERROR("%s on group %s with a host buffer: the NCCL backend sends and receives "
                  "device memory only",
                  op_name(op), comm_group_name(g));
        return TRI_ERR_INTERNAL;
    }
    const size_t bytes = count * comm_dtype_size(dt);
    comm_count(c, g, (comm_op_id)op, bytes);
    if (count == 0) return TRI_OK;
    if (x->group_depth > 0) {
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
    note_pending(grp, op, bytes, grp->world_ranks[peer]);
    if (op == COMM_OP_SEND)
        NCCL_ENQUEUE(c, ncclSend(buf, count, nccl_dtype(dt), peer, grp->nccl, grp->stream));
    else
        NCCL_ENQUEUE(c, ncclRecv(buf, count, nccl_dtype(dt), peer, grp->nccl, grp->stream));
    return finish(c, g);
}

static tri_status nccl_send(comm *c, comm_group_id g, const void *buf, size_t count,
                            comm_dtype dt, int peer) {
    return nccl_p2p(c, g, (void *)buf, count, dt, peer, COMM_OP_SEND);
}

static tri_status nccl_recv(comm *c, comm_group_id g, void *buf, size_t count, comm_dtype dt,
                            int peer) {
    return nccl_p2p(c, g, buf, count, dt, peer, COMM_OP_RECV);
}

static tri_status nccl_group_start(comm *c) {
    nccl_ctx *x = ctx_of(c);
    if (x->aborted) {
        LOG_ERROR("group_start after the communicators were aborted by an earlier failure");
        return TRI_ERR_COMM;
    }
    if (x->group_depth++ == 0) x->n_p2p = 0;
    return TRI_OK;
}

// The outermost group_end issues every collected send and receive inside one NCCL group, so
// that they progress together (both directions of a pipeline exchange in flight at once),
// then waits for all of them.
static tri_status nccl_group_end(comm *c) {
    nccl_ctx *x = ctx_of(c);
    if (x->group_depth == 0) {
        LOG_ERROR("group_end without a matching group_start");
        return TRI_ERR_INTERNAL;
    }
    if (--x->group_depth > 0 || x->n_p2p == 0) return TRI_OK;
    if (x->aborted) return TRI_ERR_COMM;
    unsigned mask = 0;
    NCCL_ENQUEUE(c, ncclGroupStart());
    for (int i = 0; i < x->n_p2p; i++) {
        const nccl_p2p_op *o = &x->p2p[i];
        nccl_group *grp = &x->groups[o->g];
        note_pending(grp, o->op, o->count * comm_dtype_size(o->dt), grp->world_ranks[o->peer]);
        mask |= 1u << o->g;
        ncclResult_t res =
            o->op == COMM_OP_SEND
                ? ncclSend(o->buf, o->count, nccl_dtype(o->dt), o->peer, grp->nccl, grp->stream)
                : ncclRecv(o->buf, o->count, nccl_dtype(o->dt), o->peer, grp->nccl, grp->stream);
        if (res != ncclSuccess && res != ncclInProgress) {
            (void)ncclGroupEnd(); // close the NCCL group before giving up
            x->n_p2p = 0;
            return check_enqueue(c, res, o->op == COMM_OP_SEND ? "ncclSend(...)" : "ncclRecv(...)",
                                 __LINE__);
        }
    }
    x->n_p2p = 0;
    // ncclInProgress: accepted, still being launched on a non-blocking communicator.
    NCCL_ENQUEUE(c, ncclGroupEnd());
    return wait_groups(c, mask);
}

// ---- the table ----

void nccl_install_ops(comm *c) {
    c->all_reduce = nccl_all_reduce;
    c->reduce_scatter = nccl_reduce_scatter;
    c->all_gather = nccl_all_gather;
    c->broadcast = nccl_broadcast;
    c->barrier = nccl_barrier;
    c->send = nccl_send;
    c->recv = nccl_recv;
    c->group_start = nccl_group_start;
    c->group_end = nccl_group_end;
}
