// comm.h: the comm layer (DESIGN.md "Module boundaries"): collectives on the groups of the
// mesh, the functions every caller uses.
//
// Each function here checks its arguments, counts its payload bytes and short-circuits a
// group of one, then calls the backend of `c` (comm/comm_backend.h: MPI on host memory in
// src/, NCCL on device memory in cuda/, the staged wrapper, and the single-process one).
// Backends implement only the non-blocking forms; every blocking form is its start plus a
// wait, here. So the payload counters, which feed metrics.jsonl and are checked against the
// planner, are counted in one place and mean the same on every backend:
//   all_reduce      count * dtype size                 (the buffer)
//   reduce_scatter  count * group size * dtype size    (the send buffer)
//   all_gather      count * group size * dtype size    (the receive buffer)
//   broadcast       count * dtype size                 (the buffer, on root and receivers)
//   send, recv      count * dtype size                 (under COMM_OP_SEND / COMM_OP_RECV)
//   barrier         nothing
// each with one call. A group of one moves nothing over a wire: its calls count nothing and
// never reach the backend (identity, or a copy for reduce_scatter and all_gather when
// send != recv).
#pragma once
#include "base/common.h"
#include "base/dtype.h"
#include "comm/launch.h"

typedef struct backend backend; // compute/backend.h
typedef struct mesh mesh;       // comm/mesh.h

// system.comm: which backend moves the bytes (comm_create_for chooses with the compute
// backend; COMM_SELF only for a world of one).
typedef enum { COMM_AUTO = 0, COMM_MPI = 1, COMM_NCCL = 2, COMM_SELF = 3 } comm_kind;

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
    // Ranks in the group, and this process's rank within it. The embedding group of a
    // middle pipeline stage (neither first nor last) has size 0 and rank -1: that rank is in
    // no embedding group, and any call on it fails with TRI_ERR_INTERNAL.
    int size;
    int rank;
    uint64_t bytes[COMM_OP_COUNT]; // payload bytes this rank passed to each collective
    uint64_t calls[COMM_OP_COUNT];
    void *impl; // backend handle (MPI_Comm, ncclComm_t)
} comm_group;

// A collective in flight: what a *_start call fills in and comm_wait completes (and resets).
// impl NULL: nothing in flight (comm_wait returns TRI_OK at once).
typedef struct {
    void *impl;
    // The flight recorder's records of what it started (comm/flight.h), completed by the wait.
    uint64_t flight_first, flight_n;
} comm_request;

typedef struct comm comm;
struct comm {
    const char *name;               // "self", "mpi", "mpi (staged)", "nccl"
    const struct comm_iface *iface; // the backend's table (comm/comm_backend.h)
    void *ctx;                      // the backend's state
    int world_rank, world_size;
    comm_group groups[COMM_GROUP_COUNT];
    // A collective that does not complete within timeout_s ends the job with exit code 5
    // and a message naming the group, the collective, `step` and the ranks waited for.
    double timeout_s;
    int step; // set by the trainer each step, for those messages
    // Called (when set) before a collective or send reads its buffers: comm_create_for sets
    // the compute backend's synchronize here when the comm backend runs on streams of its
    // own (NCCL), so that what the backend's stream wrote is complete.
    void (*inputs_ready)(void *ctx);
    void *inputs_ready_ctx;
    // Device comm backends (NCCL): the compute backend's stream (a cudaStream_t, set by
    // comm_create_for from backend.stream; NULL on the CPU). When set, start orders the
    // collective after the work already enqueued there with a CUDA event (instead of
    // inputs_ready's host synchronize), and comm_wait makes that stream wait for the
    // collective's completion event (cudaStreamWaitEvent): neither blocks the host. Host
    // backends ignore it.
    void *compute_stream;
    int group_depth; // comm_dispatch.c: comm_group_start nesting (> 0 inside a group)
    // Groups of one rank go through the backend like any group (comm_dispatch.c otherwise
    // answers them itself, moving nothing): set only by the NCCL backend in a world of one,
    // under the test hook TRIDENT_TEST_NCCL_ONE_RANK (comm_create_for). Never counted.
    int one_rank_groups;
    // Seconds this rank's host spent inside waits for collectives, sends and receives since
    // the last comm_counters_reset (comm_dispatch.c): the step's time waiting on others, for
    // the straggler report (metrics.jsonl "straggler"). A device backend's stream waits do
    // not block the host and count nearly nothing.
    double wait_s;
};

// ---- collectives (blocking: complete when they return) ----

// In-place all-reduce of `count` elements.
tri_status comm_all_reduce(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                           comm_reduce_op op);
// send (count * size elements) -> recv (count elements): this rank's reduced block. In
// place: send == recv (the result lands in the first block) or recv == send + rank * count.
tri_status comm_reduce_scatter(comm *c, comm_group_id g, const void *send, void *recv, size_t count,
                               tri_dtype dt);
// send (count elements) -> recv (count * size elements), blocks in group-rank order. In
// place: send == recv + rank * count.
tri_status comm_all_gather(comm *c, comm_group_id g, const void *send, void *recv, size_t count,
                           tri_dtype dt);
// `root` is a rank of group g.
tri_status comm_broadcast(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                          int root);
tri_status comm_barrier(comm *c, comm_group_id g);

// Point-to-point with a peer given as a rank of group g (never this rank). Sends and
// receives issued between comm_group_start and comm_group_end progress together (so both
// directions can be in flight) and comm_group_end waits for all of them; outside a group
// each call completes before it returns. Collectives called inside a group still complete
// before they return; groups nest, and the outermost comm_group_end takes every send and
// receive of the nested ones.
tri_status comm_send(comm *c, comm_group_id g, const void *buf, size_t count, tri_dtype dt,
                     int peer);
tri_status comm_recv(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt, int peer);
tri_status comm_group_start(comm *c);
tri_status comm_group_end(comm *c);

// ---- non-blocking forms ----
// Same arguments, same in-place rules and same payload counting (done at start) as the
// blocking forms, and bitwise the same result. They return once the collective is started;
// until comm_wait returns the caller must neither read nor write its buffers. Several may be
// in flight at once, on the same or different groups, and be waited for in any order;
// collectives on one group must be started in the same order on every rank of it (MPI's
// rule). On a group of one they complete inside start (req->impl stays NULL), as a backend
// may do with others too (NCCL with host buffers). Every request started must be waited
// for, also after an error elsewhere.
tri_status comm_all_reduce_start(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                                 comm_reduce_op op, comm_request *req);
tri_status comm_reduce_scatter_start(comm *c, comm_group_id g, const void *send, void *recv,
                                     size_t count, tri_dtype dt, comm_request *req);
tri_status comm_all_gather_start(comm *c, comm_group_id g, const void *send, void *recv,
                                 size_t count, tri_dtype dt, comm_request *req);
// comm_group_end that does not wait: the sends and receives of the group are started and
// `req` completes them (req->impl NULL when the group was empty, or for the end of a nested
// group, whose operations the outermost one takes).
tri_status comm_group_end_start(comm *c, comm_request *req);
// Completes a request (a timeout ends the job as for the blocking forms: exit code 5 and a
// message naming the group, the collective and `step`) and resets req->impl to NULL.
tri_status comm_wait(comm *c, comm_request *req);
// Lets collectives in flight progress without waiting for them (MPI: MPI_Testall on the
// requests; NCCL: notices completed and timed-out ones handed to compute_stream; others:
// nothing). Cheap; the trainer calls it between ops.
void comm_progress(comm *c);

// ---- counters ----

// Sum of payload bytes over every collective of group g since the last comm_counters_reset.
uint64_t comm_group_bytes(const comm *c, comm_group_id g);
void comm_counters_reset(comm *c);

const char *comm_group_name(comm_group_id g);

// ---- creation ----

// The comm of mesh m for this rank (li: rank and world, m's product), on the compute
// backend `be`:
//   a world of one                  the single-process backend (comm_self_create)
//   a device backend (be->device_memory)
//                                   NCCL (comm_nccl_create); kind COMM_MPI: MPI staged
//                                   through host memory (comm_staged.h), which lets several
//                                   ranks share one GPU; kind COMM_AUTO stages too when
//                                   ranks share a GPU (comm_gpus.h: every rank's bus id,
//                                   exchanged through the launcher, or more ranks on a node
//                                   than devices), with a warning; kind COMM_NCCL is then
//                                   refused (TRI_ERR_CONFIG)
//   a host backend                  MPI (comm_mpi_create); kind COMM_NCCL is refused
//                                   (TRI_ERR_CONFIG)
// TRIDENT_COMM_STAGED=1 wraps MPI in the staged backend on a host backend too (for the
// tests); TRIDENT_TEST_NCCL_ONE_RANK=1 gives a world of one with kind COMM_NCCL on a device
// backend NCCL's backend, on one-rank communicators (comm.one_rank_groups). For NCCL it sets compute_stream and inputs_ready from `be`. timeout_s bounds every
// later collective (<= 0: wait forever). Every rank of the world calls it together.
tri_status comm_create_for(comm **out, const mesh *m, comm_kind kind, launch_info *li, backend *be,
                           double timeout_s);

// The single-process backend: a world of one, every group of size one, so that every call
// is short-circuited by the layer. The copies of reduce_scatter and all_gather go through
// be->copy when be keeps device memory (be may be NULL: host memory).
tri_status comm_self_create(comm **out, backend *be);

// Ends the backend (NULL: nothing). Every request started must have been waited for.
void comm_destroy(comm *c);
