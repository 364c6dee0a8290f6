// safetensors.c: see safetensors.h.
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bf16.h"
#include "io/json.h"

size_t st_dtype_size(st_dtype d) { return d == ST_F32 ? 4 : 2; }
const char *st_dtype_name(st_dtype d) {
    return d == ST_F32 ? "F32" : d == ST_BF16 ? "BF16" : "F16";
}

static float f16_to_f32(uint16_t h) {
    const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0) v = ldexpf((float)man, -24); // subnormal (or zero)
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = ldexpf((float)(man | 0x400), exp - 25);
    return sign ? -v : v;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}
static int cmp_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

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

#define BAD_HEADER(...)                                                                            \
    do {                                                                                           \
        LOG_ERROR(__VA_ARGS__);                                                                    \
        LOG_HINT("the file is truncated or damaged, or is not a safetensors file; write it again " \
                 "(save_pretrained, or `trident export --format hf`)");                            \
        return TRI_ERR_CKPT;                                                                       \
    } while (0)

// One header member (not __metadata__) into t; its offsets made absolute (data at `data0`).
static tri_status parse_tensor(const st_file *f, const json_member *m, uint64_t data0,
                               st_tensor *t) {
    const json_value *v = m->value, *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"),
                     *off = json_get(v, "data_offsets");
    if (v->type != JSON_OBJECT || !dt || dt->type != JSON_STRING || !sh || sh->type != JSON_ARRAY ||
        !off || off->type != JSON_ARRAY || off->u.array.n != 2)
        BAD_HEADER("%s: tensor %s: the header entry needs \"dtype\" (a string), \"shape\" (an "
                   "array) and \"data_offsets\" ([begin, end])",
                   f->path, m->key);
    const char *d = dt->u.str.s;
    if (!strcmp(d, "F32")) t->dtype = ST_F32;
    else if (!strcmp(d, "BF16")) t->dtype = ST_BF16;
    else if (!strcmp(d, "F16")) t->dtype = ST_F16;
    else {
        LOG_ERROR("%s: tensor %s has dtype %s; trident reads F32, BF16 and F16", f->path, m->key,
                  d);
        LOG_HINT("convert the model to float32 or bfloat16 (model.to(torch.float32)."
                 "save_pretrained(DIR))");
        return TRI_ERR_CKPT;
    }
    if (sh->u.array.n > ST_MAX_DIMS)
        BAD_HEADER("%s: tensor %s has %zu dimensions (at most %d)", f->path, m->key, sh->u.array.n,
                   ST_MAX_DIMS);
    t->ndim = (int)sh->u.array.n;
    uint64_t numel = 1;
    for (int k = 0; k < t->ndim; k++) {
        uint64_t dim;
        if (!json_uint(sh->u.array.items[k], (uint64_t)1 << 40, &dim))
            BAD_HEADER("%s: tensor %s: shape[%d] is not a size (a whole number up to 2^40)",
                       f->path, m->key, k);
        t->shape[k] = (int64_t)dim;
        if (dim && numel > ((uint64_t)1 << 50) / dim)
            BAD_HEADER("%s: tensor %s: its shape holds more than 2^50 values", f->path, m->key);
        numel *= dim;
    }
    t->rows = t->ndim ? t->shape[0] : 1;
    t->cols = t->rows ? (int64_t)(numel / (uint64_t)t->rows) : 0;
    if (t->ndim <= 1) t->cols = 1;
    uint64_t b, e;
    if (!json_uint(off->u.array.items[0], (uint64_t)1 << 62, &b) ||
        !json_uint(off->u.array.items[1], (uint64_t)1 << 62, &e) || e < b)
        BAD_HEADER("%s: tensor %s: data_offsets is not [begin, end] with begin <= end", f->path,
                   m->key);
    if (e - b != numel * st_dtype_size(t->dtype))
        BAD_HEADER("%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes but its shape and "
                   "dtype %s need %llu",
                   f->path, m->key, (unsigned long long)b, (unsigned long long)e,
                   (unsigned long long)(e - b), d,
                   (unsigned long long)(numel * st_dtype_size(t->dtype)));
    if (data0 + e > (uint64_t)f->size)
        BAD_HEADER("%s: tensor %s: its data [%llu, %llu) lies past the end of the file (%llu "
                   "data bytes)",
                   f->path, m->key, (unsigned long long)b, (unsigned long long)e,
                   (unsigned long long)((uint64_t)f->size - data0));
    t->begin = data0 + b, t->end = data0 + e;
    t->name = xstrdup(m->key);
    return TRI_OK;
}

static tri_status parse_header(st_file *f, const char *text, uint64_t n) {
    json_doc *doc = json_doc_new();
    char err[256];
    const json_value *root = json_parse(doc, text, (size_t)n, 64, err, sizeof err);
    tri_status rc = TRI_OK;
    if (!root || root->type != JSON_OBJECT) {
        LOG_ERROR("%s: the safetensors header is not a JSON object: %s", f->path,
                  root ? json_type_name(root) : err);
        LOG_HINT("the file is damaged or is not a safetensors file");
        json_doc_free(doc);
        return TRI_ERR_CKPT;
    }
    f->t = xcalloc(root->u.object.n + 1, sizeof *f->t);
    for (size_t i = 0; i < root->u.object.n && rc == TRI_OK; i++) {
        const json_member *m = &root->u.object.members[i];
        if (!strcmp(m->key, "__metadata__")) {
            if (m->value->type != JSON_OBJECT) {
                LOG_ERROR("%s: __metadata__ is %s, not an object", f->path,
                          json_type_name(m->value));
                rc = TRI_ERR_CKPT;
            }
            continue;
        }
        if (strlen(m->key) != m->key_len || m->key_len == 0 || m->key_len > 1024) {
            LOG_ERROR("%s: header member %zu has an empty, over-long or NUL-holding name", f->path,
                      i);
            rc = TRI_ERR_CKPT;
            continue;
        }
        rc = parse_tensor(f, m, 8 + n, &f->t[f->n]);
        if (rc == TRI_OK) f->n++;
    }
    json_doc_free(doc);
    if (rc != TRI_OK) return rc;
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_tensor);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(f->t[i].name, f->t[i - 1].name))
            BAD_HEADER("%s: tensor %s is in the header twice", f->path, f->t[i].name);
    // No two data ranges overlap (empty tensors take no bytes and cannot).
    const st_tensor **by = xmalloc((size_t)(f->n + 1) * sizeof *by);
    int k = 0;
    for (int i = 0; i < f->n; i++)
        if (f->t[i].end > f->t[i].begin) by[k++] = &f->t[i];
    qsort(by, (size_t)k, sizeof *by, cmp_begin);
    for (int i = 1; i < k && rc == TRI_OK; i++)
        if (by[i]->begin < by[i - 1]->end) {
            LOG_ERROR("%s: the data of tensors %s and %s overlap", f->path, by[i - 1]->name,
                      by[i]->name);
            LOG_HINT("the file is damaged; write it again");
            rc = TRI_ERR_CKPT;
        }
    free(by);
    return rc;
}

tri_status st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); // a FIFO must not block the open
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        LOG_ERROR("cannot open %s: %s", path, f->fd < 0 ? strerror(errno) : "not a regular file");
        LOG_HINT("model.init_from names a Hugging Face model directory: config.json and "
                 "model.safetensors (or the shards of model.safetensors.index.json)");
        st_close(f);
        return TRI_ERR_CKPT;
    }
    fcntl(f->fd, F_SETFL, 0);
    f->size = (int64_t)st.st_size;
    uint8_t len8[8];
    tri_status rc = TRI_OK;
    if (f->size < 8 || read_full(f->fd, len8, 8, 0)) {
        LOG_ERROR("%s: shorter than the 8-byte safetensors header length (%lld bytes)", path,
                  (long long)f->size);
        LOG_HINT("the file is truncated or is not a safetensors file");
        rc = TRI_ERR_CKPT;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0 && rc == TRI_OK; i--) n = n << 8 | len8[i];
    if (rc == TRI_OK && (n > ST_HEADER_MAX || n + 8 > (uint64_t)f->size)) {
        LOG_ERROR("%s: the header length is %llu bytes, but the file has %lld and the limit is "
                  "%llu",
                  path, (unsigned long long)n, (long long)f->size,
                  (unsigned long long)ST_HEADER_MAX);
        LOG_HINT("the file is truncated or is not a safetensors file");
        rc = TRI_ERR_CKPT;
    }
    if (rc == TRI_OK) {
        char *text = xmalloc((size_t)n + 1);
        if (read_full(f->fd, text, (size_t)n, 8)) {
            LOG_ERROR("%s: cannot read its header: %s", path, strerror(errno));
            rc = TRI_ERR_CKPT;
        } else {
            rc = parse_header(f, text, n);
        }
        free(text);
    }
    if (rc != TRI_OK) st_close(f);
    return rc;
}

void st_close(st_file *f) {
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    f->t = NULL, f->n = 0, f->fd = -1;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    st_tensor key = {.name = (char *)name};
    return f->n ? bsearch(&key, f->t, (size_t)f->n, sizeof key, cmp_tensor) : NULL;
}

// n values of dtype d at src into dst; the first non-finite one is refused, named by its
// element index `first + i` in t.
static tri_status widen(const st_file *f, const st_tensor *t, const void *src, float *dst, size_t n,
                        int64_t first) {
    size_t bad = n;
    if (t->dtype == ST_F32) {
        memcpy(dst, src, n * 4);
        for (size_t i = 0; i < n && bad == n; i++)
            if (!isfinite(dst[i])) bad = i;
    } else {
        const uint16_t *h = src;
        for (size_t i = 0; i < n; i++) {
            dst[i] = t->dtype == ST_BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
            if (bad == n && !isfinite(dst[i])) bad = i;
        }
    }
    if (bad == n) return TRI_OK;
    const int64_t at = first + (int64_t)bad;
    LOG_ERROR("%s: tensor %s holds a non-finite value (%s) at row %lld, column %lld", f->path,
              t->name,
              isnan(dst[bad]) ? "nan"
              : dst[bad] > 0  ? "inf"
                              : "-inf",
              (long long)(at / t->cols), (long long)(at % t->cols));
    LOG_HINT("the model is damaged, or the run that wrote it diverged; start from another one");
    return TRI_ERR_CKPT;
}

static tri_status read_failed(const st_file *f, const st_tensor *t) {
    LOG_ERROR("%s: read error in tensor %s: %s", f->path, t->name, strerror(errno));
    LOG_HINT("check the file system; the file may have been changed or truncated while read");
    return TRI_ERR_CKPT;
}

tri_status st_read_block(const st_file *f, const st_tensor *t, int64_t row0, int64_t rows,
                         int64_t col0, int64_t cols, float *dst, void *stage, size_t stage_bytes) {
    TRI_ASSERT(row0 >= 0 && col0 >= 0 && row0 + rows <= t->rows && col0 + cols <= t->cols);
    const size_t elem = st_dtype_size(t->dtype);
    const int64_t per = (int64_t)(stage_bytes / elem), gc = t->cols;
    TRI_ASSERT(per >= 1);
    if (cols == gc) { // whole rows: one contiguous run
        const int64_t total = rows * gc, first = row0 * gc;
        for (int64_t done = 0; done < total; done += per) {
            const int64_t n = total - done < per ? total - done : per;
            if (read_full(f->fd, stage, (size_t)n * elem,
                          (int64_t)t->begin + (first + done) * (int64_t)elem))
                return read_failed(f, t);
            TRI_CHECK(widen(f, t, stage, dst + done, (size_t)n, first + done));
        }
        return TRI_OK;
    }
    if (gc <= per) { // segments of several rows: read the span that covers them
        const int64_t k_max = per / gc;
        for (int64_t r = 0; r < rows; r += k_max) {
            const int64_t k = rows - r < k_max ? rows - r : k_max, span = (k - 1) * gc + cols;
            const int64_t first = (row0 + r) * gc + col0;
            if (read_full(f->fd, stage, (size_t)span * elem,
                          (int64_t)t->begin + first * (int64_t)elem))
                return read_failed(f, t);
            for (int64_t j = 0; j < k; j++)
                TRI_CHECK(widen(f, t, (const char *)stage + (size_t)(j * gc) * elem,
                                dst + (r + j) * cols, (size_t)cols, first + j * gc));
        }
        return TRI_OK;
    }
    for (int64_t r = 0; r < rows; r++) // a row segment wider than the staging, in pieces
        for (int64_t c = 0; c < cols; c += per) {
            const int64_t n = cols - c < per ? cols - c : per;
            const int64_t first = (row0 + r) * gc + col0 + c;
            if (read_full(f->fd, stage, (size_t)n * elem,
                          (int64_t)t->begin + first * (int64_t)elem))
                return read_failed(f, t);
            TRI_CHECK(widen(f, t, stage, dst + r * cols + c, (size_t)n, first));
        }
    return TRI_OK;
}
