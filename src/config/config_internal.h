// config_internal.h: what config.c (table, parsing, printing) and config_check.c (rules
// between keys, world size) share. Not for other modules: they use config.h.
#pragma once
#include "config/config.h"

#include <inttypes.h>

typedef enum { KT_INT, KT_U64, KT_F64, KT_BOOL, KT_STR, KT_ENUM, KT_DP } key_type;

// Every key, in DESIGN.md order; indexes CONFIG_KEYS.
typedef enum {
    K_RUN_NAME, K_RUN_OUT_DIR, K_RUN_SEED,
    K_MODEL_ARCH, K_MODEL_N_LAYER, K_MODEL_N_HEAD, K_MODEL_D_MODEL, K_MODEL_SEQ_LEN,
    K_MODEL_VOCAB_SIZE, K_MODEL_VOCAB_PAD_TO, K_MODEL_INIT_FROM,
    K_PAR_TP, K_PAR_PP, K_PAR_DP, K_PAR_VIRTUAL_STAGES, K_PAR_SCHEDULE, K_PAR_ZERO,
    K_PAR_SEQUENCE_PARALLEL, K_PAR_RECOMPUTE, K_PAR_BUCKET_MB, K_PAR_ZERO3_GATHER, K_PAR_OVERLAP,
    K_TRAIN_MICRO_BATCH, K_TRAIN_GLOBAL_BATCH, K_TRAIN_STEPS, K_TRAIN_PRECISION,
    K_TRAIN_GRAD_DTYPE, K_TRAIN_REDUCE_DTYPE, K_TRAIN_GRAD_CLIP,
    K_OPT_LR, K_OPT_MIN_LR, K_OPT_WARMUP_STEPS, K_OPT_DECAY, K_OPT_BETA1, K_OPT_BETA2,
    K_OPT_EPS, K_OPT_WEIGHT_DECAY,
    K_DATA_TRAIN, K_DATA_VAL, K_DATA_EVAL_EVERY, K_DATA_EVAL_BATCHES,
    K_CKPT_DIR, K_CKPT_EVERY, K_CKPT_KEEP, K_CKPT_ASYNC, K_CKPT_RESUME,
    K_LOG_EVERY, K_LOG_METRICS,
    K_SYS_BACKEND, K_SYS_COMM, K_SYS_THREADS, K_SYS_COMM_TIMEOUT_S,
    K_COUNT
} key_id;

typedef struct {
    const char *section, *key;
    key_type type;
    size_t offset;                  // of the field in run_config
    double lo, hi;                  // INT, F64, DP: allowed range
    unsigned char lo_open, hi_open; // F64: the bound itself is excluded
    const char *const *names;       // ENUM: value names by value; STR: the allowed values
    unsigned char nullable;         // STR: null (NULL) allowed
    double def_num;                 // default of numeric, bool and enum keys
    const char *def_str;            // default of STR keys
} key_desc;

extern const key_desc CONFIG_KEYS[K_COUNT];

// Where a value came from: a line of the file, or the --set argument with that index.
typedef struct { int line; int set_index; } config_loc;

typedef struct { config_loc loc; char *text; } config_msg;

// The state of one validation: where each key was set, which values were rejected (rules
// between keys skip those, so one mistake gives one message) and the messages so far,
// which config_report_total prints in file order.
typedef struct {
    const char *path; // the config file, for messages
    char **sets;      // the --set arguments, for messages
    int n_errors;
    int cur_set;      // the --set being parsed, -1 for none
    config_loc loc[K_COUNT];
    unsigned char bad[K_COUNT];
    config_msg *msgs; // n_errors of them
    int cap_msgs;
} config_ctx;

static inline int config_loc_known(config_loc loc) { return loc.line > 0 || loc.set_index >= 0; }

// config.c
int config_key_int(const run_config *cfg, key_id k);
double config_key_f64(const run_config *cfg, key_id k);
void config_range_text(key_id k, char *buf, size_t n); // "must be >= 1", "must be in [0, 1)"
void config_format_double(double v, char *buf, size_t n); // shortest exact text

// config_check.c: messages and "did you mean"
void config_ctx_init(config_ctx *c, const char *path, char **sets);
const char *config_key_path(key_id k, char *buf, size_t n); // "section.key"
// "WHERE: key.path: message"; each call counts one error.
void config_report(config_ctx *c, config_loc loc, const char *key_path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Same, at key k's origin (or alt's, when k kept its default); alt = K_COUNT for none.
void config_report_key(config_ctx *c, key_id k, key_id alt, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Prints the messages sorted by line (file lines, then --set arguments in order, then the
// rest), then "N errors in FILE; fix them and run again", and frees them. Must follow
// any config_report when n_errors > 0.
void config_report_total(config_ctx *c);
// The closest of `names` (NULL-terminated) to `typed`, or NULL when none is close.
const char *config_closest_name(const char *typed, const char *const *names);
// The key of `section` (NULL: any) closest to `typed`, else a key of exactly that name in
// another section; -1 when nothing fits.
int config_suggest_key(const char *section, const char *typed);
void config_report_unknown_key(config_ctx *c, config_loc loc, const char *section,
                               const char *key);
void config_report_unknown_section(config_ctx *c, config_loc loc, const char *name);

// config_check.c: ranges of single keys, then the rules between keys
void config_check_ranges(config_ctx *c, const run_config *cfg);
void config_check_rules(config_ctx *c, const run_config *cfg);
