// nccl_api.h: what cuda/comm/ exports to the host C code, declared without any CUDA type.
// In a build without CUDA the Makefile links src/comm/nccl_nocuda.c instead: the same
// symbol, failing with "this build of trident has no CUDA support" as TRI_ERR_CONFIG.
#pragma once

#ifdef __cplusplus
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
extern "C" {
#endif

#include "comm/comm.h"
#include "comm/launch.h"
#include "comm/mesh.h"

// The NCCL comm backend (cuda/comm/nccl_init.cu): one NCCL communicator and one CUDA stream
// per group of the mesh (tp, dp, pp, embedding, model-parallel, world), over device memory.
// A collective on host memory (a pageable or pinned host pointer) is staged through a
// device buffer; send and recv take device memory only. Callers get it from comm_create_for
// (comm.h), which also sets compute_stream and inputs_ready.
//
// Preconditions: m's product is li->world; the device is already selected
// (cuda_device_select); every rank of the world calls this together. The world
// communicator's unique id travels through launch_exchange, the groups are split from it
// (mesh_group_color). timeout_s bounds the creation and, stored as comm->timeout_s, every
// later collective (<= 0: wait forever). On a timeout the communicators are aborted and the
// call returns TRI_ERR_COMM (exit code 5).
//
// Every operation is ordered after the compute backend's work (an event on compute_stream,
// or without it the host synchronize of inputs_ready); a blocking call has completed on the
// device when it returns (comm_group_end for sends and receives inside a group), so any
// stream may read its result. Groups and in-place forms are those of comm.h: a middle
// pipeline stage is in no embedding group (size 0).
tri_status comm_nccl_create(comm **out, const mesh *m, launch_info *li, double timeout_s);

#ifdef __cplusplus
}
#endif
