// trainer.c: setting up one process's training state (trainer_internal.h) from a run
// config: the compute and comm backends of the mesh, the data, the schedule tables, the
// rank's arenas (sized by the same buffer specs that the model, the ZeRO layer and the
// optimizer carve), the initial parameters, a resumed checkpoint and the run record.
#include "app/trainer_internal.h"

#include <string.h>
#include <unistd.h>

#include "base/stop.h"
#include "compute/backend_select.h"
#include "config/config_layout.h"
#include "io/llmc.h"
#include "io/model_init.h"
#include "io/rundir.h"
#include "plan/plan.h"

// The backend's practical matmul rate, measured once (about 0.1 s) as the MFU denominator
// on the CPU, where no datasheet peak applies.
static double measure_matmul_rate(backend *be) {
    const int N = 512, K = 768, M = 768;
    float *a = be->alloc(be, (size_t)N * K * 4), *w = be->alloc(be, (size_t)M * K * 4);
    float *o = be->alloc(be, (size_t)N * M * 4);
    if (!a || !w || !o) return 0.0;
    backend_matmul_fwd(be, o, NULL, operand_fp32(a), operand_fp32(w), NULL, N, K, M); // warm-up
    be->synchronize(be);
    // The best of several short windows: interference only ever lowers a measurement.
    double best = 0.0;
    for (int window = 0; window < 5; window++) {
        int reps = 0;
        double t0 = time_now_s(), t;
        do {
            backend_matmul_fwd(be, o, NULL, operand_fp32(a), operand_fp32(w), NULL, N, K, M);
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

static tri_status open_data(trainer *tr) {
    run_config *cfg = tr->cfg;
    const int T = cfg->model.seq_len, V = cfg->model.vocab_size;
    TRI_CHECK(data_open(&tr->train, cfg->data.train, T, V, cfg->train.global_batch, "data.train"));
    if (cfg->data.eval_every > 0)
        TRI_CHECK(data_open(&tr->val, cfg->data.val, T, V, cfg->train.global_batch, "data.val"));
    return TRI_OK;
}

// The comm backend of the mesh (comm_create_for): none for a world of one; NCCL for a
// device backend (what system.comm auto picks), MPI for a host one or with system.comm mpi.
static tri_status create_comm(trainer *tr) {
    const run_config *cfg = tr->cfg;
    const mesh m = config_mesh(cfg);
    return comm_create_for(&tr->cm, &m, cfg->system.comm, tr->li, tr->be,
                           cfg->system.comm_timeout_s);
}

ckpt_state trainer_checkpoint_view(trainer *tr) {
    return (ckpt_state){.cfg = tr->cfg,
                        .pt = &tr->model.table,
                        .zero = tr->zero,
                        .optim = tr->optim,
                        .be = tr->be,
                        .cm = tr->cm,
                        .rank = tr->li->rank,
                        .world = tr->li->world,
                        .tp_rank = tr->coord.tp};
}

// Locks and probes run.out_dir and checkpoint.dir (io/rundir.h) before anything is read
// from them or written to them: a second run on one of them, or an unusable one, ends here.
static tri_status open_dirs(trainer *tr) {
    ckpt_state view = trainer_checkpoint_view(tr);
    param_table full;
    params_build_full(&full, &tr->cfg->model, tr->cfg->parallel.tp);
    const rundir_plan plan = {
        .checkpoint_rank_bytes = tr->cfg->checkpoint.dir ? ckpt_rank_bytes(&view) : 0,
        // model.bin (llm.c), where the final save writes one
        .model_bytes = llmc_save_wanted(&full, tr->cfg) ? 1024 + 4 * (uint64_t)full.global_numel
                                                        : 0,
    };
    params_free(&full);
    return rundir_open(&tr->dirs, tr->cfg, tr->cm, tr->li->rank, tr->li->local_rank, &plan);
}

// Resumes per checkpoint.resume (before anything is written), and prepares the writer.
static tri_status open_checkpoints(trainer *tr) {
    const run_config *cfg = tr->cfg;
    char path[4096];
    int mute = log_mute_if_not_rank0();
    tri_status rc = ckpt_resolve_resume(cfg, path, sizeof path);
    log_unmute(mute);
    TRI_CHECK(rc);
    ckpt_state view = trainer_checkpoint_view(tr);
    if (path[0]) {
        TRI_CHECK(ckpt_load(path, &view, &tr->start));
        tr->resumed = 1;
    } else if (cfg->checkpoint.dir && !strcmp(cfg->checkpoint.resume, "auto")) {
        LOG_INFO("no checkpoint in %s: starting from step 0", cfg->checkpoint.dir);
    }
    if (cfg->checkpoint.dir) TRI_CHECK(ckpt_writer_create(&tr->ckpt, &view));
    return TRI_OK;
}

// The model, the ZeRO layer holding its parameters and gradients, and the optimizer, each
// carving its buffers from the rank's arenas; the arenas are the sums of the same specs
// (plan_rank_memory), so every arena is used whole (memory_json checks it).
static tri_status create_model(trainer *tr) {
    run_config *cfg = tr->cfg;
    const int n_slots = tr->sched.max_in_flight;
    uint64_t arenas[MEM_KIND_COUNT];
    plan_rank_memory(cfg, tr->coord.tp, tr->coord.pp, tr->dp_rank, n_slots, tr->be->attn_state,
                     arenas);
    TRI_CHECK(mem_pool_create(&tr->pool, tr->be, arenas));
    const model_layout ml = config_model_layout(cfg, tr->coord.tp, tr->coord.pp, n_slots,
                                                tr->be->attn_state);
    TRI_CHECK(model_create(&tr->model, &cfg->model, &ml, tr->be, tr->cm, &tr->pool));
    // The initial parameters go into the ZeRO layer's buffers entry by entry (model_init.h);
    // every rank learns whether any rank's part of a model file was bad.
    model_init mi;
    tri_status rc = model_init_agree(tr->cm, model_init_open(&mi, cfg, &tr->model.table));
    if (rc == TRI_OK) {
        const zero_config zc = config_zero_config(cfg, tr->dp_rank);
        rc = zero_create(&tr->zero, &zc, &tr->model, model_init_entry, &mi, tr->be, tr->cm,
                         &tr->pool);
        rc = model_init_agree(tr->cm, rc);
    }
    model_init_close(&mi);
    TRI_CHECK(rc);
    TRI_CHECK(optim_create(&tr->optim, &cfg->optim, cfg->train.grad_clip, tr->zero, tr->be, tr->cm,
                           &tr->pool));
    executor_init(&tr->exec, &tr->model, tr->zero, tr->cm, cfg->parallel.overlap);
    return TRI_OK;
}

// The run record's "memory" (what the model, ZeRO layer and optimizer carved from the rank's
// arenas) and "memory_planned" (the arenas: what `trident plan` computes for this rank's
// stage). A carve past its arena fails at startup; every rank checks that it used its
// arenas whole.
static tri_status memory_json(const trainer *tr, char *out, size_t n) {
    const mem_pool *pool = &tr->pool;
    size_t len = 0;
    for (int which = 0; which < 2; which++) {
        len += (size_t)snprintf(out + len, n - len, ",\"%s\":{",
                                which ? "memory_planned" : "memory");
        for (int k = 0; k < MEM_KIND_COUNT; k++)
            len += (size_t)snprintf(out + len, n - len, "%s\"%s\":%zu", k ? "," : "",
                                    mem_kind_name((mem_kind)k),
                                    which ? pool->size[k] : pool->used[k]);
        len += (size_t)snprintf(out + len, n - len, "}");
    }
    for (int k = 0; k < MEM_KIND_COUNT; k++) {
        if (pool->used[k] == pool->size[k]) continue;
        LOG_ERROR("memory: %s used %zu bytes of the %zu the planner gave it; please report this "
                  "as a bug",
                  mem_kind_name((mem_kind)k), pool->used[k], pool->size[k]);
        return TRI_ERR_INTERNAL;
    }
    return TRI_OK;
}

tri_status trainer_agree_stop(trainer *tr) {
    double sig = stop_signal();
    if (tr->li->world > 1)
        TRI_CHECK(comm_all_reduce(tr->cm, COMM_GROUP_WORLD, &sig, 1, DTYPE_FP64, COMM_REDUCE_MAX));
    if (sig <= 0) return TRI_OK;
    stop_request((int)sig);
    return TRI_STOPPED;
}

// A start-up phase boundary, reached by every rank in the same order once the communicators
// exist: a stop request on any rank reaches all of them here (the flag is all-reduced over
// the world, as at the step boundaries), so that they all stop together (TRI_STOPPED);
// otherwise the next phase begins (base/stop.h: what the start-up deadline names).
static tri_status startup_boundary(trainer *tr, const char *next_phase) {
    TRI_CHECK(trainer_agree_stop(tr));
    stop_phase(next_phase);
    return TRI_OK;
}

// Rank 0 opens metrics.jsonl (and the TensorBoard events); every rank learns the outcome (one
// all-reduce), so that an error there ends every rank, and whether the resumed step's
// evaluation is missing from the kept lines (then the loop runs it before the first step).
static tri_status open_outputs(trainer *tr, const char *extra_json) {
    const run_config *cfg = tr->cfg;
    double shared[2] = {TRI_OK, 0}; // status, evaluation to repeat
    if (tr->li->rank == 0) {        // run.out_dir exists: rundir_open made and probed it
        shared[0] = metrics_open(&tr->metrics, cfg, tr->cm->world_size, tr->be->name, tr->cm->name,
                                 extra_json, tr->resumed ? tr->start.step : -1);
        shared[1] = tr->metrics.resumed_eval_miss;
        if (shared[0] == TRI_OK && cfg->log.tensorboard)
            shared[0] = tb_open(&tr->tb, cfg->log.tensorboard, tr->start.step + 1);
    }
    if (tr->li->world > 1)
        TRI_CHECK(
            comm_all_reduce(tr->cm, COMM_GROUP_WORLD, shared, 2, DTYPE_FP64, COMM_REDUCE_MAX));
    tr->eval_first = tr->resumed && (int)shared[1];
    return (tri_status)(int)shared[0];
}

tri_status trainer_init(trainer *tr, run_config *cfg, launch_info *li) {
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
    const mesh m = config_mesh(cfg);
    tr->coord = mesh_coord_of(&m, li->rank);
    log_set_rank(li->rank, tr->coord.tp, tr->coord.dp, tr->coord.pp);
    if (li->rank == 0 && li->world > 1)
        mesh_print(&m, cfg->model.n_layer, cfg->parallel.virtual_stages, stdout);
    tr->dp = cfg->parallel.dp;
    tr->dp_rank = tr->coord.dp;
    tr->n_micro = config_micro_batches(cfg);
    // system.threads 0: the cores this rank may use, shared with the ranks of its node.
    const int threads = backend_cpu_fit_threads(cfg->system.threads, li->local_size,
                                                tr->threads_why, sizeof tr->threads_why);
    // The compute backend first: on the CUDA path it selects the device that NCCL's
    // communicators and every buffer belong to.
    stop_phase("compute backend");
    TRI_CHECK(backend_create_for(cfg->system.backend, li->local_rank, threads, &tr->be));
    stop_phase("communicators");
    TRI_CHECK(create_comm(tr));
    TRI_CHECK(startup_boundary(tr, "data"));
    // Before the model exists, so that the peak memory is the model's and optimizer's alone.
    // The MFU denominator: the backend's datasheet peak, or its measured matmul rate.
    tr->peak_flops = tr->be->peak_flops > 0 ? tr->be->peak_flops : measure_matmul_rate(tr->be);
    TRI_CHECK(open_data(tr));
    TRI_CHECK(startup_boundary(tr, "model"));
    const int pp = cfg->parallel.pp, v = cfg->parallel.virtual_stages;
    TRI_CHECK(sched_build(&tr->sched, cfg->parallel.schedule, pp, v, tr->n_micro, tr->coord.pp));
    TRI_CHECK(sched_build_forward(&tr->eval_sched, pp, pp == 1 ? 1 : v, tr->n_micro, tr->coord.pp));
    TRI_CHECK(create_model(tr));
    TRI_CHECK(startup_boundary(tr, "directories"));
    TRI_CHECK(open_dirs(tr));
    TRI_CHECK(startup_boundary(tr, "resume"));
    TRI_CHECK(open_checkpoints(tr));
    TRI_CHECK(startup_boundary(tr, "metrics"));
    tr->flops_per_token = plan_flops_per_token(cfg);
    char memory[1024], extra[2048];
    TRI_CHECK(memory_json(tr, memory, sizeof memory));
    char wait[128] = "";
    if (tr->be->threads > 0) backend_cpu_wait_describe(wait, sizeof wait);
    // threads_why and omp_wait: rank 0's view (its node); neither holds a character that
    // JSON would escape (backend.h).
    snprintf(extra, sizeof extra,
             ",\"n_params\":%lld,\"threads\":%d,\"threads_why\":\"%s\",\"omp_wait\":\"%s\","
             "\"micro_batches\":%d,\"flops_per_token\":%.0f,\"mfu_peak_flops\":%.4g,"
             "\"rank_params\":%zu%s",
             (long long)tr->model.table.global_numel, tr->be->threads,
             tr->be->threads > 0 ? tr->threads_why : "", wait, tr->n_micro, tr->flops_per_token,
             tr->peak_flops, tr->model.table.local_numel, memory);
    // A resumed run says from which step, so that scripts/plot.py joins the restarts there.
    if (tr->resumed) {
        size_t len = strlen(extra);
        snprintf(extra + len, sizeof extra - len, ",\"resumed_from_step\":%d", tr->start.step);
    }
    TRI_CHECK(open_outputs(tr, extra));
    return startup_boundary(tr, "first step");
}

void trainer_free(trainer *tr) {
    ckpt_writer_free(tr->ckpt);
    metrics_free(&tr->metrics);
    tb_close(&tr->tb);
    rundir_close(&tr->dirs); // after the last write into them
    executor_free(&tr->exec);
    if (tr->be) {
        optim_free(tr->optim);
        zero_free(tr->zero);
        model_free(&tr->model);
        mem_pool_free(&tr->pool);
        tr->be->destroy(tr->be);
    }
    sched_free(&tr->sched);
    sched_free(&tr->eval_sched);
    data_close(&tr->train);
    data_close(&tr->val);
    if (tr->cm) comm_destroy(tr->cm);
}
