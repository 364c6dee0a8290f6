// config_sizes.c: the size rules (config_sizes_internal.h): what the keys imply for the ints
// of the model's ops, the parameter table, the run's counters and a rank's buffers, in
// checked 64-bit arithmetic, before anything of that size is built.
#include "config/config_sizes_internal.h"

#include <limits.h>
#include <string.h>

#include "base/checked.h"
#include "config/config_layout.h"

// "18.2 TB", "640 kB", or "more than 2^64 bytes" for a saturated sum.
static const char *bytes_text(uint64_t bytes, char *buf, size_t n) {
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    if (bytes == UINT64_MAX) return snprintf(buf, n, "more than 2^64 bytes"), buf;
    double b = (double)bytes;
    int u = 0;
    while (b >= 1000 && u < 6) b /= 1000, u++;
    snprintf(buf, n, u ? "%.3g %s" : "%.0f %s", b, units[u]);
    return buf;
}

#define LIMIT_TEXT "16 TiB (17.6 TB)"
_Static_assert(CONFIG_RANK_BYTES_MAX == (uint64_t)16 << 40, "LIMIT_TEXT names the limit");

// ---------------------------------------------------------------------------------------
// Ints of the model's ops

// N = micro_batch * seq_len rows: model_dims.N and every op's row count are ints.
static void check_rows(config_ctx *c, const run_config *cfg) {
    const int B = cfg->train.micro_batch, T = cfg->model.seq_len;
    if (!KEYS_OK(c, K_TRAIN_MICRO_BATCH, K_MODEL_SEQ_LEN) || (long long)B * T <= INT_MAX) return;
    config_report_key(c, K_TRAIN_MICRO_BATCH, K_MODEL_SEQ_LEN,
                      "train.micro_batch * model.seq_len (%d * %d = %lld) rows per micro-batch "
                      "pass 2^31-1, the most the model's ops index; lower micro_batch or seq_len",
                      B, T, (long long)B * T);
    c->bad[K_TRAIN_MICRO_BATCH] = 1;
}

// The MLP's 4 * d_model columns (and the qkv's 3 * d_model) are ints of the ops.
static void check_width(config_ctx *c, const run_config *cfg) {
    const int C = cfg->model.d_model;
    if (!KEYS_OK(c, K_MODEL_D_MODEL) || 4LL * C <= INT_MAX) return;
    config_report_key(c, K_MODEL_D_MODEL, K_COUNT,
                      "the MLP width 4 * model.d_model (4 * %d = %lld) passes 2^31-1, the most "
                      "the model's ops index; d_model can be at most %d",
                      C, 4LL * C, INT_MAX / 4);
    c->bad[K_MODEL_D_MODEL] = 1;
}

// ---------------------------------------------------------------------------------------
// Parameters and the table of each pipeline stage

// Whether the shape rules of config_rules.c hold (they report otherwise): params_size_of
// assumes them.
static int shapes_ok(config_ctx *c, const run_config *cfg) {
    const model_config *mc = &cfg->model;
    const int tp = cfg->parallel.tp, pp = cfg->parallel.pp, v = cfg->parallel.virtual_stages;
    if (!KEYS_OK(c, K_MODEL_N_LAYER, K_MODEL_N_HEAD, K_MODEL_D_MODEL, K_MODEL_SEQ_LEN,
                 K_MODEL_VOCAB_SIZE, K_MODEL_VOCAB_PAD_TO, K_PAR_TP, K_PAR_PP, K_PAR_VIRTUAL_STAGES,
                 K_TRAIN_PRECISION))
        return 0;
    if (!KEYS_OK(c, K_MODEL_N_KV_HEAD, K_MODEL_FFN_HIDDEN, K_MODEL_ARCH)) return 0;
    return mc->n_layer % ((long long)pp * v) == 0 && mc->d_model % mc->n_head == 0 &&
           mc->n_head % tp == 0 && (4LL * mc->d_model) % tp == 0 && mc->n_kv_head >= 1 &&
           mc->n_kv_head <= mc->n_head && mc->n_head % mc->n_kv_head == 0 &&
           mc->n_kv_head % tp == 0 && mc->ffn_hidden >= 1 &&
           (!model_arch_is_llama(mc) || 2LL * mc->ffn_hidden <= INT_MAX) &&
           mc->ffn_hidden % tp == 0 && model_padded_vocab_ll(mc, tp) <= INT_MAX;
}

// The distinct pipeline ranks whose sizes differ: the first, the second (every middle stage
// holds what it holds, with the most slots of them) and the last.
static int distinct_stages(int pp, int out[3]) {
    int n = 0;
    out[n++] = 0;
    if (pp > 2) out[n++] = 1;
    if (pp > 1) out[n++] = pp - 1;
    return n;
}

// The parameters of pipeline rank r (tp rank 0), or -1 past INT64_MAX.
static int stage_params(const run_config *cfg, int r, params_size *ps) {
    const model_shard sh = {.tp = cfg->parallel.tp,
                            .tp_rank = 0,
                            .pp = cfg->parallel.pp,
                            .pp_rank = r,
                            .virtual_stages = cfg->parallel.virtual_stages};
    return params_size_of(&cfg->model, &sh, ps);
}

// Names the key whose value puts the most parameters on pipeline rank r, and says so.
static void report_params(config_ctx *c, const run_config *cfg, int r, const params_size *ps,
                          int overflow) {
    const model_config *mc = &cfg->model;
    const int tp = cfg->parallel.tp, pp = cfg->parallel.pp;
    const size_t elem = dtype_size(cfg->train.precision);
    const double C = mc->d_model, Vp = (double)model_padded_vocab_ll(mc, tp);
    const double layer_part = (double)ps->layers * (12.0 * C * C + 13.0 * C) / tp;
    const double wte_part = r == 0 || r == pp - 1 ? Vp * C / tp : 0;
    const double wpe_part = r == 0 ? (double)mc->seq_len * C : 0;
    char count[48], bytes[48], where[96];
    if (overflow) {
        snprintf(count, sizeof count, "more than 2^63");
        snprintf(bytes, sizeof bytes, "more than 2^64 bytes");
    } else {
        snprintf(count, sizeof count, "%.3g", (double)ps->local_numel);
        bytes_text(sat_mul_u64((uint64_t)ps->local_numel, elem), bytes, sizeof bytes);
    }
    snprintf(where, sizeof where, "one rank (pipeline stage %d of %d, tp rank 0 of %d)", r, pp, tp);
    const char *limit = "more than the " LIMIT_TEXT " one rank may hold";
    // One layer past the limit on its own: the width is what to change.
    const double one_layer = (12.0 * C * C + 13.0 * C) / tp * (double)elem;
    if (layer_part >= wte_part && layer_part >= wpe_part && one_layer > CONFIG_RANK_BYTES_MAX)
        config_report_key(c, K_MODEL_D_MODEL, K_MODEL_N_LAYER,
                          "one layer of d_model %d has %.3g parameters (12 * d_model^2 + 13 * "
                          "d_model) over tp %d: %s at %zu bytes each for its share of all %d "
                          "layers on %s, %s; lower d_model",
                          mc->d_model, 12.0 * C * C + 13.0 * C, tp, bytes, elem, mc->n_layer, where,
                          limit);
    else if (layer_part >= wte_part && layer_part >= wpe_part)
        config_report_key(c, K_MODEL_N_LAYER, K_MODEL_D_MODEL,
                          "%d layers of d_model %d put %s parameters on %s: %s at %zu bytes "
                          "each, %s; lower n_layer or d_model, or split the model over more "
                          "ranks (parallel.pp, parallel.tp)",
                          mc->n_layer, mc->d_model, count, where, bytes, elem, limit);
    else if (wte_part >= wpe_part)
        config_report_key(c, K_MODEL_VOCAB_SIZE, K_MODEL_D_MODEL,
                          "a vocabulary of %d (padded to %.0f) rows of d_model %d puts %s "
                          "parameters on %s: %s at %zu bytes each, %s; lower vocab_size or "
                          "d_model, or split the vocabulary over more ranks (parallel.tp)",
                          mc->vocab_size, Vp, mc->d_model, count, where, bytes, elem, limit);
    else
        config_report_key(c, K_MODEL_SEQ_LEN, K_MODEL_D_MODEL,
                          "position embeddings of %d positions of d_model %d put %s parameters "
                          "on %s: %s at %zu bytes each, %s; lower seq_len or d_model",
                          mc->seq_len, mc->d_model, count, where, bytes, elem, limit);
}

static void check_params(config_ctx *c, const run_config *cfg) {
    if (!shapes_ok(c, cfg)) return;
    const size_t elem = dtype_size(cfg->train.precision);
    int stages[3];
    const int n = distinct_stages(cfg->parallel.pp, stages);
    for (int i = 0; i < n; i++) {
        params_size ps;
        const int overflow = stage_params(cfg, stages[i], &ps) != 0;
        int64_t bytes = 0;
        if (overflow || !ck_mul_i64(ps.local_numel, (int64_t)elem, &bytes) ||
            (uint64_t)bytes > CONFIG_RANK_BYTES_MAX) {
            report_params(c, cfg, stages[i], &ps, overflow);
            c->bad[K_MODEL_N_LAYER] = 1;
            return;
        }
        if (ps.entries > CONFIG_RANK_ENTRIES_MAX) {
            config_report_key(c, K_MODEL_N_LAYER, K_PAR_PP,
                              "%d layers put %lld of them on pipeline stage %d of %d: %lld "
                              "parameter tensors, more than the %d one rank's parameter table "
                              "holds; lower n_layer, or raise parallel.pp (a stage holds "
                              "n_layer / pp layers)",
                              cfg->model.n_layer, (long long)ps.layers, stages[i], cfg->parallel.pp,
                              (long long)ps.entries, CONFIG_RANK_ENTRIES_MAX);
            c->bad[K_MODEL_N_LAYER] = 1;
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The run's counters

// Samples and tokens since the start are int64 (checkpoints, metrics): steps * global_batch *
// seq_len must fit.
static void check_tokens(config_ctx *c, const run_config *cfg) {
    if (!KEYS_OK(c, K_TRAIN_STEPS, K_TRAIN_GLOBAL_BATCH, K_MODEL_SEQ_LEN)) return;
    int64_t tokens;
    if (ck_mul_i64((int64_t)cfg->train.steps * cfg->train.global_batch, cfg->model.seq_len,
                   &tokens))
        return;
    config_report_key(c, K_TRAIN_STEPS, K_TRAIN_GLOBAL_BATCH,
                      "train.steps * train.global_batch * model.seq_len (%d * %d * %d) tokens "
                      "pass 2^63-1, the most the run's token counters hold; lower steps",
                      cfg->train.steps, cfg->train.global_batch, cfg->model.seq_len);
}

void config_check_sizes(config_ctx *c, const run_config *cfg) {
    check_rows(c, cfg);
    check_width(c, cfg);
    check_params(c, cfg);
    check_tokens(c, cfg);
}

int config_size_problem(const run_config *cfg, char *why, size_t n) {
    config_ctx c;
    config_ctx_init(&c, cfg->source_path, NULL);
    config_check_sizes(&c, cfg);
    const int problem = c.n_errors > 0;
    config_report_discard(&c, why, n);
    return problem;
}

// ---------------------------------------------------------------------------------------
// A rank's buffers

// What to change when kind k holds the most of a rank's buffers that are too large.
static void report_memory(config_ctx *c, const run_config *cfg, int r, int n_slots,
                          const uint64_t mem[MEM_KIND_COUNT], uint64_t total) {
    int worst = 0;
    for (int k = 1; k < MEM_KIND_COUNT; k++)
        if (mem[k] > mem[worst]) worst = k;
    char kinds[512] = "", b[48];
    size_t len = 0;
    for (int k = 0; k < MEM_KIND_COUNT && len < sizeof kinds; k++)
        if (mem[k])
            len += (size_t)snprintf(kinds + len, sizeof kinds - len, "%s%s %s", len ? ", " : "",
                                    mem_kind_name((mem_kind)k), bytes_text(mem[k], b, sizeof b));
    char all[48];
    bytes_text(total, all, sizeof all);
    const char *head = "pipeline stage %d of %d would hold %s of buffers per rank (%s), more "
                       "than the " LIMIT_TEXT " one rank may hold; %s";
    const int pp = cfg->parallel.pp;
    if (worst == MEM_ACTIVATION && cfg->parallel.schedule == SCHEDULE_GPIPE && n_slots > 1) {
        char hint[160];
        snprintf(hint, sizeof hint,
                 "gpipe keeps the activations of all %d micro-batches of a step: use schedule "
                 "1f1b, or lower train.global_batch",
                 n_slots);
        config_report_key(c, K_PAR_SCHEDULE, K_TRAIN_GLOBAL_BATCH, head, r, pp, all, kinds, hint);
    } else if (worst == MEM_ACTIVATION || worst == MEM_SCRATCH) {
        config_report_key(c, K_TRAIN_MICRO_BATCH, K_MODEL_SEQ_LEN, head, r, pp, all, kinds,
                          cfg->system.backend == BACKEND_CPU
                              ? "lower train.micro_batch or model.seq_len, or use "
                                "parallel.recompute: full (the CPU backend keeps micro_batch * "
                                "n_head * seq_len^2 attention probabilities per layer)"
                              : "lower train.micro_batch or model.seq_len, or use "
                                "parallel.recompute: full");
    } else {
        config_report_key(c, K_MODEL_N_LAYER, K_MODEL_D_MODEL, head, r, pp, all, kinds,
                          "shard the optimizer state and parameters over dp (parallel.zero), "
                          "or split the model over more ranks (parallel.tp, parallel.pp)");
    }
}

void config_check_rank_memory(config_ctx *c, const run_config *cfg, int dp) {
    if (!shapes_ok(c, cfg)) return; // a config that config_load did not check (tests)
    run_config rc = *cfg;           // a shallow copy with dp resolved: config_layout.c asks it
    rc.parallel.dp = dp;
    const int pp = cfg->parallel.pp, v = cfg->parallel.virtual_stages;
    const int64_t m = cfg->train.global_batch / ((int64_t)cfg->train.micro_batch * dp);
    if (m * v > SCHED_MAX_PAIRS) {
        config_report_key(c, K_TRAIN_GLOBAL_BATCH, K_TRAIN_MICRO_BATCH,
                          "train.global_batch / (train.micro_batch * parallel.dp) = %lld "
                          "micro-batches per step, times %d virtual stage(s), make %lld "
                          "(micro-batch, chunk) pairs per step, more than the %d a pipeline "
                          "schedule holds; raise micro_batch or lower global_batch",
                          (long long)m, v, (long long)(m * v), SCHED_MAX_PAIRS);
        return;
    }
    // The traits of the smallest buffers the backend may carve (attention state, bf16 matmul
    // outputs): the planner's device decides on auto; no device holds less.
    const int cpu = cfg->system.backend == BACKEND_CPU;
    const backend_traits bt = {.attn = cpu ? ATTN_STATE_PROBS : ATTN_STATE_LSE, .bf16_out = !cpu};
    int stages[3];
    const int n = distinct_stages(pp, stages);
    for (int i = 0; i < n; i++) {
        const int64_t slots = sched_max_in_flight(cfg->parallel.schedule, pp, v, (int)m, stages[i]);
        if (slots > MODEL_MAX_SLOTS) {
            config_report_key(c, K_PAR_SCHEDULE, K_TRAIN_GLOBAL_BATCH,
                              "schedule %s keeps %lld (micro-batch, chunk) pairs of a step in "
                              "flight on pipeline stage %d, more than the %d activation slots "
                              "a rank holds; use schedule 1f1b, or lower train.global_batch",
                              config_schedule_name(cfg->parallel.schedule), (long long)slots,
                              stages[i], MODEL_MAX_SLOTS);
            return;
        }
        const int n_slots = (int)slots;
        uint64_t mem[MEM_KIND_COUNT], total = 0;
        config_rank_memory(&rc, 0, stages[i], 0, n_slots, bt, mem);
        for (int k = 0; k < MEM_KIND_COUNT; k++) total = sat_add_u64(total, mem[k]);
        if (total > CONFIG_RANK_BYTES_MAX) {
            report_memory(c, cfg, stages[i], n_slots, mem, total);
            return;
        }
    }
}
