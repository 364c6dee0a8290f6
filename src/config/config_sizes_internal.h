// config_sizes_internal.h: the sizes a config implies, in checked 64-bit arithmetic, against
// what the code's ints hold and what one rank could hold (config.h's CONFIG_RANK_BYTES_MAX
// and CONFIG_RANK_ENTRIES_MAX). Private to src/config: other modules use config.h.
//
// Two parts, so that nothing proportional to the model is built before its size is known:
//   at load (config_check_sizes, closed forms only): the rows of a micro-batch and the MLP
//     width (ints of the model's ops), the parameters and table entries of each pipeline
//     stage (params_size_of), the tokens of the whole run;
//   with the world (config_check_rank_memory): the schedule's pairs, then the buffers of
//     the first, second and last pipeline rank, summed from the same specs the trainer
//     carves (config_rank_memory, with sched_max_in_flight slots).
#pragma once
#include "config/config_diag_internal.h"

// Reports every size rule broken by the keys alone; skips rules whose keys are already bad.
void config_check_sizes(config_ctx *c, const run_config *cfg);
// Reports the size rules of the layout with `dp` replicas (the keys passed the rest).
void config_check_rank_memory(config_ctx *c, const run_config *cfg, int dp);
