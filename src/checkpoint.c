// checkpoint.c: see checkpoint.h. The format is DESIGN.md's; the manifest is YAML written
// with printf and read with libyaml.
#include "checkpoint.h"

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "bf16.h"
#include "crc32c.h"

#define CKPT_FORMAT "trident-checkpoint"
#define PATH_BYTES 4352 // every path buffer here; checkpoint.dir is limited to 4000 bytes
#define CKPT_VERSION 1

typedef enum { KIND_PARAM = 0, KIND_MASTER, KIND_ADAM_M, KIND_ADAM_V, KIND_COUNT } ckpt_kind;
static const char *const kind_names[KIND_COUNT] = {"param", "master", "adam_m", "adam_v"};

// A rectangle of a global (rows, cols) tensor.
typedef struct {
    int64_t row, col, rows, cols;
} rect;

// ---- regions: a run of an entry's local elements as rectangles of the global tensor ----

// Calls fn for the rectangles that local elements [a, b) of entry e (row-major, relative
// to the entry) cover, in order. Each rectangle's elements are contiguous in local order:
// either one partial row, or whole local rows that map to consecutive global rows at the
// same columns. `at` is the rectangle's first element, relative to a.
typedef void (*rect_fn)(void *ctx, rect r, size_t at);

static void entry_rects(const param_table *pt, const param_entry *e, size_t a, size_t b,
                        rect_fn fn, void *ctx) {
    const int64_t lc = e->local_cols, gc = e->global_cols;
    size_t pos = a;
    while (pos < b) {
        int64_t r = (int64_t)pos / lc, c = (int64_t)pos % lc;
        int64_t g = params_global_index(pt, e, r, c);
        if (c != 0 || b - pos < (size_t)lc) { // a partial row
            int64_t n = lc - c < (int64_t)(b - pos) ? lc - c : (int64_t)(b - pos);
            fn(ctx, (rect){g / gc, g % gc, 1, n}, pos - a);
            pos += (size_t)n;
            continue;
        }
        int64_t k = 1;
        while (pos + (size_t)((k + 1) * lc) <= b && params_global_index(pt, e, r + k, 0) == g + k * gc)
            k++;
        fn(ctx, (rect){g / gc, g % gc, k, lc}, pos - a);
        pos += (size_t)(k * lc);
    }
}

// ---- what this rank stores or needs: spans of (entry, kind) in device memory ----

typedef struct {
    int entry;
    size_t lo, hi;     // flat local offsets in the table layout
    ckpt_kind kind;
    void *dev;         // device address of element lo
    size_t elem;       // its bytes: 4 (fp32), or 2 for bf16 parameters
} span;

// Where element lo of a piece lives, per kind, and its size.
static span piece_span(const ckpt_state *s, const optim_piece *pc, ckpt_kind kind, size_t lo,
                       size_t hi) {
    const optim_state *o = s->optim;
    size_t off = pc->pos + (lo - pc->lo);
    span sp = {pc->entry, lo, hi, kind, NULL, sizeof(float)};
    switch (kind) {
    case KIND_PARAM:
        sp.elem = o->pelem;
        sp.dev = o->zero == 3 ? (char *)o->param_shard + off * o->pelem : (char *)s->params + lo * o->pelem;
        break;
    case KIND_MASTER: sp.dev = o->master + off; break;
    case KIND_ADAM_M: sp.dev = o->m + off; break;
    case KIND_ADAM_V: sp.dev = o->v + off; break;
    default: TRI_ASSERT(0);
    }
    return sp;
}

// The spans this rank writes: its pieces, without copies that another rank stores.
static int stored_spans(const ckpt_state *s, span *out) {
    const optim_state *o = s->optim;
    const param_table *pt = s->pt;
    // Stage 0 (or dp == 1): every replica owns everything; store the dp-th part.
    size_t cut_lo = 0, cut_hi = (size_t)-1;
    if (o->zero == 0 && o->dp > 1) {
        size_t share = (pt->local_numel + (size_t)o->dp - 1) / (size_t)o->dp;
        cut_lo = share * (size_t)o->dp_rank, cut_hi = cut_lo + share;
    }
    int n = 0;
    // Mixed precision stores the fp32 master weights: the bf16 parameters are their rounding.
    const ckpt_kind kinds[] = {o->bf16 ? KIND_MASTER : KIND_PARAM, KIND_ADAM_M, KIND_ADAM_V};
    for (int k = 0; k < 3; k++) {
        for (int p = 0; p < o->n_pieces; p++) {
            const optim_piece *pc = &o->pieces[p];
            const param_entry *e = &pt->entries[pc->entry];
            if (e->split == SPLIT_REPLICATED && s->tp_rank != 0) continue;
            if (pc->entry == pt->wte && pt->wte_is_copy) continue;
            size_t lo = pc->lo > cut_lo ? pc->lo : cut_lo, hi = pc->hi < cut_hi ? pc->hi : cut_hi;
            if (lo >= hi) continue;
            if (out) out[n] = piece_span(s, pc, kinds[k], lo, hi);
            n++;
        }
    }
    return n;
}

// The spans this rank must fill on load: every parameter it holds (its shards under
// ZeRO-3), and the moments (and, in mixed precision, the master weights) of all its pieces.
static int needed_spans(const ckpt_state *s, span *out) {
    const optim_state *o = s->optim;
    const param_table *pt = s->pt;
    int n = 0;
    if (o->zero < 3) {
        for (int i = 0; i < pt->n_entries; i++, n++) {
            const param_entry *e = &pt->entries[i];
            if (out) out[n] = (span){i, e->offset, e->offset + (size_t)e->local_numel, KIND_PARAM,
                                     (char *)s->params + e->offset * o->pelem, o->pelem};
        }
    }
    const ckpt_kind kinds[] = {KIND_PARAM, KIND_MASTER, KIND_ADAM_M, KIND_ADAM_V};
    for (int k = 0; k < 4; k++) {
        if ((kinds[k] == KIND_PARAM && o->zero < 3) || (kinds[k] == KIND_MASTER && !o->bf16)) continue;
        for (int p = 0; p < o->n_pieces; p++, n++) {
            const optim_piece *pc = &o->pieces[p];
            if (out) out[n] = piece_span(s, pc, kinds[k], pc->lo, pc->hi);
        }
    }
    return n;
}

// ---- small file helpers ----

// snprintf into a PATH_BYTES buffer (paths are bounded by the checkpoint.dir limit).
__attribute__((format(printf, 2, 3))) static void pathf(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, PATH_BYTES, fmt, ap);
    va_end(ap);
}

static void path_join(char *out, const char *dir, const char *name) { pathf(out, "%s/%s", dir, name); }

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w, n -= (size_t)w;
    }
    return 0;
}

// rm -r of a directory of plain files (a checkpoint's).
static int remove_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent *de;
    char p[PATH_BYTES];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        path_join(p, path, de->d_name);
        unlink(p);
    }
    closedir(d);
    return rmdir(path);
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

static int is_step_name(const char *name, int *step) {
    int len = 0;
    return sscanf(name, "step_%8d%n", step, &len) == 1 && len == 13 && name[len] == '\0';
}

// ---- the writer ----

struct ckpt_writer {
    ckpt_state s;
    span *spans;
    int n_spans;
    size_t bytes;            // this rank's file
    unsigned char *image;    // host copy of the spans, back to back
    char dir[PATH_BYTES];          // checkpoint.dir
    char tmp[PATH_BYTES], final[PATH_BYTES];
    ckpt_progress progress;
    int pending, threaded;
    pthread_t thread, prefault;
    int prefaulting;         // the prefault thread has not been joined yet
    atomic_int done;
    tri_status status;       // of this rank's write
    double write_s;
};

static const char *tensor_name(const ckpt_state *s, int entry) { return s->pt->entries[entry].name; }

typedef struct {
    FILE *idx;
    const unsigned char *base; // the span's bytes
    const char *tensor, *kind, *file;
    size_t file_off;           // of the span
} idx_ctx;

static void write_idx_line(void *ctx, rect r, size_t at) {
    idx_ctx *c = ctx;
    size_t off = c->file_off + at * sizeof(float), n = (size_t)(r.rows * r.cols) * sizeof(float);
    uint32_t crc = crc32c_update(0, c->base + at * sizeof(float), n);
    fprintf(c->idx,
            "  - {tensor: %s, kind: %s, dtype: f32, offset: [%lld, %lld], extent: [%lld, %lld], "
            "file: %s, byte_offset: %zu, crc32c: 0x%08x}\n",
            c->tensor, c->kind, (long long)r.row, (long long)r.col, (long long)r.rows,
            (long long)r.cols, c->file, off, crc);
}

// Test hook for the fault tests: TRIDENT_TEST_CKPT_DELAY_MS pauses after each MiB written,
// so that a kill lands inside a write.
static void test_delay(void) {
    static int ms = -1;
    if (ms < 0) {
        const char *v = getenv("TRIDENT_TEST_CKPT_DELAY_MS");
        ms = v ? atoi(v) : 0;
    }
    if (ms > 0) usleep((useconds_t)ms * 1000);
}

// Writes rank_R.bin and rank_R.idx into the tmp directory and fsyncs them.
static tri_status write_rank_files(ckpt_writer *w) {
    char name[64], path[PATH_BYTES], idx_path[PATH_BYTES];
    snprintf(name, sizeof name, "rank_%05d.bin", w->s.rank);
    path_join(path, w->tmp, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) goto io_error;
    for (size_t done = 0; done < w->bytes;) {
        size_t n = w->bytes - done < (1u << 20) ? w->bytes - done : (1u << 20);
        if (write_all(fd, w->image + done, n) != 0) {
            close(fd);
            goto io_error;
        }
        done += n;
        test_delay();
    }
    if (fsync(fd) != 0 || close(fd) != 0) goto io_error;

    pathf(idx_path, "%s/rank_%05d.idx", w->tmp, w->s.rank);
    FILE *idx = fopen(idx_path, "w");
    if (!idx) {
        pathf(path, "%s", idx_path);
        goto io_error;
    }
    size_t off = 0;
    for (int i = 0; i < w->n_spans; i++) {
        const span *sp = &w->spans[i];
        idx_ctx c = {idx, w->image + off, tensor_name(&w->s, sp->entry), kind_names[sp->kind], name, off};
        entry_rects(w->s.pt, &w->s.pt->entries[sp->entry], sp->lo - w->s.pt->entries[sp->entry].offset,
                    sp->hi - w->s.pt->entries[sp->entry].offset, write_idx_line, &c);
        off += (sp->hi - sp->lo) * sizeof(float);
    }
    int bad = fflush(idx) != 0; // flush, then sync: in this order
    bad |= ferror(idx) || fsync(fileno(idx)) != 0;
    if (fclose(idx) != 0 || bad) {
        pathf(path, "%s", idx_path);
        goto io_error;
    }
    return TRI_OK;
io_error:
    LOG_ERROR("checkpoint: cannot write %s: %s", path, strerror(errno));
    LOG_HINT("check free space and permissions of checkpoint.dir");
    return TRI_ERR_CKPT;
}

static void *writer_thread(void *arg) {
    ckpt_writer *w = arg;
    double t0 = time_now_s();
    w->status = write_rank_files(w);
    w->write_s = time_now_s() - t0;
    atomic_store(&w->done, 1);
    return NULL;
}

// Touches every page of the host image once, in the background from the start of training,
// so that the first checkpoint's copy does not pay the page faults (seconds for a few GB).
static void *prefault_image(void *arg) {
    ckpt_writer *w = arg;
    memset(w->image, 0, w->bytes);
    return NULL;
}

tri_status ckpt_writer_create(ckpt_writer **out, const ckpt_state *s) {
    ckpt_writer *w = xcalloc(1, sizeof *w);
    w->s = *s;
    w->n_spans = stored_spans(s, NULL);
    w->spans = xcalloc((size_t)w->n_spans + 1, sizeof(span));
    stored_spans(s, w->spans);
    for (int i = 0; i < w->n_spans; i++) w->bytes += (w->spans[i].hi - w->spans[i].lo) * sizeof(float);
    w->image = malloc(w->bytes ? w->bytes : 1);
    if (!w->image) {
        LOG_ERROR("checkpoint: out of host memory for the %zu bytes this rank writes", w->bytes);
        free(w->spans);
        free(w);
        return TRI_ERR_INTERNAL;
    }
    pathf(w->dir, "%s", s->cfg->checkpoint.dir);
    atomic_init(&w->done, 0);
    w->prefaulting = pthread_create(&w->prefault, NULL, prefault_image, w) == 0;
    *out = w;
    return TRI_OK;
}

int ckpt_pending(const ckpt_writer *w) { return w && w->pending; }
int ckpt_write_done(const ckpt_writer *w) { return w && w->pending && atomic_load(&w->done); }

// Every rank's status, agreed: the worst (largest) code over the world.
static tri_status agree(comm *cm, tri_status rc) {
    double v = (double)rc;
    tri_status crc = cm->all_reduce(cm, COMM_GROUP_WORLD, &v, 1, COMM_DTYPE_F64, COMM_REDUCE_MAX);
    if (crc != TRI_OK) return crc;
    return (tri_status)(int)v;
}

// Rank 0: manifest.yaml from the indexes, then the renames that make it complete.
static tri_status write_manifest(ckpt_writer *w) {
    const ckpt_state *s = &w->s;
    const run_config *cfg = s->cfg;
    char path[PATH_BYTES], tmp_path[PATH_BYTES];
    path_join(path, w->tmp, "manifest.yaml");
    FILE *f = fopen(path, "w");
    if (!f) goto io_error;
    const ckpt_progress *p = &w->progress;
    fprintf(f, "# trident checkpoint: every region of the rank files, in global coordinates\n");
    fprintf(f, "format: %s\nversion: %d\nstep: %d\ntokens: %lld\nsamples: %lld\noptim_t: %d\n",
            CKPT_FORMAT, CKPT_VERSION, p->step, (long long)p->tokens, (long long)p->samples,
            p->optim_t);
    // Training draws no random numbers after initialisation (no dropout), so the seed is
    // the whole RNG state.
    fprintf(f, "rng: {seed: %llu, draws: 0}\n", (unsigned long long)cfg->run.seed);
    fprintf(f, "mesh: {world: %d, tp: %d, pp: %d, dp: %d, virtual_stages: %d, zero: %d, schedule: %s}\n",
            s->world, cfg->parallel.tp, cfg->parallel.pp, cfg->parallel.dp,
            cfg->parallel.virtual_stages, s->optim->zero, config_schedule_name(cfg->parallel.schedule));
    fprintf(f, "config:\n");
    config_print_yaml(cfg, f, 2);
    param_table full;
    params_build_full(&full, cfg);
    fprintf(f, "tensors:\n");
    for (int i = 0; i < full.n_entries; i++)
        fprintf(f, "  - {name: %s, shape: [%lld, %lld]}\n", full.entries[i].name,
                (long long)full.entries[i].global_rows, (long long)full.entries[i].global_cols);
    params_free(&full);
    fprintf(f, "files:\n");
    for (int r = 0; r < s->world; r++) {
        char name[64], rp[PATH_BYTES];
        snprintf(name, sizeof name, "rank_%05d.bin", r);
        path_join(rp, w->tmp, name);
        struct stat st;
        if (stat(rp, &st) != 0) {
            pathf(path, "%s", rp);
            fclose(f);
            goto io_error;
        }
        fprintf(f, "  - {name: %s, bytes: %lld}\n", name, (long long)st.st_size);
    }
    fprintf(f, "regions:\n");
    for (int r = 0; r < s->world; r++) {
        pathf(tmp_path, "%s/rank_%05d.idx", w->tmp, r);
        FILE *idx = fopen(tmp_path, "r");
        if (!idx) {
            pathf(path, "%s", tmp_path);
            fclose(f);
            goto io_error;
        }
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, idx)) > 0) fwrite(buf, 1, n, f);
        fclose(idx);
    }
    int bad = fflush(f) != 0; // flush, then sync: in this order
    bad |= ferror(f) || fsync(fileno(f)) != 0;
    if (fclose(f) != 0 || bad) goto io_error;
    for (int r = 0; r < s->world; r++) {
        pathf(tmp_path, "%s/rank_%05d.idx", w->tmp, r);
        unlink(tmp_path);
    }
    if (fsync_path(w->tmp) != 0) {
        pathf(path, "%s", w->tmp);
        goto io_error;
    }
    // An older checkpoint of the same step (a run restarted with resume: none) is replaced.
    struct stat st;
    if (stat(w->final, &st) == 0) {
        pathf(tmp_path, "%s.old", w->final);
        remove_dir(tmp_path);
        if (rename(w->final, tmp_path) != 0) {
            pathf(path, "%s", w->final);
            goto io_error;
        }
    }
    if (rename(w->tmp, w->final) != 0) {
        pathf(path, "%s", w->final);
        goto io_error;
    }
    fsync_path(w->dir);
    const char *base = strrchr(w->final, '/') + 1;
    path_join(tmp_path, w->dir, "latest.tmp");
    path_join(path, w->dir, "latest");
    FILE *l = fopen(tmp_path, "w");
    if (!l) {
        pathf(path, "%s", tmp_path);
        goto io_error;
    }
    fprintf(l, "%s\n", base);
    bad = fflush(l) != 0;
    bad |= fsync(fileno(l)) != 0;
    if (fclose(l) != 0 || bad || rename(tmp_path, path) != 0) goto io_error;
    fsync_path(w->dir);
    pathf(tmp_path, "%s.old", w->final);
    remove_dir(tmp_path);
    return TRI_OK;
io_error:
    LOG_ERROR("checkpoint: cannot write %s: %s", path, strerror(errno));
    LOG_HINT("check free space and permissions of checkpoint.dir; the previous checkpoint is kept");
    return TRI_ERR_CKPT;
}

static int cmp_int(const void *a, const void *b) {
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

// Rank 0, after a checkpoint is complete: all but the `keep` newest complete checkpoints go,
// and so do temporary directories that killed runs left behind.
static void prune(ckpt_writer *w) {
    DIR *d = opendir(w->dir);
    if (!d) return;
    int *steps = NULL, n = 0, cap = 0, step;
    struct dirent *de;
    char p[PATH_BYTES];
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (!strncmp(de->d_name, "step_", 5) && len > 4 && !strcmp(de->d_name + len - 4, ".tmp")) {
            path_join(p, w->dir, de->d_name);
            if (strcmp(p, w->tmp) != 0) remove_dir(p);
            continue;
        }
        if (!is_step_name(de->d_name, &step)) continue;
        if (n == cap) steps = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(int));
        steps[n++] = step;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof(int), cmp_int);
    // The newest by step number, and never the one just written (a run restarted with
    // resume: none may find checkpoints of later steps from before).
    for (int i = 0; i + w->s.cfg->checkpoint.keep < n; i++) {
        if (steps[i] == w->progress.step) continue;
        pathf(p, "%s/step_%08d", w->dir, steps[i]);
        if (remove_dir(p) == 0) LOG_INFO("checkpoint: removed %s (checkpoint.keep %d)", p, w->s.cfg->checkpoint.keep);
    }
    free(steps);
}

tri_status ckpt_commit(ckpt_writer *w) {
    if (!w->pending) return TRI_OK;
    if (w->threaded) pthread_join(w->thread, NULL);
    w->pending = w->threaded = 0;
    tri_status rc = agree(w->s.cm, w->status);
    if (rc == TRI_OK && w->s.rank == 0) {
        rc = write_manifest(w);
        if (rc == TRI_OK) {
            LOG_INFO("checkpoint: step %d written to %s (%.1f MiB on rank 0, %.2f s)", w->progress.step,
                     w->final, w->bytes / 1048576.0, w->write_s);
            prune(w);
        }
    }
    rc = agree(w->s.cm, rc);
    if (rc != TRI_OK && w->s.rank == 0) {
        LOG_ERROR("checkpoint: step %d not written; %s is left as it was", w->progress.step, w->dir);
        remove_dir(w->tmp);
    }
    return rc;
}

tri_status ckpt_save(ckpt_writer *w, const ckpt_progress *p, int async, double *blocked_s) {
    double t0 = time_now_s();
    TRI_CHECK(ckpt_commit(w));
    w->progress = *p;
    pathf(w->final, "%s/step_%08d", w->dir, p->step);
    pathf(w->tmp, "%s.tmp", w->final);
    tri_status rc = TRI_OK;
    if (w->s.rank == 0) { // a fresh temporary directory (a killed run may have left one)
        remove_dir(w->tmp);
        if (make_dirs(w->dir) != 0 || mkdir(w->tmp, 0755) != 0) {
            LOG_ERROR("checkpoint: cannot create %s: %s", w->tmp, strerror(errno));
            LOG_HINT("check checkpoint.dir");
            rc = TRI_ERR_CKPT;
        }
    }
    TRI_CHECK(agree(w->s.cm, rc));
    if (w->prefaulting) pthread_join(w->prefault, NULL);
    w->prefaulting = 0;
    backend *be = w->s.be;
    size_t off = 0;
    for (int i = 0; i < w->n_spans; i++) {
        size_t n = (w->spans[i].hi - w->spans[i].lo) * sizeof(float);
        be->copy_to_host(be, w->image + off, w->spans[i].dev, n);
        off += n;
    }
    atomic_store(&w->done, 0);
    w->pending = 1;
    if (async && pthread_create(&w->thread, NULL, writer_thread, w) == 0) {
        w->threaded = 1;
        *blocked_s = time_now_s() - t0;
        return TRI_OK;
    }
    writer_thread(w);
    rc = ckpt_commit(w);
    *blocked_s = time_now_s() - t0;
    return rc;
}

void ckpt_writer_free(ckpt_writer *w) {
    if (!w) return;
    if (w->prefaulting) pthread_join(w->prefault, NULL);
    // Training ends with a synchronous checkpoint, so a write still pending here means an
    // error path, where a collective could wait for ranks that are gone: the write is left
    // incomplete (a .tmp directory that the next checkpoint removes), never committed.
    if (w->threaded) pthread_join(w->thread, NULL);
    free(w->spans);
    free(w->image);
    free(w);
}

// ---- reading: the manifest ----

typedef struct {
    int tensor;        // index into the manifest's tensors
    ckpt_kind kind;
    int elem;          // bytes per element: 4 (f32) or 2 (bf16)
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
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
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
    if (!n || n->type != YAML_SEQUENCE_NODE || n->data.sequence.items.top - n->data.sequence.items.start != 2)
        return -1;
    const char *x = scalar(yaml_document_get_node(d, n->data.sequence.items.start[0]));
    const char *y = scalar(yaml_document_get_node(d, n->data.sequence.items.start[1]));
    if (!x || !y) return -1;
    *a = strtoll(x, NULL, 10), *b = strtoll(y, NULL, 10);
    return 0;
}

static int seq_len_of(yaml_node_t *n) {
    return n && n->type == YAML_SEQUENCE_NODE ? (int)(n->data.sequence.items.top - n->data.sequence.items.start) : -1;
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
            get_pair(d, n, "extent", &g->r.rows, &g->r.cols) || get_i64(d, n, "byte_offset", &off) ||
            get_i64(d, n, "crc32c", &crc))
            return bad_manifest(m, n, "a region lacks tensor, kind, dtype, offset, extent, file, "
                                      "byte_offset or crc32c");
        g->offset = (uint64_t)off, g->crc = (uint32_t)crc;
        g->tensor = find_tensor(m, t);
        g->kind = KIND_COUNT;
        for (int q = 0; q < KIND_COUNT; q++)
            if (!strcmp(k, kind_names[q])) g->kind = (ckpt_kind)q;
        g->elem = !strcmp(dt, "f32") ? 4 : !strcmp(dt, "bf16") ? 2 : 0;
        g->file = -1;
        for (int q = 0; q < m->n_files; q++)
            if (!strcmp(m->files[q], f)) g->file = q;
        const tensor_info *ti = g->tensor >= 0 ? &m->tensors[g->tensor] : NULL;
        if (!ti || g->kind == KIND_COUNT || !g->elem || g->file < 0 || g->r.row < 0 || g->r.col < 0 ||
            g->r.rows < 1 || g->r.cols < 1 || g->r.row + g->r.rows > ti->rows ||
            g->r.col + g->r.cols > ti->cols ||
            g->offset + (uint64_t)(g->r.rows * g->r.cols * g->elem) > (uint64_t)m->file_bytes[g->file])
            return bad_manifest(m, n, "a region names an unknown tensor, kind, dtype or file, or lies "
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
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    int ok = yaml_parser_load(&parser, &doc);
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
        get_int(&doc, model, "n_layer", &m->n_layer) || get_int(&doc, model, "n_head", &m->n_head) ||
        get_int(&doc, model, "d_model", &m->d_model) || get_int(&doc, model, "seq_len", &m->seq_len) ||
        get_int(&doc, model, "vocab_size", &m->vocab_size) ||
        get_int(&doc, model, "vocab_pad_to", &m->vocab_pad_to) || seq_len_of(tensors) < 1 ||
        seq_len_of(files) < 1) {
        rc = bad_manifest(m, root, "step, samples, tokens, optim_t, config.model, tensors or files "
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
        if (t < 0)
            LOG_ERROR("checkpoint %s: tensor %s is not in the checkpoint", m->path, e->name);
        else
            LOG_ERROR("checkpoint %s: tensor %s is [%lld, %lld] in the checkpoint but [%lld, %lld] "
                      "in this model", m->path, e->name, (long long)m->tensors[t].rows,
                      (long long)m->tensors[t].cols, (long long)e->global_rows, (long long)e->global_cols);
        LOG_HINT("the checkpoint holds a model with n_layer %d, n_head %d, d_model %d, seq_len %d, "
                 "vocab_size %d, vocab_pad_to %d: use the same model keys to resume it, or set "
                 "checkpoint.resume: none", m->n_layer, m->n_head, m->d_model, m->seq_len,
                 m->vocab_size, m->vocab_pad_to);
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
                      "(truncated or replaced)", m->dir, p, (long long)st.st_size,
                      (long long)m->file_bytes[i]);
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
    int *fds;            // per file, opened on first use
    unsigned char *buf;  // one region's bytes
    size_t buf_cap;
    float *dst;          // the span's host staging
    rect *need;          // the span's rectangles, and where each starts in dst
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
                  m->dir, p, m->tensors[g->tensor].name, kind_names[g->kind], (long long)g->r.row,
                  (long long)(g->r.row + g->r.rows), (long long)g->r.col,
                  (long long)(g->r.col + g->r.cols), (unsigned long long)g->offset, g->crc, crc);
        LOG_HINT("the file is corrupted; resume from an older checkpoint (checkpoint.resume: PATH)");
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
    entry_rects(pt, e, lo, hi, collect_rect, ld);
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
                  "this rank needs", m->dir, e->name, kind_names[want], (long long)ld->filled, hi - lo);
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
    LOG_ERROR("checkpoint.resume: %s is not a checkpoint (no manifest.yaml, no latest in it)", resume);
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
    rc = agree(s->cm, rc);
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
    return agree(s->cm, rc);
}

tri_status ckpt_load(const char *path, const ckpt_state *s, ckpt_progress *p) {
    manifest m;
    memset(&m, 0, sizeof m);
    tri_status rc = load_rank(path, s, &m);
    if (rc == TRI_OK) {
        *p = (ckpt_progress){m.step, m.samples, m.tokens, m.optim_t};
        s->optim->t = m.optim_t;
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
    params_build_full(full, cfg);
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
            if (m.regions[g].kind != KIND_MASTER || strcmp(m.tensors[m.regions[g].tensor].name, e->name))
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
