// model_init.h: where a run's initial parameters come from: model.init_from (an llm.c model
// file, of which each rank reads its own shard) or, without it, run.seed (params.h's
// counter-based initialisation, a pure function of the seed and each element's global index).
#pragma once
#include "config/config.h"
#include "model/params.h"

// Fills `host` (pt->local_numel floats, table layout) with the initial parameters of the
// shard `pt` describes. A model file that does not fit the config is TRI_ERR_CKPT, named.
tri_status model_init_params(const run_config *cfg, const param_table *pt, float *host);
