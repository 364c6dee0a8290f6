// multi_tensor.c: the prefix tables of the multi-tensor optimizer launches (multi_tensor.h).
#include "compute/multi_tensor.h"

tri_status mt_prefix_build(uint32_t *start, const mt_tensor *tensors, int count, int norm,
                           uint32_t *total) {
    uint64_t sum = 0;
    for (int i = 0; i < count; i++) {
        start[i] = (uint32_t)sum;
        if (!norm || tensors[i].in_norm) sum += mt_blocks_of(tensors[i].n);
        if (sum > UINT32_MAX) {
            LOG_ERROR("multi-tensor optimizer table: more than %u blocks of %u elements on this "
                      "rank",
                      UINT32_MAX, MT_SPAN);
            return TRI_ERR_INTERNAL;
        }
    }
    start[count] = (uint32_t)sum;
    *total = (uint32_t)sum;
    return TRI_OK;
}
