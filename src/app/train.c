// train.c: one process's training loop. Each step: for every action of this rank's
// schedule table, forward or backward of one micro-batch; then the dp reduction, the
// global gradient norm, clipping, AdamW, metrics and evaluation.
#include "app/train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "compute/backend.h"
#include "compute/backend_select.h"
#include "io/checkpoint.h"
#include "comm/comm.h"
#include "comm/comm_mpi.h"
#include "comm/comm_staged.h"
#include "io/data.h"
#include "compute/cuda_api.h"
#include "comm/nccl_api.h"
#include "io/llmc.h"
#include "comm/mesh.h"
#include "io/metrics.h"
#include "model/model.h"
#include "parallel/optim.h"
#include "plan/plan.h"
#include "parallel/sched.h"

typedef struct {
    run_config *cfg;
    launch_info *li;
    mesh_coord coord; // this rank's (tp, dp, pp)
    backend *be;
    comm *cm;
    mem_pool pool;          // this rank's device memory: one arena per kind, sized by the planner
    model model;
    optim_state optim;
    data_stream train, val;
    sched_table sched;
    metrics_log metrics;
    int *inputs, *targets; // host (B*T) staging for one micro-batch
    int dp, dp_rank, n_micro;
    double flops_per_token, peak_flops;
    ckpt_writer *ckpt;      // NULL without checkpoint.dir
    ckpt_progress start;    // where training starts: zero, or the resumed checkpoint's
    int resumed;
    int overlapped_p2p;     // pipeline transfers left in flight under compute this step
} trainer;

// SIGTERM or SIGUSR1 (a preemption, or Slurm's warning before the time limit): finish the
// step, write a checkpoint, exit.
static volatile sig_atomic_t g_stop_signal;

static void on_stop_signal(int sig) { g_stop_signal = sig; }

static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

// The backend's practical matmul rate, measured once (about 0.1 s) as the MFU denominator
// on the CPU, where no datasheet peak applies.
static double measure_matmul_rate(backend *be) {
    const int N = 512, K = 768, M = 768;
    float *a = be->alloc(be, (size_t)N * K * 4), *w = be->alloc(be, (size_t)M * K * 4);
    float *o = be->alloc(be, (size_t)N * M * 4);
    if (!a || !w || !o) return 0.0;
    be->matmul_fwd(be, o, a, w, NULL, N, K, M); // warm-up
    be->synchronize(be);
    // The best of several short windows: interference only ever lowers a measurement.
    double best = 0.0;
    for (int window = 0; window < 5; window++) {
        int reps = 0;
        double t0 = time_now_s(), t;
        do {
            be->matmul_fwd(be, o, a, w, NULL, N, K, M);
            be->synchronize(be);
            reps++;
            t = time_now_s() - t0;
        } while (t < 0.03);
        double rate = 2.0 * N * K * M * reps / t;
        if (rate > best) best = rate;
    }
    be->free(be, a), be->free(be, w), be->free(be, o);
    return best;
}

static tri_status trainer_open_data(trainer *tr) {
    run_config *cfg = tr->cfg;
    const int T = cfg->model.seq_len, V = cfg->model.vocab_size;
    TRI_CHECK(data_open(&tr->train, cfg->data.train, T, V, cfg->train.global_batch, "data.train"));
    if (cfg->data.eval_every > 0)
        TRI_CHECK(data_open(&tr->val, cfg->data.val, T, V, cfg->train.global_batch, "data.val"));
    return TRI_OK;
}

static void synchronize_backend(void *be) { ((backend *)be)->synchronize(be); }

// The comm backend of the mesh: a world of one needs none; MPI moves host memory (a host
// backend's, or a device backend's staged through the host), NCCL device memory (what
// system.comm auto picks for a device backend).
static tri_status create_comm(trainer *tr) {
    const run_config *cfg = tr->cfg;
    if (tr->li->world == 1) return comm_self_create(&tr->cm);
    const int device = tr->be->device_memory;
    if (cfg->system.comm == COMM_NCCL && !device) {
        LOG_ERROR("system.comm: nccl moves GPU memory, but this run computes on the %s backend; "
                  "use mpi (or auto)", tr->be->name);
        return TRI_ERR_CONFIG;
    }
    if (device && cfg->system.comm != COMM_MPI) {
        TRI_CHECK(comm_nccl_create(&tr->cm, cfg, tr->li, cfg->system.comm_timeout_s));
        // NCCL runs on streams of its own: the backend's stream must have written a buffer
        // before a collective reads it, which events on that stream order without blocking
        // the host (inputs_ready, a host synchronize, where the backend has no stream).
        tr->cm->compute_stream = tr->be->stream;
        tr->cm->inputs_ready = synchronize_backend;
        tr->cm->inputs_ready_ctx = tr->be;
        return TRI_OK;
    }
    TRI_CHECK(comm_mpi_create(&tr->cm, cfg, tr->li, cfg->system.comm_timeout_s));
    // MPI moves host memory: with a device backend (several ranks sharing a GPU, which NCCL
    // refuses) every call is staged through host buffers. TRIDENT_COMM_STAGED=1 does it on
    // the CPU path too, for the tests.
    if (device || env_flag(ENV_TEST_COMM_STAGED)) {
        comm *staged;
        TRI_CHECK(comm_staged_create(&staged, tr->cm, tr->be));
        tr->cm = staged;
    }
    return TRI_OK;
}

static ckpt_state checkpoint_view(trainer *tr) {
    return (ckpt_state){.cfg = tr->cfg, .pt = &tr->model.table, .optim = &tr->optim,
                        .params = model_params(&tr->model), .be = tr->be, .cm = tr->cm,
                        .rank = tr->li->rank, .world = tr->li->world, .tp_rank = tr->coord.tp};
}

// Resumes per checkpoint.resume (before anything is written), and prepares the writer.
static tri_status trainer_checkpoints(trainer *tr) {
    const run_config *cfg = tr->cfg;
    char path[4096];
    int mute = log_mute_if_not_rank0();
    tri_status rc = ckpt_resolve_resume(cfg, path, sizeof path);
    log_unmute(mute);
    TRI_CHECK(rc);
    ckpt_state view = checkpoint_view(tr);
    if (path[0]) {
        TRI_CHECK(ckpt_load(path, &view, &tr->start));
        tr->resumed = 1;
    } else if (cfg->checkpoint.dir && !strcmp(cfg->checkpoint.resume, "auto")) {
        LOG_INFO("no checkpoint in %s: starting from step 0", cfg->checkpoint.dir);
    }
    if (cfg->checkpoint.dir) TRI_CHECK(ckpt_writer_create(&tr->ckpt, &view));
    return TRI_OK;
}

// The planner's figures for this rank's stage, on the device of the backend in use (the
// attention state differs between them).
static tri_status plan_of_rank(const trainer *tr, plan_result *p) {
    plan_device dev;
    plan_device_lookup(tr->be->plan_device, tr->li->world, &dev);
    return plan_compute(p, tr->cfg, &dev);
}

// The run record's "memory" (what the model and optimizer carved from the rank's arenas) and
// "memory_planned" (the arenas: what `trident plan` computes for this rank's stage). A
// carve past its arena fails at startup; every rank checks that it used its arenas whole.
static tri_status memory_json(const trainer *tr, char *out, size_t n) {
    const mem_pool *pool = &tr->pool;
    size_t len = 0;
    for (int which = 0; which < 2; which++) {
        len += (size_t)snprintf(out + len, n - len, ",\"%s\":{", which ? "memory_planned" : "memory");
        for (int k = 0; k < PLAN_MEM_COUNT; k++)
            len += (size_t)snprintf(out + len, n - len, "%s\"%s\":%zu", k ? "," : "", plan_mem_name(k),
                                    which ? pool->size[k] : pool->used[k]);
        len += (size_t)snprintf(out + len, n - len, "}");
    }
    for (int k = 0; k < PLAN_MEM_COUNT; k++) {
        if (pool->used[k] == pool->size[k]) continue;
        LOG_ERROR("memory: %s used %zu bytes of the %zu the planner gave it; please report this "
                  "as a bug", plan_mem_name(k), pool->used[k], pool->size[k]);
        return TRI_ERR_INTERNAL;
    }
    return TRI_OK;
}

static tri_status trainer_init(trainer *tr, run_config *cfg, launch_info *li) {
    tr->cfg = cfg;
    tr->li = li;
    // Every rank validates the same config; only rank 0 prints what is wrong.
    int mute = log_mute_if_not_rank0();
    tri_status rc = config_resolve_world(cfg, li->world);
    log_unmute(mute);
    // The launcher ends the job at the first failing exit: the other ranks give rank 0 time
    // to report first, so that the message is never cut off.
    if (rc != TRI_OK && li->rank != 0) sleep(2);
    TRI_CHECK(rc);
    tr->coord = mesh_coord_of(cfg, li->rank);
    log_set_rank(li->rank, tr->coord.tp, tr->coord.dp, tr->coord.pp);
    if (li->rank == 0 && li->world > 1) mesh_print(cfg, stdout);
    tr->dp = cfg->parallel.dp;
    tr->dp_rank = tr->coord.dp;
    tr->n_micro = config_micro_batches(cfg);
    // system.threads 0: the node's cores divided among the ranks started on it.
    int threads = cfg->system.threads;
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = (int)(cores / (li->local_size > 0 ? li->local_size : 1));
        if (threads < 1) threads = 1;
    }
    // The compute backend first: on the CUDA path it selects the device that NCCL's
    // communicators and every buffer belong to.
    TRI_CHECK(backend_create_for(cfg, li->local_rank, threads, &tr->be));
    TRI_CHECK(create_comm(tr));
    // Before the model exists, so that the peak memory is the model's and optimizer's alone.
    // The MFU denominator: the backend's datasheet peak, or its measured matmul rate.
    tr->peak_flops = tr->be->peak_flops > 0 ? tr->be->peak_flops : measure_matmul_rate(tr->be);
    TRI_CHECK(trainer_open_data(tr));
    TRI_CHECK(sched_build(&tr->sched, cfg->parallel.schedule, cfg->parallel.pp,
                          cfg->parallel.virtual_stages, tr->n_micro, tr->coord.pp));
    const int zero = tr->dp > 1 ? cfg->parallel.zero : 0;
    plan_result plan;
    TRI_CHECK(plan_of_rank(tr, &plan));
    tri_status prc = mem_pool_create(&tr->pool, tr->be, plan.stages[tr->coord.pp].mem);
    plan_free(&plan);
    TRI_CHECK(prc);
    TRI_CHECK(model_create(&tr->model, cfg, cfg->train.micro_batch, tr->sched.max_in_flight,
                           zero > 0 ? tr->dp : 1, zero < 2, zero == 3, tr->be, tr->cm, &tr->pool));
    TRI_CHECK(optim_create(&tr->optim, tr->be, tr->cm, cfg, &tr->model.table, tr->dp, tr->dp_rank,
                           tr->model.grad_of, model_params(&tr->model), tr->model.init_host,
                           tr->model.param_of, tr->model.param16_of, tr->model.grad16_of,
                           &tr->pool));
    free(tr->model.init_host);
    tr->model.init_host = NULL;
    TRI_ASSERT(tr->optim.capacity == tr->model.capacity);
    if (zero >= 2 || (zero == 0 && tr->dp > 1)) {
        tr->model.grads_ready = optim_bucket_ready;
        tr->model.grads_ready_ctx = &tr->optim;
    }
    if (zero == 3) { // the optimizer holds the parameters now, as shards
        tr->model.params_needed = optim_params_needed;
        tr->model.params_ready = optim_params_ready;
        tr->model.params_needed_ctx = &tr->optim;
    }
    TRI_CHECK(trainer_checkpoints(tr));
    size_t N = (size_t)cfg->train.micro_batch * cfg->model.seq_len;
    tr->inputs = xmalloc(N * sizeof(int));
    tr->targets = xmalloc(N * sizeof(int));
    if (li->rank == 0 && make_dirs(cfg->run.out_dir) != 0) {
        LOG_ERROR("cannot create directory %s: %s", cfg->run.out_dir, strerror(errno));
        LOG_HINT("check run.out_dir");
        return TRI_ERR_CONFIG;
    }
    tr->flops_per_token = plan_flops_per_token(cfg);
    char memory[1024], extra[1536];
    TRI_CHECK(memory_json(tr, memory, sizeof memory));
    snprintf(extra, sizeof extra,
             ",\"n_params\":%lld,\"threads\":%d,\"micro_batches\":%d,\"flops_per_token\":%.0f,"
             "\"mfu_peak_flops\":%.4g,\"rank_params\":%zu%s",
             (long long)tr->model.table.global_numel, tr->be->threads, tr->n_micro,
             tr->flops_per_token, tr->peak_flops, tr->model.table.local_numel, memory);
    if (li->rank == 0)
        TRI_CHECK(metrics_open(&tr->metrics, cfg, tr->cm->world_size, tr->be->name, tr->cm->name,
                               extra, tr->resumed ? tr->start.step : -1));
    return TRI_OK;
}

static void trainer_free(trainer *tr) {
    ckpt_writer_free(tr->ckpt);
    metrics_close(&tr->metrics);
    free(tr->inputs);
    free(tr->targets);
    if (tr->be) {
        optim_free(&tr->optim);
        model_free(&tr->model);
        mem_pool_free(&tr->pool);
        tr->be->destroy(tr->be);
    }
    sched_free(&tr->sched);
    data_close(&tr->train);
    data_close(&tr->val);
    if (tr->cm) tr->cm->destroy(tr->cm);
}

// Issues the comm actions [first, end) of the schedule as one group: both directions in
// flight at once, posted in list order (the schedule orders every group the same way on
// both ends of a pair of ranks, so messages between two ranks match in the order posted,
// as NCCL and a single MPI tag require). A received activation goes to the slot's chunk
// input, a received gradient to its residual gradient (kept apart: a group may send one
// slot's d(input) while receiving the next pair's input into the same slot). With
// parallel.overlap the group stays in flight (req) while compute goes on: it is waited for
// before anything touches one of its slots (wait_p2p). Adds the seconds spent waiting, which
// is time waiting for other stages, to *waited.
static tri_status run_p2p_group(trainer *tr, int first, int end, comm_request *req,
                                double *waited) {
    comm *cm = tr->cm;
    model *m = &tr->model;
    const size_t count = (size_t)m->d.N_local * m->d.C;
    double t0 = time_now_s();
    TRI_CHECK(cm->group_start(cm));
    for (int i = first; i < end; i++) {
        const sched_action *a = &tr->sched.actions[i];
        switch (a->kind) {
        case SCHED_ACTION_SEND_ACT:
            TRI_CHECK(cm->send(cm, COMM_GROUP_PP, model_chunk_output(m, a->slot), count, DTYPE_FP32, a->peer));
            break;
        case SCHED_ACTION_RECV_ACT:
            TRI_CHECK(cm->recv(cm, COMM_GROUP_PP, model_chunk_input(m, a->slot), count, DTYPE_FP32, a->peer));
            break;
        case SCHED_ACTION_SEND_GRAD:
            TRI_CHECK(cm->send(cm, COMM_GROUP_PP, model_chunk_grad(m, a->slot), count, DTYPE_FP32, a->peer));
            break;
        case SCHED_ACTION_RECV_GRAD:
            TRI_CHECK(cm->recv(cm, COMM_GROUP_PP, model_chunk_grad(m, a->slot), count, DTYPE_FP32, a->peer));
            break;
        default: TRI_ASSERT(0);
        }
    }
    if (tr->cfg->parallel.overlap) {
        TRI_CHECK(cm->group_end_start(cm, req));
    } else {
        req->impl = NULL;
        TRI_CHECK(cm->group_end(cm));
    }
    *waited += time_now_s() - t0;
    return TRI_OK;
}

// Pipeline transfers in flight: the schedule's comm actions [first, end), their request.
typedef struct {
    int first, end;
    comm_request req;
} p2p_flight;

// Does any action of [first, end) use micro-batch slot `slot`?
static int actions_use_slot(const sched_table *s, int first, int end, int slot) {
    for (int i = first; i < end; i++)
        if (s->actions[i].slot == slot) return 1;
    return 0;
}

// Waits for the transfers in flight that use a slot the actions [first, end) use (all of
// them when first == end), keeping the others in flight (counted in *kept_over when
// [first, end) is a compute action).
static tri_status wait_p2p(trainer *tr, p2p_flight *f, int *n, int first, int end,
                           double *waited, int *kept_over) {
    int kept = 0;
    for (int i = 0; i < *n; i++) {
        int uses = first == end;
        for (int k = first; k < end && !uses; k++)
            uses = actions_use_slot(&tr->sched, f[i].first, f[i].end, tr->sched.actions[k].slot);
        if (!uses) {
            f[kept++] = f[i];
            continue;
        }
        double t0 = time_now_s();
        TRI_CHECK(tr->cm->wait(tr->cm, &f[i].req));
        *waited += time_now_s() - t0;
    }
    *n = kept;
    if (end == first + 1 && !sched_action_is_comm(tr->sched.actions[first].kind))
        *kept_over += kept;
    return TRI_OK;
}

// A forward or backward action of the schedule for optimizer step `step`.
static tri_status run_compute(trainer *tr, const sched_action *a, int step) {
    const run_config *cfg = tr->cfg;
    const int B = cfg->train.micro_batch;
    const double tokens = (double)cfg->train.global_batch * cfg->model.seq_len;
    if (a->kind == SCHED_ACTION_FWD) {
        // The stream continues where the checkpoint left it, also with another global
        // batch: samples start.samples on are taken in order.
        int64_t first = tr->start.samples - (int64_t)tr->start.step * cfg->train.global_batch +
                        data_micro_batch_start(step, cfg->train.global_batch, tr->dp,
                                               tr->dp_rank, a->micro, B);
        data_batch(&tr->train, first, B, tr->inputs, tr->targets);
        return model_forward(&tr->model, a->slot, a->chunk, tr->inputs, tr->targets);
    }
    tr->optim.last_micro = a->micro == tr->n_micro - 1;
    return model_backward(&tr->model, a->slot, a->chunk, (float)(1.0 / tokens));
}

// Runs this rank's schedule table for optimizer step `step`: forward and backward of
// (micro-batch, chunk) pairs, and the pipeline sends and receives between them. Returns
// the sum of per-token losses this rank computed (the last stage's) and the seconds it
// waited on other stages.
static tri_status run_schedule(trainer *tr, int step, double *loss_sum, double *waited) {
    *loss_sum = 0.0;
    *waited = 0.0;
    p2p_flight *flight = xcalloc((size_t)tr->sched.n_actions + 1, sizeof *flight);
    int n_flight = 0;
    tri_status rc = TRI_OK;
    for (int i = 0; i < tr->sched.n_actions && rc == TRI_OK;) {
        const sched_action *a = &tr->sched.actions[i];
        const int end = sched_action_is_comm(a->kind) ? sched_comm_run_end(&tr->sched, i) : i + 1;
        // What this group or op touches must not be in flight (parallel.overlap).
        rc = wait_p2p(tr, flight, &n_flight, i, end, waited, &tr->overlapped_p2p);
        if (rc == TRI_OK && sched_action_is_comm(a->kind)) {
            p2p_flight *f = &flight[n_flight];
            *f = (p2p_flight){i, end, {NULL}};
            rc = run_p2p_group(tr, i, end, &f->req, waited);
            if (f->req.impl) n_flight++;
            i = end;
            continue;
        }
        if (rc == TRI_OK) {
            // ZeRO-3 gathers the next pass's parameters while this one computes.
            int j = i + 1;
            while (j < tr->sched.n_actions && sched_action_is_comm(tr->sched.actions[j].kind)) j++;
            tr->optim.next_chunk = j < tr->sched.n_actions ? tr->sched.actions[j].chunk : -1;
            tr->optim.next_backward = j < tr->sched.n_actions && tr->sched.actions[j].kind == SCHED_ACTION_BWD;
            rc = run_compute(tr, a, step);
        }
        tr->cm->progress(tr->cm);
        i++;
    }
    // Every transfer still in flight completes, also after an error.
    tr->optim.next_chunk = -1; // nothing to gather ahead outside the schedule (evaluation)
    tri_status wrc = wait_p2p(tr, flight, &n_flight, 0, 0, waited, &tr->overlapped_p2p);
    free(flight);
    TRI_CHECK(rc);
    TRI_CHECK(wrc);
    *loss_sum = model_take_loss(&tr->model); // the micro-batches' sums, added in order
    // Only the last stage computed the loss; every stage learns it.
    if (tr->model.d.pp > 1)
        TRI_CHECK(tr->cm->all_reduce(tr->cm, COMM_GROUP_PP, loss_sum, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    return TRI_OK;
}

// Forward only through the pipeline, one micro-batch after another in slot 0: each chunk
// receives from the previous virtual stage and sends to the next (a chain, so blocking
// sends and receives cannot deadlock). The last stage's loss accumulates in the model.
static tri_status forward_only(trainer *tr) {
    model *m = &tr->model;
    const size_t count = (size_t)m->d.N_local * m->d.C;
    const int pp = m->d.pp, r = m->d.pp_rank;
    comm *cm = tr->cm;
    for (int c = 0; c < m->d.chunks; c++) {
        if (!(r == 0 && c == 0))
            TRI_CHECK(cm->recv(cm, COMM_GROUP_PP, model_chunk_input(m, 0), count, DTYPE_FP32, (r - 1 + pp) % pp));
        TRI_CHECK(model_forward(m, 0, c, tr->inputs, tr->targets));
        if (!(r == pp - 1 && c == m->d.chunks - 1))
            TRI_CHECK(cm->send(cm, COMM_GROUP_PP, model_chunk_output(m, 0), count, DTYPE_FP32, (r + 1) % pp));
    }
    return TRI_OK;
}

// Mean validation loss over eval_batches batches of global_batch sequences, split over the
// dp replicas as a training step is: always the same leading part of the validation
// stream, whatever the layout, so evaluations compare across steps and layouts.
static tri_status evaluate(trainer *tr, double *val_loss) {
    const run_config *cfg = tr->cfg;
    const int B = cfg->train.micro_batch, T = cfg->model.seq_len, GB = cfg->train.global_batch;
    for (int j = 0; j < cfg->data.eval_batches; j++) {
        for (int micro = 0; micro < tr->n_micro; micro++) {
            int64_t first = data_micro_batch_start(j, GB, tr->dp, tr->dp_rank, micro, B);
            data_batch(&tr->val, first, B, tr->inputs, tr->targets);
            TRI_CHECK(forward_only(tr));
        }
    }
    double sum = model_take_loss(&tr->model);
    if (tr->model.d.pp > 1)
        TRI_CHECK(tr->cm->all_reduce(tr->cm, COMM_GROUP_PP, &sum, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    if (tr->dp > 1) TRI_CHECK(tr->cm->all_reduce(tr->cm, COMM_GROUP_DP, &sum, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    *val_loss = sum / ((double)cfg->data.eval_batches * GB * T);
    return TRI_OK;
}

// Rank 0 writes the whole model; the tp x pp ranks of dp replica 0 gather it first (dp
// replicas hold identical parameters).
static tri_status save_model(trainer *tr) {
    model *m = &tr->model;
    // Every dp rank takes part when the parameters are sharded over dp (ZeRO-3).
    float *local = xmalloc(m->table.local_numel * sizeof(float));
    tri_status rc = optim_local_params(&tr->optim, &m->table, model_params(m), local);
    if (rc != TRI_OK || tr->coord.dp != 0) {
        free(local);
        return rc;
    }
    param_table full_table;
    params_build_full(&full_table, tr->cfg);
    float *full = xmalloc(full_table.local_numel * sizeof(float));
    rc = model_gather_params(m, &full_table, local, full);
    if (rc == TRI_OK && tr->li->rank == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model.bin", tr->cfg->run.out_dir);
        rc = llmc_write(path, &full_table, full, m->d.T, m->d.V, m->d.NH);
        if (rc == TRI_OK) LOG_INFO("model written to %s", path);
    }
    free(local);
    free(full);
    params_free(&full_table);
    return rc;
}

// At the end of a step, over the world: whether any rank got a stop signal, and whether a
// background checkpoint write has finished on every rank (then it is committed).
static tri_status step_boundary(trainer *tr, int *stop) {
    double flags[2] = {g_stop_signal, ckpt_pending(tr->ckpt) && !ckpt_write_done(tr->ckpt)};
    if (tr->li->world > 1)
        TRI_CHECK(tr->cm->all_reduce(tr->cm, COMM_GROUP_WORLD, flags, 2, DTYPE_FP64, COMM_REDUCE_MAX));
    *stop = flags[0] > 0;
    if (ckpt_pending(tr->ckpt) && flags[1] == 0) TRI_CHECK(ckpt_commit(tr->ckpt));
    return TRI_OK;
}

// Writes the checkpoint of the step just done (n steps, `samples` consumed); appends the
// time the loop was blocked to `note` for the step line.
static tri_status checkpoint_step(trainer *tr, int n, int64_t samples, int async, char *note,
                                  size_t note_len) {
    const run_config *cfg = tr->cfg;
    ckpt_progress p = {n, samples, samples * cfg->model.seq_len, tr->optim.t};
    double blocked = 0.0;
    TRI_CHECK(ckpt_save(tr->ckpt, &p, async, &blocked));
    metrics_write_checkpoint(&tr->metrics, n, cfg->checkpoint.dir, 1e3 * blocked);
    snprintf(note, note_len, " | ckpt blocked %.1f ms%s", 1e3 * blocked, async ? " (async)" : "");
    return TRI_OK;
}

static tri_status train_loop(trainer *tr) {
    run_config *cfg = tr->cfg;
    model *m = &tr->model;
    const int64_t tokens_per_step = (int64_t)cfg->train.global_batch * cfg->model.seq_len;
    double first_loss = NAN, last_loss = NAN, last_val = NAN, total_s = 0.0;
    int stop = 0, done_steps = tr->start.step;
    LOG_INFO("training %s: %lld parameters, %d steps of %d sequences x %d tokens "
             "(%d micro-batches of %d), backend %s with %d threads",
             cfg->run.name, (long long)m->table.global_numel, cfg->train.steps,
             cfg->train.global_batch, cfg->model.seq_len, tr->n_micro, cfg->train.micro_batch,
             tr->be->name, tr->be->threads);
    for (int step = tr->start.step; step < cfg->train.steps && !stop; step++) {
        double t0 = time_now_s();
        tr->cm->step = step + 1;
        comm_counters_reset(tr->cm);
        optim_zero_grads(&tr->optim, model_grads(m));
        double loss_sum = 0.0, waited = 0.0;
        TRI_CHECK(run_schedule(tr, step, &loss_sum, &waited));
        TRI_CHECK(optim_finish_reductions(&tr->optim));
        LOG_DEBUG("step %d overlap: %d dp reductions left running under the backward, %d "
                  "parameter gathers under earlier layers or passes (%d passes gathered ahead), "
                  "%d pipeline transfers under a forward or backward", step + 1,
                  tr->optim.overlapped_reductions, tr->optim.overlapped_gathers,
                  tr->optim.prefetched_passes, tr->overlapped_p2p);
        tr->optim.overlapped_reductions = tr->optim.overlapped_gathers = tr->overlapped_p2p = 0;
        tr->optim.prefetched_passes = 0;
        TRI_CHECK(model_finish_grads(m));
        TRI_CHECK(optim_reduce_grads(&tr->optim, &m->table, m->d.sp, model_grads(m)));
        if (tr->dp > 1)
            TRI_CHECK(tr->cm->all_reduce(tr->cm, COMM_GROUP_DP, &loss_sum, 1, DTYPE_FP64,
                                         COMM_REDUCE_SUM));
        double loss = loss_sum / (double)tokens_per_step;
        double norm = 0.0;
        tri_status rc = optim_grad_norm(&tr->optim, &m->table, model_grads(m), &norm);
        if (!isfinite(loss) || rc == TRI_ERR_NONFINITE) {
            LOG_ERROR("step %d: non-finite %s (loss %g, grad norm %g)", step + 1,
                      isfinite(loss) ? "gradients" : "loss", loss, norm);
            LOG_HINT("lower optim.lr, raise optim.warmup_steps or keep train.grad_clip on");
            return TRI_ERR_NONFINITE;
        }
        TRI_CHECK(rc);
        double lr = optim_lr(cfg, step);
        TRI_CHECK(optim_step(&tr->optim, cfg, &m->table, model_params(m), model_grads(m), lr, norm));
        tr->be->synchronize(tr->be);
        double dt = time_now_s() - t0;
        total_s += dt;
        if (isnan(first_loss)) first_loss = loss;
        last_loss = loss;

        const int n = step + 1;
        done_steps = n;
        const int64_t samples = tr->start.samples + (int64_t)(n - tr->start.step) * cfg->train.global_batch;
        TRI_CHECK(step_boundary(tr, &stop));
        char ckpt_note[96] = "";
        if (tr->ckpt && (stop || n == cfg->train.steps ||
                         (cfg->checkpoint.every > 0 && n % cfg->checkpoint.every == 0)))
            TRI_CHECK(checkpoint_step(tr, n, samples, cfg->checkpoint.async && !stop && n < cfg->train.steps,
                                      ckpt_note, sizeof ckpt_note));
        int logged = n == 1 || n % cfg->log.every == 0 || n == cfg->train.steps || stop;
        if (!logged && ckpt_note[0]) LOG_INFO("step %5d/%d%s", n, cfg->train.steps, ckpt_note);
        if (logged) {
            metrics_step s = {
                .step = n, .loss = loss, .lr = lr, .grad_norm = norm,
                .tokens = samples * cfg->model.seq_len, .step_ms = 1e3 * dt,
                .tokens_per_s = tokens_per_step / dt,
                .mfu = tr->peak_flops > 0 ? tr->flops_per_token * tokens_per_step / dt / tr->peak_flops : NAN,
                .mem_peak_bytes = tr->be->mem_peak_bytes(tr->be),
                .comm_tp = comm_group_bytes(tr->cm, COMM_GROUP_TP),
                .comm_pp = comm_group_bytes(tr->cm, COMM_GROUP_PP),
                .comm_dp = comm_group_bytes(tr->cm, COMM_GROUP_DP),
                .pipelined = m->d.pp > 1,
                .bubble = waited / dt,
                .bubble_formula = sched_bubble_fraction(cfg->parallel.schedule, m->d.pp,
                                                        m->d.chunks, tr->n_micro),
            };
            metrics_write_step(&tr->metrics, &s);
            char bubble[64] = "";
            if (s.pipelined)
                snprintf(bubble, sizeof bubble, " | bubble %.2f (formula %.2f)", s.bubble, s.bubble_formula);
            LOG_INFO("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s%s", n,
                     cfg->train.steps, loss, lr, norm, s.step_ms, s.tokens_per_s, bubble, ckpt_note);
        }
        if (cfg->data.eval_every > 0 && (n % cfg->data.eval_every == 0 || n == cfg->train.steps)) {
            TRI_CHECK(evaluate(tr, &last_val));
            metrics_write_eval(&tr->metrics, n, last_val);
            LOG_INFO("step %5d/%d | val loss %.4f", n, cfg->train.steps, last_val);
        }
    }
    if (stop) {
        const char *sig = g_stop_signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
        if (tr->ckpt)
            LOG_INFO("stopped by %s after step %d: checkpoint written to %s; a run with "
                     "checkpoint.resume: auto continues from it", sig, done_steps, cfg->checkpoint.dir);
        else
            LOG_WARN("stopped by %s after step %d without a checkpoint (no checkpoint.dir set)",
                     sig, done_steps);
        return TRI_OK;
    }
    TRI_CHECK(save_model(tr));
    char val[64] = "";
    if (!isnan(last_val)) snprintf(val, sizeof val, ", val loss %.4f", last_val);
    const int trained = cfg->train.steps - tr->start.step;
    LOG_INFO("done: %d steps in %.1f s, loss %.4f -> %.4f%s, %.0f tok/s, peak memory %.1f MiB",
             trained, total_s, first_loss, last_loss, val,
             trained > 0 ? trained * (double)tokens_per_step / total_s : 0.0,
             tr->be->mem_peak_bytes(tr->be) / 1048576.0);
    return TRI_OK;
}

tri_status train_run(run_config *cfg, launch_info *li) {
    trainer tr;
    memset(&tr, 0, sizeof tr);
    tri_status rc;
    g_stop_signal = 0;
    install_stop_handlers();
    TRI_CHECK_GOTO(trainer_init(&tr, cfg, li), rc, done);
    TRI_CHECK_GOTO(train_loop(&tr), rc, done);
done:
    trainer_free(&tr);
    return rc;
}
