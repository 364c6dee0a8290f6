// export.c: model files out of a run, in llm.c and safetensors formats.
#include "io/export.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint.h"
#include "config/config.h"
#include "model/params.h"

tri_status export_load(const char *run_or_file, llmc_model *out, char *path_out, size_t path_n) {
    struct stat st;
    if (ckpt_is_checkpoint(run_or_file, path_out, path_n)) { // any layout's checkpoint
        run_config cfg;
        config_defaults(&cfg);
        param_table full;
        float *global;
        tri_status rc = ckpt_read_model(path_out, &cfg, &full, &global);
        if (rc == TRI_OK) {
            llmc_from_params(out, &full, global, cfg.model.seq_len, cfg.model.vocab_size,
                             cfg.model.n_head);
            free(global);
            params_free(&full);
        }
        config_free(&cfg);
        return rc;
    }
    if (stat(run_or_file, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path_out, path_n, "%s/model.bin", run_or_file);
    else snprintf(path_out, path_n, "%s", run_or_file);
    return llmc_read(path_out, out);
}

// The tp = 1 parameter table of the file's model and its full parameters.
static float *global_params(const llmc_model *f, param_table *pt) {
    run_config cfg;
    config_defaults(&cfg);
    llmc_config_from_file(f, &cfg);
    cfg.model.vocab_pad_to = f->Vp; // keep the file's padding exactly
    params_build_full(pt, &cfg.model, 1);
    float *global = xmalloc(pt->local_numel * sizeof(float));
    llmc_load_params(f, pt, global);
    config_free(&cfg);
    return global;
}

tri_status export_llmc(const llmc_model *f, const char *out_path) {
    param_table pt;
    float *global = global_params(f, &pt);
    tri_status rc = llmc_write(out_path, &pt, global, f->maxT, f->V, f->NH);
    free(global);
    params_free(&pt);
    return rc;
}

typedef struct {
    char name[64];
    int64_t rows, cols; // shape (cols == 0: 1-d)
    const float *src;   // our (out, in) tensor
    int transpose;      // HF Conv1D stores (in, out)
} st_tensor;

tri_status export_safetensors(const llmc_model *f, const char *out_path) {
    param_table pt;
    float *global = global_params(f, &pt);
    const int L = f->L;
    const int n = 2 + L * PARAM_PER_LAYER + 2;
    st_tensor *ts = xcalloc((size_t)n, sizeof *ts);
    // HF GPT-2 per-layer names, in our per-layer order (PARAM_LN1W..PARAM_FCPROJB).
    static const char *hf[PARAM_PER_LAYER] = {
        "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
        "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    int k = 0;
    for (int i = 0; i < pt.n_entries; i++) {
        const param_entry *e = &pt.entries[i];
        st_tensor *t = &ts[k++];
        t->src = global + e->offset;
        t->rows = e->global_rows;
        t->cols = e->ndim == 2 ? e->global_cols : 0;
        if (i == params_wte(&pt)) {
            snprintf(t->name, sizeof t->name, "transformer.wte.weight");
            t->rows = f->V; // HF's embedding has the real vocabulary only
        } else if (i == params_wpe(&pt)) {
            snprintf(t->name, sizeof t->name, "transformer.wpe.weight");
        } else if (i == params_lnfw(&pt)) {
            snprintf(t->name, sizeof t->name, "transformer.ln_f.weight");
        } else if (i == params_lnfb(&pt)) {
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
        const st_tensor *t = &ts[i];
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

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE *out = fopen(tmp, "wb");
    tri_status rc = TRI_OK;
    uint64_t hlen = len;
    if (!out || fwrite(&hlen, 8, 1, out) != 1 || fwrite(header, 1, len, out) != len) goto io_error;
    for (int i = 0; i < k; i++) {
        const st_tensor *t = &ts[i];
        if (!t->transpose) {
            size_t count = (size_t)t->rows * (size_t)(t->cols ? t->cols : 1);
            if (fwrite(t->src, 4, count, out) != count) goto io_error;
            continue;
        }
        float *row = xmalloc((size_t)t->rows * 4);
        for (int64_t c = 0; c < t->cols; c++) { // (out, in) -> (in, out)
            for (int64_t r = 0; r < t->rows; r++) row[r] = t->src[r * t->cols + c];
            if (fwrite(row, 4, (size_t)t->rows, out) != (size_t)t->rows) {
                free(row);
                goto io_error;
            }
        }
        free(row);
    }
    if (fclose(out) != 0) {
        out = NULL;
        goto io_error;
    }
    out = NULL;
    if (rename(tmp, out_path) != 0) goto io_error;
    goto done;
io_error:
    LOG_ERROR("cannot write %s: %s", out_path, strerror(errno));
    if (out) fclose(out);
    remove(tmp);
    rc = TRI_ERR_CKPT;
done:
    free(header);
    free(ts);
    free(global);
    params_free(&pt);
    return rc;
}
