// comm_select.c: comm_create_for (comm.h), the one place that chooses between the comm
// backends, as backend_select.c does for the compute backends.
#include "comm/comm.h"

#include "base/env.h"

#include <string.h>
#include <unistd.h>

#include "comm/comm_gpus.h"
#include "comm/comm_mpi.h"
#include "comm/comm_staged.h"
#include "comm/mesh.h"
#include "comm/nccl_api.h"
#include "compute/backend.h"
#include "compute/cuda_api.h"

static void synchronize_backend(void *be) { ((backend *)be)->synchronize(be); }

// This rank's GPU: the device backend's bus id and the devices it sees; or, under the test
// hook TRIDENT_TEST_GPU_BUS_ID (a comma-separated list), item local_rank of the list (mod
// its length) with as many devices as items.
static void my_gpu(const launch_info *li, const backend *be, const char *fake,
                   comm_gpu_of_rank *me) {
    memset(me, 0, sizeof *me);
    snprintf(me->host, sizeof me->host, "%s", li->host);
    me->local_size = li->local_size;
    if (!fake) {
        snprintf(me->bus_id, sizeof me->bus_id, "%s", be->device_bus_id ? be->device_bus_id : "");
        me->devices = cuda_device_count();
        return;
    }
    int items = 1;
    for (const char *p = fake; *p; p++) items += *p == ',';
    const int want = li->local_rank % items;
    const char *item = fake;
    for (int k = 0; k < want; k++) item = strchr(item, ',') + 1;
    const size_t len = strcspn(item, ",");
    snprintf(me->bus_id, sizeof me->bus_id, "%.*s", (int)len, item);
    me->devices = items;
}

// system.comm auto or nccl on a device backend: do ranks share a GPU, which NCCL refuses?
// Every rank learns every rank's GPU and decides the same (comm_gpus.h). auto then stages
// MPI through host memory, with one warning line; nccl is refused (exit 2).
static tri_status check_shared_gpus(launch_info *li, const backend *be, comm_kind kind,
                                    const char *fake, int *stage) {
    *stage = 0;
    comm_gpu_of_rank me, *all = xcalloc_for((size_t)li->world, sizeof *all, "the ranks' GPUs");
    my_gpu(li, be, fake, &me);
    tri_status st = comm_gpus_gather(li, &me, all);
    comm_gpu_sharing s = {0};
    if (st == TRI_OK) s = comm_gpus_shared(all, li->world);
    free(all);
    TRI_CHECK(st);
    if (!s.shared) return TRI_OK;
    if (kind == COMM_NCCL) {
        if (li->rank == 0) {
            LOG_ERROR("system.comm: nccl, but %s, and NCCL refuses a GPU shared by two ranks",
                      s.why);
            LOG_HINT("set system.comm: auto or mpi (collectives staged through host memory), "
                     "or start at most one rank per GPU");
        } else {
            sleep(2); // the launcher ends the job at the first exit: rank 0 reports first
        }
        return TRI_ERR_CONFIG;
    }
    if (li->rank == 0)
        LOG_WARN("%s, which NCCL refuses: system.comm auto uses MPI staged through host memory "
                 "(slower; system.comm: mpi says so without this warning)",
                 s.why);
    *stage = 1;
    return TRI_OK;
}

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
    const char *fake = env_get(ENV_TEST_GPU_BUS_ID);
    int shared = 0;
    if ((device || fake) && kind != COMM_MPI)
        TRI_CHECK(check_shared_gpus(li, be, kind, fake, &shared));
    if (device && kind != COMM_MPI && !shared) {
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
    // the CPU path too, for the tests, and so does a shared GPU the test hook made up.
    if (device || shared || env_flag(ENV_TEST_COMM_STAGED)) return comm_staged_create(out, mpi, be);
    *out = mpi;
    return TRI_OK;
}
