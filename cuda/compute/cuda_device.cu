// cuda_device.cu: which GPU a process uses (cuda_device_count, cuda_device_select; see
// compute/cuda_api.h), and the world rank that the check macros of cuda_common.h name in their
// reports.
#include "../base/cuda_common.h"
#include "compute/cuda_api.h"

// ---- the rank named by the check macros (cuda_common.h) ----

static int g_log_rank = 0;
void cuda_log_set_rank(int rank) { g_log_rank = rank; }
int cuda_log_rank(void) { return g_log_rank; }

// ---- devices ----

int cuda_device_count(void) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); // not sticky, but leave no error behind
        LOG_DEBUG("cudaGetDeviceCount: %s [%s]: no CUDA device", cudaGetErrorString(err),
                  cudaGetErrorName(err));
        return 0;
    }
    return n;
}

tri_status cuda_device_select(int local_rank, int *device) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        LOG_ERROR("no CUDA device is visible to this process (%s)",
                  err != cudaSuccess ? cudaGetErrorString(err) : "the device count is 0");
        LOG_ERROR("HINT: check nvidia-smi and CUDA_VISIBLE_DEVICES, or run on the CPU with "
                  "system.backend: cpu");
        return TRI_ERR_CONFIG;
    }
    int dev = (local_rank > 0 ? local_rank : 0) % n;
    CUDA_CHECK(cudaSetDevice(dev));
    LOG_DEBUG("local rank %d uses CUDA device %d of %d", local_rank, dev, n);
    *device = dev;
    return TRI_OK;
}
