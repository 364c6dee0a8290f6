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

#include "base/yaml_limit.h"
#include "config/config_diag_internal.h"
#include "config/config_keys_internal.h"
#include "config/config_rules_internal.h"
#include "config/config_sources_internal.h"

// ---------------------------------------------------------------------------------------
// Defaults

void config_defaults(run_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int k = 0; k < K_COUNT; k++) {
        const key_desc *d = &CONFIG_KEYS[k];
        void *p = config_key_field(cfg, k);
        switch (d->type) {
        case KT_STR: *(char **)p = xstrdup(d->def_str); break;
        case KT_SOURCES: config_sources_set_glob(p, d->def_str); break;
        case KT_U64: *(uint64_t *)p = (uint64_t)d->def_num; break;
        case KT_F64: *(double *)p = d->def_num; break;
        default: *(int *)p = (int)d->def_num; break;
        }
    }
}

void config_free(run_config *cfg) {
    for (int k = 0; k < K_COUNT; k++) {
        if (CONFIG_KEYS[k].type == KT_SOURCES) config_sources_free(config_key_field(cfg, k));
        if (CONFIG_KEYS[k].type != KT_STR) continue;
        char **slot = config_key_field(cfg, k);
        free(*slot);
        *slot = NULL;
    }
    free(cfg->source_path);
    cfg->source_path = NULL;
}

// ---------------------------------------------------------------------------------------
// The file

static int node_line(const yaml_node_t *node) { return (int)node->start_mark.line + 1; }

static void parse_section(config_ctx *c, run_config *cfg, yaml_document_t *doc,
                          const config_tags *tags, const char *section, yaml_node_t *map) {
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
        } else { // config_set_node takes data.train's and data.val's lists too
            config_set_node(c, cfg, doc, val, tags, k, (config_loc){node_line(val), -1});
        }
    }
}

static void parse_root(config_ctx *c, run_config *cfg, yaml_document_t *doc,
                       const config_tags *tags) {
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root) return; // an empty file: all defaults
    scalar_view rv = config_view_of(root, tags);
    if (root->type == YAML_SCALAR_NODE && config_is_null(&rv)) return;
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
        scalar_view v = config_view_of(val, tags);
        char got[128];
        if (s < 0) {
            config_report_unknown_section(c, loc, name);
        } else if (seen_line[s]) {
            config_report(c, loc, name, "duplicate section (first at line %d)", seen_line[s]);
        } else if (val->type == YAML_MAPPING_NODE) {
            seen_line[s] = loc.line;
            parse_section(c, cfg, doc, tags, name, val);
        } else if (!(val->type == YAML_SCALAR_NODE && config_is_null(&v))) {
            // An empty section ("model:" with every key commented out) is allowed.
            config_report(c, loc, name,
                          "must be a mapping of keys (key: value lines indented "
                          "under %s:), got %s",
                          name, config_describe(&v, got, sizeof got));
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

// A run config is a few kB; reading a larger file whole would only delay the message.
#define CONFIG_MAX_BYTES ((size_t)16 << 20)

// Parses the open file into cfg; 0 when the YAML itself is broken (reported). The file is
// read whole first, so that its nesting is checked before libyaml's loader sees it
// (base/yaml_limit.h: deep flow collections take it quadratic time).
static int parse_file(config_ctx *c, run_config *cfg, FILE *f) {
    unsigned char *text;
    size_t len, deep_line = 0;
    if (!ylimit_read_all(f, CONFIG_MAX_BYTES, &text, &len)) {
        if (errno == EFBIG)
            config_report(c, (config_loc){0, -1}, NULL,
                          "the file is larger than %zu MiB; a run config is a few kB (is it "
                          "the right file?)",
                          CONFIG_MAX_BYTES >> 20);
        else config_report(c, (config_loc){0, -1}, NULL, "cannot read it: %s", strerror(errno));
        return 0;
    }
    config_tags tags = {0};
    if (ylimit_scan(text, len, YLIMIT_MAX_DEPTH, &deep_line, config_tags_collect, &tags)) {
        config_tags_free(&tags);
        config_report(c, (config_loc){(int)deep_line, -1}, NULL,
                      "YAML nested deeper than %d levels; a run config nests 2 (section: "
                      "key: value)",
                      YLIMIT_MAX_DEPTH);
        free(text);
        return 0;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        config_tags_free(&tags);
        free(text);
        return config_report(c, (config_loc){0, -1}, NULL, "out of memory"), 0;
    }
    yaml_parser_set_input_string(&parser, text, len);
    int ok = yaml_parser_load(&parser, &doc);
    if (!ok) {
        report_yaml_error(c, &parser, "YAML syntax error");
    } else {
        parse_root(c, cfg, &doc, &tags);
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
    config_tags_free(&tags);
    free(text);
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
    // file (and its nesting is limited as the file's is).
    config_tags tags = {0};
    if (ylimit_scan((const unsigned char *)value, strlen(value), YLIMIT_MAX_DEPTH, NULL,
                    config_tags_collect, &tags)) {
        config_tags_free(&tags);
        c->loc[k] = (config_loc){0, i};
        config_report_key(c, k, K_COUNT, "the value is YAML nested deeper than %d levels",
                          YLIMIT_MAX_DEPTH);
        c->bad[k] = 1;
        return;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        config_tags_free(&tags);
        return;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)value, strlen(value));
    c->cur_set = i;
    if (!yaml_parser_load(&parser, &doc)) {
        report_yaml_error(c, &parser, "value is not valid YAML");
    } else {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        scalar_view v = {.type = YAML_SCALAR_NODE, .text = "", .len = 0, .kind = VALUE_PLAIN};
        if (root) v = config_view_of(root, &tags);
        if (root && CONFIG_KEYS[k].type == KT_SOURCES)
            config_set_sources(c, cfg, k, &doc, root, &tags, (config_loc){0, i});
        else config_set_value(c, cfg, k, &v, (config_loc){0, i});
        yaml_document_delete(&doc);
    }
    c->cur_set = -1;
    yaml_parser_delete(&parser);
    config_tags_free(&tags);
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

// config_load's body: `f` the YAML file (NULL: none, the sets alone over the defaults).
static tri_status load(run_config *cfg, const char *path, FILE *f, int sets_from_path, int n_set,
                       char **sets) {
    free(cfg->source_path);
    cfg->source_path = xstrdup(path);
    config_ctx c;
    config_ctx_init(&c, path, sets);
    c.sets_from_path = sets_from_path;
    int yaml_ok = 1;
    if (f) {
        yaml_ok = parse_file(&c, cfg, f);
        fclose(f);
    }
    if (yaml_ok) {
        for (int i = 0; i < n_set; i++) apply_set(&c, cfg, i, sets[i]);
        // run.out_dir follows run.name unless given.
        if (!config_loc_known(c.loc[K_RUN_OUT_DIR]) && cfg->run.name) {
            char dir[4096];
            snprintf(dir, sizeof dir, "runs/%s", cfg->run.name);
            config_set_string(cfg, K_RUN_OUT_DIR, dir);
        }
        // train.precision as the modules take it: tf32 stores fp32 (the matmuls' math is the
        // compute backend's, backend_set_tf32).
        cfg->train.precision = cfg->train.precision_mode == PRECISION_BF16 ? DTYPE_BF16
                                                                           : DTYPE_FP32;
        for (int k = 0; k < K_COUNT; k++) cfg->given[k] = config_loc_known(c.loc[k]);
        config_check_ranges(&c, cfg);
        config_resolve_model(&cfg->model); // the rules see the resolved values
        config_check_rules(&c, cfg);
    }
    if (c.n_errors) {
        config_report_total(&c);
        config_free(cfg);
        return TRI_ERR_CONFIG;
    }
    return TRI_OK;
}

tri_status config_load(run_config *cfg, const char *path, int n_set, char **sets) {
    TRI_ASSERT(cfg && path && n_set >= 0 && (n_set == 0 || sets));
    FILE *f = open_config(path);
    if (!f) {
        config_free(cfg);
        return TRI_ERR_CONFIG;
    }
    return load(cfg, path, f, 0, n_set, sets);
}

tri_status config_load_sets(run_config *cfg, const char *source, int n_set, char **sets) {
    TRI_ASSERT(cfg && source && n_set >= 0 && (n_set == 0 || sets));
    return load(cfg, source, NULL, 1, n_set, sets);
}
