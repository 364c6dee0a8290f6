// run_record.c: config values recorded with a run: the run record of metrics.jsonl (JSON,
// io/json.h) or the config of a checkpoint's manifest.yaml (libyaml).
#include "io/run_record.h"

#include <errno.h>
#include <string.h>
#include <yaml.h>

#include "io/checkpoint.h"
#include "io/json.h"

enum { RECORD_MAX_DEPTH = 64 };

static int copy_out(const char *value, char *out, size_t n) {
    if (!value || !*value || strlen(value) >= n) return 0;
    memcpy(out, value, strlen(value) + 1);
    return 1;
}

// The newest {"type":"run"} line of a metrics.jsonl (a resumed run appends one).
static int from_metrics(const char *path, const char *section, const char *key, char *out,
                        size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int found = 0;
    json_doc *doc = json_doc_new();
    while ((len = getline(&line, &cap, f)) > 0) {
        if (!strstr(line, "\"type\":\"run\"")) continue;
        char err[128];
        const json_value *root = json_parse(doc, line, (size_t)len, RECORD_MAX_DEPTH, err,
                                            sizeof err);
        const json_value *v = json_get(json_get(json_get(root, "config"), section), key);
        if (root) found = v && v->type == JSON_STRING && copy_out(v->u.str.s, out, n);
    }
    json_doc_free(doc);
    free(line);
    fclose(f);
    return found;
}

static yaml_node_t *yaml_map_get(yaml_document_t *d, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, key))
            return yaml_document_get_node(d, p->value);
    }
    return NULL;
}

static int from_manifest(const char *path, const char *section, const char *key, char *out,
                         size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    yaml_parser_t parser;
    yaml_document_t doc;
    int found = 0;
    if (yaml_parser_initialize(&parser)) {
        yaml_parser_set_input_file(&parser, f);
        if (yaml_parser_load(&parser, &doc)) {
            yaml_node_t *root = yaml_document_get_root_node(&doc);
            yaml_node_t *v = yaml_map_get(
                &doc, yaml_map_get(&doc, yaml_map_get(&doc, root, "config"), section), key);
            // A plain null (the config printer writes null for an unset string) is none.
            if (v && v->type == YAML_SCALAR_NODE &&
                !(v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                  (!strcmp((char *)v->data.scalar.value, "null") ||
                   !strcmp((char *)v->data.scalar.value, "~"))))
                found = copy_out((const char *)v->data.scalar.value, out, n);
            yaml_document_delete(&doc);
        }
        yaml_parser_delete(&parser);
    }
    fclose(f);
    return found;
}

int run_record_config_string(const char *source, const char *section, const char *key, char *out,
                             size_t n) {
    char dir[4096], path[4200];
    if (ckpt_is_checkpoint(source, dir, sizeof dir)) {
        snprintf(path, sizeof path, "%s/manifest.yaml", dir);
        return from_manifest(path, section, key, out, n);
    }
    snprintf(path, sizeof path, "%s/metrics.jsonl", source);
    return from_metrics(path, section, key, out, n);
}

int run_record_newest(const char *path, json_doc *doc, const json_value **root, int *line,
                      size_t max_line, char *err, size_t errn) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *text = NULL, *newest = NULL;
    size_t cap = 0, newest_len = 0;
    ssize_t len;
    int at = 0;
    for (int n = 1; (len = getline(&text, &cap, f)) > 0; n++) {
        if ((size_t)len > max_line || !strstr(text, "\"type\":\"run\"")) continue;
        free(newest);
        newest = xmalloc((size_t)len + 1);
        memcpy(newest, text, (size_t)len + 1);
        newest_len = (size_t)len, at = n;
    }
    free(text);
    fclose(f);
    if (!newest) {
        errno = 0;
        return 0;
    }
    *root = json_parse(doc, newest, newest_len, RECORD_MAX_DEPTH, err, errn);
    free(newest); // the tree holds its own copies
    *line = at;
    return *root ? 1 : -1;
}
