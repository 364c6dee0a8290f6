// cuda_api.h: what cuda/compute/ exports to the host C code, declared without any CUDA type.
//
// src/ never includes a CUDA header (DESIGN.md "Layout"). When trident is built without
// CUDA (USE_CUDA=0, or auto without nvcc), the Makefile links src/compute/cuda_nocuda.c instead of cuda/compute/:
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

#include "compute/backend.h"

// Number of CUDA devices this process can see; 0 when there is no driver, no device, or no
// CUDA in this build. Never prints an error: it is how backend "auto" decides.
int cuda_device_count(void);

// Picks this process's GPU, local_rank % cuda_device_count(), makes it current for the
// calling thread (cudaSetDevice) and stores its index in *device. Call it once at startup,
// before comm_nccl_create and before any other cuda/ function: every CUDA object (streams,
// communicators, buffers) belongs to the device current when it was made. TRI_ERR_CONFIG
// when no device is visible.
tri_status cuda_device_select(int local_rank, int *device);

// 1 in a build with CUDA (cuda/ linked), 0 in one without (src/compute/cuda_nocuda.c): lets the backend
// choice word its error ("no GPU" against "no CUDA in this build").
int cuda_in_build(void);

// The CUDA compute backend (cuda/backend_cuda.cu) on `device`, which the caller selected
// with cuda_device_select. Every op runs on one stream of its own; see backend.h for the ops
// and cuda/backend_cuda_internal.cuh for the streams and errors. Its fp32 matmuls run in TF32
// (faster, outside the fp32 tolerances) once backend_set_tf32 asked for it (train.precision
// tf32), or always with TRIDENT_CUDA_TF32=1. TRI_ERR_INTERNAL when the device cannot be set
// up.
tri_status backend_cuda_create(backend **out, int device);

#ifdef __cplusplus
}
#endif
