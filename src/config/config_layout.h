// config_layout.h: what the modules take, derived from a resolved run config (dp resolved by
// config_resolve_world) for one rank: the mesh (comm/mesh.h), the model's shard and layout
// (model.h), the ZeRO layer's config (zero.h), and the sum of the buffer specs those modules
// carve. The trainer, the planner and the config's size rules all build them here, so they
// size and run the same things.
#pragma once
#include "comm/mesh.h"
#include "compute/mempool.h"
#include "config/config.h"

// The mesh of the resolved tp, pp and dp (comm/mesh.h).
mesh config_mesh(const run_config *cfg);
// The part of the model held by the rank at tp coordinate tp_rank on pipeline stage pp_rank.
model_shard config_model_shard(const run_config *cfg, int tp_rank, int pp_rank);
// That rank's model layout with n_slots activation slots (the schedule's in-flight bound)
// and the traits of the backend (or planned device) it runs on.
model_layout config_model_layout(const run_config *cfg, int tp_rank, int pp_rank, int n_slots,
                                 backend_traits bt);
// The ZeRO layer of dp rank dp_rank.
zero_config config_zero_config(const run_config *cfg, int dp_rank);

// The arenas of the rank at (tp_rank, pp_rank, dp_rank) with n_slots activation slots on a
// backend of traits `bt`: the sums (mem_specs_totals, saturating) of
// model_buffers, zero_buffers and optim_buffers, byte for byte what that rank's model, ZeRO
// layer and optimizer carve. `pt` and `zl` are that rank's parameter table and ZeRO layout.
void config_rank_memory_of(const run_config *cfg, const param_table *pt, const zero_layout *zl,
                           int tp_rank, int pp_rank, int dp_rank, int n_slots, backend_traits bt,
                           uint64_t mem[MEM_KIND_COUNT]);
// The same, building (and freeing) the rank's table and layout. The table must be within
// the size rules (config_size_problem), which bound its entries.
void config_rank_memory(const run_config *cfg, int tp_rank, int pp_rank, int dp_rank, int n_slots,
                        backend_traits bt, uint64_t mem[MEM_KIND_COUNT]);
