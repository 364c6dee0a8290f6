// config_diag_internal.h: what is wrong with a config and how to say it: messages collected
// with their origin (a line of the file or a --set argument), printed sorted in one write,
// and "did you mean" for unknown names. Private to src/config: other modules use config.h.
#pragma once
#include "config/config_keys_internal.h"

// Where a value came from: a line of the file, or the --set argument with that index.
typedef struct {
    int line;
    int set_index;
} config_loc;

typedef struct {
    config_loc loc;
    char *text;
} config_msg;

// The state of one validation: where each key was set, which values were rejected (rules
// between keys skip those, so one mistake gives one message) and the messages so far,
// which config_report_total prints in file order.
typedef struct {
    const char *path;   // the config file, for messages
    char **sets;        // the --set arguments, for messages
    int sets_from_path; // the sets are what `path` gives (config_load_sets): messages name it,
                        // not the "--set" no user typed, and no count line follows them
    int n_errors;
    int cur_set; // the --set being parsed, -1 for none
    config_loc loc[K_COUNT];
    unsigned char bad[K_COUNT];
    config_msg *msgs; // n_errors of them
    int cap_msgs;
} config_ctx;

static inline int config_loc_known(config_loc loc) { return loc.line > 0 || loc.set_index >= 0; }

// Whether none of the keys was rejected: a rule runs only then (one mistake, one message).
static inline int config_keys_ok(const config_ctx *c, const key_id *keys, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (c->bad[keys[i]]) return 0;
    return 1;
}
#define KEYS_OK(c, ...)                                                                            \
    config_keys_ok((c), (const key_id[]){__VA_ARGS__},                                             \
                   sizeof((key_id[]){__VA_ARGS__}) / sizeof(key_id))

void config_ctx_init(config_ctx *c, const char *path, char **sets);
// "WHERE: key.path: message"; each call counts one error.
void config_report(config_ctx *c, config_loc loc, const char *key_path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Same, at key k's origin (or alt's, when k kept its default); alt = K_COUNT for none.
void config_report_key(config_ctx *c, key_id k, key_id alt, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Prints the messages sorted by line (file lines, then --set arguments in order, then the
// rest), then "N errors in FILE; fix them and run again" (not under sets_from_path: the caller
// says what to do), and frees them. Must follow
// any config_report when n_errors > 0.
void config_report_total(config_ctx *c);
// Frees the messages without printing them, after copying the first (its text without the
// "WHERE: " prefix and newline) into first[n] when first is not NULL.
void config_report_discard(config_ctx *c, char *first, size_t n);

// The value of `names` (NULL-terminated) that `typed` means: one it is another name for
// ("bfloat16": bf16), else the closest by edit distance; NULL when none is close.
const char *config_suggest_value(const char *typed, const char *const *names);
// The key of `section` (NULL: any) closest to `typed`, else a key of exactly that name in
// another section; -1 when nothing fits.
int config_suggest_key(const char *section, const char *typed);
void config_report_unknown_key(config_ctx *c, config_loc loc, const char *section, const char *key);
void config_report_unknown_section(config_ctx *c, config_loc loc, const char *name);
