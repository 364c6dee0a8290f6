// sched.c: GPipe and 1F1B schedule tables.
#include "sched.h"

#include <string.h>

typedef struct {
    sched_table *st;
    int cap, pp, rank, in_flight;
} builder;

static void push(builder *b, sched_action_kind kind, int micro) {
    if (b->st->n_actions == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        sched_action *grown = xmalloc((size_t)b->cap * sizeof *grown);
        if (b->st->n_actions) memcpy(grown, b->st->actions, (size_t)b->st->n_actions * sizeof *grown);
        free(b->st->actions);
        b->st->actions = grown;
    }
    b->st->actions[b->st->n_actions++] = (sched_action){kind, micro, 0};
}

// One forward of a micro-batch with its receive and send; counts activations held.
static void forward(builder *b, int micro) {
    if (b->rank > 0) push(b, SCHED_ACTION_RECV_ACT, micro);
    push(b, SCHED_ACTION_FWD, micro);
    if (b->rank < b->pp - 1) push(b, SCHED_ACTION_SEND_ACT, micro);
    if (++b->in_flight > b->st->max_in_flight) b->st->max_in_flight = b->in_flight;
}

static void backward(builder *b, int micro) {
    if (b->rank < b->pp - 1) push(b, SCHED_ACTION_RECV_GRAD, micro);
    push(b, SCHED_ACTION_BWD, micro);
    if (b->rank > 0) push(b, SCHED_ACTION_SEND_GRAD, micro);
    b->in_flight--;
}

tri_status sched_build(sched_table *st, schedule_kind schedule, int pp, int virtual_stages,
                       int m, int rank) {
    memset(st, 0, sizeof *st);
    if (virtual_stages != 1 || schedule == SCHEDULE_INTERLEAVED) {
        LOG_ERROR("parallel.schedule: interleaved schedules need parallel.pp >= 2 and a "
                  "multi-process run; use gpipe or 1f1b");
        return TRI_ERR_CONFIG;
    }
    TRI_ASSERT(pp >= 1 && rank >= 0 && rank < pp && m >= 1);
    builder b = {.st = st, .pp = pp, .rank = rank};
    if (schedule == SCHEDULE_GPIPE) {
        // All forwards, then all backwards: every micro-batch's activations are held.
        for (int i = 0; i < m; i++) forward(&b, i);
        for (int i = 0; i < m; i++) backward(&b, i);
        return TRI_OK;
    }
    // 1F1B: pp - rank - 1 warm-up forwards, then one forward and one backward in turn, then
    // the remaining backwards. At most pp - rank micro-batches are held at once.
    int warmup = pp - rank - 1 < m ? pp - rank - 1 : m;
    for (int i = 0; i < warmup; i++) forward(&b, i);
    for (int i = 0; i < m - warmup; i++) {
        forward(&b, warmup + i);
        backward(&b, i);
    }
    for (int i = m - warmup; i < m; i++) backward(&b, i);
    return TRI_OK;
}

void sched_free(sched_table *st) {
    free(st->actions);
    memset(st, 0, sizeof *st);
}

const char *sched_action_name(sched_action_kind k) {
    static const char *names[] = {"recv_act", "fwd", "send_act", "recv_grad", "bwd", "send_grad"};
    return names[k];
}
