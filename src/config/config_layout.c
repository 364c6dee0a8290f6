// config_layout.c: see config_layout.h.
#include "config/config_layout.h"

#include "parallel/optim.h"
#include "parallel/sched.h"

mesh config_mesh(const run_config *cfg) {
    TRI_ASSERT(cfg->parallel.dp >= 1); // resolved
    return (mesh){.tp = cfg->parallel.tp, .dp = cfg->parallel.dp, .pp = cfg->parallel.pp};
}

model_shard config_model_shard(const run_config *cfg, int tp_rank, int pp_rank) {
    return (model_shard){.tp = cfg->parallel.tp,
                         .tp_rank = tp_rank,
                         .pp = cfg->parallel.pp,
                         .pp_rank = pp_rank,
                         .virtual_stages = cfg->parallel.virtual_stages,
                         .vplace = cfg->parallel.schedule == SCHEDULE_ZBV};
}

// The W-buffers of a zero-bubble schedule's pipeline rank (sched_max_w_pending); 0 for the
// others, whose backward is not split (and before dp is resolved, which no run reaches).
static int wbufs_of(const run_config *cfg, int pp_rank) {
    const schedule_kind s = cfg->parallel.schedule;
    if ((s != SCHEDULE_ZBH1 && s != SCHEDULE_ZBV) || cfg->parallel.dp < 1) return 0;
    return (int)sched_max_w_pending(s, cfg->parallel.pp, cfg->parallel.virtual_stages,
                                    config_micro_batches(cfg), pp_rank);
}

model_layout config_model_layout(const run_config *cfg, int tp_rank, int pp_rank, int n_slots,
                                 backend_traits bt) {
    return (model_layout){.shard = config_model_shard(cfg, tp_rank, pp_rank),
                          .micro_batch = cfg->train.micro_batch,
                          .n_slots = n_slots,
                          .n_wbufs = wbufs_of(cfg, pp_rank),
                          .sequence_parallel = cfg->parallel.sequence_parallel,
                          .recompute = cfg->parallel.recompute,
                          .precision = cfg->train.precision,
                          .grad_dtype = cfg->train.grad_dtype,
                          .attn_state = bt.attn,
                          .bf16_out = bt.bf16_out,
                          .attn_rope = bt.attn_rope};
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

void config_rank_memory_of(const run_config *cfg, const param_table *pt, const zero_layout *zl,
                           int tp_rank, int pp_rank, int dp_rank, int n_slots, backend_traits bt,
                           uint64_t mem[MEM_KIND_COUNT]) {
    mem_specs s = {0};
    const model_layout ml = config_model_layout(cfg, tp_rank, pp_rank, n_slots, bt);
    const zero_config zc = config_zero_config(cfg, dp_rank);
    model_buffers(&s, &cfg->model, &ml, pt, NULL);
    zero_buffers(&s, &zc, zl, pt, NULL);
    optim_buffers(&s, zl, zc.param_dtype, bt.optim_table, NULL);
    mem_specs_totals(&s, mem);
    mem_specs_free(&s);
}

void config_rank_memory(const run_config *cfg, int tp_rank, int pp_rank, int dp_rank, int n_slots,
                        backend_traits bt, uint64_t mem[MEM_KIND_COUNT]) {
    param_table pt;
    zero_layout zl;
    const model_shard sh = config_model_shard(cfg, tp_rank, pp_rank);
    params_build(&pt, &cfg->model, &sh);
    const zero_config zc = config_zero_config(cfg, dp_rank);
    zero_layout_build(&zl, &zc, &pt);
    config_rank_memory_of(cfg, &pt, &zl, tp_rank, pp_rank, dp_rank, n_slots, bt, mem);
    zero_layout_free(&zl);
    params_free(&pt);
}
