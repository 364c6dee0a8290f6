// cuda_common.h: what every file of cuda/ shares: the host C headers with C linkage, and
// the check-macro family for CUDA and NCCL calls (STYLE.md: "one check macro family that
// prints the statement, file:line, rank and device with the library's error string").
//
//   CUDA_CHECK(call)              on error: report, return TRI_ERR_INTERNAL
//   CUDA_CHECK_GOTO(call, rc, l)  on error: report, rc = TRI_ERR_INTERNAL, goto l
//   NCCL_CHECK(call)              on error: report, return TRI_ERR_COMM
//   NCCL_CHECK_GOTO(call, rc, l)  on error: report, rc = TRI_ERR_COMM, goto l
//
// NCCL_CHECK treats ncclInProgress as an error: calls on non-blocking communicators, which
// may answer ncclInProgress, check their result by hand (see cuda/comm_nccl.cu).
// A report reads (the prefix is log_msg's, on ranks other than 0)
//   [r5 tp1 dp0 pp1] error: CUDA call 'cudaMalloc(&p, bytes)' failed at cuda/x.cu:42 on
//   rank 5 (device 1): out of memory [cudaErrorMemoryAllocation]
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

// The host C headers, with C linkage; the C library headers first, outside the block, so
// that their C++ overloads are not declared inside extern "C".
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
extern "C" {
#include "base/common.h"
}

// The world rank named by the check macros; set by comm_nccl_create (before that: 0).
// Defined in cuda/compute/cuda_device.cu.
void cuda_log_set_rank(int rank);
int cuda_log_rank(void);

static inline int cuda_current_device(void) {
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess) dev = -1;
    return dev;
}

static inline void cuda_report_cuda_error(cudaError_t err, const char *stmt, const char *file,
                                          int line) {
    LOG_ERROR("CUDA call '%s' failed at %s:%d on rank %d (device %d): %s [%s]", stmt, file, line,
              cuda_log_rank(), cuda_current_device(), cudaGetErrorString(err),
              cudaGetErrorName(err));
}

static inline void cuda_report_nccl_error(ncclResult_t res, const char *stmt, const char *file,
                                          int line) {
    // ncclGetLastError names the cause ("peer closed connection", "invalid usage: ...");
    // it can be empty, or left over from an earlier failure.
    const char *detail = ncclGetLastError(NULL);
    LOG_ERROR("NCCL call '%s' failed at %s:%d on rank %d (device %d): %s%s%s", stmt, file, line,
              cuda_log_rank(), cuda_current_device(), ncclGetErrorString(res),
              detail && detail[0] ? ": " : "", detail ? detail : "");
}

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t cuda_check_err_ = (call);                                                      \
        if (cuda_check_err_ != cudaSuccess) {                                                      \
            cuda_report_cuda_error(cuda_check_err_, #call, __FILE__, __LINE__);                    \
            return TRI_ERR_INTERNAL;                                                               \
        }                                                                                          \
    } while (0)

#define CUDA_CHECK_GOTO(call, rc, label)                                                           \
    do {                                                                                           \
        cudaError_t cuda_check_err_ = (call);                                                      \
        if (cuda_check_err_ != cudaSuccess) {                                                      \
            cuda_report_cuda_error(cuda_check_err_, #call, __FILE__, __LINE__);                    \
            (rc) = TRI_ERR_INTERNAL;                                                               \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#define NCCL_CHECK(call)                                                                           \
    do {                                                                                           \
        ncclResult_t nccl_check_res_ = (call);                                                     \
        if (nccl_check_res_ != ncclSuccess) {                                                      \
            cuda_report_nccl_error(nccl_check_res_, #call, __FILE__, __LINE__);                    \
            return TRI_ERR_COMM;                                                                   \
        }                                                                                          \
    } while (0)

#define NCCL_CHECK_GOTO(call, rc, label)                                                           \
    do {                                                                                           \
        ncclResult_t nccl_check_res_ = (call);                                                     \
        if (nccl_check_res_ != ncclSuccess) {                                                      \
            cuda_report_nccl_error(nccl_check_res_, #call, __FILE__, __LINE__);                    \
            (rc) = TRI_ERR_COMM;                                                                   \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)
