// nccl_init.cu: creation and teardown of the NCCL comm backend: comm_nccl_create (the
// world communicator from rank 0's unique id, the groups split from it, a stream per
// group), destroy (finalize with a deadline) and abort. The design is described at the top
// of cuda/comm/comm_nccl.cu; the shared state is in cuda/comm/comm_nccl_internal.h.
#include "comm_nccl_internal.h"

#include <string.h>

// ---- creation and teardown ----

// Tears down every communicator without waiting for peers: after a timeout or an NCCL
// error, the other ranks may never answer.
void nccl_abort_all(comm *c) {
    nccl_ctx *x = ctx_of(c);
    // Children first, the world (their parent) last.
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        nccl_group *grp = &x->groups[g];
        if (!grp->nccl) continue;
        ncclResult_t res = ncclCommAbort(grp->nccl);
        if (res != ncclSuccess && res != ncclInProgress)
            LOG_DEBUG("ncclCommAbort(%s): %s", comm_group_name((comm_group_id)g),
                      ncclGetErrorString(res));
        grp->nccl = NULL;
    }
    x->aborted = 1;
}

// Flushes and frees every communicator, waiting for the flush at most timeout_s (then
// aborting), and releases the streams, events and buffers.
void nccl_destroy(comm *c) {
    if (!c) return;
    nccl_ctx *x = ctx_of(c);
    if (x && !x->aborted) {
        // Non-blocking finalize: each returns ncclInProgress until its communicator has
        // flushed its operations; then destroy frees it locally.
        for (int g = 0; g < COMM_GROUP_COUNT; g++) {
            nccl_group *grp = &x->groups[g];
            if (!grp->nccl) continue;
            ncclResult_t res = ncclCommFinalize(grp->nccl);
            if (res != ncclSuccess && res != ncclInProgress)
                cuda_report_nccl_error(res, "ncclCommFinalize(group communicator)", __FILE__,
                                       __LINE__);
        }
        const double start = time_now_s();
        for (int g = 0; g < COMM_GROUP_COUNT && !x->aborted; g++) {
            nccl_group *grp = &x->groups[g];
            while (grp->nccl) {
                ncclResult_t state = ncclSuccess;
                if (ncclCommGetAsyncError(grp->nccl, &state) != ncclSuccess)
                    state = ncclInternalError;
                if (state != ncclInProgress) break;
                double elapsed = time_now_s() - start;
                if (c->timeout_s > 0 && elapsed > c->timeout_s) {
                    nccl_print_prefixed(c,
                                        "error: comm timeout after %.1f s: finalizing the NCCL "
                                        "communicator of group %s; aborting it",
                                        elapsed, comm_group_name((comm_group_id)g));
                    nccl_abort_all(c);
                    break;
                }
                nccl_poll_pause(elapsed);
            }
        }
        for (int g = 0; g < COMM_GROUP_COUNT; g++) {
            nccl_group *grp = &x->groups[g];
            if (!grp->nccl) continue;
            // ncclCommDestroy needs a communicator in ncclSuccess state; one whose finalize
            // failed can only be aborted.
            ncclResult_t state = ncclSuccess;
            if (ncclCommGetAsyncError(grp->nccl, &state) != ncclSuccess || state != ncclSuccess) {
                (void)ncclCommAbort(grp->nccl);
                grp->nccl = NULL;
                continue;
            }
            ncclResult_t res = ncclCommDestroy(grp->nccl);
            if (res != ncclSuccess && res != ncclInProgress)
                cuda_report_nccl_error(res, "ncclCommDestroy(group communicator)", __FILE__,
                                       __LINE__);
            grp->nccl = NULL;
        }
    }
    if (x) {
        for (int g = 0; g < COMM_GROUP_COUNT; g++) {
            nccl_group *grp = &x->groups[g];
            if (grp->stream) (void)cudaStreamDestroy(grp->stream);
            free(grp->world_ranks);
        }
        if (x->scratch) (void)cudaFree(x->scratch);
        if (x->inputs_event) (void)cudaEventDestroy(x->inputs_event);
        nccl_free_requests(x);
        free(x->p2p);
        free(x);
    }
    free(c);
}

// Polls a communicator being created until it is ready (the creation of a non-blocking
// communicator returns at once; the work goes on in NCCL's threads).
static tri_status wait_ready(comm *c, ncclComm_t nc, comm_group_id g) {
    nccl_ctx *x = ctx_of(c);
    const double start = time_now_s();
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t res = ncclCommGetAsyncError(nc, &state);
        if (res != ncclSuccess) state = res;
        if (state == ncclSuccess) return TRI_OK;
        if (state != ncclInProgress) {
            const char *detail = ncclGetLastError(nc);
            nccl_print_prefixed(c,
                                "error: creating the NCCL communicator of group %s (device %d): "
                                "%s%s%s",
                                comm_group_name(g), x->device, ncclGetErrorString(state),
                                detail && detail[0] ? ": " : "", detail ? detail : "");
            return TRI_ERR_COMM;
        }
        double elapsed = time_now_s() - start;
        if (c->timeout_s > 0 && elapsed > c->timeout_s) {
            nccl_group *grp = &x->groups[g];
            char ranks[256], waiting[256];
            nccl_format_ranks(ranks, sizeof ranks, grp->world_ranks, grp->n_world_ranks, -1);
            nccl_format_ranks(waiting, sizeof waiting, grp->world_ranks, grp->n_world_ranks,
                              c->world_rank);
            nccl_print_prefixed(c,
                                "error: comm timeout after %.1f s: creating the NCCL "
                                "communicator of group %s (ranks %s); waiting for ranks %s",
                                elapsed, comm_group_name(g), ranks, waiting);
            nccl_print_prefixed(c,
                                "HINT: every rank must start; check that the launcher "
                                "started %d processes and that NCCL can reach them "
                                "(NCCL_DEBUG=WARN)",
                                c->world_size);
            return TRI_ERR_COMM;
        }
        nccl_poll_pause(elapsed);
    }
}

// The world ranks of this rank's group g (those of its color, ascending: the split's key
// order); sets size and rank in c->groups[g]. A middle stage's embedding group (no color)
// is empty: size 0, rank -1.
static void build_group(comm *c, const mesh *m, comm_group_id g) {
    nccl_group *grp = &ctx_of(c)->groups[g];
    const int color = mesh_group_color(m, g, c->world_rank);
    int n = 0, my_index = -1;
    int *ranks = (int *)xcalloc((size_t)c->world_size, sizeof(int));
    for (int r = 0; color >= 0 && r < c->world_size; r++) {
        if (mesh_group_color(m, g, r) != color) continue;
        if (r == c->world_rank) my_index = n;
        ranks[n++] = r;
    }
    TRI_ASSERT(color < 0 || my_index >= 0);
    grp->world_ranks = ranks;
    grp->n_world_ranks = n;
    c->groups[g].size = n;
    c->groups[g].rank = my_index;
}

tri_status comm_nccl_create(comm **out, const mesh *m, launch_info *li, double timeout_s) {
    *out = NULL;
    const int TP = m->tp, DP = m->dp, PP = m->pp;
    if (DP < 1 || TP * DP * PP != li->world || li->rank < 0 || li->rank >= li->world) {
        LOG_ERROR("the mesh tp %d x dp %d x pp %d does not match a world of %d ranks (rank %d)", TP,
                  DP, PP, li->world, li->rank);
        return TRI_ERR_CONFIG;
    }
    cuda_log_set_rank(li->rank);

    tri_status rc = TRI_OK;
    ncclResult_t res = ncclSuccess;
    ncclComm_t world = NULL;
    ncclUniqueId id;
    ncclConfig_t nconf = NCCL_CONFIG_INITIALIZER;
    nconf.blocking = 0;
    static const char zero_id[sizeof(ncclUniqueId)] = {0};

    nccl_ctx *x = (nccl_ctx *)xcalloc(1, sizeof *x);
    comm *c = comm_backend_new("nccl", &nccl_iface, x, li->rank, li->world, timeout_s);
    x->coord = mesh_coord_of(m, li->rank);
    CUDA_CHECK_GOTO(cudaGetDevice(&x->device), rc, fail);
    CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&x->inputs_event, cudaEventDisableTiming), rc, fail);
    // The staging of small host buffers and the barrier's word, made here: nothing in a step
    // allocates with cudaMalloc (which synchronises the device, NCCL's kernels included).
    CUDA_CHECK_GOTO(cudaMalloc(&x->scratch, NCCL_SCRATCH_BYTES), rc, fail);
    x->scratch_bytes = NCCL_SCRATCH_BYTES;

    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        build_group(c, m, (comm_group_id)g);
        CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&x->groups[g].stream, cudaStreamNonBlocking), rc,
                        fail);
    }
    // A world of one reaches here only under the test hook TRIDENT_TEST_NCCL_ONE_RANK
    // (comm_create_for): then every group is a one-rank communicator split from a one-rank
    // world, and the layer sends groups of one through them, so that one GPU exercises the
    // backend's every collective.
    c->one_rank_groups = li->world == 1;

    // The world communicator, from rank 0's unique id. If rank 0 cannot make one it shares
    // zeros, so that every rank fails instead of waiting in the exchange.
    memset(&id, 0, sizeof id);
    if (li->rank == 0) {
        res = ncclGetUniqueId(&id);
        if (res != ncclSuccess) {
            cuda_report_nccl_error(res, "ncclGetUniqueId(&id)", __FILE__, __LINE__);
            memset(&id, 0, sizeof id);
        }
    }
    // A key per creation: a process may create (and destroy) the backend more than once.
    static int generation = 0;
    char key[64];
    snprintf(key, sizeof key, "trident.nccl.world_id.%d", generation++);
    TRI_CHECK_GOTO(launch_exchange(li, key, 0, &id, sizeof id), rc, fail);
    if (!memcmp(&id, zero_id, sizeof id)) {
        LOG_ERROR("rank 0 could not create the NCCL unique id; see its log");
        rc = TRI_ERR_COMM;
        goto fail;
    }
    res = ncclCommInitRankConfig(&world, li->world, id, li->rank, &nconf);
    if (res != ncclSuccess && res != ncclInProgress) {
        cuda_report_nccl_error(res, "ncclCommInitRankConfig(&world, ...)", __FILE__, __LINE__);
        rc = TRI_ERR_COMM;
        goto fail;
    }
    x->groups[COMM_GROUP_WORLD].nccl = world;
    TRI_CHECK_GOTO(wait_ready(c, world, COMM_GROUP_WORLD), rc, fail);

    // The groups, split from the world one after the other in the same order on every rank
    // (each split is collective over the world). A kind of group with one rank everywhere
    // is skipped by all ranks alike, but in a world of one (the test hook's communicators).
    for (int gi = 0; gi < COMM_GROUP_WORLD; gi++) {
        const comm_group_id g = (comm_group_id)gi;
        const int ranks_everywhere = g == COMM_GROUP_TP      ? TP
                                     : g == COMM_GROUP_DP    ? DP
                                     : g == COMM_GROUP_PP    ? PP
                                     : g == COMM_GROUP_EMBED ? (PP > 1 ? 2 : 1)
                                                             : TP * PP;
        if (ranks_everywhere == 1 && li->world > 1) continue;
        // Keys are the group ranks, so NCCL's rank order is the mesh's; a middle stage,
        // in no embedding group, joins no communicator.
        int color = mesh_group_color(m, g, li->rank), key = c->groups[g].rank;
        if (color < 0) color = NCCL_SPLIT_NOCOLOR, key = 0;
        // With a non-blocking parent the split runs in NCCL's thread, which stores the new
        // communicator into *newcomm when it is done: the pointer must stay valid (it is
        // the group's slot), and it reads NULL until then.
        res = ncclCommSplit(world, color, key, &x->groups[g].nccl, &nconf);
        if (res != ncclSuccess && res != ncclInProgress) {
            cuda_report_nccl_error(res, "ncclCommSplit(world, color, key, &newcomm, &config)",
                                   __FILE__, __LINE__);
            rc = TRI_ERR_COMM;
            goto fail;
        }
        // The split is a job of the parent: it must be ready again before the next split.
        TRI_CHECK_GOTO(wait_ready(c, world, g), rc, fail);
        ncclComm_t child = __atomic_load_n(&x->groups[g].nccl, __ATOMIC_ACQUIRE);
        if (color != NCCL_SPLIT_NOCOLOR && !child) {
            nccl_print_prefixed(c,
                                "error: ncclCommSplit for group %s completed without a "
                                "communicator",
                                comm_group_name(g));
            rc = TRI_ERR_COMM;
            goto fail;
        }
        if (child) TRI_CHECK_GOTO(wait_ready(c, child, g), rc, fail);
    }

    LOG_DEBUG("nccl: rank %d on device %d: tp %d/%d dp %d/%d pp %d/%d embed %d/%d mp %d/%d",
              li->rank, x->device, c->groups[COMM_GROUP_TP].rank, c->groups[COMM_GROUP_TP].size,
              c->groups[COMM_GROUP_DP].rank, c->groups[COMM_GROUP_DP].size,
              c->groups[COMM_GROUP_PP].rank, c->groups[COMM_GROUP_PP].size,
              c->groups[COMM_GROUP_EMBED].rank, c->groups[COMM_GROUP_EMBED].size,
              c->groups[COMM_GROUP_MP].rank, c->groups[COMM_GROUP_MP].size);
    *out = c;
    return TRI_OK;

fail:
    // Peers may be stuck in a creation this rank gave up: abort, do not wait for them.
    nccl_abort_all(c);
    nccl_destroy(c);
    return rc;
}
