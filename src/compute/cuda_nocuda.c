// cuda_nocuda.c: the stand-in for cuda/compute/ in a build without CUDA (USE_CUDA=0, or auto without
// nvcc). The Makefile links exactly one of the two, so callers never #ifdef on the backend
// (STYLE.md: a missing optional feature compiles a stand-in file chosen by the Makefile).
#include "compute/cuda_api.h"

static tri_status no_cuda(const char *what) {
    LOG_ERROR("%s: this build of trident has no CUDA support; rebuild with nvcc on PATH "
              "(USE_CUDA=1)",
              what);
    return TRI_ERR_CONFIG;
}

// No CUDA: no device, silently (backend "auto" asks this to choose the CPU).
int cuda_device_count(void) { return 0; }

tri_status cuda_device_select(int local_rank, int *device) {
    (void)local_rank;
    *device = -1;
    return no_cuda("selecting a CUDA device");
}

int cuda_in_build(void) { return 0; }

tri_status backend_cuda_create(backend **out, int device) {
    (void)device;
    *out = NULL;
    return no_cuda("the CUDA compute backend (system.backend: cuda)");
}
