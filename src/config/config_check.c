// config_check.c: what is wrong with a config and how to say it: the message format,
// "did you mean" for unknown names, each key against its range, the rules that tie keys
// together (shapes that tp and pp must divide, schedule needs, batch splits), and the
// rules that need the world size.
//
// A rule is skipped when one of its keys was already rejected, so one mistake gives one
// message. Products are formed in long long: tp * pp * dp of three valid ints can
// overflow int.
#include "config/config_internal.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

// ---------------------------------------------------------------------------------------
// Messages

const char *config_key_path(key_id k, char *buf, size_t n) {
    snprintf(buf, n, "%s.%s", CONFIG_KEYS[k].section, CONFIG_KEYS[k].key);
    return buf;
}

void config_ctx_init(config_ctx *c, const char *path, char **sets) {
    memset(c, 0, sizeof *c);
    c->path = path ? path : "config";
    c->sets = sets;
    c->cur_set = -1;
    for (int k = 0; k < K_COUNT; k++) c->loc[k].set_index = -1;
}

static void report_v(config_ctx *c, config_loc loc, const char *key_path, const char *fmt,
                     va_list ap) {
    char msg[1024], where[512], line[1600];
    if (loc.set_index >= 0) snprintf(where, sizeof where, "--set %s", c->sets[loc.set_index]);
    else if (loc.line > 0) snprintf(where, sizeof where, "%s:%d", c->path, loc.line);
    else snprintf(where, sizeof where, "%s", c->path);
    vsnprintf(msg, sizeof msg, fmt, ap);
    snprintf(line, sizeof line, "%s: %s%s%s\n", where, key_path ? key_path : "",
             key_path ? ": " : "", msg);
    if (c->n_errors == c->cap_msgs) {
        c->cap_msgs = c->cap_msgs ? 2 * c->cap_msgs : 16;
        config_msg *grown = xcalloc((size_t)c->cap_msgs, sizeof *grown);
        if (c->n_errors) memcpy(grown, c->msgs, (size_t)c->n_errors * sizeof *grown);
        free(c->msgs);
        c->msgs = grown;
    }
    c->msgs[c->n_errors++] = (config_msg){loc, xstrdup(line)};
}

void config_report(config_ctx *c, config_loc loc, const char *key_path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report_v(c, loc, key_path, fmt, ap);
    va_end(ap);
}

void config_report_key(config_ctx *c, key_id k, key_id alt, const char *fmt, ...) {
    // A rule's message sits at the line of its key, or of the other key when this one
    // kept its default.
    config_loc loc = c->loc[k];
    if (!config_loc_known(loc) && alt < K_COUNT) loc = c->loc[alt];
    char path[64];
    va_list ap;
    va_start(ap, fmt);
    report_v(c, loc, config_key_path(k, path, sizeof path), fmt, ap);
    va_end(ap);
}

// Whether message a goes before b: file lines in order, then --set arguments in order,
// then messages with no place.
static int msg_before(const config_msg *a, const config_msg *b) {
    int ra = a->loc.set_index >= 0 ? 1 : a->loc.line > 0 ? 0 : 2;
    int rb = b->loc.set_index >= 0 ? 1 : b->loc.line > 0 ? 0 : 2;
    if (ra != rb) return ra < rb;
    if (a->loc.set_index != b->loc.set_index) return a->loc.set_index < b->loc.set_index;
    return a->loc.line < b->loc.line;
}

void config_report_total(config_ctx *c) {
    // Insertion sort: stable and the lists are short.
    for (int i = 1; i < c->n_errors; i++) {
        config_msg m = c->msgs[i];
        int j = i;
        for (; j > 0 && msg_before(&m, &c->msgs[j - 1]); j--) c->msgs[j] = c->msgs[j - 1];
        c->msgs[j] = m;
    }
    // Written in one call, so that the lines of several ranks do not interleave.
    size_t len = 0;
    for (int i = 0; i < c->n_errors; i++) len += strlen(c->msgs[i].text);
    char *all = xmalloc(len + 1), *at = all;
    for (int i = 0; i < c->n_errors; i++) {
        size_t n = strlen(c->msgs[i].text);
        memcpy(at, c->msgs[i].text, n);
        at += n;
        free(c->msgs[i].text);
    }
    *at = '\0';
    fprintf(stderr, "%s%d error%s in %s; fix %s and run again\n", all, c->n_errors,
            c->n_errors == 1 ? "" : "s", c->path, c->n_errors == 1 ? "it" : "them");
    free(all);
    free(c->msgs);
    c->msgs = NULL;
    c->cap_msgs = 0;
}

// ---------------------------------------------------------------------------------------
// Did you mean

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), so that
// the usual typo "n_haed" is one edit from "n_head".
static int edit_distance(const char *a, const char *b) {
    enum { MAXLEN = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= MAXLEN || lb >= MAXLEN) return MAXLEN;
    int d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

// How close `typed` is to `cand`: the edit distance when it is a plausible typo (at most
// 2, or one is a prefix of the other), else -1.
static int closeness(const char *typed, const char *cand) {
    int dist = edit_distance(typed, cand);
    if (dist <= 2 && dist < (int)strlen(typed)) return dist; // "lr" is not a typo of "tp"
    size_t lt = strlen(typed), lc = strlen(cand);
    if (lt >= 2 && (!strncasecmp(typed, cand, lt) || !strncasecmp(cand, typed, lc))) return dist;
    return -1;
}

// The closest of the names in `names` (NULL-terminated), or NULL when none is close.
const char *config_closest_name(const char *typed, const char *const *names) {
    const char *best = NULL;
    int best_d = 0, tied = 0;
    for (int i = 0; names[i]; i++) {
        int d = strcasecmp(typed, names[i]) ? closeness(typed, names[i]) : 0;
        if (d < 0 || (best && d > best_d)) continue;
        tied = best && d == best_d;
        if (!tied) best = names[i], best_d = d;
    }
    // A tie ("fp16": fp32 or bf16?) would be a guess; the caller lists the choices instead.
    return tied ? NULL : best;
}

// The key of `section` closest to `typed`; failing that, the one key of that exact name in
// another section (a key put under the wrong section). -1 when nothing fits or it is a tie.
int config_suggest_key(const char *section, const char *typed) {
    int best = -1, best_d = 0, tied = 0;
    for (int k = 0; k < K_COUNT; k++) {
        if (section && strcmp(CONFIG_KEYS[k].section, section)) continue;
        int d = closeness(typed, CONFIG_KEYS[k].key);
        if (d < 0 || (best >= 0 && d > best_d)) continue;
        tied = best >= 0 && d == best_d;
        if (!tied) best = k, best_d = d;
    }
    if (best >= 0) return tied ? -1 : best;
    int found = -1, n_found = 0;
    for (int k = 0; k < K_COUNT; k++)
        if (!strcmp(CONFIG_KEYS[k].key, typed)) found = k, n_found++;
    return n_found == 1 ? found : -1;
}

static const char *suggest_section(const char *typed) {
    const char *sections[K_COUNT + 1];
    int n = 0;
    for (int k = 0; k < K_COUNT; k++)
        if (k == 0 || strcmp(CONFIG_KEYS[k].section, CONFIG_KEYS[k - 1].section))
            sections[n++] = CONFIG_KEYS[k].section;
    sections[n] = NULL;
    return config_closest_name(typed, sections);
}

// Appends "a, b, c" (the keys of `section`, or every section when NULL) to buf.
static void list_names(const char *section, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < K_COUNT && used < n; k++) {
        const key_desc *d = &CONFIG_KEYS[k];
        if (section ? strcmp(d->section, section) != 0
                    : k > 0 && !strcmp(d->section, CONFIG_KEYS[k - 1].section))
            continue;
        used += snprintf(buf + used, n - used, "%s%s", used ? ", " : "",
                         section ? d->key : d->section);
    }
}

void config_report_unknown_key(config_ctx *c, config_loc loc, const char *section,
                               const char *key) {
    char path[256], hint[512];
    snprintf(path, sizeof path, "%s.%s", section, key);
    int s = config_suggest_key(section, key);
    if (s >= 0) {
        config_report(c, loc, path, "unknown key; did you mean %s.%s?", CONFIG_KEYS[s].section,
                      CONFIG_KEYS[s].key);
        return;
    }
    list_names(section, hint, sizeof hint);
    config_report(c, loc, path, "unknown key; the keys of %s are: %s", section, hint);
}

void config_report_unknown_section(config_ctx *c, config_loc loc, const char *name) {
    char hint[512];
    int k = config_suggest_key(NULL, name);
    const char *s = suggest_section(name);
    if (k >= 0 && !strcmp(CONFIG_KEYS[k].key, name)) {
        config_report(c, loc, name, "unknown section; did you mean %s.%s? (keys go under their "
                      "section)", CONFIG_KEYS[k].section, CONFIG_KEYS[k].key);
    } else if (s) {
        config_report(c, loc, name, "unknown section; did you mean %s?", s);
    } else {
        list_names(NULL, hint, sizeof hint);
        config_report(c, loc, name, "unknown section; the sections are: %s", hint);
    }
}

// ---------------------------------------------------------------------------------------
// Ranges and rules

#define KEYS_OK(c, ...)                                                                      \
    keys_ok((c), (const key_id[]){__VA_ARGS__}, sizeof((key_id[]){__VA_ARGS__}) / sizeof(key_id))

static int keys_ok(const config_ctx *c, const key_id *keys, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (c->bad[keys[i]]) return 0;
    return 1;
}

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
                          "that divides %d", h, tp, h);
    long long width = 4LL * cfg->model.d_model;
    if (KEYS_OK(c, K_PAR_TP, K_MODEL_D_MODEL) && width % tp != 0)
        config_report_key(c, K_PAR_TP, K_MODEL_D_MODEL,
                          "the MLP width 4 * model.d_model (%lld) must be divisible by "
                          "parallel.tp (%d); choose a tp that divides %lld", width, tp, width);
    int seq = cfg->model.seq_len;
    if (cfg->parallel.sequence_parallel &&
        KEYS_OK(c, K_PAR_TP, K_MODEL_SEQ_LEN, K_PAR_SEQUENCE_PARALLEL) && seq % tp != 0)
        config_report_key(c, K_PAR_SEQUENCE_PARALLEL, K_MODEL_SEQ_LEN,
                          "sequence parallelism splits model.seq_len (%d) over parallel.tp (%d), "
                          "which must divide it; choose a seq_len that is a multiple of %d, or "
                          "set sequence_parallel: false", seq, tp, tp);
}

static void check_vocab(config_ctx *c, const run_config *cfg) {
    if (!KEYS_OK(c, K_MODEL_VOCAB_SIZE, K_MODEL_VOCAB_PAD_TO, K_PAR_TP)) return;
    long long mult = (long long)cfg->model.vocab_pad_to * cfg->parallel.tp;
    long long padded = (cfg->model.vocab_size + mult - 1) / mult * mult;
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
                          "virtual_stages whose product divides %d", L, pp, v, chunks, L);
    if (!KEYS_OK(c, K_PAR_SCHEDULE, K_PAR_VIRTUAL_STAGES)) return;
    if (s == SCHEDULE_INTERLEAVED && v < 2)
        config_report_key(c, K_PAR_SCHEDULE, K_PAR_VIRTUAL_STAGES,
                          "schedule interleaved needs parallel.virtual_stages >= 2 (got %d); "
                          "set virtual_stages: 2 or more, or use schedule: 1f1b", v);
    if (s == SCHEDULE_INTERLEAVED && KEYS_OK(c, K_PAR_PP) && pp < 2)
        config_report_key(c, K_PAR_SCHEDULE, K_PAR_PP,
                          "schedule interleaved needs parallel.pp >= 2 (got %d): its virtual "
                          "stages pass activations between pipeline ranks; use schedule: 1f1b "
                          "with pp: 1", pp);
    if (s != SCHEDULE_INTERLEAVED && v > 1)
        config_report_key(c, K_PAR_VIRTUAL_STAGES, K_PAR_SCHEDULE,
                          "%d virtual stages need parallel.schedule: interleaved (got %s); set "
                          "schedule: interleaved, or virtual_stages: 1", v,
                          config_schedule_name(s));
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
                          "multiple of %lld", gb, mb, dp, per_mb, per_mb);
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
        // Interleaved 1F1B runs micro-batches in groups of pp through each chunk.
        config_report_key(c, K_PAR_SCHEDULE, K_TRAIN_GLOBAL_BATCH,
                          "schedule interleaved needs the micro-batches per step "
                          "(train.global_batch / (train.micro_batch * parallel.dp) = %lld) to "
                          "be a multiple of parallel.pp (%d); choose a global_batch that is a "
                          "multiple of %lld", m, pp, per_mb * pp);
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
                          "choose a global_batch that is a multiple of %d", gb, mb, mb);
    }
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
        config_report(&c, (config_loc){0, -1}, NULL, "the world size must be >= 1 (got %d)",
                      world);
    } else {
        dp = world_dp(&c, cfg, world);
        if (dp > 0) check_batch_split(&c, cfg, dp);
        if (cfg->system.comm == COMM_SELF && world > 1)
            config_report_key(&c, K_SYS_COMM, K_COUNT,
                              "comm self runs a single process, but the world has %d ranks; use "
                              "comm: auto", world);
    }
    if (c.n_errors) {
        config_report_total(&c);
        return TRI_ERR_CONFIG;
    }
    cfg->parallel.dp = dp;
    return TRI_OK;
}

int config_micro_batches(const run_config *cfg) {
    TRI_ASSERT(cfg->parallel.dp >= 1); // resolved by config_resolve_world
    return cfg->train.global_batch / (cfg->train.micro_batch * cfg->parallel.dp);
}

int config_padded_vocab(const run_config *cfg) {
    return model_padded_vocab(&cfg->model, cfg->parallel.tp);
}
