// config_layout.c: see config_layout.h.
#include "config/config_layout.h"

mesh config_mesh(const run_config *cfg) {
    TRI_ASSERT(cfg->parallel.dp >= 1); // resolved
    return (mesh){.tp = cfg->parallel.tp, .dp = cfg->parallel.dp, .pp = cfg->parallel.pp};
}

model_shard config_model_shard(const run_config *cfg, int tp_rank, int pp_rank) {
    return (model_shard){.tp = cfg->parallel.tp,
                         .tp_rank = tp_rank,
                         .pp = cfg->parallel.pp,
                         .pp_rank = pp_rank,
                         .virtual_stages = cfg->parallel.virtual_stages};
}

model_layout config_model_layout(const run_config *cfg, int tp_rank, int pp_rank, int n_slots,
                                 attn_state_kind attn) {
    return (model_layout){.shard = config_model_shard(cfg, tp_rank, pp_rank),
                          .micro_batch = cfg->train.micro_batch,
                          .n_slots = n_slots,
                          .sequence_parallel = cfg->parallel.sequence_parallel,
                          .recompute = cfg->parallel.recompute,
                          .precision = cfg->train.precision,
                          .grad_dtype = cfg->train.grad_dtype,
                          .attn_state = attn};
}

zero_config config_zero_config(const run_config *cfg, int dp_rank) {
    TRI_ASSERT(cfg->parallel.dp >= 1); // resolved
    return (zero_config){.stage = cfg->parallel.zero,
                         .dp = cfg->parallel.dp,
                         .dp_rank = dp_rank,
                         .bucket_mb = cfg->parallel.bucket_mb,
                         .gather = cfg->parallel.zero3_gather,
                         .overlap = cfg->parallel.overlap,
                         .param_dtype = cfg->train.precision,
                         .grad_dtype = cfg->train.grad_dtype,
                         .reduce_dtype = cfg->train.reduce_dtype};
}
