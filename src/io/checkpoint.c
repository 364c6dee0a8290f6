// checkpoint.c: writing checkpoints (see checkpoint.h), and what reading shares with it
// (checkpoint_internal.h). The format is DESIGN.md's; the manifest is YAML written with
// printf, sealed with its checksum, and read and checked with libyaml
// (checkpoint_manifest.c).
#include "io/checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/env.h"

const char *const ckpt_kind_names[KIND_COUNT] = {"param", "master", "adam_m", "adam_v"};

// ---- regions ----

void ckpt_entry_rects(const param_table *pt, const param_entry *e, size_t a, size_t b, rect_fn fn,
                      void *ctx) {
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
        while (pos + (size_t)((k + 1) * lc) <= b &&
               params_global_index(pt, e, r + k, 0) == g + k * gc)
            k++;
        fn(ctx, (rect){g / gc, g % gc, k, lc}, pos - a);
        pos += (size_t)(k * lc);
    }
}

// ---- spans ----

// Where element lo of a piece lives, per kind, and its size.
span ckpt_piece_span(const ckpt_state *s, const zero_piece *pc, ckpt_kind kind, size_t lo,
                     size_t hi) {
    const size_t off = pc->pos + (lo - pc->lo);
    span sp = {pc->entry, lo, hi, kind, NULL, sizeof(float)};
    switch (kind) {
    case KIND_PARAM:
        sp.elem = dtype_size(zero_param_dtype(s->zero));
        sp.dev = zero_piece_param(s->zero, pc, lo);
        break;
    case KIND_MASTER: sp.dev = optim_state_at(s->optim, OPTIM_MASTER, off); break;
    case KIND_ADAM_M: sp.dev = optim_state_at(s->optim, OPTIM_ADAM_M, off); break;
    case KIND_ADAM_V: sp.dev = optim_state_at(s->optim, OPTIM_ADAM_V, off); break;
    default: TRI_ASSERT(0);
    }
    return sp;
}

// The spans this rank writes: its pieces, without copies that another rank stores.
static int stored_spans(const ckpt_state *s, span *out) {
    const zero_layout *zl = zero_layout_of(s->zero);
    const param_table *pt = s->pt;
    // Stage 0 (or dp == 1): every replica owns everything; store the dp-th part.
    size_t cut_lo = 0, cut_hi = (size_t)-1;
    if (zl->stage == 0 && zl->dp > 1) {
        size_t share = (pt->local_numel + (size_t)zl->dp - 1) / (size_t)zl->dp;
        cut_lo = share * (size_t)zl->dp_rank, cut_hi = cut_lo + share;
    }
    int n = 0;
    // Mixed precision stores the fp32 master weights: the bf16 parameters are their rounding.
    const int bf16 = zero_param_dtype(s->zero) == DTYPE_BF16;
    const ckpt_kind kinds[] = {bf16 ? KIND_MASTER : KIND_PARAM, KIND_ADAM_M, KIND_ADAM_V};
    for (int k = 0; k < 3; k++) {
        for (int p = 0; p < zl->n_pieces; p++) {
            const zero_piece *pc = &zl->pieces[p];
            const param_entry *e = &pt->entries[pc->entry];
            if (e->split == SPLIT_REPLICATED && s->tp_rank != 0) continue;
            if (pc->entry == pt->wte && pt->wte_is_copy) continue;
            size_t lo = pc->lo > cut_lo ? pc->lo : cut_lo, hi = pc->hi < cut_hi ? pc->hi : cut_hi;
            if (lo >= hi) continue;
            if (out) out[n] = ckpt_piece_span(s, pc, kinds[k], lo, hi);
            n++;
        }
    }
    return n;
}

// ---- small file helpers ----

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

// Test hook TRIDENT_TEST_CKPT_ENOSPC=N: once this process has written N bytes of checkpoint
// files (rank files, indexes, manifest, latest), every further write fails with ENOSPC, as
// on a file system that has filled up (tests/test_rundir.sh, where no tmpfs can be mounted).
static atomic_llong g_written;

static size_t enospc_allowed(size_t n) {
    static long long limit = -2; // -2: not read yet; -1: no limit
    if (limit == -2) limit = env_get(ENV_TEST_CKPT_ENOSPC) ? env_int(ENV_TEST_CKPT_ENOSPC, 0) : -1;
    if (limit < 0) return n;
    long long before = atomic_fetch_add(&g_written, (long long)n);
    return before + (long long)n <= limit ? n : before >= limit ? 0 : (size_t)(limit - before);
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    const size_t allowed = enospc_allowed(n);
    for (size_t left = allowed; left;) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w, left -= (size_t)w;
    }
    if (allowed < n) {
        errno = ENOSPC;
        return -1;
    }
    return 0;
}

// Creates (or replaces) `path` with the n bytes of data, then a second part (may be empty),
// and fsyncs it. 0, or -1 with errno set.
static int write_file(const char *path, const void *data, size_t n, const void *more,
                      size_t n_more) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    if (write_all(fd, data, n) != 0 || write_all(fd, more, n_more) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return close(fd);
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

int ckpt_is_step_name(const char *name, int *step) {
    if (strncmp(name, "step_", 5) || strlen(name) != 13) return 0;
    int v = 0;
    for (int i = 5; i < 13; i++) {
        if (name[i] < '0' || name[i] > '9') return 0;
        v = v * 10 + (name[i] - '0');
    }
    *step = v;
    return 1;
}

// ---- the writer ----

struct ckpt_writer {
    ckpt_state s;
    span *spans;
    int n_spans;
    size_t bytes;         // this rank's file
    unsigned char *image; // host copy of the spans, back to back
    char dir[PATH_BYTES]; // checkpoint.dir
    char tmp[PATH_BYTES], final[PATH_BYTES];
    ckpt_progress progress; // its order is not kept: order_text holds it
    char *order_text;       // the manifest's data order lines (manifest_write_data_order)
    int pending, threaded;
    pthread_t thread, prefault;
    int prefaulting; // the prefault thread has not been joined yet
    atomic_int done;
    tri_status status; // of this rank's write
    double write_s;
};

static const char *tensor_name(const ckpt_state *s, int entry) {
    return s->pt->entries[entry].name;
}

typedef struct {
    FILE *idx;
    const unsigned char *base; // the span's bytes
    const char *tensor, *kind, *file;
    size_t file_off; // of the span
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
    if (ms < 0) ms = env_int(ENV_TEST_CKPT_DELAY_MS, 0);
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

    // The index: one line per region, after the data it describes is on disk.
    pathf(idx_path, "%s/rank_%05d.idx", w->tmp, w->s.rank);
    char *text = NULL;
    size_t len = 0;
    FILE *idx = open_memstream(&text, &len);
    if (!idx) goto io_error;
    size_t off = 0;
    for (int i = 0; i < w->n_spans; i++) {
        const span *sp = &w->spans[i];
        idx_ctx c = {
            idx, w->image + off, tensor_name(&w->s, sp->entry), ckpt_kind_names[sp->kind], name,
            off};
        ckpt_entry_rects(w->s.pt, &w->s.pt->entries[sp->entry],
                         sp->lo - w->s.pt->entries[sp->entry].offset,
                         sp->hi - w->s.pt->entries[sp->entry].offset, write_idx_line, &c);
        off += (sp->hi - sp->lo) * sizeof(float);
    }
    int bad = fclose(idx) != 0 || write_file(idx_path, text, len, NULL, 0) != 0;
    free(text);
    if (bad) {
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
    for (int i = 0; i < w->n_spans; i++)
        w->bytes += (w->spans[i].hi - w->spans[i].lo) * sizeof(float);
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

uint64_t ckpt_rank_bytes(const ckpt_state *s) {
    const int n = stored_spans(s, NULL);
    span *spans = xcalloc((size_t)n + 1, sizeof(span));
    stored_spans(s, spans);
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += (spans[i].hi - spans[i].lo) * sizeof(float);
    free(spans);
    return bytes;
}

int ckpt_pending(const ckpt_writer *w) { return w && w->pending; }
int ckpt_write_done(const ckpt_writer *w) { return w && w->pending && atomic_load(&w->done); }

tri_status ckpt_agree(comm *cm, tri_status rc) {
    double v = (double)rc;
    tri_status crc = comm_all_reduce(cm, COMM_GROUP_WORLD, &v, 1, DTYPE_FP64, COMM_REDUCE_MAX);
    if (crc != TRI_OK) return crc;
    return (tri_status)(int)v;
}

// Rank 0: manifest.yaml from the indexes, then the renames that make it complete.
static tri_status write_manifest(ckpt_writer *w) {
    const ckpt_state *s = &w->s;
    const run_config *cfg = s->cfg;
    char path[PATH_BYTES], tmp_path[PATH_BYTES];
    path_join(path, w->tmp, "manifest.yaml");
    // Composed in memory, sealed with its checksum, then written and synced.
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) goto io_error;
    const ckpt_progress *p = &w->progress;
    fprintf(f, "# trident checkpoint: every region of the rank files, in global coordinates\n");
    fprintf(f, "format: %s\nversion: %d\nstep: %d\ntokens: %lld\nsamples: %lld\noptim_t: %d\n",
            CKPT_FORMAT, CKPT_VERSION, p->step, (long long)p->tokens, (long long)p->samples,
            p->optim_t);
    // Training draws no random numbers after initialisation (no dropout), so the seed is
    // the whole RNG state.
    fprintf(f, "rng: {seed: %llu, draws: 0}\n", (unsigned long long)cfg->run.seed);
    fprintf(
        f,
        "mesh: {world: %d, tp: %d, pp: %d, dp: %d, virtual_stages: %d, zero: %d, schedule: %s}\n",
        s->world, cfg->parallel.tp, cfg->parallel.pp, cfg->parallel.dp,
        cfg->parallel.virtual_stages, zero_layout_of(s->zero)->stage,
        config_schedule_name(cfg->parallel.schedule));
    fputs(w->order_text, f);
    fprintf(f, "config:\n");
    config_print_yaml(cfg, f, 2);
    param_table full;
    params_build_full(&full, &cfg->model, cfg->parallel.tp);
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
            free(text);
            goto io_error;
        }
        fprintf(f, "  - {name: %s, bytes: %lld}\n", name, (long long)st.st_size);
    }
    fprintf(f, "regions:\n");
    for (int r = 0; r < s->world; r++) {
        pathf(tmp_path, "%s/rank_%05d.idx", w->tmp, r);
        FILE *idx = fopen(tmp_path, "r");
        char buf[65536];
        size_t n;
        while (idx && (n = fread(buf, 1, sizeof buf, idx)) > 0) fwrite(buf, 1, n, f);
        if (!idx || ferror(idx)) {
            pathf(path, "%s", tmp_path);
            if (idx) fclose(idx);
            fclose(f);
            free(text);
            goto io_error;
        }
        fclose(idx);
    }
    char seal[64];
    int bad = fclose(f) != 0;
    if (!bad) manifest_seal(text, len, seal, sizeof seal);
    bad = bad || write_file(path, text, len, seal, strlen(seal)) != 0;
    free(text);
    if (bad) goto io_error;
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
    char line[64];
    snprintf(line, sizeof line, "%s\n", base);
    if (write_file(tmp_path, line, strlen(line), NULL, 0) != 0) {
        pathf(path, "%s", tmp_path);
        goto io_error;
    }
    if (rename(tmp_path, path) != 0) goto io_error;
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
        if (!ckpt_is_step_name(de->d_name, &step)) continue;
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
        if (remove_dir(p) == 0)
            LOG_INFO("checkpoint: removed %s (checkpoint.keep %d)", p, w->s.cfg->checkpoint.keep);
    }
    free(steps);
}

tri_status ckpt_commit(ckpt_writer *w) {
    if (!w->pending) return TRI_OK;
    if (w->threaded) pthread_join(w->thread, NULL);
    w->pending = w->threaded = 0;
    tri_status rc = ckpt_agree(w->s.cm, w->status);
    if (rc == TRI_OK && w->s.rank == 0) {
        rc = write_manifest(w);
        if (rc == TRI_OK) {
            LOG_INFO("checkpoint: step %d written to %s (%.1f MiB on rank 0, %.2f s)",
                     w->progress.step, w->final, w->bytes / 1048576.0, w->write_s);
            prune(w);
        }
    }
    rc = ckpt_agree(w->s.cm, rc);
    if (rc != TRI_OK && w->s.rank == 0) {
        LOG_ERROR("checkpoint: step %d not written; %s is left as it was", w->progress.step,
                  w->dir);
        remove_dir(w->tmp);
    }
    return rc;
}

tri_status ckpt_save(ckpt_writer *w, const ckpt_progress *p, int async, double *blocked_s) {
    double t0 = time_now_s();
    TRI_CHECK(ckpt_commit(w));
    TRI_ASSERT(p->order.recorded && p->order.step == p->step);
    w->progress = *p;
    memset(&w->progress.order, 0, sizeof w->progress.order);
    // The data order as text now: the caller's cursor moves on while the manifest waits.
    free(w->order_text);
    size_t order_len = 0;
    w->order_text = NULL;
    FILE *of = open_memstream(&w->order_text, &order_len);
    TRI_ASSERT(of);
    manifest_write_data_order(of, &p->order);
    TRI_ASSERT(fclose(of) == 0);
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
    TRI_CHECK(ckpt_agree(w->s.cm, rc));
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
    free(w->order_text);
    free(w);
}
