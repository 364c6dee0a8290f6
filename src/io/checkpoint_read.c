// checkpoint_read.c: reading checkpoints (see checkpoint.h): the manifest, the regions a
// rank needs on any layout, resume, and the whole model for export and sampling.
#include "io/checkpoint_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "base/bf16.h"
#include "base/crc32c.h"
#include "base/yaml_limit.h"

// The spans this rank must fill on load: every parameter it holds (its shards under
// ZeRO-3), and the moments (and, in mixed precision, the master weights) of all its pieces.
static int needed_spans(const ckpt_state *s, span *out) {
    const zero_layout *zl = zero_layout_of(s->zero);
    const param_table *pt = s->pt;
    const int bf16 = zero_param_dtype(s->zero) == DTYPE_BF16;
    const size_t pelem = dtype_size(zero_param_dtype(s->zero));
    int n = 0;
    if (zl->stage < 3) {
        for (int i = 0; i < pt->n_entries; i++, n++) {
            const param_entry *e = &pt->entries[i];
            if (out)
                out[n] = (span){i,
                                e->offset,
                                e->offset + (size_t)e->local_numel,
                                KIND_PARAM,
                                zero_param_at(s->zero, e->offset),
                                pelem};
        }
    }
    const ckpt_kind kinds[] = {KIND_PARAM, KIND_MASTER, KIND_ADAM_M, KIND_ADAM_V};
    for (int k = 0; k < 4; k++) {
        if ((kinds[k] == KIND_PARAM && zl->stage < 3) || (kinds[k] == KIND_MASTER && !bf16))
            continue;
        for (int p = 0; p < zl->n_pieces; p++, n++) {
            const zero_piece *pc = &zl->pieces[p];
            if (out) out[n] = ckpt_piece_span(s, pc, kinds[k], pc->lo, pc->hi);
        }
    }
    return n;
}

static int read_text(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = '\0';
    while (got && (buf[got - 1] == '\n' || buf[got - 1] == ' ')) buf[--got] = '\0';
    return 0;
}

// ---- reading: the manifest ----

typedef struct {
    int tensor; // index into the manifest's tensors
    ckpt_kind kind;
    int elem; // bytes per element: 4 (f32) or 2 (bf16)
    rect r;
    int file;
    uint64_t offset;
    uint32_t crc;
} region;

typedef struct {
    char name[32];
    int64_t rows, cols;
} tensor_info;

typedef struct {
    char dir[PATH_BYTES], path[PATH_BYTES]; // the checkpoint, its manifest.yaml
    int step, optim_t;
    int64_t samples, tokens;
    int n_layer, n_head, d_model, seq_len, vocab_size, vocab_pad_to;
    tensor_info *tensors;
    int n_tensors;
    char (*files)[64];
    int64_t *file_bytes;
    int n_files;
    region *regions;
    int n_regions;
} manifest;

static void manifest_free(manifest *m) {
    free(m->tensors);
    free(m->files);
    free(m->file_bytes);
    free(m->regions);
    memset(m, 0, sizeof *m);
}

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

static const char *scalar(yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int get_i64(yaml_document_t *d, yaml_node_t *map, const char *key, int64_t *out) {
    const char *s = scalar(map_get(d, map, key));
    if (!s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int get_int(yaml_document_t *d, yaml_node_t *map, const char *key, int *out) {
    int64_t v;
    if (get_i64(d, map, key, &v) || v < INT32_MIN || v > INT32_MAX) return -1;
    *out = (int)v;
    return 0;
}

// A flow sequence of two integers.
static int get_pair(yaml_document_t *d, yaml_node_t *map, const char *key, int64_t *a, int64_t *b) {
    yaml_node_t *n = map_get(d, map, key);
    if (!n || n->type != YAML_SEQUENCE_NODE ||
        n->data.sequence.items.top - n->data.sequence.items.start != 2)
        return -1;
    const char *x = scalar(yaml_document_get_node(d, n->data.sequence.items.start[0]));
    const char *y = scalar(yaml_document_get_node(d, n->data.sequence.items.start[1]));
    if (!x || !y) return -1;
    *a = strtoll(x, NULL, 10), *b = strtoll(y, NULL, 10);
    return 0;
}

static int seq_len_of(yaml_node_t *n) {
    return n && n->type == YAML_SEQUENCE_NODE
               ? (int)(n->data.sequence.items.top - n->data.sequence.items.start)
               : -1;
}

static int find_tensor(const manifest *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return i;
    return -1;
}

static tri_status bad_manifest(const manifest *m, yaml_node_t *n, const char *what) {
    LOG_ERROR("checkpoint %s:%d: %s", m->path, n ? (int)n->start_mark.line + 1 : 1, what);
    LOG_HINT("the manifest is damaged or not written by trident; resume from an older checkpoint "
             "(checkpoint.resume: PATH) or start fresh (checkpoint.resume: none)");
    return TRI_ERR_CKPT;
}

static tri_status parse_regions(manifest *m, yaml_document_t *d, yaml_node_t *seq) {
    m->n_regions = seq_len_of(seq);
    if (m->n_regions < 0) return bad_manifest(m, seq, "'regions' is not a list");
    m->regions = xcalloc((size_t)m->n_regions + 1, sizeof(region));
    for (int i = 0; i < m->n_regions; i++) {
        yaml_node_t *n = yaml_document_get_node(d, seq->data.sequence.items.start[i]);
        region *g = &m->regions[i];
        const char *t = scalar(map_get(d, n, "tensor")), *k = scalar(map_get(d, n, "kind"));
        const char *dt = scalar(map_get(d, n, "dtype")), *f = scalar(map_get(d, n, "file"));
        int64_t off, crc;
        if (!t || !k || !dt || !f || get_pair(d, n, "offset", &g->r.row, &g->r.col) ||
            get_pair(d, n, "extent", &g->r.rows, &g->r.cols) ||
            get_i64(d, n, "byte_offset", &off) || get_i64(d, n, "crc32c", &crc))
            return bad_manifest(m, n,
                                "a region lacks tensor, kind, dtype, offset, extent, file, "
                                "byte_offset or crc32c");
        g->offset = (uint64_t)off, g->crc = (uint32_t)crc;
        g->tensor = find_tensor(m, t);
        g->kind = KIND_COUNT;
        for (int q = 0; q < KIND_COUNT; q++)
            if (!strcmp(k, ckpt_kind_names[q])) g->kind = (ckpt_kind)q;
        g->elem = !strcmp(dt, "f32") ? 4 : !strcmp(dt, "bf16") ? 2 : 0;
        g->file = -1;
        for (int q = 0; q < m->n_files; q++)
            if (!strcmp(m->files[q], f)) g->file = q;
        const tensor_info *ti = g->tensor >= 0 ? &m->tensors[g->tensor] : NULL;
        if (!ti || g->kind == KIND_COUNT || !g->elem || g->file < 0 || g->r.row < 0 ||
            g->r.col < 0 || g->r.rows < 1 || g->r.cols < 1 || g->r.row + g->r.rows > ti->rows ||
            g->r.col + g->r.cols > ti->cols ||
            g->offset + (uint64_t)(g->r.rows * g->r.cols * g->elem) >
                (uint64_t)m->file_bytes[g->file])
            return bad_manifest(m, n,
                                "a region names an unknown tensor, kind, dtype or file, or lies "
                                "outside its tensor or file");
    }
    return TRI_OK;
}

// Reads <dir>/manifest.yaml.
static tri_status manifest_read(manifest *m, const char *dir) {
    memset(m, 0, sizeof *m);
    pathf(m->dir, "%s", dir);
    pathf(m->path, "%s/manifest.yaml", dir);
    FILE *f = fopen(m->path, "r");
    if (!f) {
        LOG_ERROR("checkpoint %s: cannot read %s: %s", dir, m->path, strerror(errno));
        LOG_HINT("a checkpoint directory holds manifest.yaml and rank_*.bin; a directory without "
                 "the manifest is incomplete (a write that did not finish)");
        return TRI_ERR_CKPT;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    int ok = ylimit_load_file(&parser, f, &doc); // nesting limited (base/yaml_limit.h)
    fclose(f);
    if (!ok) {
        LOG_ERROR("checkpoint %s:%zu: YAML error: %s", m->path, parser.problem_mark.line + 1,
                  parser.problem ? parser.problem : "unreadable");
        yaml_parser_delete(&parser);
        return bad_manifest(m, NULL, "the manifest is not valid YAML");
    }
    yaml_parser_delete(&parser);
    tri_status rc = TRI_OK;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    const char *format = scalar(map_get(&doc, root, "format"));
    int version = 0;
    yaml_node_t *model = map_get(&doc, map_get(&doc, root, "config"), "model");
    yaml_node_t *tensors = map_get(&doc, root, "tensors"), *files = map_get(&doc, root, "files");
    if (!format || strcmp(format, CKPT_FORMAT) || get_int(&doc, root, "version", &version)) {
        rc = bad_manifest(m, root, "not a trident checkpoint manifest (format/version missing)");
        goto done;
    }
    if (version != CKPT_VERSION) {
        LOG_ERROR("checkpoint %s: format version %d; this trident reads version %d", m->path,
                  version, CKPT_VERSION);
        rc = TRI_ERR_CKPT;
        goto done;
    }
    if (get_int(&doc, root, "step", &m->step) || get_i64(&doc, root, "samples", &m->samples) ||
        get_i64(&doc, root, "tokens", &m->tokens) || get_int(&doc, root, "optim_t", &m->optim_t) ||
        get_int(&doc, model, "n_layer", &m->n_layer) ||
        get_int(&doc, model, "n_head", &m->n_head) ||
        get_int(&doc, model, "d_model", &m->d_model) ||
        get_int(&doc, model, "seq_len", &m->seq_len) ||
        get_int(&doc, model, "vocab_size", &m->vocab_size) ||
        get_int(&doc, model, "vocab_pad_to", &m->vocab_pad_to) || seq_len_of(tensors) < 1 ||
        seq_len_of(files) < 1) {
        rc = bad_manifest(m, root,
                          "step, samples, tokens, optim_t, config.model, tensors or files "
                          "missing");
        goto done;
    }
    m->n_tensors = seq_len_of(tensors);
    m->tensors = xcalloc((size_t)m->n_tensors, sizeof(tensor_info));
    for (int i = 0; i < m->n_tensors && rc == TRI_OK; i++) {
        yaml_node_t *n = yaml_document_get_node(&doc, tensors->data.sequence.items.start[i]);
        const char *name = scalar(map_get(&doc, n, "name"));
        if (!name || strlen(name) >= sizeof m->tensors[i].name ||
            get_pair(&doc, n, "shape", &m->tensors[i].rows, &m->tensors[i].cols))
            rc = bad_manifest(m, n, "a tensor lacks name or shape");
        else snprintf(m->tensors[i].name, sizeof m->tensors[i].name, "%s", name);
    }
    m->n_files = seq_len_of(files);
    m->files = xcalloc((size_t)m->n_files, sizeof *m->files);
    m->file_bytes = xcalloc((size_t)m->n_files, sizeof(int64_t));
    for (int i = 0; i < m->n_files && rc == TRI_OK; i++) {
        yaml_node_t *n = yaml_document_get_node(&doc, files->data.sequence.items.start[i]);
        const char *name = scalar(map_get(&doc, n, "name"));
        if (!name || strchr(name, '/') || strlen(name) >= sizeof m->files[i] ||
            get_i64(&doc, n, "bytes", &m->file_bytes[i]))
            rc = bad_manifest(m, n, "a file lacks name or bytes");
        else snprintf(m->files[i], sizeof m->files[i], "%s", name);
    }
    if (rc == TRI_OK) rc = parse_regions(m, &doc, map_get(&doc, root, "regions"));
done:
    yaml_document_delete(&doc);
    if (rc != TRI_OK) manifest_free(m);
    return rc;
}

// Every tensor of `pt` must be in the manifest with the same global shape.
static tri_status check_shapes(const manifest *m, const param_table *pt) {
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        int t = find_tensor(m, e->name);
        // The vocabulary's padding (vocab_pad_to * tp rows) may differ between layouts:
        // only the real rows must agree.
        const int vocab = e->split == SPLIT_VOCAB;
        int64_t rows = vocab ? m->vocab_size : m->tensors[t < 0 ? 0 : t].rows;
        if (t >= 0 && rows == (vocab ? e->valid_rows : e->global_rows) &&
            m->tensors[t].cols == e->global_cols)
            continue;
        if (t < 0) LOG_ERROR("checkpoint %s: tensor %s is not in the checkpoint", m->path, e->name);
        else
            LOG_ERROR("checkpoint %s: tensor %s is [%lld, %lld] in the checkpoint but [%lld, %lld] "
                      "in this model",
                      m->path, e->name, (long long)m->tensors[t].rows,
                      (long long)m->tensors[t].cols, (long long)e->global_rows,
                      (long long)e->global_cols);
        LOG_HINT("the checkpoint holds a model with n_layer %d, n_head %d, d_model %d, seq_len %d, "
                 "vocab_size %d, vocab_pad_to %d: use the same model keys to resume it, or set "
                 "checkpoint.resume: none",
                 m->n_layer, m->n_head, m->d_model, m->seq_len, m->vocab_size, m->vocab_pad_to);
        return TRI_ERR_CKPT;
    }
    return TRI_OK;
}

// Every rank file the manifest lists exists with the listed size.
static tri_status check_files(const manifest *m) {
    for (int i = 0; i < m->n_files; i++) {
        char p[PATH_BYTES];
        pathf(p, "%s/%s", m->dir, m->files[i]);
        struct stat st;
        if (stat(p, &st) != 0) {
            LOG_ERROR("checkpoint %s: rank file %s is missing (%s)", m->dir, p, strerror(errno));
        } else if (st.st_size != m->file_bytes[i]) {
            LOG_ERROR("checkpoint %s: rank file %s is %lld bytes, the manifest says %lld "
                      "(truncated or replaced)",
                      m->dir, p, (long long)st.st_size, (long long)m->file_bytes[i]);
        } else {
            continue;
        }
        LOG_HINT("this checkpoint is damaged; resume from an older one (checkpoint.resume: PATH) "
                 "or start fresh (checkpoint.resume: none)");
        return TRI_ERR_CKPT;
    }
    return TRI_OK;
}

// ---- reading: filling spans from regions ----

typedef struct {
    const manifest *m;
    int *fds;           // per file, opened on first use
    unsigned char *buf; // one region's bytes
    size_t buf_cap;
    float *dst; // the span's host staging
    rect *need; // the span's rectangles, and where each starts in dst
    size_t *need_at;
    int n_need, cap_need;
    int64_t filled;
} loader;

static void collect_rect(void *ctx, rect r, size_t at) {
    loader *ld = ctx;
    if (ld->n_need == ld->cap_need) {
        ld->cap_need = ld->cap_need ? 2 * ld->cap_need : 16;
        ld->need = realloc(ld->need, (size_t)ld->cap_need * sizeof(rect));
        ld->need_at = realloc(ld->need_at, (size_t)ld->cap_need * sizeof(size_t));
    }
    ld->need[ld->n_need] = r;
    ld->need_at[ld->n_need++] = at;
}

static int overlap(rect a, rect b, rect *out) {
    int64_t r0 = a.row > b.row ? a.row : b.row, c0 = a.col > b.col ? a.col : b.col;
    int64_t r1 = a.row + a.rows < b.row + b.rows ? a.row + a.rows : b.row + b.rows;
    int64_t c1 = a.col + a.cols < b.col + b.cols ? a.col + a.cols : b.col + b.cols;
    if (r0 >= r1 || c0 >= c1) return 0;
    *out = (rect){r0, c0, r1 - r0, c1 - c0};
    return 1;
}

// Reads region g (checking its CRC) into ld->buf.
static tri_status read_region(loader *ld, const region *g) {
    const manifest *m = ld->m;
    size_t n = (size_t)(g->r.rows * g->r.cols) * (size_t)g->elem;
    char p[PATH_BYTES];
    pathf(p, "%s/%s", m->dir, m->files[g->file]);
    if (n > ld->buf_cap) ld->buf = realloc(ld->buf, ld->buf_cap = n);
    if (ld->fds[g->file] < 0) ld->fds[g->file] = open(p, O_RDONLY);
    ssize_t got = ld->fds[g->file] < 0 ? -1 : pread(ld->fds[g->file], ld->buf, n, (off_t)g->offset);
    if (got != (ssize_t)n) {
        LOG_ERROR("checkpoint %s: cannot read %zu bytes at offset %llu of %s: %s", m->dir, n,
                  (unsigned long long)g->offset, p, got < 0 ? strerror(errno) : "file too short");
        return TRI_ERR_CKPT;
    }
    uint32_t crc = crc32c_update(0, ld->buf, n);
    if (crc != g->crc) {
        LOG_ERROR("checkpoint %s: checksum mismatch in %s: tensor %s (%s), rows [%lld, %lld), "
                  "cols [%lld, %lld), byte offset %llu: stored crc32c 0x%08x, data has 0x%08x",
                  m->dir, p, m->tensors[g->tensor].name, ckpt_kind_names[g->kind],
                  (long long)g->r.row, (long long)(g->r.row + g->r.rows), (long long)g->r.col,
                  (long long)(g->r.col + g->r.cols), (unsigned long long)g->offset, g->crc, crc);
        LOG_HINT(
            "the file is corrupted; resume from an older checkpoint (checkpoint.resume: PATH)");
        return TRI_ERR_CKPT;
    }
    return TRI_OK;
}

// Copies the overlap of region g (in ld->buf) with every needed rectangle into dst.
static void place_region(loader *ld, const region *g) {
    for (int q = 0; q < ld->n_need; q++) {
        rect o, nr = ld->need[q];
        if (!overlap(nr, g->r, &o)) continue;
        for (int64_t r = o.row; r < o.row + o.rows; r++) {
            float *d = ld->dst + ld->need_at[q] + (r - nr.row) * nr.cols + (o.col - nr.col);
            size_t src = (size_t)((r - g->r.row) * g->r.cols + (o.col - g->r.col));
            if (g->elem == 4) {
                memcpy(d, ld->buf + src * 4, (size_t)o.cols * 4);
            } else {
                const uint16_t *h = (const uint16_t *)ld->buf + src;
                for (int64_t c = 0; c < o.cols; c++) d[c] = bf16_to_f32(h[c]);
            }
        }
        ld->filled += o.rows * o.cols;
    }
}

// Fills host `dst` with local elements [lo, hi) of entry e (kind `kind`; a parameter may
// come from the fp32 master copy when the checkpoint has one) from the regions.
static tri_status load_span(loader *ld, const param_table *pt, const param_entry *e, size_t lo,
                            size_t hi, ckpt_kind kind, float *dst) {
    const manifest *m = ld->m;
    ld->n_need = 0, ld->filled = 0, ld->dst = dst;
    ckpt_entry_rects(pt, e, lo, hi, collect_rect, ld);
    int t = find_tensor(m, e->name);
    // Padded vocabulary rows past the checkpoint's padding are zero, as they always are.
    memset(dst, 0, (hi - lo) * sizeof(float));
    for (int q = 0; q < ld->n_need; q++) {
        int64_t from = ld->need[q].row > m->tensors[t].rows ? ld->need[q].row : m->tensors[t].rows;
        if (ld->need[q].row + ld->need[q].rows > from)
            ld->filled += (ld->need[q].row + ld->need[q].rows - from) * ld->need[q].cols;
    }
    // Parameters and master weights both come from the fp32 master copy when the checkpoint
    // has one (a bf16 run's), else from the parameters (an fp32 run's).
    ckpt_kind want = kind == KIND_MASTER ? KIND_PARAM : kind;
    if (kind == KIND_PARAM || kind == KIND_MASTER)
        for (int i = 0; i < m->n_regions; i++)
            if (m->regions[i].tensor == t && m->regions[i].kind == KIND_MASTER) want = KIND_MASTER;
    for (int i = 0; i < m->n_regions; i++) {
        const region *g = &m->regions[i];
        if (g->tensor != t || g->kind != want) continue;
        int hit = 0;
        rect o;
        for (int q = 0; q < ld->n_need && !hit; q++) hit = overlap(ld->need[q], g->r, &o);
        if (!hit) continue;
        TRI_CHECK(read_region(ld, g));
        place_region(ld, g);
    }
    if (ld->filled != (int64_t)(hi - lo)) {
        LOG_ERROR("checkpoint %s: the regions of tensor %s (%s) cover %lld of the %zu elements "
                  "this rank needs",
                  m->dir, e->name, ckpt_kind_names[want], (long long)ld->filled, hi - lo);
        LOG_HINT("the manifest is incomplete or damaged; resume from another checkpoint");
        return TRI_ERR_CKPT;
    }
    return TRI_OK;
}

static void loader_init(loader *ld, const manifest *m) {
    memset(ld, 0, sizeof *ld);
    ld->m = m;
    ld->fds = xmalloc((size_t)m->n_files * sizeof(int));
    for (int i = 0; i < m->n_files; i++) ld->fds[i] = -1;
}

static void loader_free(loader *ld) {
    for (int i = 0; i < ld->m->n_files; i++)
        if (ld->fds[i] >= 0) close(ld->fds[i]);
    free(ld->fds);
    free(ld->buf);
    free(ld->need);
    free(ld->need_at);
}

// ---- resume ----

int ckpt_is_checkpoint(const char *path, char *resolved, size_t n) {
    char p[PATH_BYTES], name[256];
    struct stat st;
    pathf(p, "%s/manifest.yaml", path);
    if (stat(p, &st) == 0) {
        snprintf(resolved, n, "%s", path);
        return 1;
    }
    pathf(p, "%s/latest", path);
    if (read_text(p, name, sizeof name) == 0 && name[0]) {
        snprintf(resolved, n, "%s/%s", path, name);
        return 1;
    }
    return 0;
}

tri_status ckpt_resolve_resume(const run_config *cfg, char *path, size_t n) {
    const char *resume = cfg->checkpoint.resume;
    path[0] = '\0';
    if (!resume || !strcmp(resume, "none")) return TRI_OK;
    const char *where = !strcmp(resume, "auto") ? cfg->checkpoint.dir : resume;
    if (!where) return TRI_OK; // auto without a checkpoint.dir
    if (ckpt_is_checkpoint(where, path, n)) return TRI_OK;
    if (!strcmp(resume, "auto")) return TRI_OK; // nothing written yet: a fresh start
    LOG_ERROR("checkpoint.resume: %s is not a checkpoint (no manifest.yaml, no latest in it)",
              resume);
    LOG_HINT("give a checkpoint directory (checkpoint.dir/step_N) or a checkpoint.dir holding "
             "`latest`; auto resumes from checkpoint.dir when it has one, none starts fresh");
    return TRI_ERR_CKPT;
}

// Loads every span of this rank into the device; `mute` keeps ranks != 0 quiet about
// problems that every rank sees alike (the manifest, the shapes, the files).
static tri_status load_rank(const char *path, const ckpt_state *s, manifest *m) {
    int mute = log_mute_if_not_rank0();
    tri_status rc = manifest_read(m, path);
    if (rc == TRI_OK) rc = check_shapes(m, s->pt);
    if (rc == TRI_OK && s->rank == 0) rc = check_files(m);
    log_unmute(mute);
    rc = ckpt_agree(s->cm, rc);
    if (rc != TRI_OK) return rc;
    int n = needed_spans(s, NULL);
    span *spans = xcalloc((size_t)n + 1, sizeof(span));
    needed_spans(s, spans);
    loader ld;
    loader_init(&ld, m);
    for (int i = 0; i < n && rc == TRI_OK; i++) {
        const span *sp = &spans[i];
        const param_entry *e = &s->pt->entries[sp->entry];
        const size_t count = sp->hi - sp->lo;
        float *host = xmalloc(count * sizeof(float) + 1);
        rc = load_span(&ld, s->pt, e, sp->lo - e->offset, sp->hi - e->offset, sp->kind, host);
        if (rc == TRI_OK && sp->elem == sizeof(uint16_t)) { // bf16 parameters: rounded in place
            uint16_t *h16 = (uint16_t *)host;
            for (size_t i = 0; i < count; i++) h16[i] = bf16_from_f32(host[i]);
        }
        if (rc == TRI_OK) s->be->copy_to_device(s->be, sp->dev, host, count * sp->elem);
        free(host);
    }
    loader_free(&ld);
    free(spans);
    return ckpt_agree(s->cm, rc);
}

tri_status ckpt_load(const char *path, const ckpt_state *s, ckpt_progress *p) {
    manifest m;
    memset(&m, 0, sizeof m);
    tri_status rc = load_rank(path, s, &m);
    if (rc == TRI_OK) {
        *p = (ckpt_progress){m.step, m.samples, m.tokens, m.optim_t};
        optim_set_steps_taken(s->optim, m.optim_t);
        LOG_INFO("resumed from %s: step %d, %lld tokens seen, next sample %lld", path, m.step,
                 (long long)m.tokens, (long long)m.samples);
    } else if (s->rank == 0) {
        LOG_ERROR("could not resume from %s; nothing was written", path);
    }
    manifest_free(&m);
    return rc;
}

tri_status ckpt_read_model(const char *path, run_config *cfg, param_table *full, float **params) {
    manifest m;
    TRI_CHECK(manifest_read(&m, path));
    cfg->model.n_layer = m.n_layer, cfg->model.n_head = m.n_head, cfg->model.d_model = m.d_model;
    cfg->model.seq_len = m.seq_len, cfg->model.vocab_size = m.vocab_size;
    cfg->model.vocab_pad_to = m.vocab_pad_to;
    cfg->parallel.tp = cfg->parallel.pp = cfg->parallel.virtual_stages = 1;
    params_build_full(full, &cfg->model, 1);
    tri_status rc = check_shapes(&m, full);
    if (rc == TRI_OK) rc = check_files(&m);
    float *out = xmalloc(full->local_numel * sizeof(float) + 1);
    loader ld;
    loader_init(&ld, &m);
    for (int i = 0; i < full->n_entries && rc == TRI_OK; i++) {
        const param_entry *e = &full->entries[i];
        rc = load_span(&ld, full, e, 0, (size_t)e->local_numel, KIND_PARAM, out + e->offset);
        // A bf16 run's checkpoint holds its fp32 master weights; the model it trained
        // computes with their bf16 rounding, which is what its model.bin holds too.
        for (int g = 0; rc == TRI_OK && g < m.n_regions; g++) {
            if (m.regions[g].kind != KIND_MASTER ||
                strcmp(m.tensors[m.regions[g].tensor].name, e->name))
                continue;
            for (int64_t k = 0; k < e->local_numel; k++)
                out[e->offset + k] = bf16_to_f32(bf16_from_f32(out[e->offset + k]));
            break;
        }
    }
    loader_free(&ld);
    manifest_free(&m);
    if (rc != TRI_OK) {
        free(out);
        params_free(full);
        return rc;
    }
    *params = out;
    return TRI_OK;
}
