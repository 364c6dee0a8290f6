// comm_select.c: comm_create_for (comm.h), the one place that chooses between the comm
// backends, as backend_select.c does for the compute backends.
#include "comm/comm.h"

#include "base/env.h"

#include <string.h>

#include "comm/comm_mpi.h"
#include "comm/comm_staged.h"
#include "comm/mesh.h"
#include "comm/nccl_api.h"
#include "compute/backend.h"

static void synchronize_backend(void *be) { ((backend *)be)->synchronize(be); }

tri_status comm_create_for(comm **out, const mesh *m, comm_kind kind, launch_info *li, backend *be,
                           double timeout_s) {
    *out = NULL;
    TRI_ASSERT(be);
    // A world of one needs no comm backend, except to check NCCL's on one GPU (test hook).
    const int nccl_one_rank = kind == COMM_NCCL && be->device_memory &&
                              env_flag(ENV_TEST_NCCL_ONE_RANK);
    if (li->world == 1 && !nccl_one_rank) return comm_self_create(out, be);
    if (kind == COMM_SELF) {
        LOG_ERROR("system.comm: self is for a world of one, not of %d ranks", li->world);
        return TRI_ERR_CONFIG;
    }
    const int device = be->device_memory;
    if (kind == COMM_NCCL && !device) {
        LOG_ERROR("system.comm: nccl moves GPU memory, but this run computes on the %s backend; "
                  "use mpi (or auto)",
                  be->name);
        return TRI_ERR_CONFIG;
    }
    if (device && kind != COMM_MPI) {
        TRI_CHECK(comm_nccl_create(out, m, li, timeout_s));
        // NCCL runs on streams of its own: the backend's stream must have written a buffer
        // before a collective reads it, which events on that stream order without blocking
        // the host (inputs_ready, a host synchronize, where the backend has no stream).
        (*out)->compute_stream = be->stream;
        (*out)->inputs_ready = synchronize_backend;
        (*out)->inputs_ready_ctx = be;
        return TRI_OK;
    }
    comm *mpi = NULL;
    TRI_CHECK(comm_mpi_create(&mpi, m, li, timeout_s));
    // MPI moves host memory: with a device backend (several ranks sharing a GPU, which NCCL
    // refuses) every call is staged through host buffers. TRIDENT_COMM_STAGED=1 does it on
    // the CPU path too, for the tests.
    if (device || env_flag(ENV_TEST_COMM_STAGED)) return comm_staged_create(out, mpi, be);
    *out = mpi;
    return TRI_OK;
}
