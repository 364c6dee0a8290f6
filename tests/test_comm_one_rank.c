// test_comm_one_rank: the comm layer's groups of one (src/comm/comm_dispatch.c) and the test
// hook TRIDENT_TEST_NCCL_ONE_RANK, which lets one GPU check the NCCL backend's collectives
// (scripts/gpu-check.sh runs `comm-test --comm nccl` under it): a comm whose one_rank_groups
// is set sends every collective of a group of one to its backend, with the layer's own
// answers (nothing, or the local copy) otherwise; groups of one count no payload either way.
// comm_create_for picks NCCL's backend for a world of one only under the hook, with comm nccl
// and a device backend (here without a GPU that creation fails, which is what shows it was
// asked for).
#include "base/env.h"
#include "comm/comm_backend.h"
#include "comm/launch.h"
#include "comm/mesh.h"
#include "compute/backend.h"
#include "testlib.h"

#include <string.h>

// A backend that records which entries the layer called, on groups that all have one rank.
static int calls[8]; // all_reduce, reduce_scatter, all_gather, broadcast, barrier, copy

static tri_status rec_all_reduce(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                                 comm_reduce_op op, comm_request *req) {
    (void)c, (void)g, (void)buf, (void)count, (void)dt, (void)op, (void)req;
    calls[0]++;
    return TRI_OK;
}
static tri_status rec_reduce_scatter(comm *c, comm_group_id g, const void *send, void *recv,
                                     size_t count, tri_dtype dt, comm_request *req) {
    (void)c, (void)g, (void)send, (void)recv, (void)count, (void)dt, (void)req;
    calls[1]++;
    return TRI_OK;
}
static tri_status rec_all_gather(comm *c, comm_group_id g, const void *send, void *recv,
                                 size_t count, tri_dtype dt, comm_request *req) {
    (void)c, (void)g, (void)send, (void)recv, (void)count, (void)dt, (void)req;
    calls[2]++;
    return TRI_OK;
}
static tri_status rec_broadcast(comm *c, comm_group_id g, void *buf, size_t count, tri_dtype dt,
                                int root, comm_request *req) {
    (void)c, (void)g, (void)buf, (void)count, (void)dt, (void)root, (void)req;
    calls[3]++;
    return TRI_OK;
}
static tri_status rec_barrier(comm *c, comm_group_id g, comm_request *req) {
    (void)c, (void)g, (void)req;
    calls[4]++;
    return TRI_OK;
}
static tri_status rec_group(comm *c) {
    (void)c;
    return TRI_OK;
}
static tri_status rec_group_end(comm *c, comm_request *req) {
    (void)c;
    req->impl = NULL;
    return TRI_OK;
}
static tri_status rec_wait(comm *c, comm_request *req, int on_host) {
    (void)c, (void)on_host;
    req->impl = NULL;
    return TRI_OK;
}
static void rec_progress(comm *c) { (void)c; }
static tri_status rec_copy(comm *c, comm_group_id g, comm_op_id op, const void *send, void *recv,
                           size_t bytes) {
    (void)c, (void)g, (void)op;
    memmove(recv, send, bytes);
    calls[5]++;
    return TRI_OK;
}
static void rec_destroy(comm *c) { free(c); }

static const struct comm_iface rec_iface = {
    /* .all_reduce_start     = */ rec_all_reduce,
    /* .reduce_scatter_start = */ rec_reduce_scatter,
    /* .all_gather_start     = */ rec_all_gather,
    /* .broadcast_start      = */ rec_broadcast,
    /* .barrier_start        = */ rec_barrier,
    /* .send                 = */ NULL,
    /* .recv                 = */ NULL,
    /* .group_start          = */ rec_group,
    /* .group_end_start      = */ rec_group_end,
    /* .wait                 = */ rec_wait,
    /* .progress             = */ rec_progress,
    /* .local_copy           = */ rec_copy,
    /* .destroy              = */ rec_destroy,
};

// Every collective once on every group of a world of one; calls[] then says which reached
// the backend.
static void every_collective(comm *c) {
    memset(calls, 0, sizeof calls);
    float a[4] = {1, 2, 3, 4}, b[4] = {0};
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        TRI_ASSERT(comm_all_reduce(c, g, a, 4, DTYPE_FP32, COMM_REDUCE_SUM) == TRI_OK);
        TRI_ASSERT(comm_reduce_scatter(c, g, a, b, 4, DTYPE_FP32) == TRI_OK);
        TRI_ASSERT(comm_all_gather(c, g, a, b, 4, DTYPE_FP32) == TRI_OK);
        TRI_ASSERT(comm_broadcast(c, g, a, 4, DTYPE_FP32, 0) == TRI_OK);
        TRI_ASSERT(comm_barrier(c, g) == TRI_OK);
        comm_request req;
        TRI_ASSERT(comm_all_reduce_start(c, g, a, 4, DTYPE_BF16, COMM_REDUCE_MAX, &req) == TRI_OK);
        TRI_ASSERT(comm_wait(c, &req) == TRI_OK);
    }
}

static void test_dispatch(void) {
    comm *c = comm_backend_new("record", &rec_iface, NULL, 0, 1, 0);
    for (int g = 0; g < COMM_GROUP_COUNT; g++) c->groups[g] = (comm_group){.size = 1, .rank = 0};
    const int G = COMM_GROUP_COUNT;

    every_collective(c);
    TEST_CHECK(!calls[0] && !calls[1] && !calls[2] && !calls[3] && !calls[4] && calls[5] == 2 * G,
               "comm_groups_of_one_answered_by_the_layer",
               "backend calls: all_reduce %d reduce_scatter %d all_gather %d broadcast %d "
               "barrier %d local copies %d (want 0 0 0 0 0 %d)",
               calls[0], calls[1], calls[2], calls[3], calls[4], calls[5], 2 * G);

    c->one_rank_groups = 1;
    every_collective(c);
    TEST_CHECK(calls[0] == 2 * G && calls[1] == G && calls[2] == G && calls[3] == G &&
                   calls[4] == G && !calls[5],
               "comm_one_rank_groups_reach_the_backend",
               "backend calls: all_reduce %d reduce_scatter %d all_gather %d broadcast %d "
               "barrier %d local copies %d (want %d %d %d %d %d 0)",
               calls[0], calls[1], calls[2], calls[3], calls[4], calls[5], 2 * G, G, G, G, G);

    uint64_t counted = 0;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) counted += comm_group_bytes(c, g);
    TEST_CHECK(counted == 0, "comm_one_rank_groups_count_nothing", "%llu bytes counted",
               (unsigned long long)counted);
    comm_destroy(c);
}

// comm_create_for in a world of one, on a stand-in device backend (a host backend that says
// its memory is a device's): self without the hook, NCCL's backend with it (whose creation
// fails without a GPU, or in a build without CUDA); a host backend keeps self either way.
static void test_select(void) {
    backend *cpu = NULL;
    TRI_ASSERT(backend_cpu_create(&cpu, 1) == TRI_OK);
    backend device = *cpu;
    device.device_memory = 1;
    launch_info li = {.rank = 0, .world = 1, .local_size = 1, .singleton = 1};
    const mesh m = {.tp = 1, .dp = 1, .pp = 1};
    comm *c = NULL;

    env_unset(ENV_TEST_NCCL_ONE_RANK);
    tri_status st = comm_create_for(&c, &m, COMM_NCCL, &li, &device, 5);
    TEST_CHECK(st == TRI_OK && c && !strcmp(c->name, "self") && !c->one_rank_groups,
               "comm_world_of_one_is_self_without_the_hook", "status %d, comm %s", (int)st,
               c ? c->name : "none");
    comm_destroy(c), c = NULL;

    env_set(ENV_TEST_NCCL_ONE_RANK, "1");
    st = comm_create_for(&c, &m, COMM_NCCL, &li, &device, 5);
    TEST_CHECK(!(st == TRI_OK && c && !strcmp(c->name, "self")),
               "comm_world_of_one_asks_nccl_under_the_hook",
               "status %d, comm %s: the hook did not reach the NCCL backend", (int)st,
               c ? c->name : "none");
    if (st == TRI_OK) comm_destroy(c); // a GPU after all: NCCL's one-rank backend
    c = NULL;
    st = comm_create_for(&c, &m, COMM_MPI, &li, &device, 5);
    TEST_CHECK(st == TRI_OK && c && !strcmp(c->name, "self"),
               "comm_world_of_one_hook_needs_comm_nccl", "status %d, comm %s", (int)st,
               c ? c->name : "none");
    comm_destroy(c), c = NULL;
    st = comm_create_for(&c, &m, COMM_NCCL, &li, cpu, 5);
    TEST_CHECK(st == TRI_OK && c && !strcmp(c->name, "self"),
               "comm_world_of_one_hook_needs_a_device_backend", "status %d, comm %s", (int)st,
               c ? c->name : "none");
    comm_destroy(c);
    env_unset(ENV_TEST_NCCL_ONE_RANK);
    cpu->destroy(cpu);
}

int main(void) {
    log_init();
    test_dispatch();
    test_select();
    TEST_EXIT();
}
