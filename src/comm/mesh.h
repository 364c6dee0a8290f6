// mesh.h: the rank layout of DESIGN.md: rank = tp + TP * (dp + DP * pp).
#pragma once
#include "base/common.h"
#include "config/config.h"

typedef struct { int tp, dp, pp; } mesh_coord;

mesh_coord mesh_coord_of(const run_config *cfg, int rank);
int mesh_rank_of(const run_config *cfg, mesh_coord c);

// Prints the mesh of a resolved config as a small table: one row per pipeline stage and
// dp replica, the world ranks of its tp group, and the layers each stage holds.
void mesh_print(const run_config *cfg, FILE *f);
