// config_keys_internal.h: the one table of config keys (DESIGN.md "Config (YAML)") and typed
// access to a key's field in run_config. Private to src/config: other modules use config.h.
//
// The config layer is split by responsibility, each part with its own private header
// (config_X.c implements config_X_internal.h and its share of config.h), every dependency
// one way (lowest first):
//   config_keys     the key table, enum value names, a key's field, path and range text
//   config_derived  quantities derived from keys (micro-batches per step, padded vocabulary)
//   config_layout   what the modules take (mesh, model layout, ZeRO config) and the sum of
//                   their buffer specs for one rank (config_layout.h, public)
//   config_print    the resolved config as YAML or JSON; the shortest exact text of a number
//   config_diag     messages: collection with their origin, sorting, "did you mean"
//   config_values   one YAML value into one key: tags, quotes, the key's type
//   config_sources  data.train's and data.val's list forms (weighted sources, named sets)
//   config_sizes    what the keys imply for ints, the parameter table and a rank's buffers
//   config_rules    ranges of single keys, rules between keys, rules of the world size
//   config_parse    defaults, the YAML file (libyaml), --set overrides, config_load
// Parsing, --set, defaults, printing, range checks and "did you mean" all walk the table;
// only the rules that tie several keys together are written out (config_rules.c).
#pragma once
#include "config/config.h"

#include <inttypes.h>

// KT_SOURCES: data.train and data.val, a glob or a list (config_sources.c).
typedef enum { KT_INT, KT_U64, KT_F64, KT_BOOL, KT_STR, KT_ENUM, KT_DP, KT_SOURCES } key_type;

// Every key, in DESIGN.md order; indexes CONFIG_KEYS.
// clang-format off
typedef enum {
    K_RUN_NAME, K_RUN_OUT_DIR, K_RUN_SEED,
    K_MODEL_ARCH, K_MODEL_N_LAYER, K_MODEL_N_HEAD, K_MODEL_D_MODEL, K_MODEL_SEQ_LEN,
    K_MODEL_VOCAB_SIZE, K_MODEL_VOCAB_PAD_TO, K_MODEL_INIT_FROM,
    K_MODEL_N_KV_HEAD, K_MODEL_FFN_HIDDEN, K_MODEL_FFN_MULTIPLE_OF, K_MODEL_TIE_EMBEDDINGS,
    K_MODEL_ROPE_THETA, K_MODEL_NORM_EPS,
    K_PAR_TP, K_PAR_PP, K_PAR_DP, K_PAR_VIRTUAL_STAGES, K_PAR_SCHEDULE, K_PAR_ZERO,
    K_PAR_SEQUENCE_PARALLEL, K_PAR_RECOMPUTE, K_PAR_BUCKET_MB, K_PAR_ZERO3_GATHER, K_PAR_OVERLAP,
    K_TRAIN_MICRO_BATCH, K_TRAIN_GLOBAL_BATCH, K_TRAIN_STEPS, K_TRAIN_PRECISION,
    K_TRAIN_GRAD_DTYPE, K_TRAIN_REDUCE_DTYPE, K_TRAIN_GRAD_CLIP,
    K_OPT_LR, K_OPT_MIN_LR, K_OPT_WARMUP_STEPS, K_OPT_DECAY, K_OPT_BETA1, K_OPT_BETA2,
    K_OPT_EPS, K_OPT_WEIGHT_DECAY,
    K_DATA_TRAIN, K_DATA_VAL, K_DATA_SHUFFLE, K_DATA_EVAL_EVERY, K_DATA_EVAL_BATCHES,
    K_DATA_TOKENIZER,
    K_CKPT_DIR, K_CKPT_EVERY, K_CKPT_KEEP, K_CKPT_ASYNC, K_CKPT_RESUME, K_CKPT_RESUME_CHANGES,
    K_LOG_EVERY, K_LOG_METRICS, K_LOG_METRICS_REQUIRED, K_LOG_TENSORBOARD,
    K_LOG_STRAGGLER_PCT, K_LOG_STRAGGLER_STEPS,
    K_SYS_BACKEND, K_SYS_COMM, K_SYS_THREADS, K_SYS_COMM_TIMEOUT_S, K_SYS_INIT_TIMEOUT_S,
    K_SYS_DEVICE_PROFILE,
    K_COUNT
} key_id;
// clang-format on

typedef struct {
    const char *section, *key;
    key_type type;
    size_t offset;                  // of the field in run_config
    double lo, hi;                  // INT, F64, DP: allowed range
    unsigned char lo_open, hi_open; // F64: the bound itself is excluded
    const char *const *names;       // ENUM: value names by value; STR: the allowed values
    unsigned char nullable;         // STR: null (NULL) allowed
    double def_num;                 // default of numeric, bool and enum keys
    const char *def_str;            // default of STR keys, and the glob of SOURCES keys
    // On a resume whose value differs from the checkpoint's (config_resume.c): the key's
    // class, and what the change does, said after "resume: key FROM -> TO: " (config_resume.c
    // adds numbers for some keys: the layout, the steps, the schedule).
    resume_class resume;
    const char *effect;
    // The value (as YAML text) of a checkpoint whose manifest does not record this key: one
    // written before the key existed, under the behaviour before it. NULL: the default.
    const char *absent;
} key_desc;

extern const key_desc CONFIG_KEYS[K_COUNT];
_Static_assert(K_COUNT <= CONFIG_KEYS_MAX, "run_config.given needs room for every key");

// The field of key k in cfg: an int for INT, DP, BOOL and ENUM keys (enum fields are
// int-sized), a uint64_t for U64, a double for F64, a char * (owned, or NULL) for STR, a
// config_data_sources (owned) for SOURCES.
void *config_key_field(run_config *cfg, key_id k);
const void *config_key_cfield(const run_config *cfg, key_id k);
int config_key_int(const run_config *cfg, key_id k);
double config_key_f64(const run_config *cfg, key_id k);

// The first key of section `name`, or -1 when there is no such section.
int config_section_first_key(const char *name);
// The key `section`.`key`, or -1.
int config_find_key(const char *section, const char *key);

// names[v] for 0 <= v < count, else "?" (names is NULL-terminated; count may exceed it
// only when v is known to be in range).
const char *config_enum_name(const char *const *names, int count, int v);

const char *config_key_path(key_id k, char *buf, size_t n); // "section.key"
void config_range_text(key_id k, char *buf, size_t n);      // "must be >= 1", "must be in [0, 1)"
