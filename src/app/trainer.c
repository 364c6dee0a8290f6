// trainer.c: setting up one process's training state (trainer_internal.h) from a run
// config: the compute and comm backends of the mesh, the data, the schedule tables, the
// rank's arenas (sized by the same buffer specs that the model, the ZeRO layer and the
// optimizer carve), the initial parameters, a resumed checkpoint and the run record.
#include "app/trainer_internal.h"

#include "app/resume_diff.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "base/stop.h"
#include "comm/flight.h"
#include "compute/backend_select.h"
#include "config/config_layout.h"
#include "io/llmc.h"
#include "io/model_init.h"
#include "io/rundir.h"
#include "plan/plan.h"
#include "plan/plan_profile.h"

// The backend's practical matmul rate, measured once (about 0.1 s) as the MFU denominator
// where no datasheet peak applies: on the CPU, and on a GPU the planner's table does not
// have. bf16: on bf16 operands (a device backend's tensor cores; the CPU widens them and
// measures its fp32 rate, as it always has).
static double measure_matmul_rate(backend *be, int bf16) {
    const int N = 512, K = 768, M = 768;
    const size_t in = bf16 ? sizeof(uint16_t) : sizeof(float);
    void *a = be->alloc(be, (size_t)N * K * in), *w = be->alloc(be, (size_t)M * K * in);
    float *o = be->alloc(be, (size_t)N * M * 4);
    if (!a || !w || !o) return 0.0;
    const operand oa = bf16 ? operand_bf16(a) : operand_fp32(a);
    const operand ow = bf16 ? operand_bf16(w) : operand_fp32(w);
    backend_matmul_fwd(be, o, NULL, oa, ow, NULL, N, K, M); // warm-up
    be->synchronize(be);
    // The best of several short windows: interference only ever lowers a measurement.
    double best = 0.0;
    for (int window = 0; window < 5; window++) {
        int reps = 0;
        double t0 = time_now_s(), t;
        do {
            backend_matmul_fwd(be, o, NULL, oa, ow, NULL, N, K, M);
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

// The MFU denominator: the backend's own peak where it states one; for a GPU the planner's
// device table knows, that device's dense peak of the run's precision (bf16, TF32 or fp32),
// said once; else the measured matmul rate (the CPU; an unknown GPU, with a note).
static double mfu_peak(trainer *tr) {
    backend *be = tr->be;
    const precision_kind prec = tr->cfg->train.precision_mode;
    if (be->peak_flops > 0) return be->peak_flops;
    plan_device dev;
    if (be->device_name && plan_device_for_gpu(be->device_name, &dev) == 0) {
        const char *what;
        const double peak = plan_device_peak(&dev, prec, &what);
        LOG_INFO("MFU against the %s's dense %s peak, %.4g TFLOP/s (the planner's device %s)",
                 dev.description, what, peak / 1e12, dev.name);
        return peak;
    }
    if (be->device_name)
        LOG_INFO("MFU against the measured matmul rate: %s is not in the planner's device table "
                 "(%s)",
                 be->device_name, plan_device_names());
    return measure_matmul_rate(be, be->device_memory && prec == PRECISION_BF16);
}

// The planner's prediction for this run (issue 21 point 3): `trident plan` of this config on
// the device the run uses (the CUDA device's table entry, or the CPU's), into the run record's
// "plan" object, with each pipeline stage's step in the parts a run measures
// (plan_stage_parts: `trident plan RUN_DIR` sets them beside timing.json's); each step line
// then carries its measured time over the predicted one (plan_ratio). Nothing when the
// device has no entry.
static void plan_json(trainer *tr, FILE *f) {
    tr->plan_step_s = 0;
    if (tr->li->rank != 0) return; // the one rank that writes the record and the step lines
    plan_device dev;
    const backend *be = tr->be;
    if (be->device_name ? plan_device_for_gpu(be->device_name, &dev) != 0
                        : plan_device_lookup("cpu", tr->li->world, &dev) != 0)
        return;
    char wait[96];
    if (tr->profile.calib.calibrated) { // system.device_profile, when it describes this device
        if (!strcmp(tr->profile.name, dev.name)) dev = tr->profile;
        else
            LOG_WARN("system.device_profile: %s describes %s, this run uses %s: the run "
                     "record's prediction uses the built-in %s entry",
                     tr->profile.calib.path, tr->profile.name, dev.name, dev.name);
    }
    // Idle threads that wait otherwise than in the calibration: another cost per region.
    if (!be->device_name && be->threads > 1 && plan_omp_wait_differs(&dev, wait, sizeof wait)) {
        LOG_WARN("system.device_profile: %s was measured with idle OpenMP threads waiting as "
                 "'%s', this run waits as '%s': the predicted step time may be off by tens of "
                 "percent (README \"CPU threads\")",
                 dev.calib.path, dev.calib.omp_wait, wait);
        LOG_HINT("calibrate with the OMP_WAIT_POLICY / GOMP_SPINCOUNT the runs use");
    }
    plan_result p;
    if (plan_compute(&p, tr->cfg, &dev) != TRI_OK) return;
    tr->plan_step_s = p.step_s;
    snprintf(tr->plan_device, sizeof tr->plan_device, "%s", dev.name);
    fprintf(f,
            ",\"plan\":{\"device\":\"%s\",\"calibrated\":%s,\"step_s\":%.6g,"
            "\"schedule_s\":%.6g,\"bubble\":%.4f,\"bubble_sim\":%.4f,\"tokens_per_s\":%.6g,",
            dev.name, dev.calib.calibrated ? "true" : "false", p.step_s, p.t_schedule, p.bubble,
            p.bubble_sim, p.tokens_per_s);
    if (dev.calib.calibrated) {
        fprintf(f, "\"profile\":");
        config_print_quoted(f, dev.calib.path);
        fputc(',', f);
    }
    fprintf(f, "\"stages\":[");
    for (int r = 0; r < p.pp; r++) {
        const plan_step_parts parts = plan_stage_parts(&p, r);
        fprintf(f, "%s{\"compute_s\":%.6g,\"waits_s\":%.6g,\"comm_s\":%.6g}", r ? "," : "",
                parts.compute_s, parts.waits_s, parts.comm_s);
    }
    fputs("]}", f);
    plan_free(&p);
}

// data.train (io/data_order.h) and data.val's sets; rank 0 says what they hold.
static tri_status open_data(trainer *tr) {
    run_config *cfg = tr->cfg;
    const int T = cfg->model.seq_len, V = cfg->model.vocab_size, G = cfg->train.global_batch;
    TRI_CHECK(
        data_order_open(&tr->train, &cfg->data.train, cfg->data.shuffle, cfg->run.seed, T, V, G));
    tr->train.notes = tr->li->rank == 0;
    const config_data_sources *val = &cfg->data.val;
    tr->last_val = xmalloc((size_t)val->n * sizeof(double));
    for (int i = 0; i < val->n; i++) tr->last_val[i] = NAN;
    if (cfg->data.eval_every == 0) return TRI_OK;
    tr->val = xcalloc((size_t)val->n, sizeof *tr->val);
    tr->val_names = val->listed ? xcalloc((size_t)val->n, sizeof(char *)) : NULL;
    for (int i = 0; i < val->n; i++) {
        char what[64];
        if (val->listed) snprintf(what, sizeof what, "data.val[%d].path", i);
        else snprintf(what, sizeof what, "data.val");
        TRI_CHECK(data_open(&tr->val[i], val->items[i].path, T, V, G, what));
        tr->n_val = i + 1;
        if (val->listed) tr->val_names[i] = val->items[i].name;
    }
    return TRI_OK;
}

// Rank 0's lines on the data (once the order a resume continues is known).
static void describe_data(const trainer *tr) {
    const run_config *cfg = tr->cfg;
    if (tr->li->rank != 0) return;
    data_order_describe(&tr->train, cfg->train.steps);
    const int64_t reads = (int64_t)cfg->data.eval_batches * cfg->train.global_batch;
    for (int i = 0; i < tr->n_val; i++) {
        const data_stream *ds = &tr->val[i];
        LOG_INFO("data.val%s%s: %s: %d shard%s, %lld tokens, %lld samples; each evaluation reads "
                 "the first %lld (%d batches of %d) in plain order%s",
                 tr->val_names ? " " : "", tr->val_names ? tr->val_names[i] : "",
                 cfg->data.val.items[i].path, ds->n_shards, ds->n_shards > 1 ? "s" : "",
                 (long long)ds->n_tokens, (long long)ds->n_samples, (long long)reads,
                 cfg->data.eval_batches, cfg->train.global_batch,
                 reads > ds->n_samples ? ", wrapping around: some twice" : "");
    }
}

// The data order that a resume continues (io/data_order.h): the checkpoint's. A config that
// asks for another one (data.shuffle, run.seed, data.train) is refused, unless
// checkpoint.resume_changes: allow, which continues in the config's order from here.
static tri_status resume_data_order(trainer *tr, const char *path) {
    run_config *cfg = tr->cfg;
    const data_cursor *c = &tr->start.order;
    const int rank0 = tr->li->rank == 0;
    char diff[8192];
    const int n = data_order_compare(c, cfg, diff, sizeof diff);
    if (n && cfg->checkpoint.resume_changes != RESUME_CHANGES_ALLOW) {
        if (rank0) {
            LOG_ERROR("checkpoint %s recorded another data order than this config asks for:\n%s",
                      path, diff);
            LOG_HINT("resume with the checkpoint's data order (set the config back), or set "
                     "checkpoint.resume_changes: allow to continue in the config's order from "
                     "step %d",
                     tr->start.step);
        } else {
            sleep(2); // rank 0 reports first: the launcher ends the job at the first exit
        }
        return TRI_ERR_CONFIG;
    }
    if (n && rank0)
        LOG_WARN("checkpoint.resume_changes: allow: the data order changes at step %d:\n%s\n"
                 "each source continues after the samples it gave before, and the blend "
                 "schedule starts anew",
                 tr->start.step, diff);
    if (!n && !c->recorded) {
        if (rank0)
            LOG_INFO("checkpoint %s was written before data.shuffle: continuing in plain order",
                     path);
        cfg->data.shuffle = 0; // what this run does, in its run record and checkpoints
    }
    return data_order_resume(&tr->train, c, path);
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

// Resumes per checkpoint.resume (before anything is written): first the differences between
// the checkpoint's config and this one (resume_diff.h), then the state. Prepares the writer.
static tri_status open_checkpoints(trainer *tr) {
    const run_config *cfg = tr->cfg;
    char path[4096];
    int mute = log_mute_if_not_rank0();
    tri_status rc = ckpt_resolve_resume(cfg, path, sizeof path);
    log_unmute(mute);
    TRI_CHECK(rc);
    ckpt_state view = trainer_checkpoint_view(tr);
    if (path[0]) {
        TRI_CHECK(resume_check(path, cfg, tr->cm, tr->li->world, &tr->resume_json));
        TRI_CHECK(ckpt_load(path, &view, &tr->start));
        tr->resumed = 1;
        TRI_CHECK(resume_data_order(tr, path));
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
    plan_rank_memory(cfg, tr->coord.tp, tr->coord.pp, tr->dp_rank, n_slots,
                     backend_traits_of(tr->be), arenas);
    TRI_CHECK(mem_pool_create(&tr->pool, tr->be, arenas));
    const model_layout ml = config_model_layout(cfg, tr->coord.tp, tr->coord.pp, n_slots,
                                                backend_traits_of(tr->be));
    TRI_CHECK(model_create(&tr->model, &cfg->model, &ml, tr->be, tr->cm, &tr->pool));
    // The backend's own workspaces for the model's shapes, before the first step.
    const backend_shapes shapes = model_op_shapes(&cfg->model, &ml);
    TRI_CHECK(tr->be->reserve(tr->be, &shapes));
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

// The run record's "data_train" (each source: path, weight, share, shards, tokens, samples,
// epochs in this run) and "data_val" (each set: name, path, shards, tokens, samples).
static void data_json(const trainer *tr, FILE *f) {
    fputs(",\"data_train\":", f);
    data_order_json(&tr->train, tr->cfg->train.steps, f);
    fputs(",\"data_val\":[", f);
    for (int i = 0; i < tr->n_val; i++) {
        fputs(i ? ",{" : "{", f);
        if (tr->val_names) {
            fputs("\"name\":", f);
            config_print_quoted(f, tr->val_names[i]);
            fputc(',', f);
        }
        fputs("\"path\":", f);
        config_print_quoted(f, tr->cfg->data.val.items[i].path);
        fprintf(f, ",\"shards\":%d,\"tokens\":%lld,\"samples\":%lld}", tr->val[i].n_shards,
                (long long)tr->val[i].n_tokens, (long long)tr->val[i].n_samples);
    }
    fputc(']', f);
}

tri_status trainer_init(trainer *tr, run_config *cfg, launch_info *li) {
    tr->cfg = cfg;
    tr->li = li;
    // Every rank validates the same config; only rank 0 prints what is wrong.
    int mute = log_mute_if_not_rank0();
    tri_status rc = config_resolve_world(cfg, li->world);
    // The planner's profile for the run record, read before any communicator: a wrong path is
    // the config's error (exit 2), on every rank alike.
    if (rc == TRI_OK && cfg->system.device_profile)
        rc = plan_profile_of_config(cfg, li->world, &tr->profile);
    log_unmute(mute);
    // The launcher ends the job at the first failing exit: the other ranks give rank 0 time
    // to report first, so that the message is never cut off.
    if (rc != TRI_OK && li->rank != 0) sleep(2);
    TRI_CHECK(rc);
    const mesh m = config_mesh(cfg);
    tr->coord = mesh_coord_of(&m, li->rank);
    straggler_init(&tr->straggler, cfg, li);
    log_set_rank(li->rank, tr->coord.tp, tr->coord.dp, tr->coord.pp);
    if (li->rank == 0 && li->world > 1)
        mesh_print(&m, cfg->model.n_layer, cfg->parallel.virtual_stages,
                   cfg->parallel.schedule == SCHEDULE_ZBV, stdout);
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
    if (model_arch_is_llama(&cfg->model) && !tr->be->rmsnorm_fwd) { // a backend without them
        LOG_ERROR("model.arch: llama is not yet supported on the %s backend (system.backend: %s)",
                  tr->be->name, config_backend_name(cfg->system.backend));
        LOG_HINT("train Llama models with system.backend: cpu for now (README \"Llama\")");
        return TRI_ERR_CONFIG;
    }
    if (cfg->train.precision_mode == PRECISION_TF32 &&
        !backend_set_tf32(tr->be, 1)) // the CPU: fp32 FMA, the same results as fp32
        LOG_INFO("train.precision: tf32 runs as fp32 on the %s backend, which has no TF32 "
                 "units",
                 tr->be->name);
    stop_phase("communicators");
    TRI_CHECK(create_comm(tr));
    TRI_CHECK(startup_boundary(tr, "data"));
    // Before the model exists, so that the peak memory is the model's and optimizer's alone.
    // The MFU denominator: the backend's datasheet peak, or its measured matmul rate.
    tr->peak_flops = mfu_peak(tr);
    TRI_CHECK(open_data(tr));
    TRI_CHECK(startup_boundary(tr, "model"));
    const int pp = cfg->parallel.pp, v = cfg->parallel.virtual_stages;
    TRI_CHECK(sched_build(&tr->sched, cfg->parallel.schedule, pp, v, tr->n_micro, tr->coord.pp));
    TRI_CHECK(sched_build_forward(&tr->eval_sched, cfg->parallel.schedule, pp, pp == 1 ? 1 : v,
                                  tr->n_micro, tr->coord.pp));
    TRI_CHECK(create_model(tr));
    TRI_CHECK(startup_boundary(tr, "directories"));
    TRI_CHECK(open_dirs(tr));
    const mesh fm = config_mesh(cfg); // the flight recorder's ring in the locked run.out_dir
    flight_open(cfg->run.out_dir, tr->cm, &fm, tr->li->host);
    TRI_CHECK(startup_boundary(tr, "resume"));
    TRI_CHECK(open_checkpoints(tr));
    describe_data(tr);
    TRI_CHECK(startup_boundary(tr, "metrics"));
    tr->flops_per_token = plan_flops_per_token(cfg);
    char memory[1024], *extra = NULL;
    size_t extra_len = 0;
    TRI_CHECK(memory_json(tr, memory, sizeof memory));
    char wait[128] = "";
    if (tr->be->threads > 0) backend_cpu_wait_describe(wait, sizeof wait);
    FILE *f = open_memstream(&extra, &extra_len);
    TRI_ASSERT(f);
    // threads_why and omp_wait: rank 0's view (its node); neither holds a character that
    // JSON would escape (backend.h).
    fprintf(f,
            ",\"n_params\":%lld,\"threads\":%d,\"threads_why\":\"%s\",\"omp_wait\":\"%s\","
            "\"micro_batches\":%d,\"flops_per_token\":%.0f,\"mfu_peak_flops\":%.4g,"
            "\"rank_params\":%zu%s",
            (long long)tr->model.table.global_numel, tr->be->threads,
            tr->be->threads > 0 ? tr->threads_why : "", wait, tr->n_micro, tr->flops_per_token,
            tr->peak_flops, tr->model.table.local_numel, memory);
    plan_json(tr, f);
    // A resumed run says from which step, so that scripts/plot.py joins the restarts there,
    // and the changes it made to the checkpoint's config.
    if (tr->resumed)
        fprintf(f, ",\"resumed_from_step\":%d%s", tr->start.step,
                tr->resume_json ? tr->resume_json : "");
    data_json(tr, f);
    TRI_ASSERT(fclose(f) == 0);
    rc = open_outputs(tr, extra);
    free(extra);
    TRI_CHECK(rc);
    timing_init(&tr->timing, tr);
    return startup_boundary(tr, "first step");
}

void trainer_free(trainer *tr) {
    free(tr->resume_json);
    straggler_free(&tr->straggler);
    timing_free(&tr->timing);
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
    data_order_close(&tr->train);
    for (int i = 0; i < tr->n_val; i++) data_close(&tr->val[i]);
    free(tr->val);
    free(tr->val_names);
    free(tr->last_val);
    data_cursor_free(&tr->start.order);
    if (tr->cm) comm_destroy(tr->cm);
}
