// config_derived.c: quantities derived from the keys (config.h's config_micro_batches and
// config_padded_vocab; config_derived_internal.h).
#include "config/config_derived_internal.h"

long long config_padded_vocab_ll(int vocab_size, int vocab_pad_to, int tp) {
    long long mult = (long long)vocab_pad_to * tp;
    return (vocab_size + mult - 1) / mult * mult;
}

int config_micro_batches(const run_config *cfg) {
    TRI_ASSERT(cfg->parallel.dp >= 1); // resolved by config_resolve_world
    return cfg->train.global_batch / (cfg->train.micro_batch * cfg->parallel.dp);
}

int config_padded_vocab(const run_config *cfg) {
    return (int)config_padded_vocab_ll(cfg->model.vocab_size, cfg->model.vocab_pad_to,
                                       cfg->parallel.tp);
}
