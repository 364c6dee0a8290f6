// train.c: one process's training loop (DESIGN.md "How one step flows"). Each step: the
// executor runs this rank's schedule table (forward and backward of every micro-batch, the
// pipeline transfers between them); the ZeRO layer finishes the gradients; the optimizer
// takes the global norm, clips and applies AdamW; then metrics, checkpoints and evaluation.
// trainer.c sets the state up.
#include "app/train.h"

#include "app/trainer_internal.h"

#include <math.h>
#include <string.h>
#include <sys/resource.h>

#include "base/stop.h"
#include "comm/flight.h"
#include "io/llmc.h"
#include "plan/plan.h"

// Micro-batch `micro` of the training step tr->step: positions [pos, pos + B) of the step's
// global batch in the data order (io/data_order.h), which continues where the checkpoint
// left it.
static void load_train_batch(void *ctx, int micro, int *inputs, int *targets) {
    trainer *tr = ctx;
    const run_config *cfg = tr->cfg;
    const int GB = cfg->train.global_batch, B = cfg->train.micro_batch;
    const int pos = (int)data_micro_batch_start(0, GB, tr->dp, tr->dp_rank, micro, B);
    data_order_batch(&tr->train, tr->step, pos, B, inputs, targets);
}

// Micro-batch `micro` of evaluation batch tr->eval_batch of validation set tr->eval_set.
static void load_eval_batch(void *ctx, int micro, int *inputs, int *targets) {
    trainer *tr = ctx;
    const run_config *cfg = tr->cfg;
    const int GB = cfg->train.global_batch, B = cfg->train.micro_batch;
    int64_t first = data_micro_batch_start(tr->eval_batch, GB, tr->dp, tr->dp_rank, micro, B);
    data_batch(&tr->val[tr->eval_set], first, B, inputs, targets);
}

// Whether step n (1-based) ends with an evaluation.
static int eval_due(const run_config *cfg, int n) {
    return cfg->data.eval_every > 0 && (n % cfg->data.eval_every == 0 || n == cfg->train.steps);
}

// Mean validation loss of each set of data.val (val_loss[tr->n_val]) over eval_batches
// batches of global_batch sequences, split over the dp replicas as a training step is:
// always the same leading part of the set's plain stream, whatever the layout, so
// evaluations compare across steps and layouts. Each batch runs the forward-only table. A
// stop request ends it within one batch on every rank (TRI_STOPPED; the request is agreed
// before each batch, as at the step boundaries).
static tri_status evaluate(trainer *tr, double *val_loss) {
    const run_config *cfg = tr->cfg;
    const int T = cfg->model.seq_len, GB = cfg->train.global_batch;
    double waited = 0.0;
    const exec_batches batches = {load_eval_batch, tr};
    for (tr->eval_set = 0; tr->eval_set < tr->n_val; tr->eval_set++) {
        for (tr->eval_batch = 0; tr->eval_batch < cfg->data.eval_batches; tr->eval_batch++) {
            TRI_CHECK(trainer_agree_stop(tr));
            TRI_CHECK(executor_run(&tr->exec, &tr->eval_sched, batches, 0.0f, 0, &waited));
        }
        TRI_CHECK(executor_take_loss(&tr->exec, &val_loss[tr->eval_set]));
    }
    if (tr->dp > 1)
        TRI_CHECK(comm_all_reduce(tr->cm, COMM_GROUP_DP, val_loss, (size_t)tr->n_val, DTYPE_FP64,
                                  COMM_REDUCE_SUM));
    for (int i = 0; i < tr->n_val; i++) val_loss[i] /= (double)cfg->data.eval_batches * GB * T;
    return TRI_OK;
}

// ---- the final model (model.bin) ----

static tri_status fetch_params(void *ctx, int entry, size_t lo, size_t n, float *dst) {
    return zero_entry_params(ctx, entry, lo, n, dst);
}

// This process's peak resident memory (ru_maxrss: kB on Linux), in bytes.
static double peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? 1024.0 * (double)ru.ru_maxrss : 0.0;
}

// Writes model.bin where the llm.c format fits (llmc_save_wanted), or with `force` whatever its
// size (the last checkpoint failed: model.bin is then the run's only output): rank 0 writes it tensor by
// tensor, each assembled over the model-parallel group of dp replica 0 in pieces of at most
// MODEL_SAVE_PIECE_BYTES (model_gather_rows), so that every rank holds two pieces (the piece
// and its staging), never the model: plan.h's host_save_bytes. Under ZeRO-3 every dp replica
// takes part (the pieces' parameters are gathered over dp). Collective over the world: every
// rank returns the same status, and rank 0 reports the largest peak resident memory of all.
static tri_status save_model(trainer *tr, int force) {
    const run_config *cfg = tr->cfg;
    model *m = &tr->model;
    if (model_arch_is_llama(&cfg->model)) { // llm.c's file holds GPT-2's tensors only
        if (cfg->checkpoint.dir)
            LOG_INFO("model.bin not written: llm.c's format holds GPT-2 models only; the final "
                     "checkpoint in %s is this run's model",
                     cfg->checkpoint.dir);
        else
            LOG_WARN("model.bin not written: llm.c's format holds GPT-2 models only, and "
                     "checkpoint.dir is not set: the trained Llama weights are not saved; set "
                     "checkpoint.dir to keep them");
        return TRI_OK;
    }
    param_table full;
    params_build_full(&full, &cfg->model, cfg->parallel.tp);
    const int wanted = force || llmc_save_wanted(&full, cfg);
    const int zero3 = zero_layout_of(tr->zero)->stage == 3, writer = tr->li->rank == 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.bin", cfg->run.out_dir);
    tri_status rc = TRI_OK;
    if (wanted && (tr->coord.dp == 0 || zero3)) {
        const size_t piece = model_save_piece_elems(&full);
        float *stage = xmalloc(piece * sizeof(float)), *out = xmalloc(piece * sizeof(float));
        llmc_writer w;
        // A writer that failed goes on through the collectives (its status is agreed below).
        tri_status wrc = writer ? llmc_writer_open(&w, path, &full, m->d.T, m->d.V, m->d.NH)
                                : TRI_OK;
        for (int i = 0; i < full.n_entries && rc == TRI_OK; i++) {
            const param_entry *fe = &full.entries[i];
            const int64_t per = model_save_piece_rows(fe);
            for (int64_t r = 0; r < fe->global_rows && rc == TRI_OK; r += per) {
                const int64_t rows = fe->global_rows - r < per ? fe->global_rows - r : per;
                rc = model_gather_rows(m, fe, r, rows, fetch_params, tr->zero, tr->coord.dp == 0,
                                       stage, out);
                if (rc == TRI_OK && writer && wrc == TRI_OK)
                    wrc = llmc_writer_put(&w, fe, (size_t)(r * fe->global_cols), out,
                                          (size_t)(rows * fe->global_cols));
            }
        }
        if (writer) {
            if (wrc == TRI_OK && rc == TRI_OK) wrc = llmc_writer_close(&w, 1);
            else if (wrc == TRI_OK) llmc_writer_close(&w, 0);
            if (rc == TRI_OK) rc = wrc;
        }
        free(stage);
        free(out);
    }
    params_free(&full);
    // One agreement over the world: the worst status, and the largest peak resident memory.
    double agreed[2] = {(double)rc, peak_rss_bytes()};
    if (tr->li->world > 1) {
        tri_status crc = comm_all_reduce(tr->cm, COMM_GROUP_WORLD, agreed, 2, DTYPE_FP64,
                                         COMM_REDUCE_MAX);
        if (crc != TRI_OK) return crc;
    }
    rc = (tri_status)(int)agreed[0];
    if (rc == TRI_OK && wanted) LOG_INFO("model written to %s", path);
    if (rc == TRI_OK && !wanted)
        LOG_INFO("model.bin not written: the model's %.2f GB of fp32 are past the llm.c file's "
                 "%.0f GB limit; the final checkpoint in %s is this run's model (`trident export "
                 "%s --format llmc|safetensors` converts it)",
                 4.0 * (double)m->table.global_numel / 1e9, (double)LLMC_SAVE_MAX_BYTES / 1e9,
                 cfg->checkpoint.dir, cfg->checkpoint.dir);
    LOG_INFO("host memory: peak resident %.1f MiB (the largest of %d rank%s)",
             agreed[1] / 1048576.0, tr->li->world, tr->li->world > 1 ? "s" : "");
    return rc;
}

// At the end of a step, over the world: whether any rank got a stop signal, whether rank 0
// could not write metrics.jsonl (log.metrics_required: the run stops, and exits 4), and
// whether a background checkpoint write has finished on every rank (then it is committed).
// At a step that will be logged (`timing` set, a multi-rank run) the same reduction carries
// every rank's step, compute, comm-wait and pipeline-transfer (pipe_s) times
// (train_straggler.c) into `timing`'s straggler fields, and rank 0's copy for timing.json.
static tri_status step_boundary(trainer *tr, int *stop, double step_s, double wait_s, double pipe_s,
                                metrics_step *timing) {
    double *flags = tr->straggler.boundary; // (3 + 5 * world)
    flags[0] = stop_signal();
    flags[1] = ckpt_pending(tr->ckpt) && !ckpt_write_done(tr->ckpt);
    flags[2] = metrics_stops_run(&tr->metrics);
    size_t count = 3;
    if (timing) {
        TRI_CHECK(straggler_gather_hosts(&tr->straggler, tr->cm, tr->li->host));
        count += straggler_fill(&tr->straggler, flags + 3, step_s, wait_s, pipe_s, tr->coord.pp);
    }
    if (tr->li->world > 1)
        TRI_CHECK(
            comm_all_reduce(tr->cm, COMM_GROUP_WORLD, flags, count, DTYPE_FP64, COMM_REDUCE_MAX));
    if (timing) straggler_take(&tr->straggler, flags + 3, tr->step + 1, timing);
    if (flags[0] > 0) stop_request((int)flags[0]);
    tr->metrics_lost = flags[2] > 0;
    // Lost metrics at the last step do not stop it: the final model is written, then exit 4.
    *stop = flags[0] > 0 || (tr->metrics_lost && tr->step + 1 < tr->cfg->train.steps);
    if (ckpt_pending(tr->ckpt) && flags[1] == 0) TRI_CHECK(ckpt_commit(tr->ckpt));
    return TRI_OK;
}

// Rank 0 at logged step n: each pipeline stage's times into timing.json (train_timing.c),
// from the boundary's gather (`timing` has the straggler fields then) or, alone, its own.
static void log_stage_times(trainer *tr, int n, double step_s, double wait_s, double pipe_s,
                            const metrics_step *timing) {
    if (tr->li->rank != 0) return;
    stage_times *st = xcalloc((size_t)tr->cfg->parallel.pp, sizeof *st);
    if (timing->has_straggler)
        straggler_stage_times(&tr->straggler, tr->straggler.boundary + 3, tr->cfg->parallel.pp, st);
    else if (tr->li->world == 1) st[0] = stage_times_of_rank(step_s, wait_s, pipe_s);
    if (timing->has_straggler || tr->li->world == 1) timing_log_step(&tr->timing, n, st);
    free(st);
}

// Writes the checkpoint of the step just done (n steps, `samples` consumed); appends the
// time the loop was blocked to `note` for the step line.
static tri_status checkpoint_step(trainer *tr, int n, int64_t samples, int async, char *note,
                                  size_t note_len) {
    const run_config *cfg = tr->cfg;
    flight_set_activity(FLIGHT_ACT_CHECKPOINT, -1, -1);
    ckpt_progress p = {.step = n,
                       .samples = samples,
                       .tokens = samples * cfg->model.seq_len,
                       .optim_t = optim_steps_taken(tr->optim)};
    data_order_cursor(&tr->train, n, &p.order);
    TRI_ASSERT(data_order_samples(&tr->train, n) == samples);
    double blocked = 0.0;
    tri_status rc = ckpt_save(tr->ckpt, &p, async, &blocked);
    data_cursor_free(&p.order);
    TRI_CHECK(rc);
    metrics_write_checkpoint(&tr->metrics, n, cfg->checkpoint.dir, 1e3 * blocked);
    snprintf(note, note_len, " | ckpt blocked %.1f ms%s", 1e3 * blocked, async ? " (async)" : "");
    return TRI_OK;
}

// One optimizer step (tr->step): the schedule, the gradients' end, the norm and the update.
// *loss: the step's mean loss; *norm: the gradient norm; *waited: seconds waited on other
// pipeline stages.
static tri_status train_step(trainer *tr, double *loss, double *norm, double *lr, double *waited) {
    run_config *cfg = tr->cfg;
    const int64_t tokens_per_step = (int64_t)cfg->train.global_batch * cfg->model.seq_len;
    comm_counters_reset(tr->cm);
    straggler_test_delay(&tr->straggler);
    zero_step_begin(tr->zero);
    double loss_sum = 0.0;
    const exec_batches batches = {load_train_batch, tr};
    TRI_CHECK(executor_run(&tr->exec, &tr->sched, batches, (float)(1.0 / (double)tokens_per_step),
                           1, waited));
    TRI_CHECK(executor_take_loss(&tr->exec, &loss_sum));
    flight_set_activity(FLIGHT_ACT_GRADS, -1, -1);
    TRI_CHECK(zero_finish_grads(tr->zero));
    int reductions, gathers, prefetched;
    zero_overlap_counts(tr->zero, &reductions, &gathers, &prefetched);
    LOG_DEBUG("step %d overlap: %d dp reductions left running under the backward, %d "
              "parameter gathers under earlier layers or passes (%d passes gathered ahead), "
              "%d pipeline transfers under a forward or backward",
              tr->step + 1, reductions, gathers, prefetched, executor_overlap_count(&tr->exec));
    if (tr->dp > 1)
        TRI_CHECK(
            comm_all_reduce(tr->cm, COMM_GROUP_DP, &loss_sum, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    *loss = loss_sum / (double)tokens_per_step;
    tri_status rc = optim_grad_norm(tr->optim, norm);
    if (!isfinite(*loss) || rc == TRI_ERR_NONFINITE) {
        LOG_ERROR("step %d: non-finite %s (loss %g, grad norm %g)", tr->step + 1,
                  isfinite(*loss) ? "gradients" : "loss", *loss, *norm);
        LOG_HINT("lower optim.lr, raise optim.warmup_steps or keep train.grad_clip on");
        return TRI_ERR_NONFINITE;
    }
    TRI_CHECK(rc);
    *lr = optim_lr(&cfg->optim, cfg->train.steps, tr->step);
    TRI_CHECK(optim_step(tr->optim, *lr, *norm));
    tr->be->synchronize(tr->be);
    return TRI_OK;
}

// The step line of step n (stdout and metrics.jsonl); `dt` seconds, `waited` of them on other
// pipeline stages.
static void log_step(trainer *tr, int n, int64_t samples, double loss, double lr, double norm,
                     double dt, double waited, const metrics_step *timing, const char *ckpt_note) {
    const run_config *cfg = tr->cfg;
    const model *m = &tr->model;
    const int64_t tokens_per_step = (int64_t)cfg->train.global_batch * cfg->model.seq_len;
    metrics_step s = {
        .step = n,
        .loss = loss,
        .lr = lr,
        .grad_norm = norm,
        .tokens = samples * cfg->model.seq_len,
        .step_ms = 1e3 * dt,
        .tokens_per_s = tokens_per_step / dt,
        // Every rank has its own device (or cores) and peak: the job's FLOP/s over world peaks.
        .mfu = tr->peak_flops > 0
                   ? tr->flops_per_token * tokens_per_step / dt / (tr->peak_flops * tr->li->world)
                   : NAN,
        .mem_peak_bytes = tr->be->mem_peak_bytes(tr->be),
        .comm_tp = comm_group_bytes(tr->cm, COMM_GROUP_TP),
        .comm_pp = comm_group_bytes(tr->cm, COMM_GROUP_PP),
        .comm_dp = comm_group_bytes(tr->cm, COMM_GROUP_DP),
        .plan_ratio = tr->plan_step_s > 0 ? dt / tr->plan_step_s : 0,
        .pipelined = m->d.pp > 1,
        .bubble = waited / dt,
        .bubble_formula = sched_bubble_fraction(cfg->parallel.schedule, m->d.pp, m->d.chunks,
                                                tr->n_micro),
    };
    if (timing->has_straggler) {
        s.has_straggler = 1;
        s.straggler_rank = timing->straggler_rank;
        memcpy(s.straggler_host, timing->straggler_host, sizeof s.straggler_host);
        s.straggler_excess_pct = timing->straggler_excess_pct;
        s.straggler_step_ms = timing->straggler_step_ms;
        s.straggler_compute_ms = timing->straggler_compute_ms;
        s.straggler_wait_ms = timing->straggler_wait_ms;
        s.straggler_median_ms = timing->straggler_median_ms;
    }
    executor_take_pass_ms(&tr->exec, s.pass_ms);
    metrics_write_step(&tr->metrics, &s);
    tb_write_step(&tr->tb, &s);
    char bubble[64] = "", progress[96];
    if (s.pipelined)
        snprintf(bubble, sizeof bubble, " | bubble %.2f (formula %.2f)", s.bubble,
                 s.bubble_formula);
    train_progress(progress, sizeof progress, s.mfu, time_now_s() - tr->loop_start, n,
                   tr->start.step + 1, cfg->train.steps);
    char plan[32] = ""; // measured over predicted
    if (s.plan_ratio > 0) snprintf(plan, sizeof plan, " | %.2fx plan", s.plan_ratio);
    LOG_INFO("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s%s%s%s", n,
             cfg->train.steps, loss, lr, norm, s.step_ms, s.tokens_per_s, progress, bubble, plan,
             ckpt_note);
}

// "1.2345" for the single set, "web 1.2345 | code 2.3456" for named ones.
static void format_val(const trainer *tr, const double *val, char *out, size_t n) {
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < tr->n_val && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%s%s%.4f", i ? " | " : "",
                                tr->val_names ? tr->val_names[i] : "", tr->val_names ? " " : "",
                                val[i]);
}

// The evaluation of step n (val[tr->n_val]): TRI_STOPPED when a stop request cut it short (no
// line written).
static tri_status eval_step(trainer *tr, int n, double *val) {
    flight_set_activity(FLIGHT_ACT_EVAL, -1, -1);
    TRI_CHECK(evaluate(tr, val));
    metrics_write_eval(&tr->metrics, n, tr->val_names, val, tr->n_val);
    for (int i = 0; i < tr->n_val; i++)
        tb_write_eval(&tr->tb, n, tr->val_names ? tr->val_names[i] : NULL, val[i]);
    char text[2048];
    format_val(tr, val, text, sizeof text);
    LOG_INFO("step %5d/%d | val loss %s", n, tr->cfg->train.steps, text);
    return TRI_OK;
}

// Where the loop stands when it stops early.
typedef struct {
    int done_steps; // optimizer steps done, this run's and before
    int ckpt_step;  // the step of this run's latest checkpoint (maybe still being written), -1
    int in_eval;    // stopped during the evaluation of done_steps
} loop_state;

// Ends a run stopped by a signal or by lost metrics: the last completed step gets a
// checkpoint where one is possible and new (a checkpoint of it started in this run is
// committed), then the reason goes on the last line. Exit 0 for a signal (DESIGN.md "CLI"),
// 4 for metrics that could not be written. At the last step training is complete, and the
// final model is written first.
static tri_status finish_stopped(trainer *tr, const loop_state *ls) {
    const run_config *cfg = tr->cfg;
    const int n = ls->done_steps, trained = n > tr->start.step;
    const int complete = n == cfg->train.steps;
    if (tr->ckpt && ls->ckpt_step == n) {
        TRI_CHECK(ckpt_commit(tr->ckpt));
    } else if (tr->ckpt && trained) {
        char note[96];
        const int64_t samples = tr->start.samples +
                                (int64_t)(n - tr->start.step) * cfg->train.global_batch;
        TRI_CHECK(checkpoint_step(tr, n, samples, 0, note, sizeof note));
        LOG_INFO("step %5d/%d%s", n, cfg->train.steps, note);
    }
    if (complete) TRI_CHECK(save_model(tr, 0));
    // A metrics write that failed after the boundary (the stop checkpoint's line): rank 0
    // exits 4 too.
    if (tr->li->rank == 0 && metrics_stops_run(&tr->metrics)) tr->metrics_lost = 1;
    char what[160], saved[640], lost[640] = "";
    if (tr->metrics_lost) snprintf(what, sizeof what, "because metrics could not be written");
    else snprintf(what, sizeof what, "by %s", stop_signal_name(stop_signal()));
    snprintf(what + strlen(what), sizeof what - strlen(what),
             ls->in_eval ? " during the evaluation of step %d" : " after step %d", n);
    if (complete)
        snprintf(saved, sizeof saved, "training is complete and %s%s written%s%s",
                 model_arch_is_llama(&cfg->model) ? "the final checkpoint" : cfg->run.out_dir,
                 model_arch_is_llama(&cfg->model) ? "" : "/model.bin",
                 eval_due(cfg, n) ? ", but not the last evaluation" : "",
                 eval_due(cfg, n) && tr->ckpt ? "; a run with checkpoint.resume: auto does it"
                                              : "");
    else if (tr->ckpt && trained)
        snprintf(saved, sizeof saved,
                 "checkpoint written to %s; a run with checkpoint.resume: auto continues from "
                 "it%s",
                 cfg->checkpoint.dir, ls->in_eval ? " and repeats the evaluation" : "");
    else if (!trained)
        snprintf(saved, sizeof saved,
                 "no step trained in this run, nothing new to checkpoint; a rerun starts where "
                 "this one did%s",
                 ls->in_eval ? " and repeats the evaluation" : "");
    else
        snprintf(saved, sizeof saved,
                 "nothing could be saved, since checkpoint.dir is not set: the %d steps trained "
                 "are lost (no model.bin either); set checkpoint.dir to make a stop resumable",
                 n - tr->start.step);
    train_report_outputs(tr, n); // before the reason: that stays the last line
    metrics_describe_failure(&tr->metrics, lost, sizeof lost);
    if (tr->metrics_lost) {
        if (tr->li->rank == 0) {
            LOG_ERROR("stopped %s: %s; %s", what, lost, saved);
            LOG_HINT("free space for %s, or set log.metrics elsewhere or "
                     "log.metrics_required: false, then run again",
                     tr->metrics.path);
        }
        return TRI_ERR_CKPT;
    }
    if (tr->ckpt || !trained || complete) LOG_INFO("stopped %s: %s", what, saved);
    else if (tr->li->rank == 0) // every rank stops alike: the job says it once
        LOG_WARN("stopped %s without a checkpoint: %s", what, saved);
    return TRI_OK;
}

// A step should allocate nothing on the device: its buffers come from the arenas and the
// backend's workspaces were sized at start-up (backend.reserve). An allocation there can
// synchronise the device while collectives are in flight, so a device backend says so once.
static void note_step_allocs(trainer *tr, uint64_t allocs) {
    if (allocs && tr->be->device_memory && !tr->step_allocs)
        LOG_WARN("step %d made %llu device allocations (cudaMalloc in the middle of a step can "
                 "stall collectives); please report this as a bug",
                 tr->step + 1, (unsigned long long)allocs);
    tr->step_allocs += allocs;
}

static tri_status train_loop(trainer *tr) {
    run_config *cfg = tr->cfg;
    model *m = &tr->model;
    const int64_t tokens_per_step = (int64_t)cfg->train.global_batch * cfg->model.seq_len;
    double first_loss = NAN, last_loss = NAN, total_s = 0.0;
    double *last_val = tr->last_val; // NaN until an evaluation
    int stop = 0;
    loop_state ls = {tr->start.step, -1, 0};
    tri_status final_ckpt = TRI_OK; // of the last step's checkpoint
    // Start-up is over: from here the step boundaries and evaluation batches poll for a
    // stop, and the comm timeout bounds every wait.
    stop_startup_end();
    tr->loop_start = time_now_s();
    LOG_INFO("training %s: %lld parameters, %d steps of %d sequences x %d tokens "
             "(%d micro-batches of %d), backend %s with %d threads",
             cfg->run.name, (long long)m->table.global_numel, cfg->train.steps,
             cfg->train.global_batch, cfg->model.seq_len, tr->n_micro, cfg->train.micro_batch,
             tr->be->name, tr->be->threads);
    if (tr->be->threads > 0) { // the CPU backend
        char wait[128];
        backend_cpu_wait_describe(wait, sizeof wait);
        LOG_INFO("threads: %d per rank (%s); idle waiting: %s", tr->be->threads, tr->threads_why,
                 wait);
    }
    if (tr->eval_first && eval_due(cfg, tr->start.step)) {
        LOG_INFO("step %5d/%d | evaluating again: %s has no val loss of this step", tr->start.step,
                 cfg->train.steps, tr->li->rank == 0 ? tr->metrics.path : "metrics.jsonl");
        tri_status rc = eval_step(tr, tr->start.step, last_val);
        if (rc == TRI_STOPPED) ls.in_eval = stop = 1;
        else TRI_CHECK(rc);
    }
    for (tr->step = tr->start.step; tr->step < cfg->train.steps && !stop; tr->step++) {
        double t0 = time_now_s();
        tr->cm->step = tr->step + 1;
        flight_set_step(tr->step + 1);
        double loss = 0.0, norm = 0.0, lr = 0.0, waited = 0.0;
        const uint64_t allocs = tr->be->alloc_count(tr->be);
        TRI_CHECK(train_step(tr, &loss, &norm, &lr, &waited));
        double dt = time_now_s() - t0;
        const double wait_s = tr->cm->wait_s; // this step's time in comm waits
        note_step_allocs(tr, tr->be->alloc_count(tr->be) - allocs);
        total_s += dt;
        if (isnan(first_loss)) first_loss = loss;
        last_loss = loss;

        const int n = tr->step + 1;
        ls.done_steps = n;
        const int64_t samples = tr->start.samples +
                                (int64_t)(n - tr->start.step) * cfg->train.global_batch;
        char ckpt_note[96] = "";
        // A step logged by schedule gathers the per-rank times (one logged for a stop only
        // does not: the stop is known after the boundary).
        const int log_due = n == 1 || n % cfg->log.every == 0 || n == cfg->train.steps;
        metrics_step timing = {0};
        tri_status ck = step_boundary(tr, &stop, dt, wait_s, waited,
                                      log_due && straggler_wanted(&tr->straggler) ? &timing : NULL);
        if (log_due && ck == TRI_OK) log_stage_times(tr, n, dt, wait_s, waited, &timing);
        if (ck == TRI_OK && tr->ckpt &&
            (stop || n == cfg->train.steps ||
             (cfg->checkpoint.every > 0 && n % cfg->checkpoint.every == 0))) {
            ck = checkpoint_step(tr, n, samples,
                                 cfg->checkpoint.async && !stop && n < cfg->train.steps, ckpt_note,
                                 sizeof ckpt_note);
            if (ck == TRI_OK) ls.ckpt_step = n;
        }
        // A checkpoint failing at the last step must not cost the final model: it is
        // written below, and the run then ends with the checkpoint's error.
        if (ck == TRI_ERR_CKPT && n == cfg->train.steps && !stop) final_ckpt = ck;
        else TRI_CHECK(ck);
        int logged = log_due || stop;
        if (!logged && ckpt_note[0]) LOG_INFO("step %5d/%d%s", n, cfg->train.steps, ckpt_note);
        if (logged) log_step(tr, n, samples, loss, lr, norm, dt, waited, &timing, ckpt_note);
        // A stopped run skips the evaluation; a resumed run does it (tr->eval_first).
        if (!stop && eval_due(cfg, n)) {
            tri_status rc = eval_step(tr, n, last_val);
            if (rc == TRI_STOPPED) ls.in_eval = stop = 1;
            else TRI_CHECK(rc);
        }
    }
    if (stop) return finish_stopped(tr, &ls);
    // The final model even when metrics were lost at the last step: training is complete.
    TRI_CHECK(save_model(tr, final_ckpt != TRI_OK));
    tri_status metrics_rc = tr->li->rank == 0 ? metrics_close(&tr->metrics) : TRI_OK;
    if (tr->metrics_lost) metrics_rc = TRI_ERR_CKPT;
    char val[2048] = "", lost[640] = "";
    if (tr->n_val > 0 && !isnan(last_val[0])) {
        snprintf(val, sizeof val, ", val loss ");
        format_val(tr, last_val, val + strlen(val), sizeof val - strlen(val));
    }
    const int trained = cfg->train.steps - tr->start.step;
    if (trained <= 0) // a resume at or past train.steps (resume_diff.h says so at start)
        LOG_INFO("done: nothing to train (the checkpoint is at step %d, train.steps is %d)",
                 tr->start.step, cfg->train.steps);
    else
        LOG_INFO("done: %d steps in %.1f s, loss %.4f -> %.4f%s, %.0f tok/s, peak memory %.1f "
                 "MiB",
                 trained, total_s, first_loss, last_loss, val,
                 trained * (double)tokens_per_step / total_s,
                 tr->be->mem_peak_bytes(tr->be) / 1048576.0);
    LOG_DEBUG("%s backend: %llu device allocations inside the %d training steps", tr->be->name,
              (unsigned long long)tr->step_allocs, trained);
    train_report_outputs(tr, -1); // before any warning about metrics: that stays the last line
    metrics_describe_failure(&tr->metrics, lost, sizeof lost);
    if (metrics_rc != TRI_OK && tr->li->rank == 0) {
        LOG_ERROR("training finished and %s/model.bin was written, but %s", cfg->run.out_dir, lost);
        LOG_HINT("free space for %s (or set log.metrics_required: false to accept a run "
                 "without complete metrics)",
                 tr->metrics.path);
    } else if (lost[0]) {
        LOG_WARN("%s (log.metrics_required is false: the run is otherwise complete)", lost);
    }
    if (final_ckpt != TRI_OK) {
        if (tr->li->rank == 0) {
            LOG_ERROR("the checkpoint of the last step (%d) was not written (see above); the "
                      "final model was written to %s/model.bin",
                      cfg->train.steps, cfg->run.out_dir);
            LOG_HINT("the newest complete checkpoint in %s is kept; free space in "
                     "checkpoint.dir before resuming from it",
                     cfg->checkpoint.dir);
        }
        return final_ckpt;
    }
    // Metrics lost after the last step boundary: rank 0 alone knows, and exits 4 (the
    // launcher reports the job's worst exit code).
    return metrics_rc;
}

tri_status train_run(run_config *cfg, launch_info *li) {
    trainer tr;
    memset(&tr, 0, sizeof tr);
    tri_status rc;
    TRI_CHECK_GOTO(trainer_init(&tr, cfg, li), rc, done);
    TRI_CHECK_GOTO(train_loop(&tr), rc, done);
done:
    flight_close(rc == TRI_STOPPED ? 0 : (int)rc); // the ring says how this rank ended
    trainer_free(&tr);
    // A stop during start-up (trainer_init: every rank agreed on it): nothing was trained.
    if (rc == TRI_STOPPED) {
        LOG_INFO("stopped by %s during start-up (phase '%s'), before the first step: nothing to "
                 "checkpoint; a rerun starts where this one did",
                 stop_signal_name(stop_signal()), stop_phase_name());
        rc = TRI_OK;
    }
    return rc;
}
