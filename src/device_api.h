// device_api.h: what cuda/ exports to the host C code, declared without any CUDA type.
//
// src/ never includes a CUDA header (DESIGN.md "Layout"). When trident is built without
// CUDA (USE_CUDA=0, or auto without nvcc), the Makefile links src/nocuda.c instead of cuda/:
// the same symbols, each failing with "this build of trident has no CUDA support" as
// TRI_ERR_CONFIG, so that callers never #ifdef on the backend.
#pragma once

#ifdef __cplusplus
// The headers of src/ are C: give their declarations C linkage when nvcc compiles cuda/.
// The C library headers come first, outside the block, so that their C++ overloads are not
// declared inside extern "C".
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
extern "C" {
#endif

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "launch.h"

// Number of CUDA devices this process can see; 0 when there is no driver, no device, or no
// CUDA in this build. Never prints an error: it is how backend "auto" decides.
int cuda_device_count(void);

// Picks this process's GPU, local_rank % cuda_device_count(), makes it current for the
// calling thread (cudaSetDevice) and stores its index in *device. Call it once at startup,
// before comm_nccl_create and before any other cuda/ function: every CUDA object (streams,
// communicators, buffers) belongs to the device current when it was made. TRI_ERR_CONFIG
// when no device is visible.
tri_status cuda_device_select(int local_rank, int *device);

// 1 in a build with CUDA (cuda/ linked), 0 in one without (src/nocuda.c): lets the backend
// choice word its error ("no GPU" against "no CUDA in this build").
int cuda_in_build(void);

// The CUDA compute backend (cuda/backend_cuda.cu) on `device`, which the caller selected
// with cuda_device_select. Every op runs on one stream of its own; see backend.h for the ops
// and cuda/backend_cuda_internal.cuh for the streams and errors. TRIDENT_CUDA_TF32=1 runs the
// matmuls in TF32 (faster, outside the fp32 tolerances). TRI_ERR_INTERNAL when the device
// cannot be set up.
tri_status backend_cuda_create(backend **out, int device);

// The NCCL comm backend (cuda/nccl_init.cu): one NCCL communicator and one CUDA stream per
// group of the mesh (tp, dp, pp, embedding, model-parallel, world), over device memory.
// A collective on host memory (a pageable or pinned host pointer) is staged through a
// device buffer; send and recv take device memory only.
//
// Preconditions: cfg is resolved (config_resolve_world) for li->world ranks; the device is
// already selected (cuda_device_select); every rank of the world calls this together. The
// world communicator's unique id travels through launch_exchange, the groups are split from
// it. timeout_s bounds the creation and, stored as comm->timeout_s, every later collective
// (<= 0: wait forever). On a timeout the communicators are aborted and the call returns
// TRI_ERR_COMM (exit code 5).
//
// Buffers passed to a collective must be fully written before the call (synchronize the
// stream that produced them); each collective has completed on the device when it returns
// (group_end for sends and receives inside a group), so any stream may read its result.
// Groups and in-place forms are those of comm_mpi.h: a middle pipeline stage is alone in
// its embedding group (size 1), so a collective on it is the identity.
tri_status comm_nccl_create(comm **out, const run_config *cfg, launch_info *li, double timeout_s);

#ifdef __cplusplus
}
#endif
