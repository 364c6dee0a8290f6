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
#include "config/config.h"

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
