// test_wsplit.c: the backward split into B and W (model.h's model_backward_b / _w, the
// zero-bubble schedules' BWD_B and BWD_W) against the whole backward (model_backward), bit for
// bit: three micro-batches of tests/configs/tiny.yaml (2 layers) forward into three slots,
// then
//   joint:  F0 BWD0 F1 BWD1 F2 BWD2 (model_backward: today's reference)
//   split:  F0 F1 F2, B0 B1 B2, W0 W1 W2 (each B into its own W-buffer, the Ws in micro order)
//   mixed:  F0 F1, B0 B1, W0, F2, B2, W1, W2 (a forward and a B between a pair's B and its W)
// and after the store finishes the step (zero_finish_grads) every gradient piece this rank
// owns, each slot's d(input) and the loss must be the joint run's, bitwise. The store is the
// real one (parallel/zero.c), so ZeRO's buckets, workspaces and reductions see W's
// grads_ready calls as they see the backward's.
//
//   build/tests/test_wsplit                 one process: gpt2 and llama, fp32, bf16, bf16
//                                           gradients, recompute (fp32 and bf16)
//   build/tests/test_wsplit SET[,SET...]... one mode per argument (key=value pairs of the
//                                           config), e.g. under mpirun -np 2 for tp 2 and dp 2
//                                           (tests/test_wsplit.sh)
// TRIDENT_TEST_CPU_BF16_OUT=1 runs bf16 through the backend's bf16-output route (the
// matmuls' bf16 outputs and the fused bf16 classifier). Run from the repository root.
#include "comm/comm.h"
#include "comm/launch.h"
#include "comm/mesh.h"
#include "compute/backend.h"
#include "config/config.h"
#include "config/config_layout.h"
#include "io/data.h"
#include "io/model_init.h"
#include "model/model.h"
#include "parallel/zero.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#define MICRO 3

enum { RUN_JOINT, RUN_SPLIT, RUN_MIXED, RUN_COUNT };
static const char *const RUN_NAMES[RUN_COUNT] = {"joint", "split", "mixed"};

typedef struct {
    model m;
    zero_state *z;
    int *inputs[MICRO], *targets[MICRO];
    float dloss;
} fixture;

static tri_status fwd(fixture *f, int k) {
    return model_forward(&f->m, k, 0, f->inputs[k], f->targets[k]);
}
static tri_status whole(fixture *f, int k) {
    zero_backward_micro(f->z, k == MICRO - 1);
    return model_backward(&f->m, k, 0, f->dloss);
}
static tri_status b_of(fixture *f, int k) { return model_backward_b(&f->m, k, k, 0, f->dloss); }
static tri_status w_of(fixture *f, int k) {
    zero_backward_micro(f->z, k == MICRO - 1);
    return model_backward_w(&f->m, k, k, 0);
}

// One step's backward in the order of run `r` (file comment).
static tri_status run_order(fixture *f, int r) {
    if (r == RUN_JOINT) {
        for (int k = 0; k < MICRO; k++) {
            TRI_CHECK(fwd(f, k));
            TRI_CHECK(whole(f, k));
        }
        return TRI_OK;
    }
    if (r == RUN_SPLIT) {
        for (int k = 0; k < MICRO; k++) TRI_CHECK(fwd(f, k));
        for (int k = 0; k < MICRO; k++) TRI_CHECK(b_of(f, k));
        for (int k = 0; k < MICRO; k++) TRI_CHECK(w_of(f, k));
        return TRI_OK;
    }
    TRI_CHECK(fwd(f, 0));
    TRI_CHECK(fwd(f, 1));
    TRI_CHECK(b_of(f, 0));
    TRI_CHECK(b_of(f, 1));
    TRI_CHECK(w_of(f, 0));
    TRI_CHECK(fwd(f, 2));
    TRI_CHECK(b_of(f, 2));
    TRI_CHECK(w_of(f, 1));
    return w_of(f, 2);
}

// What a run leaves: every owned gradient piece (fp32), each slot's d(input), the loss.
typedef struct {
    float *grads, *dinp;
    size_t n_grads, n_dinp;
    double loss;
} outcome;

static tri_status run_one(fixture *f, int r, outcome *o) {
    zero_step_begin(f->z);
    zero_next_pass(f->z, -1, MODEL_PASS_FORWARD);
    TRI_CHECK(run_order(f, r));
    TRI_CHECK(zero_finish_grads(f->z));
    const zero_layout *zl = zero_layout_of(f->z);
    o->n_grads = 0;
    for (int i = 0; i < zl->n_pieces; i++) o->n_grads += zl->pieces[i].hi - zl->pieces[i].lo;
    o->grads = xmalloc((o->n_grads + 1) * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < zl->n_pieces; i++) { // CPU backend: device memory is host memory
        const zero_piece *pc = &zl->pieces[i];
        memcpy(o->grads + at, zero_piece_grad(f->z, pc), (pc->hi - pc->lo) * sizeof(float));
        at += pc->hi - pc->lo;
    }
    const size_t nd = (size_t)f->m.d.N_local * f->m.d.C;
    o->n_dinp = MICRO * nd;
    o->dinp = xmalloc(o->n_dinp * sizeof(float));
    for (int k = 0; k < MICRO; k++)
        memcpy(o->dinp + k * nd, model_chunk_grad(&f->m, k), nd * sizeof(float));
    o->loss = model_take_loss(&f->m);
    return TRI_OK;
}

// The first MPI comm of the process, kept to the end: destroying it would finalise MPI (it
// initialised it), and the next mode's comm needs MPI.
static comm *first_mpi;

// The mode `sets` (key=value pairs separated by commas) on this rank of `li`'s world.
static void check_mode(const char *sets_csv, launch_info *li) {
    char *copy = xstrdup(sets_csv), *sets[16];
    int n_set = 0;
    for (char *tok = strtok(copy, ","); tok && n_set < 16; tok = strtok(NULL, ","))
        sets[n_set++] = tok;
    run_config cfg;
    config_defaults(&cfg);
    TRI_ASSERT(config_load(&cfg, "tests/configs/tiny.yaml", n_set, sets) == TRI_OK &&
               config_resolve_world(&cfg, li->world) == TRI_OK);
    const mesh ms = config_mesh(&cfg);
    const mesh_coord me = mesh_coord_of(&ms, li->rank);
    TRI_ASSERT(ms.pp == 1); // one chunk holds the embedding and the head
    backend *be;
    comm *cm;
    TRI_ASSERT(backend_cpu_create(&be, 1) == TRI_OK);
    if (li->world == 1) TRI_ASSERT(comm_self_create(&cm, NULL) == TRI_OK);
    else TRI_ASSERT(comm_create_for(&cm, &ms, COMM_MPI, li, be, 60) == TRI_OK);
    model_layout ml = config_model_layout(&cfg, me.tp, me.pp, MICRO, backend_traits_of(be));
    ml.n_wbufs = MICRO;
    fixture f = {0};
    model_init mi;
    data_stream ds;
    const int B = cfg.train.micro_batch, T = cfg.model.seq_len;
    TRI_ASSERT(model_create(&f.m, &cfg.model, &ml, be, cm, NULL) == TRI_OK &&
               model_init_open(&mi, &cfg, &f.m.table) == TRI_OK);
    const zero_config zc = config_zero_config(&cfg, me.dp);
    TRI_ASSERT(zero_create(&f.z, &zc, &f.m, model_init_entry, &mi, be, cm, NULL) == TRI_OK &&
               data_open(&ds, cfg.data.train.items[0].path, T, cfg.model.vocab_size,
                         MICRO * B * ms.dp, "data.train") == TRI_OK);
    model_init_close(&mi);
    for (int k = 0; k < MICRO; k++) { // replica dp's block of the global batch, as the trainer
        f.inputs[k] = xmalloc((size_t)B * T * sizeof(int));
        f.targets[k] = xmalloc((size_t)B * T * sizeof(int));
        data_batch(&ds, (int64_t)(me.dp * MICRO + k) * B, B, f.inputs[k], f.targets[k]);
    }
    f.dloss = 1.0f / (float)((size_t)B * T * MICRO * ms.dp);
    outcome o[RUN_COUNT];
    tri_status st[RUN_COUNT];
    for (int r = 0; r < RUN_COUNT; r++) st[r] = run_one(&f, r, &o[r]);
    for (int r = RUN_SPLIT; r < RUN_COUNT; r++) {
        // Elements that differ from the joint run on this rank, summed over the world.
        float wrong[4] = {0};
        wrong[0] = st[r] != TRI_OK || st[RUN_JOINT] != TRI_OK;
        for (size_t i = 0; i < o[r].n_grads; i++)
            wrong[1] += memcmp(&o[r].grads[i], &o[RUN_JOINT].grads[i], sizeof(float)) != 0;
        for (size_t i = 0; i < o[r].n_dinp; i++)
            wrong[2] += memcmp(&o[r].dinp[i], &o[RUN_JOINT].dinp[i], sizeof(float)) != 0;
        wrong[3] = memcmp(&o[r].loss, &o[RUN_JOINT].loss, sizeof(double)) != 0;
        if (li->world > 1)
            TRI_ASSERT(comm_all_reduce(cm, COMM_GROUP_WORLD, wrong, 4, DTYPE_FP32,
                                       COMM_REDUCE_SUM) == TRI_OK);
        char name[256];
        snprintf(name, sizeof name, "wsplit %s = joint, bitwise (%s%s, %d ranks)", RUN_NAMES[r],
                 sets_csv, be->bf16_out ? ", bf16_out" : "", li->world);
        if (li->rank == 0)
            TEST_CHECK(wrong[0] + wrong[1] + wrong[2] + wrong[3] == 0, name,
                       "summed over the ranks: failed runs %g, gradients differing %g (rank 0 "
                       "holds %zu), d(input) %g (of %zu), loss %g",
                       (double)wrong[0], (double)wrong[1], o[r].n_grads, (double)wrong[2],
                       o[r].n_dinp, (double)wrong[3]);
    }
    for (int r = 0; r < RUN_COUNT; r++) free(o[r].grads), free(o[r].dinp);
    for (int k = 0; k < MICRO; k++) free(f.inputs[k]), free(f.targets[k]);
    data_close(&ds);
    zero_free(f.z);
    model_free(&f.m);
    be->destroy(be);
    if (li->world > 1 && !first_mpi) first_mpi = cm;
    else comm_destroy(cm);
    config_free(&cfg);
    free(copy);
}

int main(int argc, char **argv) {
    backend_cpu_prepare_process(argv, 0);
    log_init();
    launch_info li;
    TRI_ASSERT(launch_init(&li) == TRI_OK);
    static const char *const defaults[] = {
        "data.shuffle=false",
        "train.precision=bf16",
        "train.grad_dtype=bf16",
        "parallel.recompute=full",
        "parallel.recompute=full,train.precision=bf16",
        "model.arch=llama,model.n_kv_head=1,model.ffn_hidden=48",
        "model.arch=llama,model.n_kv_head=1,model.ffn_hidden=48,train.precision=bf16",
        "model.arch=llama,model.n_kv_head=1,model.ffn_hidden=48,parallel.recompute=full",
    };
    if (argc > 1)
        for (int i = 1; i < argc; i++) check_mode(argv[i], &li);
    else
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
            check_mode(defaults[i], &li);
    comm_destroy(first_mpi);
    launch_finalize(&li);
    TEST_EXIT();
}
