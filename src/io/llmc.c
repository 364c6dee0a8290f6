// llmc.c: llm.c model files. The file groups each kind of tensor over all layers
// (ln1w (L, C), qkvw (L, 3C, C), ...), the parameter table has one entry per layer and
// kind; the mapping between the two is llmc_offset().
#include "io/llmc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bf16.h"

// The file's tensors in order, as the per-layer kinds of params.h (or -1 for wte, wpe,
// lnfw, lnfb which are not per layer).
static const int llmc_kinds[] = {PARAM_LN1W,     PARAM_LN1B,     PARAM_QKVW,    PARAM_QKVB,
                                 PARAM_ATTPROJW, PARAM_ATTPROJB, PARAM_LN2W,    PARAM_LN2B,
                                 PARAM_FCW,      PARAM_FCB,      PARAM_FCPROJW, PARAM_FCPROJB};

static int64_t kind_numel(int kind, int64_t C) {
    switch (kind) {
    case PARAM_QKVW: return 3 * C * C;
    case PARAM_QKVB: return 3 * C;
    case PARAM_ATTPROJW: return C * C;
    case PARAM_FCW:
    case PARAM_FCPROJW: return 4 * C * C;
    case PARAM_FCB: return 4 * C;
    default: return C;
    }
}

// Offset (elements) in the file of table entry e: the same tensor for one layer. The dims
// are a checked header's (llmc_open) or a table's, so no sum here overflows.
static int64_t llmc_offset(const param_entry *e, int64_t maxT, int64_t L, int64_t C, int64_t Vp) {
    static const char *suffixes[PARAM_PER_LAYER] = {"ln1w",     "ln1b",     "qkvw",    "qkvb",
                                                    "attprojw", "attprojb", "ln2w",    "ln2b",
                                                    "fcw",      "fcb",      "fcprojw", "fcprojb"};
    if (!strcmp(e->name, "wte")) return 0;
    int64_t off = Vp * C;
    if (!strcmp(e->name, "wpe")) return off;
    off += maxT * C;
    const char *suffix = e->layer >= 0 ? strchr(e->name, '.') + 1 : NULL;
    for (int k = 0; k < PARAM_PER_LAYER; k++) {
        int64_t n = kind_numel(llmc_kinds[k], C);
        if (suffix && !strcmp(suffix, suffixes[k])) return off + (int64_t)e->layer * n;
        off += L * n;
    }
    if (!strcmp(e->name, "lnfw")) return off;
    TRI_ASSERT(!strcmp(e->name, "lnfb"));
    return off + C;
}

// ---- the header ----

// a * b + c in int64, or -1 when any step overflows (every operand here is >= 0).
static int64_t mul_add(int64_t a, int64_t b, int64_t c) {
    int64_t p, s;
    if (__builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(p, c, &s)) return -1;
    return s;
}

// Values after the header of a model with these dims: Vp*C + maxT*C + 2C + L*(12C^2 + 13C),
// each product and sum checked; -1 on overflow. C is at most LLMC_MAX_D_MODEL, so one
// layer's tensor (at most 4*C*C values) fits int64 before it is checked against L.
static int64_t file_numel(int64_t maxT, int64_t L, int64_t C, int64_t Vp) {
    TRI_ASSERT(C >= 1 && C <= LLMC_MAX_D_MODEL);
    int64_t n = mul_add(Vp, C, 0);
    if (n >= 0) n = mul_add(maxT, C, n);
    if (n >= 0) n = mul_add(2, C, n);
    for (int k = 0; k < PARAM_PER_LAYER && n >= 0; k++)
        n = mul_add(L, kind_numel(llmc_kinds[k], C), n);
    return n;
}

static tri_status check_header(llmc_file *f, const int32_t *h, int64_t size) {
    const char *path = f->path;
    if (h[0] != LLMC_MAGIC || (h[1] != LLMC_VERSION_FP32 && h[1] != LLMC_VERSION_BF16)) {
        LOG_ERROR("%s: not an llm.c model file (magic %d version %d; expected %d and 3 or 5)", path,
                  h[0], h[1], LLMC_MAGIC);
        LOG_HINT("model.init_from and `trident sample/export` take an llm.c GPT-2 model file "
                 "(fp32 version 3 or bf16 version 5), a run directory or a checkpoint");
        return TRI_ERR_CKPT;
    }
    static const struct {
        const char *name;
        int word, max;
    } dims[] = {{"maxT (seq_len)", 2, LLMC_MAX_SEQ_LEN}, {"V (vocab_size)", 3, LLMC_MAX_VOCAB},
                {"L (n_layer)", 4, LLMC_MAX_LAYERS},     {"NH (n_head)", 5, LLMC_MAX_D_MODEL},
                {"C (d_model)", 6, LLMC_MAX_D_MODEL},    {"Vp (padded vocab)", 7, LLMC_MAX_VOCAB}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const int v = h[dims[i].word];
        if (v >= 1 && v <= dims[i].max) continue;
        LOG_ERROR("%s: header word %d, %s, is %d; an llm.c model has 1 to %d", path, dims[i].word,
                  dims[i].name, v, dims[i].max);
        LOG_HINT("the header is damaged or the file is not an llm.c model file");
        return TRI_ERR_CKPT;
    }
    f->version = h[1];
    f->maxT = h[2], f->V = h[3], f->L = h[4], f->NH = h[5], f->C = h[6], f->Vp = h[7];
    if (f->C % f->NH || f->Vp < f->V) {
        LOG_ERROR("%s: inconsistent header: %s (maxT %d V %d L %d NH %d C %d Vp %d)", path,
                  f->C % f->NH ? "C is not a multiple of NH" : "Vp is less than V", f->maxT, f->V,
                  f->L, f->NH, f->C, f->Vp);
        LOG_HINT("the header is damaged or the file is not an llm.c model file");
        return TRI_ERR_CKPT;
    }
    const int64_t elem = f->version == LLMC_VERSION_FP32 ? 4 : 2;
    f->numel = file_numel(f->maxT, f->L, f->C, f->Vp);
    const int64_t expected = f->numel < 0 ? -1 : mul_add(f->numel, elem, LLMC_HEADER_BYTES);
    if (expected < 0) {
        LOG_ERROR("%s: the header's model (maxT %d V %d L %d NH %d C %d Vp %d) has more values "
                  "than a file can hold",
                  path, f->maxT, f->V, f->L, f->NH, f->C, f->Vp);
        LOG_HINT("the header is damaged or the file is not an llm.c model file");
        return TRI_ERR_CKPT;
    }
    if (size != expected) {
        LOG_ERROR("%s: size %lld bytes, but its header (maxT %d V %d L %d NH %d C %d Vp %d, %s) "
                  "implies %lld = 1024 + %lld values * %lld bytes",
                  path, (long long)size, f->maxT, f->V, f->L, f->NH, f->C, f->Vp,
                  elem == 4 ? "fp32" : "bf16", (long long)expected, (long long)f->numel,
                  (long long)elem);
        LOG_HINT("the file is %s or was not written by llm.c / trident export",
                 size < expected ? "truncated (an incomplete download or copy)"
                                 : "longer than its header says");
        return TRI_ERR_CKPT;
    }
    return TRI_OK;
}

tri_status llmc_open(llmc_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    snprintf(f->path, sizeof f->path, "%s", path);
    f->io_bytes = LLMC_IO_BYTES;
    // O_NONBLOCK: a FIFO named here must not block the open; the type is checked next.
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        LOG_ERROR("cannot open model file %s: %s", path, strerror(errno));
        LOG_HINT("model.init_from and `trident sample/export` take an llm.c model file "
                 "(or a run directory containing model.bin, a checkpoint, or a Hugging Face "
                 "model directory with config.json)");
        if (fd >= 0) close(fd);
        return TRI_ERR_CKPT;
    }
    if (!S_ISREG(st.st_mode)) {
        LOG_ERROR("%s: not a regular file", path);
        LOG_HINT("model.init_from and `trident sample/export` take an llm.c model file (or a "
                 "directory: a run's, a checkpoint, a Hugging Face model's)");
        close(fd);
        return TRI_ERR_CKPT;
    }
    fcntl(fd, F_SETFL, 0); // blocking reads from here on
    f->fd = fd;
    int32_t h[256];
    ssize_t got = pread(fd, h, sizeof h, 0);
    tri_status rc = TRI_OK;
    if (got != (ssize_t)sizeof h) {
        LOG_ERROR("%s: shorter than the 1024-byte llm.c header (%lld bytes)", path,
                  (long long)st.st_size);
        LOG_HINT("the file is truncated or is not an llm.c model file");
        rc = TRI_ERR_CKPT;
    } else {
        rc = check_header(f, h, (int64_t)st.st_size);
    }
    if (rc != TRI_OK) llmc_close(f);
    return rc;
}

void llmc_close(llmc_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

tri_status llmc_check_config(const llmc_file *f, const run_config *cfg) {
    struct {
        const char *key;
        int file, config;
    } dims[] = {
        {"model.n_layer", f->L, cfg->model.n_layer},
        {"model.n_head", f->NH, cfg->model.n_head},
        {"model.d_model", f->C, cfg->model.d_model},
        {"model.seq_len", f->maxT, cfg->model.seq_len},
        {"model.vocab_size", f->V, cfg->model.vocab_size},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].file == dims[i].config) continue;
        LOG_ERROR("%s: %s is %d in the model file but %d in the config", f->path, dims[i].key,
                  dims[i].file, dims[i].config);
        bad = 1;
    }
    if (bad) {
        LOG_HINT("set the model keys to the file's shape (or drop model.init_from)");
        return TRI_ERR_CKPT;
    }
    return TRI_OK;
}

void llmc_config_from_file(const llmc_file *f, run_config *cfg) {
    cfg->model.n_layer = f->L;
    cfg->model.n_head = f->NH;
    cfg->model.d_model = f->C;
    cfg->model.seq_len = f->maxT;
    cfg->model.vocab_size = f->V;
    cfg->model.vocab_pad_to = f->Vp;
}

// ---- reading ----

// n bytes at `offset`, all of them (pread may return fewer).
static int read_full(int fd, void *buf, size_t n, int64_t offset) {
    char *p = buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = EIO; // shorter than fstat said: changed under us
            return -1;
        }
        p += got, n -= (size_t)got, offset += got;
    }
    return 0;
}

// What one read fills: rows [row0, row0 + rows) x columns [col0, col0 + cols) of the file
// tensor of entry e (global row-major, `gcols` columns, starting at value `base`) into dst
// (rows x cols), through `stage` (stage_n values of the file's width).
typedef struct {
    const llmc_file *f;
    const param_entry *e;
    int64_t base, gcols;
    void *stage;
    size_t stage_n;
} rect_reader;

static tri_status read_failed(const rect_reader *rd) {
    LOG_ERROR("%s: read error in tensor %s: %s", rd->f->path, rd->e->name, strerror(errno));
    LOG_HINT("check the file system; the file may have been changed or truncated while read");
    return TRI_ERR_CKPT;
}

// n values of the file's width in `src` into fp32 dst; the first non-finite one is refused,
// named by its (row, col) in the tensor (src[0] is at row, col; rows of gcols).
static tri_status convert(const rect_reader *rd, const void *src, float *dst, size_t n, int64_t row,
                          int64_t col) {
    const int fp32 = rd->f->version == LLMC_VERSION_FP32;
    size_t bad = n;
    if (fp32) {
        memcpy(dst, src, n * sizeof(float));
        const uint32_t *u = src;
        for (size_t i = 0; i < n; i++)
            if ((u[i] & 0x7f800000u) == 0x7f800000u) {
                bad = i;
                break;
            }
    } else {
        const uint16_t *h = src;
        for (size_t i = 0; i < n; i++) {
            if ((h[i] & 0x7f80u) == 0x7f80u && bad == n) bad = i;
            dst[i] = bf16_to_f32(h[i]);
        }
    }
    if (bad == n) return TRI_OK;
    const float v = fp32 ? dst[bad] : bf16_to_f32(((const uint16_t *)src)[bad]);
    const int64_t at = col + (int64_t)bad;
    LOG_ERROR("%s: tensor %s holds a non-finite value (%s) at row %lld, column %lld (element "
              "%lld of its %lld x %lld values)",
              rd->f->path, rd->e->name,
              v != v  ? "nan"
              : v > 0 ? "inf"
                      : "-inf",
              (long long)(row + at / rd->gcols), (long long)(at % rd->gcols),
              (long long)((row + at / rd->gcols) * rd->gcols + at % rd->gcols),
              (long long)rd->e->global_rows, (long long)rd->gcols);
    LOG_HINT("the file is damaged, or the run that wrote it diverged; start from another model "
             "file (or an earlier checkpoint, converted with `trident export`)");
    return TRI_ERR_CKPT;
}

static tri_status read_rect(const rect_reader *rd, int64_t row0, int64_t rows, int64_t col0,
                            int64_t cols, float *dst) {
    const size_t elem = rd->f->version == LLMC_VERSION_FP32 ? 4 : 2;
    const int64_t gc = rd->gcols;
    const int64_t per = (int64_t)rd->stage_n;
    const int64_t start = LLMC_HEADER_BYTES + (rd->base + row0 * gc + col0) * (int64_t)elem;
    if (cols == gc) { // whole rows: one contiguous run of values
        const int64_t total = rows * gc;
        for (int64_t done = 0; done < total; done += per) {
            const int64_t n = total - done < per ? total - done : per;
            if (read_full(rd->f->fd, rd->stage, (size_t)n * elem, start + done * (int64_t)elem))
                return read_failed(rd);
            TRI_CHECK(convert(rd, rd->stage, dst + done, (size_t)n, row0 + done / gc, done % gc));
        }
        return TRI_OK;
    }
    if (gc <= per) { // segments of several rows at once: read the span that covers them
        const int64_t k_max = per / gc;
        for (int64_t r = 0; r < rows; r += k_max) {
            const int64_t k = rows - r < k_max ? rows - r : k_max;
            const int64_t span = (k - 1) * gc + cols;
            if (read_full(rd->f->fd, rd->stage, (size_t)span * elem,
                          start + r * gc * (int64_t)elem))
                return read_failed(rd);
            for (int64_t j = 0; j < k; j++)
                TRI_CHECK(convert(rd, (const char *)rd->stage + (size_t)(j * gc) * elem,
                                  dst + (r + j) * cols, (size_t)cols, row0 + r + j, col0));
        }
        return TRI_OK;
    }
    for (int64_t r = 0; r < rows; r++) // a row wider than the staging: its segment in pieces
        for (int64_t c = 0; c < cols; c += per) {
            const int64_t n = cols - c < per ? cols - c : per;
            if (read_full(rd->f->fd, rd->stage, (size_t)n * elem,
                          start + (r * gc + c) * (int64_t)elem))
                return read_failed(rd);
            TRI_CHECK(convert(rd, rd->stage, dst + r * cols + c, (size_t)n, row0 + r, col0 + c));
        }
    return TRI_OK;
}

// The staging of a read of entry e: its values and one more row (a span of partial rows
// never needs more), at most LLMC_IO_BYTES.
static size_t stage_values(const param_entry *e, size_t elem, size_t io_bytes) {
    const size_t most = io_bytes / elem > 1 ? io_bytes / elem : 1;
    const size_t want = (size_t)e->local_numel + (size_t)e->global_cols;
    return want < most ? want : most;
}

size_t llmc_read_stage_bytes(const param_table *pt) {
    size_t most = 0;
    for (int i = 0; i < pt->n_entries; i++) {
        const size_t n = stage_values(&pt->entries[i], sizeof(float), LLMC_IO_BYTES) *
                         sizeof(float);
        most = n > most ? n : most;
    }
    return most;
}

// The global row and first column of local row r of entry e.
static void global_row(const param_table *pt, const param_entry *e, int64_t r, int64_t *row,
                       int64_t *col) {
    const int64_t g = params_global_index(pt, e, r, 0);
    *row = g / e->global_cols, *col = g % e->global_cols;
}

tri_status llmc_read_entry(const llmc_file *f, const param_table *pt, int i, float *dst) {
    const param_entry *e = &pt->entries[i];
    TRI_ASSERT(e->global_cols > 0 && e->local_cols > 0);
    // Only the real vocabulary rows come from the file: the table's padding may differ from
    // the file's, and padded rows are zero.
    const int64_t real_rows = e->split == SPLIT_VOCAB ? e->valid_rows : e->global_rows;
    const size_t elem = f->version == LLMC_VERSION_FP32 ? 4 : 2;
    rect_reader rd = {.f = f,
                      .e = e,
                      .base = llmc_offset(e, f->maxT, f->L, f->C, f->Vp),
                      .gcols = e->global_cols,
                      .stage_n = stage_values(e, elem, f->io_bytes)};
    rd.stage = xmalloc(rd.stage_n * elem);
    tri_status rc = TRI_OK;
    const int64_t lc = e->local_cols;
    for (int64_t r = 0; r < e->local_rows && rc == TRI_OK;) {
        int64_t row, col;
        global_row(pt, e, r, &row, &col);
        if (row >= real_rows) {
            memset(dst + r * lc, 0, (size_t)lc * sizeof(float));
            r++;
            continue;
        }
        // The run of local rows that are consecutive global rows at the same columns.
        int64_t n = 1;
        for (; r + n < e->local_rows && row + n < real_rows; n++) {
            int64_t next_row, next_col;
            global_row(pt, e, r + n, &next_row, &next_col);
            if (next_row != row + n || next_col != col) break;
        }
        rc = read_rect(&rd, row, n, col, lc, dst + r * lc);
        r += n;
    }
    free(rd.stage);
    return rc;
}

tri_status llmc_read_params(const llmc_file *f, const param_table *pt, float *local) {
    for (int i = 0; i < pt->n_entries; i++)
        TRI_CHECK(llmc_read_entry(f, pt, i, local + pt->entries[i].offset));
    return TRI_OK;
}

// ---- writing ----

static int write_full(int fd, const void *buf, size_t n, int64_t offset) {
    const char *p = buf;
    while (n > 0) {
        ssize_t put = pwrite(fd, p, n, (off_t)offset);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            if (put == 0) errno = EIO;
            return -1;
        }
        p += put, n -= (size_t)put, offset += put;
    }
    return 0;
}

static tri_status write_failed(llmc_writer *w) {
    LOG_ERROR("cannot write model file %s: %s", w->tmp, strerror(errno));
    LOG_HINT("check free space and permissions where the model file goes");
    return TRI_ERR_CKPT;
}

tri_status llmc_writer_open(llmc_writer *w, const char *path, const param_table *full, int maxT,
                            int V, int NH) {
    TRI_ASSERT(full->tp == 1 && full->pp == 1);
    const param_entry *wte = &full->entries[params_wte(full)];
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->maxT = maxT, w->L = full->n_layer, w->C = (int)wte->global_cols;
    w->Vp = (int)wte->global_rows;
    w->numel = (int64_t)full->local_numel;
    const int32_t h[256] = {LLMC_MAGIC, LLMC_VERSION_FP32, maxT, V, w->L, NH, w->C, w->Vp};
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0 || write_full(w->fd, h, sizeof h, 0)) {
        tri_status rc = write_failed(w);
        llmc_writer_close(w, 0);
        return rc;
    }
    return TRI_OK;
}

tri_status llmc_writer_put(llmc_writer *w, const param_entry *e, size_t first, const float *data,
                           size_t n) {
    TRI_ASSERT(w->fd >= 0 && first + n <= (size_t)e->global_rows * (size_t)e->global_cols);
    const int64_t at = llmc_offset(e, w->maxT, w->L, w->C, w->Vp) + (int64_t)first;
    if (write_full(w->fd, data, n * sizeof(float), LLMC_HEADER_BYTES + at * 4))
        return write_failed(w);
    w->written += (int64_t)n;
    return TRI_OK;
}

tri_status llmc_writer_close(llmc_writer *w, int commit) {
    tri_status rc = TRI_OK;
    if (commit) {
        TRI_ASSERT(w->written == w->numel); // every tensor put once
        if (fsync(w->fd) != 0) rc = write_failed(w);
    }
    if (w->fd >= 0 && close(w->fd) != 0 && commit && rc == TRI_OK) rc = write_failed(w);
    w->fd = -1;
    if (commit && rc == TRI_OK && rename(w->tmp, w->path) != 0) {
        LOG_ERROR("cannot rename %s to %s: %s", w->tmp, w->path, strerror(errno));
        rc = TRI_ERR_CKPT;
    }
    if (!commit || rc != TRI_OK) unlink(w->tmp);
    return rc;
}

tri_status llmc_write(const char *path, const param_table *pt, const float *global, int maxT, int V,
                      int NH) {
    llmc_writer w;
    TRI_CHECK(llmc_writer_open(&w, path, pt, maxT, V, NH));
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        tri_status rc = llmc_writer_put(&w, e, 0, global + e->offset, (size_t)e->local_numel);
        if (rc != TRI_OK) {
            llmc_writer_close(&w, 0);
            return rc;
        }
    }
    return llmc_writer_close(&w, 1);
}

int llmc_save_wanted(const param_table *full, const run_config *cfg) {
    return !cfg->checkpoint.dir || full->global_numel <= LLMC_SAVE_MAX_BYTES / 4;
}
