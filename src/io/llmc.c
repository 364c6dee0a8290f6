// llmc.c: llm.c model files. The file groups each kind of tensor over all layers
// (ln1w (L, C), qkvw (L, 3C, C), ...), the parameter table has one entry per layer and
// kind; the mapping between the two is llmc_offset().
#include "io/llmc.h"

#include <errno.h>
#include <string.h>

#include "base/bf16.h"

// The file's tensors in order, as the per-layer kinds of params.h (or -1 for wte, wpe,
// lnfw, lnfb which are not per layer).
static const int llmc_kinds[] = {PARAM_LN1W,     PARAM_LN1B,     PARAM_QKVW,    PARAM_QKVB,
                                 PARAM_ATTPROJW, PARAM_ATTPROJB, PARAM_LN2W,    PARAM_LN2B,
                                 PARAM_FCW,      PARAM_FCB,      PARAM_FCPROJW, PARAM_FCPROJB};

static size_t kind_numel(int kind, size_t C) {
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

static size_t file_numel(int maxT, int L, int C, int Vp) {
    size_t n = (size_t)Vp * C + (size_t)maxT * C + 2 * (size_t)C;
    for (size_t k = 0; k < PARAM_PER_LAYER; k++) n += (size_t)L * kind_numel(llmc_kinds[k], C);
    return n;
}

// Offset (elements) in the file of table entry e: the same tensor for one layer.
static size_t llmc_offset(const param_entry *e, int maxT, int L, int C, int Vp) {
    static const char *suffixes[PARAM_PER_LAYER] = {"ln1w",     "ln1b",     "qkvw",    "qkvb",
                                                    "attprojw", "attprojb", "ln2w",    "ln2b",
                                                    "fcw",      "fcb",      "fcprojw", "fcprojb"};
    if (!strcmp(e->name, "wte")) return 0;
    size_t off = (size_t)Vp * C;
    if (!strcmp(e->name, "wpe")) return off;
    off += (size_t)maxT * C;
    const char *suffix = e->layer >= 0 ? strchr(e->name, '.') + 1 : NULL;
    for (int k = 0; k < PARAM_PER_LAYER; k++) {
        size_t n = kind_numel(llmc_kinds[k], C);
        if (suffix && !strcmp(suffix, suffixes[k])) return off + (size_t)e->layer * n;
        off += (size_t)L * n;
    }
    if (!strcmp(e->name, "lnfw")) return off;
    TRI_ASSERT(!strcmp(e->name, "lnfb"));
    return off + (size_t)C;
}

tri_status llmc_read(const char *path, llmc_model *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        LOG_ERROR("cannot open model file %s: %s", path, strerror(errno));
        LOG_HINT("model.init_from and `trident sample/export` take an llm.c model file "
                 "(or a run directory containing model.bin)");
        return TRI_ERR_CKPT;
    }
    int32_t h[256];
    tri_status rc = TRI_ERR_CKPT;
    if (fread(h, sizeof(int32_t), 256, f) != 256) {
        LOG_ERROR("%s: shorter than the 1024-byte llm.c header", path);
        goto done;
    }
    if (h[0] != LLMC_MAGIC || (h[1] != LLMC_VERSION_FP32 && h[1] != LLMC_VERSION_BF16)) {
        LOG_ERROR("%s: not an llm.c model file (magic %d version %d; expected %d and 3 or 5)", path,
                  h[0], h[1], LLMC_MAGIC);
        goto done;
    }
    out->version = h[1];
    out->maxT = h[2], out->V = h[3], out->L = h[4], out->NH = h[5], out->C = h[6], out->Vp = h[7];
    if (out->maxT <= 0 || out->V <= 0 || out->L <= 0 || out->NH <= 0 || out->C <= 0 ||
        out->Vp < out->V || out->C % out->NH) {
        LOG_ERROR("%s: inconsistent header (maxT %d V %d L %d NH %d C %d Vp %d)", path, out->maxT,
                  out->V, out->L, out->NH, out->C, out->Vp);
        goto done;
    }
    out->numel = file_numel(out->maxT, out->L, out->C, out->Vp);
    size_t elem = out->version == LLMC_VERSION_FP32 ? 4 : 2;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (size != (long)(1024 + out->numel * elem)) {
        LOG_ERROR("%s: size %ld bytes, but its header implies %zu", path, size,
                  1024 + out->numel * elem);
        LOG_HINT("the file is truncated or was not written by llm.c / trident export");
        goto done;
    }
    fseek(f, 1024, SEEK_SET);
    out->data = xmalloc(out->numel * sizeof(float));
    if (elem == 4) {
        if (fread(out->data, 4, out->numel, f) != out->numel) goto read_error;
    } else {
        uint16_t *tmp = xmalloc(out->numel * 2);
        size_t got = fread(tmp, 2, out->numel, f);
        for (size_t i = 0; i < got; i++) out->data[i] = bf16_to_f32(tmp[i]);
        free(tmp);
        if (got != out->numel) goto read_error;
    }
    rc = TRI_OK;
    goto done;
read_error:
    LOG_ERROR("%s: read error: %s", path, strerror(errno));
    llmc_free(out);
done:
    fclose(f);
    return rc;
}

void llmc_free(llmc_model *f) {
    free(f->data);
    f->data = NULL;
}

tri_status llmc_check_config(const llmc_model *f, const run_config *cfg, const char *path) {
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
        LOG_ERROR("%s: %s is %d in the model file but %d in the config", path, dims[i].key,
                  dims[i].file, dims[i].config);
        bad = 1;
    }
    if (bad) {
        LOG_HINT("set the model keys to the file's shape (or drop model.init_from)");
        return TRI_ERR_CKPT;
    }
    return TRI_OK;
}

void llmc_config_from_file(const llmc_model *f, run_config *cfg) {
    cfg->model.n_layer = f->L;
    cfg->model.n_head = f->NH;
    cfg->model.d_model = f->C;
    cfg->model.seq_len = f->maxT;
    cfg->model.vocab_size = f->V;
}

void llmc_load_params(const llmc_model *f, const param_table *pt, float *local) {
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        const float *src = f->data + llmc_offset(e, f->maxT, f->L, f->C, f->Vp);
        if (e->split == SPLIT_VOCAB) {
            // Our padded vocabulary may differ from the file's: build the global tensor
            // with the real rows and zero padding, then take this rank's shard.
            float *global = xcalloc((size_t)(e->global_rows * e->global_cols), sizeof(float));
            memcpy(global, src, (size_t)(e->valid_rows * e->global_cols) * sizeof(float));
            params_slice_from_global(pt, e, global, local + e->offset);
            free(global);
        } else {
            params_slice_from_global(pt, e, src, local + e->offset);
        }
    }
}

void llmc_from_params(llmc_model *out, const param_table *pt, const float *global, int maxT, int V,
                      int NH) {
    TRI_ASSERT(pt->tp == 1);
    const param_entry *wte = &pt->entries[params_wte(pt)];
    const int C = (int)wte->global_cols, Vp = (int)wte->global_rows, L = pt->n_layer;
    *out = (llmc_model){.version = LLMC_VERSION_FP32,
                        .maxT = maxT,
                        .V = V,
                        .L = L,
                        .NH = NH,
                        .C = C,
                        .Vp = Vp,
                        .numel = file_numel(maxT, L, C, Vp)};
    out->data = xcalloc(out->numel, sizeof(float));
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        memcpy(out->data + llmc_offset(e, maxT, L, C, Vp), global + e->offset,
               (size_t)e->local_numel * sizeof(float));
    }
}

tri_status llmc_write(const char *path, const param_table *pt, const float *global, int maxT, int V,
                      int NH) {
    llmc_model m;
    llmc_from_params(&m, pt, global, maxT, V, NH);
    const size_t numel = m.numel;
    const float *data = m.data;
    const int L = m.L, C = m.C, Vp = m.Vp;
    int32_t h[256] = {LLMC_MAGIC, LLMC_VERSION_FP32, maxT, V, L, NH, C, Vp};
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    tri_status rc = TRI_OK;
    if (!f || fwrite(h, 4, 256, f) != 256 || fwrite(data, 4, numel, f) != numel || fflush(f) != 0) {
        LOG_ERROR("cannot write model file %s: %s", tmp, strerror(errno));
        rc = TRI_ERR_CKPT;
    }
    if (f && fclose(f) != 0 && rc == TRI_OK) {
        LOG_ERROR("cannot write model file %s: %s", tmp, strerror(errno));
        rc = TRI_ERR_CKPT;
    }
    if (rc == TRI_OK && rename(tmp, path) != 0) {
        LOG_ERROR("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        rc = TRI_ERR_CKPT;
    }
    if (rc != TRI_OK) remove(tmp);
    llmc_free(&m);
    return rc;
}
