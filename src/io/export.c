// export.c: model files out of a run (or a Hugging Face model directory), in llm.c and
// safetensors formats, one tensor at a time.
#include "io/export.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "io/run_record.h"
#include "model/params.h"

// Whether `path` is a file, or a run directory holding model.bin (what llmc_open then reads).
static int run_model_bin(const char *path, char *buf, size_t n) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 1;
    snprintf(buf, n, "%s/model.bin", path);
    return stat(buf, &st) == 0;
}

// A Hugging Face model directory as model.init_from reads it: config.json's model keys
// (refused values exit 2, named) over the defaults, checked by every rule of the config as a
// run's would be, and its safetensors opened (their headers checked; no tensor read yet).
static tri_status open_hf(export_source *s, const char *dir) {
    snprintf(s->path, sizeof s->path, "%s", dir);
    TRI_CHECK(hf_config_read(&s->hf_cfg, dir));
    const hf_config *h = &s->hf_cfg;
    char sets[HF_SETS_MAX + 1][96];
    int n = hf_config_sets(h, sets, HF_SETS_MAX);
    const int window = h->llama && h->max_pos > EXPORT_HF_WINDOW ? EXPORT_HF_WINDOW : h->max_pos;
    snprintf(sets[n++], 96, "model.seq_len=%d", window);
    char *argv[HF_SETS_MAX + 1];
    for (int i = 0; i < n; i++) argv[i] = sets[i];
    // No YAML: the keys are the defaults and config.json's, checked by config_load's rules,
    // whose messages name DIR/config.json and the key.
    char source[4200];
    snprintf(source, sizeof source, "%s/config.json", dir);
    if (config_load_sets(&s->cfg, source, n, argv) != TRI_OK) {
        config_defaults(&s->cfg); // config_load_sets freed it; export_open frees it again
        LOG_HINT("start from another model, or change that key in a copy of the directory's "
                 "config.json and weights");
        return TRI_ERR_CONFIG;
    }
    free(s->cfg.source_path); // not a YAML file the user gave
    s->cfg.source_path = NULL;
    char tok[4200];
    struct stat st;
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    if (stat(tok, &st) == 0) s->cfg.data.tokenizer = xstrdup(tok);
    TRI_CHECK(st_model_open(&s->hf_model, dir));
    s->hf = 1;
    params_build_full(&s->full, &s->cfg.model, 1);
    return TRI_OK;
}

tri_status export_open(export_source *s, const char *run_or_file) {
    memset(s, 0, sizeof *s);
    s->lf.fd = -1;
    config_defaults(&s->cfg);
    tri_status rc;
    struct stat st;
    char ck[4096];
    if (ckpt_is_checkpoint(run_or_file, s->path, sizeof s->path)) { // any layout's checkpoint
        rc = ckpt_model_open(s->path, &s->cfg, &s->full, &s->ckr);
    } else if (hf_is_model_dir(run_or_file)) {
        rc = open_hf(s, run_or_file);
    } else if (!run_model_bin(run_or_file, s->path, sizeof s->path) &&
               run_record_config_string(run_or_file, "checkpoint", "dir", ck, sizeof ck) &&
               ckpt_is_checkpoint(ck, s->path, sizeof s->path)) {
        // A run without model.bin (a llama; a model past llm.c's size): its final checkpoint.
        LOG_INFO("%s has no model.bin: reading its checkpoint %s", run_or_file, s->path);
        rc = ckpt_model_open(s->path, &s->cfg, &s->full, &s->ckr);
    } else {
        if (stat(run_or_file, &st) == 0 && S_ISDIR(st.st_mode))
            snprintf(s->path, sizeof s->path, "%s/model.bin", run_or_file);
        else snprintf(s->path, sizeof s->path, "%s", run_or_file);
        rc = llmc_open(&s->lf, s->path);
        if (rc == TRI_OK) {
            llmc_config_from_file(&s->lf, &s->cfg); // its padding: the table is the file's
            params_build_full(&s->full, &s->cfg.model, 1);
        }
    }
    if (rc != TRI_OK) export_close(s);
    return rc;
}

// The first non-finite value of a checkpoint's tensor, named (an llm.c file's reader checks
// its own as it converts them).
static tri_status check_finite(const export_source *s, const param_entry *e, const float *v) {
    for (int64_t k = 0; k < e->local_numel; k++) {
        if (isfinite(v[k])) continue;
        LOG_ERROR("checkpoint %s: tensor %s holds a non-finite value (%s) at row %lld, column "
                  "%lld (element %lld of its %lld x %lld values)",
                  s->path, e->name,
                  isnan(v[k]) ? "nan"
                  : v[k] > 0  ? "inf"
                              : "-inf",
                  (long long)(k / e->global_cols), (long long)(k % e->global_cols), (long long)k,
                  (long long)e->global_rows, (long long)e->global_cols);
        LOG_HINT("the run diverged before this checkpoint; use an earlier one");
        return TRI_ERR_CKPT;
    }
    return TRI_OK;
}

tri_status export_read_entry(export_source *s, int i, float *dst) {
    if (s->ckr) {
        TRI_CHECK(ckpt_model_read(s->ckr, i, dst));
        return check_finite(s, &s->full.entries[i], dst);
    }
    // st_read_block refuses a non-finite value itself, naming the file, tensor and element.
    if (s->hf) return hf_read_entry(&s->hf_model, &s->hf_cfg, &s->full, i, dst);
    return llmc_read_entry(&s->lf, &s->full, i, dst);
}

void export_close(export_source *s) {
    ckpt_model_close(s->ckr);
    llmc_close(&s->lf);
    if (s->hf) st_model_close(&s->hf_model);
    params_free(&s->full);
    config_free(&s->cfg);
    memset(s, 0, sizeof *s);
    s->lf.fd = -1;
}

// A buffer for the largest entry of the table: what a conversion holds.
static float *entry_buffer(const param_table *pt) {
    int64_t most = 1;
    for (int i = 0; i < pt->n_entries; i++)
        most = pt->entries[i].local_numel > most ? pt->entries[i].local_numel : most;
    return xmalloc((size_t)most * sizeof(float));
}

tri_status export_llmc(export_source *s, const char *out_path) {
    const model_config *mc = &s->cfg.model;
    llmc_writer w;
    TRI_CHECK(llmc_writer_open(&w, out_path, &s->full, mc->seq_len, mc->vocab_size, mc->n_head));
    float *buf = entry_buffer(&s->full);
    tri_status rc = TRI_OK;
    for (int i = 0; i < s->full.n_entries && rc == TRI_OK; i++) {
        const param_entry *e = &s->full.entries[i];
        rc = export_read_entry(s, i, buf);
        if (rc == TRI_OK) rc = llmc_writer_put(&w, e, 0, buf, (size_t)e->local_numel);
    }
    free(buf);
    tri_status closed = llmc_writer_close(&w, rc == TRI_OK);
    return rc != TRI_OK ? rc : closed;
}

typedef struct {
    char name[64];
    int64_t rows, cols; // shape (cols == 0: 1-d)
    int entry;          // our (out, in) tensor
    int transpose;      // HF Conv1D stores (in, out)
} gpt2_tensor;

tri_status export_safetensors(export_source *s, const char *out_path) {
    const param_table *pt = &s->full;
    const int V = s->cfg.model.vocab_size;
    gpt2_tensor *ts = xcalloc((size_t)pt->n_entries, sizeof *ts);
    // HF GPT-2 per-layer names, in our per-layer order (PARAM_LN1W..PARAM_FCPROJB).
    static const char *hf[PARAM_PER_LAYER] = {
        "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
        "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    const int k = pt->n_entries;
    int64_t most_rows = 1; // of a transposed tensor: one of its columns, written as a row
    for (int i = 0; i < k; i++) {
        const param_entry *e = &pt->entries[i];
        gpt2_tensor *t = &ts[i];
        most_rows = e->global_rows > most_rows ? e->global_rows : most_rows;
        t->entry = i;
        t->rows = e->global_rows;
        t->cols = e->ndim == 2 ? e->global_cols : 0;
        if (i == params_wte(pt)) {
            snprintf(t->name, sizeof t->name, "transformer.wte.weight");
            t->rows = V; // HF's embedding has the real vocabulary only
        } else if (i == params_wpe(pt)) {
            snprintf(t->name, sizeof t->name, "transformer.wpe.weight");
        } else if (i == params_lnfw(pt)) {
            snprintf(t->name, sizeof t->name, "transformer.ln_f.weight");
        } else if (i == params_lnfb(pt)) {
            snprintf(t->name, sizeof t->name, "transformer.ln_f.bias");
        } else {
            int which = (i - 2) % PARAM_PER_LAYER;
            snprintf(t->name, sizeof t->name, "transformer.h.%d.%s", e->layer, hf[which]);
            t->transpose = e->ndim == 2;
        }
    }
    // Header: JSON of name -> dtype, shape, [begin, end) byte offsets into the data.
    size_t cap = 256 + (size_t)k * 160, len = 0, offset = 0;
    char *header = xmalloc(cap);
    len += (size_t)snprintf(header + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < k; i++) {
        const gpt2_tensor *t = &ts[i];
        size_t bytes = (size_t)t->rows * (size_t)(t->cols ? t->cols : 1) * 4;
        if (t->cols)
            len += (size_t)snprintf(header + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                                    "\"data_offsets\":[%zu,%zu]}",
                                    t->name, (long long)(t->transpose ? t->cols : t->rows),
                                    (long long)(t->transpose ? t->rows : t->cols), offset,
                                    offset + bytes);
        else
            len += (size_t)snprintf(header + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],"
                                    "\"data_offsets\":[%zu,%zu]}",
                                    t->name, (long long)t->rows, offset, offset + bytes);
        offset += bytes;
    }
    len += (size_t)snprintf(header + len, cap - len, "}");
    while (len % 8) header[len++] = ' '; // the data starts 8-byte aligned
    TRI_ASSERT(len < cap);

    char tmp[4112];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    float *buf = entry_buffer(pt), *row = NULL;
    tri_status rc = TRI_OK;
    uint64_t hlen = len;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || tri_write_all(fd, &hlen, 8) || tri_write_all(fd, header, len)) goto io_error;
    for (int i = 0; i < k; i++) {
        const gpt2_tensor *t = &ts[i];
        TRI_CHECK_GOTO(export_read_entry(s, t->entry, buf), rc, done);
        if (!t->transpose) {
            size_t count = (size_t)t->rows * (size_t)(t->cols ? t->cols : 1);
            if (tri_write_all(fd, buf, count * 4)) goto io_error;
            continue;
        }
        if (!row) row = xmalloc((size_t)most_rows * sizeof(float));
        for (int64_t c = 0; c < t->cols; c++) { // (out, in) -> (in, out)
            for (int64_t r = 0; r < t->rows; r++) row[r] = buf[r * t->cols + c];
            if (tri_write_all(fd, row, (size_t)t->rows * 4)) goto io_error;
        }
    }
    if (fsync(fd) != 0) goto io_error;
    if (close(fd) != 0) {
        fd = -1;
        goto io_error;
    }
    fd = -1;
    if (rename(tmp, out_path) != 0) goto io_error;
    goto done;
io_error:
    LOG_ERROR("cannot write %s: %s", out_path, strerror(errno));
    LOG_HINT("check free space and permissions where --out points");
    rc = TRI_ERR_CKPT;
done:
    if (fd >= 0) close(fd);
    if (rc != TRI_OK) unlink(tmp);
    free(row);
    free(buf);
    free(header);
    free(ts);
    return rc;
}

tri_status export_run(const char *run_or_file, const char *format, const char *out_path,
                      uint64_t max_shard_bytes) {
    export_source s;
    TRI_CHECK(export_open(&s, run_or_file));
    if (model_arch_is_llama(&s.cfg.model) && strcmp(format, "hf")) { // GPT-2's tensors only
        LOG_ERROR("export %s: the %s holds a llama model (model.arch llama), and the %s format "
                  "holds GPT-2 models only",
                  s.path, s.hf ? "directory" : "checkpoint", format);
        LOG_HINT("export it with --format hf (a LlamaForCausalLM directory); a llama checkpoint "
                 "is also read as it is by `trident sample` and by a resumed run");
        export_close(&s);
        return TRI_ERR_CKPT;
    }
    struct stat a, b;
    if (s.hf && !strcmp(format, "hf") && stat(out_path, &b) == 0 && stat(s.path, &a) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) { // its files would replace themselves
        LOG_ERROR("export %s: --out %s is the source directory", s.path, out_path);
        LOG_HINT("write the export to another directory");
        export_close(&s);
        return TRI_ERR_CONFIG;
    }
    tri_status rc = !strcmp(format, "llmc") ? export_llmc(&s, out_path)
                    : !strcmp(format, "hf") ? export_hf(&s, run_or_file, out_path, max_shard_bytes)
                                            : export_safetensors(&s, out_path);
    if (rc == TRI_OK) printf("exported %s to %s (%s)\n", s.path, out_path, format);
    export_close(&s);
    return rc;
}
