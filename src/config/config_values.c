// config_values.c: one YAML value into one key under the rule for types, quotes and tags
// (config_values_internal.h).
#include "config/config_values_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <strings.h>

// ---------------------------------------------------------------------------------------
// What YAML makes of a value

#define YAML_TAG_PREFIX "tag:yaml.org,2002:"

void config_tags_collect(const yaml_event_t *e, void *ctx) {
    config_tags *t = ctx;
    if (e->type != YAML_SCALAR_EVENT || !e->data.scalar.tag) return; // none written
    t->items = xgrow(t->items, t->n, &t->cap, sizeof *t->items);
    t->items[t->n].index = e->start_mark.index;
    const char *tag = (const char *)e->data.scalar.tag;
    const size_t prefix = strlen(YAML_TAG_PREFIX);
    if (!strncmp(tag, YAML_TAG_PREFIX, prefix)) // written !!int
        snprintf(t->items[t->n].tag, sizeof t->items[t->n].tag, "!!%s", tag + prefix);
    else snprintf(t->items[t->n].tag, sizeof t->items[t->n].tag, "%s", tag);
    t->n++;
}

void config_tags_free(config_tags *t) {
    free(t->items);
    memset(t, 0, sizeof *t);
}

static value_kind kind_of_tag(const char *tag) {
    static const struct {
        const char *tag;
        value_kind kind;
    } known[] = {{"!!str", VALUE_STR},     {"!", VALUE_STR},       {"!!int", VALUE_INT},
                 {"!!float", VALUE_FLOAT}, {"!!bool", VALUE_BOOL}, {"!!null", VALUE_NULL}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(tag, known[i].tag)) return known[i].kind;
    return VALUE_OTHER_TAG;
}

scalar_view config_view_of(const yaml_node_t *node, const config_tags *tags) {
    scalar_view v = {.type = node->type, .text = "", .len = 0, .kind = VALUE_PLAIN};
    if (node->type != YAML_SCALAR_NODE) return v;
    v.text = (const char *)node->data.scalar.value;
    v.len = node->data.scalar.length;
    if (node->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
        node->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
        v.kind = VALUE_STR;
    for (int i = 0; tags && i < tags->n; i++) {
        if (tags->items[i].index != node->start_mark.index) continue;
        snprintf(v.tag, sizeof v.tag, "%s", tags->items[i].tag);
        v.kind = kind_of_tag(v.tag); // a written tag wins over quotes
    }
    return v;
}

int config_is_null(const scalar_view *v) {
    if (v->kind == VALUE_NULL) return 1;
    return v->kind == VALUE_PLAIN &&
           (v->len == 0 || !strcmp(v->text, "~") || !strcmp(v->text, "null") ||
            !strcmp(v->text, "Null") || !strcmp(v->text, "NULL"));
}

const char *config_describe(const scalar_view *v, char *buf, size_t n) {
    if (v->type == YAML_MAPPING_NODE) return "a mapping";
    if (v->type == YAML_SEQUENCE_NODE) return "a list";
    if (config_is_null(v) && !v->tag[0]) return "null";
    const char *ell = v->len > 60 ? "..." : "";
    char tagged[64] = "";
    if (v->tag[0]) snprintf(tagged, sizeof tagged, " (tagged %s)", v->tag);
    if (v->kind == VALUE_STR) snprintf(buf, n, "the string \"%.60s%s\"%s", v->text, ell, tagged);
    else snprintf(buf, n, "%.60s%s%s", v->text, ell, tagged);
    return buf;
}

void config_set_string(run_config *cfg, key_id k, const char *s) {
    char **slot = config_key_field(cfg, k);
    free(*slot);
    *slot = xstrdup(s);
}

// ---------------------------------------------------------------------------------------
// Into a key

// "one of a, b, c"
static void list_choices(const char *const *names, char *buf, size_t n) {
    size_t used = snprintf(buf, n, "one of");
    for (int i = 0; names[i] && used < n; i++)
        used += snprintf(buf + used, n - used, "%s %s", i ? "," : "", names[i]);
}

static void expected_desc(key_id k, char *buf, size_t n) {
    const key_desc *d = &CONFIG_KEYS[k];
    switch (d->type) {
    case KT_INT: snprintf(buf, n, "an integer"); break;
    case KT_U64: snprintf(buf, n, "an integer >= 0"); break;
    case KT_F64: snprintf(buf, n, "a number"); break;
    case KT_BOOL: // default -1: a rule decides (model.tie_embeddings), and -1 asks for it
        snprintf(buf, n, d->def_num < 0 ? "true, false or -1 (the default)" : "true or false");
        break;
    case KT_DP: snprintf(buf, n, "auto or an integer >= 1"); break;
    case KT_ENUM: list_choices(d->names, buf, n); break;
    case KT_SOURCES: snprintf(buf, n, "a glob or a list"); break;
    case KT_STR: // a string with fixed choices (model.arch) reads like an enum
        if (d->names) list_choices(d->names, buf, n);
        else snprintf(buf, n, "a string");
        break;
    }
}

static void report_type(config_ctx *c, key_id k, const scalar_view *v, const char *extra) {
    char want[128], got[160];
    expected_desc(k, want, sizeof want);
    if (v->kind == VALUE_OTHER_TAG) // say which tags there are
        extra = "; the tags a config reads are !!str, !!int, !!float, !!bool and !!null";
    config_report_key(c, k, K_COUNT, "expected %s, got %s%s", want,
                      config_describe(v, got, sizeof got), extra);
}

// Whether the value's kind is one a key of this type reads (its text is checked after).
static int kind_fits(const scalar_view *v, value_kind k1, value_kind k2, value_kind k3) {
    return v->kind == k1 || v->kind == k2 || v->kind == k3;
}

static int parse_ll(const char *text, long long *out) {
    char *end;
    errno = 0;
    *out = strtoll(text, &end, 10);
    return end != text && *end == '\0' && errno == 0;
}

static int set_int(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    long long x;
    // dp's name auto may be quoted (a string); a number may not.
    const int dp_auto = CONFIG_KEYS[k].type == KT_DP && !strcmp(v->text, "auto") &&
                        kind_fits(v, VALUE_PLAIN, VALUE_STR, VALUE_STR);
    if (!dp_auto && (!kind_fits(v, VALUE_PLAIN, VALUE_INT, VALUE_INT) || config_is_null(v)))
        return report_type(c, k, v, ""), 0;
    if (dp_auto) {
        *(int *)config_key_field(cfg, k) = DP_AUTO;
        return 1;
    }
    if (!parse_ll(v->text, &x)) {
        if (errno != ERANGE) return report_type(c, k, v, ""), 0;
        x = LLONG_MAX; // an out-of-range integer is a range error below
    }
    // Out-of-int values cannot be stored for the later range check; dp < 1 would collide
    // with DP_AUTO. Both are checked here.
    if (x < INT_MIN || x > INT_MAX || (CONFIG_KEYS[k].type == KT_DP && x < 1)) {
        char range[64];
        config_range_text(k, range, sizeof range);
        config_report_key(c, k, K_COUNT, "%s%s (got %s)", range,
                          CONFIG_KEYS[k].type == KT_DP ? ", or auto" : "", v->text);
        return 0;
    }
    *(int *)config_key_field(cfg, k) = (int)x;
    return 1;
}

static int set_u64(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    char *end;
    if (!kind_fits(v, VALUE_PLAIN, VALUE_INT, VALUE_INT) || config_is_null(v) || v->text[0] == '-')
        return report_type(c, k, v, ""), 0;
    errno = 0;
    unsigned long long x = strtoull(v->text, &end, 10);
    if (end == v->text || *end != '\0') return report_type(c, k, v, ""), 0;
    if (errno == ERANGE) {
        config_report_key(c, k, K_COUNT, "must be in 0..%" PRIu64 " (got %s)", UINT64_MAX, v->text);
        return 0;
    }
    *(uint64_t *)config_key_field(cfg, k) = (uint64_t)x;
    return 1;
}

static int set_f64(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    char *end;
    if (!kind_fits(v, VALUE_PLAIN, VALUE_INT, VALUE_FLOAT) || config_is_null(v))
        return report_type(c, k, v, ""), 0;
    double x = strtod(v->text, &end);
    if (end == v->text || *end != '\0') return report_type(c, k, v, ""), 0;
    if (!isfinite(x)) return report_type(c, k, v, " (must be finite)"), 0;
    *(double *)config_key_field(cfg, k) = x;
    return 1;
}

static int set_bool(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    // YAML 1.1 booleans, as PyYAML reads them too.
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3 && kind_fits(v, VALUE_PLAIN, VALUE_BOOL, VALUE_BOOL); i++) {
        if (!strcasecmp(v->text, yes[i]) || !strcasecmp(v->text, no[i])) {
            *(int *)config_key_field(cfg, k) = !strcasecmp(v->text, yes[i]);
            return 1;
        }
    }
    if (CONFIG_KEYS[k].def_num < 0 && kind_fits(v, VALUE_PLAIN, VALUE_INT, VALUE_INT) &&
        !strcmp(v->text, "-1")) {
        *(int *)config_key_field(cfg, k) = -1;
        return 1;
    }
    return report_type(c, k, v, ""), 0;
}

static int set_enum(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    const char *const *names = CONFIG_KEYS[k].names;
    const int named = kind_fits(v, VALUE_PLAIN, VALUE_STR, VALUE_STR) && !config_is_null(v);
    for (int i = 0; names[i] && named; i++) {
        if (!strcmp(v->text, names[i])) {
            *(int *)config_key_field(cfg, k) = i;
            return 1;
        }
    }
    char extra[96] = "";
    const char *s = named ? config_suggest_value(v->text, names) : NULL;
    if (s) snprintf(extra, sizeof extra, "; did you mean %s?", s);
    return report_type(c, k, v, extra), 0;
}

static int set_str(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    const key_desc *d = &CONFIG_KEYS[k];
    if (config_is_null(v)) {
        if (!d->nullable) {
            config_report_key(c, k, K_COUNT, "must not be null%s",
                              k == K_CKPT_RESUME ? "; use none to start fresh" : "");
            return 0;
        }
        char **slot = config_key_field(cfg, k);
        free(*slot);
        *slot = NULL;
        return 1;
    }
    if (!kind_fits(v, VALUE_PLAIN, VALUE_STR, VALUE_STR)) return report_type(c, k, v, ""), 0;
    if (v->len == 0) return config_report_key(c, k, K_COUNT, "must not be empty"), 0;
    if (strlen(v->text) != v->len)
        return config_report_key(c, k, K_COUNT, "must not contain a NUL character"), 0;
    if (v->len >= PATH_MAX) // every free string key is a path or a glob the OS must take
        return config_report_key(c, k, K_COUNT, "is %zu bytes long; a path holds at most %d",
                                 v->len, PATH_MAX - 1),
               0;
    if (d->names) {
        int i = 0;
        while (d->names[i] && strcmp(d->names[i], v->text)) i++;
        if (!d->names[i]) {
            char extra[96] = "";
            const char *s = config_suggest_value(v->text, d->names);
            if (s) snprintf(extra, sizeof extra, "; did you mean %s?", s);
            return report_type(c, k, v, extra), 0;
        }
    }
    config_set_string(cfg, k, v->text);
    return 1;
}

void config_set_value(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v,
                      config_loc loc) {
    c->loc[k] = loc;
    int ok = 0;
    if (v->type != YAML_SCALAR_NODE) {
        report_type(c, k, v, "");
    } else {
        switch (CONFIG_KEYS[k].type) {
        case KT_INT:
        case KT_DP: ok = set_int(c, cfg, k, v); break;
        case KT_U64: ok = set_u64(c, cfg, k, v); break;
        case KT_F64: ok = set_f64(c, cfg, k, v); break;
        case KT_BOOL: ok = set_bool(c, cfg, k, v); break;
        case KT_ENUM: ok = set_enum(c, cfg, k, v); break;
        case KT_STR: ok = set_str(c, cfg, k, v); break;
        case KT_SOURCES: TRI_ASSERT(!"KT_SOURCES values go through config_set_sources"); break;
        }
    }
    c->bad[k] = !ok;
}
