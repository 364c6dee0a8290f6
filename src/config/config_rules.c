// config_rules.c: each key against its range, what must hold between keys, and between keys
// and the world size.
//
// A rule is skipped when one of its keys was already rejected, so one mistake gives one
// message. Products are formed in long long: tp * pp * dp of three valid ints can
// overflow int.
#include "config/config_rules_internal.h"

#include <limits.h>

#include "config/config_print_internal.h"
#include "config/config_sizes_internal.h"

// ---------------------------------------------------------------------------------------
// Ranges and rules

static int in_range(const key_desc *d, double v) {
    int above = d->lo_open ? v > d->lo : v >= d->lo;
    int below = d->hi_open ? v < d->hi : v <= d->hi;
    return above && below;
}

void config_check_ranges(config_ctx *c, const run_config *cfg) {
    for (int k = 0; k < K_COUNT; k++) {
        const key_desc *d = &CONFIG_KEYS[k];
        if (c->bad[k] || (d->type != KT_INT && d->type != KT_F64)) continue;
        double v = d->type == KT_INT ? config_key_int(cfg, k) : config_key_f64(cfg, k);
        if (in_range(d, v)) continue;
        char range[64], got[48];
        config_range_text(k, range, sizeof range);
        if (d->type == KT_INT) snprintf(got, sizeof got, "%d", config_key_int(cfg, k));
        else config_format_double(v, got, sizeof got);
        config_report_key(c, k, K_COUNT, "%s (got %s)", range, got);
        c->bad[k] = 1;
    }
}

// ---------------------------------------------------------------------------------------
// Model shape and layout

static void check_heads(config_ctx *c, const run_config *cfg) {
    int d = cfg->model.d_model, h = cfg->model.n_head;
    if (!KEYS_OK(c, K_MODEL_D_MODEL, K_MODEL_N_HEAD) || d % h == 0) return;
    config_report_key(c, K_MODEL_D_MODEL, K_MODEL_N_HEAD,
                      "model.d_model (%d) must be divisible by model.n_head (%d); choose a "
                      "d_model that is a multiple of %d, or an n_head that divides %d",
                      d, h, h, d);
}

// Megatron splits heads and the MLP's 4*d_model columns over tp.
static void check_tp_split(config_ctx *c, const run_config *cfg) {
    int tp = cfg->parallel.tp, h = cfg->model.n_head;
    if (KEYS_OK(c, K_PAR_TP, K_MODEL_N_HEAD) && h % tp != 0)
        config_report_key(c, K_PAR_TP, K_MODEL_N_HEAD,
                          "model.n_head (%d) must be divisible by parallel.tp (%d); choose a tp "
                          "that divides %d",
                          h, tp, h);
    long long width = 4LL * cfg->model.d_model;
    if (model_arch_is_llama(&cfg->model)) { // its k and v heads and its MLP width: check_llama
    } else if (KEYS_OK(c, K_PAR_TP, K_MODEL_D_MODEL) && width % tp != 0)
        config_report_key(c, K_PAR_TP, K_MODEL_D_MODEL,
                          "the MLP width 4 * model.d_model (%lld) must be divisible by "
                          "parallel.tp (%d); choose a tp that divides %lld",
                          width, tp, width);
    int seq = cfg->model.seq_len;
    if (cfg->parallel.sequence_parallel &&
        KEYS_OK(c, K_PAR_TP, K_MODEL_SEQ_LEN, K_PAR_SEQUENCE_PARALLEL) && seq % tp != 0)
        config_report_key(c, K_PAR_SEQUENCE_PARALLEL, K_MODEL_SEQ_LEN,
                          "sequence parallelism splits model.seq_len (%d) over parallel.tp (%d), "
                          "which must divide it; choose a seq_len that is a multiple of %d, or "
                          "set sequence_parallel: false",
                          seq, tp, tp);
}

// The Llama keys: grouped-query heads, the SwiGLU width, RoPE's even head size; and for
// gpt2, which has none of them, only their gpt2 values.
static void check_llama(config_ctx *c, const run_config *cfg) {
    const model_config *mc = &cfg->model;
    const int h = mc->n_head, kv = mc->n_kv_head, tp = cfg->parallel.tp, F = mc->ffn_hidden;
    if (!model_arch_is_llama(mc)) {
        if (KEYS_OK(c, K_MODEL_N_KV_HEAD, K_MODEL_N_HEAD, K_MODEL_ARCH) && kv != h)
            config_report_key(c, K_MODEL_N_KV_HEAD, K_MODEL_ARCH,
                              "arch gpt2 has no grouped-query attention: model.n_kv_head must "
                              "equal model.n_head (%d) or be 0 (got %d); use arch: llama",
                              h, kv);
        if (KEYS_OK(c, K_MODEL_FFN_HIDDEN, K_MODEL_D_MODEL, K_MODEL_ARCH) && F != 0 &&
            F != 4LL * mc->d_model) // 0: 4 * d_model passes an int (config_sizes.c says so)
            config_report_key(c, K_MODEL_FFN_HIDDEN, K_MODEL_ARCH,
                              "arch gpt2's MLP is 4 * model.d_model (%lld) wide: "
                              "model.ffn_hidden must be that or 0 (got %d); use arch: llama "
                              "for another width",
                              4LL * mc->d_model, F);
        if (KEYS_OK(c, K_MODEL_TIE_EMBEDDINGS, K_MODEL_ARCH) && !mc->tie_embeddings)
            config_report_key(c, K_MODEL_TIE_EMBEDDINGS, K_MODEL_ARCH,
                              "arch gpt2's LM head is always tied to its token embedding: "
                              "model.tie_embeddings must be true (or left out); use arch: llama "
                              "for an untied head");
        if (KEYS_OK(c, K_MODEL_NORM_EPS, K_MODEL_ARCH) && mc->norm_eps != 1e-5)
            config_report_key(c, K_MODEL_NORM_EPS, K_MODEL_ARCH,
                              "arch gpt2's LayerNorm has the fixed eps 1e-5: leave "
                              "model.norm_eps out (got %g), or use arch: llama",
                              mc->norm_eps);
        return;
    }
    if (KEYS_OK(c, K_MODEL_N_KV_HEAD, K_MODEL_N_HEAD)) {
        if (kv > h)
            config_report_key(c, K_MODEL_N_KV_HEAD, K_MODEL_N_HEAD,
                              "model.n_kv_head (%d) must be at most model.n_head (%d); choose "
                              "a divisor of %d, or 0 for n_head",
                              kv, h, h);
        else if (h % kv != 0)
            config_report_key(c, K_MODEL_N_KV_HEAD, K_MODEL_N_HEAD,
                              "model.n_head (%d) must be divisible by model.n_kv_head (%d): "
                              "each key/value head serves a group of query heads; choose a "
                              "divisor of %d",
                              h, kv, h);
    }
    if (KEYS_OK(c, K_MODEL_N_KV_HEAD, K_PAR_TP) && kv % tp != 0)
        config_report_key(c, K_PAR_TP, K_MODEL_N_KV_HEAD,
                          "model.n_kv_head (%d) must be divisible by parallel.tp (%d): tp splits "
                          "the key/value heads; choose a tp that divides %d",
                          kv, tp, kv);
    if (KEYS_OK(c, K_MODEL_FFN_HIDDEN, K_MODEL_D_MODEL, K_MODEL_FFN_MULTIPLE_OF) &&
        (F == 0 || 2LL * F > INT_MAX))
        config_report_key(c, K_MODEL_FFN_HIDDEN, K_MODEL_D_MODEL,
                          "the SwiGLU's gate and up rows 2 * model.ffn_hidden (2 * %lld) pass "
                          "2^31-1, the most the model's ops index; lower ffn_hidden or d_model",
                          F ? (long long)F
                            : model_llama_ffn_rule(mc->d_model, mc->ffn_multiple_of));
    else if (KEYS_OK(c, K_MODEL_FFN_HIDDEN, K_PAR_TP) && F % tp != 0)
        config_report_key(c, K_PAR_TP, K_MODEL_FFN_HIDDEN,
                          "model.ffn_hidden (%d) must be divisible by parallel.tp (%d): tp "
                          "splits the MLP's columns; choose a tp that divides %d, or set "
                          "ffn_hidden (or ffn_multiple_of) to a multiple of %d",
                          F, tp, F, tp);
    if (KEYS_OK(c, K_MODEL_D_MODEL, K_MODEL_N_HEAD) && mc->d_model % h == 0 &&
        (mc->d_model / h) % 2 != 0)
        config_report_key(c, K_MODEL_D_MODEL, K_MODEL_N_HEAD,
                          "rotary embeddings rotate pairs of a head's dimensions: the head size "
                          "model.d_model / model.n_head (%d / %d = %d) must be even",
                          mc->d_model, h, mc->d_model / h);
}

static void check_vocab(config_ctx *c, const run_config *cfg) {
    if (!KEYS_OK(c, K_MODEL_VOCAB_SIZE, K_MODEL_VOCAB_PAD_TO, K_PAR_TP)) return;
    long long padded = model_padded_vocab_ll(&cfg->model, cfg->parallel.tp);
    if (padded <= INT_MAX) return;
    config_report_key(c, K_MODEL_VOCAB_PAD_TO, K_MODEL_VOCAB_SIZE,
                      "model.vocab_size (%d) padded to a multiple of model.vocab_pad_to * "
                      "parallel.tp (%d * %d) is %lld, more than 2^31-1; lower vocab_pad_to",
                      cfg->model.vocab_size, cfg->model.vocab_pad_to, cfg->parallel.tp, padded);
}

static void check_pipeline(config_ctx *c, const run_config *cfg) {
    int pp = cfg->parallel.pp, v = cfg->parallel.virtual_stages, L = cfg->model.n_layer;
    schedule_kind s = cfg->parallel.schedule;
    long long chunks = (long long)pp * v;
    if (KEYS_OK(c, K_PAR_PP, K_PAR_VIRTUAL_STAGES, K_MODEL_N_LAYER) && L % chunks != 0)
        config_report_key(c, K_PAR_PP, K_MODEL_N_LAYER,
                          "model.n_layer (%d) must be divisible by parallel.pp * "
                          "parallel.virtual_stages (%d * %d = %lld); choose pp and "
                          "virtual_stages whose product divides %d",
                          L, pp, v, chunks, L);
    if (!KEYS_OK(c, K_PAR_SCHEDULE, K_PAR_VIRTUAL_STAGES)) return;
    if (s == SCHEDULE_INTERLEAVED && v < 2)
        config_report_key(c, K_PAR_SCHEDULE, K_PAR_VIRTUAL_STAGES,
                          "schedule interleaved needs parallel.virtual_stages >= 2 (got %d); "
                          "set virtual_stages: 2 or more, or use schedule: 1f1b",
                          v);
    // Both two-or-more-chunk schedules spread their chunks over pipeline ranks.
    if ((s == SCHEDULE_INTERLEAVED || s == SCHEDULE_ZBV) && KEYS_OK(c, K_PAR_PP) && pp < 2)
        config_report_key(c, K_PAR_SCHEDULE, K_PAR_PP,
                          "schedule %s needs parallel.pp >= 2 (got %d): its virtual stages pass "
                          "activations between pipeline ranks; use schedule: 1f1b with pp: 1",
                          config_schedule_name(s), pp);
    if (s == SCHEDULE_ZBV && v != 2)
        config_report_key(c, K_PAR_SCHEDULE, K_PAR_VIRTUAL_STAGES,
                          "schedule zbv runs exactly two chunks per pipeline rank in a V "
                          "(parallel.virtual_stages: 2; got %d); set virtual_stages: 2",
                          v);
    if (s != SCHEDULE_INTERLEAVED && s != SCHEDULE_ZBV && v > 1)
        config_report_key(c, K_PAR_VIRTUAL_STAGES, K_PAR_SCHEDULE,
                          "%d virtual stages need parallel.schedule: interleaved or zbv (got "
                          "%s); set schedule: interleaved, or virtual_stages: 1",
                          v, config_schedule_name(s));
}

// Checks the split of train.global_batch over dp replicas and micro-batches.
static void check_batch_split(config_ctx *c, const run_config *cfg, int dp) {
    int mb = cfg->train.micro_batch, gb = cfg->train.global_batch, pp = cfg->parallel.pp;
    if (!KEYS_OK(c, K_TRAIN_MICRO_BATCH, K_TRAIN_GLOBAL_BATCH, K_PAR_DP, K_PAR_PP)) return;
    long long per_mb = (long long)mb * dp; // sequences per micro-batch over all replicas
    if (gb % per_mb != 0) {
        config_report_key(c, K_TRAIN_GLOBAL_BATCH, K_TRAIN_MICRO_BATCH,
                          "train.global_batch (%d) must be divisible by train.micro_batch * "
                          "parallel.dp (%d * %d = %lld); choose a global_batch that is a "
                          "multiple of %lld",
                          gb, mb, dp, per_mb, per_mb);
        return;
    }
    long long m = gb / per_mb;
    schedule_kind s = cfg->parallel.schedule;
    if (c->bad[K_PAR_SCHEDULE] || s == SCHEDULE_GPIPE) return;
    // 1F1B's steady state needs every stage busy: at least pp micro-batches in flight.
    if (m < pp) {
        config_report_key(c, K_PAR_SCHEDULE, K_TRAIN_GLOBAL_BATCH,
                          "schedule %s needs at least parallel.pp (%d) micro-batches per step, "
                          "but train.global_batch / (train.micro_batch * parallel.dp) = %d / "
                          "(%d * %d) = %lld; raise global_batch to %lld, or lower micro_batch",
                          config_schedule_name(s), pp, gb, mb, dp, m, per_mb * pp);
    } else if (s == SCHEDULE_INTERLEAVED && m % pp != 0) {
        // Interleaved 1F1B runs micro-batches in groups of pp through each chunk; a partial
        // last group has no order here that the simulator proves free of deadlock with
        // Megatron's warm-up, so the rule stays (zbv, also two chunks, takes any m >= pp).
        config_report_key(c, K_PAR_SCHEDULE, K_TRAIN_GLOBAL_BATCH,
                          "schedule interleaved needs the micro-batches per step "
                          "(train.global_batch / (train.micro_batch * parallel.dp) = %lld) to "
                          "be a multiple of parallel.pp (%d): it runs them through each chunk "
                          "in groups of pp; choose a global_batch that is a multiple of %lld, "
                          "or schedule zbv (two chunks per rank, any count from pp on)",
                          m, pp, per_mb * pp);
    }
}

// ---------------------------------------------------------------------------------------
// Optimizer and system

static void check_optim(config_ctx *c, const run_config *cfg) {
    if (!KEYS_OK(c, K_OPT_LR, K_OPT_MIN_LR) || cfg->optim.min_lr <= cfg->optim.lr) return;
    char lr[48], min_lr[48];
    config_format_double(cfg->optim.lr, lr, sizeof lr);
    config_format_double(cfg->optim.min_lr, min_lr, sizeof min_lr);
    config_report_key(c, K_OPT_MIN_LR, K_OPT_LR,
                      "optim.min_lr (%s) must not exceed optim.lr (%s); lower min_lr", min_lr, lr);
}

static void check_system(config_ctx *c, const run_config *cfg) {
    // NCCL moves device memory; the CPU backend has none.
    if (KEYS_OK(c, K_SYS_COMM, K_SYS_BACKEND) && cfg->system.comm == COMM_NCCL &&
        cfg->system.backend == BACKEND_CPU)
        config_report_key(c, K_SYS_COMM, K_SYS_BACKEND,
                          "comm nccl needs system.backend cuda or auto (got cpu); use comm: "
                          "mpi or auto");
}

void config_check_rules(config_ctx *c, const run_config *cfg) {
    check_heads(c, cfg);
    check_tp_split(c, cfg);
    check_llama(c, cfg);
    check_vocab(c, cfg);
    check_pipeline(c, cfg);
    check_optim(c, cfg);
    check_system(c, cfg);
    // With dp fixed, the batch split is known now; with dp auto, only the micro-batch part.
    if (cfg->parallel.dp != DP_AUTO) {
        check_batch_split(c, cfg, cfg->parallel.dp);
    } else if (KEYS_OK(c, K_TRAIN_MICRO_BATCH, K_TRAIN_GLOBAL_BATCH) &&
               cfg->train.global_batch % cfg->train.micro_batch != 0) {
        int gb = cfg->train.global_batch, mb = cfg->train.micro_batch;
        config_report_key(c, K_TRAIN_GLOBAL_BATCH, K_TRAIN_MICRO_BATCH,
                          "train.global_batch (%d) must be divisible by train.micro_batch (%d); "
                          "choose a global_batch that is a multiple of %d",
                          gb, mb, mb);
    }
    config_check_sizes(c, cfg); // after the shape rules: the sizes assume them
}

// ---------------------------------------------------------------------------------------
// World size

// The dp the world gives, or 0 after reporting why it gives none.
static int world_dp(config_ctx *c, const run_config *cfg, int world) {
    int tp = cfg->parallel.tp, pp = cfg->parallel.pp, dp = cfg->parallel.dp;
    long long model_ranks = (long long)tp * pp;
    if (dp == DP_AUTO) {
        if (world % model_ranks == 0) return (int)(world / model_ranks);
        config_report_key(c, K_PAR_DP, K_COUNT,
                          "dp is auto, but the world of %d ranks is not divisible by "
                          "parallel.tp * parallel.pp (%d * %d = %lld); choose tp and pp whose "
                          "product divides %d, or launch a multiple of %lld ranks",
                          world, tp, pp, model_ranks, world, model_ranks);
        return 0;
    }
    if (model_ranks * dp == world) return dp;
    config_report_key(c, K_PAR_DP, K_COUNT,
                      "parallel.tp * parallel.pp * parallel.dp (%d * %d * %d = %lld) must equal "
                      "the world size (%d); set dp: auto, or launch %lld ranks",
                      tp, pp, dp, model_ranks * dp, world, model_ranks * dp);
    return 0;
}

tri_status config_resolve_world(run_config *cfg, int world) {
    // A loaded config holds valid single values; only their relation to the world is new.
    TRI_ASSERT(cfg->parallel.tp >= 1 && cfg->parallel.pp >= 1 && cfg->train.micro_batch >= 1);
    config_ctx c;
    config_ctx_init(&c, cfg->source_path, NULL);
    int dp = 0;
    if (world < 1) {
        config_report(&c, (config_loc){0, -1}, NULL, "the world size must be >= 1 (got %d)", world);
    } else {
        dp = world_dp(&c, cfg, world);
        if (dp > 0) check_batch_split(&c, cfg, dp);
        if (dp > 0 && !c.n_errors) config_check_rank_memory(&c, cfg, dp);
        if (cfg->system.comm == COMM_SELF && world > 1)
            config_report_key(&c, K_SYS_COMM, K_COUNT,
                              "comm self runs a single process, but the world has %d ranks; use "
                              "comm: auto",
                              world);
    }
    if (c.n_errors) {
        config_report_total(&c);
        return TRI_ERR_CONFIG;
    }
    cfg->parallel.dp = dp;
    return TRI_OK;
}
