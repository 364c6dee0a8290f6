// comm_mpi.h: the MPI comm backend (host memory), the CPU path's implementation of comm.h.
#pragma once
#include "comm/comm.h"
#include "config/config.h"
#include "comm/launch.h"

// Creates the communicators of the mesh of a resolved `cfg` (tp * dp * pp == li->world):
//   tp    ranks with the same (dp, pp), group rank = tp coordinate
//   dp    ranks with the same (tp, pp), group rank = dp coordinate
//   pp    ranks with the same (tp, dp), group rank = pp coordinate
//   embed the first and the last pipeline stage with the same (tp, dp): group rank 0 is
//         stage 0, group rank 1 stage pp-1. With pp == 1 it is this rank alone (size 1).
//         Ranks of the middle stages are in no embedding group: for them the group has
//         size 0 and rank -1 (as in the NCCL backend), and any call on it fails with
//         TRI_ERR_INTERNAL, since only the first and last stage hold the tied embedding.
//   mp    tp x pp: ranks with the same dp, group rank = tp + tp_size * pp (world order)
//   world every rank, group rank = world rank
// MPI is initialised here (MPI_THREAD_FUNNELED) only when the world has more than one rank,
// after launch_init; comm->destroy finalises it, before launch_finalize. One MPI comm per
// process: MPI cannot be initialised again after it was finalised.
// timeout_s <= 0 waits forever. A wait that passes timeout_s prints one line naming the
// group, the collective, the bytes, comm->step and the ranks waited for, then aborts the
// job with exit code 5 (TRI_ERR_COMM) on every process.
tri_status comm_mpi_create(comm **out, const run_config *cfg, const launch_info *li,
                           double timeout_s);

// The group of kind g that world rank `rank` belongs to, as a color: the ranks of one color
// form one group, ordered by world rank (the MPI_Comm_split of comm_mpi_create). -1 when
// the rank is in no group of that kind (the embedding group of a middle pipeline stage).
// A pure function of the mesh; exposed for tests/test_mesh.c.
int comm_mpi_group_color(const run_config *cfg, comm_group_id g, int rank);
