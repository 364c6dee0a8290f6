// comm_mpi.c: the MPI comm backend over host memory (DESIGN.md "Module boundaries"), an
// implementation of comm_backend.h. The layer (comm_dispatch.c) checks the arguments, counts
// the payload and short-circuits groups of one: every call here is on a group of two or
// more.
//
// Every operation is non-blocking MPI (MPI_Iallreduce, MPI_Ireduce_scatter_block,
// MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier, MPI_Isend/MPI_Irecv) whose MPI requests go to a
// comm_request (an mpi_request, kept on the ctx's list of live requests for `progress`);
// `wait` completes them by a polling loop (MPI_Testall, then sched_yield, then a nanosleep
// backing off to 200 us, so that waiting ranks leave the cores to the ranks still computing
// when the job is oversubscribed) with a deadline of comm->timeout_s. Sends and receives
// posted in a group are handed to one request by group_end_start. The layer's blocking
// forms are start + wait, so both forms give bitwise the same results.
//
// Determinism: MPI's built-in reductions on a fixed communicator with a fixed count pick
// the same algorithm and the same reduction order every run (OpenMPI's tuned and libnbc
// collectives select by communicator size and message size only), so the same inputs give
// bitwise the same result on every run and on every rank. The MPI standard itself does not
// promise this; it holds in practice for OpenMPI, which is what the CPU path uses.
#include "comm/comm_mpi.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "base/bf16.h"
#include "base/stop.h"
#include "comm/comm_backend.h"
#include "comm/flight.h"

// Prints a failed MPI call: the statement, file:line, rank and MPI's error string.
static void mpi_report(const comm *c, int rc, const char *stmt, const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    LOG_ERROR("MPI call '%s' failed at %s:%d on rank %d: %s", stmt, file, line, c->world_rank, msg);
}

// Every MPI call goes through this: on failure it reports the call (mpi_report) and returns
// TRI_ERR_COMM. Communicators carry MPI_ERRORS_RETURN.
#define MPI_CHECK(c, call)                                                                         \
    do {                                                                                           \
        int mpi_check_rc_ = (call);                                                                \
        if (mpi_check_rc_ != MPI_SUCCESS) {                                                        \
            mpi_report((c), mpi_check_rc_, #call, __FILE__, __LINE__);                             \
            return TRI_ERR_COMM;                                                                   \
        }                                                                                          \
    } while (0)

typedef struct {
    MPI_Comm mpi; // MPI_COMM_NULL for a group of one
    int *members; // (size) world ranks, in group-rank order
} mpi_group;

// What a request waits for, to name it if it times out.
typedef struct {
    const char *what; // "all_reduce", "send", ...
    comm_group_id g;
    size_t bytes;
    int peer; // group rank of the peer for send/recv; -1 for a collective
} mpi_wait_desc;

// What comm_request.impl points to: the MPI requests of one collective, or of the sends and
// receives of one group, from start until wait.
typedef struct mpi_request {
    int n;
    MPI_Request *reqs;   // (n)
    mpi_wait_desc *desc; // (n), to name them if they time out
    void *copy;          // a copy of an overlapping send buffer, which MPI reads until done
    int done;            // progress saw all n complete
    tri_status failed;   // progress saw MPI fail on them: wait returns it
    struct mpi_request *prev, *next; // the ctx's list of live requests
} mpi_request;

typedef struct {
    mpi_group groups[COMM_GROUP_COUNT];
    mesh_coord me;
    int owns_mpi;              // MPI_Init was ours: destroy finalises
    MPI_Op bf16_sum, bf16_max; // MPI has no bfloat16: user ops over 2-byte elements
    // send/recv posted in the open group, handed to a request by group_end_start
    MPI_Request *pending;
    mpi_wait_desc *pending_desc;
    int n_pending, cap_pending;
    mpi_request *live; // started and not yet waited for, newest first (progress tests them)
} mpi_ctx;

static mpi_ctx *ctx_of(comm *c) { return c->ctx; }

static MPI_Datatype mpi_dtype(tri_dtype dt) {
    switch (dt) {
    case DTYPE_FP32: return MPI_FLOAT;
    case DTYPE_FP64: return MPI_DOUBLE;
    case DTYPE_INT64: return MPI_INT64_T;
    case DTYPE_BF16: return MPI_UINT16_T;
    }
    TRI_ASSERT(!"unknown tri_dtype");
    return MPI_DATATYPE_NULL;
}

// inout[i] = bf16(in[i] + inout[i]) (or the max), for MPI_Op_create.
static void bf16_reduce(void *in, void *inout, int *len, int is_max) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) {
        float x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
        b[i] = bf16_from_f32(is_max ? (x > y ? x : y) : x + y);
    }
}
static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    bf16_reduce(in, inout, len, 0);
}
static void bf16_max_fn(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    bf16_reduce(in, inout, len, 1);
}

static MPI_Op mpi_op(const comm *c, tri_dtype dt, comm_reduce_op op) {
    if (dt == DTYPE_BF16)
        return op == COMM_REDUCE_MAX ? ctx_of((comm *)c)->bf16_max : ctx_of((comm *)c)->bf16_sum;
    return op == COMM_REDUCE_MAX ? MPI_MAX : MPI_SUM;
}

// MPI counts are int: a larger buffer is a caller's job to split.
static tri_status mpi_check_count(comm *c, const char *what, size_t count) {
    if (count <= (size_t)INT_MAX) return TRI_OK;
    LOG_ERROR("%s of %zu elements on rank %d: MPI counts stop at %d elements; split the buffer",
              what, count, c->world_rank, INT_MAX);
    return TRI_ERR_INTERNAL;
}

// "0,1,2,3" into buf (truncated with "..." when long).
static void format_ranks(char *buf, size_t cap, const int *ranks, int n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (len + 16 >= cap) {
            snprintf(buf + len, cap - len, "...");
            return;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? "," : "", ranks[i]);
    }
}

// Prints the timeout line and ends the job with exit code 5 on every process.
static void mpi_timeout_abort(comm *c, int n, MPI_Request *reqs, const mpi_wait_desc *desc,
                              double waited_s) {
    mpi_ctx *x = ctx_of(c);
    // Which requests are still open (MPI_Testall left them untouched).
    int first_open = -1, n_open = 0;
    int *waiting = xcalloc((size_t)c->world_size, sizeof(int)); // world rank -> waited for
    for (int i = 0; i < n; i++) {
        int done = 0;
        MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE);
        if (done) continue;
        if (first_open < 0) first_open = i;
        n_open++;
        const mpi_group *mg = &x->groups[desc[i].g];
        if (desc[i].peer >= 0) {
            waiting[mg->members[desc[i].peer]] = 1;
        } else {
            // MPI cannot tell which members already arrived: name every other member.
            for (int k = 0; k < c->groups[desc[i].g].size; k++)
                if (mg->members[k] != c->world_rank) waiting[mg->members[k]] = 1;
        }
    }
    if (first_open < 0) first_open = 0; // completed in the last instant; report it anyway
    const mpi_wait_desc *d = &desc[first_open];
    const mpi_group *mg = &x->groups[d->g];
    char members[512], peer[64] = "", more[64] = "", wait_list[512];
    format_ranks(members, sizeof members, mg->members, c->groups[d->g].size);
    if (d->peer >= 0)
        snprintf(peer, sizeof peer, " %s rank %d", !strcmp(d->what, "send") ? "to" : "from",
                 mg->members[d->peer]);
    if (n_open > 1) snprintf(more, sizeof more, " (+%d more pending p2p ops)", n_open - 1);
    int *list = xcalloc((size_t)c->world_size, sizeof(int)), n_list = 0;
    for (int r = 0; r < c->world_size; r++)
        if (waiting[r]) list[n_list++] = r;
    format_ranks(wait_list, sizeof wait_list, list, n_list);
    fprintf(stderr,
            "[r%d tp%d dp%d pp%d] error: comm timeout after %.1f s: %s of %zu bytes%s on group "
            "%s (ranks %s)%s at step %d; waiting for ranks %s (global)\n",
            c->world_rank, x->me.tp, x->me.dp, x->me.pp, waited_s, d->what, d->bytes, peer,
            comm_group_name(d->g), members, more, c->step, n_list ? wait_list : "?");
    fflush(stderr);
    fflush(stdout);
    // The flight recorder's verdict (which rank, host and operation) before the job ends.
    flight_stall(waited_s);
    MPI_Abort(MPI_COMM_WORLD, TRI_ERR_COMM);
    exit(TRI_ERR_COMM); // not reached: MPI_Abort ends every process
}

// Completes `n` requests, polling with backoff, aborting the job after comm->timeout_s.
static tri_status mpi_wait_all(comm *c, int n, MPI_Request *reqs, const mpi_wait_desc *desc) {
    if (n == 0) return TRI_OK;
    const double t0 = time_now_s();
    const double deadline = c->timeout_s > 0 ? t0 + c->timeout_s : 0;
    int spins = 0;
    long sleep_ns = 1000;
    for (;;) {
        int done = 0;
        MPI_CHECK(c, MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
        if (done) return TRI_OK;
        if (deadline > 0) {
            double now = time_now_s();
            if (now > deadline) mpi_timeout_abort(c, n, reqs, desc, now - t0);
        }
        if (spins < 32) {
            spins++;
            sched_yield();
        } else {
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 200000) sleep_ns *= 2;
        }
    }
}

// ---- requests of the non-blocking forms ----

// Hands `n` posted MPI requests (and `copy`, freed at wait) to req, as a live request.
static void request_track(comm *c, comm_request *req, int n, const MPI_Request *reqs,
                          const mpi_wait_desc *desc, void *copy) {
    mpi_ctx *x = ctx_of(c);
    mpi_request *r = xcalloc(1, sizeof *r);
    r->n = n;
    r->reqs = xmalloc((size_t)n * sizeof *r->reqs);
    r->desc = xmalloc((size_t)n * sizeof *r->desc);
    memcpy(r->reqs, reqs, (size_t)n * sizeof *r->reqs);
    memcpy(r->desc, desc, (size_t)n * sizeof *r->desc);
    r->copy = copy;
    r->next = x->live;
    if (x->live) x->live->prev = r;
    x->live = r;
    req->impl = r;
}

static void track_collective(comm *c, comm_request *req, MPI_Request mr, const char *what,
                             comm_group_id g, size_t bytes, void *copy) {
    mpi_wait_desc d = {what, g, bytes, -1};
    request_track(c, req, 1, &mr, &d, copy);
}

static void request_free(mpi_ctx *x, mpi_request *r) {
    if (r->prev) r->prev->next = r->next;
    else x->live = r->next;
    if (r->next) r->next->prev = r->prev;
    free(r->reqs);
    free(r->desc);
    free(r->copy);
    free(r);
}

// on_host makes no difference: MPI completes everything on the host.
static tri_status mpi_wait(comm *c, comm_request *req, int on_host) {
    (void)on_host;
    mpi_request *r = req->impl;
    if (!r) return TRI_OK;
    req->impl = NULL;
    tri_status st = r->failed;
    if (st == TRI_OK && !r->done) st = mpi_wait_all(c, r->n, r->reqs, r->desc);
    request_free(ctx_of(c), r);
    return st;
}

// MPI_Testall on every live request: MPI progresses non-blocking collectives (OpenMPI's
// libnbc schedules) only inside MPI calls, so a rank computing between ops would otherwise
// hold back its peers until it waits. A failure is reported now and returned by wait.
static void mpi_progress(comm *c) {
    for (mpi_request *r = ctx_of(c)->live; r; r = r->next) {
        if (r->done || r->failed) continue;
        int rc = MPI_Testall(r->n, r->reqs, &r->done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            mpi_report(c, rc, "MPI_Testall(r->n, r->reqs, &r->done, MPI_STATUSES_IGNORE)", __FILE__,
                       __LINE__);
            r->failed = TRI_ERR_COMM;
        }
    }
}

// ---- collectives ----

static tri_status mpi_all_reduce_start(comm *c, comm_group_id g, void *buf, size_t count,
                                       tri_dtype dt, comm_reduce_op op, comm_request *req) {
    TRI_CHECK(mpi_check_count(c, "all_reduce", count));
    const size_t bytes = count * dtype_size(dt);
    MPI_Request mr;
    MPI_CHECK(c, MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_dtype(dt), mpi_op(c, dt, op),
                                ctx_of(c)->groups[g].mpi, &mr));
    track_collective(c, req, mr, "all_reduce", g, bytes, NULL);
    return TRI_OK;
}

// Does [a, a+na) overlap [b, b+nb)?
static int overlaps(const void *a, size_t na, const void *b, size_t nb) {
    const char *pa = a, *pb = b;
    return pa < pb + nb && pb < pa + na;
}

static tri_status mpi_reduce_scatter_start(comm *c, comm_group_id g, const void *send, void *recv,
                                           size_t count, tri_dtype dt, comm_request *req) {
    const int n = c->groups[g].size;
    const size_t block = count * dtype_size(dt), bytes = block * (size_t)n;
    TRI_CHECK(mpi_check_count(c, "reduce_scatter", count * (size_t)n));
    MPI_Request mr;
    MPI_Comm mc = ctx_of(c)->groups[g].mpi;
    void *copy = NULL;
    if (send == recv) {
        // In place: the input is the whole buffer, the result lands in its first block.
        MPI_CHECK(c, MPI_Ireduce_scatter_block(MPI_IN_PLACE, recv, (int)count, mpi_dtype(dt),
                                               mpi_op(c, dt, COMM_REDUCE_SUM), mc, &mr));
    } else {
        if (overlaps(send, bytes, recv, block)) { // e.g. recv = send + rank * count
            copy = xmalloc(bytes);
            memcpy(copy, send, bytes);
            send = copy;
        }
        int rc = MPI_Ireduce_scatter_block(send, recv, (int)count, mpi_dtype(dt),
                                           mpi_op(c, dt, COMM_REDUCE_SUM), mc, &mr);
        if (rc != MPI_SUCCESS) free(copy);
        MPI_CHECK(c, rc);
    }
    track_collective(c, req, mr, "reduce_scatter", g, bytes, copy);
    return TRI_OK;
}

static tri_status mpi_all_gather_start(comm *c, comm_group_id g, const void *send, void *recv,
                                       size_t count, tri_dtype dt, comm_request *req) {
    const int n = c->groups[g].size, me = c->groups[g].rank;
    const size_t block = count * dtype_size(dt), bytes = block * (size_t)n;
    TRI_CHECK(mpi_check_count(c, "all_gather", count * (size_t)n));
    MPI_Request mr;
    MPI_Comm mc = ctx_of(c)->groups[g].mpi;
    void *copy = NULL;
    if (send == (const char *)recv + (size_t)me * block) {
        // In place: this rank's block already sits at its place in the receive buffer.
        MPI_CHECK(c, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)count,
                                    mpi_dtype(dt), mc, &mr));
    } else {
        if (overlaps(send, block, recv, bytes)) {
            copy = xmalloc(block);
            memcpy(copy, send, block);
            send = copy;
        }
        int rc = MPI_Iallgather(send, (int)count, mpi_dtype(dt), recv, (int)count, mpi_dtype(dt),
                                mc, &mr);
        if (rc != MPI_SUCCESS) free(copy);
        MPI_CHECK(c, rc);
    }
    track_collective(c, req, mr, "all_gather", g, bytes, copy);
    return TRI_OK;
}

static tri_status mpi_broadcast_start(comm *c, comm_group_id g, void *buf, size_t count,
                                      tri_dtype dt, int root, comm_request *req) {
    TRI_CHECK(mpi_check_count(c, "broadcast", count));
    const size_t bytes = count * dtype_size(dt);
    MPI_Request mr;
    MPI_CHECK(c, MPI_Ibcast(buf, (int)count, mpi_dtype(dt), root, ctx_of(c)->groups[g].mpi, &mr));
    track_collective(c, req, mr, "broadcast", g, bytes, NULL);
    return TRI_OK;
}

static tri_status mpi_barrier_start(comm *c, comm_group_id g, comm_request *req) {
    MPI_Request mr;
    MPI_CHECK(c, MPI_Ibarrier(ctx_of(c)->groups[g].mpi, &mr));
    track_collective(c, req, mr, "barrier", g, 0, NULL);
    return TRI_OK;
}

// ---- point-to-point ----

// Posts one send or receive; it joins the open group's batch, which group_end_start hands
// to a request.
static tri_status mpi_p2p(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt, int peer,
                          int is_send) {
    mpi_ctx *x = ctx_of(c);
    const char *what = is_send ? "send" : "recv";
    TRI_CHECK(mpi_check_count(c, what, count));
    const size_t bytes = count * dtype_size(dt);
    MPI_Request req;
    MPI_Comm mc = x->groups[g].mpi;
    // One tag: messages between a pair on one communicator match in the order issued.
    if (is_send) MPI_CHECK(c, MPI_Isend(buf, (int)count, mpi_dtype(dt), peer, 0, mc, &req));
    else MPI_CHECK(c, MPI_Irecv(buf, (int)count, mpi_dtype(dt), peer, 0, mc, &req));
    if (x->n_pending == x->cap_pending) {
        x->cap_pending = x->cap_pending ? 2 * x->cap_pending : 16;
        x->pending = realloc(x->pending, (size_t)x->cap_pending * sizeof *x->pending);
        x->pending_desc = realloc(x->pending_desc,
                                  (size_t)x->cap_pending * sizeof *x->pending_desc);
        TRI_ASSERT(x->pending && x->pending_desc);
    }
    x->pending[x->n_pending] = req;
    x->pending_desc[x->n_pending] = (mpi_wait_desc){what, g, bytes, peer};
    x->n_pending++;
    return TRI_OK;
}

static tri_status mpi_send(comm *c, comm_group_id g, const void *buf, size_t count, tri_dtype dt,
                           int peer) {
    return mpi_p2p(c, g, (void *)buf, count, dt, peer, 1);
}

static tri_status mpi_recv(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                           int peer) {
    return mpi_p2p(c, g, buf, count, dt, peer, 0);
}

static tri_status mpi_group_start(comm *c) {
    (void)c; // the sends and receives gather in ctx->pending until group_end_start
    return TRI_OK;
}

// Hands the group's sends and receives to req (none: req stays empty).
static tri_status mpi_group_end_start(comm *c, comm_request *req) {
    mpi_ctx *x = ctx_of(c);
    int n = x->n_pending;
    x->n_pending = 0;
    if (n > 0) request_track(c, req, n, x->pending, x->pending_desc, NULL);
    return TRI_OK;
}

// ---- setup ----

static void mpi_destroy(comm *c) {
    if (!c) return;
    mpi_ctx *x = ctx_of(c);
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (x->groups[g].mpi != MPI_COMM_NULL) MPI_Comm_free(&x->groups[g].mpi);
        free(x->groups[g].members);
    }
    free(x->pending);
    free(x->pending_desc);
    // Requests never waited for (an error ended the run first): only their memory is left;
    // MPI_Finalize below ends what MPI still holds.
    while (x->live) request_free(x, x->live);
    if (x->bf16_sum != MPI_OP_NULL) MPI_Op_free(&x->bf16_sum);
    if (x->bf16_max != MPI_OP_NULL) MPI_Op_free(&x->bf16_max);
    if (x->owns_mpi) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    free(x);
    free(c);
}

// Splits group g from world (ordered by world rank) and fills its size, rank and members.
static tri_status mpi_make_group(comm *c, const mesh *m, comm_group_id g) {
    mpi_ctx *x = ctx_of(c);
    mpi_group *mg = &x->groups[g];
    int color = mesh_group_color(m, g, c->world_rank);
    if (color < 0) color = MPI_UNDEFINED;
    MPI_CHECK(c, MPI_Comm_split(x->groups[COMM_GROUP_WORLD].mpi, color, c->world_rank, &mg->mpi));
    if (mg->mpi == MPI_COMM_NULL) { // a middle stage: not a member
        c->groups[g].size = 0;
        c->groups[g].rank = -1;
        mg->members = NULL;
        return TRI_OK;
    }
    MPI_CHECK(c, MPI_Comm_set_errhandler(mg->mpi, MPI_ERRORS_RETURN));
    int size, rank;
    MPI_CHECK(c, MPI_Comm_size(mg->mpi, &size));
    MPI_CHECK(c, MPI_Comm_rank(mg->mpi, &rank));
    c->groups[g].size = size;
    c->groups[g].rank = rank;
    c->groups[g].impl = mg;
    mg->members = xcalloc((size_t)size, sizeof(int));
    int *local = xcalloc((size_t)size, sizeof(int));
    for (int i = 0; i < size; i++) local[i] = i;
    MPI_Group world_group, group;
    MPI_CHECK(c, MPI_Comm_group(x->groups[COMM_GROUP_WORLD].mpi, &world_group));
    MPI_CHECK(c, MPI_Comm_group(mg->mpi, &group));
    MPI_CHECK(c, MPI_Group_translate_ranks(group, size, local, world_group, mg->members));
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    free(local);
    if (size == 1) MPI_CHECK(c, MPI_Comm_free(&mg->mpi)); // short-circuited: no MPI needed
    return TRI_OK;
}

static const struct comm_iface mpi_iface = {
    /* .all_reduce_start     = */ mpi_all_reduce_start,
    /* .reduce_scatter_start = */ mpi_reduce_scatter_start,
    /* .all_gather_start     = */ mpi_all_gather_start,
    /* .broadcast_start      = */ mpi_broadcast_start,
    /* .barrier_start        = */ mpi_barrier_start,
    /* .send                 = */ mpi_send,
    /* .recv                 = */ mpi_recv,
    /* .group_start          = */ mpi_group_start,
    /* .group_end_start      = */ mpi_group_end_start,
    /* .wait                 = */ mpi_wait,
    /* .progress             = */ mpi_progress,
    /* .local_copy           = */ NULL, // host memory: the layer's memmove
    /* .destroy              = */ mpi_destroy,
};

tri_status comm_mpi_create(comm **out, const mesh *m, const launch_info *li, double timeout_s) {
    *out = NULL;
    const int TP = m->tp, DP = m->dp, PP = m->pp;
    TRI_ASSERT(TP >= 1 && DP >= 1 && PP >= 1);
    if (TP * DP * PP != li->world) {
        LOG_ERROR("the mesh tp %d x dp %d x pp %d = %d ranks does not match the world of %d", TP,
                  DP, PP, TP * DP * PP, li->world);
        return TRI_ERR_CONFIG;
    }
    mpi_ctx *x = xcalloc(1, sizeof *x);
    x->bf16_sum = x->bf16_max = MPI_OP_NULL;
    comm *c = comm_backend_new("mpi", &mpi_iface, x, li->rank, li->world, timeout_s);
    x->me = mesh_coord_of(m, li->rank);
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        x->groups[g].mpi = MPI_COMM_NULL;
        c->groups[g] = (comm_group){.size = 1, .rank = 0, .impl = &x->groups[g]};
    }
    tri_status st = TRI_OK;
    if (li->world == 1) { // every group is this rank alone: no MPI at all
        for (int g = 0; g < COMM_GROUP_COUNT; g++) {
            x->groups[g].members = xmalloc(sizeof(int));
            x->groups[g].members[0] = 0;
        }
        *out = c;
        return TRI_OK;
    }

    // MPI_Init and the splits below wait for every rank: phases of the start-up deadline
    // (base/stop.h), which ends this process if another rank never arrives.
    const char *phase = stop_phase_name();
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        stop_phase("MPI_Init");
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) {
            LOG_ERROR("MPI_Init_thread failed on rank %d (code %d)", li->rank, rc);
            st = TRI_ERR_COMM;
            goto fail;
        }
        x->owns_mpi = 1;
        if (provided < MPI_THREAD_FUNNELED) {
            LOG_ERROR("MPI provides thread level %d, trident needs MPI_THREAD_FUNNELED", provided);
            st = TRI_ERR_COMM;
            goto fail;
        }
    }
    stop_phase("MPI communicators");
    MPI_Op_create(bf16_sum_fn, 1, &x->bf16_sum);
    MPI_Op_create(bf16_max_fn, 1, &x->bf16_max);
    int world_size = 0, world_rank = -1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (world_size != li->world || world_rank != li->rank) {
        LOG_ERROR("MPI sees rank %d of %d, PMIx rank %d of %d; launch with mpirun or "
                  "srun --mpi=pmix",
                  world_rank, world_size, li->rank, li->world);
        st = TRI_ERR_COMM;
        goto fail;
    }
    // The world group is a duplicate, so that trident's traffic never mixes with anyone's
    // on MPI_COMM_WORLD; every other group is split from it.
    mpi_group *w = &x->groups[COMM_GROUP_WORLD];
    if (MPI_Comm_dup(MPI_COMM_WORLD, &w->mpi) != MPI_SUCCESS ||
        MPI_Comm_set_errhandler(w->mpi, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
        LOG_ERROR("MPI_Comm_dup(MPI_COMM_WORLD) failed on rank %d", li->rank);
        st = TRI_ERR_COMM;
        goto fail;
    }
    c->groups[COMM_GROUP_WORLD].size = li->world;
    c->groups[COMM_GROUP_WORLD].rank = li->rank;
    w->members = xcalloc((size_t)li->world, sizeof(int));
    for (int r = 0; r < li->world; r++) w->members[r] = r;
    for (int g = 0; g < COMM_GROUP_COUNT; g++)
        if (g != COMM_GROUP_WORLD) TRI_CHECK_GOTO(mpi_make_group(c, m, (comm_group_id)g), st, fail);

    // The split must reproduce the mesh: group ranks are the mesh coordinates.
    const int mp_rank = x->me.tp + TP * x->me.pp;
    TRI_ASSERT(c->groups[COMM_GROUP_TP].size == TP && c->groups[COMM_GROUP_TP].rank == x->me.tp);
    TRI_ASSERT(c->groups[COMM_GROUP_DP].size == DP && c->groups[COMM_GROUP_DP].rank == x->me.dp);
    TRI_ASSERT(c->groups[COMM_GROUP_PP].size == PP && c->groups[COMM_GROUP_PP].rank == x->me.pp);
    TRI_ASSERT(c->groups[COMM_GROUP_MP].size == TP * PP &&
               c->groups[COMM_GROUP_MP].rank == mp_rank);
    LOG_DEBUG("comm mpi: rank %d: tp %d/%d dp %d/%d pp %d/%d embed %d/%d mp %d/%d", li->rank,
              c->groups[COMM_GROUP_TP].rank, TP, c->groups[COMM_GROUP_DP].rank, DP,
              c->groups[COMM_GROUP_PP].rank, PP, c->groups[COMM_GROUP_EMBED].rank,
              c->groups[COMM_GROUP_EMBED].size, c->groups[COMM_GROUP_MP].rank, TP * PP);
    stop_phase(phase);
    *out = c;
    return TRI_OK;
fail:
    mpi_destroy(c);
    return st;
}
