// mesh.h: the rank layout of DESIGN.md: rank = tp + TP * (dp + DP * pp), and the groups of
// comm.h as a pure function of it.
#pragma once
#include "base/common.h"
#include "comm/comm.h"

// The sizes of the mesh (each >= 1; their product is the world).
struct mesh {
    int tp, dp, pp;
};

typedef struct {
    int tp, dp, pp;
} mesh_coord;

mesh_coord mesh_coord_of(const mesh *m, int rank);
int mesh_rank_of(const mesh *m, mesh_coord c);

// The group of kind g that world rank `rank` belongs to, as a color: the ranks of one color
// form one group, ordered by world rank, so that a group rank is the mesh coordinate
// (the MPI_Comm_split of comm_mpi.c, the ncclCommSplit of cuda/comm/nccl_init.cu):
//   tp    same (dp, pp), group rank = tp
//   dp    same (tp, pp), group rank = dp
//   pp    same (tp, dp), group rank = pp
//   embed the first and the last pipeline stage with the same (tp, dp): group rank 0 is
//         stage 0, group rank 1 stage pp-1 (this rank alone when pp == 1). -1 for a middle
//         stage, which is in no embedding group (comm.h: a group of size 0)
//   mp    same dp (tp x pp), group rank = tp + TP * pp
//   world every rank, group rank = world rank
int mesh_group_color(const mesh *m, comm_group_id g, int rank);

// Prints the mesh as a small table: one row per pipeline stage and dp replica, the world
// ranks of its tp group, and the layers each stage holds (n_layer layers in pp *
// virtual_stages chunks, DESIGN.md "Rank layout"; vplace: zbv's V placement).
void mesh_print(const mesh *m, int n_layer, int virtual_stages, int vplace, FILE *f);
