// comm_staged.h: a comm backend over another whose collectives move host memory (MPI), for
// a compute backend whose buffers live on a device (CUDA). Every call copies its buffers to
// host staging through the compute backend, runs the inner call there and copies the
// results back (the non-blocking forms: at wait; each call in flight holds a host buffer of
// its own, from a pool). It is how several ranks share one GPU, which NCCL refuses
// (system.comm: mpi with system.backend: cuda), at the cost of the copies.
// TRIDENT_COMM_STAGED=1 wraps the CPU path's MPI too, so that the tests run this code
// without a GPU.
#pragma once
#include "compute/backend.h"
#include "comm/comm.h"

// Takes ownership of `inner` (destroyed with the wrapper). Groups, ranks and the timeout are
// inner's; the payload counters count what inner counts.
tri_status comm_staged_create(comm **out, comm *inner, backend *be);
