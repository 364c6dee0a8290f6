// comm_mpi.h: the MPI comm backend (host memory), the CPU path's implementation of
// comm_backend.h. Callers get it from comm_create_for (comm.h).
#pragma once
#include "comm/comm.h"
#include "comm/launch.h"
#include "comm/mesh.h"

// Creates the communicators of mesh m (tp * dp * pp == li->world), one per group, split by
// mesh_group_color (mesh.h): group ranks are the mesh coordinates; a middle pipeline stage
// is in no embedding group (size 0, rank -1). MPI is initialised here
// (MPI_THREAD_FUNNELED) only when the world has more than one rank, after launch_init;
// comm_destroy finalises it, before launch_finalize. One MPI comm per process: MPI cannot be
// initialised again after it was finalised.
// timeout_s <= 0 waits forever. A wait that passes timeout_s prints one line naming the
// group, the collective, the bytes, comm->step and the ranks waited for, waits (a few
// seconds at most) for the flight recorder's verdict (comm/flight.h: flight_stall), then
// aborts the job with exit code 5 (TRI_ERR_COMM) on every process.
tri_status comm_mpi_create(comm **out, const mesh *m, const launch_info *li, double timeout_s);
