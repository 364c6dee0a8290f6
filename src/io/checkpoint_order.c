// checkpoint_order.c: the data order in manifest.yaml (format version 3 on): what data
// order the checkpoint's run read, and where it stood (io/data_order.h: data_cursor).
//
//   data_order: {shuffle: true, seed: 1234, global_batch: 16, origin_step: 0, retired: 0}
//   data_sources:
//     - {path: "data/a_*.bin", weight: 0.7, samples: 1121, origin_samples: 0, extras: 1}
//
// Read back, every field is checked against the rest of the manifest: shuffle, seed,
// global_batch and each path and weight against the resolved config it records (data.shuffle,
// run.seed, train.global_batch, data.train); the samples against the manifest's samples (their
// sum, with the samples `retired` from sources a resume left out); and each source's
// samples = origin_samples + base * (step - origin_step) + extras against the blend schedule
// of those weights (data_blend.h), whose state the extras must be.
// A manifest before version 3 has none of it: its run read config.data.train in plain order,
// and its samples is that stream's cursor.
#include "io/checkpoint_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

void manifest_write_data_order(FILE *f, const data_cursor *c) {
    fprintf(f,
            "data_order: {shuffle: %s, seed: %llu, global_batch: %d, origin_step: %lld, "
            "retired: %lld}\n"
            "data_sources:\n",
            c->shuffle ? "true" : "false", (unsigned long long)c->seed, c->global_batch,
            (long long)c->origin_step, (long long)c->retired);
    for (int i = 0; i < c->n_sources; i++) {
        const data_cursor_source *s = &c->sources[i];
        char w[40];
        config_format_double(s->weight, w, sizeof w);
        fprintf(f, "  - {path: ");
        config_print_quoted(f, s->path);
        fprintf(f, ", weight: %s, samples: %lld, origin_samples: %lld, extras: %lld}\n", w,
                (long long)s->samples, (long long)s->origin_samples, (long long)s->extras);
    }
}

// ---- reading ----

typedef struct {
    yaml_document_t *d;
    char *why;
    size_t n;
    int *line;
    int failed;
} order_reader;

__attribute__((format(printf, 3, 4))) static void bad(order_reader *r, int line, const char *fmt,
                                                      ...) {
    if (r->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, r->n, fmt, ap);
    va_end(ap);
    *r->line = line;
    r->failed = 1;
}

static int node_line(const yaml_node_t *n) { return n ? (int)n->start_mark.line + 1 : 0; }

static yaml_node_t *get(order_reader *r, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(r->d, p->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, key))
            return yaml_document_get_node(r->d, p->value);
    }
    return NULL;
}

static const char *text_of(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

// A field that must be there: reported under `what` when it is not.
static yaml_node_t *need(order_reader *r, yaml_node_t *map, const char *what, const char *key) {
    yaml_node_t *v = get(r, map, key);
    if (!v) bad(r, node_line(map), "%s%s is missing", what, key);
    return v;
}

static int64_t read_i64(order_reader *r, yaml_node_t *map, const char *what, const char *key,
                        int64_t lo, int64_t hi) {
    yaml_node_t *v = need(r, map, what, key);
    const char *s = text_of(v);
    if (r->failed) return 0;
    char *end = NULL;
    errno = 0;
    long long x = s && (isdigit((unsigned char)*s) || *s == '-') ? strtoll(s, &end, 10) : 0;
    if (!end || *end || errno)
        bad(r, node_line(v), "%s%s: '%s' is not an integer", what, key, s ? s : "(not a scalar)");
    else if (x < lo || x > hi)
        bad(r, node_line(v), "%s%s: %lld is out of range [%lld, %lld]", what, key, x, (long long)lo,
            (long long)hi);
    return r->failed ? 0 : x;
}

static double read_weight(order_reader *r, yaml_node_t *map, const char *what) {
    yaml_node_t *v = need(r, map, what, "weight");
    const char *s = text_of(v);
    if (r->failed) return 0;
    char *end = NULL;
    double x = s && *s ? strtod(s, &end) : 0.0;
    if (!end || *end || !isfinite(x) || !(x > 0))
        bad(r, node_line(v), "%sweight: '%s' is not a number > 0", what, s ? s : "(not a scalar)");
    return r->failed ? 0 : x;
}

static int read_bool(order_reader *r, yaml_node_t *map, const char *what, const char *key) {
    yaml_node_t *v = need(r, map, what, key);
    const char *s = text_of(v);
    if (r->failed) return 0;
    if (s && !strcmp(s, "true")) return 1;
    if (!s || strcmp(s, "false"))
        bad(r, node_line(v), "%s%s: '%s' is not true or false", what, key,
            s ? s : "(not a scalar)");
    return 0;
}

// The config's data.train as (path, weight) pairs: a string is one source of weight 1, a list
// its {path, weight} items. 0 when it is neither (reported).
static int config_sources(order_reader *r, yaml_node_t *train, const char ***paths,
                          double **weights) {
    int n = 0;
    if (train && train->type == YAML_SCALAR_NODE) {
        *paths = xcalloc(1, sizeof(char *));
        *weights = xcalloc(1, sizeof(double));
        (*paths)[0] = text_of(train), (*weights)[0] = 1.0;
        return 1;
    }
    if (train && train->type == YAML_SEQUENCE_NODE)
        n = (int)(train->data.sequence.items.top - train->data.sequence.items.start);
    if (n < 1 || n > CONFIG_DATA_SOURCES_MAX) {
        bad(r, node_line(train), "config.data.train is %s",
            train ? "not a glob or a list of sources" : "missing");
        return 0;
    }
    *paths = xcalloc((size_t)n, sizeof(char *));
    *weights = xcalloc((size_t)n, sizeof(double));
    for (int i = 0; i < n && !r->failed; i++) {
        yaml_node_t *item = yaml_document_get_node(r->d, train->data.sequence.items.start[i]);
        char what[48];
        snprintf(what, sizeof what, "config.data.train[%d].", i);
        (*paths)[i] = text_of(need(r, item, what, "path"));
        if (!r->failed && !(*paths)[i]) bad(r, node_line(item), "%spath is not a string", what);
        (*weights)[i] = read_weight(r, item, what);
    }
    return r->failed ? 0 : n;
}

// The data order of a manifest before version 3: config.data.train's one stream in plain
// order at `samples` (its path unknown when the config does not say).
static void plain_stream(order_reader *r, yaml_node_t *config, manifest *m) {
    yaml_node_t *order = get(r, yaml_document_get_root_node(r->d), "data_order");
    if (order)
        return bad(r, node_line(order),
                   "data_order: version %d, but only version 3 on records the data order (the "
                   "version was edited)",
                   m->version);
    data_cursor *c = &m->order;
    c->n_sources = 1;
    c->sources = xcalloc(1, sizeof *c->sources);
    const char *path = text_of(get(r, get(r, config, "data"), "train"));
    c->sources[0].path = path ? xstrdup(path) : NULL;
    c->sources[0].weight = 1.0;
    c->sources[0].samples = m->samples;
    c->step = m->step;
}

// Each source's samples against the blend schedule of the recorded weights and batch.
static void check_schedule(order_reader *r, const data_cursor *c, yaml_node_t *seq) {
    // Shares as config validation allows them (smaller ones have no schedule).
    double wmax = 0.0, sum = 0.0;
    for (int i = 0; i < c->n_sources; i++) wmax = fmax(wmax, c->sources[i].weight);
    for (int i = 0; i < c->n_sources; i++) sum += c->sources[i].weight / wmax;
    for (int i = 0; i < c->n_sources && !r->failed; i++)
        if (c->sources[i].weight / wmax / sum < CONFIG_DATA_SHARE_MIN)
            bad(r, node_line(yaml_document_get_node(r->d, seq->data.sequence.items.start[i])),
                "data_sources[%d].weight: %g is a share below %g of the total", i,
                c->sources[i].weight, CONFIG_DATA_SHARE_MIN);
    if (r->failed) return;
    double *w = xmalloc((size_t)c->n_sources * sizeof(double));
    int64_t *extras = xmalloc((size_t)c->n_sources * sizeof(int64_t));
    for (int i = 0; i < c->n_sources; i++)
        w[i] = c->sources[i].weight, extras[i] = c->sources[i].extras;
    blend_schedule b;
    blend_init(&b, w, c->n_sources, c->global_batch);
    const int64_t t = c->step - c->origin_step;
    for (int i = 0; i < c->n_sources && !r->failed; i++) {
        const data_cursor_source *s = &c->sources[i];
        yaml_node_t *item = yaml_document_get_node(r->d, seq->data.sequence.items.start[i]);
        // base <= G < 2^31 and t < 2^31 (and origin_samples <= samples): no overflow.
        if (s->samples - s->origin_samples != b.base[i] * t + s->extras)
            bad(r, node_line(item),
                "data_sources[%d]: samples %lld is not origin_samples %lld + %lld a step x %lld "
                "steps since data_order.origin_step + extras %lld",
                i, (long long)s->samples, (long long)s->origin_samples, (long long)b.base[i],
                (long long)t, (long long)s->extras);
    }
    int which;
    char why[256];
    if (!r->failed && blend_set_state(&b, t, extras, &which, why, sizeof why))
        bad(r, node_line(yaml_document_get_node(r->d, seq->data.sequence.items.start[which])),
            "data_sources[%d].extras: %s", which, why);
    blend_free(&b);
    free(w);
    free(extras);
}

int manifest_read_data_order(yaml_document_t *d, yaml_node_t *root, manifest *m, char *why,
                             size_t n, int *line) {
    order_reader r = {d, why, n, line, 0};
    yaml_node_t *config = get(&r, root, "config");
    memset(&m->order, 0, sizeof m->order);
    if (m->version < 3) {
        plain_stream(&r, config, m);
        return r.failed;
    }
    data_cursor *c = &m->order;
    c->recorded = 1;
    c->step = m->step;
    yaml_node_t *order = need(&r, root, "", "data_order");
    if (!r.failed && order->type != YAML_MAPPING_NODE)
        bad(&r, node_line(order), "data_order is not a mapping");
    c->shuffle = read_bool(&r, order, "data_order.", "shuffle");
    c->seed = (uint64_t)read_i64(&r, order, "data_order.", "seed", 0, INT64_MAX);
    c->global_batch = (int)read_i64(&r, order, "data_order.", "global_batch", 1, INT32_MAX);
    c->origin_step = read_i64(&r, order, "data_order.", "origin_step", 0, m->step);
    c->retired = read_i64(&r, order, "data_order.", "retired", 0, m->samples);
    yaml_node_t *seq = need(&r, root, "", "data_sources");
    int count = seq && seq->type == YAML_SEQUENCE_NODE
                    ? (int)(seq->data.sequence.items.top - seq->data.sequence.items.start)
                    : -1;
    if (!r.failed && (count < 1 || count > CONFIG_DATA_SOURCES_MAX))
        bad(&r, node_line(seq), "data_sources is not a list of 1 to %d sources",
            CONFIG_DATA_SOURCES_MAX);
    if (r.failed) return 1;
    c->n_sources = count;
    c->sources = xcalloc((size_t)count, sizeof *c->sources);
    int64_t total = c->retired;
    for (int i = 0; i < count && !r.failed; i++) {
        yaml_node_t *item = yaml_document_get_node(d, seq->data.sequence.items.start[i]);
        data_cursor_source *s = &c->sources[i];
        char what[48];
        snprintf(what, sizeof what, "data_sources[%d].", i);
        const char *path = text_of(need(&r, item, what, "path"));
        if (!r.failed && (!path || !*path)) bad(&r, node_line(item), "%spath is not a glob", what);
        if (!r.failed) s->path = xstrdup(path);
        s->weight = read_weight(&r, item, what);
        s->samples = read_i64(&r, item, what, "samples", 0, INT64_MAX);
        s->origin_samples = read_i64(&r, item, what, "origin_samples", 0, s->samples);
        s->extras = read_i64(&r, item, what, "extras", 0, INT32_MAX);
        if (!r.failed && s->samples > INT64_MAX - total)
            bad(&r, node_line(item), "%ssamples: %lld is past any count", what,
                (long long)s->samples);
        total += s->samples;
    }
    if (!r.failed && total != m->samples)
        bad(&r, node_line(seq),
            "data_sources: the samples of the sources and data_order.retired sum to %lld, but "
            "samples is %lld",
            (long long)total, (long long)m->samples);
    // Against the config the manifest records.
    uint64_t seed = 0;
    const char *seed_text = text_of(get(&r, get(&r, config, "run"), "seed"));
    if (!r.failed && (!seed_text || sscanf(seed_text, "%" SCNu64, &seed) != 1 || seed != c->seed))
        bad(&r, node_line(order), "data_order.seed: %llu, but config.run.seed is %s",
            (unsigned long long)c->seed, seed_text ? seed_text : "missing");
    yaml_node_t *data = get(&r, config, "data");
    const char *shuffle = text_of(get(&r, data, "shuffle"));
    if (!r.failed && (!shuffle || strcmp(shuffle, c->shuffle ? "true" : "false")))
        bad(&r, node_line(order), "data_order.shuffle: %s, but config.data.shuffle is %s",
            c->shuffle ? "true" : "false", shuffle ? shuffle : "missing");
    const char *batch = text_of(get(&r, get(&r, config, "train"), "global_batch"));
    if (!r.failed && (!batch || atoll(batch) != c->global_batch))
        bad(&r, node_line(order),
            "data_order.global_batch: %d, but config.train.global_batch is %s", c->global_batch,
            batch ? batch : "missing");
    const char **paths = NULL;
    double *weights = NULL;
    int listed = r.failed ? 0 : config_sources(&r, get(&r, data, "train"), &paths, &weights);
    if (!r.failed && listed != count)
        bad(&r, node_line(seq), "data_sources: %d sources, but config.data.train has %d", count,
            listed);
    for (int i = 0; i < count && !r.failed; i++) {
        yaml_node_t *item = yaml_document_get_node(d, seq->data.sequence.items.start[i]);
        if (!paths[i] || strcmp(paths[i], c->sources[i].path))
            bad(&r, node_line(item),
                "data_sources[%d].path: '%s', but config.data.train names '%s'", i,
                c->sources[i].path, paths[i] ? paths[i] : "?");
        else if (weights[i] != c->sources[i].weight)
            bad(&r, node_line(item), "data_sources[%d].weight: %g, but config.data.train gives %g",
                i, c->sources[i].weight, weights[i]);
    }
    free(paths);
    free(weights);
    if (!r.failed) check_schedule(&r, c, seq);
    return r.failed;
}
