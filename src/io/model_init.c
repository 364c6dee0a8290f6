// model_init.c: see model_init.h.
#include "io/model_init.h"

#include "io/llmc.h"

tri_status model_init_params(const run_config *cfg, const param_table *pt, float *host) {
    if (!cfg->model.init_from) {
        params_init_host(pt, cfg->run.seed, host);
        return TRI_OK;
    }
    llmc_model f;
    tri_status rc = llmc_read(cfg->model.init_from, &f);
    if (rc == TRI_OK) rc = llmc_check_config(&f, cfg, cfg->model.init_from);
    if (rc == TRI_OK) llmc_load_params(&f, pt, host);
    llmc_free(&f);
    return rc;
}
