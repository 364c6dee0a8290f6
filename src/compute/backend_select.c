// backend_select.c: system.backend -> a compute backend (see backend_select.h). The one
// place that chooses between the backends; everything after it calls ops through the table.
#include "compute/backend_select.h"

#include "compute/cuda_api.h"

static tri_status create_cuda(int local_rank, backend **out) {
    int device = -1;
    TRI_CHECK(cuda_device_select(local_rank, &device));
    TRI_CHECK(backend_cuda_create(out, device));
    LOG_DEBUG("compute backend: cuda, device %d (local rank %d)", device, local_rank);
    return TRI_OK;
}

tri_status backend_create_for(backend_kind kind, int local_rank, int threads, backend **out) {
    *out = NULL;
    if (kind == BACKEND_CPU) return backend_cpu_create(out, threads);
    const int devices = cuda_device_count();
    if (kind == BACKEND_AUTO) {
        if (devices > 0) return create_cuda(local_rank, out);
        LOG_DEBUG("compute backend: cpu (system.backend auto, %s)",
                  cuda_in_build() ? "no CUDA device visible" : "a build without CUDA");
        return backend_cpu_create(out, threads);
    }
    TRI_ASSERT(kind == BACKEND_CUDA);
    if (devices > 0) return create_cuda(local_rank, out);
    if (!cuda_in_build()) {
        LOG_ERROR("system.backend: cuda, but this build of trident has no CUDA support");
        LOG_HINT("rebuild with the CUDA toolkit's nvcc on PATH (make USE_CUDA=1), or set "
                 "system.backend: cpu (or auto)");
    } else {
        LOG_ERROR("system.backend: cuda, but no CUDA device is visible to this process");
        LOG_HINT("check nvidia-smi and CUDA_VISIBLE_DEVICES, or set system.backend: cpu (or "
                 "auto, which falls back to the CPU)");
    }
    return TRI_ERR_CONFIG;
}
