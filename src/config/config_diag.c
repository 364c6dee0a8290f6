// config_diag.c: the message format, the sorted report, and "did you mean" for unknown
// sections, keys and enum values (config_diag_internal.h).
#include "config/config_diag_internal.h"

#include "base/suggest.h"

#include <stdarg.h>
#include <string.h>
#include <strings.h>

// ---------------------------------------------------------------------------------------
// Messages

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
    if (loc.set_index >= 0 && c->sets_from_path) snprintf(where, sizeof where, "%s", c->path);
    else if (loc.set_index >= 0) snprintf(where, sizeof where, "--set %s", c->sets[loc.set_index]);
    else if (loc.line > 0) snprintf(where, sizeof where, "%s:%d", c->path, loc.line);
    else snprintf(where, sizeof where, "%s", c->path);
    vsnprintf(msg, sizeof msg, fmt, ap);
    snprintf(line, sizeof line, "%s: %s%s%s\n", where, key_path ? key_path : "",
             key_path ? ": " : "", msg);
    c->msgs = xgrow(c->msgs, c->n_errors, &c->cap_msgs, sizeof *c->msgs);
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
    if (c->sets_from_path) fputs(all, stderr);
    else
        fprintf(stderr, "%s%d error%s in %s; fix %s and run again\n", all, c->n_errors,
                c->n_errors == 1 ? "" : "s", c->path, c->n_errors == 1 ? "it" : "them");
    free(all);
    free(c->msgs);
    c->msgs = NULL;
    c->cap_msgs = 0;
}

void config_report_discard(config_ctx *c, char *first, size_t n) {
    if (first && n) {
        first[0] = '\0';
        if (c->n_errors) {
            const char *text = c->msgs[0].text, *colon = strstr(text, ": ");
            snprintf(first, n, "%s", colon ? colon + 2 : text);
            size_t len = strlen(first);
            if (len && first[len - 1] == '\n') first[len - 1] = '\0';
        }
    }
    for (int i = 0; i < c->n_errors; i++) free(c->msgs[i].text);
    free(c->msgs);
    c->msgs = NULL;
    c->cap_msgs = 0;
    c->n_errors = 0;
}

// ---------------------------------------------------------------------------------------
// Did you mean

// Other names in use for a value (compared ignoring case): offered by "did you mean" where
// the key takes that value, never accepted as the value itself (a config names a value one
// way, which the run record and the checkpoint's manifest then repeat).
static const struct {
    const char *alias, *value;
} VALUE_ALIASES[] = {
    // clang-format off
    {"bfloat16", "bf16"}, {"bfloat", "bf16"}, {"fp16", "bf16"}, {"float16", "bf16"},
    {"half", "bf16"}, {"f16", "bf16"},
    {"float32", "fp32"}, {"f32", "fp32"}, {"float", "fp32"}, {"single", "fp32"},
    {"interleaved-1f1b", "interleaved"}, {"interleaved_1f1b", "interleaved"},
    {"1f1b-interleaved", "interleaved"}, {"vpp", "interleaved"},
    {"zbh1", "zb-h1"}, {"zb_h1", "zb-h1"}, {"zb1p", "zb-h1"}, {"zero-bubble", "zb-h1"},
    {"zb-v", "zbv"}, {"zb_v", "zbv"}, {"v", "zbv"},
    {"true", "full"}, {"yes", "full"}, {"on", "full"},
    {"false", "none"}, {"no", "none"}, {"off", "none"},
    {"none", "constant"}, {"off", "constant"}, {"cos", "cosine"},
    {"gpu", "cuda"}, {"host", "cpu"}, {"openmpi", "mpi"},
    // clang-format on
};

const char *config_suggest_value(const char *typed, const char *const *names) {
    for (size_t a = 0; a < sizeof VALUE_ALIASES / sizeof VALUE_ALIASES[0]; a++) {
        if (strcasecmp(typed, VALUE_ALIASES[a].alias)) continue;
        for (int i = 0; names[i]; i++)
            if (!strcmp(names[i], VALUE_ALIASES[a].value)) return names[i];
    }
    return suggest_closest(typed, names);
}

// The key of `section` closest to `typed`; failing that, the one key of that exact name in
// another section (a key put under the wrong section). -1 when nothing fits or it is a tie.
int config_suggest_key(const char *section, const char *typed) {
    int best = -1, best_d = 0, tied = 0;
    for (int k = 0; k < K_COUNT; k++) {
        if (section && strcmp(CONFIG_KEYS[k].section, section)) continue;
        int d = suggest_closeness(typed, CONFIG_KEYS[k].key);
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
    return suggest_closest(typed, sections);
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
        config_report(c, loc, name,
                      "unknown section; did you mean %s.%s? (keys go under their "
                      "section)",
                      CONFIG_KEYS[k].section, CONFIG_KEYS[k].key);
    } else if (s) {
        config_report(c, loc, name, "unknown section; did you mean %s?", s);
    } else {
        list_names(NULL, hint, sizeof hint);
        config_report(c, loc, name, "unknown section; the sections are: %s", hint);
    }
}
