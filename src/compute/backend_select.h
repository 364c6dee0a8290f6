// backend_select.h: which compute backend a run gets (system.backend: auto | cpu | cuda).
#pragma once
#include "compute/backend.h"

// auto: the CUDA backend when this process sees a CUDA device (cuda_device_count() > 0),
// else the CPU backend with `threads` threads; cpu: the CPU backend; cuda: the CUDA backend,
// or TRI_ERR_CONFIG with a message naming system.backend when there is no device or the
// build has no CUDA. On the CUDA path the local rank picks the device (cuda_device_select:
// local_rank % device count), which becomes current for the calling thread.
tri_status backend_create_for(backend_kind kind, int local_rank, int threads, backend **out);
