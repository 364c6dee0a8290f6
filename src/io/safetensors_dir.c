// safetensors_dir.c: a model directory's safetensors files (one, or the shards of
// model.safetensors.index.json), and the streamed writer. See safetensors.h.
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define INDEX_MAX_BYTES ((size_t)64 << 20)

static int is_file(const char *dir, const char *name) {
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int st_model_present(const char *dir) {
    return is_file(dir, SINGLE_NAME) || is_file(dir, INDEX_NAME);
}

// The whole (small) index file, NUL-terminated; NULL after a message.
static char *slurp(const char *path, size_t *n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    char *text = NULL;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size > INDEX_MAX_BYTES) {
        LOG_ERROR("cannot read %s: %s", path,
                  fd < 0 ? strerror(errno) : "larger than 64 MiB, not an index");
        LOG_HINT("write the model again with save_pretrained");
    } else {
        text = xmalloc((size_t)st.st_size + 1);
        ssize_t got = read(fd, text, (size_t)st.st_size);
        if (got != st.st_size) {
            LOG_ERROR("cannot read %s: %s", path, got < 0 ? strerror(errno) : "short read");
            free(text);
            text = NULL;
        } else {
            text[got] = 0, *n = (size_t)got;
        }
    }
    if (fd >= 0) close(fd);
    return text;
}

typedef struct {
    char *name;
    int file;
} name_file;
static int cmp_nf(const void *a, const void *b) {
    return strcmp(((const name_file *)a)->name, ((const name_file *)b)->name);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static tri_status open_index(st_model *m) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", m->dir, INDEX_NAME);
    size_t n = 0;
    char *text = slurp(path, &n);
    if (!text) return TRI_ERR_CKPT;
    json_doc *doc = json_doc_new();
    char err[256];
    const json_value *root = json_parse(doc, text, n, 64, err, sizeof err);
    const json_value *wm = root ? json_get(root, "weight_map") : NULL;
    tri_status rc = TRI_OK;
    if (!wm || wm->type != JSON_OBJECT || wm->u.object.n == 0) {
        LOG_ERROR("%s: %s", path,
                  !root ? err : "has no \"weight_map\" object of tensor name -> file name");
        LOG_HINT("the index is damaged; write the model again with save_pretrained");
        rc = TRI_ERR_CKPT;
    }
    const size_t k = rc == TRI_OK ? wm->u.object.n : 0;
    name_file *nf = xcalloc(k + 1, sizeof *nf);
    char **files = xcalloc(k + 1, sizeof *files);
    int n_files = 0;
    for (size_t i = 0; i < k && rc == TRI_OK; i++) {
        const json_member *mb = &wm->u.object.members[i];
        const json_value *v = mb->value;
        if (v->type != JSON_STRING || v->u.str.len == 0 || strlen(v->u.str.s) != v->u.str.len ||
            strchr(v->u.str.s, '/') || !strcmp(v->u.str.s, "..") || !strcmp(v->u.str.s, ".") ||
            strlen(mb->key) != mb->key_len) {
            LOG_ERROR("%s: weight_map[\"%s\"] is not a file name in the model directory", path,
                      mb->key);
            LOG_HINT("each tensor maps to a shard's plain file name, e.g. "
                     "model-00001-of-00002.safetensors");
            rc = TRI_ERR_CKPT;
            break;
        }
        int f = 0;
        while (f < n_files && strcmp(files[f], v->u.str.s)) f++;
        if (f == n_files) files[n_files++] = xstrdup(v->u.str.s);
        nf[i].name = xstrdup(mb->key), nf[i].file = f;
    }
    json_doc_free(doc);
    free(text);
    if (rc == TRI_OK) {
        qsort(nf, k, sizeof *nf, cmp_nf);
        for (size_t i = 1; i < k && rc == TRI_OK; i++)
            if (!strcmp(nf[i].name, nf[i - 1].name)) {
                LOG_ERROR("%s: tensor %s is in weight_map twice", path, nf[i].name);
                rc = TRI_ERR_CKPT;
            }
    }
    m->files = xcalloc((size_t)n_files + 1, sizeof *m->files);
    for (int f = 0; f < n_files; f++) m->files[f].fd = -1;
    for (int f = 0; f < n_files && rc == TRI_OK; f++) {
        snprintf(path, sizeof path, "%s/%s", m->dir, files[f]);
        rc = st_open(&m->files[f], path);
        m->n_files = f + 1;
    }
    m->names = xcalloc(k + 1, sizeof *m->names);
    m->file_of = xcalloc(k + 1, sizeof *m->file_of);
    for (size_t i = 0; i < k; i++) {
        m->names[i] = nf[i].name, m->file_of[i] = nf[i].file;
        m->n_names++;
    }
    // Every listed tensor is in its shard: a missing one is named now, not mid-load.
    for (int i = 0; i < m->n_names && rc == TRI_OK; i++)
        if (!st_find(&m->files[m->file_of[i]], m->names[i])) {
            LOG_ERROR("%s: tensor %s is listed in %s but not in the file",
                      m->files[m->file_of[i]].path, m->names[i], INDEX_NAME);
            LOG_HINT("the shards and the index are from different saves; write the model again");
            rc = TRI_ERR_CKPT;
        }
    for (int f = 0; f < n_files; f++) free(files[f]);
    free(files);
    free(nf);
    return rc;
}

tri_status st_model_open(st_model *m, const char *dir) {
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    tri_status rc;
    if (is_file(dir, SINGLE_NAME)) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, SINGLE_NAME);
        m->files = xcalloc(1, sizeof *m->files);
        rc = st_open(&m->files[0], path);
        m->n_files = 1;
    } else if (is_file(dir, INDEX_NAME)) {
        rc = open_index(m);
    } else {
        LOG_ERROR("%s: holds neither %s nor %s", dir, SINGLE_NAME, INDEX_NAME);
        LOG_HINT("model.init_from names a Hugging Face model directory (save_pretrained's)");
        rc = TRI_ERR_CKPT;
    }
    if (rc != TRI_OK) st_model_close(m);
    return rc;
}

void st_model_close(st_model *m) {
    for (int f = 0; f < m->n_files; f++) st_close(&m->files[f]);
    for (int i = 0; i < m->n_names; i++) free(m->names[i]);
    free(m->files);
    free(m->names);
    free(m->file_of);
    memset(m, 0, sizeof *m);
}

const st_tensor *st_model_find(const st_model *m, const char *name, const st_file **file) {
    int f = 0;
    if (m->n_names) {
        char *const *hit = bsearch(&name, m->names, (size_t)m->n_names, sizeof *m->names, cmp_str);
        if (!hit) return NULL;
        f = m->file_of[hit - m->names];
    }
    if (f >= m->n_files) return NULL;
    *file = &m->files[f];
    return st_find(&m->files[f], name);
}

// ---- writing ----

static tri_status write_failed(st_writer *w) {
    LOG_ERROR("cannot write %s: %s", w->tmp, strerror(errno));
    LOG_HINT("check free space and permissions where --out points");
    return TRI_ERR_CKPT;
}

uint64_t st_out_bytes(const st_out_tensor *t) {
    return (uint64_t)t->shape[0] * (uint64_t)(t->shape[1] ? t->shape[1] : 1) * 4;
}

tri_status st_writer_open(st_writer *w, const char *path, const st_out_tensor *t, int n) {
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    size_t cap = 64 + (size_t)n * 200, len = 0;
    char *h = xmalloc(cap);
    len += (size_t)snprintf(h, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t b = st_out_bytes(&t[i]);
        char shape[64];
        if (t[i].shape[1])
            snprintf(shape, sizeof shape, "%lld,%lld", (long long)t[i].shape[0],
                     (long long)t[i].shape[1]);
        else snprintf(shape, sizeof shape, "%lld", (long long)t[i].shape[0]);
        TRI_ASSERT(strlen(t[i].name) < 120);
        len += (size_t)snprintf(h + len, cap - len,
                                ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":"
                                "[%llu,%llu]}",
                                t[i].name, shape, (unsigned long long)off,
                                (unsigned long long)(off + b));
        off += b;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' '; // the data starts 8-byte aligned
    TRI_ASSERT(len < cap);
    w->expected = off;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)len >> (8 * i));
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    tri_status rc = TRI_OK;
    if (w->fd < 0 || tri_write_all(w->fd, len8, 8) || tri_write_all(w->fd, h, len)) {
        rc = write_failed(w);
        st_writer_close(w, 0);
    }
    free(h);
    return rc;
}

tri_status st_writer_put(st_writer *w, const float *v, size_t n) {
    TRI_ASSERT(w->fd >= 0 && w->written + n * 4 <= w->expected);
    if (tri_write_all(w->fd, v, n * 4)) return write_failed(w);
    w->written += n * 4;
    return TRI_OK;
}

tri_status st_writer_close(st_writer *w, int commit) {
    tri_status rc = TRI_OK;
    if (commit) {
        TRI_ASSERT(w->written == w->expected);
        if (fsync(w->fd) != 0) rc = write_failed(w);
    }
    if (w->fd >= 0 && close(w->fd) != 0 && commit && rc == TRI_OK) rc = write_failed(w);
    w->fd = -1;
    if (commit && rc == TRI_OK && rename(w->tmp, w->path) != 0) rc = write_failed(w);
    if (!commit || rc != TRI_OK) unlink(w->tmp);
    return rc;
}
