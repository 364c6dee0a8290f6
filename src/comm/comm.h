// comm.h: the comm backend interface (DESIGN.md "Module boundaries").
//
// Collectives on a group, implemented with MPI on host memory in src/ and with NCCL in
// cuda/. Every call adds its payload bytes to the group's counters, per collective; the
// counters feed metrics.jsonl and are checked against the planner. This file also holds the
// single-process backend (a world of one), where every collective is the identity.
#pragma once
#include "base/common.h"
#include "base/dtype.h"

typedef enum {
    COMM_GROUP_TP = 0,
    COMM_GROUP_DP,
    COMM_GROUP_PP,
    COMM_GROUP_EMBED, // first and last stage of a pipeline (tied embedding)
    COMM_GROUP_MP,    // tp x pp, for norms
    COMM_GROUP_WORLD,
    COMM_GROUP_COUNT
} comm_group_id;

typedef enum {
    COMM_OP_ALL_REDUCE = 0,
    COMM_OP_REDUCE_SCATTER,
    COMM_OP_ALL_GATHER,
    COMM_OP_BROADCAST,
    COMM_OP_SEND,
    COMM_OP_RECV,
    COMM_OP_COUNT
} comm_op_id;

typedef enum { COMM_REDUCE_SUM = 0, COMM_REDUCE_MAX = 1 } comm_reduce_op;
// Payloads are tri_dtype elements (base/dtype.h). DTYPE_BF16: a reduction adds in fp32 and
// rounds each partial sum to bf16 (to nearest, ties to even), as a bf16 reduction on the
// wire does.

typedef struct {
    int size;  // ranks in the group
    int rank;  // this process's rank within it
    uint64_t bytes[COMM_OP_COUNT]; // payload bytes this rank passed to each collective
    uint64_t calls[COMM_OP_COUNT];
    void *impl; // backend handle (MPI_Comm, ncclComm_t)
} comm_group;

// A collective in flight: what a *_start call fills in and `wait` completes (and resets).
// impl NULL: nothing in flight (wait returns TRI_OK at once).
typedef struct { void *impl; } comm_request;

typedef struct comm comm;
struct comm {
    const char *name; // "self", "mpi", "nccl"
    void *ctx;
    int world_rank, world_size;
    comm_group groups[COMM_GROUP_COUNT];
    // A collective that does not complete within timeout_s ends the job with exit code 5
    // and a message naming the group, the collective, `step` and the ranks waited for.
    double timeout_s;
    int step;          // set by the trainer each step, for those messages
    // Called (when set) before a collective or send reads its buffers: the trainer sets the
    // compute backend's synchronize here when the comm backend runs on streams of its own
    // (NCCL), so that what the backend's stream wrote is complete.
    void (*inputs_ready)(void *ctx);
    void *inputs_ready_ctx;
    // Device comm backends (NCCL): the compute backend's stream (a cudaStream_t, set by the
    // trainer from backend.stream; NULL on the CPU). When set, start orders the collective
    // after the work already enqueued there with a CUDA event (instead of inputs_ready's
    // host synchronize), and wait makes that stream wait for the collective's completion
    // event (cudaStreamWaitEvent): neither blocks the host. Host backends ignore it.
    void *compute_stream;

    // In-place all-reduce of `count` elements.
    tri_status (*all_reduce)(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                             comm_reduce_op op);
    // send (count * size elements) -> recv (count elements): this rank's reduced block.
    tri_status (*reduce_scatter)(comm *c, comm_group_id g, const void *send, void *recv,
                                 size_t count, tri_dtype dt);
    // send (count elements) -> recv (count * size elements), blocks in group-rank order.
    tri_status (*all_gather)(comm *c, comm_group_id g, const void *send, void *recv, size_t count,
                             tri_dtype dt);
    tri_status (*broadcast)(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                            int root);
    tri_status (*barrier)(comm *c, comm_group_id g);
    // Point-to-point with a peer given as a rank of group g. Sends and receives issued
    // between group_start and group_end progress together (so both directions can be in
    // flight) and group_end waits for all of them; outside a group each call completes
    // before it returns.
    tri_status (*send)(comm *c, comm_group_id g, const void *buf, size_t count, tri_dtype dt,
                       int peer);
    tri_status (*recv)(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                       int peer);
    tri_status (*group_start)(comm *c);
    tri_status (*group_end)(comm *c);

    // Non-blocking forms of all_reduce, reduce_scatter and all_gather (same arguments, same
    // in-place rules, same payload counting, done at start; bitwise the same result as the
    // blocking form). They return once the collective is started; until `wait` returns the
    // caller must neither read nor write its buffers. Several may be in flight at once, on
    // the same or different groups, and be waited for in any order; collectives on one
    // group must be started in the same order on every rank of it (MPI's rule). On a group
    // of one they complete inside start (req->impl stays NULL), as a backend may do with
    // others too (NCCL with host buffers). Every request started must be waited for, also
    // after an error elsewhere.
    tri_status (*all_reduce_start)(comm *c, comm_group_id g, void *buf, size_t count,
                                   tri_dtype dt, comm_reduce_op op, comm_request *req);
    tri_status (*reduce_scatter_start)(comm *c, comm_group_id g, const void *send, void *recv,
                                       size_t count, tri_dtype dt, comm_request *req);
    tri_status (*all_gather_start)(comm *c, comm_group_id g, const void *send, void *recv,
                                   size_t count, tri_dtype dt, comm_request *req);
    // group_end that does not wait: the sends and receives of the group are started and
    // `req` completes them (req->impl NULL when the group was empty, or for the group_end of
    // a nested group, whose operations the outermost one takes).
    tri_status (*group_end_start)(comm *c, comm_request *req);
    // Completes a request (a timeout ends the job as for the blocking forms: exit code 5 and a
    // message naming the group, the collective and `step`) and resets req->impl to NULL.
    tri_status (*wait)(comm *c, comm_request *req);
    // Lets collectives in flight progress without waiting for them (MPI: MPI_Testall on the
    // requests; NCCL: notices completed and timed-out ones handed to compute_stream; others:
    // nothing). Cheap; the trainer calls it between ops.
    void (*progress)(comm *c);

    void (*destroy)(comm *c);
};

// Adds a call's payload to the group's counters (called by every backend).
void comm_count(comm *c, comm_group_id g, comm_op_id op, size_t bytes);

// Sum of payload bytes over every collective of group g since the last comm_counters_reset.
uint64_t comm_group_bytes(const comm *c, comm_group_id g);
void comm_counters_reset(comm *c);

const char *comm_group_name(comm_group_id g);

// The single-process backend: world of one, every group of size one.
tri_status comm_self_create(comm **out);
