// config_parse.c: config.h's config_defaults, config_load and config_free: the defaults of the
// key table, the YAML file (libyaml's document API, so that every value keeps its line for
// messages), the --set overrides, then the checks of config_rules.c. The top of the config
// folder: nothing else in it depends on this file, so it has no private header.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "config/config_diag_internal.h"
#include "config/config_keys_internal.h"
#include "config/config_rules_internal.h"

// ---------------------------------------------------------------------------------------
// Defaults

static void set_string(run_config *cfg, key_id k, const char *s) {
    char **slot = config_key_field(cfg, k);
    free(*slot);
    *slot = xstrdup(s);
}

void config_defaults(run_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int k = 0; k < K_COUNT; k++) {
        const key_desc *d = &CONFIG_KEYS[k];
        void *p = config_key_field(cfg, k);
        switch (d->type) {
        case KT_STR: *(char **)p = xstrdup(d->def_str); break;
        case KT_U64: *(uint64_t *)p = (uint64_t)d->def_num; break;
        case KT_F64: *(double *)p = d->def_num; break;
        default: *(int *)p = (int)d->def_num; break;
        }
    }
}

void config_free(run_config *cfg) {
    for (int k = 0; k < K_COUNT; k++) {
        if (CONFIG_KEYS[k].type != KT_STR) continue;
        char **slot = config_key_field(cfg, k);
        free(*slot);
        *slot = NULL;
    }
    free(cfg->source_path);
    cfg->source_path = NULL;
}

// ---------------------------------------------------------------------------------------
// Scalars

// A YAML value as the setters see it: from a file node or from a --set value.
typedef struct {
    yaml_node_type_t type;
    const char *text; // scalar text, NUL-terminated by libyaml
    size_t len;
    int quoted; // single- or double-quoted: always a string
} scalar_view;

static int is_null(const scalar_view *v) {
    return !v->quoted && (v->len == 0 || !strcmp(v->text, "~") || !strcmp(v->text, "null") ||
                          !strcmp(v->text, "Null") || !strcmp(v->text, "NULL"));
}

// "1.5", "null", the string "abc" or "a mapping", for "got ..." in messages.
static const char *describe(const scalar_view *v, char *buf, size_t n) {
    if (v->type == YAML_MAPPING_NODE) return "a mapping";
    if (v->type == YAML_SEQUENCE_NODE) return "a list";
    if (is_null(v)) return "null";
    const char *ell = v->len > 60 ? "..." : "";
    if (v->quoted) snprintf(buf, n, "the string \"%.60s%s\"", v->text, ell);
    else snprintf(buf, n, "%.60s%s", v->text, ell);
    return buf;
}

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
    case KT_BOOL: snprintf(buf, n, "true or false"); break;
    case KT_DP: snprintf(buf, n, "auto or an integer >= 1"); break;
    case KT_ENUM: list_choices(d->names, buf, n); break;
    case KT_STR: // a string with fixed choices (model.arch) reads like an enum
        if (d->names) list_choices(d->names, buf, n);
        else snprintf(buf, n, "a string");
        break;
    }
}

static void report_type(config_ctx *c, key_id k, const scalar_view *v, const char *extra) {
    char want[128], got[128];
    expected_desc(k, want, sizeof want);
    config_report_key(c, k, K_COUNT, "expected %s, got %s%s", want, describe(v, got, sizeof got),
                      extra);
}

static int parse_ll(const char *text, long long *out) {
    char *end;
    errno = 0;
    *out = strtoll(text, &end, 10);
    return end != text && *end == '\0' && errno == 0;
}

static int set_int(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    long long x;
    if (v->quoted || is_null(v)) return report_type(c, k, v, ""), 0;
    if (CONFIG_KEYS[k].type == KT_DP && !strcmp(v->text, "auto")) {
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
    if (v->quoted || is_null(v) || v->text[0] == '-') return report_type(c, k, v, ""), 0;
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
    if (v->quoted || is_null(v)) return report_type(c, k, v, ""), 0;
    double x = strtod(v->text, &end);
    if (end == v->text || *end != '\0') return report_type(c, k, v, ""), 0;
    if (!isfinite(x)) return report_type(c, k, v, " (must be finite)"), 0;
    *(double *)config_key_field(cfg, k) = x;
    return 1;
}

static int set_bool(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    // YAML 1.1 booleans, as PyYAML reads them too.
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3 && !v->quoted; i++) {
        if (!strcasecmp(v->text, yes[i]) || !strcasecmp(v->text, no[i])) {
            *(int *)config_key_field(cfg, k) = !strcasecmp(v->text, yes[i]);
            return 1;
        }
    }
    return report_type(c, k, v, ""), 0;
}

static int set_enum(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    const char *const *names = CONFIG_KEYS[k].names;
    for (int i = 0; names[i] && !is_null(v); i++) {
        if (!strcmp(v->text, names[i])) {
            *(int *)config_key_field(cfg, k) = i;
            return 1;
        }
    }
    char extra[96] = "";
    const char *s = is_null(v) ? NULL : config_closest_name(v->text, names);
    if (s) snprintf(extra, sizeof extra, "; did you mean %s?", s);
    return report_type(c, k, v, extra), 0;
}

static int set_str(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v) {
    const key_desc *d = &CONFIG_KEYS[k];
    if (is_null(v)) {
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
    if (v->len == 0) return config_report_key(c, k, K_COUNT, "must not be empty"), 0;
    if (strlen(v->text) != v->len)
        return config_report_key(c, k, K_COUNT, "must not contain a NUL character"), 0;
    if (d->names) {
        int i = 0;
        while (d->names[i] && strcmp(d->names[i], v->text)) i++;
        if (!d->names[i]) return report_type(c, k, v, ""), 0;
    }
    set_string(cfg, k, v->text);
    return 1;
}

// Stores value `v` into key k, or reports why it cannot; remembers where it came from.
static void set_value(config_ctx *c, run_config *cfg, key_id k, const scalar_view *v,
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
        }
    }
    c->bad[k] = !ok;
}

// ---------------------------------------------------------------------------------------
// The file

static scalar_view view_of(const yaml_node_t *node) {
    scalar_view v = {.type = node->type, .text = "", .len = 0, .quoted = 0};
    if (node->type == YAML_SCALAR_NODE) {
        v.text = (const char *)node->data.scalar.value;
        v.len = node->data.scalar.length;
        v.quoted = node->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                   node->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    }
    return v;
}

static int node_line(const yaml_node_t *node) { return (int)node->start_mark.line + 1; }

static void parse_section(config_ctx *c, run_config *cfg, yaml_document_t *doc, const char *section,
                          yaml_node_t *map) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *key = yaml_document_get_node(doc, p->key);
        yaml_node_t *val = yaml_document_get_node(doc, p->value);
        config_loc loc = {node_line(key), -1};
        if (key->type != YAML_SCALAR_NODE) {
            config_report(c, loc, section, "keys must be plain names");
            continue;
        }
        const char *name = (const char *)key->data.scalar.value;
        int k = config_find_key(section, name);
        if (k < 0) {
            config_report_unknown_key(c, loc, section, name);
        } else if (c->loc[k].line > 0) {
            char path[64];
            config_report(c, loc, config_key_path(k, path, sizeof path),
                          "duplicate key (first set at line %d)", c->loc[k].line);
        } else {
            scalar_view v = view_of(val);
            set_value(c, cfg, k, &v, (config_loc){node_line(val), -1});
        }
    }
}

static void parse_root(config_ctx *c, run_config *cfg, yaml_document_t *doc) {
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root) return; // an empty file: all defaults
    scalar_view rv = view_of(root);
    if (root->type == YAML_SCALAR_NODE && is_null(&rv)) return;
    if (root->type != YAML_MAPPING_NODE) {
        config_report(c, (config_loc){node_line(root), -1}, NULL,
                      "the top level must be a mapping of sections (run:, model:, ...)");
        return;
    }
    int seen_line[K_COUNT] = {0}; // by the section's first key id
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *key = yaml_document_get_node(doc, p->key);
        yaml_node_t *val = yaml_document_get_node(doc, p->value);
        config_loc loc = {node_line(key), -1};
        if (key->type != YAML_SCALAR_NODE) {
            config_report(c, loc, NULL, "section names must be plain names");
            continue;
        }
        const char *name = (const char *)key->data.scalar.value;
        int s = config_section_first_key(name);
        scalar_view v = view_of(val);
        char got[128];
        if (s < 0) {
            config_report_unknown_section(c, loc, name);
        } else if (seen_line[s]) {
            config_report(c, loc, name, "duplicate section (first at line %d)", seen_line[s]);
        } else if (val->type == YAML_MAPPING_NODE) {
            seen_line[s] = loc.line;
            parse_section(c, cfg, doc, name, val);
        } else if (!(val->type == YAML_SCALAR_NODE && is_null(&v))) {
            // An empty section ("model:" with every key commented out) is allowed.
            config_report(c, loc, name,
                          "must be a mapping of keys (key: value lines indented "
                          "under %s:), got %s",
                          name, describe(&v, got, sizeof got));
        }
    }
}

static void report_yaml_error(config_ctx *c, const yaml_parser_t *p, const char *what) {
    if (p->error == YAML_READER_ERROR) {
        config_report(c, (config_loc){0, c->cur_set}, NULL, "%s: %s at byte %zu", what,
                      p->problem ? p->problem : "cannot read", p->problem_offset);
        return;
    }
    char ctx[160] = "";
    if (p->context)
        snprintf(ctx, sizeof ctx, " (%s at line %zu)", p->context, p->context_mark.line + 1);
    config_report(c, (config_loc){(int)p->problem_mark.line + 1, c->cur_set}, NULL, "%s: %s%s",
                  what, p->problem ? p->problem : "out of memory", ctx);
}

// Parses the open file into cfg; 0 when the YAML itself is broken (reported).
static int parse_file(config_ctx *c, run_config *cfg, FILE *f) {
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return config_report(c, (config_loc){0, -1}, NULL, "out of memory"), 0;
    yaml_parser_set_input_file(&parser, f);
    int ok = yaml_parser_load(&parser, &doc);
    if (!ok) {
        report_yaml_error(c, &parser, "YAML syntax error");
    } else {
        parse_root(c, cfg, &doc);
        yaml_document_delete(&doc);
        // A second document ("---") would be silently ignored; say so instead.
        if (!yaml_parser_load(&parser, &doc)) {
            report_yaml_error(c, &parser, "YAML syntax error");
            ok = 0;
        } else {
            yaml_node_t *extra = yaml_document_get_root_node(&doc);
            if (extra)
                config_report(c, (config_loc){node_line(extra), -1}, NULL,
                              "a second YAML document; a config file holds one");
            yaml_document_delete(&doc);
        }
    }
    yaml_parser_delete(&parser);
    return ok;
}

// ---------------------------------------------------------------------------------------
// --set key.path=value

// Splits "section.key=value" and finds the key; reports and returns -1 when it cannot.
static int set_target(config_ctx *c, int i, const char *arg, const char **value) {
    config_loc loc = {0, i};
    const char *eq = strchr(arg, '=');
    if (!eq) return config_report(c, loc, NULL, "expected --set section.key=value"), -1;
    char path[256];
    snprintf(path, sizeof path, "%.*s", (int)(eq - arg), arg);
    *value = eq + 1;
    char *dot = strchr(path, '.');
    if (!dot) {
        int k = config_suggest_key(NULL, path);
        if (k >= 0)
            config_report(c, loc, path, "expected section.key; did you mean %s.%s?",
                          CONFIG_KEYS[k].section, CONFIG_KEYS[k].key);
        else config_report(c, loc, path, "expected section.key");
        return -1;
    }
    *dot = '\0';
    const char *section = path, *key = dot + 1;
    if (config_section_first_key(section) < 0) {
        config_report_unknown_section(c, loc, section);
        return -1;
    }
    int k = config_find_key(section, key);
    if (k < 0) config_report_unknown_key(c, loc, section, key);
    return k;
}

static void apply_set(config_ctx *c, run_config *cfg, int i, const char *arg) {
    const char *value;
    int k = set_target(c, i, arg, &value);
    if (k < 0) return;
    // The value goes through libyaml too, so that quoting and null mean what they do in the
    // file.
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return;
    yaml_parser_set_input_string(&parser, (const unsigned char *)value, strlen(value));
    c->cur_set = i;
    if (!yaml_parser_load(&parser, &doc)) {
        report_yaml_error(c, &parser, "value is not valid YAML");
    } else {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        scalar_view v = {.type = YAML_SCALAR_NODE, .text = "", .len = 0, .quoted = 0};
        if (root) v = view_of(root);
        set_value(c, cfg, k, &v, (config_loc){0, i});
        yaml_document_delete(&doc);
    }
    c->cur_set = -1;
    yaml_parser_delete(&parser);
}

// ---------------------------------------------------------------------------------------
// Load

static void report_open_error(const char *path, int err) {
    fprintf(stderr, "error: cannot open config %s: %s\n", path, strerror(err));
    if (err == ENOENT)
        fprintf(stderr, "HINT: check the path (relative paths start at the current directory); "
                        "the example run files are in configs/, e.g. configs/default.yaml\n");
    else if (err == EACCES)
        fprintf(stderr, "HINT: the file is not readable by this user; check its permissions\n");
    else if (err == EISDIR)
        fprintf(stderr, "HINT: give the YAML file itself, e.g. configs/default.yaml\n");
    else fprintf(stderr, "HINT: give a readable YAML run file, e.g. configs/default.yaml\n");
}

static FILE *open_config(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        report_open_error(path, errno);
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        report_open_error(path, EISDIR);
        return NULL;
    }
    return f;
}

tri_status config_load(run_config *cfg, const char *path, int n_set, char **sets) {
    TRI_ASSERT(cfg && path && n_set >= 0 && (n_set == 0 || sets));
    FILE *f = open_config(path);
    if (!f) {
        config_free(cfg);
        return TRI_ERR_CONFIG;
    }
    free(cfg->source_path);
    cfg->source_path = xstrdup(path);
    config_ctx c;
    config_ctx_init(&c, path, sets);
    int yaml_ok = parse_file(&c, cfg, f);
    fclose(f);
    if (yaml_ok) {
        for (int i = 0; i < n_set; i++) apply_set(&c, cfg, i, sets[i]);
        // run.out_dir follows run.name unless given.
        if (!config_loc_known(c.loc[K_RUN_OUT_DIR]) && cfg->run.name) {
            char dir[4096];
            snprintf(dir, sizeof dir, "runs/%s", cfg->run.name);
            set_string(cfg, K_RUN_OUT_DIR, dir);
        }
        config_check_ranges(&c, cfg);
        config_check_rules(&c, cfg);
    }
    if (c.n_errors) {
        config_report_total(&c);
        config_free(cfg);
        return TRI_ERR_CONFIG;
    }
    return TRI_OK;
}
