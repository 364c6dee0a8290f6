// comm_nccl_internal.h: what the two files of the NCCL comm backend share, and nothing
// else includes: its state, and the few functions each calls in the other.
//   cuda/comm_nccl.cu   the operations (collectives, sends and receives, groups) and the
//                       polling of their completion against the timeout
//   cuda/nccl_init.cu   comm_nccl_create (the communicators and streams of every group),
//                       destroy and abort
#pragma once

#include "cuda_common.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "trident needs NCCL 2.18 or newer (ncclCommSplit and non-blocking communicators)"
#endif

// ---- state ----

#define MAX_PENDING_PEERS 8

// What a group's stream is running, to name it if it times out.
typedef struct {
    unsigned ops;            // bit op per comm_op_id, bit COMM_OP_COUNT for a barrier
    uint64_t bytes;          // their payload
    int collective;          // a collective is among them: every other rank is waited for
    int peers[MAX_PENDING_PEERS]; // world ranks of send/recv peers
    int n_peers;
} nccl_pending;

typedef struct {
    ncclComm_t nccl;     // NULL for a group of one
    cudaStream_t stream; // every operation of the group runs here
    int *world_ranks;    // (size) world rank of each rank of the group, in group order
    int n_world_ranks;   // = size
    nccl_pending pending;
} nccl_group;

// A send or receive collected between group_start and group_end.
typedef struct {
    comm_group_id g;
    int op; // COMM_OP_SEND or COMM_OP_RECV
    void *buf;
    size_t count;
    comm_dtype dt;
    int peer; // rank in group g
} nccl_p2p_op;

typedef struct {
    nccl_group groups[COMM_GROUP_COUNT];
    mesh_coord coord;
    int device;
    int group_depth;     // group_start nesting
    nccl_p2p_op *p2p;    // (n_p2p) collected for the outermost group_end
    int n_p2p, cap_p2p;
    int aborted;         // set once the communicators were aborted: every later call fails
    void *scratch;       // device staging for host buffers, overlaps and the barrier's word
    size_t scratch_bytes;
} nccl_ctx;

static inline nccl_ctx *ctx_of(comm *c) { return (nccl_ctx *)c->ctx; }

// ---- cuda/comm_nccl.cu ----

// Fills the operations of c's table (all but destroy, which nccl_init.cu sets).
void nccl_install_ops(comm *c);

// "0,1,2,3" (at most 16 shown, then "... (N ranks)"); skip < 0 or a rank to leave out.
void nccl_format_ranks(char *buf, size_t cap, const int *ranks, int n, int skip);

// An error line on stderr with the full mesh prefix "[r5 tp1 dp0 pp1]", rank 0 included.
void nccl_print_prefixed(comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Sleeps a little between polls, longer as `elapsed` (seconds waited so far) grows.
void nccl_poll_pause(double elapsed);

// ---- cuda/nccl_init.cu ----

// Aborts every communicator without waiting for peers; every later call fails.
void nccl_abort_all(comm *c);
