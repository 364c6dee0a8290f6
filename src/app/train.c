// train.c: one process's training loop (DESIGN.md "How one step flows"). Each step: the
// executor runs this rank's schedule table (forward and backward of every micro-batch, the
// pipeline transfers between them); the ZeRO layer finishes the gradients; the optimizer
// takes the global norm, clips and applies AdamW; then metrics, checkpoints and evaluation.
// trainer.c sets the state up.
#include "app/train.h"

#include "app/trainer_internal.h"

#include <math.h>
#include <signal.h>
#include <string.h>

#include "io/llmc.h"
#include "plan/plan.h"

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

// Micro-batch `micro` of the training step tr->step: the stream continues where the
// checkpoint left it, also with another global batch (samples start.samples on are taken in
// order).
static void load_train_batch(void *ctx, int micro, int *inputs, int *targets) {
    trainer *tr = ctx;
    const run_config *cfg = tr->cfg;
    const int GB = cfg->train.global_batch, B = cfg->train.micro_batch;
    int64_t first = tr->start.samples - (int64_t)tr->start.step * GB +
                    data_micro_batch_start(tr->step, GB, tr->dp, tr->dp_rank, micro, B);
    data_batch(&tr->train, first, B, inputs, targets);
}

// Micro-batch `micro` of evaluation batch tr->eval_batch.
static void load_eval_batch(void *ctx, int micro, int *inputs, int *targets) {
    trainer *tr = ctx;
    const run_config *cfg = tr->cfg;
    const int GB = cfg->train.global_batch, B = cfg->train.micro_batch;
    int64_t first = data_micro_batch_start(tr->eval_batch, GB, tr->dp, tr->dp_rank, micro, B);
    data_batch(&tr->val, first, B, inputs, targets);
}

// Mean validation loss over eval_batches batches of global_batch sequences, split over the
// dp replicas as a training step is: always the same leading part of the validation
// stream, whatever the layout, so evaluations compare across steps and layouts. Each batch
// runs the forward-only table.
static tri_status evaluate(trainer *tr, double *val_loss) {
    const run_config *cfg = tr->cfg;
    const int T = cfg->model.seq_len, GB = cfg->train.global_batch;
    double waited = 0.0, sum = 0.0;
    const exec_batches batches = {load_eval_batch, tr};
    for (tr->eval_batch = 0; tr->eval_batch < cfg->data.eval_batches; tr->eval_batch++)
        TRI_CHECK(executor_run(&tr->exec, &tr->eval_sched, batches, 0.0f, 0, &waited));
    TRI_CHECK(executor_take_loss(&tr->exec, &sum));
    if (tr->dp > 1)
        TRI_CHECK(comm_all_reduce(tr->cm, COMM_GROUP_DP, &sum, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    *val_loss = sum / ((double)cfg->data.eval_batches * GB * T);
    return TRI_OK;
}

// Rank 0 writes the whole model; the tp x pp ranks of dp replica 0 gather it first (dp
// replicas hold identical parameters).
static tri_status save_model(trainer *tr) {
    model *m = &tr->model;
    // Every dp rank takes part when the parameters are sharded over dp (ZeRO-3).
    float *local = xmalloc(m->table.local_numel * sizeof(float));
    tri_status rc = zero_local_params(tr->zero, local);
    if (rc != TRI_OK || tr->coord.dp != 0) {
        free(local);
        return rc;
    }
    param_table full_table;
    params_build_full(&full_table, &tr->cfg->model, tr->cfg->parallel.tp);
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
        TRI_CHECK(comm_all_reduce(tr->cm, COMM_GROUP_WORLD, flags, 2, DTYPE_FP64, COMM_REDUCE_MAX));
    *stop = flags[0] > 0;
    if (ckpt_pending(tr->ckpt) && flags[1] == 0) TRI_CHECK(ckpt_commit(tr->ckpt));
    return TRI_OK;
}

// Writes the checkpoint of the step just done (n steps, `samples` consumed); appends the
// time the loop was blocked to `note` for the step line.
static tri_status checkpoint_step(trainer *tr, int n, int64_t samples, int async, char *note,
                                  size_t note_len) {
    const run_config *cfg = tr->cfg;
    ckpt_progress p = {n, samples, samples * cfg->model.seq_len, optim_steps_taken(tr->optim)};
    double blocked = 0.0;
    TRI_CHECK(ckpt_save(tr->ckpt, &p, async, &blocked));
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
    zero_step_begin(tr->zero);
    double loss_sum = 0.0;
    const exec_batches batches = {load_train_batch, tr};
    TRI_CHECK(executor_run(&tr->exec, &tr->sched, batches, (float)(1.0 / (double)tokens_per_step),
                           1, waited));
    TRI_CHECK(executor_take_loss(&tr->exec, &loss_sum));
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

static tri_status train_loop(trainer *tr) {
    run_config *cfg = tr->cfg;
    model *m = &tr->model;
    const int64_t tokens_per_step = (int64_t)cfg->train.global_batch * cfg->model.seq_len;
    double first_loss = NAN, last_loss = NAN, last_val = NAN, total_s = 0.0;
    int stop = 0, done_steps = tr->start.step;
    tri_status final_ckpt = TRI_OK; // of the last step's checkpoint
    LOG_INFO("training %s: %lld parameters, %d steps of %d sequences x %d tokens "
             "(%d micro-batches of %d), backend %s with %d threads",
             cfg->run.name, (long long)m->table.global_numel, cfg->train.steps,
             cfg->train.global_batch, cfg->model.seq_len, tr->n_micro, cfg->train.micro_batch,
             tr->be->name, tr->be->threads);
    for (tr->step = tr->start.step; tr->step < cfg->train.steps && !stop; tr->step++) {
        double t0 = time_now_s();
        tr->cm->step = tr->step + 1;
        double loss = 0.0, norm = 0.0, lr = 0.0, waited = 0.0;
        TRI_CHECK(train_step(tr, &loss, &norm, &lr, &waited));
        double dt = time_now_s() - t0;
        total_s += dt;
        if (isnan(first_loss)) first_loss = loss;
        last_loss = loss;

        const int n = tr->step + 1;
        done_steps = n;
        const int64_t samples = tr->start.samples +
                                (int64_t)(n - tr->start.step) * cfg->train.global_batch;
        char ckpt_note[96] = "";
        tri_status ck = step_boundary(tr, &stop);
        if (ck == TRI_OK && tr->ckpt &&
            (stop || n == cfg->train.steps ||
             (cfg->checkpoint.every > 0 && n % cfg->checkpoint.every == 0)))
            ck = checkpoint_step(tr, n, samples,
                                 cfg->checkpoint.async && !stop && n < cfg->train.steps, ckpt_note,
                                 sizeof ckpt_note);
        // A checkpoint failing at the last step must not cost the final model: it is
        // written below, and the run then ends with the checkpoint's error.
        if (ck == TRI_ERR_CKPT && n == cfg->train.steps && !stop) final_ckpt = ck;
        else TRI_CHECK(ck);
        int logged = n == 1 || n % cfg->log.every == 0 || n == cfg->train.steps || stop;
        if (!logged && ckpt_note[0]) LOG_INFO("step %5d/%d%s", n, cfg->train.steps, ckpt_note);
        if (logged) {
            metrics_step s = {
                .step = n,
                .loss = loss,
                .lr = lr,
                .grad_norm = norm,
                .tokens = samples * cfg->model.seq_len,
                .step_ms = 1e3 * dt,
                .tokens_per_s = tokens_per_step / dt,
                .mfu = tr->peak_flops > 0
                           ? tr->flops_per_token * tokens_per_step / dt / tr->peak_flops
                           : NAN,
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
                snprintf(bubble, sizeof bubble, " | bubble %.2f (formula %.2f)", s.bubble,
                         s.bubble_formula);
            LOG_INFO("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s%s", n,
                     cfg->train.steps, loss, lr, norm, s.step_ms, s.tokens_per_s, bubble,
                     ckpt_note);
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
                     "checkpoint.resume: auto continues from it",
                     sig, done_steps, cfg->checkpoint.dir);
        else
            LOG_WARN("stopped by %s after step %d without a checkpoint (no checkpoint.dir set)",
                     sig, done_steps);
        return TRI_OK;
    }
    TRI_CHECK(save_model(tr));
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
