// launch.h: process bootstrap through PMIx (DESIGN.md "Launch").
//
// Under `srun --mpi=pmix` and OpenMPI's `mpirun`, PMIx gives rank, world size, local rank
// and local size. A process started alone (PMIx answers "unreachable") is a world of one.
// The key-value exchange carries the NCCL unique ids on the GPU path.
#pragma once
#include "base/common.h"

typedef struct {
    int rank, world;
    int local_rank, local_size; // among the processes of this node
    int singleton;              // started alone: no PMIx server
    char launcher[32];          // "pmix" or "singleton"
    char host[64];
    void *impl; // PMIx state (pmix_proc_t), NULL for a singleton
} launch_info;

// Never fails for a singleton; TRI_ERR_COMM when a PMIx server exists but answers badly.
tri_status launch_init(launch_info *li);

// Rank `root` publishes `bytes` of `value` under `key`; after a fence every rank reads it
// into `value`. A collective over the world: every rank must call it with the same key.
tri_status launch_exchange(launch_info *li, const char *key, int root, void *value, size_t bytes);

// Every rank publishes `bytes` of `mine` under `key`; after a fence each rank reads every
// rank's value into all[rank * bytes] (its own copied). A collective over the world: every
// rank calls it with the same key and size, once per key. A world of one copies `mine`.
tri_status launch_all_gather(launch_info *li, const char *key, const void *mine, size_t bytes,
                             void *all);

// Barrier over the world through PMIx (no data).
tri_status launch_fence(launch_info *li);

void launch_finalize(launch_info *li);
