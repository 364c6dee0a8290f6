// nccl_nocuda.c: the stand-in for cuda/comm/ in a build without CUDA (USE_CUDA=0, or auto
// without nvcc). The Makefile links exactly one of the two, so callers never #ifdef on the
// backend (STYLE.md: a missing optional feature compiles a stand-in file chosen by the
// Makefile).
#include "comm/nccl_api.h"

tri_status comm_nccl_create(comm **out, const mesh *m, launch_info *li, double timeout_s) {
    (void)m;
    (void)li;
    (void)timeout_s;
    *out = NULL;
    LOG_ERROR("the NCCL comm backend (system.comm: nccl): this build of trident has no CUDA "
              "support; rebuild with nvcc on PATH (USE_CUDA=1)");
    return TRI_ERR_CONFIG;
}
