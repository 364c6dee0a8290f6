// comm_gpus.h: do ranks of the job share a GPU? NCCL refuses a communicator in which two
// ranks use one device, so system.comm: auto must see it before choosing NCCL, and choose
// MPI staged through host memory instead (comm_select.c).
//
// Every rank publishes what it knows of its GPU (comm_gpu_of_rank) through the launcher's
// key-value store (launch_all_gather: PMIx, before any communicator exists), and every rank
// decides from the same table with the same pure function (comm_gpus_shared), so all ranks
// choose the same comm backend.
#pragma once
#include "comm/launch.h"

#define COMM_GPU_ID_LEN 32 // a PCI bus id ("0000:19:00.0") with its terminating zero

// One rank's GPU, as that rank sees it.
typedef struct {
    char host[64];                // the node: launch_info.host
    char bus_id[COMM_GPU_ID_LEN]; // PCI bus id of its device; "" when unknown
    int local_size;               // ranks started on the node (launch_info.local_size)
    int devices;                  // CUDA devices visible to it (0: unknown)
} comm_gpu_of_rank;

typedef struct {
    int shared;         // 1: some GPU is (or must be) used by two ranks
    int rank_a, rank_b; // the first two world ranks found on one GPU; rank_b -1 when the
                        // count alone says so (more ranks on a node than devices they see)
    char why[256];      // "ranks 0 and 1 both use GPU 0000:19:00.0 on host n1", or
                        // "4 ranks on host n1 see 2 GPUs"; "" when not shared
} comm_gpu_sharing;

// Pure: from the table of all `n` ranks' GPUs (index = world rank), whether any GPU serves
// two ranks: two ranks of one host with the same non-empty bus id, or a host whose ranks
// outnumber the devices one of them sees (each rank takes local_rank % devices, so two must
// meet). Ranks of different hosts never share. The same table gives the same answer on
// every rank.
comm_gpu_sharing comm_gpus_shared(const comm_gpu_of_rank *ranks, int n);

// Every rank's entry (`all`: li->world of them, index = world rank) from each rank's
// `mine`: a collective over the world (every rank calls it), through the launcher.
tri_status comm_gpus_gather(launch_info *li, const comm_gpu_of_rank *mine, comm_gpu_of_rank *all);
