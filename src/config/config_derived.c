// config_derived.c: quantities derived from the keys (config.h's config_micro_batches,
// config_padded_vocab and config_resolve_model); what the modules take is in config_layout.c.
#include "config/config.h"

#include <limits.h>

int config_micro_batches(const run_config *cfg) {
    TRI_ASSERT(cfg->parallel.dp >= 1); // resolved by config_resolve_world
    // In 64 bits: micro_batch * dp divides global_batch once resolved, but is a product of
    // two keys.
    return (int)(cfg->train.global_batch / ((int64_t)cfg->train.micro_batch * cfg->parallel.dp));
}

int config_padded_vocab(const run_config *cfg) {
    return model_padded_vocab(&cfg->model, cfg->parallel.tp);
}

void config_resolve_model(model_config *mc) {
    const int llama = model_arch_is_llama(mc);
    if (mc->n_kv_head == 0) mc->n_kv_head = mc->n_head;
    if (mc->ffn_hidden == 0 && mc->d_model >= 1 && mc->ffn_multiple_of >= 1) {
        const long long f = llama ? model_llama_ffn_rule(mc->d_model, mc->ffn_multiple_of)
                                  : 4LL * mc->d_model;
        mc->ffn_hidden = f <= INT_MAX && f > 0 ? (int)f : 0;
    }
    if (mc->tie_embeddings < 0) mc->tie_embeddings = !llama;
}
