// config_keys.c: the table of every config key (section, name, type, place in run_config,
// allowed range, enum names, nullability, default), the names of enum values, and what is
// read off the table alone: a key's field, its path and the text of its range.
#include "config/config_keys_internal.h"

#include <limits.h>
#include <math.h>
#include <string.h>

// Enum-typed fields are written through int pointers by the table-driven code.
_Static_assert(sizeof(schedule_kind) == sizeof(int) && sizeof(tri_dtype) == sizeof(int) &&
                   sizeof(decay_kind) == sizeof(int) && sizeof(backend_kind) == sizeof(int) &&
                   sizeof(comm_kind) == sizeof(int) && sizeof(recompute_kind) == sizeof(int) &&
                   sizeof(zero3_gather_kind) == sizeof(int) &&
                   sizeof(precision_kind) == sizeof(int) &&
                   sizeof(resume_changes_kind) == sizeof(int),
               "enum fields must be int-sized");

// Value names, indexed by the enum value, NULL-terminated.
static const char *const SCHEDULE_NAMES[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", NULL};
static const char *const DTYPE_NAMES[] = {"fp32", "bf16", NULL};
static const char *const PRECISION_NAMES[] = {"fp32", "bf16", "tf32", NULL};
static const char *const DECAY_NAMES[] = {"cosine", "linear", "constant", NULL};
static const char *const BACKEND_NAMES[] = {"auto", "cpu", "cuda", NULL};
static const char *const COMM_NAMES[] = {"auto", "mpi", "nccl", "self", NULL};
static const char *const RECOMPUTE_NAMES[] = {"none", "full", NULL};
static const char *const ZERO3_GATHER_NAMES[] = {"pass", "step", NULL};
static const char *const ARCH_NAMES[] = {"gpt2", "llama", NULL};
static const char *const RESUME_CHANGES_NAMES[] = {"refuse", "allow", NULL};

// The table is laid out by hand: one key per line where it fits, its resume class and effect
// on the next.
// clang-format off
#define OFF(field) offsetof(run_config, field)
// Every key ends with its resume class and effect (FREE, GUARDED or FIXED below), and may add
// more fields (.absent).
#define INT_KEY(id, sec, name, min_v, max_v, def, ...)                                       \
    [id] = {.section = #sec, .key = #name, .type = KT_INT, .offset = OFF(sec.name),          \
            .lo = (min_v), .hi = (max_v), .def_num = (def), __VA_ARGS__}
// A real-valued key; lo_open/hi_open make the bound exclusive.
#define F64_KEY(id, sec, name, min_v, lo_op, max_v, hi_op, def, ...)                         \
    [id] = {.section = #sec, .key = #name, .type = KT_F64, .offset = OFF(sec.name),          \
            .lo = (min_v), .hi = (max_v), .lo_open = (lo_op), .hi_open = (hi_op),            \
            .def_num = (def), __VA_ARGS__}
#define ENUM_KEY(id, sec, name, value_names, def, ...)                                       \
    [id] = {.section = #sec, .key = #name, .type = KT_ENUM, .offset = OFF(sec.name),         \
            .names = (value_names), .def_num = (def), __VA_ARGS__}
#define STR_KEY(id, sec, name, null_ok, def, ...)                                            \
    [id] = {.section = #sec, .key = #name, .type = KT_STR, .offset = OFF(sec.name),          \
            .nullable = (null_ok), .def_str = (def), __VA_ARGS__}
#define BOOL_KEY(id, sec, name, def, ...)                                                    \
    [id] = {.section = #sec, .key = #name, .type = KT_BOOL, .offset = OFF(sec.name),         \
            .def_num = (def), __VA_ARGS__}
#define FREE(text) .resume = RESUME_FREE, .effect = (text)
#define RESHARDED FREE("the checkpoint is resharded to the new layout")
#define GUARDED(text) .resume = RESUME_GUARDED, .effect = (text)
#define FIXED(text) .resume = RESUME_FIXED, .effect = (text)
// data.train, data.val: a glob, or a list (config_sources.c); the default is a glob.
#define SOURCES_KEY(id, sec, name, def, ...)                                                 \
    [id] = {.section = #sec, .key = #name, .type = KT_SOURCES, .offset = OFF(sec.name),      \
            .def_str = (def), __VA_ARGS__}
#define NO_MAX ((double)INT_MAX)

// In DESIGN.md order; printing follows this order.
const key_desc CONFIG_KEYS[K_COUNT] = {
    STR_KEY(K_RUN_NAME, run, name, 0, "trident",
            FREE("the run's name in logs and in the run record")),
    STR_KEY(K_RUN_OUT_DIR, run, out_dir, 0, "runs/trident", // re-derived from run.name
            FREE("metrics.jsonl and model.bin are written to the new directory")),
    [K_RUN_SEED] = {.section = "run", .key = "seed", .type = KT_U64, .offset = OFF(run.seed),
                    .def_num = 1234,
                    GUARDED("the weights come from the checkpoint, but what the seed draws "
                            "from here on (the data order) is another draw")},
    [K_MODEL_ARCH] = {.section = "model", .key = "arch", .type = KT_STR,
                      .offset = OFF(model.arch), .names = ARCH_NAMES, .def_str = "gpt2",
                      FIXED("the checkpoint's tensors are another architecture's")},
    INT_KEY(K_MODEL_N_LAYER, model, n_layer, 1, NO_MAX, 4,
            FIXED("the checkpoint holds the tensors of another number of layers")),
    INT_KEY(K_MODEL_N_HEAD, model, n_head, 1, NO_MAX, 4,
            FIXED("the same weights split into other heads would be another model")),
    INT_KEY(K_MODEL_D_MODEL, model, d_model, 1, NO_MAX, 128,
            FIXED("the checkpoint's tensors are d_model wide")),
    INT_KEY(K_MODEL_SEQ_LEN, model, seq_len, 1, NO_MAX, 256,
            FIXED("the checkpoint's position embedding (wpe) has seq_len rows")),
    INT_KEY(K_MODEL_VOCAB_SIZE, model, vocab_size, 1, NO_MAX, 256,
            FIXED("the checkpoint's token embedding (wte) has vocab_size rows")),
    INT_KEY(K_MODEL_VOCAB_PAD_TO, model, vocab_pad_to, 1, NO_MAX, 128,
            FREE("the vocabulary's padding changes (padded rows are zero and never "
                 "predicted)")),
    STR_KEY(K_MODEL_INIT_FROM, model, init_from, 1, NULL,
            FREE("none on the weights: a resumed run takes them from the checkpoint (the file "
                 "is still read and checked)")),
    // The Llama keys (0 and -1: the rule or the architecture's default, resolved at load by
    // config_resolve_model; the run record holds the resolved values).
    INT_KEY(K_MODEL_N_KV_HEAD, model, n_kv_head, 0, NO_MAX, 0,
            FIXED("the checkpoint's k and v projections have n_kv_head heads")),
    INT_KEY(K_MODEL_FFN_HIDDEN, model, ffn_hidden, 0, NO_MAX, 0,
            FIXED("the checkpoint's MLP tensors are ffn_hidden wide")),
    INT_KEY(K_MODEL_FFN_MULTIPLE_OF, model, ffn_multiple_of, 1, NO_MAX, 256,
            FIXED("the Llama rule gives another MLP width than the checkpoint's")),
    BOOL_KEY(K_MODEL_TIE_EMBEDDINGS, model, tie_embeddings, -1,
             FIXED("the checkpoint's LM head is tied to wte or is its own tensor (lm_head)")),
    F64_KEY(K_MODEL_ROPE_THETA, model, rope_theta, 0, 1, INFINITY, 0, 10000.0,
            FIXED("the same weights under other rotary angles would be another model")),
    F64_KEY(K_MODEL_NORM_EPS, model, norm_eps, 0, 1, 1, 0, 1.0e-5,
            FIXED("the same weights under another normalisation eps would be another model")),
    INT_KEY(K_PAR_TP, parallel, tp, 1, NO_MAX, 1, RESHARDED),
    INT_KEY(K_PAR_PP, parallel, pp, 1, NO_MAX, 1, RESHARDED),
    [K_PAR_DP] = {.section = "parallel", .key = "dp", .type = KT_DP, .offset = OFF(parallel.dp),
                  .lo = 1, .hi = NO_MAX, .def_num = DP_AUTO, RESHARDED},
    INT_KEY(K_PAR_VIRTUAL_STAGES, parallel, virtual_stages, 1, NO_MAX, 1, RESHARDED),
    ENUM_KEY(K_PAR_SCHEDULE, parallel, schedule, SCHEDULE_NAMES, SCHEDULE_1F1B,
             FREE("another order of the pipeline's work: the same gradients")),
    INT_KEY(K_PAR_ZERO, parallel, zero, 0, 3, 1,
            FREE("what is sharded over dp changes (a checkpoint loads into any ZeRO stage)")),
    BOOL_KEY(K_PAR_SEQUENCE_PARALLEL, parallel, sequence_parallel, 0,
             FREE("activations split over tp along the sequence or not: the same results up "
                  "to rounding")),
    ENUM_KEY(K_PAR_RECOMPUTE, parallel, recompute, RECOMPUTE_NAMES, RECOMPUTE_NONE,
             FREE("activation memory traded against compute: the same results")),
    F64_KEY(K_PAR_BUCKET_MB, parallel, bucket_mb, 0, 1, INFINITY, 0, 25,
            FREE("other buckets for the dp reduction: the same results")),
    ENUM_KEY(K_PAR_ZERO3_GATHER, parallel, zero3_gather, ZERO3_GATHER_NAMES, ZERO3_GATHER_PASS,
             FREE("ZeRO-3 gathers parameters at other times: the same results")),
    BOOL_KEY(K_PAR_OVERLAP, parallel, overlap, 1,
             FREE("communication overlaps compute or not: bitwise the same results")),
    INT_KEY(K_TRAIN_MICRO_BATCH, train, micro_batch, 1, NO_MAX, 8,
            FREE("gradient accumulation changes (the same global batch in other "
                 "micro-batches)")),
    INT_KEY(K_TRAIN_GLOBAL_BATCH, train, global_batch, 1, NO_MAX, 32,
            GUARDED("each step takes another number of sequences (the gradient's noise and "
                    "the data per step change)")),
    INT_KEY(K_TRAIN_STEPS, train, steps, 1, NO_MAX, 2000,
            FREE("training ends at another step, and the LR decay with it")),
    [K_TRAIN_PRECISION] = {.section = "train", .key = "precision", .type = KT_ENUM,
                           .offset = OFF(train.precision_mode), .names = PRECISION_NAMES,
                           .def_num = PRECISION_FP32,
                           GUARDED("parameters and activations in another precision (the fp32 "
                                   "values come from the checkpoint)")},
    ENUM_KEY(K_TRAIN_GRAD_DTYPE, train, grad_dtype, DTYPE_NAMES, DTYPE_FP32,
             GUARDED("gradients accumulated in another precision")),
    ENUM_KEY(K_TRAIN_REDUCE_DTYPE, train, reduce_dtype, DTYPE_NAMES, DTYPE_FP32,
             GUARDED("the dp reduction of the gradients in another precision")),
    F64_KEY(K_TRAIN_GRAD_CLIP, train, grad_clip, 0, 0, INFINITY, 0, 1.0,
            GUARDED("gradients clipped at another norm")),
    F64_KEY(K_OPT_LR, optim, lr, 0, 1, INFINITY, 0, 1.0e-3,
            GUARDED("another peak learning rate")),
    F64_KEY(K_OPT_MIN_LR, optim, min_lr, 0, 0, INFINITY, 0, 1.0e-4,
            GUARDED("the decay ends at another learning rate")),
    INT_KEY(K_OPT_WARMUP_STEPS, optim, warmup_steps, 0, NO_MAX, 100,
            GUARDED("a warmup of another length")),
    ENUM_KEY(K_OPT_DECAY, optim, decay, DECAY_NAMES, DECAY_COSINE,
             GUARDED("the learning rate decays in another shape")),
    F64_KEY(K_OPT_BETA1, optim, beta1, 0, 0, 1, 1, 0.9,
            GUARDED("Adam's first moment decays at another rate (the moments come from the "
                    "checkpoint)")),
    F64_KEY(K_OPT_BETA2, optim, beta2, 0, 0, 1, 1, 0.95,
            GUARDED("Adam's second moment decays at another rate (the moments come from the "
                    "checkpoint)")),
    F64_KEY(K_OPT_EPS, optim, eps, 0, 1, INFINITY, 0, 1.0e-8, GUARDED("another Adam epsilon")),
    F64_KEY(K_OPT_WEIGHT_DECAY, optim, weight_decay, 0, 0, INFINITY, 0, 0.1,
            GUARDED("another weight decay")),
    SOURCES_KEY(K_DATA_TRAIN, data, train, "data/kjv_train_*.bin",
            GUARDED("other training data or weights: each source goes on after the samples it "
                    "gave before")),
    SOURCES_KEY(K_DATA_VAL, data, val, "data/kjv_val_*.bin",
            FREE("val losses from here on are measured on the new set (not comparable with "
                 "the earlier ones)")),
    // No `absent` value: a checkpoint from before the key continues in its plain order, which
    // the data order it records says (io/data_order.h), with a line saying so.
    BOOL_KEY(K_DATA_SHUFFLE, data, shuffle, 1,
             GUARDED("the training samples come in another order from here on")),
    INT_KEY(K_DATA_EVAL_EVERY, data, eval_every, 0, NO_MAX, 200,
            FREE("evaluations at other steps")),
    INT_KEY(K_DATA_EVAL_BATCHES, data, eval_batches, 1, NO_MAX, 20,
            FREE("val losses from here on average another number of batches")),
    STR_KEY(K_DATA_TOKENIZER, data, tokenizer, 1, NULL, // recorded for `trident sample`
            GUARDED("another tokenizer recorded for the shards (trident sample decodes with "
                    "it)")),
    STR_KEY(K_CKPT_DIR, checkpoint, dir, 1, NULL,
            FREE("new checkpoints go to the new directory (the one resumed from is left as it "
                 "is)")),
    INT_KEY(K_CKPT_EVERY, checkpoint, every, 0, NO_MAX, 500, FREE("checkpoints at other steps")),
    INT_KEY(K_CKPT_KEEP, checkpoint, keep, 1, NO_MAX, 3,
            FREE("another number of checkpoints kept")),
    BOOL_KEY(K_CKPT_ASYNC, checkpoint, async, 1,
             FREE("checkpoints written in the background or inline: the same files")),
    STR_KEY(K_CKPT_RESUME, checkpoint, resume, 0, "auto",
            FREE("only which checkpoint a run resumes")),
    ENUM_KEY(K_CKPT_RESUME_CHANGES, checkpoint, resume_changes, RESUME_CHANGES_NAMES,
             RESUME_CHANGES_REFUSE, FREE("how a resume treats changed guarded keys")),
    INT_KEY(K_LOG_EVERY, log, every, 1, NO_MAX, 10, FREE("step lines at other intervals")),
    STR_KEY(K_LOG_METRICS, log, metrics, 1, NULL, FREE("metrics go to the new file")),
    BOOL_KEY(K_LOG_METRICS_REQUIRED, log, metrics_required, 1,
             FREE("what a failed metrics write does")),
    STR_KEY(K_LOG_TENSORBOARD, log, tensorboard, 1, NULL,
            FREE("event files go to the new directory")),
    F64_KEY(K_LOG_STRAGGLER_PCT, log, straggler_pct, 0, 1, INFINITY, 0, 20,
            FREE("another threshold for the straggler warning")),
    INT_KEY(K_LOG_STRAGGLER_STEPS, log, straggler_steps, 1, NO_MAX, 3,
            FREE("another number of logged steps for the straggler warning")),
    ENUM_KEY(K_SYS_BACKEND, system, backend, BACKEND_NAMES, BACKEND_AUTO,
             FREE("another compute backend: the same model, results equal up to rounding")),
    ENUM_KEY(K_SYS_COMM, system, comm, COMM_NAMES, COMM_AUTO, FREE("another comm backend")),
    INT_KEY(K_SYS_THREADS, system, threads, 0, NO_MAX, 0,
            FREE("another number of compute threads")),
    F64_KEY(K_SYS_COMM_TIMEOUT_S, system, comm_timeout_s, 0, 1, INFINITY, 0, 300,
            FREE("another collective timeout")),
    F64_KEY(K_SYS_INIT_TIMEOUT_S, system, init_timeout_s, 0, 0, INFINITY, 0, 300, // 0 = off
            FREE("another start-up deadline")),
    STR_KEY(K_SYS_DEVICE_PROFILE, system, device_profile, 1, NULL,
            FREE("the run record's predicted step time comes from another device profile")),
};
// clang-format on

// ---------------------------------------------------------------------------------------
// Enum names

const char *config_enum_name(const char *const *names, int count, int v) {
    return v >= 0 && v < count ? names[v] : "?";
}
const char *config_schedule_name(schedule_kind s) {
    return config_enum_name(SCHEDULE_NAMES, 5, (int)s);
}
const char *config_decay_name(decay_kind d) { return config_enum_name(DECAY_NAMES, 3, (int)d); }
const char *config_backend_name(backend_kind b) {
    return config_enum_name(BACKEND_NAMES, 3, (int)b);
}
const char *config_comm_name(comm_kind c) { return config_enum_name(COMM_NAMES, 4, (int)c); }
const char *config_precision_name(precision_kind p) {
    return config_enum_name(PRECISION_NAMES, 3, (int)p);
}
const char *config_recompute_name(recompute_kind r) {
    return config_enum_name(RECOMPUTE_NAMES, 2, (int)r);
}

// ---------------------------------------------------------------------------------------
// Field access, lookup, paths and ranges

void *config_key_field(run_config *cfg, key_id k) { return (char *)cfg + CONFIG_KEYS[k].offset; }
const void *config_key_cfield(const run_config *cfg, key_id k) {
    return (const char *)cfg + CONFIG_KEYS[k].offset;
}
int config_key_int(const run_config *cfg, key_id k) {
    return *(const int *)config_key_cfield(cfg, k);
}
double config_key_f64(const run_config *cfg, key_id k) {
    return *(const double *)config_key_cfield(cfg, k);
}

int config_section_first_key(const char *name) {
    for (int k = 0; k < K_COUNT; k++)
        if (!strcmp(CONFIG_KEYS[k].section, name)) return k;
    return -1;
}

int config_find_key(const char *section, const char *key) {
    for (int k = 0; k < K_COUNT; k++)
        if (!strcmp(CONFIG_KEYS[k].section, section) && !strcmp(CONFIG_KEYS[k].key, key)) return k;
    return -1;
}

const char *config_key_path(key_id k, char *buf, size_t n) {
    snprintf(buf, n, "%s.%s", CONFIG_KEYS[k].section, CONFIG_KEYS[k].key);
    return buf;
}

// "must be >= 1", "must be in 0..3", "must be > 0", "must be in [0, 1)".
void config_range_text(key_id k, char *buf, size_t n) {
    const key_desc *d = &CONFIG_KEYS[k];
    char lo[40], hi[40];
    snprintf(lo, sizeof lo, "%g", d->lo);
    snprintf(hi, sizeof hi, "%g", d->hi);
    if (d->type != KT_F64) {
        if (d->hi >= NO_MAX) snprintf(buf, n, "must be >= %.0f", d->lo);
        else snprintf(buf, n, "must be in %.0f..%.0f", d->lo, d->hi);
    } else if (isinf(d->hi)) {
        snprintf(buf, n, "must be %s %s", d->lo_open ? ">" : ">=", lo);
    } else {
        snprintf(buf, n, "must be in %s%s, %s%s", d->lo_open ? "(" : "[", lo, hi,
                 d->hi_open ? ")" : "]");
    }
}
