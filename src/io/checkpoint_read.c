// checkpoint_read.c: reading checkpoints (see checkpoint.h): which checkpoint to resume
// (`latest`, or the newest complete one when it is damaged), the regions a rank needs on
// any layout, resume, the whole model for export and sampling, and checking a whole
// checkpoint. The manifest is read and checked by checkpoint_manifest.c.
#include "io/checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bf16.h"
#include "base/crc32c.h"
#include "base/stop.h"

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

// Every tensor of `pt` must be in the manifest with the same global shape.
static tri_status check_shapes(const manifest *m, const param_table *pt) {
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        int t = manifest_find_tensor(m, e->name);
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
    int t = manifest_find_tensor(m, e->name);
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

// ---- finding the checkpoint to resume ----

// Why <dir>/latest cannot be followed, or NULL when it names a complete checkpoint (its
// name goes to `name`, 256 bytes). `why` holds the reason's text.
static const char *latest_damage(const char *dir, char *name, char *why, size_t n) {
    char p[PATH_BYTES];
    path_join(p, dir, "latest");
    FILE *f = fopen(p, "r");
    if (!f) {
        if (errno == ENOENT) snprintf(why, n, "is missing");
        else snprintf(why, n, "cannot be read (%s)", strerror(errno));
        return why;
    }
    struct stat st;
    size_t got = 0;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) got = fread(name, 1, 255, f);
    else snprintf(why, n, "is not a file");
    fclose(f);
    if (!S_ISREG(st.st_mode)) return why;
    name[got] = '\0';
    while (got && (name[got - 1] == '\n' || name[got - 1] == ' ')) name[--got] = '\0';
    int step;
    struct stat ms;
    if (!got) snprintf(why, n, "is empty");
    else if (!ckpt_is_step_name(name, &step))
        snprintf(why, n, "holds '%.40s', not the name of a step_N directory", name);
    else if (pathf(p, "%s/%s/manifest.yaml", dir, name), stat(p, &ms) != 0)
        snprintf(why, n, "names %.40s, which has no manifest.yaml", name);
    else return NULL;
    return why;
}

// The checkpoint of checkpoint.dir `dir` to read: the one `latest` names, or, when `latest`
// is damaged (missing, empty, unreadable, a symlink loop, not a step name, naming no
// complete checkpoint) but complete step_N directories exist, the newest of them, with a
// warning that says why. 0 when there is none; *incomplete counts step_N directories
// without manifest.yaml.
static int find_checkpoint(const char *dir, char *resolved, size_t n, int *incomplete) {
    char name[256], why[256];
    *incomplete = 0;
    if (!latest_damage(dir, name, why, sizeof why)) {
        snprintf(resolved, n, "%s/%s", dir, name);
        return 1;
    }
    int newest = -1, newest_incomplete = -1, step;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!ckpt_is_step_name(de->d_name, &step)) continue;
        char p[PATH_BYTES];
        struct stat st;
        pathf(p, "%s/%s/manifest.yaml", dir, de->d_name);
        if (stat(p, &st) == 0) {
            if (step > newest) newest = step;
        } else {
            ++*incomplete;
            if (step > newest_incomplete) newest_incomplete = step;
        }
    }
    if (d) closedir(d);
    if (newest < 0) {
        if (strcmp(why, "is missing") || *incomplete)
            LOG_WARN("checkpoint %s: latest %s, and no step_N directory holds a complete "
                     "checkpoint",
                     dir, why);
        return 0;
    }
    snprintf(resolved, n, "%s/step_%08d", dir, newest);
    char skipped[128] = "";
    if (newest_incomplete > newest)
        snprintf(skipped, sizeof skipped, " (step_%08d and newer have no manifest.yaml)",
                 newest_incomplete);
    LOG_WARN("checkpoint %s: latest %s; using the newest complete checkpoint, %s%s", dir, why,
             resolved, skipped);
    return 1;
}

int ckpt_is_checkpoint(const char *path, char *resolved, size_t n) {
    char p[PATH_BYTES];
    struct stat st;
    pathf(p, "%s/manifest.yaml", path);
    if (stat(p, &st) == 0) {
        snprintf(resolved, n, "%s", path);
        return 1;
    }
    int incomplete;
    return find_checkpoint(path, resolved, n, &incomplete);
}

tri_status ckpt_resolve_resume(const run_config *cfg, char *path, size_t n) {
    const char *resume = cfg->checkpoint.resume;
    path[0] = '\0';
    if (!resume || !strcmp(resume, "none")) return TRI_OK;
    const int automatic = !strcmp(resume, "auto");
    const char *where = automatic ? cfg->checkpoint.dir : resume;
    if (!where) return TRI_OK; // auto without a checkpoint.dir
    char p[PATH_BYTES];
    struct stat st;
    pathf(p, "%s/manifest.yaml", where);
    if (stat(p, &st) == 0) {
        snprintf(path, n, "%s", where);
        return TRI_OK;
    }
    int incomplete;
    if (find_checkpoint(where, path, n, &incomplete)) return TRI_OK;
    // Never a fresh start over checkpoints: it would overwrite them and metrics.jsonl.
    if (incomplete) {
        LOG_ERROR("%s %s holds %d step_N director%s but no complete checkpoint (none has "
                  "manifest.yaml): not starting from step 0 over them",
                  automatic ? "checkpoint.dir" : "checkpoint.resume:", where, incomplete,
                  incomplete == 1 ? "y" : "ies");
        LOG_HINT("set checkpoint.resume to one of them (the message says what is wrong with it), "
                 "move them away, or start from step 0 over them with checkpoint.resume: none");
        return TRI_ERR_CKPT;
    }
    if (automatic) return TRI_OK; // nothing written yet: a fresh start
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
    if (rc == TRI_OK) rc = stop_poll(); // a stop request during the parse (base/stop.h)
    if (rc == TRI_OK) rc = check_shapes(m, s->pt);
    // The one model key that no tensor shape shows.
    if (rc == TRI_OK && m->n_head != s->cfg->model.n_head) {
        LOG_ERROR("checkpoint %s: config.model.n_head is %d in the checkpoint but %d in this run",
                  m->path, m->n_head, s->cfg->model.n_head);
        LOG_HINT("resume it with model.n_head: %d (the same weights split into other heads "
                 "would be another model)",
                 m->n_head);
        rc = TRI_ERR_CKPT;
    }
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
        if ((rc = stop_poll_resume()) != TRI_OK) break; // TRI_STOPPED, agreed below
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

tri_status ckpt_read_recorded(const char *path, ckpt_recorded *r) {
    memset(r, 0, sizeof *r);
    manifest m;
    tri_status rc = manifest_read(&m, path);
    if (rc != TRI_OK) return rc;
    if (!m.config_yaml) {
        LOG_ERROR("checkpoint %s: its config: section is not a block of lines under 'config:' "
                  "(as trident writes it)",
                  m.path);
        rc = TRI_ERR_CKPT;
    } else {
        *r = (ckpt_recorded){.manifest = xstrdup(m.path),
                             .config = m.config_yaml,
                             .config_len = m.config_len,
                             .config_line = m.config_line,
                             .step = m.step};
        m.config_yaml = NULL; // moved
    }
    manifest_free(&m);
    return rc;
}

void ckpt_recorded_free(ckpt_recorded *r) {
    free(r->manifest);
    free(r->config);
    memset(r, 0, sizeof *r);
}

tri_status ckpt_load(const char *path, const ckpt_state *s, ckpt_progress *p) {
    manifest m;
    memset(&m, 0, sizeof m);
    tri_status rc = load_rank(path, s, &m);
    if (rc == TRI_OK) {
        *p = (ckpt_progress){m.step, m.samples, m.tokens, m.optim_t, m.order};
        memset(&m.order, 0, sizeof m.order); // now the caller's
        optim_set_steps_taken(s->optim, m.optim_t);
        LOG_INFO("resumed from %s: step %d, %lld tokens seen, next sample %lld", path, m.step,
                 (long long)m.tokens, (long long)m.samples);
    } else if (s->rank == 0 && rc != TRI_STOPPED) {
        LOG_ERROR("could not resume from %s; nothing was written", path);
    }
    manifest_free(&m);
    return rc;
}

// ---- the whole model, tensor by tensor (export and sample) ----

struct ckpt_model_reader {
    manifest m;
    loader ld;
    const param_table *full;
};

tri_status ckpt_model_open(const char *path, run_config *cfg, param_table *full,
                           ckpt_model_reader **out) {
    *out = NULL;
    ckpt_model_reader *r = xcalloc(1, sizeof *r);
    tri_status rc = manifest_read(&r->m, path);
    if (rc != TRI_OK) {
        free(r);
        return rc;
    }
    const manifest *m = &r->m;
    // The model's tensors are those of the manifest (manifest_read), and those are tiled by
    // regions inside rank files of the sizes checked here: the table built below is on disk.
    if ((rc = check_files(m)) != TRI_OK) {
        manifest_free(&r->m);
        free(r);
        return rc;
    }
    model_config mc;
    manifest_model_config(m, &mc);
    free(cfg->model.arch);
    mc.arch = xstrdup(mc.arch);
    mc.init_from = cfg->model.init_from;
    cfg->model = mc;
    cfg->parallel.tp = cfg->parallel.pp = cfg->parallel.virtual_stages = 1;
    params_build_full(full, &cfg->model, 1);
    if ((rc = check_shapes(m, full)) != TRI_OK) {
        manifest_free(&r->m);
        params_free(full);
        free(r);
        return rc;
    }
    loader_init(&r->ld, &r->m);
    r->full = full;
    *out = r;
    return TRI_OK;
}

tri_status ckpt_model_read(ckpt_model_reader *r, int i, float *dst) {
    const param_entry *e = &r->full->entries[i];
    const manifest *m = &r->m;
    TRI_CHECK(load_span(&r->ld, r->full, e, 0, (size_t)e->local_numel, KIND_PARAM, dst));
    // A bf16 run's checkpoint holds its fp32 master weights; the model it trained computes
    // with their bf16 rounding, which is what its model.bin holds too.
    for (int g = 0; g < m->n_regions; g++) {
        if (m->regions[g].kind != KIND_MASTER ||
            strcmp(m->tensors[m->regions[g].tensor].name, e->name))
            continue;
        for (int64_t k = 0; k < e->local_numel; k++) dst[k] = bf16_to_f32(bf16_from_f32(dst[k]));
        break;
    }
    return TRI_OK;
}

void ckpt_model_close(ckpt_model_reader *r) {
    if (!r) return;
    loader_free(&r->ld);
    manifest_free(&r->m);
    free(r);
}

tri_status ckpt_verify(const char *path, ckpt_progress *p) {
    manifest m;
    TRI_CHECK(manifest_read(&m, path));
    tri_status rc = check_files(&m);
    loader ld;
    loader_init(&ld, &m);
    for (int i = 0; i < m.n_regions && rc == TRI_OK; i++) rc = read_region(&ld, &m.regions[i]);
    loader_free(&ld);
    if (rc == TRI_OK) {
        *p = (ckpt_progress){m.step, m.samples, m.tokens, m.optim_t, m.order};
        memset(&m.order, 0, sizeof m.order); // now the caller's
    }
    manifest_free(&m);
    return rc;
}
