// model_init.c: see model_init.h.
#include "io/model_init.h"

#include <string.h>

tri_status model_init_open(model_init *mi, const run_config *cfg, const param_table *pt) {
    memset(mi, 0, sizeof *mi);
    mi->cfg = cfg, mi->pt = pt;
    mi->file.fd = -1;
    if (!cfg->model.init_from) return TRI_OK;
    if (hf_is_model_dir(cfg->model.init_from)) { // config.json already applied (hf_config.h)
        tri_status rc = hf_config_read(&mi->hf_cfg, cfg->model.init_from);
        if (rc == TRI_OK) rc = st_model_open(&mi->hf_model, cfg->model.init_from);
        mi->hf = rc == TRI_OK;
        return rc;
    }
    if (model_arch_is_llama(&cfg->model)) { // an llm.c file holds GPT-2's tensors
        LOG_ERROR("model.init_from: %s: model.arch is llama, and an llm.c "
                  "model file holds a GPT-2 model only",
                  cfg->model.init_from);
        LOG_HINT("give a Hugging Face directory (config.json + model.safetensors), start the llama "
                 "from its initialisation (model.init_from: null), or resume it from a llama "
                 "checkpoint (checkpoint.resume)");
        return TRI_ERR_CONFIG;
    }
    // Every rank says what it finds (with its prefix): a rank whose node sees another file,
    // or none, may be the only one that fails.
    tri_status rc = llmc_open(&mi->file, cfg->model.init_from);
    if (rc == TRI_OK) rc = llmc_check_config(&mi->file, cfg);
    if (rc != TRI_OK) llmc_close(&mi->file);
    return rc;
}

tri_status model_init_entry(void *ctx, int i, float *dst) {
    model_init *mi = ctx;
    if (mi->file.fd >= 0) return llmc_read_entry(&mi->file, mi->pt, i, dst);
    if (mi->hf) return hf_read_entry(&mi->hf_model, &mi->hf_cfg, mi->pt, i, dst);
    // params_init_host's values for one entry.
    const param_table *pt = mi->pt;
    const param_entry *e = &pt->entries[i];
    const uint64_t seed = mi->cfg->run.seed;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < e->local_rows; r++)
        for (int64_t c = 0; c < e->local_cols; c++)
            dst[r * e->local_cols + c] = params_init_value(seed, e,
                                                           params_global_index(pt, e, r, c));
    return TRI_OK;
}

void model_init_close(model_init *mi) {
    llmc_close(&mi->file);
    if (mi->hf) st_model_close(&mi->hf_model);
    mi->hf = 0;
}

tri_status model_init_agree(comm *cm, tri_status rc) {
    if (!cm || cm->world_size == 1) return rc;
    double worst = (double)rc;
    TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_WORLD, &worst, 1, DTYPE_FP64, COMM_REDUCE_MAX));
    return (tri_status)(int)worst;
}
