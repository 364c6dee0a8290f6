// plan_print.c: `trident plan`: options, the text report and the JSON object.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/hf_config.h"
#include "io/metrics.h"
#include "plan/plan.h"
#include "plan/plan_profile.h"

#include "compute/cuda_workspace.h"

#define N_ASSUMPTIONS 12

// Decimal units (GB = 1e9 bytes), as datasheets and the ZeRO paper count.
static const char *fmt_bytes(char *buf, size_t n, double b) {
    if (b >= 1e12) snprintf(buf, n, "%.2f TB", b / 1e12);
    else if (b >= 1e9) snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, n, "%.2f MB", b / 1e6);
    else if (b >= 1e3) snprintf(buf, n, "%.2f kB", b / 1e3);
    else snprintf(buf, n, "%.0f B", b);
    return buf;
}

static const char *fmt_count(char *buf, size_t n, double x) {
    if (x >= 1e9) snprintf(buf, n, "%.2f B", x / 1e9);
    else if (x >= 1e6) snprintf(buf, n, "%.2f M", x / 1e6);
    else snprintf(buf, n, "%.0f", x);
    return buf;
}

static const char *fmt_seconds(char *buf, size_t n, double s) {
    if (s >= 1.0) snprintf(buf, n, "%.2f s", s);
    else if (s >= 1e-3) snprintf(buf, n, "%.2f ms", s * 1e3);
    else snprintf(buf, n, "%.1f us", s * 1e6);
    return buf;
}

static const char *op_name(comm_op_id op) {
    static const char *names[COMM_OP_COUNT] = {"all_reduce", "reduce_scatter", "all_gather",
                                               "broadcast",  "send",           "recv"};
    return names[op];
}

// Every assumption the prediction rests on, one sentence each.
static int assumptions(const plan_result *p, const run_config *cfg, char out[][320]) {
    const plan_device *d = &p->dev;
    char a[32], b[32], c[32], e[32];
    const char *peak_name;
    plan_device_peak(d, cfg->train.precision_mode, &peak_name);
    int n = 0;
    snprintf(out[n++], 320,
             "a matmul runs at %.0f%% of the device's dense %s peak (%.4g TFLOP/s) "
             "times s / (s + %.0f), s its smallest dimension (micro_batch x seq_len, d_model "
             "or its tp share); attention at %.4g TFLOP/s; elementwise passes %s; recompute "
             "runs each layer's forward again",
             100 * d->efficiency, peak_name, p->peak_flops / 1e12, d->gemm_half,
             (d->attn_rate > 0 ? d->attn_rate : p->peak_flops * d->efficiency) / 1e12,
             d->elem_bw > 0 ? "at the profile's elem_bw" : "not counted");
    snprintf(out[n++], 320,
             "collectives are rings: an all-reduce moves 2(n-1)/n of its buffer over "
             "each rank's link, a reduce-scatter or all-gather (n-1)/n, a send its message");
    snprintf(out[n++], 320,
             "a group whose ranks lie within one node (%d per node) gets %s/s per "
             "device, otherwise %s/s; each call adds %s (within a node) or %s",
             d->per_node, fmt_bytes(a, sizeof a, d->intra_bw), fmt_bytes(b, sizeof b, d->inter_bw),
             fmt_seconds(c, sizeof c, d->latency_intra),
             fmt_seconds(e, sizeof e, d->latency_inter));
    snprintf(out[n++], 320, "%s",
             cfg->parallel.overlap
                 ? "parallel.overlap: pipeline messages cost their transfer between stages, dp "
                   "bucket reductions and ZeRO-3 gathers hide under their compute (at least one "
                   "call stays exposed); tp collectives and the step end add to compute"
                 : "parallel.overlap off: communication time adds to compute time");
    snprintf(out[n++], 320,
             "the schedule's time is its tables simulated (sched_sim.h): each stage's time per "
             "micro-batch and chunk split into forward, input gradient and weight gradient "
             "%.3g:%.3g:%.3g (%s; recompute adds a forward to B)",
             d->fbw[0], d->fbw[1], d->fbw[2],
             d->fbw_measured ? "measured on this device" : "an estimate from FLOP counts");
    snprintf(out[n++], 320, "AdamW streams its state, gradients and weights at %s/s",
             fmt_bytes(a, sizeof a, d->mem_bw));
    snprintf(out[n++], 320, "attention keeps %s per layer for the backward",
             d->attn == ATTN_STATE_PROBS ? "the softmax probabilities, B x NH/tp x T x T floats "
                                           "(the CPU backend)"
                                         : "the softmax row statistics, B x NH/tp x T floats "
                                           "(the CUDA backend's flash-style kernel)");
    snprintf(out[n++], 320,
             "%s of each device's %s is left to the runtime, not to trident's "
             "buffers",
             fmt_bytes(a, sizeof a, d->reserve_bytes), fmt_bytes(b, sizeof b, d->mem_bytes));
    if (!strcmp(d->name, "cpu"))
        snprintf(out[n++], 320,
                 "cpu: one rank per core; memory per rank is this machine's RAM "
                 "divided by min(world, cores)");
    if (cfg->train.precision == DTYPE_BF16)
        snprintf(out[n++], 320,
                 "bf16 as this build trains it: parameters, their all-gathers and "
                 "the activations kept for the backward 2 bytes; master weights 4, Adam m + v 8; "
                 "fp32 staging of one layer's parameters and activations%s; the residual stream "
                 "and messages 4 bytes; gradients per train.grad_dtype",
                 model_bf16_direct(cfg->train.precision, cfg->parallel.recompute, d->bf16_out)
                     ? " (not qkv's and the MLP's: bf16 matmul outputs)"
                     : "");
    snprintf(out[n++], 320,
             "steady-state steps: no evaluation, no checkpoint (under zero3_gather "
             "step, a step after an evaluation gathers nothing before its first pass)");
    return n;
}

static void print_memory_kinds(const plan_stage *s, FILE *f) {
    static const char *what[MEM_KIND_COUNT] = {"parameters",
                                               "gradients",
                                               "fp32 master weights",
                                               "Adam m and v",
                                               "activation slots",
                                               "ZeRO-2/3 gradient buckets",
                                               "ZeRO-3 gathered parameters",
                                               "backward scratch (not in the run record)"};
    char b[32];
    for (int k = 0; k < MEM_KIND_COUNT; k++)
        fprintf(f, "  %-20s %10s %16llu  %s\n", mem_kind_name((mem_kind)k),
                fmt_bytes(b, sizeof b, (double)s->mem[k]), (unsigned long long)s->mem[k], what[k]);
    fprintf(f, "  %-20s %10s %16llu\n", "total", fmt_bytes(b, sizeof b, (double)s->mem_total),
            (unsigned long long)s->mem_total);
}

static int same_memory(const plan_stage *a, const plan_stage *b) {
    return !memcmp(a->mem, b->mem, sizeof a->mem);
}

static void print_stages(const plan_result *p, FILE *f) {
    char a[32], b[32], c[32], d[32], e[32];
    fprintf(f, "\nmemory per stage:\n  %-9s %10s %11s %21s %12s %11s %10s\n", "stage", "params",
            "model state", "activations (slots)", "ZeRO buffers", "scratch", "total");
    for (int r = 0; r < p->pp;) {
        int end = r + 1;
        while (end < p->pp && same_memory(&p->stages[r], &p->stages[end])) end++;
        const plan_stage *s = &p->stages[r];
        char name[24], act[40];
        if (end - r > 1) snprintf(name, sizeof name, "%d-%d", r, end - 1);
        else snprintf(name, sizeof name, "%d", r);
        snprintf(act, sizeof act, "%s (%d)", fmt_bytes(c, sizeof c, (double)s->mem[MEM_ACTIVATION]),
                 s->n_slots);
        fprintf(
            f, "  %-9s %10s %11s %21s %12s %11s %10s\n", name,
            fmt_count(a, sizeof a, (double)s->rank_params),
            fmt_bytes(b, sizeof b, (double)plan_model_state_bytes(s)), act,
            fmt_bytes(d, sizeof d, (double)(s->mem[MEM_GRAD_BUCKET] + s->mem[MEM_PARAM_GATHER])),
            fmt_bytes(e, sizeof e, (double)s->mem[MEM_SCRATCH]),
            fmt_bytes(c, sizeof c, (double)s->mem_total));
        r = end;
    }
}

// Host memory outside the arenas, of the stage with the most (plan_host.c).
static void print_host(const plan_result *p, const run_config *cfg, FILE *f) {
    int worst = 0;
    for (int r = 1; r < p->pp; r++) {
        const plan_stage *s = &p->stages[r], *w = &p->stages[worst];
        const uint64_t a = s->host_startup > s->host_save ? s->host_startup : s->host_save;
        const uint64_t b = w->host_startup > w->host_save ? w->host_startup : w->host_save;
        if (a > b) worst = r;
    }
    const plan_stage *s = &p->stages[worst];
    char a[32], b[32];
    fprintf(f,
            "host memory outside the arenas (stage %d): start-up %s (the initial parameters "
            "go in tensor by tensor: the largest tensor's host copy%s), final save %s (%s)\n",
            worst, fmt_bytes(a, sizeof a, (double)s->host_startup),
            cfg->model.init_from && hf_is_model_dir(cfg->model.init_from)
                ? " and the Hugging Face reader's staging"
            : cfg->model.init_from               ? " and the llm.c reader's staging"
            : cfg->train.precision == DTYPE_BF16 ? " and its bf16 rounding"
                                                 : "",
            fmt_bytes(b, sizeof b, (double)s->host_save),
            s->host_save ? "two pieces of the model gathered for model.bin"
                         : "model.bin not written: the final checkpoint is the model");
}

static void print_comm(const plan_result *p, FILE *f) {
    const plan_stage *s = &p->stages[0];
    char a[32], b[32];
    fprintf(f, "\ncommunication per step of rank 0 (bytes as the comm layer counts them):\n");
    fprintf(f, "  %-6s %-15s %8s %16s %12s %12s\n", "group", "collective", "calls", "bytes",
            "in schedule", "at step end");
    int any = 0;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        for (int op = 0; op < COMM_OP_COUNT; op++) {
            uint64_t calls = 0, bytes[PLAN_PHASE_COUNT];
            for (int ph = 0; ph < PLAN_PHASE_COUNT; ph++) {
                calls += s->comm.calls[ph][g][op];
                bytes[ph] = s->comm.bytes[ph][g][op];
            }
            if (!calls) continue;
            any = 1;
            fprintf(f, "  %-6s %-15s %8llu %16llu %12s %12s\n", comm_group_name((comm_group_id)g),
                    op_name((comm_op_id)op), (unsigned long long)calls,
                    (unsigned long long)(bytes[0] + bytes[1]),
                    fmt_bytes(a, sizeof a, (double)bytes[PLAN_PHASE_SCHEDULE]),
                    fmt_bytes(b, sizeof b, (double)bytes[PLAN_PHASE_STEP_END]));
        }
    }
    if (!any) fprintf(f, "  none (a world of one)\n");
    fprintf(f, "  step line comm_bytes: tp %llu, pp %llu, dp %llu\n",
            (unsigned long long)plan_group_bytes(s, COMM_GROUP_TP),
            (unsigned long long)plan_group_bytes(s, COMM_GROUP_PP),
            (unsigned long long)plan_group_bytes(s, COMM_GROUP_DP));
}

// Where the device's numbers come from: a measured profile, or the built-in table.
void plan_print_calibration(const plan_device *d, FILE *f) {
    const plan_calib *c = &d->calib;
    if (!c->calibrated) {
        fprintf(f, "device numbers: uncalibrated estimate (the built-in table; `trident plan "
                   "CONFIG --calibrate` measures this machine)\n");
        return;
    }
    char scaling[96] = "linear in the threads";
    for (int i = 0, n = 0; i < c->n_scale && n < (int)sizeof scaling - 16; i++)
        n += snprintf(scaling + n, sizeof scaling - (size_t)n, "%s%d", i ? ", " : "measured at ",
                      (int)c->scale_threads[i]);
    fprintf(f,
            "device numbers: calibrated on %s at %s with %d threads (%s, %d rank%s; thread "
            "scaling %s); between nodes%s: uncalibrated estimates\n",
            c->host, c->date, c->threads, c->path, c->ranks, c->ranks == 1 ? "" : "s", scaling,
            c->intra_measured ? "" : " and within a node");
}

void plan_print_text(const plan_result *p, const run_config *cfg, FILE *f) {
    char a[32], b[32], c[32], d[32], e[32];
    const plan_stage *w = &p->stages[p->worst_stage], *s0 = &p->stages[0];
    fprintf(f, "plan: %s on %d x %s (%s)\n", cfg->source_path ? cfg->source_path : "config",
            p->world, p->dev.name, p->dev.description);
    plan_print_calibration(&p->dev, f);
    char llama[96] = ""; // its own shape keys, when it is a llama
    if (model_arch_is_llama(&cfg->model))
        snprintf(llama, sizeof llama, " (llama: %d kv heads, ffn %d, %s head)",
                 cfg->model.n_kv_head, cfg->model.ffn_hidden,
                 cfg->model.tie_embeddings ? "tied" : "untied");
    fprintf(f,
            "model: %d layers, d_model %d, %d heads%s, seq_len %d, vocab %d (padded %d): %s "
            "parameters\n",
            cfg->model.n_layer, cfg->model.d_model, cfg->model.n_head, llama, cfg->model.seq_len,
            cfg->model.vocab_size, config_padded_vocab(cfg),
            fmt_count(a, sizeof a, (double)p->n_params));
    fprintf(f,
            "layout: tp %d x pp %d x dp %d, virtual_stages %d, schedule %s, zero %d%s, "
            "sequence_parallel %s, recompute %s, precision %s (grads %s, reduce %s)\n",
            p->tp, p->pp, p->dp, p->virtual_stages, config_schedule_name(cfg->parallel.schedule),
            cfg->parallel.zero, p->zero != cfg->parallel.zero ? " (0 in effect: dp 1)" : "",
            cfg->parallel.sequence_parallel ? "true" : "false",
            config_recompute_name(cfg->parallel.recompute),
            config_precision_name(cfg->train.precision_mode), dtype_name(cfg->train.grad_dtype),
            dtype_name(cfg->train.reduce_dtype));
    fprintf(f,
            "batch: %d sequences x %d tokens = %s tokens per step; micro_batch %d, %d "
            "micro-batches per replica\n",
            cfg->train.global_batch, cfg->model.seq_len, fmt_count(a, sizeof a, p->tokens_per_step),
            cfg->train.micro_batch, p->micro_batches);

    fprintf(f,
            "\nmemory of rank 0 (stage 0, tp rank 0, dp rank 0: the run record's \"memory\"), "
            "%s parameters held:\n",
            fmt_count(a, sizeof a, (double)s0->rank_params));
    print_memory_kinds(s0, f);
    fprintf(f, "  model state: %s = %.2f bytes per parameter held\n",
            fmt_bytes(a, sizeof a, (double)plan_model_state_bytes(s0)),
            (double)plan_model_state_bytes(s0) / (double)s0->rank_params);
    if (p->pp > 1) print_stages(p, f);
    if (p->dev.cuda)
        fprintf(f,
                "  CUDA backend workspaces outside the arenas: %s on the device (op workspace, "
                "cuBLASLt's %s%s%s), %s pinned host (token uploads); reserved at start-up\n",
                fmt_bytes(a, sizeof a, (double)s0->backend_device),
                fmt_bytes(b, sizeof b, (double)CUDA_LT_WORKSPACE_BYTES),
                cuda_attention_bf16_native(cfg->model.d_model / cfg->model.n_head) ||
                        cfg->train.precision != DTYPE_BF16
                    ? ""
                    : ", the bf16 attention's widened qkv",
                model_arch_is_llama(&cfg->model) ? ", RoPE's cos/sin table" : "",
                fmt_bytes(c, sizeof c, (double)s0->backend_pinned));
    if (p->dev.cuda)
        fprintf(f,
                "\nfits: %s: stage %d needs %s + %s workspaces of %s usable (%s - %s reserved)\n",
                p->fits ? "yes" : "NO", w->pp_rank, fmt_bytes(a, sizeof a, (double)w->mem_total),
                fmt_bytes(e, sizeof e, (double)w->backend_device),
                fmt_bytes(b, sizeof b, p->usable_bytes), fmt_bytes(c, sizeof c, p->dev.mem_bytes),
                fmt_bytes(d, sizeof d, p->dev.reserve_bytes));
    else
        fprintf(f, "\nfits: %s: stage %d needs %s of %s usable (%s - %s reserved)\n",
                p->fits ? "yes" : "NO", w->pp_rank, fmt_bytes(a, sizeof a, (double)w->mem_total),
                fmt_bytes(b, sizeof b, p->usable_bytes), fmt_bytes(c, sizeof c, p->dev.mem_bytes),
                fmt_bytes(d, sizeof d, p->dev.reserve_bytes));
    print_host(p, cfg, f);
    print_comm(p, f);

    fprintf(f,
            "\npipeline bubble: %.1f%% at unit times (F = B = W) for %s with pp %d, v %d, m %d; "
            "%.1f%% with this device's stage times\n",
            100 * p->bubble, config_schedule_name(cfg->parallel.schedule), p->pp, p->virtual_stages,
            p->micro_batches, 100 * p->bubble_sim);
    fprintf(f,
            "FLOPs per token: %.4g = 6 x (%s + Vp C) + 12 L T C (matmuls fwd + bwd, attention)\n",
            p->flops_per_token,
            model_arch_is_llama(&cfg->model) ? "L ((NH + 2 NKV) HS C + C^2 + 3 F C)" : "12 L C^2");
    fprintf(f,
            "predicted step: %s = schedule %s (%d micro-batches, the tables simulated) + "
            "step-end communication %s + optimizer %s\n",
            fmt_seconds(a, sizeof a, p->step_s), fmt_seconds(b, sizeof b, p->t_schedule),
            p->micro_batches, fmt_seconds(d, sizeof d, p->t_step_end),
            fmt_seconds(e, sizeof e, p->t_optimizer));
    for (int r = 0; r < p->pp; r++) {
        const plan_stage *s = &p->stages[r];
        if (p->pp > 4 && r != 0 && r != p->pp - 1 && r != 1) continue; // first, one middle, last
        fprintf(f, "  stage %d per micro-batch: compute %s, communication %s\n", r,
                fmt_seconds(a, sizeof a, s->t_compute / p->micro_batches),
                fmt_seconds(b, sizeof b, s->t_comm[PLAN_PHASE_SCHEDULE] / p->micro_batches));
    }
    fprintf(f, "  %s tokens/s, MFU %.1f%% of %.4g TFLOP/s per device\n",
            fmt_count(a, sizeof a, p->tokens_per_s), 100 * p->mfu, p->peak_flops / 1e12);
    char lines[N_ASSUMPTIONS][320];
    int n = assumptions(p, cfg, lines);
    fprintf(f, "\nassumptions:\n");
    for (int i = 0; i < n; i++) fprintf(f, "  - %s\n", lines[i]);
}

// ---------------------------------------------------------------------------------------
// JSON

static void json_double(FILE *f, const char *key, double x) {
    char buf[32];
    metrics_format_double(buf, sizeof buf, x);
    fprintf(f, "\"%s\":%s", key, buf);
}

static void json_memory(FILE *f, const plan_stage *s, int kinds) {
    fputc('{', f);
    for (int k = 0; k < kinds; k++)
        fprintf(f, "%s\"%s\":%llu", k ? "," : "", mem_kind_name((mem_kind)k),
                (unsigned long long)s->mem[k]);
    fputc('}', f);
}

static void json_comm_bytes(FILE *f, const plan_stage *s) {
    fputc('{', f);
    for (int g = 0; g < COMM_GROUP_WORLD; g++)
        fprintf(f, "%s\"%s\":%llu", g ? "," : "", comm_group_name((comm_group_id)g),
                (unsigned long long)plan_group_bytes(s, (comm_group_id)g));
    fputc('}', f);
}

// {"tp":{"all_reduce":{"calls":..,"bytes":..},..},..}: the collectives a stage calls.
static void json_comm(FILE *f, const plan_stage *s) {
    fputc('{', f);
    int first_group = 1;
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        int first_op = 1;
        for (int op = 0; op < COMM_OP_COUNT; op++) {
            uint64_t calls = s->comm.calls[0][g][op] + s->comm.calls[1][g][op];
            uint64_t bytes = s->comm.bytes[0][g][op] + s->comm.bytes[1][g][op];
            if (!calls) continue;
            if (first_op)
                fprintf(f, "%s\"%s\":{", first_group ? "" : ",", comm_group_name((comm_group_id)g));
            fprintf(f, "%s\"%s\":{\"calls\":%llu,\"bytes\":%llu}", first_op ? "" : ",",
                    op_name((comm_op_id)op), (unsigned long long)calls, (unsigned long long)bytes);
            first_op = 0, first_group = 0;
        }
        if (!first_op) fputc('}', f);
    }
    fputc('}', f);
}

// ,"calibrated":false, or the profile's host, date, threads and the numbers the time model
// read from it.
static void json_calibration(FILE *f, const plan_device *d) {
    const plan_calib *c = &d->calib;
    fprintf(f, ",\"calibrated\":%s", c->calibrated ? "true" : "false");
    if (!c->calibrated) return;
    fprintf(f, ",\"profile\":{\"host\":\"%s\",\"date\":\"%s\",\"threads\":%d,\"ranks\":%d,",
            c->host, c->date, c->threads, c->ranks);
    const char *keys[] = {"matmul_rate",   "matmul_rate_bf16", "gemm_half", "attn_rate",
                          "elem_bw",       "mem_bw",           "intra_bw",  "inter_bw",
                          "latency_intra", "latency_inter"};
    const double vals[] = {d->peak_fp32 * d->efficiency,
                           d->matmul_rate_bf16,
                           d->gemm_half,
                           d->attn_rate,
                           d->elem_bw,
                           d->mem_bw,
                           d->intra_bw,
                           d->inter_bw,
                           d->latency_intra,
                           d->latency_inter};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        json_double(f, keys[i], vals[i]);
        fputc(',', f);
    }
    fprintf(f, "\"fbw\":[");
    for (int i = 0; i < 3; i++) {
        char buf[32];
        metrics_format_double(buf, sizeof buf, d->fbw[i]);
        fprintf(f, "%s%s", i ? "," : "", buf);
    }
    fprintf(f, "],\"thread_scaling\":[");
    for (int i = 0; i < c->n_scale; i++) {
        const double v[4] = {c->scale_threads[i], c->scale_mm[i], c->scale_attn[i],
                             c->scale_elem[i]};
        for (int k = 0; k < 4; k++) {
            char buf[32];
            metrics_format_double(buf, sizeof buf, v[k]);
            fprintf(f, "%s%s%s", k ? "," : i ? ",[" : "[", buf, k == 3 ? "]" : "");
        }
    }
    fprintf(f, "]}");
}

void plan_print_json(const plan_result *p, const run_config *cfg, FILE *f) {
    const plan_stage *s0 = &p->stages[0];
    fprintf(f,
            "{\"type\":\"plan\",\"world\":%d,\"device\":{\"name\":\"%s\",\"description\":\"%s\",",
            p->world, p->dev.name, p->dev.description);
    json_double(f, "mem_bytes", p->dev.mem_bytes);
    fputc(',', f);
    json_double(f, "usable_bytes", p->usable_bytes);
    fputc(',', f);
    json_double(f, "peak_flops", p->peak_flops);
    json_calibration(f, &p->dev);
    fprintf(f,
            "},\"mesh\":{\"tp\":%d,\"pp\":%d,\"dp\":%d},\"zero_in_effect\":%d,"
            "\"micro_batches\":%d,\"n_params\":%lld,\"rank_params\":%lld,\"memory\":",
            p->tp, p->pp, p->dp, p->zero, p->micro_batches, (long long)p->n_params,
            (long long)s0->rank_params);
    json_memory(f, s0, MEM_RECORDED);
    fprintf(f,
            ",\"scratch_bytes\":%llu,\"total_bytes\":%llu,\"host_startup_bytes\":%llu,"
            "\"host_save_bytes\":%llu,",
            (unsigned long long)s0->mem[MEM_SCRATCH], (unsigned long long)s0->mem_total,
            (unsigned long long)s0->host_startup, (unsigned long long)s0->host_save);
    if (p->dev.cuda) // the CUDA backend's own workspaces (compute/cuda_workspace.h)
        fprintf(f, "\"backend_device_bytes\":%llu,\"backend_pinned_bytes\":%llu,",
                (unsigned long long)s0->backend_device, (unsigned long long)s0->backend_pinned);
    fprintf(f, "\"comm_bytes\":");
    json_comm_bytes(f, s0);
    fprintf(f, ",\"comm\":");
    json_comm(f, s0);
    fprintf(f, ",\"stages\":[");
    for (int r = 0; r < p->pp; r++) {
        const plan_stage *s = &p->stages[r];
        fprintf(f, "%s{\"pp_rank\":%d,\"rank_params\":%lld,\"slots\":%d,\"memory\":", r ? "," : "",
                r, (long long)s->rank_params, s->n_slots);
        json_memory(f, s, MEM_KIND_COUNT);
        fprintf(f,
                ",\"total_bytes\":%llu,\"host_startup_bytes\":%llu,\"host_save_bytes\":%llu,"
                "\"comm_bytes\":",
                (unsigned long long)s->mem_total, (unsigned long long)s->host_startup,
                (unsigned long long)s->host_save);
        json_comm_bytes(f, s);
        fprintf(f, ",\"comm\":");
        json_comm(f, s);
        fputc(',', f);
        json_double(f, "model_flops", s->model_flops);
        fputc(',', f);
        json_double(f, "hw_flops", s->hw_flops);
        fputc(',', f);
        json_double(f, "compute_s", s->t_compute);
        fputc(',', f);
        json_double(f, "comm_s", s->t_comm[0] + s->t_comm[1]);
        fputc(',', f);
        json_double(f, "idle_sim", s->idle_sim);
        // The parts of the step a run measures (plan RUN_DIR compares them).
        const plan_step_parts parts = plan_stage_parts(p, r);
        fprintf(f, ",\"step_parts\":{");
        json_double(f, "compute_s", parts.compute_s);
        fputc(',', f);
        json_double(f, "waits_s", parts.waits_s);
        fputc(',', f);
        json_double(f, "comm_s", parts.comm_s);
        fprintf(f, "}}");
    }
    fprintf(f, "],\"fits\":%s,\"worst_stage\":%d,", p->fits ? "true" : "false", p->worst_stage);
    const char *keys[] = {"bubble",       "bubble_sim", "flops_per_token", "tokens_per_step",
                          "step_s",       "schedule_s", "step_end_s",      "optimizer_s",
                          "tokens_per_s", "mfu"};
    const double vals[] = {p->bubble,       p->bubble_sim, p->flops_per_token, p->tokens_per_step,
                           p->step_s,       p->t_schedule, p->t_step_end,      p->t_optimizer,
                           p->tokens_per_s, p->mfu};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        json_double(f, keys[i], vals[i]);
        fputc(',', f);
    }
    char lines[N_ASSUMPTIONS][320];
    int n = assumptions(p, cfg, lines);
    fprintf(f, "\"assumptions\":[");
    for (int i = 0; i < n; i++) fprintf(f, "%s\"%s\"", i ? "," : "", lines[i]);
    fprintf(f, "],\"config\":");
    config_print_json(cfg, f);
    fprintf(f, "}\n");
}

// ---------------------------------------------------------------------------------------
// The command

tri_status plan_run(run_config *cfg, int world, const plan_options *po) {
    const char *name = po->device ? po->device : plan_device_default(cfg);
    if (!po->world_given) { // the config's own layout
        const long long dp = cfg->parallel.dp == DP_AUTO ? 1 : cfg->parallel.dp;
        const long long ranks = (long long)cfg->parallel.tp * cfg->parallel.pp * dp;
        if (ranks > PLAN_MAX_WORLD) { // as --world
            LOG_ERROR("parallel.tp * parallel.pp * parallel.dp (%d * %d * %lld) is %lld ranks, "
                      "more than the %d trident plans",
                      cfg->parallel.tp, cfg->parallel.pp, dp, ranks, PLAN_MAX_WORLD);
            LOG_HINT("lower parallel.tp, pp or dp in %s", cfg->source_path);
            return TRI_ERR_CONFIG;
        }
        world = (int)ranks;
    }
    if (po->calibrate) {
        if (po->search || po->json || po->fbw || po->device) {
            LOG_ERROR("--calibrate measures this machine and writes a profile: it takes only "
                      "--out, --world and --set");
            LOG_HINT("calibrate first, then plan with --device PROFILE");
            return TRI_ERR_CONFIG;
        }
        TRI_CHECK(config_resolve_world(cfg, world));
        return plan_calibrate(cfg, po->out);
    }
    if (po->out) {
        LOG_ERROR("--out names the profile --calibrate writes; it needs --calibrate");
        LOG_HINT("add --calibrate, or drop --out");
        return TRI_ERR_CONFIG;
    }
    plan_device dev;
    if (!po->device && cfg->system.device_profile) { // the profile the run's record would use
        TRI_CHECK(plan_profile_of_config(cfg, world, &dev));
    } else if (plan_profile_is_file(name)) {
        TRI_CHECK(plan_profile_load(name, "--device", world, &dev));
    } else if (plan_device_lookup(name, world, &dev)) {
        LOG_ERROR("--device: unknown device %s", name);
        LOG_HINT("the device table has %s; or give a profile (a .yaml file) that `trident plan "
                 "CONFIG --calibrate` wrote",
                 plan_device_names());
        return TRI_ERR_CONFIG;
    }
    if (po->fbw) {
        double r[3];
        char end;
        if (sscanf(po->fbw, "%lf:%lf:%lf%c", &r[0], &r[1], &r[2], &end) != 3 || !(r[0] > 0) ||
            !(r[1] > 0) || !(r[2] >= 0) || !isfinite(r[0] + r[1] + r[2])) {
            LOG_ERROR("--fbw: '%s' is not three ratios F:B:W", po->fbw);
            LOG_HINT("give the forward, input-gradient and weight-gradient times, e.g. --fbw "
                     "1:1.1:0.9 (F and B above 0, W at least 0)");
            return TRI_ERR_CONFIG;
        }
        memcpy(dev.fbw, r, sizeof r);
        dev.fbw_measured = 1;
    }
    if (po->search) return plan_search(cfg, world, &dev, po->top, po->json, stdout);
    TRI_CHECK(config_resolve_world(cfg, world));
    plan_result p;
    TRI_CHECK(plan_compute(&p, cfg, &dev));
    if (po->json) plan_print_json(&p, cfg, stdout);
    else plan_print_text(&p, cfg, stdout);
    plan_free(&p);
    return TRI_OK;
}
