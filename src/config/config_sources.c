// config_sources.c: data.train's and data.val's values, a glob or a list
// (config_sources_internal.h).
#include "config/config_sources_internal.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "base/suggest.h"

void config_sources_free(config_data_sources *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->items[i].path);
        free(s->items[i].name);
    }
    free(s->items);
    memset(s, 0, sizeof *s);
}

void config_sources_set_glob(config_data_sources *s, const char *glob) {
    config_sources_free(s);
    s->items = xcalloc(1, sizeof *s->items);
    s->items[0].path = xstrdup(glob);
    s->items[0].weight = 1.0;
    s->n = 1;
}

static int node_line(const yaml_node_t *node) { return (int)node->start_mark.line + 1; }

// Where an item's problem is reported: its line in the file, or the --set argument.
static config_loc item_loc(const yaml_node_t *node, config_loc whole) {
    if (whole.set_index >= 0) return whole;
    return (config_loc){node_line(node), -1};
}

// A glob: a string (plain, quoted or !!str), not null, not empty, no NUL, shorter than
// PATH_MAX. 1 when it is; else reported under `path`.
static int glob_ok(config_ctx *c, config_loc loc, const char *path, const scalar_view *v) {
    char got[160];
    if (v->type != YAML_SCALAR_NODE || config_is_null(v) ||
        (v->kind != VALUE_PLAIN && v->kind != VALUE_STR)) {
        config_report(c, loc, path,
                      "expected a glob (a string such as \"data/kjv_train_*.bin\"), got %s%s",
                      config_describe(v, got, sizeof got),
                      v->kind == VALUE_OTHER_TAG
                          ? "; the tags a config reads are !!str, !!int, !!float, !!bool and !!null"
                          : "");
        return 0;
    }
    if (v->len == 0) return config_report(c, loc, path, "must not be empty"), 0;
    if (strlen(v->text) != v->len)
        return config_report(c, loc, path, "must not contain a NUL character"), 0;
    if (v->len >= PATH_MAX)
        return config_report(c, loc, path, "is %zu bytes long; a path holds at most %d", v->len,
                             PATH_MAX - 1),
               0;
    return 1;
}

// A weight: a number (plain, !!int or !!float), finite, > 0.
static int weight_ok(config_ctx *c, config_loc loc, const char *path, const scalar_view *v,
                     double *out) {
    char got[160], *end = NULL;
    double x = 0.0;
    const int numeric = v->type == YAML_SCALAR_NODE && !config_is_null(v) &&
                        (v->kind == VALUE_PLAIN || v->kind == VALUE_INT || v->kind == VALUE_FLOAT);
    if (numeric) x = strtod(v->text, &end);
    if (!numeric || end == v->text || *end || isnan(x)) {
        config_report(c, loc, path,
                      "expected a number > 0 (the source's share of the batches, "
                      "relative to the others), got %s",
                      config_describe(v, got, sizeof got));
        return 0;
    }
    if (!isfinite(x) || !(x > 0)) {
        config_report(c, loc, path,
                      "must be a finite number > 0 (got %s); leave a source out "
                      "of the list to give it no samples",
                      v->text);
        return 0;
    }
    *out = x;
    return 1;
}

// A name of data.val: it becomes the metric val_loss/NAME and a TensorBoard tag.
static int name_ok(config_ctx *c, config_loc loc, const char *path, const scalar_view *v) {
    char got[160];
    int ok = v->type == YAML_SCALAR_NODE && !config_is_null(v) &&
             (v->kind == VALUE_PLAIN || v->kind == VALUE_STR) && v->len >= 1 &&
             v->len <= CONFIG_DATA_NAME_MAX && strlen(v->text) == v->len;
    for (size_t i = 0; ok && i < v->len; i++)
        ok = (v->text[i] >= 'a' && v->text[i] <= 'z') || (v->text[i] >= 'A' && v->text[i] <= 'Z') ||
             (v->text[i] >= '0' && v->text[i] <= '9') || strchr("_.-", v->text[i]);
    if (!ok)
        config_report(c, loc, path,
                      "expected a name of 1 to %d letters, digits, '_', '.' or '-' (it is "
                      "reported as val_loss/NAME), got %s",
                      CONFIG_DATA_NAME_MAX, config_describe(v, got, sizeof got));
    return ok;
}

// One item of the list: data.train's {path, weight} or data.val's {name, path}. 1 when it
// is whole and right (into *out).
static int read_item(config_ctx *c, int train, const char *key, int i, yaml_document_t *d,
                     yaml_node_t *node, const config_tags *tags, config_loc whole,
                     config_data_source *out) {
    static const char *const train_keys[] = {"path", "weight", NULL};
    static const char *const val_keys[] = {"name", "path", NULL};
    const char *const *keys = train ? train_keys : val_keys;
    const config_loc loc = item_loc(node, whole);
    char where[96], path[128], got[160];
    snprintf(where, sizeof where, "%s[%d]", key, i);
    if (node->type != YAML_MAPPING_NODE) {
        scalar_view v = config_view_of(node, tags);
        config_report(c, loc, where, "expected a mapping %s, got %s",
                      train ? "{path: GLOB, weight: W}" : "{name: NAME, path: GLOB}",
                      config_describe(&v, got, sizeof got));
        return 0;
    }
    yaml_node_t *found[2] = {NULL, NULL};
    int ok = 1;
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key),
                    *v = yaml_document_get_node(d, p->value);
        const config_loc kloc = item_loc(k, whole);
        const char *name = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : NULL;
        int which = -1;
        for (int q = 0; name && keys[q]; q++)
            if (!strcmp(name, keys[q])) which = q;
        if (which < 0) {
            const char *close = name ? suggest_closest(name, keys) : NULL;
            char hint[64] = "";
            if (close) snprintf(hint, sizeof hint, "; did you mean %s?", close);
            config_report(c, kloc, where, "unknown key '%.60s' (an item has %s and %s)%s",
                          name ? name : "(not a plain name)", keys[0], keys[1], hint);
            ok = 0;
        } else if (found[which]) {
            config_report(c, kloc, where, "duplicate key %s (first set at line %d)", keys[which],
                          node_line(found[which]));
            ok = 0;
        } else {
            found[which] = v;
        }
    }
    for (int q = 0; q < 2; q++) {
        if (found[q]) continue;
        config_report(c, loc, where, "missing %s (an item is %s)", keys[q],
                      train ? "{path: GLOB, weight: W}" : "{name: NAME, path: GLOB}");
        ok = 0;
    }
    if (!ok) return 0;
    for (int q = 0; q < 2; q++) {
        scalar_view v = config_view_of(found[q], tags);
        const config_loc vloc = item_loc(found[q], whole);
        snprintf(path, sizeof path, "%s.%s", where, keys[q]);
        if (!strcmp(keys[q], "path")) {
            if (glob_ok(c, vloc, path, &v)) out->path = xstrdup(v.text);
            else ok = 0;
        } else if (!strcmp(keys[q], "weight")) {
            ok = weight_ok(c, vloc, path, &v, &out->weight) && ok;
        } else if (name_ok(c, vloc, path, &v)) {
            out->name = xstrdup(v.text);
        } else {
            ok = 0;
        }
    }
    return ok;
}

// The rules among the items: no glob twice in data.train (and no share below the minimum),
// no name twice in data.val.
static int check_items(config_ctx *c, int train, const char *key, const config_data_source *it,
                       const int *lines, int n, config_loc whole) {
    int ok = 1;
    char path[128];
    for (int i = 0; i < n; i++) {
        const config_loc loc = whole.set_index >= 0 ? whole : (config_loc){lines[i], -1};
        for (int j = 0; j < i; j++) {
            const char *a = train ? it[i].path : it[i].name, *b = train ? it[j].path : it[j].name;
            if (strcmp(a, b)) continue;
            snprintf(path, sizeof path, "%s[%d].%s", key, i, train ? "path" : "name");
            if (train)
                config_report(c, loc, path,
                              "'%.200s' is data.train[%d]'s glob too; give each source once (one "
                              "source with the summed weight draws the same)",
                              a, j);
            else
                config_report(c, loc, path,
                              "'%s' names data.val[%d] too; each set needs its own name", a, j);
            ok = 0;
            break;
        }
    }
    if (!train || !ok) return ok;
    double wmax = 0.0, sum = 0.0;
    for (int i = 0; i < n; i++) wmax = it[i].weight > wmax ? it[i].weight : wmax;
    for (int i = 0; i < n; i++) sum += it[i].weight / wmax;
    for (int i = 0; i < n; i++) {
        const double share = it[i].weight / wmax / sum;
        if (share >= CONFIG_DATA_SHARE_MIN) continue;
        const config_loc loc = whole.set_index >= 0 ? whole : (config_loc){lines[i], -1};
        snprintf(path, sizeof path, "%s[%d].weight", key, i);
        config_report(c, loc, path,
                      "%g is a share of %.3g of the total weight; each source needs at least %g "
                      "(raise it, or leave the source out)",
                      it[i].weight, share, CONFIG_DATA_SHARE_MIN);
        ok = 0;
    }
    return ok;
}

void config_set_sources(config_ctx *c, run_config *cfg, key_id k, yaml_document_t *d,
                        yaml_node_t *node, const config_tags *tags, config_loc loc) {
    c->loc[k] = loc;
    c->bad[k] = 1;
    config_data_sources *s = config_key_field(cfg, k);
    const int train = k == K_DATA_TRAIN;
    char key[64], got[160];
    config_key_path(k, key, sizeof key);
    const char *form = train ? "a glob, or a list of {path: GLOB, weight: W}"
                             : "a glob, or a list of {name: NAME, path: GLOB}";
    if (node->type == YAML_SCALAR_NODE) {
        scalar_view v = config_view_of(node, tags);
        if (config_is_null(&v))
            return (void)config_report(c, loc, key, "must not be null; give %s", form);
        if (glob_ok(c, loc, key, &v)) {
            config_sources_set_glob(s, v.text);
            c->bad[k] = 0;
        }
        return;
    }
    if (node->type != YAML_SEQUENCE_NODE) {
        scalar_view v = config_view_of(node, tags);
        return (void)config_report(c, loc, key, "expected %s, got %s", form,
                                   config_describe(&v, got, sizeof got));
    }
    const int n = (int)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (n == 0)
        return (void)config_report(c, loc, key, "an empty list; give %s with at least one item",
                                   form);
    if (n > CONFIG_DATA_SOURCES_MAX)
        return (void)config_report(c, loc, key, "%d items; at most %d (each opens its shards)", n,
                                   CONFIG_DATA_SOURCES_MAX);
    config_data_source *items = xcalloc((size_t)n, sizeof *items);
    int *lines = xcalloc((size_t)n, sizeof(int)), ok = 1;
    for (int i = 0; i < n; i++) {
        yaml_node_t *item = yaml_document_get_node(d, node->data.sequence.items.start[i]);
        lines[i] = node_line(item);
        ok = read_item(c, train, key, i, d, item, tags, loc, &items[i]) && ok;
    }
    ok = ok && check_items(c, train, key, items, lines, n, loc);
    config_data_sources parsed = {items, n, 1};
    if (ok) {
        config_sources_free(s);
        *s = parsed;
        c->bad[k] = 0;
    } else {
        config_sources_free(&parsed);
    }
    free(lines);
}

void config_set_node(config_ctx *c, run_config *cfg, yaml_document_t *doc, yaml_node_t *val,
                     const config_tags *tags, key_id k, config_loc loc) {
    if (CONFIG_KEYS[k].type == KT_SOURCES) { // a glob or a list (config_sources.c)
        config_set_sources(c, cfg, k, doc, val, tags, loc);
        return;
    }
    scalar_view v = config_view_of(val, tags);
    config_set_value(c, cfg, k, &v, loc);
}
