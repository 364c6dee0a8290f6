// comm_staged.h: a comm backend over another whose collectives move host memory (MPI), for
// a compute backend whose buffers live on a device (CUDA). Every call copies its buffers to
// host staging through the compute backend, starts the inner call there and copies the
// results back at wait (each call in flight holds a host buffer of its own, from a pool).
// It is how several ranks share one GPU, which NCCL refuses (system.comm: mpi with
// system.backend: cuda), at the cost of the copies.
// TRIDENT_COMM_STAGED=1 wraps the CPU path's MPI too, so that the tests run this code
// without a GPU.
#pragma once
#include "compute/backend.h"
#include "comm/comm.h"

// Takes ownership of `inner` (destroyed with the wrapper). Groups, ranks and the timeout are
// inner's. The layer counts the payload on the wrapper; the wrapper calls inner's table
// (comm_backend.h) directly, so nothing is counted twice.
tri_status comm_staged_create(comm **out, comm *inner, backend *be);
