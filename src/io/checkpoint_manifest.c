// checkpoint_manifest.c: manifest.yaml (DESIGN.md "Files"), read and checked before a byte of
// a rank file is read: its format version, its checksum (version 2 on), the range of every
// field and their agreement, and the regions: each (tensor, kind) tiled exactly once, each
// rank file tiled exactly by the regions stored in it. Rank 0 writes the manifest
// (checkpoint.c) and seals it here.
//
// Every problem is reported as "checkpoint PATH:LINE: field: what is wrong" and is
// TRI_ERR_CKPT; only the first problem is reported (a damaged manifest often has many).
#include "io/checkpoint_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "base/yaml_limit.h"

#include "base/crc32c.h"
#include "model/params.h"

// Bounds no real checkpoint comes near; they keep every size derived from a manifest far
// from overflowing 64 bits.
#define MAX_DIM (INT64_C(1) << 40)        // rows or cols of a tensor
#define MAX_NUMEL (INT64_C(1) << 48)      // elements of a tensor
#define MAX_FILE_BYTES (INT64_C(1) << 56) // a rank file
#define MAX_MANIFEST_BYTES (INT64_C(1) << 32)
#define MAX_COUNT (1 << 26) // tensors, ranks, regions

// ---- fields ----

// What the field readers share: the first problem found stops the checks (rc).
typedef struct {
    manifest *m;
    yaml_document_t *d;
    tri_status rc;
} reader;

__attribute__((format(printf, 3, 4))) static void fail(reader *rd, int line, const char *fmt, ...) {
    if (rd->rc != TRI_OK) return;
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (line > 0) LOG_ERROR("checkpoint %s:%d: %s", rd->m->path, line, what);
    else LOG_ERROR("checkpoint %s: %s", rd->m->path, what);
    rd->rc = TRI_ERR_CKPT;
}

static int line_of(const yaml_node_t *n) { return n ? (int)n->start_mark.line + 1 : 0; }

static yaml_node_t *map_get(yaml_document_t *d, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, key))
            return yaml_document_get_node(d, p->value);
    }
    return NULL;
}

static const char *scalar(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int seq_count(const yaml_node_t *n) {
    return n && n->type == YAML_SEQUENCE_NODE
               ? (int)(n->data.sequence.items.top - n->data.sequence.items.start)
               : -1;
}

static yaml_node_t *seq_item(yaml_document_t *d, const yaml_node_t *seq, int i) {
    return yaml_document_get_node(d, seq->data.sequence.items.start[i]);
}

// A decimal integer, nothing around it (the writer's form; "010" is 10, "0x10" is refused).
static int parse_i64(const char *s, int64_t *out) {
    if (!s) return -1;
    const char *p = s + (*s == '-');
    if (!isdigit((unsigned char)*p)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

// A mapping field; reported when absent or of another type.
static yaml_node_t *get_map(reader *rd, yaml_node_t *map, const char *what, const char *key) {
    yaml_node_t *n = map_get(rd->d, map, key);
    if (!n || n->type != YAML_MAPPING_NODE)
        fail(rd, line_of(n ? n : map), "%s%s is %s", what, key, n ? "not a mapping" : "missing");
    return rd->rc == TRI_OK ? n : NULL;
}

static const char *get_str(reader *rd, yaml_node_t *map, const char *what, const char *key) {
    yaml_node_t *n = map_get(rd->d, map, key);
    const char *s = scalar(n);
    if (!s || !*s)
        fail(rd, line_of(n ? n : map), "%s%s is %s", what, key,
             !n  ? "missing"
             : s ? "empty"
                 : "not a scalar");
    return rd->rc == TRI_OK ? s : NULL;
}

// Integer field `key` of `map` within [lo, hi]; 0 when it is, else reported.
static int get_i64(reader *rd, yaml_node_t *map, const char *what, const char *key, int64_t lo,
                   int64_t hi, int64_t *out) {
    if (rd->rc != TRI_OK) return -1;
    yaml_node_t *n = map_get(rd->d, map, key);
    const char *s = scalar(n);
    int64_t v = 0;
    if (!n) fail(rd, line_of(map), "%s%s is missing", what, key);
    else if (parse_i64(s, &v))
        fail(rd, line_of(n), "%s%s: '%s' is not an integer", what, key, s ? s : "(not a scalar)");
    else if (v < lo || v > hi)
        fail(rd, line_of(n), "%s%s: %lld is out of range [%lld, %lld]", what, key, (long long)v,
             (long long)lo, (long long)hi);
    if (rd->rc != TRI_OK) return -1;
    *out = v;
    return 0;
}

static int get_int(reader *rd, yaml_node_t *map, const char *what, const char *key, int lo, int hi,
                   int *out) {
    int64_t v;
    if (get_i64(rd, map, what, key, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

static int get_u64(reader *rd, yaml_node_t *map, const char *what, const char *key, uint64_t *out) {
    if (rd->rc != TRI_OK) return -1;
    yaml_node_t *n = map_get(rd->d, map, key);
    const char *s = scalar(n);
    char *end = NULL;
    errno = 0;
    unsigned long long v = s && isdigit((unsigned char)*s) ? strtoull(s, &end, 10) : 0;
    if (!n) fail(rd, line_of(map), "%s%s is missing", what, key);
    else if (!end || errno || *end)
        fail(rd, line_of(n), "%s%s: '%s' is not an unsigned integer", what, key,
             s ? s : "(not a scalar)");
    if (rd->rc != TRI_OK) return -1;
    *out = v;
    return 0;
}

// The architecture keys of config.model (checkpoint_internal.h), each optional: a manifest
// written before they existed holds a GPT-2, whose values they take.
static void get_arch(reader *rd, yaml_node_t *model, manifest *m) {
    const char *w = "config.model.";
    m->llama = 0, m->n_kv_head = m->n_head, m->ffn_hidden = 4 * m->d_model;
    m->ffn_multiple_of = 256, m->tie_embeddings = 1, m->rope_theta = 10000.0, m->norm_eps = 1e-5;
    yaml_node_t *n = map_get(rd->d, model, "arch");
    if (n) {
        const char *a = scalar(n);
        if (!a || (strcmp(a, "gpt2") && strcmp(a, "llama")))
            fail(rd, line_of(n), "config.model.arch: %s is not gpt2 or llama",
                 a ? a : "not a scalar");
        m->llama = a && !strcmp(a, "llama");
    }
    if (map_get(rd->d, model, "n_kv_head"))
        get_int(rd, model, w, "n_kv_head", 1, m->n_head, &m->n_kv_head);
    if (map_get(rd->d, model, "ffn_hidden"))
        get_int(rd, model, w, "ffn_hidden", 1, 1 << 30, &m->ffn_hidden);
    if (map_get(rd->d, model, "ffn_multiple_of"))
        get_int(rd, model, w, "ffn_multiple_of", 1, 1 << 30, &m->ffn_multiple_of);
    const char *keys[3] = {"tie_embeddings", "rope_theta", "norm_eps"};
    for (int k = 0; k < 3 && rd->rc == TRI_OK; k++) {
        yaml_node_t *v = map_get(rd->d, model, keys[k]);
        const char *t = scalar(v);
        if (!v) continue;
        if (k == 0 && t && (!strcmp(t, "true") || !strcmp(t, "false"))) {
            m->tie_embeddings = !strcmp(t, "true");
            continue;
        }
        char *end = NULL;
        const double x = t && k > 0 ? strtod(t, &end) : NAN;
        if (!(x > 0 && isfinite(x) && end && !*end)) {
            fail(rd, line_of(v), "%s%s: %s is not %s", w, keys[k], t ? t : "not a scalar",
                 k == 0 ? "true or false" : "a positive number");
            continue;
        }
        *(k == 1 ? &m->rope_theta : &m->norm_eps) = x;
    }
    if (rd->rc == TRI_OK && m->n_head % m->n_kv_head)
        fail(rd, line_of(map_get(rd->d, model, "n_kv_head")),
             "config.model.n_kv_head: %d does not divide config.model.n_head %d", m->n_kv_head,
             m->n_head);
}

// A flow sequence of two integers, each within [lo, hi].
static int get_pair(reader *rd, yaml_node_t *map, const char *what, const char *key, int64_t lo,
                    int64_t hi, int64_t *a, int64_t *b) {
    if (rd->rc != TRI_OK) return -1;
    yaml_node_t *n = map_get(rd->d, map, key);
    if (seq_count(n) != 2) {
        fail(rd, line_of(n ? n : map), "%s%s is %s", what, key,
             n ? "not a list of two integers" : "missing");
        return -1;
    }
    int64_t v[2];
    for (int i = 0; i < 2; i++) {
        const char *s = scalar(seq_item(rd->d, n, i));
        if (parse_i64(s, &v[i]))
            fail(rd, line_of(n), "%s%s: '%s' is not an integer", what, key, s ? s : "(a list)");
        else if (v[i] < lo || v[i] > hi)
            fail(rd, line_of(n), "%s%s: %lld is out of range [%lld, %lld]", what, key,
                 (long long)v[i], (long long)lo, (long long)hi);
        if (rd->rc != TRI_OK) return -1;
    }
    *a = v[0], *b = v[1];
    return 0;
}

// ---- the parts of the manifest ----

// step, tokens, samples, optim_t, rng, mesh and config.model, and their agreement.
static void parse_header(reader *rd, yaml_node_t *root) {
    manifest *m = rd->m;
    int64_t tokens = 0;
    const char *format = get_str(rd, root, "", "format");
    if (format && strcmp(format, CKPT_FORMAT))
        fail(rd, line_of(map_get(rd->d, root, "format")), "format: '%s' is not %s", format,
             CKPT_FORMAT);
    int version = 0;
    if (!get_int(rd, root, "", "version", 1, INT_MAX, &version) && version != m->version)
        fail(rd, line_of(map_get(rd->d, root, "version")),
             "version: %d, but the first version line says %d", version, m->version);
    get_int(rd, root, "", "step", 0, INT_MAX, &m->step);
    // A checkpoint's directory is named after its step (a copy elsewhere may not be).
    const char *base = strrchr(m->dir, '/') ? strrchr(m->dir, '/') + 1 : m->dir;
    int dir_step;
    if (rd->rc == TRI_OK && ckpt_is_step_name(base, &dir_step) && dir_step != m->step)
        fail(rd, line_of(map_get(rd->d, root, "step")),
             "step: %d, but the checkpoint's directory is %s", m->step, base);
    get_i64(rd, root, "", "tokens", 0, INT64_MAX, &tokens);
    get_i64(rd, root, "", "samples", 0, INT64_MAX, &m->samples);
    get_int(rd, root, "", "optim_t", 0, INT_MAX, &m->optim_t);
    uint64_t seed = 0, run_seed = 0;
    int64_t draws, v;
    yaml_node_t *rng = get_map(rd, root, "", "rng");
    get_u64(rd, rng, "rng.", "seed", &seed);
    get_i64(rd, rng, "rng.", "draws", 0, 0, &draws);
    yaml_node_t *mesh = get_map(rd, root, "", "mesh");
    int64_t world = 0, deg[3] = {0, 0, 0};
    const char *names[3] = {"tp", "pp", "dp"};
    get_i64(rd, mesh, "mesh.", "world", 1, MAX_COUNT, &world);
    for (int i = 0; i < 3; i++) get_i64(rd, mesh, "mesh.", names[i], 1, MAX_COUNT, &deg[i]);
    get_i64(rd, mesh, "mesh.", "virtual_stages", 1, 1 << 16, &v);
    get_i64(rd, mesh, "mesh.", "zero", 0, 3, &v);
    get_str(rd, mesh, "mesh.", "schedule");
    m->tp = (int)deg[0];
    if (rd->rc == TRI_OK && deg[0] * deg[1] * deg[2] != world)
        fail(rd, line_of(mesh), "mesh: tp %lld x pp %lld x dp %lld is not world %lld",
             (long long)deg[0], (long long)deg[1], (long long)deg[2], (long long)world);
    m->n_files = (int)world;
    yaml_node_t *config = get_map(rd, root, "", "config");
    get_u64(rd, get_map(rd, config, "config.", "run"), "config.run.", "seed", &run_seed);
    yaml_node_t *model = get_map(rd, config, "config.", "model");
    const char *w = "config.model.";
    get_int(rd, model, w, "n_layer", 1, 1 << 16, &m->n_layer);
    get_int(rd, model, w, "n_head", 1, 1 << 16, &m->n_head);
    get_int(rd, model, w, "d_model", 1, 1 << 20, &m->d_model);
    get_int(rd, model, w, "seq_len", 1, 1 << 24, &m->seq_len);
    get_int(rd, model, w, "vocab_size", 1, 1 << 30, &m->vocab_size);
    get_int(rd, model, w, "vocab_pad_to", 1, 1 << 20, &m->vocab_pad_to);
    if (rd->rc != TRI_OK) return;
    get_arch(rd, model, m);
    if (rd->rc != TRI_OK) return;
    // Fields that must agree (each is written from the same state).
    const int rng_line = line_of(map_get(rd->d, rng, "seed"));
    if (m->d_model % m->n_head)
        fail(rd, line_of(map_get(rd->d, model, "n_head")),
             "config.model.n_head: %d does not divide config.model.d_model %d", m->n_head,
             m->d_model);
    else if (seed != run_seed)
        fail(rd, rng_line, "rng.seed: %llu, but config.run.seed is %llu", (unsigned long long)seed,
             (unsigned long long)run_seed);
    else if (m->optim_t != m->step)
        fail(rd, line_of(map_get(rd->d, root, "optim_t")),
             "optim_t: %d, but step is %d (one AdamW step per training step)", m->optim_t, m->step);
    else if (m->samples < m->step)
        fail(rd, line_of(map_get(rd->d, root, "samples")),
             "samples: %lld, below step %d (every step takes at least one sample)",
             (long long)m->samples, m->step);
    else if (m->samples > INT64_MAX / m->seq_len || tokens != m->samples * m->seq_len)
        fail(rd, line_of(map_get(rd->d, root, "tokens")),
             "tokens: %lld, but samples %lld x config.model.seq_len %d is %lld", (long long)tokens,
             (long long)m->samples, m->seq_len,
             m->samples > INT64_MAX / m->seq_len ? -1LL : (long long)(m->samples * m->seq_len));
    m->tokens = tokens;
}

static int cmp_tensor_name(const void *a, const void *b, void *ctx) {
    const tensor_info *t = ctx;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

static void parse_tensors(reader *rd, yaml_node_t *root) {
    manifest *m = rd->m;
    if (rd->rc != TRI_OK) return;
    yaml_node_t *seq = map_get(rd->d, root, "tensors");
    int n = seq_count(seq);
    if (n < 1 || n > MAX_COUNT) {
        fail(rd, line_of(seq ? seq : root), "tensors is %s",
             seq ? "not a list of tensors" : "missing");
        return;
    }
    m->tensors = xcalloc((size_t)n, sizeof(tensor_info));
    m->by_name = xcalloc((size_t)n, sizeof(int));
    m->n_tensors = n;
    for (int i = 0; i < n && rd->rc == TRI_OK; i++) {
        yaml_node_t *t = seq_item(rd->d, seq, i);
        tensor_info *ti = &m->tensors[i];
        ti->line = line_of(t);
        const char *name = get_str(rd, t, "tensors: ", "name");
        if (name && strlen(name) >= sizeof ti->name)
            fail(rd, ti->line, "tensors: name '%.40s...' is longer than any tensor's", name);
        if (rd->rc == TRI_OK) snprintf(ti->name, sizeof ti->name, "%s", name);
        get_pair(rd, t, "tensors: ", "shape", 1, MAX_DIM, &ti->rows, &ti->cols);
        if (rd->rc == TRI_OK && ti->rows > MAX_NUMEL / ti->cols)
            fail(rd, ti->line, "tensors: %s: shape [%lld, %lld] is larger than any tensor's",
                 ti->name, (long long)ti->rows, (long long)ti->cols);
        m->by_name[i] = i;
    }
    if (rd->rc != TRI_OK) return;
    qsort_r(m->by_name, (size_t)n, sizeof(int), cmp_tensor_name, m->tensors);
    for (int i = 1; i < n; i++) {
        const tensor_info *a = &m->tensors[m->by_name[i - 1]], *b = &m->tensors[m->by_name[i]];
        if (!strcmp(a->name, b->name)) {
            fail(rd, b->line, "tensors: %s is listed twice (also line %d)", b->name, a->line);
            return;
        }
    }
}

int manifest_find_tensor(const manifest *m, const char *name) {
    int lo = 0, hi = m->n_tensors;
    while (lo < hi) {
        int mid = (lo + hi) / 2, c = strcmp(m->tensors[m->by_name[mid]].name, name);
        if (!c) return m->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

// The index of rank file `name` ("rank_%05d.bin", the writer's only form), or -1.
static int file_index(const manifest *m, const char *name) {
    int r, len = 0;
    if (sscanf(name, "rank_%d.bin%n", &r, &len) != 1 || name[len] || r < 0 || r >= m->n_files)
        return -1;
    return strcmp(m->files[r], name) ? -1 : r;
}

static void parse_files(reader *rd, yaml_node_t *root) {
    manifest *m = rd->m;
    if (rd->rc != TRI_OK) return;
    yaml_node_t *seq = map_get(rd->d, root, "files");
    int n = seq_count(seq);
    if (n != m->n_files) {
        fail(rd, line_of(seq ? seq : root), "files: %s %d rank files, but mesh.world is %d",
             n < 0 ? "not a list of" : "lists", n < 0 ? 0 : n, m->n_files);
        return;
    }
    m->files = xcalloc((size_t)n, sizeof *m->files);
    m->file_bytes = xcalloc((size_t)n, sizeof(int64_t));
    for (int i = 0; i < n && rd->rc == TRI_OK; i++) {
        yaml_node_t *f = seq_item(rd->d, seq, i);
        char what[96];
        snprintf(m->files[i], sizeof m->files[i], "rank_%05d.bin", i);
        snprintf(what, sizeof what, "files: entry %d (%s): ", i, m->files[i]);
        const char *name = get_str(rd, f, what, "name");
        if (name && strcmp(name, m->files[i]))
            fail(rd, line_of(f), "files: entry %d is '%.80s', not %s", i, name, m->files[i]);
        get_i64(rd, f, what, "bytes", 0, MAX_FILE_BYTES, &m->file_bytes[i]);
    }
}

// A region's bytes in its file (its extent lies inside its tensor: no overflow).
static int64_t region_bytes(const region *g) { return g->r.rows * g->r.cols * g->elem; }

static void parse_regions(reader *rd, yaml_node_t *root) {
    manifest *m = rd->m;
    if (rd->rc != TRI_OK) return;
    yaml_node_t *seq = map_get(rd->d, root, "regions");
    int n = seq_count(seq);
    if (n < 1 || n > MAX_COUNT) {
        fail(rd, line_of(seq ? seq : root), "regions is %s",
             seq ? "not a list of regions" : "missing");
        return;
    }
    m->regions = xcalloc((size_t)n, sizeof(region));
    m->n_regions = n;
    const char *w = "regions: ";
    for (int i = 0; i < n && rd->rc == TRI_OK; i++) {
        yaml_node_t *node = seq_item(rd->d, seq, i);
        region *g = &m->regions[i];
        g->line = line_of(node);
        const char *t = get_str(rd, node, w, "tensor"), *k = get_str(rd, node, w, "kind");
        const char *dt = get_str(rd, node, w, "dtype"), *f = get_str(rd, node, w, "file");
        int64_t off = 0, crc = 0;
        get_pair(rd, node, w, "offset", 0, MAX_DIM, &g->r.row, &g->r.col);
        get_pair(rd, node, w, "extent", 1, MAX_DIM, &g->r.rows, &g->r.cols);
        get_i64(rd, node, w, "byte_offset", 0, MAX_FILE_BYTES, &off);
        const char *cs = scalar(map_get(rd->d, node, "crc32c"));
        char *end = NULL;
        if (rd->rc == TRI_OK && cs && !strncmp(cs, "0x", 2) && isxdigit((unsigned char)cs[2]))
            crc = strtoll(cs + 2, &end, 16);
        if (rd->rc == TRI_OK && (!end || *end || crc > 0xffffffffLL))
            fail(rd, g->line, "regions: crc32c: '%s' is not a 32-bit hexadecimal number 0x...",
                 cs ? cs : "(missing)");
        if (rd->rc != TRI_OK) return;
        g->offset = (uint64_t)off, g->crc = (uint32_t)crc;
        g->tensor = manifest_find_tensor(m, t);
        g->kind = KIND_COUNT;
        for (int q = 0; q < KIND_COUNT; q++)
            if (!strcmp(k, ckpt_kind_names[q])) g->kind = (ckpt_kind)q;
        g->elem = !strcmp(dt, "f32") ? 4 : !strcmp(dt, "bf16") ? 2 : 0;
        g->file = file_index(m, f);
        const tensor_info *ti = g->tensor >= 0 ? &m->tensors[g->tensor] : NULL;
        if (!ti) fail(rd, g->line, "regions: tensor '%.80s' is not in tensors", t);
        else if (g->kind == KIND_COUNT)
            fail(rd, g->line, "regions: kind '%.80s' is not param, master, adam_m or adam_v", k);
        else if (!g->elem) fail(rd, g->line, "regions: dtype '%.80s' is not f32 or bf16", dt);
        else if (g->file < 0) fail(rd, g->line, "regions: file '%.80s' is not in files", f);
        else if (g->r.row >= ti->rows || g->r.rows > ti->rows - g->r.row || g->r.col >= ti->cols ||
                 g->r.cols > ti->cols - g->r.col)
            fail(rd, g->line,
                 "regions: %s (%s): offset [%lld, %lld] extent [%lld, %lld] lies outside its "
                 "shape [%lld, %lld]",
                 ti->name, k, (long long)g->r.row, (long long)g->r.col, (long long)g->r.rows,
                 (long long)g->r.cols, (long long)ti->rows, (long long)ti->cols);
        else if (g->offset > (uint64_t)m->file_bytes[g->file] ||
                 (uint64_t)region_bytes(g) > (uint64_t)m->file_bytes[g->file] - g->offset)
            fail(rd, g->line,
                 "regions: %s (%s): byte_offset %llu and %lld bytes lie past the end of %s "
                 "(%lld bytes)",
                 ti->name, k, (unsigned long long)g->offset, (long long)region_bytes(g), f,
                 (long long)m->file_bytes[g->file]);
    }
}

// ---- tiling ----

static int cmp_place(const void *a, const void *b, void *ctx) {
    const region *x = &((const region *)ctx)[*(const int *)a];
    const region *y = &((const region *)ctx)[*(const int *)b];
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->r.row != y->r.row) return x->r.row < y->r.row ? -1 : 1;
    return (x->r.col > y->r.col) - (x->r.col < y->r.col);
}

static int cmp_col(const void *a, const void *b, void *ctx) {
    const region *x = &((const region *)ctx)[*(const int *)a];
    const region *y = &((const region *)ctx)[*(const int *)b];
    return (x->r.col > y->r.col) - (x->r.col < y->r.col);
}

static int cmp_i64(const void *a, const void *b) {
    return (*(const int64_t *)a > *(const int64_t *)b) -
           (*(const int64_t *)a < *(const int64_t *)b);
}

// The regions ix[0..n) of one (tensor, kind), sorted by row then column, cover the tensor
// exactly once. Overlaps are found band by band: between consecutive row boundaries the
// regions that span the band are disjoint intervals of columns, or two of them overlap.
static void check_tiling(reader *rd, const int *ix, int n) {
    const manifest *m = rd->m;
    const region *R = m->regions;
    const tensor_info *ti = &m->tensors[R[ix[0]].tensor];
    const char *kind = ckpt_kind_names[R[ix[0]].kind];
    const int64_t total = ti->rows * ti->cols;
    int64_t sum = 0;
    for (int i = 0; i < n && sum <= total; i++) sum += R[ix[i]].r.rows * R[ix[i]].r.cols;
    int64_t *bounds = xmalloc(2 * (size_t)n * sizeof(int64_t));
    int *active = xmalloc((size_t)n * sizeof(int)), na = 0, next = 0, nb = 0;
    for (int i = 0; i < n; i++) {
        bounds[nb++] = R[ix[i]].r.row;
        bounds[nb++] = R[ix[i]].r.row + R[ix[i]].r.rows;
    }
    qsort(bounds, (size_t)nb, sizeof(int64_t), cmp_i64);
    for (int j = 0; j + 1 < nb && rd->rc == TRI_OK; j++) {
        const int64_t y = bounds[j];
        if (y == bounds[j + 1]) continue;
        int k = 0;
        for (int i = 0; i < na; i++)
            if (R[active[i]].r.row + R[active[i]].r.rows > y) active[k++] = active[i];
        na = k;
        while (next < n && R[ix[next]].r.row <= y) active[na++] = ix[next++];
        qsort_r(active, (size_t)na, sizeof(int), cmp_col, (void *)R);
        for (int i = 0; i + 1 < na; i++) {
            const region *a = &R[active[i]], *b = &R[active[i + 1]];
            if (a->r.col + a->r.cols > b->r.col)
                fail(rd, b->line,
                     "regions: %s (%s): rows [%lld, %lld) cols [%lld, %lld) overlap the region "
                     "of line %d",
                     ti->name, kind, (long long)b->r.row, (long long)(b->r.row + b->r.rows),
                     (long long)b->r.col, (long long)(b->r.col + b->r.cols), a->line);
        }
    }
    free(bounds);
    free(active);
    if (rd->rc == TRI_OK && sum != total)
        fail(rd, ti->line,
             "regions: %s (%s): the regions cover %lld of its %lld elements (a "
             "region is missing)",
             ti->name, kind, (long long)sum, (long long)total);
}

static int cmp_bytes(const void *a, const void *b, void *ctx) {
    const region *x = &((const region *)ctx)[*(const int *)a];
    const region *y = &((const region *)ctx)[*(const int *)b];
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

void manifest_model_config(const manifest *m, model_config *mc) {
    *mc = (model_config){.arch = m->llama ? "llama" : "gpt2",
                         .n_layer = m->n_layer,
                         .n_head = m->n_head,
                         .d_model = m->d_model,
                         .seq_len = m->seq_len,
                         .vocab_size = m->vocab_size,
                         .vocab_pad_to = m->vocab_pad_to,
                         .n_kv_head = m->n_kv_head,
                         .ffn_hidden = m->ffn_hidden,
                         .ffn_multiple_of = m->ffn_multiple_of,
                         .tie_embeddings = m->tie_embeddings,
                         .rope_theta = m->rope_theta,
                         .norm_eps = m->norm_eps};
}

// The tensors are those of the model that config.model describes, with the vocabulary
// padded for mesh.tp as the writer padded it: same names, same shapes, none more.
static void check_tensors_match_model(reader *rd) {
    const manifest *m = rd->m;
    if ((int64_t)m->vocab_pad_to * m->tp > (1 << 24)) {
        fail(rd, 0, "config.model.vocab_pad_to %d x mesh.tp %d is larger than any padding",
             m->vocab_pad_to, m->tp);
        return;
    }
    model_config mc;
    manifest_model_config(m, &mc);
    param_table full;
    params_build_full(&full, &mc, m->tp);
    if (full.n_entries != m->n_tensors)
        fail(rd, 0, "tensors: %d listed, but config.model (n_layer %d) has %d", m->n_tensors,
             m->n_layer, full.n_entries);
    for (int i = 0; i < full.n_entries && rd->rc == TRI_OK; i++) {
        const param_entry *e = &full.entries[i];
        const int t = manifest_find_tensor(m, e->name);
        if (t < 0) fail(rd, 0, "tensors: %s is missing (config.model has it)", e->name);
        else if (m->tensors[t].rows != e->global_rows || m->tensors[t].cols != e->global_cols)
            fail(rd, m->tensors[t].line,
                 "tensors: %s: shape [%lld, %lld], but config.model (d_model %d, seq_len %d, "
                 "vocab_size %d, vocab_pad_to %d, mesh.tp %d) gives [%lld, %lld]",
                 e->name, (long long)m->tensors[t].rows, (long long)m->tensors[t].cols, m->d_model,
                 m->seq_len, m->vocab_size, m->vocab_pad_to, m->tp, (long long)e->global_rows,
                 (long long)e->global_cols);
    }
    params_free(&full);
}

// Every (tensor, kind) that the loader may read is tiled exactly by its regions: param or
// master (one of them), adam_m and adam_v of every tensor; every rank file is tiled exactly
// by the regions stored in it (the writer puts them back to back), so no two regions share
// a byte and no byte belongs to none.
static void check_regions(reader *rd) {
    const manifest *m = rd->m;
    const int n = m->n_regions;
    int *ix = xmalloc((size_t)n * sizeof(int));
    unsigned char *kinds = xcalloc((size_t)m->n_tensors, 1);
    for (int i = 0; i < n; i++) ix[i] = i;
    qsort_r(ix, (size_t)n, sizeof(int), cmp_place, m->regions);
    for (int a = 0, b; a < n && rd->rc == TRI_OK; a = b) {
        const region *g = &m->regions[ix[a]];
        for (b = a + 1;
             b < n && m->regions[ix[b]].tensor == g->tensor && m->regions[ix[b]].kind == g->kind;
             b++) {
        }
        kinds[g->tensor] |= (unsigned char)(1u << g->kind);
        check_tiling(rd, ix + a, b - a);
    }
    for (int t = 0; t < m->n_tensors && rd->rc == TRI_OK; t++) {
        const int k = kinds[t], param = k & (1 << KIND_PARAM), master = k & (1 << KIND_MASTER);
        const char *missing = !param && !master           ? "has neither param nor master regions"
                              : param && master           ? "has both param and master regions"
                              : !(k & (1 << KIND_ADAM_M)) ? "has no adam_m regions"
                              : !(k & (1 << KIND_ADAM_V)) ? "has no adam_v regions"
                                                          : NULL;
        if (missing) fail(rd, m->tensors[t].line, "tensors: %s %s", m->tensors[t].name, missing);
    }
    qsort_r(ix, (size_t)n, sizeof(int), cmp_bytes, m->regions);
    for (int i = 0, f = 0; f < m->n_files && rd->rc == TRI_OK; f++) {
        uint64_t at = 0; // the end of the bytes of file f tiled so far
        const region *prev = NULL;
        for (; i < n && m->regions[ix[i]].file == f && rd->rc == TRI_OK; i++) {
            const region *g = &m->regions[ix[i]];
            if (g->offset < at)
                fail(rd, g->line, "regions: byte_offset %llu of %s is inside the region of line %d",
                     (unsigned long long)g->offset, m->files[f], prev->line);
            else if (g->offset > at)
                fail(rd, g->line, "regions: bytes [%llu, %llu) of %s belong to no region",
                     (unsigned long long)at, (unsigned long long)g->offset, m->files[f]);
            at = g->offset + (uint64_t)region_bytes(g), prev = g;
        }
        if (rd->rc == TRI_OK && at != (uint64_t)m->file_bytes[f])
            fail(rd, 0, "files: %s: bytes [%llu, %lld) belong to no region", m->files[f],
                 (unsigned long long)at, (long long)m->file_bytes[f]);
    }
    free(kinds);
    free(ix);
}

// ---- reading ----

// The block of lines from `config:` (at column 0) to the next line that starts at column 0:
// the resolved config, kept for the resume's comparison (config_resume.h).
static void keep_config_block(manifest *m, const char *text, size_t n) {
    int line = 1;
    for (size_t at = 0; at < n; line++) {
        const char *eol = memchr(text + at, '\n', n - at);
        size_t end = eol ? (size_t)(eol - text) + 1 : n;
        if (end - at >= 8 && !strncmp(text + at, "config:", 7) &&
            (text[at + 7] == '\n' || text[at + 7] == ' ' || text[at + 7] == '\r')) {
            size_t stop = end;
            while (stop < n && (text[stop] == ' ' || text[stop] == '\n')) {
                const char *next = memchr(text + stop, '\n', n - stop);
                stop = next ? (size_t)(next - text) + 1 : n;
            }
            m->config_yaml = xmalloc(stop - at + 1);
            memcpy(m->config_yaml, text + at, stop - at);
            m->config_yaml[stop - at] = '\0';
            m->config_len = stop - at, m->config_line = line;
            return;
        }
        at = end;
    }
}

// The YAML document of the manifest's bytes, nested at most YLIMIT_MAX_DEPTH levels (a
// manifest nested 100,000 levels deep is refused before libyaml builds it: base/yaml_limit.h).
static int load_yaml(const char *text, size_t n, yaml_document_t *doc, const manifest *m) {
    size_t deep_line = 0;
    if (ylimit_depth_exceeds((const unsigned char *)text, n, YLIMIT_MAX_DEPTH, &deep_line)) {
        LOG_ERROR("checkpoint %s:%zu: nested deeper than " YLIMIT_MAX_DEPTH_TEXT " levels; a "
                  "manifest trident writes nests 5",
                  m->path, deep_line);
        return 0;
    }
    yaml_parser_t parser;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, n);
    int ok = yaml_parser_load(&parser, doc);
    if (!ok)
        LOG_ERROR("checkpoint %s:%zu: not valid YAML: %s", m->path, parser.problem_mark.line + 1,
                  parser.problem ? parser.problem : "unreadable");
    else if (!yaml_document_get_root_node(doc)) {
        LOG_ERROR("checkpoint %s: empty", m->path);
        yaml_document_delete(doc);
        ok = 0;
    }
    yaml_parser_delete(&parser);
    return ok;
}

tri_status manifest_read(manifest *m, const char *dir) {
    memset(m, 0, sizeof *m);
    pathf(m->dir, "%s", dir);
    pathf(m->path, "%s/manifest.yaml", dir);
    size_t n = 0;
    char *text = tri_read_small_file(m->path, MAX_MANIFEST_BYTES, &n);
    if (!text) {
        LOG_ERROR("checkpoint %s: cannot read %s: %s", dir, m->path, strerror(errno));
        LOG_HINT("a checkpoint directory holds manifest.yaml and rank_*.bin; a directory without "
                 "the manifest is incomplete (a write that did not finish)");
        return TRI_ERR_CKPT;
    }
    reader rd = {m, NULL, TRI_OK};
    char format[64], version[32];
    int64_t v = 0;
    if (!manifest_scan_key(text, n, "format", format, sizeof format) ||
        strcmp(format, CKPT_FORMAT) ||
        !manifest_scan_key(text, n, "version", version, sizeof version))
        fail(&rd, 0, "not a trident checkpoint manifest (no 'format: %s' and 'version: N' lines)",
             CKPT_FORMAT);
    else if (parse_i64(version, &v) || v < 1 || v > CKPT_VERSION)
        fail(&rd, 0, "format version '%s': this trident reads versions 1 to %d", version,
             CKPT_VERSION);
    m->version = (int)v;
    // Version 2 on: the seal is checked first. A mismatch is reported, then the fields are
    // checked anyway, so that an edited field can be named.
    size_t body = n;
    uint32_t sealed = 0, crc = 0;
    int seal_bad = 0;
    if (rd.rc == TRI_OK && m->version >= 2) {
        if (!manifest_find_seal(text, n, &body, &sealed))
            fail(&rd, 0,
                 "no '%s: 0x...' line at its end (the file is truncated or was not "
                 "written by trident)",
                 CKPT_SEAL_KEY);
        else if ((crc = crc32c_update(0, text, body)) != sealed) {
            LOG_ERROR("checkpoint %s: checksum mismatch: its last line records %s 0x%08x, its "
                      "bytes have 0x%08x (the file was edited or damaged after it was written)",
                      m->path, CKPT_SEAL_KEY, sealed, crc);
            seal_bad = 1;
        }
    } else if (rd.rc == TRI_OK && manifest_find_seal(text, n, &body, &sealed)) {
        fail(&rd, 0,
             "version: 1, but the file ends with a %s line, which only version 2 on "
             "writes (the version was edited)",
             CKPT_SEAL_KEY);
    } else if (rd.rc == TRI_OK) {
        LOG_INFO("checkpoint %s: format version 1 has no manifest checksum: its fields and "
                 "regions are checked, its bytes cannot be",
                 m->path);
    }
    yaml_document_t doc;
    if (rd.rc == TRI_OK && load_yaml(text, body, &doc, m)) {
        rd.d = &doc;
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root->type != YAML_MAPPING_NODE) fail(&rd, 1, "not a mapping of fields");
        parse_header(&rd, root);
        char why[1024];
        int line = 0;
        if (rd.rc == TRI_OK && manifest_read_data_order(&doc, root, m, why, sizeof why, &line))
            fail(&rd, line, "%s", why);
        parse_tensors(&rd, root);
        parse_files(&rd, root);
        if (rd.rc == TRI_OK) check_tensors_match_model(&rd);
        parse_regions(&rd, root);
        if (rd.rc == TRI_OK) check_regions(&rd);
        if (rd.rc == TRI_OK) keep_config_block(m, text, body);
        yaml_document_delete(&doc);
    } else if (rd.rc == TRI_OK) {
        rd.rc = TRI_ERR_CKPT;
    }
    free(text);
    if (rd.rc == TRI_OK && seal_bad) rd.rc = TRI_ERR_CKPT;
    if (rd.rc != TRI_OK) {
        LOG_HINT("the manifest is damaged, edited or not written by trident; resume from another "
                 "checkpoint (checkpoint.resume: <checkpoint.dir>/step_N) or start fresh "
                 "(checkpoint.resume: none)");
        manifest_free(m);
    }
    return rd.rc;
}

void manifest_free(manifest *m) {
    free(m->tensors);
    free(m->by_name);
    free(m->files);
    free(m->file_bytes);
    free(m->regions);
    free(m->config_yaml);
    data_cursor_free(&m->order);
    m->tensors = NULL, m->by_name = NULL, m->files = NULL, m->file_bytes = NULL;
    m->regions = NULL, m->config_yaml = NULL;
    m->n_tensors = m->n_files = m->n_regions = 0;
}
