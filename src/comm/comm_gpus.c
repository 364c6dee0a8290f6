// comm_gpus.c: see comm_gpus.h.
#include "comm/comm_gpus.h"

#include <string.h>

// Two entries name the same node: host names compared in full (a truncated name compares
// by its first 63 characters, as gethostname left it).
static int same_host(const comm_gpu_of_rank *a, const comm_gpu_of_rank *b) {
    return strncmp(a->host, b->host, sizeof a->host) == 0;
}

comm_gpu_sharing comm_gpus_shared(const comm_gpu_of_rank *ranks, int n) {
    comm_gpu_sharing s;
    memset(&s, 0, sizeof s);
    s.rank_a = s.rank_b = -1;
    // Equal bus ids on one host first: they name the GPU in the message.
    for (int i = 0; i < n; i++) {
        if (!ranks[i].bus_id[0]) continue;
        for (int j = i + 1; j < n; j++) {
            if (!same_host(&ranks[i], &ranks[j]) ||
                strncmp(ranks[i].bus_id, ranks[j].bus_id, COMM_GPU_ID_LEN) != 0)
                continue;
            s.shared = 1, s.rank_a = i, s.rank_b = j;
            snprintf(s.why, sizeof s.why, "ranks %d and %d both use GPU %.*s on host %.*s", i, j,
                     COMM_GPU_ID_LEN - 1, ranks[i].bus_id, (int)sizeof ranks[i].host - 1,
                     ranks[i].host);
            return s;
        }
    }
    // Then the count: more ranks started on a node than devices a rank there sees.
    for (int i = 0; i < n; i++) {
        if (ranks[i].devices <= 0 || ranks[i].local_size <= ranks[i].devices) continue;
        s.shared = 1, s.rank_a = i;
        snprintf(s.why, sizeof s.why, "%d ranks on host %.*s see %d GPU%s", ranks[i].local_size,
                 (int)sizeof ranks[i].host - 1, ranks[i].host, ranks[i].devices,
                 ranks[i].devices == 1 ? "" : "s");
        return s;
    }
    return s;
}

tri_status comm_gpus_gather(launch_info *li, const comm_gpu_of_rank *mine, comm_gpu_of_rank *all) {
    comm_gpu_of_rank entry = *mine; // terminated, whatever the caller left past the zero
    entry.host[sizeof entry.host - 1] = '\0';
    entry.bus_id[COMM_GPU_ID_LEN - 1] = '\0';
    TRI_CHECK(launch_all_gather(li, "trident.gpu", &entry, sizeof entry, all));
    for (int r = 0; r < li->world; r++) { // what came from elsewhere, terminated too
        all[r].host[sizeof all[r].host - 1] = '\0';
        all[r].bus_id[COMM_GPU_ID_LEN - 1] = '\0';
    }
    return TRI_OK;
}
