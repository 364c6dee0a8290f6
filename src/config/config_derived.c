// config_derived.c: quantities derived from the keys (config.h's config_micro_batches and
// config_padded_vocab); what the modules take is in config_layout.c.
#include "config/config.h"

int config_micro_batches(const run_config *cfg) {
    TRI_ASSERT(cfg->parallel.dp >= 1); // resolved by config_resolve_world
    // In 64 bits: micro_batch * dp divides global_batch once resolved, but is a product of
    // two keys.
    return (int)(cfg->train.global_batch / ((int64_t)cfg->train.micro_batch * cfg->parallel.dp));
}

int config_padded_vocab(const run_config *cfg) {
    return model_padded_vocab(&cfg->model, cfg->parallel.tp);
}
