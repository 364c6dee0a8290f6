// comm_nccl_internal.h: what the three files of the NCCL comm backend share, and nothing
// else includes: its state, and the functions each calls in the others.
//   cuda/comm/comm_nccl.cu     the operations (collectives, sends and receives, groups) and
//                              the backend's table (comm_backend.h)
//   cuda/comm/nccl_request.cu  their requests: done events, the ordering after
//                              compute_stream, and the polling of their completion against
//                              the timeout
//   cuda/comm/nccl_init.cu     comm_nccl_create (the communicators and streams of every
//                              group), destroy and abort
#pragma once

#include "../base/cuda_common.h"
#include "comm/nccl_api.h"

extern "C" {
#include "comm/comm_backend.h"
#include "comm/flight.h"
#include "comm/mesh.h"
}

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "trident needs NCCL 2.18 or newer (ncclCommSplit and non-blocking communicators)"
#endif

// ---- state ----

#define NCCL_SCRATCH_BYTES ((size_t)64 << 10)

#define MAX_PENDING_PEERS 8

// What a request runs on one group's stream, to name it if it times out.
typedef struct {
    unsigned ops;                 // bit op per comm_op_id, bit COMM_OP_COUNT for a barrier
    uint64_t bytes;               // their payload
    int collective;               // a collective is among them: every other rank is waited for
    int peers[MAX_PENDING_PEERS]; // world ranks of send/recv peers
    int n_peers;
} nccl_pending;

typedef struct {
    ncclComm_t nccl;     // NULL for a group of one
    cudaStream_t stream; // every operation of the group runs here
    int *world_ranks;    // (size) world rank of each rank of the group, in group order
    int n_world_ranks;   // = size
} nccl_group;

// One operation (or the sends and receives of one group) enqueued on the streams of the
// groups in `mask`, with a done event recorded after it on each: what comm_request.impl of
// this backend points to. Requests are pooled with their events (created on first use).
typedef struct nccl_request {
    unsigned mask;                       // bit g: runs on group g's stream
    nccl_pending what[COMM_GROUP_COUNT]; // per group of mask
    cudaEvent_t done[COMM_GROUP_COUNT];  // per group of mask, recorded after the operation
    void *aside;                   // a stream-ordered copy of an overlapping send buffer, freed on
    comm_group_id aside_g;         // group aside_g's stream once the collective is enqueued
    double handed_at;              // when wait handed it to compute_stream (time_now_s)
    struct nccl_request *next;     // in the free pool, or in the handed-off list
    struct nccl_request *all_next; // every request ever made, for destroy
} nccl_request;

// A send or receive collected between group_start and group_end.
typedef struct {
    comm_group_id g;
    int op; // COMM_OP_SEND or COMM_OP_RECV
    void *buf;
    size_t count;
    tri_dtype dt;
    int peer; // rank in group g
} nccl_p2p_op;

typedef struct {
    nccl_group groups[COMM_GROUP_COUNT];
    mesh_coord coord;
    int device;
    nccl_p2p_op *p2p; // (n_p2p) collected for group_end_start
    int n_p2p, cap_p2p;
    int aborted; // set once the communicators were aborted: every later call fails
    // Device staging for host buffers (the few values the trainer reduces from the host) and
    // the barrier's word: NCCL_SCRATCH_BYTES, made at creation. Larger host buffers are
    // staged through stream-ordered memory of their own. Only operations that complete before
    // they return use either.
    void *scratch;
    size_t scratch_bytes;
    cudaEvent_t inputs_event;    // recorded on compute_stream, waited for by group streams
    nccl_request *free_requests; // the pool
    nccl_request *handed_off;    // waited for by compute_stream, not yet seen complete
    nccl_request *all_requests;  // every request made (linked by all_next)
} nccl_ctx;

static inline nccl_ctx *ctx_of(comm *c) { return (nccl_ctx *)c->ctx; }

// ---- cuda/comm/comm_nccl.cu ----

// The backend's table (comm_backend.h), which comm_nccl_create points comm.iface at.
extern const struct comm_iface nccl_iface;

// "all_reduce", ... for a comm_op_id; "barrier" for COMM_OP_COUNT.
const char *nccl_op_name(int op);

// "0,1,2,3" (at most 16 shown, then "... (N ranks)"); skip < 0 or a rank to leave out.
void nccl_format_ranks(char *buf, size_t cap, const int *ranks, int n, int skip);

// An error line on stderr with the full mesh prefix "[r5 tp1 dp0 pp1]", rank 0 included.
void nccl_print_prefixed(comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// ---- cuda/comm/nccl_request.cu ----
// An operation: r = nccl_request_get; nccl_request_note for each group (and peer) it runs
// on; nccl_order_inputs; enqueue it; then nccl_request_finish (blocking), or
// nccl_request_record and hand r to a comm_request (non-blocking). Every failure is
// reported; an NCCL failure or a timeout also aborts every communicator.

// Sleeps a little between polls, longer as `elapsed` (seconds waited so far) grows.
void nccl_poll_pause(double elapsed);

// A request from the pool, empty; nccl_request_put gives it back (freeing an aside copy
// still held, when its collective failed before NCCL enqueued it).
nccl_request *nccl_request_get(nccl_ctx *x);
void nccl_request_put(nccl_ctx *x, nccl_request *r);
// Destroys the events of every request made and frees them (at teardown).
void nccl_free_requests(nccl_ctx *x);

// r runs `op` of `bytes` on group g's stream (peer_world_rank: a send's or receive's peer,
// -1 for a collective).
void nccl_request_note(nccl_request *r, comm_group_id g, int op, size_t bytes, int peer_world_rank);

// Orders what is enqueued next on the streams of the groups in `mask` after the compute
// backend's work: an event on comm->compute_stream when set, else inputs_ready.
tri_status nccl_order_inputs(comm *c, unsigned mask);

// Waits (polling, against the timeout) until NCCL has enqueued r's work, then records its
// done events on every stream of its mask, and frees its aside copy there after it.
tri_status nccl_request_record(comm *c, nccl_request *r);
// Polls until r is enqueued or, with `completed`, until its done events fired.
tri_status nccl_request_poll(comm *c, const nccl_request *r, int completed);
// The end of an operation that completes inside its call: record, poll to completion, put
// back.
tri_status nccl_request_finish(comm *c, nccl_request *r);

// comm_backend.h's wait (on the host, or handed to compute_stream) and progress.
tri_status nccl_wait(comm *c, comm_request *req, int on_host);
void nccl_progress(comm *c);

// ---- cuda/comm/nccl_init.cu ----

// Aborts every communicator without waiting for peers; every later call fails.
void nccl_abort_all(comm *c);
// comm_backend.h's destroy: flushes (against the timeout) and frees everything.
void nccl_destroy(comm *c);
